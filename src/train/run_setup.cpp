#include "mpitrain/train/run_setup.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpitrain/parallel/pipeline_schedule.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/dir_lock.hpp"
#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

int resolve_threads(int requested, const char* omp_num_threads, int usable_cpus) {
  if (requested > 0) return requested;
  // OpenMP's form "4" or, for nested levels, "4,2": the outer level is the rank's threads.
  const std::string_view env = omp_num_threads ? omp_num_threads : "";
  int from_env = 0;
  std::from_chars(env.data(), env.data() + env.size(), from_env);
  return from_env > 0 ? from_env : std::max(1, usable_cpus);
}

void check_token_ids(const Dataset* train, const Dataset* val, int vocab_size,
                     const MpiComm& world) {
  std::vector<const TokenSource*> files;
  for (const Dataset* d : {train, val})
    if (d)
      for (const auto& f : d->files()) files.push_back(f.get());
  uint64_t total = 0;
  for (const TokenSource* f : files) total += f->size();
  const uint64_t per = (total + world.size() - 1) / world.size();
  const uint64_t mine = per * world.rank(), mine_end = std::min(total, mine + per);
  // Per file, over this rank's share: the largest token id, and the largest loss-mask byte.
  std::vector<uint32_t> max_ids(2 * files.size(), 0);
  all_or_none(world, [&] {
    uint64_t first = 0;  // the file's first token in the whole sequence
    for (size_t i = 0; i < files.size(); first += files[i++]->size()) {
      const uint64_t begin = std::max(mine, first);
      const uint64_t end = std::min(mine_end, first + files[i]->size());
      if (begin >= end) continue;
      max_ids[i] = max_token(*files[i], begin - first, end - first);
      if (files[i]->has_loss_mask())
        max_ids[files.size() + i] = max_loss_mask(*files[i], begin - first, end - first);
    }
  });
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, max_ids.data(), static_cast<int>(max_ids.size()),
                          MPI_UINT32_T, MPI_MAX, world.get()));
  const uint32_t* max_mask = max_ids.data() + files.size();
  for (size_t i = 0; i < files.size(); ++i) {
    require(max_ids[i] < static_cast<uint32_t>(vocab_size),
            files[i]->path() + " holds token id " + std::to_string(max_ids[i]) +
                ", not below vocab-size " + std::to_string(vocab_size) +
                (files.size() > 1 ? " (every file of a list shares the vocabulary)" : ""));
    require(max_mask[i] <= 1,
            files[i]->path() + ": /loss_mask holds " + std::to_string(max_mask[i]) +
                "; a loss mask holds 1 (the token is scored as a target) or 0 (it is not)");
  }
  size_t first = 0;  // each dataset's first file in `files`
  for (const auto& [d, option] : {std::pair{train, "train-data"}, std::pair{val, "val-data"}}) {
    if (!d) continue;
    const size_t n = d->files().size();
    require(d->loss_masked_files() < n ||
                std::any_of(max_mask + first, max_mask + first + n, [](uint32_t m) { return m; }),
            "--" + std::string(option) + ": the /loss_mask of every file is 0 throughout: no " +
                "target is scored, so there is nothing to " +
                (d == train ? "train on" : "evaluate"));
    first += n;
  }
}

void check_tensor_parallel(const ModelConfig& m, int tp) {
  auto divides = [&](int value, const char* name) {
    require(value % tp == 0, std::string(name) + " (" + std::to_string(value) +
                                 ") is not divisible by tp (" + std::to_string(tp) + ")");
  };
  divides(m.n_head, "n-head");
  divides(m.n_kv_head, "n-kv-head");
  if (m.moe_layers(0, m.n_layer) < m.n_layer) divides(m.d_ff, "d-ff");  // some layer is dense
  // MoE layers: the shared experts are split like a dense MLP; the router and routed experts
  // are whole on every tp rank.
  divides(m.n_experts > 0 ? m.n_shared_experts * m.expert_width() : 0,
          "the shared experts' width n-shared-experts x expert width");
  divides(m.padded_vocab(), "the padded vocabulary");
}

void check_sequence_parallel(const TrainConfig& t, int tp) {
  if (!t.sequence_parallel) return;
  require(tp > 1, "--sequence-parallel needs tp > 1 (it splits the tp group's rows)");
  require(t.seq_len % tp == 0, "--sequence-parallel: seq-len " + std::to_string(t.seq_len) +
                                   " is not divisible by tp " + std::to_string(tp));
}

std::string layout_problem(const ModelConfig& m, int tp, int pp, const std::string& pp_layers) {
  try {
    check_tensor_parallel(m, tp);
    pipeline_layer_split(m.n_layer, pp, pp_layers);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

LayoutFilter layouts_the_model_admits(const Options& o) {
  const bool resume_from_file = !o.train.resume.empty() && o.train.resume != "auto";
  if (!o.train.init_from.empty() || resume_from_file) return {};
  ModelConfig m = o.model;  // the defaults resolve_model_config fills
  if (m.n_kv_head == 0) m.n_kv_head = m.n_head;
  if (m.d_ff == 0) m.d_ff = default_ffn_width(m.arch, m.d_model);
  return [m, pp_layers = o.train.pp_layers](const GridShape& s) {
    return layout_problem(m, s.tp, s.pp, pp_layers).empty();
  };
}

void check_out_dir(const Options& o, bool resuming) {
  const TrainConfig& t = o.train;
  std::error_code ec;
  if (!t.overwrite && !resuming)
    for (const fs::directory_entry& e : fs::directory_iterator(t.out_dir, ec))
      require(e.path().filename() == DirLock::kFileName,
              "out-dir " + t.out_dir + " already holds files; pass --overwrite or choose another");
  require(!ec, "cannot list out-dir " + t.out_dir + ": " + ec.message());
  for (const std::string& file : {t.export_llmc, t.export_params})
    require(file.empty() || !fs::exists(file, ec) || t.overwrite || resuming,
            file + " exists; pass --overwrite or choose another export file");
}

void write_out_dir(const Options& o, const std::string& run_ini, bool resuming) {
  const TrainConfig& t = o.train;
  const fs::path dir(t.out_dir);
  std::error_code ec;
  if (t.overwrite && !resuming) fs::remove_all(dir / "checkpoints", ec);
  std::ofstream ini(dir / "run.ini");
  require(static_cast<bool>(ini << run_ini), "cannot write " + (dir / "run.ini").string());
}

}  // namespace mpitrain
