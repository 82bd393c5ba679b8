// The machine's bf16 matrix-multiply rate: the peak that a bf16 (or fp16) run's MFU is measured
// against on a CPU with bf16 instructions (AVX512-BF16, AMX: oneDNN picks its kernels itself).
#pragma once

#include <functional>
#include <vector>

#include "mpitrain/backend/sgemm_rate.hpp"

namespace mpitrain {

// The bf16 peak's product, oneDNN's brgemm matmul: its name in the peak cache's "gemm" field
// (", B packed": time_bf16_gemm_trials' B; entries measured with a reorder a call do not match).
inline constexpr const char* kBf16GemmLibrary = "oneDNN bf16 matmul, B packed";

// Whether the CPU backend runs bf16 products on bf16 instructions here (oneDNN's effective ISA,
// capped by ONEDNN_MAX_CPU_ISA, includes avx512_core_bf16).
bool cpu_bf16_gemms();

// `trials` timed n x n x n bf16 products (bf16 operands read in place, fp32 accumulation and
// result; 2n^3 flops a call) after one warm-up call, with the current OpenMP thread count, as
// time_sgemm_trials; none where cpu_bf16_gemms() is false. B is packed into the layout the
// kernel reads once, in the warm-up call: the peak is the kernel's rate, not that of a reorder
// before each product (which measured 784 against 895 GFLOP/s: 1024^3, 2 threads, AMD EPYC
// Zen 5), nor that of the jit gemm the backend runs on large products (cpu_matmul_bf16.hpp),
// which packs inside every call (780-800 GFLOP/s there, after its first calls).
std::vector<SgemmTrial> time_bf16_gemm_trials(int n, int trials,
                                              const std::function<void()>& between = {});

}  // namespace mpitrain
