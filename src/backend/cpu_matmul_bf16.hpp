// Private to the CPU backend: bf16 matrix products through oneDNN. bf16 operands are read where
// they lie; operands in float containers are converted to bf16 (exact where they hold bf16
// values: their low 16 bits are zero) into scratch buffers. oneDNN's matmul multiplies them with
// fp32 accumulation into an fp32 result, or into a bf16 one (the fp32 sum rounded once, to nearest
// even: the bits of the fp32 result rounded by round_to).
//
// One primitive per shape (M, N, K, transpositions, accumulate, result type), created on first
// use and kept. A bias row (bf16 or fp32, added to every row of C) goes to oneDNN as the matmul's
// bias, added to the finished fp32 sum before the one rounding (the bits of C pre-filled with the
// bias and a sum post-op, which reads C back and ran 5-8% slower: GPT-2 small's qkv forward, 2
// threads, AMD EPYC Zen 5, 751-761 against 699-721 GFLOP/s). A product whose largest dimension
// exceeds 4 chunks (the head's vocabulary: GPT-2's 50304) runs as pieces of `chunk` along it,
// strided views of the operands: oneDNN 2.6 runs it whole at 0.7-0.9x the rate of the pieces
// (GPT-2 small's head, 1 thread, GFLOP/s per CPU second on Zen 5: dinp 268-286 whole vs 385-391
// in pieces, dW 304-309 vs 336-379, forward 330-350 vs 370-374); pieces along K add up in fp32
// scratch, rounded once into a bf16 C (a bias is then left to the caller).
// Two of oneDNN's kernels run bf16 products on a CPU without AMX: its brgemm, the library's first
// choice, and its jit gemm ("gemm:jit"), which packs both operands inside the call as a BLAS
// does. Where every dimension is at least kJitGemmMin the jit gemm runs (jit_gemm_pays): on
// GPT-2 small's layers at 1024 tokens it took 9% less time than the brgemm with B packed first
// (oneDNN alone, 2 threads, AMD EPYC Zen 5; 8% at 1 thread, 6% at 512 and 4096 tokens), and a
// bf16 training step 4% less (bench/README.md); at 256 rows it lost up to 17% on some shapes (256
// x 1024 x 1024). With AMX (avx512_core_amx) the brgemm runs AMX tiles, which the jit gemm does
// not use: brgemm everywhere. The choice depends on the shape and the ISA alone, never on a
// timing, so a CPU gives the same bits run after run. A product of our own on attention's
// VDPBF16PS tiles (cpu_bf16_tiles.hpp; B packed per 64 columns and 512 k, A's rows read in place)
// was tried and not kept: it ran GPT-2 small's forward and dinp shapes at the jit gemm's rate
// (740-790 against 714-805 GFLOP/s, 2 threads, both in one process, Zen 5) and the head's dinp
// (K 50304) at 0.82x of the brgemm.
// For the brgemm, a B stored untransposed ((K,N) rows: the backward's W in dinp, its inp in dW)
// is packed into the layout its kernel reads by a reorder of its own before the product, once a
// call (pieces along M share it), rather than inside the matmul: the same bits, and 8-14% off
// the product (GPT-2 small's backward shapes, 2 threads, Zen 5: qkv dW 6.2 -> 5.5 ms plus a 0.19
// ms reorder, fc dinp 7.0 -> 6.3 plus 0.55). A transposed B (the forward's W^T) stays in place:
// its reorder transposes, and packing it made the trainer's forward products 5-13% slower.
// The scratch buffers (both operands, the packed B and oneDNN's scratchpad, which it is told to
// take from us) grow to the largest shape seen, so repeated shapes allocate nothing of their own.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "cpu_storage.hpp"

namespace mpitrain::cpu {

// Whether oneDNN's effective ISA here (ONEDNN_MAX_CPU_ISA caps it) includes every feature of
// `need` (the ISA values are bit sets): the bf16 kernels, and which sgemm runs (cpu_gemm.cpp).
inline bool onednn_has(dnnl::cpu_isa need) {
  const auto bits = static_cast<unsigned>(need);
  return (static_cast<unsigned>(dnnl::get_effective_cpu_isa()) & bits) == bits;
}

// Whether a bf16 product of M x N x K runs oneDNN's jit gemm rather than its brgemm (above): no
// AMX, and every dimension at least kJitGemmMin.
inline constexpr int kJitGemmMin = 512;
constexpr bool jit_gemm_pays(int M, int N, int K, bool amx) {
  return !amx && M >= kJitGemmMin && N >= kJitGemmMin && K >= kJitGemmMin;
}

class Bf16Matmul {
 public:
  // Which of oneDNN's kernels the products run: ByShape as jit_gemm_pays says (the backend's);
  // Brgemm always (the bf16 peak: brgemm on a B packed once is the fastest product here).
  enum class Kernels { ByShape, Brgemm };
  // The CPU engine and stream; finds whether the CPU has bf16 instructions. chunk: the pieces'
  // length (tests make it small); pack_b: pack an untransposed B first (false: tests compare).
  explicit Bf16Matmul(int chunk = kChunk, bool pack_b = true, Kernels kernels = Kernels::ByShape);
  static constexpr int kChunk = 4096;

  bool native() const { return native_; }  // avx512_bf16 (or AMX) present and enabled
  // Held now by the operands' bf16 copies, the packed B, the fp32 sums and oneDNN's scratchpad.
  size_t scratch_bytes() const {
    return a_.bytes() + b_.bytes() + scratchpad_.bytes() + sum_.bytes() + packed_b_.bytes();
  }
  // The name of the oneDNN implementation that runs C(M,N) = op(A) op(B) (contiguous operands;
  // of its first piece where it goes in pieces): "gemm:jit", "brg:avx512_core_bf16", ...; empty
  // where no bf16 kernel runs it. Plans the product as multiply would.
  std::string kernel(bool ta, bool tb, int M, int N, int K, bool accumulate = false,
                     bool c_bf16 = false);

  // C(M,N) = op(A)(M,K) @ op(B)(K,N) (+ C when accumulate); row-major and contiguous, A stored
  // (K,M) when ta, B stored (N,K) when tb. Returns false, with C untouched, where no bf16 kernel
  // runs this shape (no bf16 instructions, or oneDNN has only reference code): the caller then
  // runs sgemm; said once on stderr. oneDNN failures throw Error with the library's message.
  // a_unchanged: A's values have not changed since the previous call; if that call converted
  // the same A (pointer and size), its bf16 copy is reused (matmul_backward's dout).
  bool multiply(bool ta, bool tb, int M, int N, int K, const float* A, const float* B,
                bool accumulate, float* C, bool a_unchanged = false);
  // The same on operands that are bf16 bits (operand_a / operand_b). b_unchanged: B's values
  // have not changed since the previous call; if that call packed the same B for the same shape,
  // the packed copy is reused (the bf16 peak: the kernel's rate with B in its own layout).
  bool multiply(bool ta, bool tb, int M, int N, int K, const uint16_t* A, const uint16_t* B,
                bool accumulate, float* C, bool b_unchanged = false);
  // The same into a bf16 C (accumulate: C's values are added in fp32 before the one rounding).
  bool multiply(bool ta, bool tb, int M, int N, int K, const uint16_t* A, const uint16_t* B,
                bool accumulate, uint16_t* C);
  // C(M,N) = A B + bias (a row of N elements stored as `type` says) into a bf16 or fp32 C
  // (c_bf16), overwritten.
  enum class Bias { None, Bf16, Fp32 };
  bool multiply_biased(bool ta, bool tb, int M, int N, int K, const uint16_t* A, const uint16_t* B,
                       const void* bias, Bias type, void* C, bool c_bf16);
  // Whether multiply runs a bf16 kernel for this shape (creating its primitive); c_bf16: into a
  // bf16 C; bias: none, or a bias row stored in bf16 or fp32 (never with pieces along K).
  bool has_kernel(bool ta, bool tb, int M, int N, int K, bool accumulate, bool c_bf16 = false,
                  Bias bias = Bias::None);
  // The n elements of an operand as bf16 bits: itself where it is bf16 already, else its floats
  // converted into scratch (A's copy reused where a_unchanged and it is the same A, as above).
  const uint16_t* operand_a(const void* A, bool is_bf16, size_t n, bool a_unchanged);
  const uint16_t* operand_b(const void* B, bool is_bf16, size_t n);

 private:
  struct Key {
    int M, N, K;
    bool ta, tb, accumulate, c_bf16;
    int lda, ldb, ldc;  // row strides: A (K,M) rows when ta, B (N,K) rows when tb, C's
    Bias bias;
    auto operator<=>(const Key&) const = default;
  };
  // A whole product: contiguous operands.
  static Key whole(bool ta, bool tb, int M, int N, int K, bool accumulate, bool c_bf16,
                   Bias bias = Bias::None) {
    return {M, N, K, ta, tb, accumulate, c_bf16, ta ? M : K, tb ? K : N, N, bias};
  }
  // The dimension a product is split along: its longest, where that exceeds 4 chunks.
  enum class Along { None, M, N, K };
  Along along(const Key& k) const;
  // f(piece, A offset, B offset, C offset, bias offset) (offsets in elements) over the pieces of
  // k: k itself where no dimension exceeds 4 chunks; pieces along K accumulate after the first,
  // into fp32.
  template <class F>
  void for_pieces(const Key& k, F&& f) const;
  struct Plan {
    bool bf16 = false;  // false: oneDNN has no bf16 kernel for this shape (sgemm instead)
    std::string kernel;  // oneDNN's name for the implementation
    dnnl::matmul matmul;
    dnnl::memory a, b, c, bias, scratchpad;  // descriptors only; the pointers are set per call
    std::unordered_map<int, dnnl::memory> args;  // the handles above by argument, built once
    bool packs_b = false;  // b is oneDNN's layout, filled from the caller's B by `pack`
    dnnl::reorder pack;    // b_plain -> b
    dnnl::memory b_plain;  // B as the caller stores it
  };

  Plan& plan(const Key& key);
  // one primitive; bias: k.bias's row (null without)
  bool run(const Key& key, const uint16_t* a, const uint16_t* b, const void* bias, void* c);
  bool run_pieces(const Key& key, const uint16_t* a, const uint16_t* b, const void* bias, void* c,
                  bool b_unchanged = false);
  // p's B: the caller's b, or b packed into packed_b_ (not again for the plan and b packed last)
  void set_b(Plan& p, const uint16_t* b);
  void say_fallback(const char* why);

  dnnl::engine engine_;
  dnnl::stream stream_;
  int chunk_;
  bool pack_b_;
  Kernels kernels_;
  bool native_ = false;
  bool amx_ = false;  // oneDNN runs AMX tiles here
  bool said_fallback_ = false;
  std::map<Key, Plan> plans_;
  ScratchBuffer a_, b_, scratchpad_, sum_;  // sum_: the fp32 C of pieces along K into a bf16 C
  ScratchBuffer packed_b_;
  const Plan* packed_plan_ = nullptr;  // packed_b_ holds packed_source_ in this plan's layout,
  const uint16_t* packed_source_ = nullptr;  // within one run_pieces call (or b_unchanged)
  const float* a_source_ = nullptr;         // the previous call's A, if a_ holds its bf16 copy
  size_t a_count_ = 0;
};

}  // namespace mpitrain::cpu
