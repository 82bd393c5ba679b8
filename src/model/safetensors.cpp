#include "mpitrain/model/safetensors.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "mpitrain/io/json_input.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/unique_fd.hpp"
#include "mpitrain/tensor/bf16.hpp"

namespace mpitrain {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors are little-endian");

constexpr uint64_t kMaxHeader = uint64_t{100} << 20;  // safetensors' own limit on the header

// Bytes per element of a safetensors dtype; 0 for a name safetensors does not define.
uint64_t dtype_width(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "BOOL" || dtype == "U8" || dtype == "I8" || dtype == "F8_E4M3" || dtype == "F8_E5M2")
    return 1;
  return 0;
}

// The JSON text parsed; UsageError when it is not JSON or an object names a key twice (the JSON
// library would keep the last silently).
json parse_unique_keys(const std::string& text, const std::string& where) {
  std::vector<std::set<std::string>> open;  // the keys of each object being parsed
  std::string twice;
  const json::parser_callback_t note = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open.pop_back();
    } else if (event == json::parse_event_t::key && twice.empty() &&
               !open.back().insert(parsed.get<std::string>()).second) {
      twice = parsed.get<std::string>();
    }
    return true;
  };
  json doc;
  try {
    doc = json::parse(text, note);
  } catch (const json::exception& e) {
    throw UsageError(where + ": not valid JSON: " + e.what());
  }
  if (!twice.empty()) throw UsageError(where + ": names " + twice + " twice");
  return doc;
}

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw UsageError(file.string() + ": cannot open: " + std::strerror(errno));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw UsageError(file.string() + ": cannot read: " + std::strerror(errno));
  return text;
}

// A file name the index may map to: one inside the directory itself.
bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\\') == std::string::npos;
}

}  // namespace

bool SafetensorsSet::present(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(fs::path(dir) / kSafetensorsFile, ec) ||
         fs::is_regular_file(fs::path(dir) / kSafetensorsIndex, ec);
}

SafetensorsSet::SafetensorsSet(const std::string& dir) {
  const fs::path single = fs::path(dir) / kSafetensorsFile, index = fs::path(dir) / kSafetensorsIndex;
  std::error_code ec;
  const bool has_index = fs::exists(index, ec);
  if (!has_index) {
    source_ = single.string();
    add_file(source_, nullptr);
    return;
  }
  source_ = index.string();
  if (fs::exists(single, ec))
    throw UsageError(dir + " holds both " + kSafetensorsFile + " and " + kSafetensorsIndex +
                     ": which one is the model is unclear; remove one");
  const json doc = parse_unique_keys(read_text(index), source_);
  const std::optional<JsonFields> map = JsonFields(doc, source_).member("weight_map");
  if (!map) throw UsageError(source_ + ": needs an object 'weight_map' {tensor: file}");
  std::map<std::string, std::string> weight_map;  // tensor -> its file's path
  std::set<std::string> files;
  for (const auto& [tensor, file] : doc["weight_map"].items()) {
    require_json_kind(file.is_string(), file, source_, "weight_map." + tensor, "a file name");
    const std::string name = file.get<std::string>();
    if (!plain_name(name))
      throw UsageError(source_ + ": weight_map." + tensor + " = " + name +
                       " is not a file of the directory itself");
    weight_map[tensor] = (fs::path(dir) / name).string();
    files.insert(weight_map[tensor]);
  }
  if (files.empty()) throw UsageError(source_ + ": weight_map maps no tensor");
  for (const std::string& file : files) add_file(file, &weight_map);
  for (const auto& [tensor, file] : weight_map)
    if (!tensors_.count(tensor))
      throw UsageError(source_ + " maps " + tensor + " to " + file + ", which lacks it");
}

// Reads the header of `path` and adds its tensors; weight_map: the index's tensor -> file
// (nullptr: no index).
void SafetensorsSet::add_file(const std::string& path,
                              const std::map<std::string, std::string>* weight_map) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open: " + std::strerror(errno));
  uint64_t n = 0;
  if (!in.read(reinterpret_cast<char*>(&n), sizeof n) || n == 0 || n > kMaxHeader)
    throw UsageError(path + ": not a safetensors file (header length)");
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n)))
    throw UsageError(path + ": truncated safetensors header");
  const json header = parse_unique_keys(text, path + " (its header)");
  require_json_kind(header.is_object(), header, path, "the header",
                    "an object {tensor: {dtype, shape, data_offsets}}");
  std::error_code ec;
  const uint64_t size = fs::file_size(path, ec);
  if (ec) throw UsageError(path + ": " + ec.message());
  const uint64_t data = sizeof n + n;
  const JsonFields fields(header, path);
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") continue;
    const JsonFields t = *fields.member(name);
    StoredTensor s{path, t.string("dtype").value_or(""),
                   t.integers("shape").value_or(std::vector<int64_t>{}), 0, 0};
    const uint64_t width = dtype_width(s.dtype);
    if (width == 0) throw UsageError(path + ": " + name + " has no safetensors dtype ('" + s.dtype + "')");
    uint64_t count = 1;
    for (int64_t d : s.shape) {
      if (d < 0) throw UsageError(path + ": " + name + " has a negative dimension");
      count *= static_cast<uint64_t>(d);
    }
    const std::vector<int64_t> off = t.integers("data_offsets").value_or(std::vector<int64_t>{});
    if (off.size() != 2 || off[0] < 0 || off[1] < off[0] ||
        static_cast<uint64_t>(off[1] - off[0]) != count * width ||
        data + static_cast<uint64_t>(off[1]) > size)
      throw UsageError(path + ": " + name +
                       ": data offsets do not fit its shape or lie outside the file");
    s.begin = data + static_cast<uint64_t>(off[0]);
    s.bytes = count * width;
    if (weight_map) {
      const auto mapped = weight_map->find(name);
      if (mapped == weight_map->end())
        throw UsageError(path + " holds " + name + ", which " + source_ + " does not map");
      if (mapped->second != path)
        throw UsageError(path + " holds " + name + ", which " + source_ + " maps to " +
                         mapped->second + ": a tensor in two files");
    }
    tensors_.emplace(name, std::move(s));
  }
}

const StoredTensor* SafetensorsSet::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

uint64_t SafetensorsSet::read_block(const StoredTensor& t, const Block& b, float* out) const {
  if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16")
    throw UsageError(t.file + ": a tensor is " + t.dtype + "; F32, F16 or BF16 only");
  const uint64_t width = dtype_width(t.dtype);
  const uint64_t row_bytes = static_cast<uint64_t>(b.cols) * width;
  if (b.rows <= 0 || b.cols <= 0) return 0;
  if (b.row0 < 0 || b.col0 < 0 || b.col0 + b.cols > b.width ||
      static_cast<uint64_t>((b.row0 + b.rows) * b.width) * width > t.bytes)
    MPITRAIN_THROW(t.file + ": a block outside its tensor was asked for");
  const UniqueFd fd(::open(t.file.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw UsageError(t.file + ": cannot open: " + std::strerror(errno));
  // Whole rows: one range; else each row's segment at its place (out's row i, 2-byte values
  // packed at the front of its floats until widened below).
  const bool whole_rows = b.col0 == 0 && b.cols == b.width;
  const uint64_t ranges = whole_rows ? 1 : static_cast<uint64_t>(b.rows);
  const uint64_t range_bytes = whole_rows ? row_bytes * static_cast<uint64_t>(b.rows) : row_bytes;
  char* bytes = reinterpret_cast<char*>(out);
  for (uint64_t i = 0; i < ranges; ++i) {
    const uint64_t at = t.begin + (static_cast<uint64_t>(b.row0) + i) * b.width * width +
                        static_cast<uint64_t>(b.col0) * width;
    for (uint64_t done = 0; done < range_bytes;) {  // pread may return less than asked
      const ssize_t got = ::pread(fd.get(), bytes + i * range_bytes + done, range_bytes - done,
                                  static_cast<off_t>(at + done));
      if (got <= 0)
        throw UsageError(t.file + ": cannot read " + std::to_string(range_bytes) + " bytes at " +
                         std::to_string(at) + ": " +
                         (got == 0 ? "the file ends first" : std::strerror(errno)));
      done += static_cast<uint64_t>(got);
    }
  }
  const uint64_t count = static_cast<uint64_t>(b.rows) * static_cast<uint64_t>(b.cols);
  if (width == 4) return count * width;
  // Widened in place from the back: float i (bytes 4i..4i+3) overwrites only 2-byte values
  // at i and above, already read.
  const bool bf16 = t.dtype == "BF16";
  for (uint64_t i = count; i-- > 0;) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, sizeof h);  // bytes, not a uint16_t*: out is floats
    out[i] = bf16 ? bf16_to_float(h) : static_cast<float>(std::bit_cast<_Float16>(h));
  }
  return count * width;
}

}  // namespace mpitrain
