#include "mpitrain/train/device_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

#ifdef MPITRAIN_HAVE_CUDA
#include "mpitrain/backend/cuda/device.hpp"
#endif
#include "mpitrain/model/model.hpp"
#include "mpitrain/monitor/memory.hpp"
#include "mpitrain/planner/inputs.hpp"
#include "mpitrain/planner/memory_fit.hpp"
#include "mpitrain/planner/micro_batch_auto.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/device.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

DeviceSetup setup_devices(const TrainConfig& t, const Grid& grid, const MpiComm& world) {
  DeviceSetup setup;
  const bool root = world.rank() == 0;
  if (t.device != "cuda") {
    all_or_none(world, [&] { setup.comm = resolve_comm(t.comm, t.device, false); });
    return setup;
  }
  DeviceChoice choice;
  all_or_none(world, [&] { choice = select_device(grid.local_rank(), grid.local_size()); });
  setup.device = choice.device;
  int shared = choice.shared ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_INT, MPI_MAX, world.get()));
  DeviceInfo mine;
  all_or_none(world, [&] { mine = device_info(world.rank()); });
  const std::vector<DeviceInfo> table = gather_device_table(mine, world.get());
  if (root) {
    std::printf("%s", format_device_table(table).c_str());
    if (choice.shared) std::printf("%s\n", choice.note.c_str());
  }
  all_or_none(world, [&] { setup.comm = resolve_comm(t.comm, t.device, shared != 0); });

  // Power: one meter per GPU, on the first of the ranks that share it (local rank < visible).
  const bool meters = grid.local_rank() < choice.visible;
  std::string reason;
  if (meters) {
    auto power = std::make_unique<NvmlPower>(mine.pci_bus_id);
    if (power->available()) setup.power = std::move(power);
    else reason = power->reason();
  }
  int everywhere = !meters || setup.power ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &everywhere, 1, MPI_INT, MPI_MIN, world.get()));
  setup.power_everywhere = everywhere != 0;
  if (root)
    std::printf("comm: %s | energy: %s\n", describe_device_comm(setup.comm).c_str(),
                setup.power_everywhere ? "NVML, every GPU"
                : reason.empty()       ? "NVML missing on some rank: not reported"
                                       : ("not reported: " + reason).c_str());
  std::fflush(stdout);
  return setup;
}

#ifdef MPITRAIN_HAVE_CUDA
CudaOptions cuda_options(const TrainConfig& t, Precision precision, const DeviceSetup& devices) {
  CudaOptions c;
  c.device = devices.device;
  c.kernels = parse_kernel_set(t.kernels);
  c.math = precision == Precision::Bf16   ? GemmMath::Bf16
           : precision == Precision::Fp16 ? GemmMath::Fp16
           : t.tf32                       ? GemmMath::Tf32
                                          : GemmMath::Fp32;
  c.workspace_bytes = static_cast<size_t>(t.gpu_workspace_mb * (1 << 20));
  return c;
}
#endif

namespace {

// What a rank may fill: --device-memory-gib, else the GPU's free memory now less `reserved`
// (cuda), else the host's available memory shared by the `local_size` ranks on it.
double memory_per_rank(const TrainConfig& t, int local_size, [[maybe_unused]] double reserved) {
  if (t.device_memory_gib > 0) return t.device_memory_gib * (1 << 30);
#ifdef MPITRAIN_HAVE_CUDA
  if (t.device == "cuda") return std::max(0.0, cuda::free_device_memory() - reserved);
#endif
  return available_memory_bytes() / local_size;
}

const char* budget_source(const TrainConfig& t) {
  return t.device_memory_gib > 0 ? "--device-memory-gib"
         : t.device == "cuda"    ? "the smallest over the ranks of the GPU's free memory less "
                                   "--gpu-workspace-mb"
                                 : "the smallest over the ranks of the host's available memory, "
                                   "or its cgroup's room if less, shared by its ranks";
}

}  // namespace

void check_memory_fits(const TrainConfig& t, const ModelConfig& cfg, const GridShape& shape,
                       const std::vector<int>& stage_first_layer, const MpiComm& world) {
  const MpiComm node = world.split_shared();
  double bytes = 0;
  all_or_none(world, [&] {
#ifdef MPITRAIN_HAVE_CUDA
    if (t.device == "cuda" && t.device_memory_gib == 0) select_device(node.rank(), node.size());
#endif
    bytes = memory_per_rank(t, node.size(), t.gpu_workspace_mb * (1 << 20));
  });
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_DOUBLE, MPI_MIN, world.get()));
  const Layout layout{shape.dp, shape.tp, shape.pp, t.micro_batch_size, t.zero,
                      parse_recompute(t.recompute), t.zero3_reshard_after_forward,
                      t.zero >= 2 ? t.zero_shard_size : 0};
  all_or_none(world, [&] {
    const std::string misfit = memory_misfit(cfg, run_shape_of(t, t.device == "cuda"), layout,
                                             stage_first_layer, bytes, budget_source(t));
    require(misfit.empty(), misfit);
  });
}

int resolve_micro_batch(const TrainConfig& t, const ModelConfig& cfg, const GridShape& shape,
                        const Grid& grid, const MpiComm& world) {
  if (t.micro_batch_size > 0) return t.micro_batch_size;
  const bool gpu = t.device == "cuda";
  double bytes = 0;
  all_or_none(world, [&] { bytes = memory_per_rank(t, grid.local_size(), 0.0); });
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_DOUBLE, MPI_MIN, world.get()));
  const Layout layout{shape.dp, shape.tp, shape.pp, 0, t.zero, parse_recompute(t.recompute),
                      t.zero3_reshard_after_forward, t.zero >= 2 ? t.zero_shard_size : 0};
  MicroBatchPlan plan;
  all_or_none(world, [&] {
    plan = plan_micro_batch(cfg, run_shape_of(t, gpu), layout, bytes, 0.10);
    require(plan.micro_batch > 0, plan.text + ": use a smaller model, seq-len or more ranks");
  });
  if (world.rank() == 0) std::printf("%s\n", plan.text.c_str()), std::fflush(stdout);
  return plan.micro_batch;
}

}  // namespace mpitrain
