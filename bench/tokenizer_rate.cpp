// tokenizer-rate: how fast each tokenizer encodes a text, on one thread.
//
//   tokenizer-rate --text FILE [--repeats 3] TOKENIZER...
//
// TOKENIZER: anything load_tokenizer reads (data/tokenizer.hpp). Per tokenizer, one row: the
// seconds to load it, MB/s of text encoded (the best of --repeats encodes of the whole text after
// a warm-up one; MB = 10^6 bytes), bytes per token, and the MB/s as a ratio to the first row's.
// Seconds are the process's CPU seconds (one thread: the wall time of an idle core), so that a
// shared machine's other jobs move them less than they move wall time.
// The text is split into 1 MB documents at line ends, each encoded on its own as prepare-data
// encodes a file, so a tokenizer's per-call cache lives as long as it does there.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

double cpu_seconds() {
  timespec t{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0)
    MPITRAIN_THROW(std::string("clock_gettime: ") + std::strerror(errno));
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// text cut into documents of about `size` bytes, each ending at a line end.
std::vector<std::string> documents(const std::string& text, size_t size) {
  std::vector<std::string> docs;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', std::min(text.size(), pos + size));
    end = end == std::string::npos ? text.size() : end + 1;
    docs.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return docs;
}

int run(int argc, char** argv) {
  std::string text_file;
  std::vector<std::string> tokenizers;
  int repeats = 3;
  po::options_description named(
      "tokenizer-rate: MB/s of text each tokenizer encodes on one thread\n"
      "usage: tokenizer-rate --text FILE [--repeats N] TOKENIZER...\noptions");
  named.add_options()("help,h", "show this help")(
      "text", po::value(&text_file)->required(), "the text to encode")(
      "repeats", po::value(&repeats)->default_value(3), "timed encodes (the best counts)");
  po::options_description all;
  all.add(named).add_options()("tokenizer", po::value(&tokenizers));
  po::positional_options_description positional;
  positional.add("tokenizer", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << named << "\n";
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  require(!tokenizers.empty(), "no TOKENIZER given");
  require(repeats >= 1 && repeats <= 100, "--repeats must be in [1, 100]");
  std::ifstream in(text_file, std::ios::binary);
  require(in.good(), "cannot read --text '" + text_file + "'");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  require(!text.empty(), "--text '" + text_file + "' is empty");
  const std::vector<std::string> docs = documents(text, 1000000);
  // Every tokenizer loaded (and timed) first: a bad one is refused before any is measured.
  std::vector<std::unique_ptr<Tokenizer>> loaded;
  std::vector<double> load_seconds;
  for (const std::string& path : tokenizers) {
    const double t0 = cpu_seconds();
    loaded.push_back(load_tokenizer(path));
    load_seconds.push_back(cpu_seconds() - t0);
  }

  std::printf("%.2f MB of text in %zu documents, 1 thread, best of %d, CPU seconds\n",
              text.size() / 1e6, docs.size(), repeats);
  std::printf("%-30s %8s %8s %12s %8s\n", "tokenizer", "load s", "MB/s", "bytes/token",
              "ratio");
  double first = 0;
  for (size_t i = 0; i < tokenizers.size(); ++i) {
    const Tokenizer* tok = loaded[i].get();
    size_t tokens = 0;
    double seconds = 1e30;
    for (int r = 0; r <= repeats; ++r) {  // r = 0: the warm-up
      const double start = cpu_seconds();
      tokens = 0;
      for (const std::string& d : docs) tokens += tok->encode(d).size();
      if (r > 0) seconds = std::min(seconds, cpu_seconds() - start);
    }
    const double rate = text.size() / 1e6 / seconds;
    if (first == 0) first = rate;
    const std::string name =
        tok->name() + " " + std::filesystem::path(tokenizers[i]).filename().string();
    std::printf("%-30s %8.2f %8.2f %12.2f %8.2f\n", name.c_str(), load_seconds[i], rate,
                static_cast<double>(text.size()) / tokens, rate / first);
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("tokenizer-rate", argc, argv, run); }
