// Private helper of the CPU backend's attention tiles: the AVX2 vectors of the tile product
// (cpu_tile_product.hpp), 8 fp32 lanes in 16 registers, for cpu_fp32_tiles_avx2.cpp. Included
// after its target pragma, like cpu_tile_product.hpp.
#pragma once

namespace mpitrain::cpu {
namespace {

struct Avx2Lanes {
  static constexpr int kCount = 8;    // fp32 lanes of a vector
  static constexpr int kVectors = 2;  // the most vectors of columns in a block
  // a block's rows for nv vectors: its nv x rows sums in 12 of the 16 registers
  static constexpr int rows(int nv) { return nv == 1 ? 12 : 6; }

  using Mask = __m256i;  // a lane's word all ones where it is in
  using Sums = __m256;
  using Words = __m256i;
  // the mask of the first n lanes (none for n <= 0, all for n >= 8)
  static Mask first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Sums zero() { return _mm256_setzero_ps(); }
  static Sums load(const float* p) { return _mm256_loadu_ps(p); }
  static Sums load(const float* p, Mask k) { return _mm256_maskload_ps(p, k); }
  static void store(float* p, Sums x) { _mm256_storeu_ps(p, x); }
  static void store(float* p, Mask k, Sums x) { _mm256_maskstore_ps(p, k, x); }
  static Sums add(Sums a, Sums b) { return _mm256_add_ps(a, b); }
  static Sums broadcast(float x) { return _mm256_set1_ps(x); }
  static Sums fma(Sums a, Sums b, Sums s) { return _mm256_fmadd_ps(a, b, s); }  // s + a b
  static Words zero_words() { return _mm256_setzero_si256(); }
  static Words load_words(const void* p, Mask k) {
    return _mm256_maskload_epi32(static_cast<const int*>(p), k);
  }
  static void store_words(void* p, Words w) { _mm256_storeu_si256(static_cast<__m256i*>(p), w); }
  // rows r[0, 8) of 32-bit words transposed in place: pairs of rows interleaved, then pairs of
  // those, then the 128-bit halves exchanged
  static void transpose(Words r[8]) {
    __m256 t[8], s[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
      t[i] = _mm256_unpacklo_ps(_mm256_castsi256_ps(r[i]), _mm256_castsi256_ps(r[i + 1]));
      t[i + 1] = _mm256_unpackhi_ps(_mm256_castsi256_ps(r[i]), _mm256_castsi256_ps(r[i + 1]));
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {
      s[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
      s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
      s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
      s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      r[i] = _mm256_castps_si256(_mm256_permute2f128_ps(s[i], s[i + 4], 0x20));
      r[i + 4] = _mm256_castps_si256(_mm256_permute2f128_ps(s[i], s[i + 4], 0x31));
    }
  }
};

}  // namespace
}  // namespace mpitrain::cpu
