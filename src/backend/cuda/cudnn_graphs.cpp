// The cuDNN graphs of cudnn_ops.hpp: the composite causal SDPA forward and backward exactly as
// cuDNN's frontend (1.23) lowers them for cuDNN 9.19 — same operations, order, dims, strides,
// data types and virtual flags — and the single-operation norm graphs.
#include <string>

#include "mpitrain/backend/cuda/cudnn_ops.hpp"

namespace mpitrain::cuda {

using dnn::Descriptor;
using dnn::Graph;
using dnn::TensorKind;
using Dims = std::vector<int64_t>;

namespace {

cudnnDataType_t io_type(Precision p) {
  return p == Precision::Fp16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
}

// The views of the packed (B, T, [q | k | v]) buffer and the (B, T, NH*hs) output, in cuDNN's
// [batch, head, sequence, dim] order.
struct Layout {
  int64_t B, T, NH, NKV, hs, row, A;
  explicit Layout(const SdpaShape& s)
      : B(s.B),
        T(s.T),
        NH(s.NH),
        NKV(s.NKV),
        hs(s.hs),
        row(int64_t(s.NH + 2 * s.NKV) * s.hs),
        A(int64_t(s.NH) * s.hs) {}
  Dims packed_strides() const { return {T * row, hs, row, 1}; }    // q, k, v, dq, dk, dv
  Dims packed_t_strides() const { return {T * row, hs, 1, row}; }  // k^T, v^T
  Dims out_strides() const { return {T * A, hs, A, 1}; }           // o, do
  Dims scores() const { return {B, NH, T, T}; }
  Dims scores_strides() const { return {NH * T * T, T * T, T, 1}; }
  Dims scores_t_strides() const { return {NH * T * T, T * T, 1, T}; }  // transposed view
  Dims rows() const { return {B, NH, T, 1}; }
  Dims rows_strides() const { return {NH * T, T, 1, 1}; }
  Dims full_heads() const { return {B, NH, T, hs}; }
  Dims full_heads_strides() const { return {NH * T * hs, T * hs, hs, 1}; }  // dense
};

// Numbers the virtual tensors of one graph.
struct VirtualUids {
  int64_t next = uid::FirstVirtual;
  int64_t operator()() { return next++; }
};

// The causal mask on scores x (top-left diagonal): y = (row >= col) ? x : -inf.
const Descriptor& causal_mask(Graph& g, VirtualUids& vuid, const Layout& L, const Descriptor& x,
                              const Descriptor& neg_inf) {
  const auto& row =
      g.tensor(vuid(), CUDNN_DATA_INT32, L.scores(), L.scores_strides(), TensorKind::Virtual);
  const auto& col =
      g.tensor(vuid(), CUDNN_DATA_INT32, L.scores(), L.scores_strides(), TensorKind::Virtual);
  const auto& keep =
      g.tensor(vuid(), CUDNN_DATA_BOOLEAN, L.scores(), L.scores_strides(), TensorKind::Virtual);
  const auto& y =
      g.tensor(vuid(), CUDNN_DATA_FLOAT, L.scores(), L.scores_strides(), TensorKind::Virtual);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, row, CUDNN_DATA_FLOAT, nullptr, 2);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, col, CUDNN_DATA_FLOAT, nullptr, 3);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, keep, CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, &neg_inf, y, CUDNN_DATA_FLOAT, &keep);
  return y;
}

std::string sdpa_name(const char* what, const SdpaShape& s) {
  return std::string(what) + " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) +
         " hs=" + std::to_string(s.hs) + " " + to_string(s.io);
}

}  // namespace

bool sdpa_shape_supported(const SdpaShape& s) {
  return (s.io == Precision::Bf16 || s.io == Precision::Fp16) && s.hs % 8 == 0 && s.hs > 0 &&
         s.hs <= 256 && s.NKV > 0 && s.NH % s.NKV == 0 && s.T > 1 && s.B > 0;
}

// Forward (FE's CompositeSDPANode, training): S = Q K^T; S1 = S * scale; S2 = causal(S1);
// M = rowmax S2; E = exp(S2 - M); Z = rowsum E; Stats = M + log Z; P = E / Z (io type); O = P V.
std::unique_ptr<Graph> sdpa_forward_graph(const SdpaShape& s) {
  const Layout L(s);
  const cudnnDataType_t io = io_type(s.io);
  auto g = std::make_unique<Graph>(sdpa_name("causal attention forward", s));
  VirtualUids vuid;
  const auto& q = g->tensor(uid::Q, io, {L.B, L.NH, L.T, L.hs}, L.packed_strides());
  const auto& kt = g->tensor(uid::K, io, {L.B, L.NKV, L.hs, L.T}, L.packed_t_strides());
  const auto& v = g->tensor(uid::V, io, {L.B, L.NKV, L.T, L.hs}, L.packed_strides());
  const auto& o = g->tensor(uid::O, io, {L.B, L.NH, L.T, L.hs}, L.out_strides());
  const auto& stats = g->tensor(uid::Stats, CUDNN_DATA_FLOAT, L.rows(), L.rows_strides());
  const auto& scale = g->scalar(uid::Scale);
  const auto& neg_inf = g->scalar(uid::NegInf);
  auto scores = [&]() -> const Descriptor& {
    return g->tensor(vuid(), CUDNN_DATA_FLOAT, L.scores(), L.scores_strides(), TensorKind::Virtual);
  };
  auto rows = [&]() -> const Descriptor& {
    return g->tensor(vuid(), CUDNN_DATA_FLOAT, L.rows(), L.rows_strides(), TensorKind::Virtual);
  };
  const auto& S = scores();
  g->matmul(q, kt, S);
  const auto& S1 = scores();
  g->pointwise(CUDNN_POINTWISE_MUL, S, &scale, S1);
  const auto& S2 = causal_mask(*g, vuid, L, S1, neg_inf);
  const auto& M = rows();
  g->reduction(CUDNN_REDUCE_TENSOR_MAX, S2, M);
  const auto& S3 = scores();
  g->pointwise(CUDNN_POINTWISE_SUB, S2, &M, S3);
  const auto& E = scores();
  g->pointwise(CUDNN_POINTWISE_EXP, S3, nullptr, E);
  const auto& Z = rows();
  g->reduction(CUDNN_REDUCE_TENSOR_ADD, E, Z);
  const auto& logZ = rows();
  g->pointwise(CUDNN_POINTWISE_LOG, Z, nullptr, logZ);
  g->pointwise(CUDNN_POINTWISE_ADD, M, &logZ, stats);
  const auto& P = g->tensor(vuid(), io, L.scores(), L.scores_strides(), TensorKind::Virtual);
  g->pointwise(CUDNN_POINTWISE_DIV, E, &Z, P);
  g->matmul(P, v, o);
  return g;
}

// Backward (FE's CompositeSDPABackwardNode, non-deterministic dQ):
//   softmax_sum = rowsum(dO * O) * 1;  S2 = Q K^T * scale - Stats;  P = exp(causal(S2))
//   dV = P^T dO;  dP = dO V^T;  dS = (dP - softmax_sum) * P * scale;  dK = dS^T Q
//   dQ_accum = dS K (fp32);  dQ = dQ_accum.  With GQA, dK and dV are computed per query head
//   and summed over each kv head's group of query heads.
std::unique_ptr<Graph> sdpa_backward_graph(const SdpaShape& s) {
  const Layout L(s);
  const cudnnDataType_t io = io_type(s.io);
  const bool gqa = s.NH != s.NKV;
  auto g = std::make_unique<Graph>(sdpa_name("causal attention backward", s));
  VirtualUids vuid;
  const auto& q = g->tensor(uid::Q, io, {L.B, L.NH, L.T, L.hs}, L.packed_strides());
  const auto& kt = g->tensor(uid::K, io, {L.B, L.NKV, L.hs, L.T}, L.packed_t_strides());
  const auto& vt = g->tensor(uid::V, io, {L.B, L.NKV, L.hs, L.T}, L.packed_t_strides());
  const auto& o = g->tensor(uid::O, io, {L.B, L.NH, L.T, L.hs}, L.out_strides());
  const auto& dout = g->tensor(uid::dO, io, {L.B, L.NH, L.T, L.hs}, L.out_strides());
  const auto& stats = g->tensor(uid::Stats, CUDNN_DATA_FLOAT, L.rows(), L.rows_strides());
  const auto& dq = g->tensor(uid::dQ, io, {L.B, L.NH, L.T, L.hs}, L.packed_strides());
  const auto& dk = g->tensor(uid::dK, io, {L.B, L.NKV, L.T, L.hs}, L.packed_strides());
  const auto& dv = g->tensor(uid::dV, io, {L.B, L.NKV, L.T, L.hs}, L.packed_strides());
  const auto& softmax_sum =
      g->tensor(uid::SoftmaxSum, CUDNN_DATA_FLOAT, L.rows(), L.rows_strides());
  const auto& dq_accum =
      g->tensor(uid::dQAccum, CUDNN_DATA_FLOAT, L.full_heads(), L.full_heads_strides());
  const auto& scale = g->scalar(uid::Scale);
  const auto& neg_inf = g->scalar(uid::NegInf);
  const auto& one = g->scalar(uid::One);
  auto scores = [&](cudnnDataType_t type = CUDNN_DATA_FLOAT) -> const Descriptor& {
    return g->tensor(vuid(), type, L.scores(), L.scores_strides(), TensorKind::Virtual);
  };
  auto scores_t = [&]() -> const Descriptor& {
    return g->tensor(vuid(), io, L.scores(), L.scores_t_strides(), TensorKind::Virtual);
  };
  // per query head dK/dV before the group sum (GQA), else straight into memory
  auto head_grad = [&](const Descriptor& target) -> const Descriptor& {
    if (!gqa) return target;
    return g->tensor(vuid(), io, L.full_heads(), L.full_heads_strides(), TensorKind::Virtual);
  };

  // softmax_sum = rowsum(dO * O) * 1   (FE's "mul_dO_O" strides, as it declares them)
  const auto& dOO = g->tensor(vuid(), CUDNN_DATA_FLOAT, {L.B, L.NH, L.T, L.hs},
                              {L.NH * L.T * L.hs, L.T * L.hs, L.NH * L.hs, 1}, TensorKind::Virtual);
  g->pointwise(CUDNN_POINTWISE_MUL, dout, &o, dOO);
  const auto& rowsum =
      g->tensor(vuid(), CUDNN_DATA_FLOAT, L.rows(), L.rows_strides(), TensorKind::Virtual);
  g->reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, rowsum);
  g->pointwise(CUDNN_POINTWISE_MUL, rowsum, &one, softmax_sum);
  // P = exp(causal(Q K^T * scale - Stats))
  const auto& S = scores();
  g->matmul(q, kt, S);
  const auto& S1 = scores();
  g->pointwise(CUDNN_POINTWISE_MUL, S, &scale, S1);
  const auto& S2 = scores();
  g->pointwise(CUDNN_POINTWISE_SUB, S1, &stats, S2);
  const auto& S3 = causal_mask(*g, vuid, L, S2, neg_inf);
  const auto& P = scores();
  g->pointwise(CUDNN_POINTWISE_EXP, S3, nullptr, P);
  // dV = P^T dO
  const auto& Pt = scores_t();
  g->reshape(P, Pt);
  const auto& dv_heads = head_grad(dv);
  g->matmul(Pt, dout, dv_heads);
  if (gqa) g->reduction(CUDNN_REDUCE_TENSOR_ADD, dv_heads, dv);
  // dS = (dO V^T - softmax_sum) * P * scale
  const auto& dP = scores();
  g->matmul(dout, vt, dP);
  const auto& t3 = scores();
  g->pointwise(CUDNN_POINTWISE_SUB, dP, &softmax_sum, t3);
  const auto& t4 = scores();
  g->pointwise(CUDNN_POINTWISE_MUL, t3, &P, t4);
  const auto& dS = scores();
  g->pointwise(CUDNN_POINTWISE_MUL, t4, &scale, dS);
  // dK = dS^T Q
  const auto& dSt = scores_t();
  g->reshape(dS, dSt);
  const auto& dk_heads = head_grad(dk);
  g->matmul(dSt, q, dk_heads);
  if (gqa) g->reduction(CUDNN_REDUCE_TENSOR_ADD, dk_heads, dk);
  // dQ = dS K, through the fp32 accumulator
  const auto& k_view = g->tensor(vuid(), CUDNN_DATA_FLOAT, {L.B, L.NKV, L.T, L.hs},
                                 L.packed_strides(), TensorKind::Virtual);
  g->reshape(kt, k_view);
  g->matmul(dS, k_view, dq_accum);
  g->pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, dq);
  return g;
}

namespace {
Dims rows_c(int N, int C) { return {N, C, 1, 1}; }
Dims rows_c_strides(int C) { return {C, 1, C, C}; }
Dims channel(int C) { return {1, C, 1, 1}; }
Dims stat(int N) { return {N, 1, 1, 1}; }
const Dims kOnes{1, 1, 1, 1};
std::string norm_name(const char* what, bool layer, int N, int C) {
  return std::string(layer ? "LayerNorm " : "RMSNorm ") + what + " N=" + std::to_string(N) +
         " C=" + std::to_string(C);
}
}  // namespace

cudnnDataType_t norm_io_type(Precision io) {
  return io == Precision::Fp32 ? CUDNN_DATA_FLOAT : io_type(io);
}

std::unique_ptr<Graph> norm_forward_graph(bool layer, int N, int C, Precision io) {
  auto g = std::make_unique<Graph>(norm_name("forward", layer, N, C) + " " + to_string(io));
  const auto f = CUDNN_DATA_FLOAT, t = norm_io_type(io);
  const auto& x = g->tensor(uid::X, t, rows_c(N, C), rows_c_strides(C));
  const auto& y = g->tensor(uid::Y, t, rows_c(N, C), rows_c_strides(C));
  const auto& gamma = g->tensor(uid::Gamma, t, channel(C), rows_c_strides(C));
  const auto& inv_var = g->tensor(uid::InvVar, f, stat(N), kOnes);
  const auto& eps = g->scalar(uid::Eps);
  const Descriptor* beta =
      layer ? &g->tensor(uid::Beta, t, channel(C), rows_c_strides(C)) : nullptr;
  const Descriptor* mean = layer ? &g->tensor(uid::Mean, f, stat(N), kOnes) : nullptr;
  g->norm_forward(layer ? CUDNN_LAYER_NORM : CUDNN_RMS_NORM, x, gamma, beta, eps, y, mean, inv_var);
  return g;
}

std::unique_ptr<Graph> norm_backward_graph(bool layer, int N, int C, Precision io) {
  auto g = std::make_unique<Graph>(norm_name("backward", layer, N, C) + " " + to_string(io));
  const auto f = CUDNN_DATA_FLOAT, t = norm_io_type(io);
  const auto& x = g->tensor(uid::X, t, rows_c(N, C), rows_c_strides(C));
  const auto& dy = g->tensor(uid::dY, t, rows_c(N, C), rows_c_strides(C));
  const auto& dx = g->tensor(uid::dX, f, rows_c(N, C), rows_c_strides(C));
  const auto& gamma = g->tensor(uid::Gamma, t, channel(C), rows_c_strides(C));
  const auto& dgamma = g->tensor(uid::dGamma, f, channel(C), rows_c_strides(C));
  const auto& inv_var = g->tensor(uid::InvVar, f, stat(N), kOnes);
  const Descriptor* mean = layer ? &g->tensor(uid::Mean, f, stat(N), kOnes) : nullptr;
  const Descriptor* dbeta =
      layer ? &g->tensor(uid::dBeta, f, channel(C), rows_c_strides(C)) : nullptr;
  g->norm_backward(layer ? CUDNN_LAYER_NORM : CUDNN_RMS_NORM, x, dy, gamma, mean, inv_var, dgamma,
                   dbeta, dx);
  return g;
}

}  // namespace mpitrain::cuda
