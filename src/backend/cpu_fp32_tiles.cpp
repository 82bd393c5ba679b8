// CPU backend: the fp32 tiles' choice of vectors and the entry points that follow it
// (cpu_fp32_tiles.hpp); the kernels are cpu_fp32_tiles_avx512.cpp and cpu_fp32_tiles_avx2.cpp.
#include "cpu_fp32_tiles.hpp"

#include "cpu_matmul_bf16.hpp"  // onednn_has

namespace mpitrain::cpu {

Fp32TileIsa fp32_tile_isa() {
  static const Fp32TileIsa isa = [] {
    if (onednn_has(dnnl::cpu_isa::avx512_core)) return Fp32TileIsa::Avx512;
    // oneDNN's avx2 does not imply FMA (a hypervisor may hide it)
    if (onednn_has(dnnl::cpu_isa::avx2) && __builtin_cpu_supports("fma")) return Fp32TileIsa::Avx2;
    return Fp32TileIsa::None;
  }();
  return isa;
}

void transpose_rows(const float* X, size_t ld, int n, int K, float* out) {
  if (fp32_tile_isa() == Fp32TileIsa::Avx512) return avx512::transpose_rows(X, ld, n, K, out);
  avx2::transpose_rows(X, ld, n, K, out);
}

void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  if (fp32_tile_isa() == Fp32TileIsa::Avx512)
    return avx512::fp32_tile_product(m, n, K, a, a_row, a_k, b, ldb, C, ldc, accumulate);
  avx2::fp32_tile_product(m, n, K, a, a_row, a_k, b, ldb, C, ldc, accumulate);
}

}  // namespace mpitrain::cpu
