// The checkpoint's host copies (train/checkpoint_mirror.hpp) over a 2-byte compute copy: a
// load's params are fp32 host values, the master and the optimizer state host copies; its values
// go back into the 2-byte copy rounded; a save's copies are the master and the state alone.
// Under ZeRO-3 the copies cover the rank's unit pieces. The CPU backend stands in for a device:
// the mirror only calls upload / download.
#include <gtest/gtest.h>

#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/train/checkpoint_mirror.hpp"

using namespace mpitrain;

namespace {

ModelConfig tiny_model() {
  ModelConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.d_model = 8;
  c.d_ff = 16;
  c.vocab_size = 10;
  c.max_seq_len = 4;
  return c;
}

}  // namespace

TEST(CheckpointMirror, CarriesATwoByteComputeCopyAsFp32) {
  const ModelConfig c = tiny_model();
  const ParamLayout layout(c);
  const size_t n = layout.total();
  CpuBackend<float> backend(1, Precision::Bf16);
  const Buf<float> params = backend.alloc(n, Precision::Bf16);
  Optimizer optimizer(backend, layout, {}, params, ShardRanges::whole(n), Precision::Bf16);
  const CheckpointState device =
      checkpoint_state(c, layout, params.full(), ShardRanges::whole(n), optimizer, true);
  ASSERT_EQ(device.params, nullptr);  // nothing fp32 to point at without the mirror
  CheckpointMirror load(backend, device, params, MirrorUse::Load);
  CheckpointState& state = load.host();
  ASSERT_NE(state.params, nullptr);
  ASSERT_NE(state.master, state.params);  // the master has a host copy of its own
  for (size_t i = 0; i < n; ++i) {        // what a load leaves: fp32 values, master unrounded
    state.params[i] = 1.0f + 0.001f * static_cast<float>(i);
    state.master[i] = state.params[i];
  }
  load.upload();
  std::vector<float> back(n);
  backend.download(back.data(), params, n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(back[i], round_to(state.params[i], Precision::Bf16)) << i;
  EXPECT_EQ(optimizer.master()[1], state.params[1]);  // the master took the unrounded values
  CheckpointMirror save(backend, device, params, MirrorUse::Save);  // what a save writes
  EXPECT_EQ(save.host().params, nullptr);
  save.download();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(save.host().master[i], state.master[i]) << i;
  backend.free(params.data());
}

// ZeRO-3: params, master and state cover rank 1 of 2's piece of every unit (compact); the fp32
// master is the params' own host copy, the bf16 one a copy of its own; a load's values reach
// the compute copy (rounded), the master (not) and the state, and a save's come back.
TEST(CheckpointMirror, CarriesZero3UnitPieces) {
  const ModelConfig c = tiny_model();
  const ParamLayout layout(c);
  std::vector<FlatRange> pieces;
  for (const FlatRange& unit : layout.units()) {
    const FlatRange piece = zero_range(unit.size(), 2, 1);
    pieces.push_back({unit.lo + piece.lo, unit.lo + piece.hi});
  }
  const ShardRanges held(pieces);
  const size_t n = held.size();
  ASSERT_GT(n, 0u);
  ASSERT_LT(n, layout.total());
  for (Precision p : {Precision::Fp32, Precision::Bf16}) {
    CpuBackend<float> backend(1, p);
    const Buf<float> params = backend.alloc(n, p);
    const std::vector<float> zeros(n, 0.0f);
    backend.upload(params, zeros.data(), n);
    Optimizer optimizer(backend, layout, {}, params, held, p);
    const CheckpointState device =
        checkpoint_state(c, layout, params.full(), held, optimizer, true);
    EXPECT_EQ(device.separate_master, p != Precision::Fp32);
    CheckpointMirror load(backend, device, params, MirrorUse::Load);
    CheckpointState& state = load.host();
    EXPECT_EQ(state.master == state.params, p == Precision::Fp32);
    for (size_t i = 0; i < n; ++i) {  // what a load leaves
      state.params[i] = 1.0f + 0.001f * static_cast<float>(i);
      state.master[i] = state.params[i];
      for (float* b : state.state) b[i] = -static_cast<float>(i);
    }
    load.upload();
    std::vector<float> back(n);
    backend.download(back.data(), params, n);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(back[i], round_to(state.params[i], p)) << i;
      ASSERT_EQ(optimizer.master()[i], state.params[i]) << i;
      for (float* b : optimizer.state()) ASSERT_EQ(b[i], -static_cast<float>(i)) << i;
    }
    CheckpointMirror save(backend, device, params, MirrorUse::Save);
    save.download();
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(save.host().master[i], state.params[i]) << i;  // unrounded
      for (float* b : save.host().state) ASSERT_EQ(b[i], -static_cast<float>(i)) << i;
    }
    backend.free(params.data());
  }
}
