// cuBLASLt, loaded when the CUDA backend first calls it instead of when a program starts. Linked,
// its 540 MB library cost every process (each rank, each unit test, --device cpu too) ~0.5 s of
// CPU and ~200 MiB resident for relocations at start-up (a unit test: 0.50 CPU-s and 229 MiB
// linked, 0.04 CPU-s and 24 MiB without, AMD EPYC Zen 5). So the program defines the entry points
// the backend calls, declared by cublasLt.h (which checks their signatures): each forwards to the
// library's.
#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "mpitrain/runtime/error.hpp"

namespace {

// libcublasLt.so.<major of the headers built against>, found as the linked libraries are (the
// program's run path, LD_LIBRARY_PATH); opened once and kept for the process: its handles and
// kernels may live until exit.
void* cublaslt_library() {
  static void* const library = [] {
    const std::string name = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    void* opened = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (opened == nullptr) {
      const char* why = dlerror();
      MPITRAIN_THROW("cannot load cuBLASLt: " + (why ? std::string(why) : name));
    }
    return opened;
  }();
  return library;
}

// The library's definition of one entry point, by name.
template <typename Function>
Function* cublaslt_entry(const char* name) {
  void* entry = dlsym(cublaslt_library(), name);
  if (entry == nullptr) {
    const char* why = dlerror();
    MPITRAIN_THROW("cuBLASLt has no " + std::string(name) + (why ? ": " + std::string(why) : ""));
  }
  return reinterpret_cast<Function*>(entry);
}

}  // namespace

// Each: the library's function, resolved on the first call (then constant), called with the args.
#define MPITRAIN_CUBLASLT(name, ...) \
  static auto* const library_##name = cublaslt_entry<decltype(name)>(#name); \
  return library_##name(__VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* handle) {
  MPITRAIN_CUBLASLT(cublasLtCreate, handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
  MPITRAIN_CUBLASLT(cublasLtDestroy, handle);
}

const char* CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
  MPITRAIN_CUBLASLT(cublasLtGetStatusName, status);
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  MPITRAIN_CUBLASLT(cublasLtGetStatusString, status);
}

size_t CUBLASWINAPI cublasLtGetVersion(void) { MPITRAIN_CUBLASLT(cublasLtGetVersion); }

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void* alpha, const void* a,
                                           cublasLtMatrixLayout_t a_desc, const void* b,
                                           cublasLtMatrixLayout_t b_desc, const void* beta,
                                           const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                                           cublasLtMatrixLayout_t d_desc,
                                           const cublasLtMatmulAlgo_t* algo, void* workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
  MPITRAIN_CUBLASLT(cublasLtMatmul, handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d,
                    d_desc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t preference, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  MPITRAIN_CUBLASLT(cublasLtMatmulAlgoGetHeuristic, handle, desc, a_desc, b_desc, c_desc, d_desc,
                    preference, requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
  MPITRAIN_CUBLASLT(cublasLtMatmulDescCreate, desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  MPITRAIN_CUBLASLT(cublasLtMatmulDescDestroy, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t bytes) {
  MPITRAIN_CUBLASLT(cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  MPITRAIN_CUBLASLT(cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  MPITRAIN_CUBLASLT(cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t bytes) {
  MPITRAIN_CUBLASLT(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  MPITRAIN_CUBLASLT(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  MPITRAIN_CUBLASLT(cublasLtMatrixLayoutDestroy, layout);
}

}  // extern "C"
