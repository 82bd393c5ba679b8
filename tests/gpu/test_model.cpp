// Whole model: 5 training steps (forward, backward, gradient norm, AdamW) of Model<float> on
// CpuBackend<float> and on CudaBackend, both architectures, from the same initial parameters
// (initialised by the CPU model — Model::init writes host memory — and copied to the GPU) on
// the same batches (tokens copied to device memory for the GPU model).
// Tolerances, relative, per step:
//   fp32 math: losses and gradient norms 1e-4 (float sums in other orders through 2 layers and
//     5 steps); parameters after the steps 2e-3 in the 2-norm (AdamW divides by sqrt(v), so an
//     element whose gradient is ~0 can step by +-lr on either side of a rounding difference)
//   bf16 model precision with bf16 GEMM math: losses and norms 2e-2 (cuDNN's attention keeps P
//     and the gradients in bf16, the CPU's emulation computes attention in fp32), parameters 2e-2.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "gpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/optim/optimizer.hpp"

namespace mpitrain {
namespace {

using gpu_testing::DeviceInts;
using gpu_testing::rel_l2;

ModelConfig small(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = arch == Arch::Llama ? 8 : 4;
  c.n_kv_head = arch == Arch::Llama ? 2 : 4;  // grouped-query attention for llama
  c.d_model = 128;
  c.d_ff = arch == Arch::Llama ? 256 : 512;
  c.vocab_size = 300;  // padded to 384
  c.max_seq_len = 64;
  return c;
}

struct Case {
  Arch arch;
  KernelSet kernels;
  GemmMath math;
  Precision precision;  // the model's activations and weights
  double tol, param_tol;
};

void train_both(const Case& k) {
  SCOPED_TRACE(to_string(k.arch) + " " + to_string(k.kernels) + "/" + to_string(k.math));
  const ModelConfig cfg = small(k.arch);
  const int B = 4, T = 64, N = B * T, steps = 5;
  ModelOptions mo;
  mo.precision = k.precision;
  OptimizerConfig oc;
  const float lr = 1e-3f, dloss = 1.0f / N;

  CpuBackend<float> cpu(2);
  Model<float> cm(cfg, cpu, {}, B, T, 1, nullptr, mo);
  cm.init(1234);
  CudaOptions o;
  o.kernels = k.kernels;
  o.math = k.math;
  o.workspace_bytes = size_t{256} << 20;
  CudaBackend<float> gpu(o);
  Model<float> gm(cfg, gpu, {}, B, T, 1, nullptr, mo);
  const size_t P = cm.num_params();
  ASSERT_EQ(P, gm.num_params());
  gpu.to_device(gm.params(), cm.params(), P * sizeof(float));
  Optimizer co(cpu, cm.layout(), oc, cm.params(), 0, P, k.precision);
  gpu.set_alloc_kind(cuda::MemoryKind::Optimizer);
  Optimizer go(gpu, gm.layout(), oc, gm.params(), 0, P, k.precision);
  gpu.seal_memory();

  std::mt19937 gen(99);
  std::uniform_int_distribution<int32_t> token(0, cfg.vocab_size - 1);
  for (int step = 1; step <= steps; ++step) {
    std::vector<int32_t> tok(N), tgt(N);
    for (int i = 0; i < N; ++i) {
      tok[i] = token(gen);
      tgt[i] = token(gen);
    }
    DeviceInts dtok(gpu, tok), dtgt(gpu, tgt);
    cm.zero_grads();
    gm.zero_grads();
    const double lc = cm.forward(0, tok.data(), tgt.data(), B, T, dloss);
    const double lg = gm.forward(0, dtok.get(), dtgt.get(), B, T, dloss);
    cm.backward(0, tok.data(), B, T);
    gm.backward(0, dtok.get(), B, T);
    const double nc = std::sqrt(cm.grad_square_sum()), ng = std::sqrt(gm.grad_square_sum());
    EXPECT_LT(std::abs(lg - lc) / std::abs(lc), k.tol)
        << "step " << step << " loss cpu " << lc << " gpu " << lg;
    EXPECT_LT(std::abs(ng - nc) / nc, k.tol)
        << "step " << step << " grad norm cpu " << nc << " gpu " << ng;
    co.step(cm.grads(), lr, 1.0f);
    go.step(gm.grads(), lr, 1.0f);
  }
  std::vector<float> params(P);
  gpu.to_host(params.data(), gm.params(), P * sizeof(float));
  const std::vector<float> ref(cm.params(), cm.params() + P);
  EXPECT_LT(rel_l2(params, ref), k.param_tol) << "parameters after " << steps << " steps";
  for (const std::string& f : gpu.fallbacks()) std::printf("note: %s\n", f.c_str());
  std::printf("%s\n", gpu.memory_report().c_str());
}

TEST(GpuModel, Gpt2Fp32) {
  train_both({Arch::Gpt2, KernelSet::Cudnn, GemmMath::Fp32, Precision::Fp32, 1e-4, 2e-3});
  train_both({Arch::Gpt2, KernelSet::Cuda, GemmMath::Fp32, Precision::Fp32, 1e-4, 2e-3});
}

TEST(GpuModel, LlamaFp32) {
  train_both({Arch::Llama, KernelSet::Cudnn, GemmMath::Fp32, Precision::Fp32, 1e-4, 2e-3});
  train_both({Arch::Llama, KernelSet::Cuda, GemmMath::Fp32, Precision::Fp32, 1e-4, 2e-3});
}

TEST(GpuModel, Gpt2Bf16) {
  train_both({Arch::Gpt2, KernelSet::Cudnn, GemmMath::Bf16, Precision::Bf16, 2e-2, 2e-2});
  train_both({Arch::Gpt2, KernelSet::Cuda, GemmMath::Bf16, Precision::Bf16, 2e-2, 2e-2});
}

TEST(GpuModel, LlamaBf16) {
  train_both({Arch::Llama, KernelSet::Cudnn, GemmMath::Bf16, Precision::Bf16, 2e-2, 2e-2});
  train_both({Arch::Llama, KernelSet::Cuda, GemmMath::Bf16, Precision::Bf16, 2e-2, 2e-2});
}

}  // namespace
}  // namespace mpitrain
