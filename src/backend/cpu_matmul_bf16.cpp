// CPU backend: bf16 matrix products through oneDNN (see cpu_matmul_bf16.hpp).
#include "cpu_matmul_bf16.hpp"

#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "cpu_kernels.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/precision.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain::cpu {

namespace {

[[noreturn]] void throw_dnnl(const dnnl::error& e, const char* during) {
  MPITRAIN_THROW(std::string("oneDNN: ") + during + ": " + e.what() + " (" +
                 dnnl_status2str(e.status) + ")");
}

// dst[i] = the bf16 bits of src[i], rounded to nearest even (exact for values bf16 can hold).
void to_bf16(uint16_t* dst, const float* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
  for (size_t i = 0; i < n; ++i) dst[i] = to_bf16_bits(src[i]);
}

// dst[i] = the value of the bf16 bits src[i] (exact).
void from_bf16(float* dst, const uint16_t* src, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
  for (size_t i = 0; i < n; ++i) dst[i] = from_bf16_bits(src[i]);
}

// The first implementation oneDNN lists for d whose name starts with `name`; empty if none. d
// must outlive the result (its iterator refers to d).
dnnl::matmul::primitive_desc implementation(const dnnl::matmul::desc& d,
                                            const dnnl::primitive_attr& attr,
                                            const dnnl::engine& engine, const std::string& name) {
  dnnl::matmul::primitive_desc pd(d, attr, engine, /*allow_empty=*/true);
  while (pd && std::strncmp(pd.impl_info_str(), name.c_str(), name.size()) != 0)
    if (!pd.next_impl()) return {};
  return pd;
}

}  // namespace

void Bf16MatmulDelete::operator()(Bf16Matmul* p) const { delete p; }

Bf16Matmul::Bf16Matmul(int chunk, bool pack_b, Kernels kernels)
    : chunk_(chunk), pack_b_(pack_b), kernels_(kernels) {
  try {
    engine_ = dnnl::engine(dnnl::engine::kind::cpu, 0);
    stream_ = dnnl::stream(engine_);
  } catch (const dnnl::error& e) {
    throw_dnnl(e, "creating the CPU engine");
  }
  native_ = onednn_has(dnnl::cpu_isa::avx512_core_bf16);
  amx_ = onednn_has(dnnl::cpu_isa::avx512_core_amx);
  if (!native_)
    say_fallback((std::string("this CPU has no bf16 instructions (oneDNN's ISA: ") +
                  dnnl_cpu_isa2str(static_cast<dnnl_cpu_isa_t>(dnnl::get_effective_cpu_isa())) +
                  ")")
                     .c_str());
}

void Bf16Matmul::say_fallback(const char* why) {
  if (said_fallback_) return;
  said_fallback_ = true;
  std::fprintf(stderr, "bf16 GEMMs: %s; running blocked fp32 sgemm on the bf16 values instead\n",
               why);
}

Bf16Matmul::Plan& Bf16Matmul::plan(const Key& k) {
  const auto found = plans_.find(k);
  if (found != plans_.end()) return found->second;
  Plan p;
  if (native_) {
    using dt = dnnl::memory::data_type;
    try {
      using strides = dnnl::memory::dims;
      const dnnl::memory::desc a({k.M, k.K}, dt::bf16,
                                 k.ta ? strides{1, k.lda} : strides{k.lda, 1});
      const dnnl::memory::desc b({k.K, k.N}, dt::bf16,
                                 k.tb ? strides{1, k.ldb} : strides{k.ldb, 1});
      const dnnl::memory::desc c({k.M, k.N}, k.c_bf16 ? dt::bf16 : dt::f32, strides{k.ldc, 1});
      const dnnl::memory::desc bias({1, k.N}, k.bias == Bias::Bf16 ? dt::bf16 : dt::f32,
                                    strides{k.N, 1});
      dnnl::primitive_attr attr;
      attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
      if (k.accumulate) {
        dnnl::post_ops ops;
        ops.append_sum(1.0f);  // C = C + A B, in fp32 (then rounded where C is bf16)
        attr.set_post_ops(ops);
      }
      const auto product = [&](const dnnl::memory::desc& b_read) {
        return k.bias == Bias::None ? dnnl::matmul::desc(a, b_read, c)
                                    : dnnl::matmul::desc(a, b_read, bias, c);
      };
      // the jit gemm reads B in place; the brgemm an untransposed B in whatever layout its
      // kernel reads (cpu_matmul_bf16.hpp)
      const dnnl::memory::desc b_read =
          pack_b_ && !k.tb ? dnnl::memory::desc({k.K, k.N}, dt::bf16, dnnl::memory::format_tag::any)
                           : b;
      const dnnl::matmul::desc in_place = product(b), packed = product(b_read);
      dnnl::matmul::primitive_desc pd;
      if (kernels_ == Kernels::ByShape && jit_gemm_pays(k.M, k.N, k.K, amx_))
        pd = implementation(in_place, attr, engine_, "gemm:jit");
      if (!pd) pd = dnnl::matmul::primitive_desc(packed, attr, engine_, /*allow_empty=*/true);
      if (pd && std::strncmp(pd.impl_info_str(), "ref", 3) != 0) {
        p.bf16 = true;
        p.kernel = pd.impl_info_str();
        p.matmul = dnnl::matmul(pd);
        p.a = dnnl::memory(a, engine_, DNNL_MEMORY_NONE);
        p.b = dnnl::memory(pd.weights_desc(), engine_, DNNL_MEMORY_NONE);
        if (pd.weights_desc() != b) {
          p.packs_b = true;
          p.b_plain = dnnl::memory(b, engine_, DNNL_MEMORY_NONE);
          p.pack =
              dnnl::reorder(dnnl::reorder::primitive_desc(engine_, b, engine_, pd.weights_desc()));
        }
        p.c = dnnl::memory(c, engine_, DNNL_MEMORY_NONE);
        p.scratchpad = dnnl::memory(pd.scratchpad_desc(), engine_, DNNL_MEMORY_NONE);
        p.args = {{DNNL_ARG_SRC, p.a},
                  {DNNL_ARG_WEIGHTS, p.b},
                  {DNNL_ARG_DST, p.c},
                  {DNNL_ARG_SCRATCHPAD, p.scratchpad}};
        if (k.bias != Bias::None) {
          p.bias = dnnl::memory(bias, engine_, DNNL_MEMORY_NONE);
          p.args.emplace(DNNL_ARG_BIAS, p.bias);
        }
      } else {
        say_fallback(("oneDNN has no bf16 kernel for the " + std::to_string(k.M) + "x" +
                      std::to_string(k.N) + "x" + std::to_string(k.K) + " product")
                         .c_str());
      }
    } catch (const dnnl::error& e) {
      throw_dnnl(e, "creating a bf16 matmul");
    }
  }
  return plans_.emplace(k, std::move(p)).first->second;
}

Bf16Matmul::Along Bf16Matmul::along(const Key& k) const {
  const int longest = std::max({k.M, k.N, k.K});
  if (longest <= 4 * chunk_) return Along::None;
  return longest == k.N ? Along::N : longest == k.M ? Along::M : Along::K;
}

template <class F>
void Bf16Matmul::for_pieces(const Key& k, F&& f) const {
  const Along dim = along(k);
  if (dim == Along::None) return f(k, size_t{0}, size_t{0}, size_t{0}, size_t{0});
  const int longest = dim == Along::N ? k.N : dim == Along::M ? k.M : k.K;
  for (int at = 0; at < longest; at += chunk_) {
    const int n = std::min(chunk_, longest - at);
    const size_t i = static_cast<size_t>(at);
    Key piece = k;
    if (dim == Along::N) {  // columns of C, B and the bias
      piece.N = n;
      f(piece, size_t{0}, k.tb ? i * k.ldb : i, i, i);
    } else if (dim == Along::M) {  // rows of C and A
      piece.M = n;
      f(piece, k.ta ? i : i * k.lda, size_t{0}, i * k.ldc, size_t{0});
    } else {  // along K: the pieces' products add up in fp32
      piece.K = n;
      piece.accumulate = k.accumulate || at > 0;
      piece.c_bf16 = false;
      f(piece, k.ta ? i * k.lda : i, k.tb ? i : i * k.ldb, size_t{0}, size_t{0});
    }
  }
}

std::string Bf16Matmul::kernel(bool ta, bool tb, int M, int N, int K, bool accumulate,
                               bool c_bf16) {
  std::string name;
  const Key k = whole(ta, tb, M, N, K, accumulate, c_bf16);
  for_pieces(k, [&](const Key& piece, size_t, size_t, size_t, size_t) {
    if (name.empty()) name = plan(piece).kernel;
  });
  return name;
}

bool Bf16Matmul::has_kernel(bool ta, bool tb, int M, int N, int K, bool accumulate, bool c_bf16,
                            Bias bias) {
  const Key k = whole(ta, tb, M, N, K, accumulate, c_bf16, bias);
  if (bias != Bias::None && along(k) == Along::K) return false;  // a bias is added once
  bool all = true;
  for_pieces(k, [&](const Key& piece, size_t, size_t, size_t, size_t) {
    all = all && plan(piece).bf16;
  });
  return all;
}

const uint16_t* Bf16Matmul::operand_a(const void* A, bool is_bf16, size_t n, bool a_unchanged) {
  if (is_bf16) {
    a_source_ = nullptr;  // a_ is not this A's copy
    return static_cast<const uint16_t*>(A);
  }
  // a_ already holds >= n elements when the copy is reused, so reserve keeps it.
  auto* bits = static_cast<uint16_t*>(a_.reserve(n * sizeof(uint16_t)));
  if (!(a_unchanged && A == a_source_ && n == a_count_)) {
    to_bf16(bits, static_cast<const float*>(A), n);
    a_source_ = static_cast<const float*>(A);
    a_count_ = n;
  }
  return bits;
}

const uint16_t* Bf16Matmul::operand_b(const void* B, bool is_bf16, size_t n) {
  if (is_bf16) return static_cast<const uint16_t*>(B);
  auto* bits = static_cast<uint16_t*>(b_.reserve(n * sizeof(uint16_t)));
  to_bf16(bits, static_cast<const float*>(B), n);
  return bits;
}

bool Bf16Matmul::multiply(bool ta, bool tb, int M, int N, int K, const float* A, const float* B,
                          bool accumulate, float* C, bool a_unchanged) {
  if (!has_kernel(ta, tb, M, N, K, accumulate)) {
    a_source_ = nullptr;
    return false;
  }
  return multiply(ta, tb, M, N, K, operand_a(A, false, static_cast<size_t>(M) * K, a_unchanged),
                  operand_b(B, false, static_cast<size_t>(K) * N), accumulate, C);
}

bool Bf16Matmul::multiply(bool ta, bool tb, int M, int N, int K, const uint16_t* a,
                          const uint16_t* b, bool accumulate, float* C, bool b_unchanged) {
  return run_pieces(whole(ta, tb, M, N, K, accumulate, false), a, b, nullptr, C, b_unchanged);
}

bool Bf16Matmul::multiply(bool ta, bool tb, int M, int N, int K, const uint16_t* a,
                          const uint16_t* b, bool accumulate, uint16_t* C) {
  return run_pieces(whole(ta, tb, M, N, K, accumulate, true), a, b, nullptr, C);
}

bool Bf16Matmul::multiply_biased(bool ta, bool tb, int M, int N, int K, const uint16_t* a,
                                 const uint16_t* b, const void* bias, Bias type, void* C,
                                 bool c_bf16) {
  return run_pieces(whole(ta, tb, M, N, K, false, c_bf16, type), a, b, bias, C);
}

// Pieces along K into a bf16 C add up in sum_ (C's values first where they accumulate), which
// is rounded into C once at the end: the one rounding of the whole product.
bool Bf16Matmul::run_pieces(const Key& k, const uint16_t* a, const uint16_t* b, const void* bias,
                            void* C, bool b_unchanged) {
  if (!has_kernel(k.ta, k.tb, k.M, k.N, k.K, k.accumulate, k.c_bf16, k.bias)) return false;
  const size_t c_elems = static_cast<size_t>(k.M) * k.N;
  const bool split_k = k.c_bf16 && along(k) == Along::K;
  float* sum = split_k ? static_cast<float*>(sum_.reserve(c_elems * sizeof(float))) : nullptr;
  if (split_k && k.accumulate) from_bf16(sum, static_cast<const uint16_t*>(C), c_elems);
  const size_t c_size = k.c_bf16 && !split_k ? sizeof(uint16_t) : sizeof(float);
  char* c = split_k ? reinterpret_cast<char*>(sum) : static_cast<char*>(C);
  if (!b_unchanged) packed_plan_ = nullptr;  // B's values may have changed since the last call
  const size_t bias_size = k.bias == Bias::Bf16 ? sizeof(uint16_t) : sizeof(float);
  for_pieces(k, [&](const Key& piece, size_t at_a, size_t at_b, size_t at_c, size_t at_bias) {
    run(piece, a + at_a, b + at_b,
        bias ? static_cast<const char*>(bias) + at_bias * bias_size : nullptr,
        c + at_c * c_size);
  });
  if (split_k) to_bf16(static_cast<uint16_t*>(C), sum, c_elems);
  return true;
}

bool Bf16Matmul::run(const Key& key, const uint16_t* a, const uint16_t* b, const void* bias,
                     void* C) {
  Plan& p = plan(key);
  if (!p.bf16) return false;
  try {
    p.a.set_data_handle(const_cast<uint16_t*>(a));  // oneDNN only reads its source operands
    set_b(p, b);
    p.c.set_data_handle(C);
    p.scratchpad.set_data_handle(scratchpad_.reserve(p.scratchpad.get_desc().get_size()));
    if (key.bias != Bias::None) p.bias.set_data_handle(const_cast<void*>(bias));
    p.matmul.execute(stream_, p.args);  // the map's handles share p's memory objects
    stream_.wait();
  } catch (const dnnl::error& e) {
    throw_dnnl(e, "running a bf16 matmul");
  }
  return true;
}

void Bf16Matmul::set_b(Plan& p, const uint16_t* b) {
  if (!p.packs_b) return p.b.set_data_handle(const_cast<uint16_t*>(b));
  // the same size as when packed_plan_ packed it: reserve neither moves nor clears it
  p.b.set_data_handle(packed_b_.reserve(p.b.get_desc().get_size()));
  if (packed_plan_ == &p && packed_source_ == b) return;  // the next piece along M: the same B
  p.b_plain.set_data_handle(const_cast<uint16_t*>(b));
  p.pack.execute(stream_, p.b_plain, p.b);
  packed_plan_ = &p;
  packed_source_ = b;
}

}  // namespace mpitrain::cpu
