#include "mpitrain/train/run_setup.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

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

uint32_t local_max_token(const TokenSource* src, const MpiComm& world) {
  if (src == nullptr || src->size() == 0) return 0;
  const uint64_t n = src->size(), per = (n + world.size() - 1) / world.size();
  const uint64_t begin = std::min(n, per * world.rank()), end = std::min(n, begin + per);
  return begin < end ? max_token(*src, begin, end) : 0;
}

void check_tensor_parallel(const ModelConfig& m, int tp) {
  auto divides = [&](int value, const char* name) {
    require(value % tp == 0, std::string(name) + " (" + std::to_string(value) +
                                 ") is not divisible by tp (" + std::to_string(tp) + ")");
  };
  divides(m.n_head, "n-head");
  divides(m.n_kv_head, "n-kv-head");
  divides(m.d_ff, "d-ff");
  divides(m.padded_vocab(), "the padded vocabulary");
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
