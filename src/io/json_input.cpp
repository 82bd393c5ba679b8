#include "mpitrain/io/json_input.hpp"

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

using json = nlohmann::json;

namespace {

bool is_int64(const json& v) {
  return v.is_number_integer() && (!v.is_number_unsigned() || v.get<uint64_t>() <= INT64_MAX);
}

// "a string", "a number", "an array", "an object", "a boolean", "null": for messages.
std::string json_kind(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return "a number";
    default:
      return "a binary value";
  }
}

}  // namespace

json parse_json_input(const std::string& text, const std::string& file) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw UsageError(file + ": not valid JSON: " + e.what());
  }
}

void require_json_kind(bool ok, const json& value, const std::string& file,
                       const std::string& field, const std::string& kind) {
  if (!ok) throw UsageError(file + ": " + field + " must be " + kind + ", got " + json_kind(value));
}

JsonFields::JsonFields(const json& object, std::string file, std::string prefix)
    : object_(object), file_(std::move(file)), prefix_(std::move(prefix)) {
  require_json_kind(object.is_object(), object, file_, prefix_.empty() ? "the document" : prefix_,
                    "an object");
}

const json* JsonFields::find(const std::string& name) const {
  const auto it = object_.find(name);
  return it == object_.end() || it->is_null() ? nullptr : &*it;
}

bool JsonFields::has(const std::string& name) const { return find(name) != nullptr; }

std::string JsonFields::field(const std::string& name) const {
  return prefix_.empty() ? name : prefix_ + "." + name;
}

std::optional<std::string> JsonFields::string(const std::string& name) const {
  const json* v = find(name);
  if (!v) return std::nullopt;
  require_json_kind(v->is_string(), *v, file_, field(name), "a string");
  return v->get<std::string>();
}

std::optional<int64_t> JsonFields::integer(const std::string& name) const {
  const json* v = find(name);
  if (!v) return std::nullopt;
  require_json_kind(is_int64(*v), *v, file_, field(name), "an integer below 2^63");
  return v->get<int64_t>();
}

std::optional<double> JsonFields::number(const std::string& name) const {
  const json* v = find(name);
  if (!v) return std::nullopt;
  require_json_kind(v->is_number(), *v, file_, field(name), "a number");
  return v->get<double>();
}

std::optional<bool> JsonFields::boolean(const std::string& name) const {
  const json* v = find(name);
  if (!v) return std::nullopt;
  require_json_kind(v->is_boolean(), *v, file_, field(name), "a boolean");
  return v->get<bool>();
}

std::optional<std::vector<int64_t>> JsonFields::integers(const std::string& name) const {
  const json* v = find(name);
  if (!v) return std::nullopt;
  require_json_kind(v->is_array(), *v, file_, field(name), "an array of integers");
  std::vector<int64_t> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    require_json_kind(is_int64(e), e, file_, field(name) + "[" + std::to_string(i) + "]",
                      "an integer below 2^63");
    out.push_back(e.get<int64_t>());
  }
  return out;
}

std::optional<JsonFields> JsonFields::member(const std::string& name) const {
  const json* v = find(name);
  if (!v) return std::nullopt;
  return JsonFields(*v, file_, field(name));
}

}  // namespace mpitrain
