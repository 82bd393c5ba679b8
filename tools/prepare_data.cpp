// prepare-data: text files -> byte-level token files for training (train + val split).
//
//   prepare-data --out-dir DIR [--val-fraction 0.05] [--format hdf5|llmc|nanogpt] [--overwrite]
//   FILE...
//
// The files are read as bytes and concatenated in the given order with a '\n' between them; the
// first (1-f) of the tokens become DIR/train.*, the last f DIR/val.* (.h5 for HDF5, .bin for
// llm.c and nanoGPT), each at least 2 tokens. Both are written under temporary names, then
// renamed into place (a kill between the two renames is flagged: kPairReplacingMarker,
// data/token_source.hpp). Bad input -> one message on stderr, exit code 2, nothing written.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/data/token_source.hpp"
#include "mpitrain/data/token_writer.hpp"
#include "mpitrain/io/durable.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/fault.hpp"
#include "mpitrain/runtime/program.hpp"

namespace fs = std::filesystem;
namespace po = boost::program_options;
using namespace mpitrain;

namespace {

struct Options {
  std::string out_dir;
  double val_fraction = 0.05;
  TokenFormat format = TokenFormat::Hdf5;
  bool overwrite = false;
  std::vector<std::string> inputs;
};

// Fills opt from the command line; false if --help was printed instead.
bool parse_options(int argc, char** argv, Options& opt) {
  std::string format = "hdf5";
  po::options_description named(
      "prepare-data: text files -> byte-level token files\n"
      "usage: prepare-data --out-dir DIR [options] FILE...\noptions");
  named.add_options()("help,h", "show this help")("out-dir", po::value(&opt.out_dir)->required(),
                                                  "output directory (created if missing)")(
      "val-fraction", po::value(&opt.val_fraction)->default_value(0.05, "0.05"),
      "fraction of the tokens (the last ones) for validation, in (0, 1)")(
      "format", po::value(&format)->default_value("hdf5"),
      "hdf5 (train.h5/val.h5), llmc or nanogpt (train.bin/val.bin)")(
      "overwrite", po::bool_switch(&opt.overwrite), "replace existing output files");
  po::options_description all;
  all.add(named).add_options()("input", po::value(&opt.inputs));
  po::positional_options_description positional;
  positional.add("input", -1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << named << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  require(!opt.inputs.empty(), "no input files given (usage: prepare-data --out-dir DIR FILE...)");
  require(opt.val_fraction > 0 && opt.val_fraction < 1,
          "--val-fraction " + std::to_string(opt.val_fraction) + " is not in (0, 1)");
  opt.format = parse_token_format(format);
  require(opt.format != TokenFormat::Auto,
          "--format auto is for reading; choose hdf5, llmc or nanogpt");
  return true;
}

// The inputs' bytes, concatenated with '\n' between files.
std::string read_inputs(const std::vector<std::string>& paths) {
  std::string text;
  for (size_t i = 0; i < paths.size(); ++i) {
    std::error_code ec;
    require(fs::is_regular_file(paths[i], ec),
            "input file '" + paths[i] + "' does not exist or is not a regular file");
    std::ifstream in(paths[i], std::ios::binary);
    require(in.good(), "cannot read input file '" + paths[i] + "': " + std::strerror(errno));
    if (i > 0) text += '\n';
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    require(!in.bad(), "error reading input file '" + paths[i] + "'");
  }
  require(!text.empty(), "the input files are empty");
  return text;
}

void write(const std::string& path, const std::vector<uint32_t>& tokens, TokenFormat format) {
  if (format == TokenFormat::Hdf5)
    write_tokens_hdf5(path, tokens, ByteTokenizer::kVocabSize, ByteTokenizer::kName);
  else if (format == TokenFormat::Llmc)
    write_llmc_shard(path, tokens);
  else
    write_nanogpt_bin(path, tokens);
}

// Each file needs an input token and its next-token target.
constexpr size_t kMinTokensPerFile = 2;

// Renames both temporary files into place. kPairReplacingMarker, durable before the first rename
// and removed only once the second is, marks the moment between them when dir holds a new
// train beside an old val: a kill there leaves it, and readers refuse the pair.
void rename_pair(const fs::path& dir, const std::string& train, const std::string& val,
                 const FaultPlan& faults) {
  const std::string marker = (dir / kPairReplacingMarker).string();
  write_file_synced(marker, fs::path(train).filename().string() + "\n" +
                                fs::path(val).filename().string() + "\n");
  fsync_path(dir.string());
  rename_durably(train + ".tmp", train);
  faults.at("pair-rename", 0, 0);  // tests: a kill between the renames
  rename_durably(val + ".tmp", val);
  fs::remove(marker);
  fsync_path(dir.string());
}

int run(int argc, char** argv) {
  Options opt;
  if (!parse_options(argc, argv, opt)) return kExitOk;
  const FaultPlan faults = FaultPlan::from_env();
  if (faults.armed()) std::cerr << faults.warning() << "\n";
  const std::string ext = opt.format == TokenFormat::Hdf5 ? ".h5" : ".bin";
  const fs::path dir(opt.out_dir);
  std::error_code ec;
  require(!fs::exists(dir, ec) || fs::is_directory(dir, ec),
          "--out-dir '" + opt.out_dir + "' exists and is not a directory");
  const std::string train_path = (dir / ("train" + ext)).string();
  const std::string val_path = (dir / ("val" + ext)).string();
  for (const auto& p : {train_path, val_path})
    require(opt.overwrite || !fs::exists(p, ec),
            "'" + p + "' exists; pass --overwrite to replace it");

  const std::vector<uint32_t> tokens = ByteTokenizer().encode(read_inputs(opt.inputs));
  const auto n = tokens.size();
  const auto n_val =
      std::max(kMinTokensPerFile, static_cast<size_t>(std::llround(opt.val_fraction * n)));
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%g", opt.val_fraction);
  require(n_val + kMinTokensPerFile <= n,
          "the input gives only " + std::to_string(n) + " tokens (one per byte): split at " +
              "--val-fraction " + fraction + " that is " +
              std::to_string(n > n_val ? n - n_val : 0) + " for train and " +
              std::to_string(std::min(n, n_val)) + " for val, and each file needs at least " +
              std::to_string(kMinTokensPerFile) + " (an input token and its next-token target)");
  const std::vector<uint32_t> train(tokens.begin(), tokens.end() - n_val);
  const std::vector<uint32_t> val(tokens.end() - n_val, tokens.end());

  // Write both under temporary names, then rename: no half-written outputs are left behind.
  fs::create_directories(dir, ec);
  require(!ec, "cannot create --out-dir '" + opt.out_dir + "': " + ec.message());
  const std::string train_tmp = train_path + ".tmp", val_tmp = val_path + ".tmp";
  try {
    write(train_tmp, train, opt.format);
    write(val_tmp, val, opt.format);
    fsync_path(train_tmp);
    fsync_path(val_tmp);
  } catch (...) {
    fs::remove(train_tmp, ec);
    fs::remove(val_tmp, ec);
    throw;
  }
  rename_pair(dir, train_path, val_path, faults);
  std::cout << "train: " << train.size() << " tokens -> " << train_path << "\n"
            << "val:   " << val.size() << " tokens -> " << val_path << "\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("prepare-data", argc, argv, run); }
