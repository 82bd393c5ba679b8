// CUDA backend: construction, memory, and the ops that map one-to-one onto a kernel or a cuDNN
// graph (embeddings, norms, pointwise, RoPE, cross-entropy, optimizer). Matmul and attention,
// which also convert precisions, are in cuda_matmul.cpp and cuda_attention.cpp.
#include "mpitrain/backend/cuda_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "context.hpp"
#include "kernels.hpp"
#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda/device.hpp"

namespace mpitrain {

using cuda::MemoryKind;
using cuda::Scratch;

// ---- names ------------------------------------------------------------------------------------

KernelSet parse_kernel_set(const std::string& name) {
  if (name == "cudnn") return KernelSet::Cudnn;
  if (name == "cuda") return KernelSet::Cuda;
  throw UsageError("kernels '" + name + "' is not one of cudnn, cuda");
}

std::string to_string(KernelSet k) { return k == KernelSet::Cudnn ? "cudnn" : "cuda"; }

GemmMath parse_gemm_math(const std::string& name) {
  if (name == "fp32") return GemmMath::Fp32;
  if (name == "tf32") return GemmMath::Tf32;
  if (name == "bf16") return GemmMath::Bf16;
  if (name == "fp16") return GemmMath::Fp16;
  throw UsageError("GEMM math '" + name + "' is not one of fp32, tf32, bf16, fp16");
}

std::string to_string(GemmMath m) {
  switch (m) {
    case GemmMath::Fp32:
      return "fp32";
    case GemmMath::Tf32:
      return "tf32";
    case GemmMath::Bf16:
      return "bf16";
    case GemmMath::Fp16:
      return "fp16";
  }
  return "?";
}

// ---- context ----------------------------------------------------------------------------------

namespace cuda {

namespace {
constexpr size_t kLtWorkspace = size_t{32} << 20;  // cuBLASLt's recommendation for Hopper
}

void* Scratch::Frame::bytes(size_t n, const char* what) {
  const size_t start =
      (s_.top_ + DeviceArena::kAlign - 1) / DeviceArena::kAlign * DeviceArena::kAlign;
  if (start + n > s_.size_) {
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "CUDA workspace too small for %s: %.1f MiB needed beyond %.1f MiB in use, "
                  "%.1f MiB in all (raise the workspace size)",
                  what, n / 1048576.0, start / 1048576.0, s_.size_ / 1048576.0);
    MPITRAIN_THROW(msg);
  }
  s_.top_ = start + n;
  s_.high_ = std::max(s_.high_, s_.top_);
  return s_.base_ + start;
}

Context::Context(const CudaOptions& opts) : options(opts) {
  const DeviceProbe probe = probe_devices();
  if (probe.count == 0) throw Error(probe.reason);
  if (opts.device < 0 || opts.device >= probe.count)
    throw UsageError("CUDA device " + std::to_string(opts.device) + " does not exist (" +
                     std::to_string(probe.count) + " visible)");
  CUDA_CHECK(cudaSetDevice(opts.device));
  device_text = describe_device(opts.device);
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasLtCreate(&lt));
  if (opts.kernels == KernelSet::Cudnn) {
    CUDNN_CHECK(cudnnCreate(&dnn));
    CUDNN_CHECK(cudnnSetStream(dnn, stream));
    cudnn = std::make_unique<CudnnOps>(dnn, stream,
                                       [this](const std::string& m) { report_fallback(m); });
  }
  DeviceArena& ws = memory.arena(MemoryKind::Workspace);
  ws.reserve(kLtWorkspace + opts.workspace_bytes + DeviceArena::kAlign);
  void* lt_ws = ws.take(kLtWorkspace);
  scratch.init(static_cast<char*>(ws.take(opts.workspace_bytes)), opts.workspace_bytes);
  gemm = std::make_unique<LtGemm>(lt, lt_ws, kLtWorkspace);
}

Context::~Context() {
  cudaStreamSynchronize(stream);  // nothing may still use what is freed below
  gemm.reset();
  cudnn.reset();
  if (dnn != nullptr) cudnnDestroy(dnn);
  if (lt != nullptr) cublasLtDestroy(lt);
  if (stream != nullptr) cudaStreamDestroy(stream);
}

void Context::report_fallback(const std::string& message) {
  if (reported.insert(message).second) std::fprintf(stderr, "mpitrain: %s\n", message.c_str());
}

double Context::read_double(const double* device_value) {
  double v = 0.0;
  CUDA_CHECK(cudaMemcpyAsync(&v, device_value, sizeof v, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

}  // namespace cuda

// ---- construction and memory ------------------------------------------------------------------

template <typename T>
CudaBackend<T>::CudaBackend(const CudaOptions& options)
    : ctx_(std::make_unique<cuda::Context>(options)) {
  static_assert(std::is_same_v<T, float>, "the CUDA backend computes in float");
}

template <typename T>
CudaBackend<T>::~CudaBackend() = default;

template <typename T>
const CudaOptions& CudaBackend<T>::options() const {
  return ctx_->options;
}

template <typename T>
std::string CudaBackend<T>::describe() const {
  return ctx_->device_text + "; kernels " + to_string(ctx_->options.kernels) + ", GEMM math " +
         to_string(ctx_->options.math);
}

template <typename T>
std::vector<std::string> CudaBackend<T>::fallbacks() const {
  return {ctx_->reported.begin(), ctx_->reported.end()};
}

template <typename T>
void CudaBackend<T>::set_alloc_kind(MemoryKind kind) {
  ctx_->alloc_kind = kind;
}

template <typename T>
void CudaBackend<T>::set_alloc_kind(AllocKind kind) {
  switch (kind) {
    case AllocKind::Params: return set_alloc_kind(MemoryKind::Params);
    case AllocKind::Grads: return set_alloc_kind(MemoryKind::Grads);
    case AllocKind::Optimizer: return set_alloc_kind(MemoryKind::Optimizer);
    case AllocKind::Activations: return set_alloc_kind(MemoryKind::Activations);
  }
}

template <typename T>
void* CudaBackend<T>::alloc_bytes(MemoryKind kind, size_t bytes) {
  void* p = ctx_->memory.arena(kind).take(bytes);
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, ctx_->stream));
  return p;
}

template <typename T>
T* CudaBackend<T>::alloc(MemoryKind kind, size_t n) {
  return static_cast<T*>(alloc_bytes(kind, n * sizeof(T)));
}

template <typename T>
T* CudaBackend<T>::alloc(size_t n) {
  return alloc(ctx_->alloc_kind, n);
}

template <typename T>
Buf<T> CudaBackend<T>::alloc(size_t n, Precision dtype) {
  if (!stores(dtype))
    throw Error("CUDA backend: no " + to_string(dtype) + " storage under GEMM math " +
                to_string(ctx_->options.math));
  return {alloc_bytes(ctx_->alloc_kind, n * element_bytes<T>(dtype)), dtype};
}

template <typename T>
bool CudaBackend<T>::stores(Precision dtype) const {
  const GemmMath m = ctx_->options.math;
  return dtype == Precision::Fp32 || (dtype == Precision::Bf16 && m == GemmMath::Bf16) ||
         (dtype == Precision::Fp16 && m == GemmMath::Fp16);
}

template <typename T>
void CudaBackend<T>::free_bytes(void* p) {
  if (p == nullptr) return;
  for (int k = 0; k < cuda::kMemoryKinds; ++k) {
    cuda::DeviceArena& a = ctx_->memory.arena(static_cast<MemoryKind>(k));
    if (a.owns(p)) return a.give(p);
  }
  MPITRAIN_THROW("free: pointer is not CUDA backend memory");
}

template <typename T>
void CudaBackend<T>::free(void* p) {
  free_bytes(p);
}

template <typename T>
void CudaBackend<T>::seal_memory() {
  ctx_->memory.seal();
}

template <typename T>
std::string CudaBackend<T>::memory_report() const {
  char line[160];
  std::snprintf(line, sizeof line, "\n  workspace scratch: %.1f MiB, high water %.1f MiB",
                ctx_->scratch.capacity() / 1048576.0, ctx_->scratch.high_water() / 1048576.0);
  return ctx_->memory.report() + line;
}

template <typename T>
void CudaBackend<T>::to_device(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_->stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream));
}

template <typename T>
void CudaBackend<T>::to_host(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx_->stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream));
}

namespace {
// Host-side pieces of a 2-byte upload / download: bounded host memory, no fp32 device copy.
constexpr size_t kHostPiece = size_t{1} << 20;  // elements
}  // namespace

template <typename T>
void CudaBackend<T>::upload(Buf<T> dst, const T* host_src, size_t n) {
  if (dst.dtype() == Precision::Fp32) return to_device(dst.full(), host_src, n * sizeof(T));
  std::vector<uint16_t> bits(std::min(n, kHostPiece));
  for (size_t i0 = 0; i0 < n; i0 += kHostPiece) {
    const size_t m = std::min(kHostPiece, n - i0);
    for (size_t i = 0; i < m; ++i) bits[i] = to_half_bits(host_src[i0 + i], dst.dtype());
    to_device(dst.half() + i0, bits.data(), m * 2);
  }
}

template <typename T>
void CudaBackend<T>::download(T* host_dst, CBuf<T> src, size_t n) {
  if (src.dtype() == Precision::Fp32) return to_host(host_dst, src.full(), n * sizeof(T));
  std::vector<uint16_t> bits(std::min(n, kHostPiece));
  for (size_t i0 = 0; i0 < n; i0 += kHostPiece) {
    const size_t m = std::min(kHostPiece, n - i0);
    to_host(bits.data(), src.half() + i0, m * 2);
    for (size_t i = 0; i < m; ++i) host_dst[i0 + i] = from_half_bits(bits[i], src.dtype());
  }
}

template <typename T>
T* CudaBackend<T>::alloc_host(size_t n) {
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, std::max<size_t>(n, 1) * sizeof(T)));
  std::memset(p, 0, n * sizeof(T));
  return static_cast<T*>(p);
}

template <typename T>
void CudaBackend<T>::free_host(T* p) {
  cudaFreeHost(p);  // a destructor's: its error has nowhere to go
}

template <typename T>
int32_t* CudaBackend<T>::alloc_ids(size_t n) {
  return static_cast<int32_t*>(alloc_bytes(MemoryKind::Activations, n * sizeof(int32_t)));
}

template <typename T>
void CudaBackend<T>::free_ids(int32_t* p) {
  free_bytes(p);
}

template <typename T>
void CudaBackend<T>::upload_ids(int32_t* dst, const int32_t* host_src, size_t n) {
  to_device(dst, host_src, n * sizeof(int32_t));
}

template <typename T>
void CudaBackend<T>::synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(ctx_->stream));
}

template <typename T>
void* CudaBackend<T>::stream() const {
  return ctx_->stream;
}

template <typename T>
void CudaBackend<T>::zero(Buf<T> x, size_t n) {
  if (n > 0) CUDA_CHECK(cudaMemsetAsync(x.data(), 0, n * x.element_size(), ctx_->stream));
}

template <typename T>
void CudaBackend<T>::copy(Buf<T> dst, CBuf<T> src, size_t n) {
  if (dst.dtype() != src.dtype())
    MPITRAIN_THROW("copy: " + to_string(src.dtype()) + " into " + to_string(dst.dtype()) +
                   " (convert changes types)");
  if (n > 0)
    CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), n * dst.element_size(),
                               cudaMemcpyDeviceToDevice, ctx_->stream));
}

template <typename T>
void CudaBackend<T>::convert(Buf<T> dst, CBuf<T> src, size_t n) {
  if (dst.dtype() == src.dtype()) return copy(dst, src, n);
  cuda::launch_convert(dst, src, 1, n, n, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::round_to(T* x, size_t n, Precision p) {
  cuda::launch_round(x, n, p, ctx_->stream);
}

// ---- embeddings -------------------------------------------------------------------------------

template <typename T>
void CudaBackend<T>::embedding_forward(Buf<T> out, const int32_t* tokens, CBuf<T> wte, CBuf<T> wpe,
                                       int B, int Tlen, int C, int v0, int Vl) {
  cuda::launch_embedding_forward(out, tokens, wte, wpe, B, Tlen, C, v0, Vl, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::embedding_backward(T* dwte, T* dwpe, CBuf<T> dout, const int32_t* tokens,
                                        int B, int Tlen, int C, int v0, int Vl) {
  cuda::launch_embedding_backward_wte(dwte, dout, tokens, B * Tlen, C, v0, Vl, ctx_->stream);
  if (dwpe == nullptr) return;
  // dwpe(T,C) += sum over b of dout[b]: column sums of dout seen as (B, T*C)
  Scratch::Frame frame(ctx_->scratch);
  float* partial = frame.take<float>(cuda::colsum_scratch(B, Tlen * C), "wpe gradient sums");
  cuda::launch_colsum_accumulate(dwpe, dout, B, Tlen * C, partial, ctx_->stream);
}

// ---- norms ------------------------------------------------------------------------------------

namespace {
// cuDNN's norm graphs: one storage type for x, y, dy, dx and the weights (statistics fp32).
bool cudnn_norm(const cuda::Context& c, std::initializer_list<cuda::In> tensors, Precision& io) {
  if (!c.cudnn) return false;
  io = tensors.begin()->dtype();
  for (const cuda::In& t : tensors)
    if (!(t == nullptr) && t.dtype() != io) return false;
  return true;
}
}  // namespace

template <typename T>
void CudaBackend<T>::layernorm_forward(Buf<T> out, T* mean, T* rstd, CBuf<T> inp, CBuf<T> w,
                                       CBuf<T> b, int N, int C, T eps) {
  cuda::Context& c = *ctx_;
  Precision io{};
  if (cudnn_norm(c, {out, inp, w, b}, io) &&
      c.cudnn->norm_forward(true, N, C, io, out.data(), mean, rstd, inp.data(), w.data(), b.data(),
                            eps, c.scratch))
    return;
  cuda::launch_layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps, c.stream);
}

template <typename T>
void CudaBackend<T>::rmsnorm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> w, int N, int C,
                                     T eps) {
  cuda::Context& c = *ctx_;
  Precision io{};
  if (cudnn_norm(c, {out, inp, w}, io) &&
      c.cudnn->norm_forward(false, N, C, io, out.data(), nullptr, rstd, inp.data(), w.data(),
                            nullptr, eps, c.scratch))
    return;
  cuda::launch_rmsnorm_forward(out, rstd, inp, w, N, C, eps, c.stream);
}

namespace {
// Norm backward: cuDNN writes dx, dw, db (fp32), which are then added (the Backend accumulates;
// a 2-byte dinp rounds once); the CUDA kernels accumulate directly.
void norm_backward(cuda::Context& c, bool layer, cuda::Out dinp, float* dw, float* db,
                   cuda::In dout, cuda::In inp, cuda::In w, const float* mean, const float* rstd,
                   int N, int C) {
  const size_t NC = static_cast<size_t>(N) * C;
  Precision io{};
  if (cudnn_norm(c, {dinp, dout, inp, w}, io)) {
    Scratch::Frame frame(c.scratch);
    float* dx = frame.take<float>(NC, "norm input gradient");
    float* dw_t = frame.take<float>(C, "norm weight gradient");
    float* db_t = layer ? frame.take<float>(C, "norm bias gradient") : nullptr;
    if (c.cudnn->norm_backward(layer, N, C, io, dx, dw_t, db_t, dout.data(), inp.data(), w.data(),
                               mean, rstd, c.scratch)) {
      cuda::launch_accumulate(dinp, dx, NC, c.stream);
      cuda::launch_accumulate(dw, dw_t, C, c.stream);
      if (layer) cuda::launch_accumulate(db, db_t, C, c.stream);
      return;
    }
  }
  Scratch::Frame frame(c.scratch);
  float* partial = frame.take<float>(cuda::norm_backward_scratch(N, C), "norm gradient sums");
  cuda::launch_norm_backward(dinp, dw, layer ? db : nullptr, dout, inp, w, layer ? mean : nullptr,
                             rstd, N, C, partial, c.stream);
}
}  // namespace

template <typename T>
void CudaBackend<T>::layernorm_backward(Buf<T> dinp, T* dw, T* db, CBuf<T> dout, CBuf<T> inp,
                                        CBuf<T> w, const T* mean, const T* rstd, int N, int C) {
  norm_backward(*ctx_, true, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

template <typename T>
void CudaBackend<T>::rmsnorm_backward(Buf<T> dinp, T* dw, CBuf<T> dout, CBuf<T> inp, CBuf<T> w,
                                      const T* rstd, int N, int C) {
  norm_backward(*ctx_, false, dinp, dw, nullptr, dout, inp, w, nullptr, rstd, N, C);
}

// ---- pointwise and RoPE -----------------------------------------------------------------------

template <typename T>
void CudaBackend<T>::add(Buf<T> out, CBuf<T> a, CBuf<T> b, size_t n) {
  cuda::launch_add(out, a, b, n, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::gelu_forward(Buf<T> out, CBuf<T> inp, size_t n) {
  cuda::launch_gelu_forward(out, inp, n, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::gelu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, size_t n) {
  cuda::launch_gelu_backward(dinp, inp, dout, n, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::swiglu_forward(Buf<T> out, CBuf<T> inp, int N, int F) {
  cuda::launch_swiglu_forward(out, inp, N, F, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::swiglu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, int N, int F) {
  cuda::launch_swiglu_backward(dinp, inp, dout, N, F, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::rope_forward(Buf<T> qkv, int B, int Tlen, int NH, int NKV, int hs,
                                  const RopeFreqs& rope) {
  cuda::launch_rope(qkv, B, Tlen, NH, NKV, hs, rope, +1, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::rope_backward(Buf<T> dqkv, int B, int Tlen, int NH, int NKV, int hs,
                                   const RopeFreqs& rope) {
  cuda::launch_rope(dqkv, B, Tlen, NH, NKV, hs, rope, -1, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::qk_norm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> wq, CBuf<T> wk,
                                     int N, int NH, int NKV, int hs, T eps) {
  cuda::launch_qk_norm_forward(out, rstd, inp, wq, wk, N, NH, NKV, hs, eps, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::qk_norm_backward(Buf<T> dqkv, T* dwq, T* dwk, CBuf<T> inp, CBuf<T> wq,
                                      CBuf<T> wk, const T* rstd, int N, int NH, int NKV, int hs) {
  Scratch::Frame frame(ctx_->scratch);
  float* partial =
      frame.take<float>(cuda::qk_norm_backward_scratch(N, hs), "qk-norm gradient sums");
  cuda::launch_qk_norm_backward(dqkv, dwq, dwk, inp, wq, wk, rstd, N, NH, NKV, hs, partial,
                                ctx_->stream);
}

// ---- cross-entropy ----------------------------------------------------------------------------

template <typename T>
void CudaBackend<T>::ce_row_max(CBuf<T> logits, T* row_max, int N, int Vl, int v0, int V) {
  cuda::launch_ce_row_max(logits, row_max, N, Vl, v0, V, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::ce_stats(CBuf<T> logits, const T* row_max, const int32_t* targets, T* stats,
                              int N, int Vl, int v0, int V) {
  cuda::launch_ce_stats(logits, row_max, targets, stats, N, Vl, v0, V, ctx_->stream);
}

template <typename T>
double CudaBackend<T>::ce_loss(Buf<T> logits, const T* row_max, const T* stats,
                               const int32_t* targets, T* losses, int N, int Vl, int v0, int V,
                               T dloss) {
  Scratch::Frame frame(ctx_->scratch);
  double* row_loss = frame.take<double>(std::max(N, 1), "per-row losses");
  double* total = frame.take<double>(1, "loss total");
  cuda::launch_ce_loss(logits, row_max, stats, targets, losses, row_loss, N, Vl, v0, V, dloss,
                       ctx_->stream);
  cuda::launch_sum_doubles(total, row_loss, static_cast<size_t>(N), ctx_->stream);
  return ctx_->read_double(total);
}

// ---- optimizer: each op one launch per table of up to SegmentTable::kMax segments --------------

namespace {

// Adam's bias correction 1/(1-b^t), in double, then rounded to float (as the CPU backend).
float bias_correction(float beta, int t) {
  return static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(beta), t)));
}

// The segment list as tables, each segment given blocks of at least kPerBlock elements, at most
// kMaxBlocks of them; lr: LAMB's rates (one per segment) or null.
std::vector<cuda::SegmentTable> segment_tables(Segments segments, const float* lr = nullptr) {
  constexpr size_t kPerBlock = 16384, kMaxBlocks = 1024;
  std::vector<cuda::SegmentTable> tables;
  for (size_t s = 0; s < segments.size(); ++s) {
    if (tables.empty() || tables.back().count == cuda::SegmentTable::kMax) tables.emplace_back();
    cuda::SegmentTable& t = tables.back();
    const int k = t.count++;
    t.at[k] = segments[s].at;
    t.n[k] = segments[s].n;
    t.decay[k] = segments[s].decay;
    t.lr[k] = lr ? lr[s] : 0.0f;
    const size_t blocks = std::clamp<size_t>((t.n[k] + kPerBlock - 1) / kPerBlock, 1, kMaxBlocks);
    t.first[k + 1] = t.first[k] + static_cast<unsigned>(blocks);
  }
  return tables;
}

// host (ways x segments doubles) = what launch(table, device sums, partials) leaves for each
// table's segments, `ways` sums a segment: one copy back and one wait for the whole list.
template <class Launch>
void segment_sums(cuda::Context& ctx, Segments segments, int ways, double* host, Launch&& launch) {
  if (segments.empty()) return;
  const std::vector<cuda::SegmentTable> tables = segment_tables(segments);
  unsigned most = 0;
  for (const cuda::SegmentTable& t : tables) most = std::max(most, t.blocks());
  const size_t n = static_cast<size_t>(ways) * segments.size();
  Scratch::Frame frame(ctx.scratch);
  double* sums = frame.take<double>(n, "per-segment sums");
  double* partials = frame.take<double>(static_cast<size_t>(ways) * most, "per-block sums");
  size_t done = 0;  // the tables reuse the partials in stream order
  for (const cuda::SegmentTable& t : tables) {
    launch(t, sums + static_cast<size_t>(ways) * done, partials);
    done += static_cast<size_t>(t.count);
  }
  CUDA_CHECK(cudaMemcpyAsync(host, sums, n * sizeof(double), cudaMemcpyDeviceToHost, ctx.stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
}

}  // namespace

template <typename T>
double CudaBackend<T>::sum_squares(const T* x, Segments segments) {
  std::vector<double> sums(segments.size());
  segment_sums(*ctx_, segments, 1, sums.data(),
               [&](const cuda::SegmentTable& t, double* out, double* partials) {
                 cuda::launch_sum_squares(out, partials, x, t, ctx_->stream);
               });
  double sum = 0.0;
  for (double s : sums) sum += s;  // in segment order
  return sum;
}

template <typename T>
void CudaBackend<T>::scale(T* x, T s, size_t n) {
  cuda::launch_scale(x, s, n, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::adamw(T* param, const T* grad, T* m, T* v, Segments segments, float lr,
                           float beta1, float beta2, float eps, float weight_decay, int t,
                           float grad_scale, Buf<T> rounded) {
  check_rounded(rounded);
  for (const cuda::SegmentTable& table : segment_tables(segments))
    cuda::launch_adamw(param, grad, m, v, table, lr, beta1, beta2, eps, weight_decay,
                       bias_correction(beta1, t), bias_correction(beta2, t), grad_scale, rounded,
                       ctx_->stream);
}

template <typename T>
void CudaBackend<T>::sgd_momentum(T* param, const T* grad, T* buf, Segments segments, float lr,
                                  float momentum, float weight_decay, float grad_scale,
                                  Buf<T> rounded) {
  check_rounded(rounded);
  for (const cuda::SegmentTable& table : segment_tables(segments))
    cuda::launch_sgd(param, grad, buf, table, lr, momentum, weight_decay, grad_scale, rounded,
                     ctx_->stream);
}

template <typename T>
void CudaBackend<T>::lamb_moments(T* param, const T* grad, T* m, T* v, Segments segments, float lr,
                                  float beta1, float beta2, float eps, float weight_decay, int t,
                                  float grad_scale, double* sums) {
  const float bc1 = bias_correction(beta1, t), bc2 = bias_correction(beta2, t);
  segment_sums(*ctx_, segments, 2, sums,
               [&](const cuda::SegmentTable& table, double* out, double* partials) {
                 cuda::launch_lamb_moments(out, partials, param, grad, m, v, table, lr, beta1,
                                           beta2, eps, weight_decay, bc1, bc2, grad_scale,
                                           ctx_->stream);
               });
}

template <typename T>
void CudaBackend<T>::lamb_update(T* param, const T* m, const T* v, Segments segments,
                                 const float* lr, float beta1, float beta2, float eps,
                                 float weight_decay, int t) {
  for (const cuda::SegmentTable& table : segment_tables(segments, lr))
    cuda::launch_lamb_update(param, m, v, table, eps, weight_decay, bias_correction(beta1, t),
                             bias_correction(beta2, t), ctx_->stream);
}

template class CudaBackend<float>;

}  // namespace mpitrain
