// Whole model: 8 training steps (forward, backward, gradient norm, AdamW) of Model<float> on
// CpuBackend<float> and on CudaBackend, both architectures, from the same initial parameters
// (initialised by the CPU model — Model::init writes host memory — and copied to the GPU) on
// the same batches of learnable data (each row a stretch of one periodic sequence, the target
// its next token: on the CPU the loss falls from 5.7 (ln V) to 3.4 in these steps, so a loss
// compared is one that moves). Under bf16 the CPU model keeps its compute tensors in 2 bytes
// where CpuBackend stores them; the GPU in 2 bytes too (its storage under bf16 math) or, in the
// emulated cases, in rounded fp32 containers: the same rounding points either way.
// Token buffers are allocated before seal_memory() and uploaded per step. The llama MoE cases
// (4 experts, top-2, a shared expert; MoE layer's routing host code over staged copies on the
// GPU, model/moe.hpp) compare each step's aux loss too, under the loss's bound.
// Tolerances, relative, per step (not yet measured on a GPU: each case prints its figures, and
// the first GPU run sets them to a few times what it measures):
//   fp32 math: losses and gradient norms 1e-5 (float sums in other orders through 2 layers: the
//     CPU's own layouts differ by 3e-7, tests/e2e/parallel_equivalence.sh); parameters after the
//     steps 3e-3 of the distance they moved, ||p_gpu - p_cpu|| / ||p_cpu - p_0|| (AdamW divides
//     by sqrt(v), so an element whose gradient is ~0 can step by +-lr on either side of a
//     rounding difference: the same bound as parallel_equivalence.sh's)
//   bf16 model precision with bf16 GEMM math: losses and norms 5e-3 (cuDNN's attention keeps P
//     and the gradients in bf16, the CPU's emulation computes attention in fp32: about one bf16
//     rounding, 3.9e-3, of a few terms, averaged over the batch), parameters 5e-2 of the distance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "gpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/optim/optimizer.hpp"

namespace mpitrain {
namespace {

using gpu_testing::DeviceInts;

ModelConfig small(Arch arch, bool moe) {
  ModelConfig c;
  c.set_arch(arch);
  c.n_layer = 2;
  c.n_head = arch == Arch::Llama ? 8 : 4;
  c.n_kv_head = arch == Arch::Llama ? 2 : 4;  // grouped-query attention for llama
  c.d_model = 128;
  c.d_ff = arch == Arch::Llama ? 256 : 512;
  c.vocab_size = 300;  // padded to 384
  c.max_seq_len = 64;
  if (moe) {
    c.n_experts = 4;
    c.top_k = 2;
    c.n_shared_experts = 1;
  }
  return c;
}

struct Case {
  Arch arch;
  KernelSet kernels;
  GemmMath math;
  Precision precision;  // the model's activations and weights
  double tol, param_tol;
  bool gpu_two_byte = true;  // false: the GPU's emulated path (fp32 containers)
  bool moe = false;          // llama with mixture-of-experts layers
};

void train_both(const Case& k) {
  SCOPED_TRACE(to_string(k.arch) + " " + to_string(k.kernels) + "/" + to_string(k.math) +
               (k.gpu_two_byte ? "" : " emulated") + (k.moe ? " moe" : ""));
  const ModelConfig cfg = small(k.arch, k.moe);
  const int B = 4, T = 64, N = B * T, steps = 8;
  ModelOptions mo;
  mo.precision = k.precision;
  OptimizerConfig oc;
  const float lr = 1e-3f, dloss = 1.0f / N;

  CpuBackend<float> cpu(2);
  ModelOptions cpu_mo = mo;  // the CPU's 2-byte path where it has one (the same bits as emulated)
  if (cpu.stores(k.precision)) cpu_mo.storage = k.precision;
  Model<float> cm(cfg, cpu, {}, B, T, 1, nullptr, cpu_mo);
  cm.init(1234);
  CudaOptions o;
  o.kernels = k.kernels;
  o.math = k.math;
  o.workspace_bytes = size_t{256} << 20;
  CudaBackend<float> gpu(o);
  ModelOptions gpu_mo = mo;
  if (k.gpu_two_byte && gpu.stores(k.precision)) gpu_mo.storage = k.precision;
  if (k.gpu_two_byte) {
    ASSERT_TRUE(gpu_mo.storage == cpu_mo.storage) << "the GPU stores what the CPU does";
  }
  Model<float> gm(cfg, gpu, {}, B, T, 1, nullptr, gpu_mo);
  const size_t P = cm.num_params();
  ASSERT_EQ(P, gm.num_params());
  auto cpu_params = [&] {  // the CPU model's compute weights as floats
    std::vector<float> host(P);
    cpu.download(host.data(), cm.params(), P);
    return host;
  };
  const std::vector<float> p0 = cpu_params();
  gpu.upload(gm.params(), p0.data(), P);
  Optimizer co(cpu, cm.layout(), oc, cm.params(), ShardRanges::whole(P), k.precision);
  gpu.set_alloc_kind(cuda::MemoryKind::Optimizer);
  Optimizer go(gpu, gm.layout(), oc, gm.params(), ShardRanges::whole(P), k.precision);
  std::vector<int32_t> tok(N), tgt(N);
  DeviceInts dtok(gpu, tok), dtgt(gpu, tgt);  // before the memory is sealed
  gpu.seal_memory();

  // Token t of the sequence is (7 t + 3) mod 61: a cycle of 61 the model learns to continue.
  std::mt19937 gen(99);
  std::uniform_int_distribution<int> start(0, 60);
  double worst_loss = 0, worst_norm = 0, first_loss = 0, last_loss = 0;
  for (int step = 1; step <= steps; ++step) {
    for (int b = 0; b < B; ++b) {
      const int s = start(gen);
      for (int t = 0; t < T; ++t) {
        tok[b * T + t] = (7 * (s + t) + 3) % 61;
        tgt[b * T + t] = (7 * (s + t + 1) + 3) % 61;
      }
    }
    dtok.upload(tok);
    dtgt.upload(tgt);
    cm.zero_grads();
    gm.zero_grads();
    const double lc = cm.forward(0, tok.data(), tgt.data(), B, T, dloss);
    const double lg = gm.forward(0, dtok.get(), dtgt.get(), B, T, dloss);
    cm.backward(0, tok.data(), B, T);
    gm.backward(0, dtok.get(), B, T);
    const ShardRanges all = ShardRanges::whole(P);
    const double nc = std::sqrt(cm.grad_square_sum(cm.grads(), all));
    const double ng = std::sqrt(gm.grad_square_sum(gm.grads(), all));
    EXPECT_LT(std::abs(lg - lc) / std::abs(lc), k.tol)
        << "step " << step << " loss cpu " << lc << " gpu " << lg;
    EXPECT_LT(std::abs(ng - nc) / nc, k.tol)
        << "step " << step << " grad norm cpu " << nc << " gpu " << ng;
    worst_loss = std::max(worst_loss, std::abs(lg - lc) / std::abs(lc));
    const std::vector<MoeLayerStats> mc = cm.take_moe_stats(), mg = gm.take_moe_stats();
    ASSERT_EQ(mc.size(), mg.size());
    for (size_t i = 0; i < mc.size(); ++i) {
      const double aux = std::abs(mg[i].aux_loss - mc[i].aux_loss) / mc[i].aux_loss;
      EXPECT_LT(aux, k.tol) << "step " << step << " layer " << mc[i].layer << " aux loss cpu "
                            << mc[i].aux_loss << " gpu " << mg[i].aux_loss;
      worst_loss = std::max(worst_loss, aux);
    }
    worst_norm = std::max(worst_norm, std::abs(ng - nc) / nc);
    (step == 1 ? first_loss : last_loss) = lc;
    co.step(cm.grads(), lr, 1.0f);
    go.step(gm.grads(), lr, 1.0f);
  }
  std::vector<float> params(P);
  gpu.download(params.data(), gm.params(), P);
  const std::vector<float> cpu_now = cpu_params();
  double diff2 = 0, moved2 = 0;  // ||p_gpu - p_cpu||^2, ||p_cpu - p_0||^2
  for (size_t i = 0; i < P; ++i) {
    diff2 += std::pow(static_cast<double>(params[i]) - cpu_now[i], 2);
    moved2 += std::pow(static_cast<double>(cpu_now[i]) - p0[i], 2);
  }
  const double param_rel = std::sqrt(diff2 / moved2);
  EXPECT_LT(last_loss, 0.9 * first_loss) << "the data is not being learnt: nothing to compare";
  EXPECT_LT(param_rel, k.param_tol) << "parameters after " << steps << " steps";
  std::printf("measured: loss %.3g, grad norm %.3g, parameters %.3g of the distance moved "
              "(allowed %.3g, %.3g); loss %.4f -> %.4f\n",
              worst_loss, worst_norm, param_rel, k.tol, k.param_tol, first_loss, last_loss);
  for (const std::string& f : gpu.fallbacks()) std::printf("note: %s\n", f.c_str());
  std::printf("%s\n", gpu.memory_report().c_str());
}

TEST(GpuModel, Gpt2Fp32) {
  train_both({Arch::Gpt2, KernelSet::Cudnn, GemmMath::Fp32, Precision::Fp32, 1e-5, 3e-3});
  train_both({Arch::Gpt2, KernelSet::Cuda, GemmMath::Fp32, Precision::Fp32, 1e-5, 3e-3});
}

TEST(GpuModel, LlamaFp32) {
  train_both({Arch::Llama, KernelSet::Cudnn, GemmMath::Fp32, Precision::Fp32, 1e-5, 3e-3});
  train_both({Arch::Llama, KernelSet::Cuda, GemmMath::Fp32, Precision::Fp32, 1e-5, 3e-3});
}

TEST(GpuModel, Gpt2Bf16) {
  train_both({Arch::Gpt2, KernelSet::Cudnn, GemmMath::Bf16, Precision::Bf16, 5e-3, 5e-2});
  train_both({Arch::Gpt2, KernelSet::Cuda, GemmMath::Bf16, Precision::Bf16, 5e-3, 5e-2});
}

TEST(GpuModel, LlamaBf16) {
  train_both({Arch::Llama, KernelSet::Cudnn, GemmMath::Bf16, Precision::Bf16, 5e-3, 5e-2});
  train_both({Arch::Llama, KernelSet::Cuda, GemmMath::Bf16, Precision::Bf16, 5e-3, 5e-2});
}

TEST(GpuModel, MixtureOfExperts) {
  Case fp32{Arch::Llama, KernelSet::Cudnn, GemmMath::Fp32, Precision::Fp32, 1e-5, 3e-3};
  fp32.moe = true;
  train_both(fp32);
  Case bf16{Arch::Llama, KernelSet::Cuda, GemmMath::Bf16, Precision::Bf16, 5e-3, 5e-2};
  bf16.moe = true;
  train_both(bf16);
}

TEST(GpuModel, Bf16EmulatedOnTheGpu) {
  // MPITRAIN_PRECISION_STORAGE=fp32's path: GPU fp32 containers against the CPU's 2-byte tensors
  train_both({Arch::Gpt2, KernelSet::Cudnn, GemmMath::Bf16, Precision::Bf16, 5e-3, 5e-2, false});
  train_both({Arch::Llama, KernelSet::Cuda, GemmMath::Bf16, Precision::Bf16, 5e-3, 5e-2, false});
}

}  // namespace
}  // namespace mpitrain
