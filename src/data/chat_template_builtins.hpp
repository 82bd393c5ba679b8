// What chat_template_render.cpp (expressions and statements) and chat_template_builtins.cpp
// (filters, tests, methods, globals, str() and tojson) need of each other.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat_template_ast.hpp"

namespace mpitrain::chat_template {

constexpr int kMaxCallDepth = 256;  // macro calls and tojson nested deeper than this are refused

// A failure where Python raises (TypeError, UndefinedError, ...); the evaluator adds the line.
class EvalError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A str, int, list, dict, or an Undefined that says what is missing.
inline Value str_value(std::string s) { return Value{std::move(s)}; }
inline Value int_value(int64_t i) { return Value{i}; }
inline Value list_value(List list) { return Value{std::make_shared<List>(std::move(list))}; }
inline Value dict_value(Dict dict) { return Value{std::make_shared<Dict>(std::move(dict))}; }
inline Value undefined(std::string what) { return Value{Undefined{std::move(what)}}; }

// Whether v is a bool, int or float.
inline bool is_number(const Value& v) { return v.is<bool>() || v.is<int64_t>() || v.is<double>(); }
// Whether v is a bool or int (Python's bool is an int).
inline bool is_integer(const Value& v) { return v.is<bool>() || v.is<int64_t>(); }
// An integer's value; v must be one.
inline int64_t as_integer(const Value& v) { return v.is<bool>() ? v.as<bool>() : v.as<int64_t>(); }
// A number's value as a float; v must be one.
inline double as_double(const Value& v) {
  return v.is<double>() ? v.as<double>() : static_cast<double>(as_integer(v));
}

// Python's type name of v, for messages.
inline std::string type_name(const Value& v) {
  static constexpr std::array<const char*, 10> kNames = {"Undefined", "NoneType", "bool", "int",
                                                         "float",     "str",      "list", "dict",
                                                         "Namespace", "function"};
  return kNames[v.data.index()];
}

// Raises the UndefinedError of using v, an Undefined, as a value.
[[noreturn]] inline void fail_undefined(const Value& v) { throw EvalError(v.as<Undefined>().what); }

// The arguments of a filter, method, macro or global call.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // The argument at `index` or called `name`; `fallback` when there is none.
  Value get(size_t index, std::string_view name, Value fallback = {}) const {
    if (index < positional.size()) return positional[index];
    return keyword(name, std::move(fallback));
  }
  // The keyword argument `name`, or `fallback`.
  Value keyword(std::string_view name, Value fallback = {}) const {
    for (const auto& [key, value] : keywords) {
      if (key == name) return value;
    }
    return fallback;
  }
};

// ---- Python's value semantics, defined in chat_template_render.cpp ----

// bool(v).
bool truthy(const Value& v);
// a == b.
bool equals(const Value& a, const Value& b);
// <0, 0, >0 as Python orders a and b; raises TypeError where `a op b` has no order.
int compare(const Value& a, const Value& b, std::string_view op);
// The value of `key` in `dict`, or null.
const Value* dict_find(const Dict& dict, const Value& key);
// The items of `for x in v`: a list's items, a dict's keys, a string's characters.
List iterate(const Value& v);
// `item in container`.
bool contains(const Value& container, const Value& item);
// len(v).
int64_t length(const Value& v);
// `a op b` for op one of + - * / // % **.
Value arithmetic(const std::string& op, const Value& a, const Value& b);
// Python's a % b of ints: floored, so it takes b's sign; raises when b is 0.
int64_t floor_mod(int64_t a, int64_t b);
// obj[key] as jinja2's getitem: a missing item is undefined, not an error.
Value get_item(const Value& object, const Value& key);

// ---- builtins, defined in chat_template_builtins.cpp ----

// A string's characters (code points), each as its UTF-8 bytes.
std::vector<std::string_view> characters(std::string_view s);
// A UTF-8 string's len().
size_t character_count(std::string_view s);
// Python's str(v).
std::string to_str(const Value& v);
// Python's repr(v).
std::string repr(const Value& v);
// v as an int; raises TypeError, naming `what`, when it is not one.
int64_t require_integer(const Value& v, std::string_view what);
// `v|name(args)`: jinja2's filter, or transformers' tojson.
Value apply_filter(const std::string& name, const Value& v, const Arguments& args);
// `v is name(args)`: jinja2's test.
bool apply_test(const std::string& name, const Value& v, const List& args);
// `s.method(args)`: the str methods templates call.
Value string_method(const std::string& s, const std::string& method, const Arguments& args);
// `list.method(args)`: the non-mutating list methods; the mutating ones raise as the sandbox does.
Value list_method(const List& list, const std::string& method, const Arguments& args);
// `dict.method(args)`: the non-mutating dict methods; the mutating ones raise as the sandbox does.
Value dict_method(const Dict& dict, const std::string& method, const Arguments& args);
// Calls one of the globals (raise_exception, strftime_now, namespace, range, dict).
Value call_builtin(Builtin builtin, const Arguments& args);
// The globals every template sees, by name.
std::vector<std::pair<std::string, Value>> global_functions();

}  // namespace mpitrain::chat_template
