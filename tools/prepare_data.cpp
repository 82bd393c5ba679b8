// prepare-data: text files -> token files for training (train + val split), with their tokenizer.
//
//   prepare-data --out-dir DIR [--tokenizer bytes|gpt2|sentencepiece|PATH] [--gpt2-vocab DIR]
//   [--tokenizer-model FILE | --vocab-size N [--sp-model-type bpe|unigram]] [--val-fraction 0.05]
//   [--format hdf5|llmc|nanogpt] [--threads N] [--shard-tokens N] [--overwrite] FILE...
//
// Each input file is one document. bytes: the files' bytes with '\n' between files; gpt2 and
// sentencepiece: <|endoftext|> (llm.c's fineweb shards) or the model's BOS (Llama) before each
// document. PATH: a tokenizer as load_tokenizer reads it (data/tokenizer.hpp), e.g. a Hugging
// Face tokenizer.json or its directory: its bos_token before and eos_token after each document
// (data/hf_tokenizer.hpp). The first (1-f) of the tokens become DIR/train.* (or, with --shard-tokens,
// DIR/train_000000.* ... of at most N tokens each), the last f DIR/val.* (.h5 for HDF5, .bin for
// llm.c and nanoGPT), each at least 2 tokens; DIR/tokenizer.json and copies of the tokenizer's
// files record the tokenizer (data/tokenizer.hpp). --threads tokenizes that many files at once;
// the output is the same byte for byte. Every output is written under a temporary name, then
// renamed into place, with kPairReplacingMarker (data/token_source.hpp) listing them while the
// renames run. Bad input -> one message on stderr, exit code 2, nothing written.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/data/gpt2_tokenizer.hpp"
#include "mpitrain/data/sentencepiece_tokenizer.hpp"
#include "mpitrain/data/token_source.hpp"
#include "mpitrain/data/token_writer.hpp"
#include "mpitrain/data/tokenize_documents.hpp"
#include "mpitrain/data/tokenizer.hpp"
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
  std::string tokenizer = ByteTokenizer::kName;
  std::string gpt2_vocab, tokenizer_model, sp_model_type = "bpe";
  int vocab_size = 0, threads = 1;
  size_t shard_tokens = 0;
  std::vector<std::string> inputs;
};

// Checks that the tokenizer options go together.
void check_tokenizer_options(const Options& opt, const po::variables_map& vm) {
  const bool gpt2 = opt.tokenizer == Gpt2Tokenizer::kName;
  const bool sp = opt.tokenizer == SentencePieceTokenizer::kName;
  std::error_code ec;
  require(gpt2 || sp || opt.tokenizer == ByteTokenizer::kName || fs::exists(opt.tokenizer, ec),
          "--tokenizer '" + opt.tokenizer +
              "' is not one of bytes, gpt2, sentencepiece, nor a tokenizer file or directory "
              "(e.g. a Hugging Face tokenizer.json)");
  require(!gpt2 || !opt.gpt2_vocab.empty(),
          "--tokenizer gpt2 needs --gpt2-vocab DIR (GPT-2's encoder.json and vocab.bpe; "
          "tools/fetch-gpt2-vocab.sh DIR gets them)");
  require(gpt2 || opt.gpt2_vocab.empty(), "--gpt2-vocab is for --tokenizer gpt2");
  require(sp || (opt.tokenizer_model.empty() && !vm.count("vocab-size") &&
                 vm["sp-model-type"].defaulted()),
          "--tokenizer-model, --vocab-size and --sp-model-type are for --tokenizer sentencepiece");
  if (!sp) return;
  require(opt.tokenizer_model.empty() != !vm.count("vocab-size"),
          "--tokenizer sentencepiece needs either --tokenizer-model FILE (a given model) or "
          "--vocab-size N (train one on the input), not both");
  require(opt.tokenizer_model.empty() || vm["sp-model-type"].defaulted(),
          "--sp-model-type is for training (--vocab-size); --tokenizer-model gives the model");
  require(!vm.count("vocab-size") || (opt.vocab_size >= 260 && opt.vocab_size <= 1 << 20),
          "--vocab-size " + std::to_string(opt.vocab_size) +
              " is not in [260, 1048576] (256 byte pieces + the special ones come first)");
  require(opt.sp_model_type == "bpe" || opt.sp_model_type == "unigram",
          "--sp-model-type '" + opt.sp_model_type + "' is not bpe or unigram");
}

// Fills opt from the command line; false if --help was printed instead.
bool parse_options(int argc, char** argv, Options& opt) {
  std::string format = "hdf5";
  po::options_description named(
      "prepare-data: text files -> token files and their tokenizer\n"
      "usage: prepare-data --out-dir DIR [options] FILE...\noptions");
  auto add = named.add_options();
  add("help,h", "show this help");
  add("out-dir", po::value(&opt.out_dir)->required(), "output directory (created if missing)");
  add("val-fraction", po::value(&opt.val_fraction)->default_value(0.05, "0.05"),
      "fraction of the tokens (the last ones) for validation, in (0, 1)");
  add("format", po::value(&format)->default_value("hdf5"),
      "hdf5 (train.h5/val.h5), llmc or nanogpt (train.bin/val.bin); llmc writes uint32 tokens "
      "(version 7) for a vocabulary beyond 65536, nanogpt refuses one");
  add("tokenizer", po::value(&opt.tokenizer)->default_value("bytes"),
      "bytes (one token per byte), gpt2 (byte-level BPE, <|endoftext|> before each file), "
      "sentencepiece (BOS before each file), or the PATH of a tokenizer (a Hugging Face "
      "tokenizer.json or its directory: its bos_token before and eos_token after each file)");
  add("gpt2-vocab", po::value(&opt.gpt2_vocab), "gpt2: directory with encoder.json and vocab.bpe");
  add("tokenizer-model", po::value(&opt.tokenizer_model),
      "sentencepiece: a .model file to use (e.g. a Llama tokenizer.model)");
  add("vocab-size", po::value(&opt.vocab_size),
      "sentencepiece: train a model of N pieces on the input files (saved as tokenizer.model)");
  add("sp-model-type", po::value(&opt.sp_model_type)->default_value("bpe"),
      "sentencepiece training: bpe or unigram");
  add("threads", po::value(&opt.threads)->default_value(1),
      "input files tokenized at once (the output is the same for any count)");
  add("shard-tokens", po::value(&opt.shard_tokens)->default_value(0),
      "write train as shards train_000000.* ... of at most N tokens (0: one train file)");
  add("overwrite", po::bool_switch(&opt.overwrite), "replace existing output files");
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
  require(opt.threads >= 1 && opt.threads <= 1024,
          "--threads " + std::to_string(opt.threads) + " is not in [1, 1024]");
  require(opt.shard_tokens == 0 || opt.shard_tokens >= 2,
          "--shard-tokens " + std::to_string(opt.shard_tokens) +
              ": a shard needs at least 2 tokens (an input and its target)");
  check_tokenizer_options(opt, vm);
  return true;
}

// Each input file's bytes.
std::vector<std::string> read_inputs(const std::vector<std::string>& paths) {
  std::vector<std::string> texts;
  size_t total = 0;
  for (const auto& path : paths) {
    std::error_code ec;
    require(fs::is_regular_file(path, ec),
            "input file '" + path + "' does not exist or is not a regular file");
    std::ifstream in(path, std::ios::binary);
    require(in.good(), "cannot read input file '" + path + "': " + std::strerror(errno));
    texts.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    require(!in.bad(), "error reading input file '" + path + "'");
    total += texts.back().size();
  }
  require(total > 0, "the input files are empty");
  return texts;
}

// A directory under the system's temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "prepare-data-XXXXXX").string();
    if (!mkdtemp(pattern.data()))
      MPITRAIN_THROW("cannot create a temporary directory '" + pattern +
                     "': " + std::strerror(errno));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// The tokenizer the options name; a SentencePiece model to train is trained on texts into tmp.
std::unique_ptr<Tokenizer> make_tokenizer(const Options& opt, const std::vector<std::string>& texts,
                                          const TempDir& tmp) {
  if (opt.tokenizer == Gpt2Tokenizer::kName) {
    const fs::path dir(opt.gpt2_vocab);
    std::error_code ec;
    require(fs::is_directory(dir, ec), "--gpt2-vocab '" + opt.gpt2_vocab + "' is not a directory");
    return Gpt2Tokenizer::from_vocab((dir / "encoder.json").string(), (dir / "vocab.bpe").string());
  }
  if (opt.tokenizer == SentencePieceTokenizer::kName) {
    if (!opt.tokenizer_model.empty())
      return std::make_unique<SentencePieceTokenizer>(opt.tokenizer_model);
    const std::string model = (tmp.path() / "tokenizer.model").string();
    train_sentencepiece(texts, opt.vocab_size, opt.sp_model_type, model);
    return std::make_unique<SentencePieceTokenizer>(model);
  }
  if (opt.tokenizer == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  return load_tokenizer(opt.tokenizer);
}

// The vocabulary that a format can hold; UsageError before any work if the tokenizer's is larger.
void check_format_holds(TokenFormat format, int64_t vocab_size) {
  require(format != TokenFormat::NanoGpt || vocab_size <= 65536,
          "--format nanogpt stores uint16 tokens, and this tokenizer's vocabulary is " +
              std::to_string(vocab_size) + " (> 65536): use --format llmc or hdf5");
}

void write_tokens(const std::string& path, const std::vector<uint32_t>& tokens, TokenFormat format,
                  const Tokenizer& tok) {
  if (format == TokenFormat::Hdf5)
    write_tokens_hdf5(path, tokens, tok.vocab_size(), tok.name());
  else if (format == TokenFormat::Llmc && tok.vocab_size() > 65536)
    write_llmc_shard_u32(path, tokens);
  else if (format == TokenFormat::Llmc)
    write_llmc_shard(path, tokens);
  else
    write_nanogpt_bin(path, tokens);
}

// ", documents: <start> ... <end>" with the tokens around each document, "" if none.
std::string document_marks(const Tokenizer& tok) {
  const auto mark = [&](std::optional<uint32_t> id) {
    const auto i = static_cast<int32_t>(id.value_or(0));
    return id ? tok.decode(&i, 1) : std::string();
  };
  if (!tok.document_start() && !tok.document_end()) return "";
  return ", documents: " + mark(tok.document_start()) + " ... " + mark(tok.document_end());
}

// Each file needs an input token and its next-token target.
constexpr size_t kMinTokensPerFile = 2;

std::string shard_name(size_t i, const std::string& ext) {
  char name[32];
  std::snprintf(name, sizeof name, "train_%06zu", i);
  return name + ext;
}

// Train files from earlier runs that this one does not write: train.EXT and train_NNNNNN.EXT.
std::vector<std::string> stale_train_files(const fs::path& dir, const std::string& ext,
                                           const std::vector<std::string>& written) {
  std::vector<std::string> stale;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return stale;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const bool train =
        name == "train" + ext ||
        (name.size() == 12 + ext.size() && name.starts_with("train_") && name.ends_with(ext) &&
         std::all_of(name.begin() + 6, name.begin() + 12,
                     [](char c) { return c >= '0' && c <= '9'; }));
    if (train && std::find(written.begin(), written.end(), name) == written.end())
      stale.push_back(name);
  }
  std::sort(stale.begin(), stale.end());
  return stale;
}

// Renames every DIR/NAME.tmp to DIR/NAME and removes the stale files. kPairReplacingMarker,
// durable before the first rename and removed only once all are done, marks the moment when dir
// holds new files beside old ones: a kill there leaves it, and readers refuse the files it lists.
void rename_all(const fs::path& dir, const std::vector<std::string>& names,
                const std::vector<std::string>& stale, const FaultPlan& faults) {
  const std::string marker = (dir / kPairReplacingMarker).string();
  std::string listed;
  for (const auto& n : names) listed += n + "\n";
  for (const auto& n : stale) listed += n + "\n";
  write_file_synced(marker, listed);
  fsync_path(dir.string());
  for (size_t i = 0; i < names.size(); ++i) {
    rename_durably((dir / names[i]).string() + ".tmp", (dir / names[i]).string());
    if (i == 0) faults.at("pair-rename", 0, 0);  // tests: a kill between the renames
  }
  for (const auto& n : stale) fs::remove(dir / n);
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
  std::vector<std::string> existing = stale_train_files(dir, ext, {});
  for (const std::string& name : {"val" + ext, std::string(kTokenizerFile)})
    if (fs::exists(dir / name, ec)) existing.push_back(name);
  require(opt.overwrite || existing.empty(), existing.empty()
                                                 ? ""
                                                 : "'" + (dir / existing.front()).string() +
                                                       "' exists; pass --overwrite to replace it");
  if (opt.vocab_size > 0) check_format_holds(opt.format, opt.vocab_size);

  const std::vector<std::string> texts = read_inputs(opt.inputs);
  const TempDir tmp;
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(opt, texts, tmp);
  check_format_holds(opt.format, tok->vocab_size());
  std::vector<uint32_t> tokens;
  for (const auto& doc : tokenize_documents(*tok, texts, opt.threads))
    tokens.insert(tokens.end(), doc.begin(), doc.end());
  const auto n = tokens.size();
  const auto n_val =
      std::max(kMinTokensPerFile, static_cast<size_t>(std::llround(opt.val_fraction * n)));
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%g", opt.val_fraction);
  require(n_val + kMinTokensPerFile <= n,
          "the input gives only " + std::to_string(n) + " tokens (" + tok->name() +
              " tokenizer): split at --val-fraction " + fraction + " that is " +
              std::to_string(n > n_val ? n - n_val : 0) + " for train and " +
              std::to_string(std::min(n, n_val)) + " for val, and each file needs at least " +
              std::to_string(kMinTokensPerFile) + " (an input token and its next-token target)");

  // The outputs, in rename order: train (or its shards), val, the tokenizer's files, descriptor.
  struct Output {
    std::string name;
    size_t begin = 0, end = 0;  // tokens[begin, end) of a token file
  };
  std::vector<Output> token_files;
  const size_t n_train = n - n_val;
  if (opt.shard_tokens == 0) {
    token_files.push_back({"train" + ext, 0, n_train});
  } else {
    for (size_t b = 0; b < n_train;) {
      size_t e = std::min(n_train, b + opt.shard_tokens);
      if (n_train - e < kMinTokensPerFile) e = n_train;  // a 1-token tail joins the last shard
      token_files.push_back({shard_name(token_files.size(), ext), b, e});
      b = e;
    }
  }
  token_files.push_back({"val" + ext, n_train, n});
  std::vector<std::string> names;
  for (const auto& f : token_files) names.push_back(f.name);
  for (const auto& f : tok->files()) names.push_back(f.copy_name);
  names.push_back(kTokenizerFile);

  // Write all under temporary names, then rename: no half-written outputs are left behind.
  fs::create_directories(dir, ec);
  require(!ec, "cannot create --out-dir '" + opt.out_dir + "': " + ec.message());
  try {
    for (const auto& f : token_files)
      write_tokens((dir / f.name).string() + ".tmp",
                   std::vector<uint32_t>(tokens.begin() + f.begin, tokens.begin() + f.end),
                   opt.format, *tok);
    for (const auto& f : tok->files()) {
      const std::string to = (dir / f.copy_name).string() + ".tmp";
      fs::copy_file(f.path, to, fs::copy_options::overwrite_existing, ec);
      require(!ec, "cannot copy '" + f.path + "' to '" + to + "': " + ec.message());
    }
    write_file_synced((dir / kTokenizerFile).string() + ".tmp", tokenizer_descriptor_json(*tok));
    for (const auto& name : names) fsync_path((dir / name).string() + ".tmp");
  } catch (...) {
    for (const auto& name : names) fs::remove((dir / name).string() + ".tmp", ec);
    throw;
  }
  rename_all(dir, names, stale_train_files(dir, ext, names), faults);
  for (const auto& f : token_files)
    std::cout << (f.name.starts_with("val") ? "val:   " : "train: ") << f.end - f.begin
              << " tokens -> " << (dir / f.name).string() << "\n";
  std::cout << "tokenizer: " << tok->name() << " (vocabulary " << tok->vocab_size()
            << document_marks(*tok) << ") -> " << (dir / kTokenizerFile).string() << "\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("prepare-data", argc, argv, run); }
