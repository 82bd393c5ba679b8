// The communicators of a run, built in one place over the Grid's groups.
//
// Every group (world, tp, dp, pp, cp, and the embedding group of tied wte copies) has an
// MpiCommunicator on host memory: it carries the scalars and small host vectors (the loss, the
// norm's squares, the optimizer's norms, replica hashes, stop requests) and, on the CPU backend,
// the tensors too. On --device cuda the tensors — activations over tp, stage boundaries over pp,
// gradient buckets and ZeRO's ranges over dp, the tied wte gradient over the embedding group,
// context parallelism's ring of K/V blocks and their gradients over cp, expert parallelism's
// routed rows over ep and the expert gradients over expert-dp — go over a data communicator
// chosen by --comm:
//   nccl  an NcclCommunicator per group, on a stream of its own ordered after the backend's
//         (comm/nccl_communicator.hpp); needs a GPU per rank
//   mpi   over the group's host communicator: a CudaAwareMpiCommunicator handing MPI the device
//         pointers where the MPI is CUDA-aware (runtime/mpi.hpp's mpi_cuda_aware), else a
//         StagedMpiCommunicator through pinned buffers sized for the group's largest call
//         (comm/staged_communicator.hpp); ranks may share a GPU
//   auto  nccl unless some node has more ranks than GPUs, then mpi
// A group of one rank never moves tensors (the code skips its calls); its host communicator
// stands in. Example (Grid's 16 ranks, tp 2, pp 4, dp 2; gpt2, --comm nccl): rank 1 holds host
// communicators world, tp [0,1], dp [1,3], pp [1,5,9,13], embedding [1,13], and an NCCL one for
// each of the last four; rank 5, a middle stage, holds host world, tp [4,5], dp [5,7],
// pp [1,5,9,13] and NCCL tp, dp, pp.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/backend/precision.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/model/params.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/runtime/watchdog.hpp"

namespace mpitrain {

enum class CommKind { Mpi, Nccl };
std::string to_string(CommKind kind);
// What carries device tensors for kind, for the start-up line: "mpi (staged through ...)".
std::string describe_device_comm(CommKind kind);

// --comm against the device: cpu takes auto or mpi (the host communicators); cuda resolves auto
// to nccl, or to mpi where `gpus_shared` (some node has more ranks than GPUs). UsageError for
// nccl with shared GPUs, or in a build without NCCL.
CommKind resolve_comm(const std::string& option, const std::string& device, bool gpus_shared);

// The largest blocking call of each group on device data, in bytes, and the staging buffers of
// its started calls: one per call that can be in flight at once, each of that call's bytes (the
// staging pools are sized by them; NCCL needs neither).
struct DataCallSizes {
  size_t tp = 0, dp = 0, pp = 0, embedding = 0, cp = 0, expert_dp = 0;
  std::vector<size_t> dp_started, pp_started, cp_started, ep_started, expert_dp_started;
};

// ZeRO-2/3's sharding for data_call_sizes: level 0 or 1 is none. storage: the compute copy's
// type, in which ZeRO-3 gathers the parameters and ZeRO-2 the updated pieces.
struct ShardedCalls {
  int level = 0;
  Precision storage = Precision::Fp32;
  bool prefetch = true, reshard_after_forward = true;
};

// For a model shard run with micro-batch B of T tokens and `slots` activation slots:
//   tp   the largest of an activation (B T C), the loss statistics (2 B T), and a replicated
//        tensor's gradient (all blocking calls)
//   pp   one activation; started: a send per slot each way and one receive (2 slots + 1)
//   dp   one bucket (bucket_mb, at most the whole gradient); started: every bucket (ZeRO-1
//        gathers all before waiting). ZeRO-2/3: the largest unit, blocking; started:
//        sharded_call_stages. The hybrid replica group's all-reduce of the owned gradients is
//        blocking
//   embedding  the local wte (the tied gradient sum, blocking); 0 without tied embeddings (no
//              data communicator for the group then)
//   cp   the ring attention's message, a packed K/V block or its fp32 dK/dV (B T 2 NKV/tp hs
//        floats, T the rank's rows); started: 4 of them, the most a backward step has in flight
//        (a K/V block each way, the dK/dV accumulator coming in and the last one sent)
//   ep, expert-dp (shard.ep > 1)  the routed rows' exchange (started, one at a time: sent and
//        received rows); the expert gradients' buckets or ZeRO-2/3 segments, and dp's cut at
//        the expert ranges (comm_groups.cpp's expert_call_sizes)
DataCallSizes data_call_sizes(const ModelConfig& config, const ModelShard& shard, int B, int T,
                              int slots, double bucket_mb, const ShardedCalls& sharded = {});

// ZeRO-2/3's started calls on the shard group (train/sharded_units.hpp), in bytes, ascending. Each
// runs on a unit buffer no other call in flight uses, and stages exactly that buffer's unit:
//   reduce-scatters  a gradient buffer (fp32): each outer unit's own, two blocks' in turn
//   ZeRO-3 gathers   a parameter buffer (storage): each outer unit's own and two blocks' in turn
//                    (one without prefetch), or every unit's place when kept gathered
//   ZeRO-2 gathers   after the update, every unit of the whole copy (storage) at once
// so the pool holds one buffer per such unit buffer: ZeRO-3 the gradient and parameter buffers
// together (a backward reduces and gathers at once), ZeRO-2 as many of each size as either set
// has (the update's gathers start only after every reduce-scatter has been waited for).
std::vector<size_t> sharded_call_stages(const ParamLayout& layout, const ShardedCalls& sharded);

class CommGroups {
 public:
  // Collective over world: the host communicators of grid's groups.
  CommGroups(const MpiComm& world, const Grid& grid);
  ~CommGroups();
  CommGroups(const CommGroups&) = delete;
  CommGroups& operator=(const CommGroups&) = delete;

  // --device cuda: the data communicators of every group of more than one rank (collective over
  // world). stream: the backend's cudaStream_t; timeout_s: NCCL's own deadline (0 = none).
  void use_device(CommKind kind, void* stream, const DataCallSizes& sizes, double timeout_s);

  // dp is the gradients' group: dp x cp (Grid::dp_cp), the dp group itself without cp. cp: the
  // ring attention's group (its tensors go over cp_data()).
  MpiCommunicator world, tp, dp, pp, cp;
  std::optional<MpiCommunicator> embedding;
  // Hybrid sharding's groups (runtime/grid.hpp); without it the shard group is dp itself and
  // the replica group is absent.
  std::optional<MpiCommunicator> shard, replica;
  MpiCommunicator& dp_shard() { return shard ? *shard : dp; }
  // Expert parallelism's groups (ep > 1): the token all-to-alls (the counts on the host, the
  // rows over ep_data()), and the expert gradients' sum (over expert_dp_data()).
  std::optional<MpiCommunicator> ep, expert_dp;
  Communicator* ep_data() { return ep_data_; }
  Communicator* expert_dp_data() { return expert_dp_data_; }

  // Where tensors go: the data communicators after use_device, else the host ones.
  Communicator& tp_data() { return *tp_data_; }
  Communicator& dp_data() { return *dp_data_; }
  Communicator& pp_data() { return *pp_data_; }
  Communicator& cp_data() { return *cp_data_; }
  Communicator* embedding_data() { return embedding_data_; }
  Communicator& dp_shard_data() { return shard ? *shard_data_ : *dp_data_; }
  Communicator* dp_replica_data() { return replica ? replica_data_ : nullptr; }
  // The data communicators that carry the data-parallel sync (dp, or the shard and replica
  // groups under hybrid sharding; null where there is no second) and the bytes they sent since
  // their reset.
  std::array<Communicator*, 2> dp_groups();
  uint64_t dp_bytes_sent();

  // For the watchdog: the host call logs, and the NCCL communicators (device work).
  std::vector<const CallLog*> host_logs() const;
  std::vector<DeviceWork*> device_work() const { return device_work_; }
  // Every communicator that blocks the host, each once (an mpi data one includes its host one).
  std::vector<Communicator*> blocking();

 private:
  Communicator* tp_data_;
  Communicator* dp_data_;
  Communicator* pp_data_;
  Communicator* embedding_data_;
  Communicator* cp_data_;
  Communicator* shard_data_ = nullptr;
  Communicator* replica_data_ = nullptr;
  Communicator* ep_data_ = nullptr;
  Communicator* expert_dp_data_ = nullptr;
  std::vector<std::unique_ptr<Communicator>> owned_;  // the data communicators made here
  std::vector<DeviceWork*> device_work_;
  bool wraps_host_ = false;  // the data communicators wrap the host ones (mpi)
};

}  // namespace mpitrain
