#include "mpitrain/train/model_setup.hpp"

#include <algorithm>

#include "mpitrain/model/hf_model.hpp"
#include "mpitrain/model/llmc_model.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

void require_same(const Options& o, const char* name, int set_value, int file_value,
                  const std::string& file) {
  if (std::find(o.model_set.begin(), o.model_set.end(), name) == o.model_set.end()) return;
  require(set_value == file_value, std::string(name) + " = " + std::to_string(set_value) +
                                       " disagrees with the init-from model " + file + " (" +
                                       std::to_string(file_value) + ")");
}

}  // namespace

ModelConfig resolve_model_config(const Options& o, const TokenSource& train_data) {
  ModelConfig m = o.model;
  if (!o.train.init_from.empty()) {
    const std::string& file = o.train.init_from;
    const bool hf = is_hf_dir(file);
    require(hf || m.arch == Arch::Gpt2,
            "init-from: " + file + " is not a Hugging Face directory, and llm.c files hold gpt2 "
            "models: arch must be gpt2");
    ModelConfig f = hf ? read_hf_config(file) : read_llmc_config(file);
    require(!hf || std::find(o.model_set.begin(), o.model_set.end(), "arch") == o.model_set.end() ||
                m.arch == f.arch,
            "arch = " + to_string(m.arch) + " disagrees with the init-from model " + file + " (" +
                to_string(f.arch) + ")");
    require_same(o, "n-layer", m.n_layer, f.n_layer, file);
    require_same(o, "n-head", m.n_head, f.n_head, file);
    require_same(o, "n-kv-head", m.n_kv_head, f.n_kv_head, file);
    require_same(o, "d-model", m.d_model, f.d_model, file);
    require_same(o, "d-ff", m.d_ff, f.d_ff, file);
    require_same(o, "vocab-size", m.vocab_size, f.vocab_size, file);
    require_same(o, "max-seq-len", m.max_seq_len, f.max_seq_len, file);
    if (!hf) f.norm_eps = m.norm_eps;  // llm.c files do not record it
    m = f;
  }
  if (m.vocab_size == 0) {
    require(train_data.vocab_size() > 0,
            train_data.path() + " declares no vocabulary size: set vocab-size");
    m.vocab_size = static_cast<int>(train_data.vocab_size());
  }
  if (m.n_kv_head == 0) m.n_kv_head = m.n_head;
  if (m.d_ff == 0) m.d_ff = default_ffn_width(m.arch, m.d_model);
  if (m.max_seq_len == 0) m.max_seq_len = o.train.seq_len;
  m.validate();
  require(o.train.seq_len <= m.max_seq_len,
          "seq-len " + std::to_string(o.train.seq_len) + " exceeds the model's " +
              std::to_string(m.max_seq_len) + " positions (max-seq-len)");
  require(train_data.vocab_size() <= m.vocab_size,
          train_data.path() + " declares vocab_size " + std::to_string(train_data.vocab_size()) +
              ", more than the model's vocab-size " + std::to_string(m.vocab_size));
  return m;
}

}  // namespace mpitrain
