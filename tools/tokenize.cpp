// tokenize: text <-> token ids with a tokenizer as the trainer and prepare-data read it.
//
//   tokenize TOKENIZER < text > ids        (ids on one line, separated by spaces)
//   tokenize --decode TOKENIZER < ids > text
//   tokenize --jsonl TOKENIZER < strings > ids  (each line a JSON string; its ids on a line)
//
// TOKENIZER: anything load_tokenizer takes (data/tokenizer.hpp): a token directory's
// tokenizer.json, a Hugging Face tokenizer.json, a directory with GPT-2's encoder.json +
// vocab.bpe, a SentencePiece .model, or llm.c's gpt2_tokenizer.bin (decode only). Bad input -> one message on stderr, exit code 2.
#include <boost/program_options.hpp>
#include <iostream>
#include <nlohmann/json.hpp>
#include <iterator>
#include <string>
#include <vector>

#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

int run(int argc, char** argv) {
  std::string path;
  bool decode = false, jsonl = false;
  po::options_description named(
      "tokenize: text on stdin -> token ids on stdout (or back with --decode)\n"
      "usage: tokenize [--decode] TOKENIZER\noptions");
  named.add_options()("help,h", "show this help")("decode", po::bool_switch(&decode),
                                                  "read ids, write the text they decode to")(
      "jsonl", po::bool_switch(&jsonl), "read one JSON string a line, write its ids on a line");
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
    throw UsageError(std::string(e.what()) + " (usage: tokenize [--decode] TOKENIZER)");
  }
  require(!(decode && jsonl), "--decode and --jsonl do not go together");
  const auto tok = load_tokenizer(path);
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
