// trace-merge: joins the per-rank timelines written by `trainer --trace DIR` into one Chrome-trace
// / Perfetto file, one process (pid = rank) per rank on the common time axis.
//
//   trace-merge --out FILE [--overwrite] INPUT...
//
// INPUT: a trace file (trace-rank<R>.json) or a directory (then every trace-rank*.json in it).
// Each must be a JSON array of trace events (or an object with a "traceEvents" array), every event
// an object with a string "ph" and a numeric "pid", and a numeric "ts" unless it is metadata
// ("ph": "M"); a pid may come from one file only; FILE may not be one of the inputs, nor exist
// unless --overwrite (written as FILE.tmp, then renamed: a failure leaves FILE as it was). Exit
// code: 0 written, 2 bad usage or bad input (one message, nothing written), 1 a failure writing.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;  // an event's members written in the order read

namespace {

constexpr const char* kUsage =
    "usage: trace-merge --out FILE [--overwrite] INPUT...  (INPUT: trace file or directory)";

struct Trace {
  std::string path;
  Json events;               // the array of event objects
  std::vector<double> pids;  // distinct, in order of appearance
};

std::vector<std::string> expand(const std::string& input) {
  std::error_code ec;
  if (!fs::is_directory(input, ec)) {
    require(fs::is_regular_file(input, ec), "no such trace file or directory: " + input);
    return {input};
  }
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(input, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("trace-rank", 0) == 0 && e.path().extension() == ".json")
      files.push_back(e.path().string());
  }
  require(!ec, "cannot list " + input + ": " + ec.message());
  require(!files.empty(), input + " holds no trace-rank*.json");
  return files;
}

Trace load(const std::string& path) {
  Trace t;
  t.path = path;
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), "cannot read " + path);
  Json doc;
  try {
    doc = Json::parse(in);
  } catch (const Json::exception& e) {
    throw UsageError(path + ": not JSON: " + e.what());
  }
  Json* list = doc.is_object() && doc.contains("traceEvents") ? &doc["traceEvents"] : &doc;
  require(list->is_array(),
          path + ": not a trace (a JSON array of events, or an object with \"traceEvents\")");
  for (size_t i = 0; i < list->size(); ++i) {
    const Json& e = (*list)[i];
    const std::string at = path + ": event " + std::to_string(i);
    require(e.is_object(), at + " is not an object");
    const auto ph = e.find("ph"), pid = e.find("pid"), ts = e.find("ts");
    require(ph != e.end() && ph->is_string(), at + " has no string \"ph\"");
    require(pid != e.end() && pid->is_number(), at + " has no numeric \"pid\"");
    require(*ph == "M" || (ts != e.end() && ts->is_number()), at + " has no numeric \"ts\"");
    if (std::find(t.pids.begin(), t.pids.end(), pid->get<double>()) == t.pids.end())
      t.pids.push_back(pid->get<double>());
  }
  t.events = std::move(*list);
  require(!t.events.empty(), path + ": no events");
  return t;
}

int run(int argc, char** argv) {
  std::string out;
  bool overwrite = false;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s\n", kUsage);
      return kExitOk;
    }
    if (arg == "--out" || arg == "-o") {
      require(i + 1 < argc, std::string("--out needs a file; ") + kUsage);
      out = argv[++i];
    } else if (arg == "--overwrite") {
      overwrite = true;
    } else {
      require(arg.empty() || arg[0] != '-', "unknown option " + arg + "; " + kUsage);
      inputs.push_back(arg);
    }
  }
  require(!out.empty() && !inputs.empty(), kUsage);
  std::error_code ec;

  std::vector<Trace> traces;
  for (const std::string& input : inputs)
    for (const std::string& file : expand(input)) {
      // (an --out that does not exist yet is no input: ec)
      require(!fs::equivalent(out, file, ec),
              "--out " + out + " is the input " + file + ": give another file to write");
      traces.push_back(load(file));
    }
  require(overwrite || !fs::exists(fs::symlink_status(out, ec)),
          "--out " + out + " exists: pass --overwrite to replace it, or give another file");
  // A pid (rank) from two files means two runs, or one file given twice.
  std::map<double, std::string> owner;
  for (const Trace& t : traces)
    for (const double pid : t.pids) {
      auto [it, fresh] = owner.emplace(pid, t.path);
      require(fresh, it->second == t.path
                         ? t.path + " is given twice"
                         : "pid " + std::to_string(static_cast<long long>(pid)) + " is in both " +
                               it->second + " and " + t.path + " (traces of two runs?)");
    }
  std::sort(traces.begin(), traces.end(), [](const Trace& a, const Trace& b) {
    return *std::min_element(a.pids.begin(), a.pids.end()) <
           *std::min_element(b.pids.begin(), b.pids.end());
  });

  const std::string tmp = out + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) MPITRAIN_THROW("cannot write " + tmp + ": " + std::strerror(errno));
  size_t n = 0;
  std::fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  for (const Trace& t : traces)
    for (const Json& ev : t.events) std::fprintf(f, "%s%s", n++ ? ",\n" : "", ev.dump().c_str());
  std::fprintf(f, "\n]}\n");
  if (std::ferror(f) || std::fclose(f) != 0) {
    const int error = errno;
    fs::remove(tmp, ec);
    MPITRAIN_THROW("cannot write " + tmp + ": " + std::strerror(error));
  }
  fs::rename(tmp, out, ec);
  if (ec) MPITRAIN_THROW("cannot rename " + tmp + " to " + out + ": " + ec.message());
  std::printf("trace-merge: %zu events of %zu ranks from %zu files -> %s\n", n, owner.size(),
              traces.size(), out.c_str());
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("trace-merge", argc, argv, run); }
