#include "mpitrain/app/build_info.hpp"

#include <cblas.h>
#include <hdf5.h>
#include <mpi.h>
#include <oneapi/dnnl/dnnl.h>

#include "mpitrain/backend/blas_kernel.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/runtime/build_id.hpp"
#ifdef MPITRAIN_HAVE_CUDA
#include "mpitrain/backend/cuda/versions.hpp"
#endif

namespace mpitrain {

namespace {

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string row(const char* name, const std::string& value) {
  std::string padded = std::string("  ") + name;
  padded.resize(13, ' ');
  return padded + value + "\n";
}

std::string mpi_library() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS)
    return "(MPI_Get_library_version failed)";
  int major = 0, minor = 0;
  MPI_Get_version(&major, &minor);
  return first_line(text) + " (MPI " + std::to_string(major) + "." + std::to_string(minor) + ")";
}

std::string hdf5_library() {
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) return "(H5get_libversion failed)";
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release) +
         " (built with " + std::to_string(H5_VERS_MAJOR) + "." + std::to_string(H5_VERS_MINOR) +
         "." + std::to_string(H5_VERS_RELEASE) + ", " +
#ifdef H5_HAVE_PARALLEL
         "parallel)";
#else
         "serial)";
#endif
}

std::string onednn_library() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + " (" + v->hash + "); fp32 GEMMs: " + cpu_sgemm_library() +
         ", as " + cpu_sgemm_reason();
}

}  // namespace

std::string build_info(const std::string& program) {
  std::string text = program + " " + build_id() + "\n";
#if defined(__clang__)
  text +=
      row("compiler", "Clang " __clang_version__ ", C++" + std::to_string(__cplusplus / 100 % 100));
#elif defined(__GNUC__)
  text += row("compiler", "GCC " __VERSION__ ", C++" + std::to_string(__cplusplus / 100 % 100));
#endif
#ifdef MPITRAIN_HAVE_CUDA
  const cuda::LibraryVersions gpu = cuda::library_versions();
  text += row("CUDA", "on: " + gpu.cuda);
  text += row("cuDNN", gpu.cudnn);
  text += row("NCCL", gpu.nccl);
#else
  const std::string off = "off (this build has no CUDA backend: configure with -DMPITRAIN_CUDA=ON)";
  text += row("CUDA", off);
  text += row("cuDNN", off);
  text += row("NCCL", off);
#endif
  text += row("MPI", mpi_library());
  text += row("HDF5", hdf5_library());
  text += row("BLAS", first_line(openblas_get_config()) + "; kernels: " + describe(blas_kernel()));
  text += row("oneDNN", onednn_library());
  return text;
}

}  // namespace mpitrain
