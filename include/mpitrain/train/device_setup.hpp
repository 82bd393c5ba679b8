// A run's devices at start-up: which GPU each rank takes, the table of them, --comm, power
// readings, and --micro-batch-size auto. Collective over world; a failure on any rank stops all
// alike (UsageError, exit 2) before any work.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mpitrain/backend/precision.hpp"
#ifdef MPITRAIN_HAVE_CUDA
#include "mpitrain/backend/cuda_backend.hpp"
#endif
#include "mpitrain/model/config.hpp"
#include "mpitrain/monitor/nvml_power.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/train/comm_groups.hpp"
#include "mpitrain/train/train_config.hpp"

namespace mpitrain {

struct DeviceSetup {
  CommKind comm = CommKind::Mpi;
  // --device cuda: this rank's GPU among the visible ones (DeviceChoice::device), the one its
  // backend must take (cuda_options); -1 on the CPU.
  int device = -1;
  // --device cuda: this rank's GPU power meter where NVML loads and this rank is the first of the
  // ranks sharing its GPU (so each GPU is counted once); null otherwise.
  std::unique_ptr<NvmlPower> power;
  bool power_everywhere = false;  // every GPU of the job has a meter: energy can be reported
};

// --device cpu: resolves --comm (auto or mpi). --device cuda: each rank takes GPU
// local rank % visible (runtime/device.hpp); rank 0 prints every rank's host, GPU and PCI bus id
// as one table, and how ranks share GPUs; --comm auto becomes nccl unless some node shares.
DeviceSetup setup_devices(const TrainConfig& t, const Grid& grid, const MpiComm& world);

#ifdef MPITRAIN_HAVE_CUDA
// The CUDA backend's options for this rank: the GPU setup_devices chose, the GEMM math from
// --precision (TF32 by --tf32), --kernels, --gpu-workspace-mb.
CudaOptions cuda_options(const TrainConfig& t, Precision precision, const DeviceSetup& devices);
#endif

// Before any allocation: the planned memory of this rank's share of the model (planner/
// memory_fit.hpp; parameters, gradients, optimizer state, activations at the micro-batch, or at 1
// for auto) against what a rank has — --device-memory-gib, else its share of its GPU's free memory
// (divided among the ranks of its node on that GPU, planner/micro_batch_auto.hpp device_share)
// less --gpu-workspace-mb (its GPU is selected for that), else the host's available memory (or
// its cgroup's room) shared by the ranks on it — the smallest over the world. UsageError with the
// plan and what would fit otherwise.
void check_memory_fits(const TrainConfig& t, const ModelConfig& cfg, const GridShape& shape,
                       const std::vector<int>& stage_first_layer, const MpiComm& world);

// --micro-batch-size auto: the largest micro-batch whose planned memory (planner/memory.hpp,
// balanced stages) fits 90% of the memory per rank — --device-memory-gib, else its share of its
// GPU's free memory now (after the CUDA context and the backend's workspace; divided among the
// ranks on that GPU, which a line before the plan says), else on the CPU the node's available
// memory shared by its ranks — the smallest over the world. Prints the plan on rank 0.
// UsageError when not even a micro-batch of 1 fits. Returns t.micro_batch_size when it is set.
// node: this rank's host's ranks (world.split_shared()).
int resolve_micro_batch(const TrainConfig& t, const ModelConfig& cfg, const GridShape& shape,
                        const MpiComm& node, const MpiComm& world);

}  // namespace mpitrain
