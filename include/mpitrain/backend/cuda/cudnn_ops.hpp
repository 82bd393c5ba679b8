// The cuDNN operation graphs the backend uses, built with cudnn_graph.hpp:
//   causal scaled-dot-product attention (flash attention), forward and backward, with grouped
//   kv heads, in the "composite" form cuDNN 9 matches to its fused kernels (the single SDPA
//   operation cannot express a causal mask before 9.21), reading the packed qkv layout
//   (B, T, [q NH*hs | k NKV*hs | v NKV*hs]) in bf16 or fp16 and writing fp32 row statistics;
//   LayerNorm / RMSNorm forward (training) and backward, fp32, over rows of C.
// Every tensor of a graph has a fixed UID (below); the variant pack passes one pointer per
// non-virtual UID.
#pragma once

#include <memory>

#include "mpitrain/backend/cuda/cudnn_graph.hpp"
#include "mpitrain/backend/precision.hpp"

namespace mpitrain::cuda {

struct SdpaShape {
  int B, T, NH, NKV, hs;
  Precision io;  // bf16 or fp16
  auto operator<=>(const SdpaShape&) const = default;
};

namespace uid {
enum : int64_t {
  // attention
  Q = 1,
  K,
  V,
  O,
  Stats,
  dO,
  dQ,
  dK,
  dV,
  SoftmaxSum,
  dQAccum,
  Scale = 50,
  NegInf,
  One,
  // norms
  X = 60,
  Y,
  Gamma,
  Beta,
  Mean,
  InvVar,
  Eps,
  dY,
  dX,
  dGamma,
  dBeta,
  FirstVirtual = 1000,
};
}

// Shapes cuDNN's fused attention supports (bf16/fp16, hs % 8 == 0, hs <= 256, NH % NKV == 0,
// T > 1); others go to the CUDA kernel without asking cuDNN.
bool sdpa_shape_supported(const SdpaShape& s);

// Training forward: O (B,T,NH*hs, io type) and Stats (B,NH,T) fp32 = max + ln(sum e^(s - max)).
std::unique_ptr<dnn::Graph> sdpa_forward_graph(const SdpaShape& s);
// Backward: dQ, dK, dV into a packed dqkv (io type) from Q, K, V, O, dO, Stats; scratch tensors
// SoftmaxSum (B,NH,T) and dQAccum (B,NH,T,hs), fp32, dense.
std::unique_ptr<dnn::Graph> sdpa_backward_graph(const SdpaShape& s);

// LayerNorm (layer = true) or RMSNorm over rows of C: X, Y (N,C); Gamma, Beta (C); Mean, InvVar
// (N); Eps by value. Backward: dX, dGamma, dBeta written (not accumulated). X, Y, dY, Gamma,
// Beta in the io type (fp32, bf16 or fp16); statistics, dX, dGamma, dBeta fp32.
std::unique_ptr<dnn::Graph> norm_forward_graph(bool layer, int N, int C, Precision io);
std::unique_ptr<dnn::Graph> norm_backward_graph(bool layer, int N, int C, Precision io);

}  // namespace mpitrain::cuda
