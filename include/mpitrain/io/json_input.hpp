// Reading the JSON of a file the user gave (config.json, a safetensors header): every field
// through a checked accessor, so that a wrong type is UsageError "<file>: <field> must be <kind>,
// got <kind>" (exit 2) rather than the JSON library's own type_error.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace mpitrain {

// The JSON document text, parsed; UsageError "<file>: not valid JSON: ..." otherwise.
nlohmann::json parse_json_input(const std::string& text, const std::string& file);

// UsageError "<file>: <field> must be <kind>, got <value's kind>" (a string, a number, an
// array, ...) unless ok.
void require_json_kind(bool ok, const nlohmann::json& value, const std::string& file,
                       const std::string& field, const std::string& kind);

// One JSON object of a file (UsageError if it is not one), read field by field without a copy:
// the object must outlive it. `prefix` names it in messages: "" for the document itself, the
// member's name for a member ("transformer.wte.weight.dtype must be a string, ...").
class JsonFields {
 public:
  JsonFields(const nlohmann::json& object, std::string file, std::string prefix = "");

  bool has(const std::string& name) const;  // present and not null

  std::optional<std::string> string(const std::string& name) const;
  std::optional<int64_t> integer(const std::string& name) const;
  std::optional<double> number(const std::string& name) const;
  std::optional<bool> boolean(const std::string& name) const;
  std::optional<std::vector<int64_t>> integers(const std::string& name) const;  // an array
  std::optional<JsonFields> member(const std::string& name) const;              // an object

 private:
  const nlohmann::json* find(const std::string& name) const;  // nullptr: absent or null
  std::string field(const std::string& name) const;           // "<prefix>.<name>" or "<name>"

  const nlohmann::json& object_;
  std::string file_, prefix_;
};

}  // namespace mpitrain
