#include "mpitrain/backend/cuda/versions.hpp"

#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <cudnn_version.h>
#ifdef MPITRAIN_HAVE_NCCL
#include <nccl.h>
#endif

#include "mpitrain/backend/cuda/check.hpp"

namespace mpitrain::cuda {

namespace {

// CUDA's 13000 as "13.0".
std::string cuda_text(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// cuDNN 9's 91900 and NCCL's 22803 (major * 10000 + minor * 100 + patch) as "9.19.0".
std::string dotted(long long v) {
  return std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
         std::to_string(v % 100);
}

}  // namespace

LibraryVersions library_versions() {
  LibraryVersions v;
  int runtime = 0, driver = 0;
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  // No driver installed: the call succeeds with 0.
  const bool has_driver = cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0;
  cudaGetLastError();
  v.cuda = "runtime " + cuda_text(runtime) + " (built with " + cuda_text(CUDART_VERSION) + "), " +
           (has_driver ? "driver " + cuda_text(driver) : std::string("no driver"));
  v.cudnn = dotted(static_cast<long long>(cudnnGetVersion())) + " (built with " +
            dotted(CUDNN_VERSION) + ")";
#ifdef MPITRAIN_HAVE_NCCL
  int nccl = 0;
  const ncclResult_t status = ncclGetVersion(&nccl);
  v.nccl = (status == ncclSuccess ? dotted(nccl) : std::string(ncclGetErrorString(status))) +
           " (built with " + dotted(NCCL_VERSION_CODE) + ")";
#else
  v.nccl = "off (not found when this build was configured: set NCCL_ROOT)";
#endif
  return v;
}

}  // namespace mpitrain::cuda
