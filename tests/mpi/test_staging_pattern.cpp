// ranks: 2
// The staging pool of ZeRO-2/3's started calls (train/comm_groups.hpp sharded_call_stages) holds
// what ShardedUnits really has in flight: a Communicator that stages as StagedMpiCommunicator
// does (the same bytes per call, the smallest free buffer it fits, an Error when none is free)
// carries the shard group of a lent Model through two steps of two micro-batches and the
// updates, for gpt2 and llama, ZeRO-2 and ZeRO-3 with prefetch and resharding on and off, fp32 and
// bf16 storage, the whole model and a pipeline stage. The CPU stands in for the device.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/comm_groups.hpp"
#include "mpitrain/train/sharded_units.hpp"

using namespace mpitrain;

namespace {

constexpr int kBatch = 2, kSeq = 8;

// MpiCommunicator's calls through a simulated pool of staging buffers of the given bytes.
class PoolCommunicator final : public Communicator {
 public:
  PoolCommunicator(MpiCommunicator& mpi, std::vector<size_t> sizes)
      : mpi_(mpi), sizes_(std::move(sizes)), busy_(sizes_.size(), false) {}
  size_t most_in_flight() const { return most_; }

  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  void all_reduce(float* d, size_t n, ReduceOp op) override { mpi_.all_reduce(d, n, op); }
  void all_reduce(double* d, size_t n, ReduceOp op) override { mpi_.all_reduce(d, n, op); }
  void all_reduce(int64_t* d, size_t n, ReduceOp op) override { mpi_.all_reduce(d, n, op); }
  void all_reduce(uint16_t* d, size_t n, Precision t, ReduceOp op) override {
    mpi_.all_reduce(d, n, t, op);
  }
  void broadcast(void* d, size_t bytes, int root) override { mpi_.broadcast(d, bytes, root); }
  void barrier() override { mpi_.barrier(); }
  void all_gather(const float* in, float* out, size_t n) override { mpi_.all_gather(in, out, n); }
  void reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) override {
    mpi_.reduce_scatter(in, out, n, op);
  }
  void all_gather(const uint16_t* in, uint16_t* out, size_t n) override {
    mpi_.all_gather(in, out, n);
  }
  void reduce_scatter(const uint16_t* in, uint16_t* out, size_t n, Precision dtype,
                      ReduceOp op) override {
    mpi_.reduce_scatter(in, out, n, dtype, op);
  }
  CommHandle all_reduce_start(float* d, size_t n, ReduceOp op) override {
    const int slot = acquire(n * sizeof(float));
    return started(slot, mpi_.all_reduce_start(d, n, op));
  }
  CommHandle send_start(const float*, size_t, int, int) override { return unexpected(); }
  CommHandle recv_start(float*, size_t, int, int) override { return unexpected(); }
  CommHandle send_start(const uint16_t*, size_t, int, int) override { return unexpected(); }
  CommHandle recv_start(uint16_t*, size_t, int, int) override { return unexpected(); }
  CommHandle all_to_all_start(const void*, void*, size_t) override { return unexpected(); }
  CommHandle all_gather_start(const void*, void*, size_t) override { return unexpected(); }
  CommHandle all_to_allv_start(const void*, std::span<const size_t>, void*,
                               std::span<const size_t>) override {
    return unexpected();
  }
  CommHandle reduce_scatter_start(float* d, std::span<const size_t> counts,
                                  ReduceOp op) override {  // stages the sum of the counts
    const int slot = acquire(total(counts) * sizeof(float));
    return started(slot, mpi_.reduce_scatter_start(d, counts, op));
  }
  CommHandle all_gather_start(float* d, std::span<const size_t> counts) override {
    const int slot = acquire(total(counts) * sizeof(float));
    return started(slot, mpi_.all_gather_start(d, counts));
  }
  CommHandle all_gather_start(uint16_t* d, std::span<const size_t> counts) override {
    const int slot = acquire(total(counts) * sizeof(uint16_t));
    return started(slot, mpi_.all_gather_start(d, counts));
  }
  void wait(CommHandle h) override {
    mpi_.wait(h);
    busy_[slot_of_.at(h.id)] = false;
    slot_of_.erase(h.id);
  }
  void progress() override { mpi_.progress(); }
  double blocked_seconds() const override { return mpi_.blocked_seconds(); }
  void reset_blocked_seconds() override { mpi_.reset_blocked_seconds(); }
  uint64_t bytes_sent() const override { return mpi_.bytes_sent(); }
  void reset_bytes_sent() override { mpi_.reset_bytes_sent(); }

 private:
  static size_t total(std::span<const size_t> c) {
    return std::accumulate(c.begin(), c.end(), 0ul);
  }
  CommHandle unexpected() { MPITRAIN_THROW("a call ShardedUnits does not start"); }
  int acquire(size_t bytes) {  // as StagedMpiCommunicator::acquire
    int best = -1;
    for (size_t i = 0; i < sizes_.size(); ++i)
      if (!busy_[i] && sizes_[i] >= bytes && (best < 0 || sizes_[i] < sizes_[best]))
        best = static_cast<int>(i);
    if (best < 0) MPITRAIN_THROW("no free staging buffer of " + std::to_string(bytes) + " bytes");
    busy_[best] = true;
    return best;
  }
  CommHandle started(int slot, CommHandle h) {
    slot_of_[h.id] = slot;
    most_ = std::max(most_, slot_of_.size());
    return h;
  }

  MpiCommunicator& mpi_;
  std::vector<size_t> sizes_;
  std::vector<bool> busy_;
  std::map<int, int> slot_of_;  // handle id -> buffer
  size_t most_ = 0;
};

ModelConfig four_blocks(Arch arch) {  // blocks taking their two buffers in turn twice
  ModelConfig c;
  c.set_arch(arch);
  c.n_layer = 4;
  c.n_head = 2;
  c.n_kv_head = arch == Arch::Llama ? 1 : 2;
  c.d_model = 8;
  c.d_ff = 16;
  c.vocab_size = 50;
  c.max_seq_len = kSeq;
  return c;
}

// Two steps of two micro-batches of a lent Model over the simulated pool, and the updates; the
// most calls that were in flight at once.
size_t run_steps(Arch arch, const ShardedCalls& calls, const ModelShard& stage) {
  const ModelConfig cfg = four_blocks(arch);
  CpuBackend<float> backend(1);
  MpiCommunicator mpi(MPI_COMM_WORLD);
  const ModelOptions options{calls.storage, Recompute::None, calls.storage, true, calls.level == 3};
  Model<float> model(cfg, backend, stage, kBatch, kSeq, 1, nullptr, options);
  PoolCommunicator pool(mpi, sharded_call_stages(model.layout(), calls));
  ShardedUnits sharded(backend, model.layout(), pool, nullptr, calls.storage,
                       {calls.level, calls.reshard_after_forward, calls.prefetch},
                       calls.level == 2 ? model.params() : Buf<float>());
  model.set_lender(&sharded);
  if (calls.level == 2)
    model.init(5);
  else
    initial_tensors<float>(cfg, model.layout(), 5,
                           [&](const ParamTensor& t, const float* v) { sharded.set_tensor(t, v); });
  std::vector<int32_t> tokens(kBatch * kSeq), targets(kBatch * kSeq);
  const size_t nc = static_cast<size_t>(kBatch) * kSeq * cfg.d_model;
  const std::vector<float> boundary(nc, 0.01f);
  for (int step = 0; step < 2; ++step) {
    sharded.zero_grads();
    for (int m = 0; m < 2; ++m) {
      for (int i = 0; i < kBatch * kSeq; ++i) {
        tokens[i] = (i * 7 + m * 5 + mpi.rank()) % cfg.vocab_size;
        targets[i] = (i * 3 + m + 1) % cfg.vocab_size;
      }
      if (!stage.first_stage) backend.upload(model.input(0), boundary.data(), nc);
      model.forward(0, tokens.data(), targets.data(), kBatch, kSeq, 1.0f / (kBatch * kSeq));
      if (!stage.last_stage) backend.upload(model.output_grad(), boundary.data(), nc);
      model.backward(0, tokens.data(), kBatch, kSeq);
    }
    sharded.finish();
    sharded.params_updated();
  }
  return pool.most_in_flight();
}

}  // namespace

TEST(StagingPattern, ShardedUnitsNeverFindTheirPoolFull) {
  CpuBackend<float> probe(1);
  std::vector<Precision> storages = {Precision::Fp32};
  if (probe.stores(Precision::Bf16)) storages.push_back(Precision::Bf16);
  for (Arch arch : {Arch::Gpt2, Arch::Llama})
    for (const ModelShard& stage : {ModelShard{}, ModelShard{1, 0, 2, 4, false, true}})
      for (Precision storage : storages)
        for (int level : {2, 3})
          for (bool prefetch : {true, false})
            for (bool reshard : {true, false}) {
              if (level == 2 && !(prefetch && reshard)) continue;  // ZeRO-3's options
              const ShardedCalls calls{level, storage, prefetch, reshard};
              SCOPED_TRACE(std::string(arch == Arch::Gpt2 ? "gpt2" : "llama") + " ZeRO-" +
                           std::to_string(level) + (prefetch ? " prefetch" : "") +
                           (reshard ? " reshard" : " keep") +
                           (storage == Precision::Fp32 ? " fp32" : " bf16") +
                           (stage.first_stage ? " whole" : " last stage"));
              size_t most = 0;
              EXPECT_NO_THROW(most = run_steps(arch, calls, stage));
              EXPECT_GT(most, 1u);  // calls did overlap: the pool was exercised
            }
}
