#include "mpitrain/train/run_setup.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

int resolve_threads(int requested, int ranks_on_node) {
  if (requested > 0) return requested;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) return std::atoi(env);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_on_node);
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

void prepare_out_dir(const Options& o) {
  const TrainConfig& t = o.train;
  const bool resuming = !t.resume.empty();
  const fs::path dir(t.out_dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !t.overwrite && !resuming) {
    require(fs::is_directory(dir, ec), "out-dir " + t.out_dir + " exists and is not a directory");
    require(fs::is_empty(dir, ec), "out-dir " + t.out_dir +
                                       " already holds files; pass --overwrite or choose another");
  }
  for (const std::string& file : {t.export_llmc, t.export_params})
    require(file.empty() || !fs::exists(file, ec) || t.overwrite || resuming,
            file + " exists; pass --overwrite or choose another export file");
  fs::create_directories(dir, ec);
  require(!ec, "cannot create out-dir " + t.out_dir + ": " + ec.message());
  if (t.overwrite && !resuming) fs::remove_all(dir / "checkpoints", ec);
  std::ofstream ini(dir / "run.ini");
  require(static_cast<bool>(ini << o.effective), "cannot write " + (dir / "run.ini").string());
}

}  // namespace mpitrain
