// The state behind CudaBackend: device, stream, library handles, the memory arenas, the
// workspace for per-op scratch, and the caches of cuBLASLt and cuDNN plans.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "lt_gemm.hpp"
#include "mpitrain/backend/cuda/arena.hpp"
#include "mpitrain/backend/cuda/cudnn_ops.hpp"
#include "mpitrain/backend/cuda_backend.hpp"

namespace mpitrain::cuda {

// The backend's scratch: one region of the workspace arena used as a stack, a frame per op.
// Work queued on the one stream reads a piece before the next op can reuse it (stream order).
class Scratch {
 public:
  void init(char* base, size_t bytes) {
    base_ = base;
    size_ = bytes;
  }
  size_t capacity() const { return size_; }
  size_t high_water() const { return high_; }

  class Frame {
   public:
    explicit Frame(Scratch& s) : s_(s), mark_(s.top_) {}
    ~Frame() { s_.top_ = mark_; }
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;
    void* bytes(size_t n, const char* what);  // 256-byte aligned; throws Error when it does not fit
    template <class U>
    U* take(size_t n, const char* what) {
      return static_cast<U*>(bytes(n * sizeof(U), what));
    }
    size_t available() const { return s_.size_ - s_.top_; }

   private:
    Scratch& s_;
    size_t mark_;
  };

 private:
  char* base_ = nullptr;
  size_t size_ = 0, top_ = 0, high_ = 0;
};

// cuDNN plans by shape; a shape cuDNN has no engine for is remembered (and reported once).
class CudnnOps {
 public:
  // report: called once per graph cuDNN cannot run, with the reason.
  CudnnOps(cudnnHandle_t handle, cudaStream_t stream,
           std::function<void(const std::string&)> report)
      : handle_(handle), stream_(stream), report_(std::move(report)) {}
  // Each returns false when cuDNN has no engine for the shape: the caller runs its kernel.
  // qkv16 / o16 / do16 / dqkv16: bf16 or fp16 (s.io) tensors or copies in the packed layouts;
  // scale: the factor on q k^T (a by-value scalar of the graph, not part of the plan's key).
  bool sdpa_forward(const SdpaShape& s, float scale, void* o16, float* stats, const void* qkv16,
                    Scratch& ws);
  bool sdpa_backward(const SdpaShape& s, float scale, void* dqkv16, const void* qkv16,
                     const void* o16, const void* do16, const float* stats, Scratch& ws);
  // out, inp, w, b, dout in the io type; dx (fp32), dw, db written (not accumulated) — the
  // caller adds them.
  bool norm_forward(bool layer, int N, int C, Precision io, void* out, float* mean, float* rstd,
                    const void* inp, const void* w, const void* b, float eps, Scratch& ws);
  bool norm_backward(bool layer, int N, int C, Precision io, float* dx, float* dw, float* db,
                     const void* dout, const void* inp, const void* w, const float* mean,
                     const float* rstd, Scratch& ws);

 private:
  struct Entry {
    std::unique_ptr<dnn::Graph> graph;
    std::unique_ptr<dnn::Plan> plan;  // null: no engine
  };
  // Builds (once) and returns the plan for a graph, or null when cuDNN has none.
  template <class Build>
  const dnn::Plan* plan_for(const std::string& key, Build&& build,
                            const std::vector<cudnnBackendHeurMode_t>& modes);
  cudnnHandle_t handle_;
  cudaStream_t stream_;
  std::function<void(const std::string&)> report_;
  std::map<std::string, Entry> cache_;
};

struct Context {
  explicit Context(const CudaOptions& options);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Says once on stderr (and keeps) that an op used its CUDA kernel instead of a library.
  void report_fallback(const std::string& message);
  double read_double(const double* device_value);  // waits for the stream

  CudaOptions options;
  std::string device_text;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudnnHandle_t dnn = nullptr;  // kernels == cudnn only
  DeviceMemory memory;
  MemoryKind alloc_kind = MemoryKind::Activations;
  Scratch scratch;
  std::unique_ptr<LtGemm> gemm;
  std::unique_ptr<CudnnOps> cudnn;
  std::set<std::string> reported;
};

}  // namespace mpitrain::cuda
