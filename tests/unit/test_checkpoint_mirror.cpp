// The checkpoint's host copies (train/checkpoint_mirror.hpp) over a 2-byte compute copy: the
// state's params become fp32 host values, the master and the optimizer state host copies; a
// load's values go back into the 2-byte copy rounded, and a save's come out widened. The CPU
// backend stands in for a device: the mirror only calls upload / download.
#include <gtest/gtest.h>

#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/train/checkpoint_mirror.hpp"

using namespace mpitrain;

TEST(CheckpointMirror, CarriesATwoByteComputeCopyAsFp32) {
  ModelConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.d_model = 8;
  c.d_ff = 16;
  c.vocab_size = 10;
  c.max_seq_len = 4;
  const ParamLayout layout(c);
  const size_t n = layout.total();
  CpuBackend<float> backend(1, Precision::Bf16);
  const Buf<float> params = backend.alloc(n, Precision::Bf16);
  Optimizer optimizer(backend, layout, {}, params, 0, n, Precision::Bf16);
  CheckpointState state = checkpoint_state(c, layout, params.full(), optimizer, true);
  ASSERT_EQ(state.params, nullptr);  // nothing fp32 to point at without the mirror
  CheckpointMirror mirror(backend, state, params);
  ASSERT_NE(state.params, nullptr);
  ASSERT_NE(state.master, state.params);  // the master has a host copy of its own
  for (size_t i = 0; i < n; ++i) {        // what a load leaves: fp32 values, master unrounded
    state.params[i] = 1.0f + 0.001f * static_cast<float>(i);
    state.master[i] = state.params[i];
  }
  mirror.upload();
  std::vector<float> back(n);
  backend.download(back.data(), params, n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(back[i], round_to(state.params[i], Precision::Bf16)) << i;
  EXPECT_EQ(optimizer.master()[1], state.params[1]);  // the master took the unrounded values
  for (size_t i = 0; i < n; ++i) state.params[i] = -1.0f;
  mirror.download();
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(state.params[i], back[i]) << i;
  backend.free(params.data());
}
