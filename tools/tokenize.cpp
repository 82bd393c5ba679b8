// tokenize: text <-> token ids with a tokenizer as the trainer and prepare-data read it.
//
//   tokenize TOKENIZER < text > ids        (ids on one line, separated by spaces)
//   tokenize --decode TOKENIZER < ids > text
//   tokenize --jsonl TOKENIZER < strings > ids  (each line a JSON string; its ids on a line)
//   tokenize --show FILE [--from I] [--count N] TOKENIZER
//       tokens [I, I+N) of a token file decoded, one JSON line per stretch of tokens that its
//       loss mask scores as targets or not: {"from": i, "scored": true|false, "text": "..."}
//       (no mask: one stretch, every token scored) — what a fine-tuning set trains on
//
// TOKENIZER: anything load_tokenizer takes (data/tokenizer.hpp): a token directory's
// tokenizer.json, a Hugging Face tokenizer.json, a directory with GPT-2's encoder.json +
// vocab.bpe, a SentencePiece .model, or llm.c's gpt2_tokenizer.bin (decode only). Bad input -> one
// message on stderr, exit code 2.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdint>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpitrain/data/token_source.hpp"
#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

// Tokens [from, from+count) of `file` (clipped to its end), decoded a stretch of the same loss
// mask value at a time, as JSON lines.
void show(const std::string& file, uint64_t from, uint64_t count, const Tokenizer& tok) {
  const auto src = open_tokens(file);
  require(from < src->size(), "--from " + std::to_string(from) + ": '" + file + "' has " +
                                  std::to_string(src->size()) + " tokens");
  const uint64_t n = std::min(count, src->size() - from);
  std::vector<int32_t> ids(n);
  std::vector<uint8_t> scored(n, 1);
  src->read(from, n, ids.data());
  if (src->has_loss_mask()) src->read_loss_mask(from, n, scored.data());
  for (uint64_t a = 0, b = 0; a < n; a = b) {
    while (b < n && scored[b] == scored[a]) ++b;
    const nlohmann::json line = {{"from", from + a},
                                 {"scored", scored[a] != 0},
                                 {"text", tok.decode(ids.data() + a, b - a)}};
    std::cout << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
}

int run(int argc, char** argv) {
  std::string path, file;
  uint64_t from = 0, count = 256;
  bool decode = false, jsonl = false;
  po::options_description named(
      "tokenize: text on stdin -> token ids on stdout (or back with --decode)\n"
      "usage: tokenize [--decode | --jsonl | --show FILE] TOKENIZER\noptions");
  named.add_options()("help,h", "show this help")("decode", po::bool_switch(&decode),
                                                  "read ids, write the text they decode to")(
      "jsonl", po::bool_switch(&jsonl), "read one JSON string a line, write its ids on a line")(
      "show", po::value(&file)->value_name("FILE"),
      "decode a token file's tokens, one JSON line per stretch its loss mask scores or not")(
      "from", po::value(&from)->default_value(0), "--show: the first token")(
      "count", po::value(&count)->default_value(256), "--show: how many tokens");
  po::options_description all;
  all.add(named).add_options()("tokenizer", po::value(&path)->required());
  po::positional_options_description positional;
  positional.add("tokenizer", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << named << "\n";
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (usage: tokenize [--decode | --jsonl | --show FILE] TOKENIZER)");
  }
  require(!(decode && jsonl), "--decode and --jsonl do not go together");
  require(file.empty() || !(decode || jsonl),
          "--show reads a token file, not stdin: leave out --decode and --jsonl");
  require(!file.empty() || (vm["from"].defaulted() && vm["count"].defaulted()),
          "--from and --count are for --show");
  const auto tok = load_tokenizer(path);
  if (!file.empty()) {
    show(file, from, count, *tok);
    return kExitOk;
  }
  const auto print = [](const std::vector<uint32_t>& ids) {
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? " " : "") << ids[i];
    std::cout << "\n";
  };
  if (jsonl) {
    size_t n = 0;
    for (std::string line; std::getline(std::cin, line);) {
      const auto text = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      require(text.is_string(), "--jsonl: input line " + std::to_string(++n) + " is not a JSON string");
      print(tok->encode(text.get<std::string>()));
    }
    return kExitOk;
  }
  if (decode) {
    std::vector<int32_t> ids;
    for (long long id; std::cin >> id;) {
      require(id >= 0 && id < tok->vocab_size(), "--decode: id " + std::to_string(id) +
                                                     " is not in the vocabulary (0 to " +
                                                     std::to_string(tok->vocab_size() - 1) + ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    require(std::cin.eof(), "--decode reads integer ids separated by white space");
    std::cout << tok->decode(ids.data(), ids.size());
    return kExitOk;
  }
  const std::string text((std::istreambuf_iterator<char>(std::cin)),
                         std::istreambuf_iterator<char>());
  print(tok->encode(text));
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("tokenize", argc, argv, run); }
