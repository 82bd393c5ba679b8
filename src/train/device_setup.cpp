#include "mpitrain/train/device_setup.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
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

// How many ranks of `node` use this rank's GPU (the same PCI bus id: right also where a
// launcher gives each rank its own CUDA_VISIBLE_DEVICES); 1 on the CPU and under
// --device-memory-gib. Collective over world (node: its ranks on this host); the GPU is selected.
int ranks_on_device([[maybe_unused]] const TrainConfig& t, [[maybe_unused]] const MpiComm& node,
                    [[maybe_unused]] const MpiComm& world) {
  int ranks = 1;
#ifdef MPITRAIN_HAVE_CUDA
  if (t.device != "cuda" || t.device_memory_gib > 0) return ranks;
  char mine[32] = {};  // "0000:3B:00.0"
  all_or_none(world, [&] {
    select_device(node.rank(), node.size());
    std::snprintf(mine, sizeof mine, "%s", device_info(world.rank()).pci_bus_id.c_str());
  });
  std::vector<char> ids(sizeof mine * node.size());
  MPI_CHECK(MPI_Allgather(mine, sizeof mine, MPI_CHAR, ids.data(), sizeof mine, MPI_CHAR,
                          node.get()));
  ranks = 0;
  for (int r = 0; r < node.size(); ++r)
    ranks += std::strncmp(ids.data() + r * sizeof mine, mine, sizeof mine) == 0;
#endif
  return ranks;
}

// What a rank may fill: --device-memory-gib, else its share of its GPU's free memory now among
// the `on_device` ranks that use it, less `reserved` (cuda), else the host's available memory
// shared by the `local_size` ranks on it.
double memory_per_rank(const TrainConfig& t, int local_size, [[maybe_unused]] int on_device,
                       [[maybe_unused]] double reserved) {
  if (t.device_memory_gib > 0) return t.device_memory_gib * (1 << 30);
#ifdef MPITRAIN_HAVE_CUDA
  if (t.device == "cuda") return device_share(cuda::free_device_memory(), on_device, reserved);
#endif
  return available_memory_bytes() / local_size;
}

// Where memory_per_rank's figure comes from; most_on_device: the most ranks on one GPU.
std::string budget_source(const TrainConfig& t, int most_on_device) {
  if (t.device_memory_gib > 0) return "--device-memory-gib";
  if (t.device != "cuda")
    return "the smallest over the ranks of the host's available memory, or its cgroup's room if "
           "less, shared by its ranks";
  return "the smallest over the ranks of the GPU's free memory" +
         (most_on_device > 1 ? " shared by the up to " + std::to_string(most_on_device) +
                                   " ranks on one GPU"
                             : std::string()) +
         " less --gpu-workspace-mb";
}

// The smallest memory_per_rank over the world, and the most ranks on one GPU (both agreed).
struct Budget {
  double bytes = 0;
  int most_on_device = 1;
};
Budget agreed_budget(const TrainConfig& t, const MpiComm& node, const MpiComm& world,
                     double reserved) {
  const int on_device = ranks_on_device(t, node, world);
  double figures[2] = {0.0, static_cast<double>(on_device)};
  all_or_none(world, [&] { figures[0] = -memory_per_rank(t, node.size(), on_device, reserved); });
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, figures, 2, MPI_DOUBLE, MPI_MAX, world.get()));
  return {-figures[0], static_cast<int>(figures[1])};
}

}  // namespace

void check_memory_fits(const TrainConfig& t, const ModelConfig& cfg, const GridShape& shape,
                       const std::vector<int>& stage_first_layer, const MpiComm& world) {
  const MpiComm node = world.split_shared();
  const Budget budget = agreed_budget(t, node, world, t.gpu_workspace_mb * (1 << 20));
  const Layout layout{shape.dp, shape.tp, shape.pp, t.micro_batch_size, t.zero,
                      parse_recompute(t.recompute), t.zero3_reshard_after_forward,
                      t.zero >= 2 ? t.zero_shard_size : 0, t.sequence_parallel, shape.cp, shape.ep};
  all_or_none(world, [&] {
    const std::string misfit =
        memory_misfit(cfg, run_shape_of(t, t.device == "cuda"), layout, stage_first_layer,
                      budget.bytes, budget_source(t, budget.most_on_device));
    require(misfit.empty(), misfit);
  });
}

int resolve_micro_batch(const TrainConfig& t, const ModelConfig& cfg, const GridShape& shape,
                        const MpiComm& node, const MpiComm& world) {
  if (t.micro_batch_size > 0) return t.micro_batch_size;
  const bool gpu = t.device == "cuda";
  const Budget budget = agreed_budget(t, node, world, 0.0);
  const Layout layout{shape.dp, shape.tp, shape.pp, 0, t.zero, parse_recompute(t.recompute),
                      t.zero3_reshard_after_forward, t.zero >= 2 ? t.zero_shard_size : 0,
                      t.sequence_parallel, shape.cp, shape.ep};
  MicroBatchPlan plan;
  all_or_none(world, [&] {
    plan = plan_micro_batch(cfg, run_shape_of(t, gpu), layout, budget.bytes);
    require(plan.micro_batch > 0, plan.text + ": use a smaller model, seq-len or more ranks");
  });
  if (world.rank() == 0) {
    if (budget.most_on_device > 1)
      std::printf("memory per rank: a GPU's free memory shared by the up to %d ranks on it\n",
                  budget.most_on_device);
    std::printf("%s\n", plan.text.c_str());
    std::fflush(stdout);
  }
  return plan.micro_batch;
}

}  // namespace mpitrain
