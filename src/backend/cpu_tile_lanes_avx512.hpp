// Private helper of the CPU backend's attention tiles: the AVX-512 vectors of the tile product
// (cpu_tile_product.hpp), 16 fp32 lanes in 32 registers, for cpu_fp32_tiles_avx512.cpp and
// cpu_bf16_tiles.cpp. Included after their target pragma, like cpu_tile_product.hpp (they include
// <immintrin.h> and <utility> before it).
#pragma once

namespace mpitrain::cpu {
namespace {

struct Avx512Lanes {
  static constexpr int kCount = 16;   // fp32 lanes of a vector
  static constexpr int kVectors = 4;  // the most vectors of columns in a block
  // a block's rows for nv vectors: its nv x rows sums in 24 of the 32 registers
  static constexpr int rows(int nv) { return nv <= 2 ? 12 : nv == 3 ? 8 : 6; }

  using Mask = __mmask16;
  using Sums = __m512;
  using Words = __m512i;
  // the mask of the first n lanes (none for n <= 0, all for n >= 16)
  static Mask first(int n) {
    return static_cast<Mask>(n >= 16 ? 0xFFFFu : n <= 0 ? 0u : (1u << n) - 1u);
  }
  static Sums zero() { return _mm512_setzero_ps(); }
  static Sums load(const float* p) { return _mm512_loadu_ps(p); }
  static Sums load(const float* p, Mask k) { return _mm512_maskz_loadu_ps(k, p); }
  static void store(float* p, Sums x) { _mm512_storeu_ps(p, x); }
  static void store(float* p, Mask k, Sums x) { _mm512_mask_storeu_ps(p, k, x); }
  static Sums add(Sums a, Sums b) { return _mm512_add_ps(a, b); }
  static Sums broadcast(float x) { return _mm512_set1_ps(x); }
  static Sums fma(Sums a, Sums b, Sums s) { return _mm512_fmadd_ps(a, b, s); }  // s + a b
  static Words zero_words() { return _mm512_setzero_si512(); }
  static Words load_words(const void* p, Mask k) { return _mm512_maskz_loadu_epi32(k, p); }
  static void store_words(void* p, Words w) { _mm512_storeu_si512(p, w); }
  // rows r[0, 16) of 32-bit words transposed in place, in four steps
  static void transpose(Words r[16]) {
    transpose_step<8>(r);
    transpose_step<4>(r);
    transpose_step<2>(r);
    transpose_step<1>(r);
  }

 private:
  // The word indices of step B (permutex2var: 16 + c is the second row's word c): a pair's top
  // row keeps its words c without B and takes the bottom row's c - B for those with; the bottom
  // row takes the top's c + B and keeps those with. Constants, built from C = 0..15.
  template <int B, int... C>
  static __m512i swap_top(std::integer_sequence<int, C...>) {
    return reinterpret_cast<__m512i>(__v16si{((C & B) ? 16 + C - B : C)...});
  }
  template <int B, int... C>
  static __m512i swap_bottom(std::integer_sequence<int, C...>) {
    return reinterpret_cast<__m512i>(__v16si{((C & B) ? 16 + C : C + B)...});
  }
  // Step B: in every 2B x 2B block the off-diagonal B x B blocks swap (the top right takes the
  // bottom left's words and the other way), rows i and i + B at a time.
  template <int B>
  static void transpose_step(Words r[16]) {
    const auto words = std::make_integer_sequence<int, 16>{};
    const __m512i top = swap_top<B>(words), bottom = swap_bottom<B>(words);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      if (i & B) continue;
      const __m512i t = _mm512_permutex2var_epi32(r[i], top, r[i + B]);
      r[i + B] = _mm512_permutex2var_epi32(r[i], bottom, r[i + B]);
      r[i] = t;
    }
  }
};

}  // namespace
}  // namespace mpitrain::cpu
