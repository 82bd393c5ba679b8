// CPU backend: construction, memory, embeddings and the pointwise ops (add, GELU, SwiGLU). On
// 2-byte tensors the pointwise ops and the embedding backward run staged (cpu_storage.hpp); the
// embedding forward adds the two rows' widened values directly, as the fp32 kernel adds them.
#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

using cpu::bf16_bits;
using cpu::bf16_value;
using cpu::exp_fast;
using cpu::kParallelWork;

namespace {

// n zero-filled elements of `size` bytes from the C heap (at least one), freed with std::free.
void* zeroed(size_t n, size_t size) {
  void* p = std::calloc(std::max<size_t>(n, 1), size);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

template <typename T>
CpuBackend<T>::CpuBackend(int threads, CpuPages pages)
    : threads_(threads > 0 ? threads : omp_get_max_threads()),
      pages_(pages),
      staging_(new cpu::Staging()) {
  omp_set_num_threads(threads_);
  openblas_set_num_threads(threads_);
}

// ---- memory -------------------------------------------------------------------------------

namespace {
constexpr size_t kChunkBytes = 4 * kParallelWork;  // per task of the parallel memset / memcpy

// bytes of zeros at p, on every thread in equal contiguous shares (schedule static). On fresh pages
// this is their first touch: each thread takes the page faults of its own share, so the pages are
// cleared on all threads at once (fresh pages of a Zen 5 VM: 0.55 GiB/s on one thread, 1.0 on two;
// GPT-2 small's set-up at 2 threads fell from about 6 s to 4 s), and where a rank's threads span
// several NUMA nodes its tensors are spread over those nodes share by share, not all placed on the
// allocating thread's node.
void fill_zeros(char* p, size_t bytes) {
#pragma omp parallel for schedule(static) if (bytes > 16 * kChunkBytes)
  for (size_t i = 0; i < bytes; i += kChunkBytes)
    std::memset(p + i, 0, std::min(kChunkBytes, bytes - i));
}

// bytes (rounded up to 64) of zeros (fill_zeros), 64-byte aligned; from kHugePage bytes on, aligned
// to a huge page and backed by the pages `pages` asks for (before the zeros fault them in). A
// kernel built without transparent huge pages refuses madvise with EINVAL: its pages are all 4 KiB
// anyway.
void* zeroed_aligned(size_t bytes, CpuPages pages) {
  bytes = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  const bool large = bytes >= kHugePage;
  void* p = nullptr;
  if (posix_memalign(&p, large ? kHugePage : 64, bytes) != 0) throw std::bad_alloc();
  if (large && madvise(p, bytes, pages == CpuPages::Huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0 &&
      errno != EINVAL) {
    const int error = errno;
    std::free(p);
    MPITRAIN_THROW(std::string("madvise (huge pages) of ") + std::to_string(bytes) +
                   " bytes: " + std::strerror(error));
  }
  fill_zeros(static_cast<char*>(p), bytes);
  return p;
}
}  // namespace

template <typename T>
T* CpuBackend<T>::alloc(size_t n) {
  return static_cast<T*>(zeroed_aligned(n * sizeof(T), pages_));
}

template <typename T>
Buf<T> CpuBackend<T>::alloc(size_t n, Precision dtype) {
  if (dtype == Precision::Fp32) return alloc(n);
  if (!stores(dtype)) MPITRAIN_THROW("CpuBackend<double> stores compute tensors in double only");
  return {zeroed_aligned(n * element_bytes<T>(dtype), pages_), dtype};
}

template <typename T>
void CpuBackend<T>::free(void* p) {
  std::free(p);
}

template <typename T>
bool CpuBackend<T>::stores(Precision dtype) const {
  return dtype == Precision::Fp32 || std::is_same_v<T, float>;
}

template <typename T>
void CpuBackend<T>::zero(Buf<T> x, size_t n) {
  fill_zeros(static_cast<char*>(x.data()), n * x.element_size());
}

template <typename T>
void CpuBackend<T>::copy(Buf<T> dst, CBuf<T> src, size_t n) {
  if (dst.dtype() != src.dtype()) MPITRAIN_THROW("copy between storage types: use convert");
  auto* d = static_cast<char*>(dst.data());
  const auto* s = static_cast<const char*>(src.data());
  const size_t bytes = n * dst.element_size();
#pragma omp parallel for schedule(static) if (bytes > 16 * kChunkBytes)
  for (size_t i = 0; i < bytes; i += kChunkBytes)
    std::memcpy(d + i, s + i, std::min(kChunkBytes, bytes - i));
}

template <typename T>
void CpuBackend<T>::convert(Buf<T> dst, CBuf<T> src, size_t n) {
  if (dst.dtype() == src.dtype()) {
    copy(dst, src, n);
  } else if (T* d = dst.full()) {
    cpu::widen(d, src, n);
  } else if (const T* s = src.full()) {
    cpu::narrow(dst, s, n);
  } else {  // bf16 <-> fp16: through the exact float value, rounded once
    const uint16_t* s16 = src.half();
    uint16_t* d16 = dst.half();
    const Precision from = src.dtype(), to = dst.dtype();
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
    for (size_t i = 0; i < n; ++i) d16[i] = to_half_bits(from_half_bits(s16[i], from), to);
  }
}

template <typename T>
T* CpuBackend<T>::alloc_host(size_t n) {
  return static_cast<T*>(zeroed(n, sizeof(T)));
}

template <typename T>
void CpuBackend<T>::free_host(T* p) {
  std::free(p);
}

template <typename T>
int32_t* CpuBackend<T>::alloc_ids(size_t n) {
  return static_cast<int32_t*>(zeroed(n, sizeof(int32_t)));
}

template <typename T>
void CpuBackend<T>::free_ids(int32_t* p) {
  std::free(p);
}

template <typename T>
void CpuBackend<T>::upload_ids(int32_t* dst, const int32_t* host_src, size_t n) {
  std::memcpy(dst, host_src, n * sizeof(int32_t));
}

// x = round_to(x, p) elementwise (through float for T = double)
template <typename T>
void CpuBackend<T>::round_to(T* x, size_t n, Precision p) {
  if (p == Precision::Fp32) return;
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<T>(mpitrain::round_to(static_cast<float>(x[i]), p));
}

// ---- embeddings ---------------------------------------------------------------------------
// Vocabulary-parallel: this rank holds wte rows [v0, v0 + Vl); a token t is held iff
// 0 <= t - v0 < Vl (one unsigned comparison).
namespace {
inline bool holds(int32_t token, int v0, int Vl) {
  return static_cast<uint32_t>(token - v0) < static_cast<uint32_t>(Vl);
}

// out(B,T,C) = (wte[tokens[b,t] - v0] if held, else 0) + (wpe[t] if wpe), on elements of type E
// (T, or 2-byte bits): a copied row is exact, sum(e, p) adds one element of each.
template <typename E, class Sum>
void embedding_rows(E* out, const int32_t* tokens, const E* wte, const E* wpe, int B, int Tlen,
                    int C, int v0, int Vl, Sum&& sum) {
  const int N = B * Tlen;
#pragma omp parallel for schedule(static) if (static_cast <size_t>(N) * C > kParallelWork)
  for (int n = 0; n < N; ++n) {
    E* o = out + static_cast<size_t>(n) * C;
    const E* p = wpe != nullptr ? wpe + static_cast<size_t>(n % Tlen) * C : nullptr;
    if (holds(tokens[n], v0, Vl)) {
      const E* e = wte + static_cast<size_t>(tokens[n] - v0) * C;
      if (p != nullptr) {
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] = sum(e[c], p[c]);
      } else {
        std::memcpy(o, e, C * sizeof(E));
      }
    } else if (p != nullptr) {
      std::memcpy(o, p, C * sizeof(E));
    } else {
      std::memset(o, 0, C * sizeof(E));
    }
  }
}

// dwte[tokens[n] - v0] += dout[n] for held tokens; dwpe[t] += sum_b dout[b,t] (all tokens).
// Parallel over column blocks: repeated tokens never race and the order of the additions is fixed.
template <typename T>
void embedding_backward_kernel(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B,
                               int Tlen, int C, int v0, int Vl) {
  const int N = B * Tlen;
  cpu::for_column_blocks(C, N, [&](int c0, int c1) {
    for (int n = 0; n < N; ++n) {
      const T* d = dout + static_cast<size_t>(n) * C;
      if (holds(tokens[n], v0, Vl)) {
        T* e = dwte + static_cast<size_t>(tokens[n] - v0) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) e[c] += d[c];
      }
      if (dwpe != nullptr) {
        T* p = dwpe + static_cast<size_t>(n % Tlen) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
  });
}

}  // namespace

// 2-byte rows: the sum of the widened values, rounded, as the fp32 kernel adds them.
template <typename T>
void CpuBackend<T>::embedding_forward(Buf<T> out, const int32_t* tokens, CBuf<T> wte, CBuf<T> wpe,
                                      int B, int Tlen, int C, int v0, int Vl) {
  if (!cpu::staged(out, wte, wpe))
    return embedding_rows(out.full(), tokens, wte.full(), wpe.full(), B, Tlen, C, v0, Vl,
                          [](T e, T p) { return e + p; });
  if constexpr (!std::is_same_v<T, float>)
    MPITRAIN_THROW("CpuBackend<double> has no 2-byte tensors");
  const Precision dtype = out.dtype();
  embedding_rows(out.half(), tokens, wte.half(), wpe ? wpe.half() : nullptr, B, Tlen, C, v0, Vl,
                 [dtype](uint16_t e, uint16_t p) {
                   return to_half_bits(from_half_bits(e, dtype) + from_half_bits(p, dtype), dtype);
                 });
}

// 2-byte dout: whole sequences at a time (positions restart at each), in order.
template <typename T>
void CpuBackend<T>::embedding_backward(T* dwte, T* dwpe, CBuf<T> dout, const int32_t* tokens, int B,
                                       int Tlen, int C, int v0, int Vl) {
  if (!cpu::staged(dout)) {
    embedding_backward_kernel(dwte, dwpe, dout.full(), tokens, B, Tlen, C, v0, Vl);
    return;
  }
  const size_t seq = static_cast<size_t>(Tlen) * C;
  cpu::for_sequence_blocks(B, seq, [&](int b0, int nb) {
    const T* d = staging_->widened(cpu::kSlotA, dout + b0 * seq, nb * seq);
    embedding_backward_kernel(dwte, dwpe, d, tokens + static_cast<size_t>(b0) * Tlen, nb, Tlen, C,
                              v0, Vl);
  });
}

// ---- pointwise ----------------------------------------------------------------------------

namespace {

// out = a + b
template <typename T>
void add_kernel(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// GELU (tanh approximation), using 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e^-2u):
//   out = x s,  s = 1 / (1 + e^-2u),  u = k0 (x + k1 x^3)
// (accurate in relative terms for any x, unlike 1 + tanh(u) for very negative x).
constexpr double kGeluK0 = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluK1 = 0.044715;

template <typename T>
inline T gelu_value(T x) {
  const T u = T(kGeluK0) * (x + T(kGeluK1) * x * x * x);
  return x / (T(1) + exp_fast(T(-2) * u));
}

// dinp = dout (s + x 2u' s (1 - s)),  u' = k0 (1 + 3 k1 x^2),  1 - s = e s with e = e^-2u
template <typename T>
inline T gelu_gradient(T x, T d) {
  const T k0 = T(kGeluK0), k1 = T(kGeluK1);
  const T u = k0 * (x + k1 * x * x * x);
  const T du = k0 * (T(1) + T(3) * k1 * x * x);
  const T e = exp_fast(T(-2) * u);
  const T s = T(1) / (T(1) + e);
  return d * (s + x * T(2) * du * s * (e * s));
}

template <typename T>
void gelu_forward_kernel(T* out, const T* inp, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelWork / 4)
  for (size_t i = 0; i < n; ++i) out[i] = gelu_value(inp[i]);
}

template <typename T>
void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelWork / 4)
  for (size_t i = 0; i < n; ++i) dinp[i] = gelu_gradient(inp[i], dout[i]);
}

// SwiGLU on rows [gate (F) | up (F)]: out = silu(g) up, silu(g) = g sig(g)   (one element)
template <typename T>
inline T swiglu_value(T g, T u) {
  return g / (T(1) + exp_fast(-g)) * u;
}

// dgate = dout up sig(g) (1 + g (1 - sig(g))),  dup = dout silu(g)   (one element)
template <typename T>
inline void swiglu_gradient(T g, T u, T d, T& dg, T& du) {
  const T e = exp_fast(-g);
  const T s = T(1) / (T(1) + e);  // sig(g); 1 - sig(g) = e s
  dg = d * u * s * (T(1) + g * (e * s));
  du = d * g * s;
}

// out(F) from one row of inp(2F)
template <typename T>
inline void swiglu_forward_row(T* o, const T* g, int F) {
  const T* u = g + F;
#pragma omp simd
  for (int f = 0; f < F; ++f) o[f] = swiglu_value(g[f], u[f]);
}

// one row of dinp(2F) from the row of inp(2F) and of dout(F)
template <typename T>
inline void swiglu_backward_row(T* dg, const T* g, const T* d, int F) {
  const T* u = g + F;
  T* du = dg + F;
#pragma omp simd
  for (int f = 0; f < F; ++f) swiglu_gradient(g[f], u[f], d[f], dg[f], du[f]);
}

// The same rows on bf16 bits, widened and rounded inside the vector loop (no arrays: a
// backward row's three took 48 KB, all of Zen 5's L1)
template <typename T>
inline void swiglu_forward_bf16_row(uint16_t* o, const uint16_t* g, int F) {
  const uint16_t* u = g + F;
#pragma omp simd
  for (int f = 0; f < F; ++f)
    o[f] = bf16_bits(swiglu_value(bf16_value<T>(g[f]), bf16_value<T>(u[f])));
}
template <typename T>
inline void swiglu_backward_bf16_row(uint16_t* dg, const uint16_t* g, const uint16_t* d, int F) {
  const uint16_t* u = g + F;
  uint16_t* du = dg + F;
#pragma omp simd
  for (int f = 0; f < F; ++f) {
    T a, b;
    swiglu_gradient(bf16_value<T>(g[f]), bf16_value<T>(u[f]), bf16_value<T>(d[f]), a, b);
    dg[f] = bf16_bits(a);
    du[f] = bf16_bits(b);
  }
}

// out[i] = g(a[i], b[i]) on 2-byte tensors of n elements (b may be null: g's second argument is
// then a[i] and unused), the output rounded; the fp32 ops compute the same g. bf16 is widened and
// rounded inside g's vector loop (a shift, and the integer rounding of to_bf16_bits); fp16's F16C
// conversions go 8 at a time, so fp16 runs in chunks of kStagedChunk elements, each widened into
// the thread's own arrays (L1). bf16 in chunks took 1.5x (gelu backward) and 3x (add) the fused
// loop; blocks of rows staged through memory, 1.5-2x the fp32 op (gelu, 1 thread).
constexpr size_t kStagedChunk = 2048;
template <typename T, class G>
void staged_elementwise(Buf<T> out, CBuf<T> a, CBuf<T> b, size_t n, G&& g) {
  const bool parallel = n > kParallelWork / 4;
  if (out.dtype() == Precision::Bf16) {
    const uint16_t *x = a.half(), *y = b ? b.half() : x;
    uint16_t* o = out.half();
#pragma omp parallel for simd schedule(static) if (parallel)
    for (size_t i = 0; i < n; ++i) o[i] = bf16_bits(g(bf16_value<T>(x[i]), bf16_value<T>(y[i])));
    return;
  }
  const size_t chunks = (n + kStagedChunk - 1) / kStagedChunk;
#pragma omp parallel for schedule(static) if (parallel)
  for (size_t c = 0; c < chunks; ++c) {
    alignas(64) T x[kStagedChunk], y[kStagedChunk], o[kStagedChunk];
    const size_t i = c * kStagedChunk, k = std::min(kStagedChunk, n - i);
    cpu::widen_row(x, a + i, k);
    const T* second = x;
    if (b) {
      cpu::widen_row(y, b + i, k);
      second = y;
    }
#pragma omp simd
    for (size_t j = 0; j < k; ++j) o[j] = g(x[j], second[j]);
    cpu::narrow_row(out + i, o, k);
  }
}

}  // namespace

template <typename T>
void CpuBackend<T>::add(Buf<T> out, CBuf<T> a, CBuf<T> b, size_t n) {
  if (!cpu::staged(out, a, b)) return add_kernel(out.full(), a.full(), b.full(), n);
  staged_elementwise(out, a, b, n, [](T x, T y) { return x + y; });
}

template <typename T>
void CpuBackend<T>::gelu_forward(Buf<T> out, CBuf<T> inp, size_t n) {
  if (!cpu::staged(out, inp)) return gelu_forward_kernel(out.full(), inp.full(), n);
  staged_elementwise(out, inp, CBuf<T>(), n, [](T x, T) { return gelu_value(x); });
}

template <typename T>
void CpuBackend<T>::gelu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, size_t n) {
  if (!cpu::staged(dinp, inp, dout))
    return gelu_backward_kernel(dinp.full(), inp.full(), dout.full(), n);
  staged_elementwise(dinp, inp, dout, n, [](T x, T d) { return gelu_gradient(x, d); });
}

// SwiGLU on 2-byte tensors: a row at a time, bf16 converted inside the vector loop, fp16 (F16C's
// conversions go 8 at a time) widened into the thread's own arrays. Its exp pays threads at a
// quarter of the norms' work.
constexpr size_t kSwigluWork = kParallelWork / 4;

template <typename T>
void CpuBackend<T>::swiglu_forward(Buf<T> out, CBuf<T> inp, int N, int F) {
  const size_t F1 = F, F2 = 2 * F1;
  if (!cpu::staged(out, inp)) {
    T* o = out.full();
    const T* x = inp.full();
    const auto row = [&](size_t n) { swiglu_forward_row(o + n * F1, x + n * F2, F); };
    return cpu::for_rows(N, F, row, kSwigluWork);
  }
  if (out.dtype() == Precision::Bf16) {
    const auto row = [&](size_t n) {
      swiglu_forward_bf16_row<T>(out.half() + n * F1, inp.half() + n * F2, F);
    };
    return cpu::for_rows(N, F, row, kSwigluWork);
  }
  const cpu::ThreadRows<T> rows(*staging_, cpu::kSlotA, 2, F2);
  const auto row = [&](size_t n) {
    T *x = rows.row(0, n), *o = rows.row(1, n);
    cpu::widen_row(x, inp + n * F2, F2);
    swiglu_forward_row(o, x, F);
    cpu::narrow_row(out + n * F1, o, F1);
  };
  cpu::for_rows(N, F, row, kSwigluWork);
}

template <typename T>
void CpuBackend<T>::swiglu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, int N, int F) {
  const size_t F1 = F, F2 = 2 * F1;
  if (!cpu::staged(dinp, inp, dout)) {
    T* di = dinp.full();
    const T *x = inp.full(), *d = dout.full();
    const auto row = [&](size_t n) { swiglu_backward_row(di + n * F2, x + n * F2, d + n * F1, F); };
    return cpu::for_rows(N, F, row, kSwigluWork);
  }
  if (dinp.dtype() == Precision::Bf16) {
    const auto row = [&](size_t n) {
      swiglu_backward_bf16_row<T>(dinp.half() + n * F2, inp.half() + n * F2, dout.half() + n * F1,
                                  F);
    };
    return cpu::for_rows(N, F, row, kSwigluWork);
  }
  const cpu::ThreadRows<T> rows(*staging_, cpu::kSlotA, 3, F2);
  const auto row = [&](size_t n) {
    T *x = rows.row(0, n), *d = rows.row(1, n), *di = rows.row(2, n);
    cpu::widen_row(x, inp + n * F2, F2);
    cpu::widen_row(d, dout + n * F1, F1);
    swiglu_backward_row(di, x, d, F);
    cpu::narrow_row(dinp + n * F2, di, F2);
  };
  cpu::for_rows(N, F, row, kSwigluWork);
}

#define MPITRAIN_INSTANTIATE(T)                                                                   \
  template CpuBackend<T>::CpuBackend(int, CpuPages);                                              \
  template T* CpuBackend<T>::alloc(size_t);                                                       \
  template Buf<T> CpuBackend<T>::alloc(size_t, Precision);                                        \
  template void CpuBackend<T>::free(void*);                                                       \
  template bool CpuBackend<T>::stores(Precision) const;                                           \
  template void CpuBackend<T>::zero(Buf<T>, size_t);                                              \
  template void CpuBackend<T>::copy(Buf<T>, CBuf<T>, size_t);                                     \
  template void CpuBackend<T>::convert(Buf<T>, CBuf<T>, size_t);                                  \
  template void CpuBackend<T>::round_to(T*, size_t, Precision);                                   \
  template void CpuBackend<T>::embedding_forward(Buf<T>, const int32_t*, CBuf<T>, CBuf<T>, int,   \
                                                 int, int, int, int);                             \
  template void CpuBackend<T>::embedding_backward(T*, T*, CBuf<T>, const int32_t*, int, int, int, \
                                                  int, int);                                      \
  template void CpuBackend<T>::add(Buf<T>, CBuf<T>, CBuf<T>, size_t);                             \
  template void CpuBackend<T>::gelu_forward(Buf<T>, CBuf<T>, size_t);                             \
  template void CpuBackend<T>::gelu_backward(Buf<T>, CBuf<T>, CBuf<T>, size_t);                   \
  template void CpuBackend<T>::swiglu_forward(Buf<T>, CBuf<T>, int, int);                         \
  template void CpuBackend<T>::swiglu_backward(Buf<T>, CBuf<T>, CBuf<T>, int, int);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
