// prepare-data: text -> token files for training (train + val split), with their tokenizer.
//
//   prepare-data --out-dir DIR [--tokenizer bytes|gpt2|sentencepiece|PATH] [--gpt2-vocab DIR]
//   [--tokenizer-model FILE | --vocab-size N [--sp-model-type bpe|unigram]] [--val-fraction 0.05]
//   [--split-seed 0] [--input-format auto|text|jsonl] [--jsonl-field text] [--prompt-field NAME]
//   [--messages-field NAME [--chat-template FILE] [--chat-template-kwargs JSON]]
//   [--format hdf5|llmc|nanogpt] [--threads N]
//   [--shard-tokens N] [--progress-seconds 10]
//   [--overwrite] INPUT...
//
// INPUT: a file, a directory (its files, recursively, in path order) or - (standard input). A text
// input is one document, a JSONL line one document (its --jsonl-field string). bytes: '\n'
// between documents; gpt2 and sentencepiece: <|endoftext|> (llm.c's fineweb shards) or the model's
// BOS (Llama) before each one; PATH: a tokenizer as load_tokenizer reads it (data/tokenizer.hpp),
// e.g. a Hugging Face tokenizer.json or its directory: its bos_token before and eos_token after
// each document (data/hf_tokenizer.hpp). With --prompt-field (JSON Lines into HDF5, for
// fine-tuning), a document is its prompt then its text, and the token files get a /loss_mask
// (data/token_source.hpp) that scores neither the prompt's tokens nor the document's start. With
// --messages-field a JSONL line is a conversation, rendered by the tokenizer's chat template (or
// --chat-template's) and masked to the assistant's turns (data/chat_encoding.hpp).
// The input is streamed in bounded memory (corpus_reader.hpp): a text
// document is cut into pieces of about 64 KiB, a JSONL document is one piece; the pieces are
// tokenized (--threads at once; the output is the same for any count) into two token spools in
// DIR, then written out. Validation: piece i goes to val when a hash of (--split-seed, i) falls
// below --val-fraction (reproducible, independent of memory and threads); when that chooses no
// piece for one side (a small corpus), the last --val-fraction of all tokens go to val instead.
// Train becomes DIR/train.* (or, with --shard-tokens, DIR/train_000000.* ... of at most N tokens
// each), val DIR/val.* (.h5 for HDF5, .bin for llm.c and nanoGPT), each at least 2 tokens;
// DIR/tokenizer.json and copies of the tokenizer's files record the tokenizer (data/tokenizer.hpp).
// Every output is written under a temporary name, then renamed into place, with
// kPairReplacingMarker (data/token_source.hpp) listing them while the renames run. Progress goes
// to stderr every --progress-seconds. Bad input -> one message on stderr, exit code 2, nothing
// written.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/data/corpus_reader.hpp"
#include "mpitrain/data/document_starts.hpp"
#include "mpitrain/data/gpt2_tokenizer.hpp"
#include "mpitrain/data/hf_tokenizer.hpp"
#include "mpitrain/data/sentencepiece_tokenizer.hpp"
#include "mpitrain/data/token_source.hpp"
#include "mpitrain/data/token_spool.hpp"
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
  uint64_t split_seed = 0;
  TokenFormat format = TokenFormat::Hdf5;
  InputFormat input_format = InputFormat::Auto;
  std::string jsonl_field = "text";
  bool jsonl_field_given = false;  // used only where an input is JSON Lines
  std::string prompt_field;        // fine-tuning: the unscored prompt's field; "" if none
  std::string messages_field;      // fine-tuning: a conversation's field; "" if none
  std::string chat_template;       // its Jinja template file; "" for the tokenizer's
  nlohmann::ordered_json chat_template_kwargs;  // the template's variables (a JSON object)
  bool overwrite = false;
  std::string tokenizer = ByteTokenizer::kName;
  std::string gpt2_vocab, tokenizer_model, sp_model_type = "bpe";
  int vocab_size = 0, threads = 1;
  size_t shard_tokens = 0;
  double progress_seconds = 10;
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

InputFormat parse_input_format(const std::string& name) {
  if (name == "auto") return InputFormat::Auto;
  if (name == "text") return InputFormat::Text;
  require(name == "jsonl", "--input-format '" + name + "' is not one of auto, text, jsonl");
  return InputFormat::Jsonl;
}

// Fills opt from the command line; false if --help was printed instead.
bool parse_options(int argc, char** argv, Options& opt) {
  std::string format = "hdf5", input_format = "auto", chat_template_kwargs = "{}";
  int64_t split_seed = 0, shard_tokens = 0;  // signed: an unsigned "-1" would wrap
  po::options_description named(
      "prepare-data: text -> token files and their tokenizer\n"
      "usage: prepare-data --out-dir DIR [options] INPUT...   (a file, a directory, or - for "
      "standard input)\noptions");
  auto add = named.add_options();
  add("help,h", "show this help");
  add("out-dir", po::value(&opt.out_dir)->required(), "output directory (created if missing)");
  add("val-fraction", po::value(&opt.val_fraction)->default_value(0.05, "0.05"),
      "fraction of the pieces (64 KiB of a text, or a JSONL document) for validation, in (0, 1), "
      "chosen by a hash of (--split-seed, piece index)");
  add("split-seed", po::value(&split_seed)->default_value(0),
      "seed of the validation split: the same seed and input give the same files");
  add("input-format", po::value(&input_format)->default_value("auto"),
      "auto (JSON Lines if the name ends in .jsonl, else text), text or jsonl (also for -)");
  add("jsonl-field", po::value(&opt.jsonl_field)->default_value("text"),
      "JSON Lines: the string field that holds a document's text");
  add("prompt-field", po::value(&opt.prompt_field),
      "JSON Lines, for fine-tuning: the string field of a prompt that comes before the text "
      "(e.g. --prompt-field prompt --jsonl-field completion) and is not scored as a target: "
      "the HDF5 token files get a /loss_mask");
  add("messages-field", po::value(&opt.messages_field),
      "JSON Lines, for fine-tuning on conversations: the field of a list of chat messages "
      "({\"role\": ..., \"content\": ...}), rendered by the tokenizer's chat template; the "
      "HDF5 token files get a /loss_mask that scores the assistant's turns only");
  add("chat-template", po::value(&opt.chat_template),
      "with --messages-field: a Jinja chat template file to render with instead of the "
      "tokenizer_config.json's chat_template");
  add("chat-template-kwargs", po::value(&chat_template_kwargs)->default_value("{}"),
      "with --messages-field: variables for the chat template, a JSON object, as transformers' "
      "apply_chat_template(**kwargs) and TRL's chat_template_kwargs take them (e.g. "
      "'{\"enable_thinking\": false}' for Qwen3)");
  add("format", po::value(&format)->default_value("hdf5"),
      "hdf5 (train.h5/val.h5), llmc or nanogpt (train.bin/val.bin); llmc writes uint32 tokens "
      "(version 7) for a vocabulary beyond 65536, nanogpt refuses one");
  add("tokenizer", po::value(&opt.tokenizer)->default_value("bytes"),
      "bytes (one token per byte), gpt2 (byte-level BPE, <|endoftext|> before each document), "
      "sentencepiece (BOS before each document), or the PATH of a tokenizer (a Hugging Face "
      "tokenizer.json or its directory: its bos_token before and eos_token after each document)");
  add("gpt2-vocab", po::value(&opt.gpt2_vocab), "gpt2: directory with encoder.json and vocab.bpe");
  add("tokenizer-model", po::value(&opt.tokenizer_model),
      "sentencepiece: a .model file to use (e.g. a Llama tokenizer.model)");
  add("vocab-size", po::value(&opt.vocab_size),
      "sentencepiece: train a model of N pieces on the input (its first 64 MiB; saved as "
      "tokenizer.model); needs files, not -");
  add("sp-model-type", po::value(&opt.sp_model_type)->default_value("bpe"),
      "sentencepiece training: bpe or unigram");
  add("threads", po::value(&opt.threads)->default_value(1),
      "pieces tokenized at once (the output is the same for any count)");
  add("shard-tokens", po::value(&shard_tokens)->default_value(0),
      "write train as shards train_000000.* ... of at most N tokens (0: one train file)");
  add("progress-seconds", po::value(&opt.progress_seconds)->default_value(10),
      "a progress line on stderr at most this often (0: none)");
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
  require(!opt.inputs.empty(),
          "no input given (usage: prepare-data --out-dir DIR INPUT...: files, directories, or -)");
  require(opt.val_fraction > 0 && opt.val_fraction < 1,
          "--val-fraction " + std::to_string(opt.val_fraction) + " is not in (0, 1)");
  opt.format = parse_token_format(format);
  require(opt.format != TokenFormat::Auto && opt.format != TokenFormat::Megatron,
          "--format " + format + " is for reading; choose hdf5, llmc or nanogpt");
  opt.input_format = parse_input_format(input_format);
  require(!opt.jsonl_field.empty(), "--jsonl-field is empty");
  require(!vm.count("prompt-field") || !opt.prompt_field.empty(), "--prompt-field is empty");
  require(opt.prompt_field != opt.jsonl_field,
          "--prompt-field and --jsonl-field both name '" + opt.jsonl_field +
              "': the prompt and the scored text are two fields");
  require(opt.prompt_field.empty() || opt.format == TokenFormat::Hdf5,
          "--prompt-field writes a loss mask, which only an HDF5 token file holds: use --format "
          "hdf5");
  opt.jsonl_field_given = !vm["jsonl-field"].defaulted();
  require(!vm.count("messages-field") || !opt.messages_field.empty(), "--messages-field is empty");
  require(opt.messages_field.empty() || (opt.prompt_field.empty() && !opt.jsonl_field_given),
          "--messages-field reads a conversation, whose template places prompts and answers: "
          "leave out --prompt-field and --jsonl-field");
  require(opt.messages_field.empty() || opt.format == TokenFormat::Hdf5,
          "--messages-field writes a loss mask, which only an HDF5 token file holds: use --format "
          "hdf5");
  require(opt.messages_field.empty() || opt.vocab_size == 0,
          "--messages-field renders conversations with a trained model's chat template: give "
          "that model's tokenizer, not --vocab-size");
  require((!vm.count("chat-template") && vm["chat-template-kwargs"].defaulted()) ||
              !opt.messages_field.empty(),
          "--chat-template and --chat-template-kwargs are for the conversations of "
          "--messages-field, which is not given");
  opt.chat_template_kwargs = nlohmann::ordered_json::parse(chat_template_kwargs, nullptr, false);
  require(!opt.chat_template_kwargs.is_discarded(),
          "--chat-template-kwargs '" + chat_template_kwargs + "' is not JSON");
  require(opt.threads >= 1 && opt.threads <= 1024,
          "--threads " + std::to_string(opt.threads) + " is not in [1, 1024]");
  require(split_seed >= 0, "--split-seed " + std::to_string(split_seed) + " is negative");
  opt.split_seed = static_cast<uint64_t>(split_seed);
  require(shard_tokens == 0 || shard_tokens >= 2,
          "--shard-tokens " + std::to_string(shard_tokens) +
              ": a shard needs at least 2 tokens (an input and its target)");
  opt.shard_tokens = static_cast<size_t>(shard_tokens);
  require(opt.progress_seconds >= 0, "--progress-seconds is negative");
  check_tokenizer_options(opt, vm);
  return true;
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

// SentencePiece trains on the corpus's first documents up to this many bytes.
constexpr size_t kSentencePieceTrainingBytes = size_t{64} << 20;

// The tokenizer the options name; a SentencePiece model to train is trained on the start of the
// inputs into tmp.
std::unique_ptr<Tokenizer> make_tokenizer(const Options& opt,
                                          const std::vector<CorpusInput>& inputs,
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
    std::vector<std::string> documents;
    CorpusReader reader(inputs, {opt.jsonl_field, opt.prompt_field, opt.messages_field});
    size_t bytes = 0;
    for (TextPiece piece; bytes < kSentencePieceTrainingBytes && reader.next(piece);) {
      bytes += piece.prompt.size() + piece.text.size();
      if (piece.start == PieceStart::Continued)
        documents.back() += piece.text;
      else
        documents.push_back(piece.prompt + piece.text);
    }
    require(bytes > 0, "the input is empty");
    const std::string model = (tmp.path() / "tokenizer.model").string();
    train_sentencepiece(documents, opt.vocab_size, opt.sp_model_type, model);
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

TokenFileKind file_kind(TokenFormat format, int64_t vocab_size) {
  if (format == TokenFormat::Hdf5) return TokenFileKind::Hdf5;
  if (format == TokenFormat::NanoGpt) return TokenFileKind::NanoGpt;
  return vocab_size > 65536 ? TokenFileKind::LlmcU32 : TokenFileKind::LlmcU16;
}

// Does piece `index` go to validation? A hash of (seed, index) below fraction of its range
// (splitmix64's mixer, so the choice depends on nothing else).
uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
bool goes_to_validation(uint64_t seed, uint64_t index, double fraction) {
  return static_cast<double>(mix64(mix64(seed) ^ index) >> 11) * 0x1p-53 < fraction;
}

// x with a decimal prefix and unit: "12.3 MB", "512.0 B/s".
std::string format_count(double x, const char* unit) {
  char text[48];
  const char* prefix = x >= 1e9 ? "G" : x >= 1e6 ? "M" : x >= 1e3 ? "k" : "";
  const double scale = x >= 1e9 ? 1e9 : x >= 1e6 ? 1e6 : x >= 1e3 ? 1e3 : 1;
  std::snprintf(text, sizeof text, "%.1f %s%s", x / scale, prefix, unit);
  return text;
}

// A progress line on stderr at most every `seconds` (none if 0): what the long work has done.
class Progress {
 public:
  explicit Progress(double seconds) : seconds_(seconds) {}
  bool due() {
    if (seconds_ <= 0) return false;
    const auto now = Clock::now();
    if (std::chrono::duration<double>(now - last_).count() < seconds_) return false;
    last_ = now;
    return true;
  }
  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  double seconds_;
  Clock::time_point start_ = Clock::now(), last_ = start_;
};

// The process's peak resident memory (VmHWM) in bytes; 0 where /proc does not say.
uint64_t peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmHWM:")) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
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

// How --document-mask finds the conversations: by the tokenizer's boundary where it marks each
// one, else not at all (the token files say so, and the trainer refuses it).
std::string conversation_marks(const Tokenizer& tok, uint64_t unmarked, uint64_t conversations) {
  if (!tok.document_start() && !tok.document_end()) return "";
  const std::string boundary = describe(document_boundary(tok, "document-mask"), tok);
  if (unmarked == 0) return "documents: " + boundary + ": each conversation is one\n";
  return "documents: " + std::to_string(unmarked) + " of the " + std::to_string(conversations) +
         " conversations are not marked by the tokenizer's boundary (" + boundary +
         ": their template puts it inside them or leaves it out), so the token files record "
         "that --document-mask and --mask-boundary-loss cannot find them\n";
}

// Each file needs an input token and its next-token target.
constexpr size_t kMinTokensPerFile = 2;

// Text tokenized per batch, per thread: bounds the memory of the pieces and their tokens.
constexpr size_t kBatchBytesPerThread = size_t{1} << 20;

// The corpus tokenized into a train and a val spool by the seeded split of its pieces.
struct Tokenized {
  uint64_t pieces = 0, val_pieces = 0, documents = 0, bytes = 0;
  uint64_t unmarked = 0;  // conversations the tokenizer's document boundary does not mark
};

Tokenized tokenize_corpus(const Options& opt, const std::vector<CorpusInput>& inputs,
                          const Tokenizer& tok, const ChatFormat* chat, TokenSpool& train,
                          TokenSpool& val) {
  uint64_t total_bytes = 0;
  bool sized = true;
  for (const auto& in : inputs) {
    total_bytes += in.bytes;
    sized = sized && in.path != "-";
  }
  CorpusReader reader(inputs, {opt.jsonl_field, opt.prompt_field, opt.messages_field});
  Progress progress(opt.progress_seconds);
  Tokenized done;
  std::vector<TextPiece> batch;
  size_t batch_bytes = 0;
  bool more = true;
  while (more) {
    TextPiece piece;
    more = reader.next(piece);
    if (more) {
      batch_bytes += piece.prompt.size() + piece.text.size();
      batch.push_back(std::move(piece));
    }
    if (batch_bytes < kBatchBytesPerThread * opt.threads && more) continue;
    const auto tokens = tokenize_pieces(tok, batch, opt.threads, chat);
    for (const auto& t : tokens) {
      const bool to_val = goes_to_validation(opt.split_seed, done.pieces++, opt.val_fraction);
      done.val_pieces += to_val;
      done.unmarked += !t.marked;
      (to_val ? val : train).append(t.tokens, t.scored);
    }
    batch.clear();
    batch_bytes = 0;
    if (progress.due()) {
      const double read = static_cast<double>(reader.bytes_read());
      std::cerr << "prepare-data: read " << format_count(read, "B");
      if (sized && total_bytes > 0)
        std::cerr << " of " << format_count(static_cast<double>(total_bytes), "B") << " ("
                  << static_cast<int>(100 * read / static_cast<double>(total_bytes)) << "%)";
      std::cerr << ", " << reader.documents() << " documents, " << train.size() + val.size()
                << " tokens, " << format_count(read / progress.elapsed(), "B/s") << std::endl;
    }
  }
  done.documents = reader.documents();
  done.bytes = reader.bytes_read();
  return done;
}

// A token file to write: tokens [begin, end) of a spool.
struct TokenFile {
  std::string name;
  TokenSpool* spool = nullptr;
  uint64_t begin = 0, end = 0;
};

std::string shard_name(size_t i, const std::string& ext) {
  char name[32];
  std::snprintf(name, sizeof name, "train_%06zu", i);
  return name + ext;
}

std::string fraction_text(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", fraction);
  return text;
}

// The token files: train (or its shards) then val. The seeded split when it gave both sides
// tokens; else the last val_fraction of the one non-empty spool (a corpus of few pieces).
std::vector<TokenFile> plan_token_files(const Options& opt, const std::string& ext,
                                        const Tokenizer& tok, const Tokenized& done,
                                        TokenSpool& train, TokenSpool& val, std::string& split) {
  const std::string seed = std::to_string(opt.split_seed);
  TokenFile train_part{"", &train, 0, train.size()}, val_part{"val" + ext, &val, 0, val.size()};
  if (train.size() == 0 || val.size() == 0) {
    TokenSpool& all = train.size() > 0 ? train : val;
    const uint64_t n = all.size();
    const uint64_t n_val =
        std::max<uint64_t>(kMinTokensPerFile, std::llround(opt.val_fraction * n));
    require(n_val + kMinTokensPerFile <= n,
            "the input gives only " + std::to_string(n) + " tokens (" + tok.name() +
                " tokenizer): split at --val-fraction " + fraction_text(opt.val_fraction) +
                " that is " + std::to_string(n > n_val ? n - n_val : 0) + " for train and " +
                std::to_string(std::min(n, n_val)) + " for val, and each file needs at least " +
                std::to_string(kMinTokensPerFile) + " (an input token and its next-token target)");
    train_part = {"", &all, 0, n - n_val};
    val_part = {"val" + ext, &all, n - n_val, n};
    split = "the last " + fraction_text(opt.val_fraction) + " of the tokens (--split-seed " + seed +
            " chose " + (val.size() == 0 ? "none" : "all") + " of " + std::to_string(done.pieces) +
            " pieces for val)";
  } else {
    require(train.size() >= kMinTokensPerFile && val.size() >= kMinTokensPerFile,
            "the seeded split (--split-seed " + seed + ") gives " + std::to_string(train.size()) +
                " tokens to train and " + std::to_string(val.size()) +
                " to val, and each file needs at least " + std::to_string(kMinTokensPerFile) +
                ": choose another --split-seed");
    split = "seeded, " + std::to_string(done.val_pieces) + " of " + std::to_string(done.pieces) +
            " pieces to val (--split-seed " + seed + ")";
  }
  std::vector<TokenFile> files;
  if (opt.shard_tokens == 0) {
    files.push_back(train_part);
    files.back().name = "train" + ext;
  } else {
    for (uint64_t b = train_part.begin; b < train_part.end;) {
      uint64_t e = std::min<uint64_t>(train_part.end, b + opt.shard_tokens);
      if (train_part.end - e < kMinTokensPerFile) e = train_part.end;  // a 1-token tail joins
      files.push_back({shard_name(files.size(), ext), train_part.spool, b, e});
      b = e;
    }
  }
  files.push_back(val_part);
  return files;
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

// The output directory: created if missing, and then removed again unless keep() was called.
class OutDir {
 public:
  explicit OutDir(const fs::path& dir) : dir_(dir) {
    std::error_code ec;
    created_ = !fs::exists(dir, ec);
    fs::create_directories(dir, ec);
    require(!ec, "cannot create --out-dir '" + dir.string() + "': " + ec.message());
  }
  ~OutDir() {
    std::error_code ec;
    if (created_) fs::remove(dir_, ec);  // only if empty: the failed run's files are gone
  }
  OutDir(const OutDir&) = delete;
  OutDir& operator=(const OutDir&) = delete;
  void keep() { created_ = false; }

 private:
  fs::path dir_;
  bool created_ = false;
};

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
  const std::vector<CorpusInput> inputs =
      list_corpus_inputs(opt.inputs, opt.input_format, std::cerr);
  require(opt.vocab_size == 0 || std::none_of(inputs.begin(), inputs.end(),
                                              [](const auto& in) { return in.path == "-"; }),
          "--vocab-size trains the model on the input before tokenizing it, so it reads the "
          "input twice: give files, not standard input (-)");
  require(!opt.jsonl_field_given ||
              std::any_of(inputs.begin(), inputs.end(), [](const auto& in) { return in.jsonl; }),
          "--jsonl-field names the field of a JSON Lines document, and no input is JSON Lines "
          "(a name ending in .jsonl, or --input-format jsonl): leave it out, or give one");
  for (const CorpusInput& in : inputs)
    require((opt.prompt_field.empty() && opt.messages_field.empty()) || in.jsonl,
            std::string(opt.prompt_field.empty() ? "--messages-field" : "--prompt-field") +
                " names a field of a JSON Lines document, and input '" + in.path +
                "' is text: give JSON Lines only (names ending in .jsonl, or --input-format "
                "jsonl)");
  // Never the out-dir's own files as text (an input directory holding it, an earlier run's
  // outputs named), which --overwrite would tokenize into the new ones.
  const fs::path out = fs::weakly_canonical(dir, ec);
  for (const CorpusInput& in : inputs)
    require(in.path == "-" || fs::weakly_canonical(in.path, ec).parent_path() != out,
            "input '" + in.path + "' lies in --out-dir '" + opt.out_dir +
                "', where prepare-data writes its files: give the text from another directory");

  const TempDir tmp;
  const std::unique_ptr<Tokenizer> tok = make_tokenizer(opt, inputs, tmp);
  check_format_holds(opt.format, tok->vocab_size());
  const std::optional<ChatFormat> chat =
      opt.messages_field.empty()
          ? std::nullopt
          : std::optional(load_chat_format(*tok, opt.chat_template, opt.chat_template_kwargs));
  // The tokenizer's files, copied beside: its own, and a Hugging Face tokenizer's the template
  // conversations are rendered by, in place of its chat_template.jinja.
  std::vector<TokenizerFile> tok_files = tok->files();
  if (chat && !chat->file.empty() && tok->name() == HfTokenizer::kName) {
    std::erase_if(tok_files, [](const TokenizerFile& f) { return f.role == "chat_template"; });
    tok_files.push_back({"chat_template", chat->file, kChatTemplateFile});
  }
  for (const TokenizerFile& f : tok_files)
    require(opt.overwrite || !fs::exists(fs::symlink_status(dir / f.copy_name, ec)),
            // std::string first: GCC 12 sees a false -Wrestrict in "'" + a temporary here
            std::string("'") + (dir / f.copy_name).string() +
                "' exists; pass --overwrite to replace it");

  OutDir out_dir(dir);
  struct Written {
    std::string name;
    uint64_t tokens, scored;
  };
  std::vector<Written> written;
  std::vector<std::string> names;
  Tokenized done;
  std::string split;
  {  // the spools live until the token files are written
    const bool masked = !opt.prompt_field.empty() || chat;
    TokenSpool train((dir / ".prepare-data-train.spool").string(), tok->vocab_size(), masked);
    TokenSpool val((dir / ".prepare-data-val.spool").string(), tok->vocab_size(), masked);
    done = tokenize_corpus(opt, inputs, *tok, chat ? &*chat : nullptr, train, val);
    require(done.bytes > 0, "the input is empty");
    const std::vector<TokenFile> token_files =
        plan_token_files(opt, ext, *tok, done, train, val, split);
    for (const auto& f : token_files) names.push_back(f.name);
    for (const auto& f : tok_files) names.push_back(f.copy_name);
    names.push_back(kTokenizerFile);

    // Write all under temporary names, then rename: no half-written outputs are left behind.
    try {
      Progress progress(opt.progress_seconds);
      for (const auto& f : token_files) {
        TokenFileWriter writer((dir / f.name).string() + ".tmp",
                               file_kind(opt.format, tok->vocab_size()), f.end - f.begin,
                               tok->vocab_size(), tok->name(), masked);
        uint64_t at = 0, scored = 0;
        f.spool->read(f.begin, f.end, [&](const uint32_t* t, const uint8_t* mask, size_t n) {
          writer.append(t, n, mask);
          at += n;
          scored += mask ? static_cast<uint64_t>(std::count(mask, mask + n, uint8_t{1})) : n;
          if (progress.due())
            std::cerr << "prepare-data: writing " << f.name << ": " << at << " of "
                      << f.end - f.begin << " tokens" << std::endl;
        });
        if (done.unmarked > 0) writer.mark_documents_unmarked();
        writer.finish();
        written.push_back({f.name, f.end - f.begin, scored});
      }
      for (const auto& f : tok_files) {
        const std::string to = (dir / f.copy_name).string() + ".tmp";
        fs::copy_file(f.path, to, fs::copy_options::overwrite_existing, ec);
        require(!ec, "cannot copy '" + f.path + "' to '" + to + "': " + ec.message());
      }
      write_file_synced((dir / kTokenizerFile).string() + ".tmp",
                        tokenizer_descriptor_json(*tok, tok_files));
      for (const auto& name : names) fsync_path((dir / name).string() + ".tmp");
    } catch (...) {
      for (const auto& name : names) fs::remove((dir / name).string() + ".tmp", ec);
      throw;
    }
  }
  out_dir.keep();
  rename_all(dir, names, stale_train_files(dir, ext, names), faults);
  for (const auto& f : written) {
    std::cout << (f.name.starts_with("val") ? "val:   " : "train: ") << f.tokens << " tokens";
    if (!opt.prompt_field.empty() || chat) std::cout << " (" << f.scored << " scored)";
    std::cout << " -> " << (dir / f.name).string() << "\n";
  }
  if (!opt.prompt_field.empty())
    std::cout << "loss mask: /loss_mask scores the '" << opt.jsonl_field
              << "' tokens (and a document's end token), not a document's start token nor its '"
              << opt.prompt_field << "' tokens\n";
  if (chat)
    std::cout << "loss mask: /loss_mask scores the assistant's turns of '" << opt.messages_field
              << "' as " << chat->source << " renders them ("
              << (chat->chat_template.has_generation()
                      ? "its {% generation %} blocks"
                      : "what each assistant message adds after the generation prompt")
              << "), nothing else\n";
  if (chat) std::cout << conversation_marks(*tok, done.unmarked, done.documents);
  std::cout << "tokenizer: " << tok->name() << " (vocabulary " << tok->vocab_size()
            << document_marks(*tok) << ") -> "
            << (dir / kTokenizerFile).string() << "\n";
  std::cout << "input: read " << format_count(static_cast<double>(done.bytes), "B") << ", "
            << done.documents << " documents, " << done.pieces << " pieces\n";
  std::cout << "split: " << split << "\n";
  std::cout << "peak memory: " << peak_resident_bytes() / (1 << 20) << " MiB (VmHWM)\n";
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("prepare-data", argc, argv, run); }
