// Private to the CPU backend: the blocked sgemm of products on 2-byte (or 2-byte-valued) tensors
// where no bf16 kernel runs. Tiles of op(A), op(B) and, where C is 2-byte, C are widened into
// fp32 scratch; one gemm per tile. The tiling depends only on (M, N, K), never on the operands'
// storage types, so fp32 containers of rounded values and 2-byte tensors give the same bits.
#pragma once

#include "cpu_storage.hpp"
#include "mpitrain/backend/buf.hpp"

namespace mpitrain::cpu {

// Elements of one tile of A, B or C: 16 MiB of floats each (the three slots: up to 49 MiB of
// scratch, grown only as far as a product needs). Each tile is one sgemm call, which packs its
// operands anew, the held one too (GPT-2's head: 50 calls with 4 MiB tiles, 13 with these).
// GPT-2 small's products at 1024 tokens over fp32's time (`storage-gemm`, the ways in turn; AMD
// EPYC Zen 3, 2 threads, four runs each): on OpenBLAS Zen, the library's choice there, fp16
// 1.06-1.11x -> 1.01-1.04x, bf16 without bf16 instructions 1.08-1.12x -> 1.02-1.07x; with
// OpenBLAS Haswell forced no gain (1.05-1.06x before, 1.05-1.09x after; two runs each).
inline constexpr size_t kTileElems = size_t{1} << 22;

// A tile's row stride in the scratch: its width, 16 more where that is a multiple of 1024 (rows
// 4 KiB apart fall on the same cache sets: GPT-2 small's head forward on fp16, 1024-column tiles
// of C, took 1.17-1.27x fp32's time with them, 1.11-1.13x padded; AMD EPYC Zen 5, 2 threads).
inline int tile_ld(int width) { return width % 1024 == 0 ? width + 16 : width; }
// The scratch a tile takes with its padding: rows x width <= kTileElems, padded only where the
// width is 1024 or more, so at most kTileElems / 1024 rows of 16 more.
inline constexpr size_t kTileScratchElems = kTileElems + 16 * (kTileElems / 1024);

// The tile sizes for C(M,N) = op(A)(M,K) op(B)(K,N): rows of op(A), columns of op(B), and the
// K chunk, each a whole dimension or a multiple of 16, and every tile within kTileElems.
struct Tiling {
  int m, n, k;
};
Tiling tiling(int M, int N, int K);

// C(M,N) = op(A) op(B) (+ C when accumulate) as CpuBackend::product (cpu_backend.hpp), in tiles
// of tiling(M, N, K); C rounded to its type. Outer loop over the larger operand's tiles, so with
// the smaller operand's dimension in one tile (up to kTileElems / 16) each of its tiles is
// converted once; a K split accumulates in the fp32 C tile. A product in one tile runs side by
// side on `threads` threads where that pays (cpu_side_by_side.hpp), as the fp32 path's would.
template <typename T>
void blocked_product(Staging& staging, int threads, bool ta, bool tb, int M, int N, int K,
                     CBuf<T> A, CBuf<T> B, bool accumulate, Buf<T> C);

}  // namespace mpitrain::cpu
