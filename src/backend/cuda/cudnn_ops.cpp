// Running the cuDNN graphs (cudnn_ops.hpp): plans built once per shape and cached; a shape cuDNN
// cannot build (no engine, or any failure while building) is reported once on stderr and
// remembered, and the op runs its CUDA kernel instead.
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "context.hpp"
#include "mpitrain/backend/cuda/check.hpp"

namespace mpitrain::cuda {

namespace {
std::string key_of(const char* what, const SdpaShape& s) {
  return std::string(what) + " " + std::to_string(s.B) + " " + std::to_string(s.T) + " " +
         std::to_string(s.NH) + " " + std::to_string(s.NKV) + " " + std::to_string(s.hs) + " " +
         to_string(s.io);
}
std::string key_of(const char* what, bool layer, int N, int C, Precision io) {
  return std::string(what) + (layer ? " layer " : " rms ") + std::to_string(N) + " " +
         std::to_string(C) + " " + to_string(io);
}
void* mut(const void* p) { return const_cast<void*>(p); }
// The graphs declare 16-byte aligned tensors (as cuDNN's frontend does); a pointer that is not
// (a tensor at an odd offset of a flat buffer) goes to the CUDA kernel instead.
bool aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (p != nullptr && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}
}  // namespace

template <class Build>
const dnn::Plan* CudnnOps::plan_for(const std::string& key, Build&& build,
                                    const std::vector<cudnnBackendHeurMode_t>& modes) {
  auto it = cache_.find(key);
  if (it != cache_.end()) return it->second.plan.get();
  Entry entry;
  try {
    entry.graph = build();
    entry.graph->finalize(handle_);
    entry.plan = std::make_unique<dnn::Plan>(*entry.graph, handle_, modes);
  } catch (const Error& e) {
    report_(std::string("cuDNN cannot run ") + key + ": " + e.what() + "; using the CUDA kernel");
    entry.plan.reset();
  }
  return cache_.emplace(key, std::move(entry)).first->second.plan.get();
}

bool CudnnOps::sdpa_forward(const SdpaShape& s, float scale, void* o16, float* stats,
                            const void* qkv16, Scratch& ws) {
  if (!sdpa_shape_supported(s) || !aligned({o16, stats, qkv16})) return false;
  const dnn::Plan* plan = plan_for(key_of("attention forward", s),
                                   [&] { return sdpa_forward_graph(s); }, {CUDNN_HEUR_MODE_A});
  if (plan == nullptr) return false;
  Scratch::Frame frame(ws);
  void* work =
      frame.bytes(static_cast<size_t>(plan->workspace_bytes()), "cuDNN attention workspace");
  const char* base = static_cast<const char*>(qkv16);
  const size_t k_off = size_t(s.NH) * s.hs * 2, v_off = size_t(s.NH + s.NKV) * s.hs * 2;
  float neg_inf = -INFINITY;
  CUDNN_CHECK(cudnnSetStream(handle_, stream_));
  plan->execute(handle_, {uid::Q, uid::K, uid::V, uid::O, uid::Stats, uid::Scale, uid::NegInf},
                {mut(base), mut(base + k_off), mut(base + v_off), o16, stats, &scale, &neg_inf},
                work);
  return true;
}

bool CudnnOps::sdpa_backward(const SdpaShape& s, float scale, void* dqkv16, const void* qkv16,
                             const void* o16, const void* do16, const float* stats, Scratch& ws) {
  if (!sdpa_shape_supported(s) || !aligned({dqkv16, qkv16, o16, do16, stats})) return false;
  const dnn::Plan* plan = plan_for(key_of("attention backward", s),
                                   [&] { return sdpa_backward_graph(s); }, {CUDNN_HEUR_MODE_A});
  if (plan == nullptr) return false;
  Scratch::Frame frame(ws);
  const size_t rows = size_t(s.B) * s.NH * s.T;
  float* softmax_sum = frame.take<float>(rows, "cuDNN attention softmax sums");
  float* dq_accum = frame.take<float>(rows * s.hs, "cuDNN attention dQ accumulator");
  void* work =
      frame.bytes(static_cast<size_t>(plan->workspace_bytes()), "cuDNN attention workspace");
  CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, rows * s.hs * sizeof(float), stream_));
  const char* base = static_cast<const char*>(qkv16);
  char* dbase = static_cast<char*>(dqkv16);
  const size_t k_off = size_t(s.NH) * s.hs * 2, v_off = size_t(s.NH + s.NKV) * s.hs * 2;
  float neg_inf = -INFINITY, one = 1.0f;
  CUDNN_CHECK(cudnnSetStream(handle_, stream_));
  plan->execute(
      handle_,
      {uid::Q, uid::K, uid::V, uid::O, uid::dO, uid::Stats, uid::dQ, uid::dK, uid::dV,
       uid::SoftmaxSum, uid::dQAccum, uid::Scale, uid::NegInf, uid::One},
      {mut(base), mut(base + k_off), mut(base + v_off), mut(o16), mut(do16), mut(stats), dbase,
       dbase + k_off, dbase + v_off, softmax_sum, dq_accum, &scale, &neg_inf, &one},
      work);
  return true;
}

bool CudnnOps::norm_forward(bool layer, int N, int C, Precision io, void* out, float* mean,
                            float* rstd, const void* inp, const void* w, const void* b, float eps,
                            Scratch& ws) {
  if (!aligned({out, mean, rstd, inp, w, b})) return false;
  const dnn::Plan* plan = plan_for(key_of("norm forward", layer, N, C, io),
                                   [&] { return norm_forward_graph(layer, N, C, io); },
                                   {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK});
  if (plan == nullptr) return false;
  Scratch::Frame frame(ws);
  void* work = frame.bytes(static_cast<size_t>(plan->workspace_bytes()), "cuDNN norm workspace");
  std::vector<int64_t> uids{uid::X, uid::Y, uid::Gamma, uid::InvVar, uid::Eps};
  std::vector<void*> ptrs{mut(inp), out, mut(w), rstd, &eps};
  if (layer) {
    uids.insert(uids.end(), {uid::Beta, uid::Mean});
    ptrs.insert(ptrs.end(), {mut(b), mean});
  }
  CUDNN_CHECK(cudnnSetStream(handle_, stream_));
  plan->execute(handle_, uids, ptrs, work);
  return true;
}

bool CudnnOps::norm_backward(bool layer, int N, int C, Precision io, float* dx, float* dw,
                             float* db, const void* dout, const void* inp, const void* w,
                             const float* mean, const float* rstd, Scratch& ws) {
  if (!aligned({dx, dw, db, dout, inp, w, mean, rstd})) return false;
  const dnn::Plan* plan = plan_for(key_of("norm backward", layer, N, C, io),
                                   [&] { return norm_backward_graph(layer, N, C, io); },
                                   {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK});
  if (plan == nullptr) return false;
  Scratch::Frame frame(ws);
  void* work = frame.bytes(static_cast<size_t>(plan->workspace_bytes()), "cuDNN norm workspace");
  std::vector<int64_t> uids{uid::X, uid::dY, uid::dX, uid::Gamma, uid::dGamma, uid::InvVar};
  std::vector<void*> ptrs{mut(inp), mut(dout), dx, mut(w), dw, mut(rstd)};
  if (layer) {
    uids.insert(uids.end(), {uid::Mean, uid::dBeta});
    ptrs.insert(ptrs.end(), {mut(mean), db});
  }
  CUDNN_CHECK(cudnnSetStream(handle_, stream_));
  plan->execute(handle_, uids, ptrs, work);
  return true;
}

}  // namespace mpitrain::cuda
