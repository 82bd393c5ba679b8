#include "mpitrain/train/comm_groups.hpp"

#include <algorithm>
#include <iterator>

#include "mpitrain/backend/buf.hpp"
#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/runtime/error.hpp"
#ifdef MPITRAIN_HAVE_CUDA
#include "mpitrain/comm/cuda_aware_communicator.hpp"
#include "mpitrain/comm/staged_communicator.hpp"
#endif
#ifdef MPITRAIN_HAVE_NCCL
#include "mpitrain/comm/nccl_communicator.hpp"
#endif

namespace mpitrain {

std::string to_string(CommKind kind) { return kind == CommKind::Nccl ? "nccl" : "mpi"; }

std::string describe_device_comm(CommKind kind) {
  if (kind == CommKind::Nccl) return "nccl (a communicator per group, on its own stream)";
  return mpi_cuda_aware() ? "mpi (CUDA-aware: device buffers handed to MPI)"
                          : "mpi (staged through pinned host buffers)";
}

CommKind resolve_comm(const std::string& option, const std::string& device, bool gpus_shared) {
  if (device != "cuda") {
    require(option != "nccl", "--comm nccl needs --device cuda");
    return CommKind::Mpi;
  }
  if (option == "mpi" || (option == "auto" && gpus_shared)) return CommKind::Mpi;
  require(!gpus_shared, "--comm nccl: a node has more ranks than GPUs, and NCCL needs a GPU per "
                        "rank; use --comm mpi (or auto), or fewer ranks per node");
#ifndef MPITRAIN_HAVE_NCCL
  throw UsageError("--comm " + option + " with --device cuda: this build has no NCCL (set "
                   "NCCL_ROOT when configuring); use --comm mpi");
#else
  return CommKind::Nccl;
#endif
}

std::vector<size_t> sharded_call_stages(const ParamLayout& layout, const ShardedCalls& sharded) {
  const std::vector<FlatRange>& units = layout.units();
  std::vector<bool> block(units.size(), false);  // a unit of a layer's tensors, else outer
  for (const ParamTensor& t : layout.tensors())
    if (t.layer >= 0) block[t.unit] = true;
  size_t largest_block = 0;
  for (size_t u = 0; u < units.size(); ++u)
    if (block[u]) largest_block = std::max(largest_block, units[u].size());
  const size_t w = element_bytes<float>(sharded.storage);
  // The unit buffers (in floats) of ShardedUnits that `turns` blocks share.
  const auto buffers = [&](int turns) {
    std::vector<size_t> floats;
    for (size_t u = 0; u < units.size(); ++u)
      if (!block[u]) floats.push_back(units[u].size());
    if (largest_block > 0) floats.insert(floats.end(), turns, largest_block);
    return floats;
  };
  std::vector<size_t> reduces, gathers;  // bytes
  for (size_t n : buffers(2)) reduces.push_back(n * sizeof(float));
  if (sharded.level == 3 && sharded.reshard_after_forward) {
    for (size_t n : buffers(sharded.prefetch ? 2 : 1)) gathers.push_back(n * w);
  } else {  // every unit at once: ZeRO-2's update, ZeRO-3 kept gathered
    for (const FlatRange& unit : units) gathers.push_back(unit.size() * w);
  }
  std::sort(reduces.begin(), reduces.end());
  std::sort(gathers.begin(), gathers.end());
  std::vector<size_t> stages;
  if (sharded.level == 3)
    std::merge(reduces.begin(), reduces.end(), gathers.begin(), gathers.end(),
               std::back_inserter(stages));
  else  // each size as often as the larger of the two sets has it
    std::set_union(reduces.begin(), reduces.end(), gathers.begin(), gathers.end(),
                   std::back_inserter(stages));
  return stages;
}

namespace {

// Expert parallelism's calls (shard.ep > 1) in s: the ep group's row exchange, one at a time,
// sent and received rows staged together (at most rows x K sent, ep times that received); and
// the dense and expert gradients' calls, over dp and expert-dp. ZeRO 0/1: the buckets cut at the
// expert ranges (parallel/grad_sync.hpp), each group's all at once. ZeRO-2/3: each unit buffer's
// call is one per segment (train/sharded_units.hpp): every stage as often as a unit has segments
// of the group, at most.
void expert_call_sizes(DataCallSizes& s, const ParamLayout& layout, size_t rows,
                       const ModelConfig& config, int ep, size_t bucket, int zero_level) {
  const size_t row_bytes = sizeof(float) * config.d_model;
  s.ep_started = {(1 + static_cast<size_t>(ep)) * rows * config.top_k * row_bytes};
  const std::vector<FlatRange> experts = expert_ranges(layout);
  if (zero_level < 2) {
    s.dp = 0;
    s.dp_started.clear();
    for (const GroupSpan& b : gradient_buckets(layout.total(), bucket, experts)) {
      const size_t bytes = sizeof(float) * b.range.size();
      (b.expert ? s.expert_dp_started : s.dp_started).push_back(bytes);
      size_t& largest = b.expert ? s.expert_dp : s.dp;
      largest = std::max(largest, bytes);
    }
    return;
  }
  size_t dense_segments = 1, expert_segments = 0;
  for (const FlatRange& unit : layout.units()) {
    const std::vector<GroupSpan> spans = cut_at_experts(unit, experts);
    const auto expert = static_cast<size_t>(
        std::count_if(spans.begin(), spans.end(), [](const GroupSpan& g) { return g.expert; }));
    expert_segments = std::max(expert_segments, expert);
    dense_segments = std::max(dense_segments, spans.size() - expert);
  }
  const std::vector<size_t> stages = s.dp_started;
  const auto repeated = [&](size_t times) {
    std::vector<size_t> out;
    for (size_t bytes : stages) out.insert(out.end(), times, bytes);
    return out;
  };
  s.dp_started = repeated(dense_segments);
  s.expert_dp_started = repeated(expert_segments);
  s.expert_dp = s.dp;
}

}  // namespace

DataCallSizes data_call_sizes(const ModelConfig& config, const ModelShard& shard, int B, int T,
                              int slots, double bucket_mb, const ShardedCalls& sharded) {
  const ParamLayout layout(config, shard);
  const size_t rows = static_cast<size_t>(B) * T, activation = rows * config.d_model;
  size_t replicated = 0;
  for (const ParamTensor& p : layout.tensors())
    if (p.tp_replicated()) replicated = std::max(replicated, p.numel);
  const size_t bucket_floats = static_cast<size_t>(bucket_mb * (1 << 20)) / sizeof(float);
  const size_t bucket = std::min(layout.total(), std::max<size_t>(1, bucket_floats));
  DataCallSizes s;
  s.tp = sizeof(float) * std::max({activation, 2 * rows, replicated});
  s.pp = sizeof(float) * activation;
  s.pp_started.assign(2 * slots + 1, s.pp);
  if (config.n_experts > 0)  // the all-layers aux loss's counts (train/pipeline_runner.hpp)
    s.pp_started.insert(s.pp_started.end(), 2 * slots + 1, sizeof(float) * 2 * config.n_experts);
  s.dp = sizeof(float) * bucket;
  s.dp_started.assign((layout.total() + bucket - 1) / bucket, s.dp);
  if (sharded.level >= 2) {
    size_t unit = 0;
    for (const FlatRange& u : layout.units()) unit = std::max(unit, u.size());
    s.dp = sizeof(float) * unit;
    s.dp_started = sharded_call_stages(layout, sharded);
  }
  // Only tied copies cross the group (untied, the first and last stage hold different tables),
  // and every member must agree: an NCCL communicator is made by all of them or none.
  s.embedding =
      config.tie_embeddings && layout.has(Slot::Wte) ? sizeof(float) * layout.find("wte").numel : 0;
  s.cp = sizeof(float) * rows * 2 * (config.n_kv_head / shard.tp) * config.head_size();
  s.cp_started.assign(4, s.cp);
  if (shard.ep > 1) expert_call_sizes(s, layout, rows, config, shard.ep, bucket, sharded.level);
  return s;
}

CommGroups::CommGroups(const MpiComm& world_comm, const Grid& grid)
    : world(world_comm.get(), "world"),
      tp(grid.tp().get(), "tp"),
      dp(grid.dp_cp().get(), "dp"),
      pp(grid.pp().get(), "pp"),
      cp(grid.cp().get(), "cp"),
      tp_data_(&tp),
      dp_data_(&dp),
      pp_data_(&pp),
      embedding_data_(nullptr),
      cp_data_(&cp) {
  if (grid.embedding()) {
    embedding.emplace(grid.embedding()->get(), "embedding");
    embedding_data_ = &*embedding;
  }
  if (grid.shard_size() < grid.shape().dp * grid.shape().cp) {
    shard.emplace(grid.dp_shard().get(), "dp-shard");
    replica.emplace(grid.dp_replica().get(), "dp-replica");
    shard_data_ = &*shard;
    replica_data_ = &*replica;
  }
  if (grid.shape().ep > 1) {
    ep.emplace(grid.ep().get(), "ep");
    expert_dp.emplace(grid.expert_dp().get(), "expert-dp");
    ep_data_ = &*ep;
    expert_dp_data_ = &*expert_dp;
  }
}

CommGroups::~CommGroups() = default;

void CommGroups::use_device([[maybe_unused]] CommKind kind, [[maybe_unused]] void* stream,
                            [[maybe_unused]] const DataCallSizes& sizes,
                            [[maybe_unused]] double timeout_s) {
#ifndef MPITRAIN_HAVE_CUDA
  MPITRAIN_THROW("device communicators: this build has no CUDA");
#else
  auto* compute = static_cast<cudaStream_t>(stream);
  // One group: its data communicator over host communicator `host` (size 1: the host one).
  // max_bytes, started: the staging pool (the blocking calls' buffer, the started calls').
  auto make = [&](MpiCommunicator& host, size_t max_bytes,
                  const std::vector<size_t>& started) -> Communicator* {
    if (host.size() == 1) return &host;
#ifdef MPITRAIN_HAVE_NCCL
    if (kind == CommKind::Nccl) {
      auto nccl = std::make_unique<NcclCommunicator>(host.mpi(), host.calls().name() + "/nccl",
                                                     compute, timeout_s);
      device_work_.push_back(nccl.get());
      owned_.push_back(std::move(nccl));
      return owned_.back().get();
    }
#endif
    wraps_host_ = true;  // either kind counts its host communicator's blocked time
    if (mpi_cuda_aware())
      owned_.push_back(
          std::make_unique<CudaAwareMpiCommunicator>(host, compute, max_bytes, started));
    else
      owned_.push_back(
          std::make_unique<StagedMpiCommunicator>(host, compute, max_bytes, started));
    return owned_.back().get();
  };
  tp_data_ = make(tp, sizes.tp, {});
  // Under hybrid sharding the shard group starts the data-parallel calls, not the whole group.
  dp_data_ = make(dp, sizes.dp, shard ? std::vector<size_t>{} : sizes.dp_started);
  pp_data_ = make(pp, sizes.pp, sizes.pp_started);
  if (embedding && sizes.embedding > 0) embedding_data_ = make(*embedding, sizes.embedding, {});
  cp_data_ = make(cp, sizes.cp, sizes.cp_started);
  if (shard) shard_data_ = make(*shard, sizes.dp, sizes.dp_started);
  if (replica) replica_data_ = make(*replica, sizes.dp, {});
  if (ep) ep_data_ = make(*ep, 0, sizes.ep_started);
  if (expert_dp) expert_dp_data_ = make(*expert_dp, sizes.expert_dp, sizes.expert_dp_started);
#endif
}

std::array<Communicator*, 2> CommGroups::dp_groups() {
  if (shard) return {shard_data_, replica_data_};
  return {dp_data_, nullptr};
}

uint64_t CommGroups::dp_bytes_sent() {
  uint64_t bytes = 0;
  for (Communicator* c : dp_groups())
    if (c) bytes += c->bytes_sent();
  return bytes;
}

std::vector<const CallLog*> CommGroups::host_logs() const {
  std::vector<const CallLog*> logs = {&world.calls(), &tp.calls(), &dp.calls(), &pp.calls(),
                                      &cp.calls()};
  if (embedding) logs.push_back(&embedding->calls());
  if (shard) logs.push_back(&shard->calls());
  if (replica) logs.push_back(&replica->calls());
  if (ep) logs.push_back(&ep->calls());
  if (expert_dp) logs.push_back(&expert_dp->calls());
  return logs;
}

std::vector<Communicator*> CommGroups::blocking() {
  std::vector<Communicator*> all;
  // An mpi data communicator's blocked time includes its host one's: count it instead.
  auto add = [&](MpiCommunicator* host, Communicator* data) {
    all.push_back(data != host && wraps_host_ ? data : static_cast<Communicator*>(host));
    if (data != host && !wraps_host_) all.push_back(data);
  };
  all.push_back(&world);
  add(&tp, tp_data_);
  add(&dp, dp_data_);
  add(&pp, pp_data_);
  add(&cp, cp_data_);
  if (embedding) add(&*embedding, embedding_data_);
  if (shard) add(&*shard, shard_data_);
  if (replica) add(&*replica, replica_data_);
  if (ep) add(&*ep, ep_data_);
  if (expert_dp) add(&*expert_dp, expert_dp_data_);
  return all;
}

}  // namespace mpitrain
