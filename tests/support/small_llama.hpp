// The tests' small llama model: 2 layers, 4 heads, 2 kv heads (heads of d_model / 4), dense.
// A test sets the rest (experts, tying, ...) on the copy it gets.
#pragma once

#include "mpitrain/model/config.hpp"

namespace mpitrain::test_models {

inline ModelConfig small_llama(int d_model, int d_ff, int vocab_size, int max_seq_len) {
  ModelConfig c;
  c.set_arch(Arch::Llama);
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.d_model = d_model;
  c.d_ff = d_ff;
  c.vocab_size = vocab_size;
  c.max_seq_len = max_seq_len;
  return c;
}

}  // namespace mpitrain::test_models
