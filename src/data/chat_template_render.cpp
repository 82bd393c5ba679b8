// Chat templates' evaluation: the tree of chat_template_ast.hpp rendered with Python's semantics
// as jinja2's ImmutableSandboxedEnvironment has them (filters, tests, methods and globals: in
// chat_template_builtins.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chat_template_ast.hpp"
#include "chat_template_builtins.hpp"
#include "mpitrain/data/chat_template.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {
namespace chat_template {

// ---- truth, equality, order ----

bool truthy(const Value& v) {
  switch (v.data.index()) {
    case 0:
    case 1:
      return false;
    case 2:
      return v.as<bool>();
    case 3:
      return v.as<int64_t>() != 0;
    case 4:
      return v.as<double>() != 0;
    case 5:
      return !v.as<std::string>().empty();
    case 6:
      return !v.as<std::shared_ptr<List>>()->empty();
    case 7:
      return !v.as<std::shared_ptr<Dict>>()->empty();
    default:
      return true;
  }
}

const Value* dict_find(const Dict& dict, const Value& key) {
  for (const auto& [k, v] : dict) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

namespace {

bool dicts_equal(const Dict& a, const Dict& b) {
  if (a.size() != b.size()) return false;
  return std::all_of(a.begin(), a.end(), [&](const auto& entry) {
    const Value* other = dict_find(b, entry.first);
    return other && equals(entry.second, *other);
  });
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (is_number(a) && is_number(b)) {
    if (is_integer(a) && is_integer(b)) return as_integer(a) == as_integer(b);
    return as_double(a) == as_double(b);
  }
  if (a.data.index() != b.data.index()) return false;
  if (a.is<std::string>()) return a.as<std::string>() == b.as<std::string>();
  if (a.is<std::shared_ptr<List>>()) {
    const List& x = *a.as<std::shared_ptr<List>>();
    const List& y = *b.as<std::shared_ptr<List>>();
    return std::equal(x.begin(), x.end(), y.begin(), y.end(), equals);
  }
  if (a.is<std::shared_ptr<Dict>>()) {
    return dicts_equal(*a.as<std::shared_ptr<Dict>>(), *b.as<std::shared_ptr<Dict>>());
  }
  if (a.is<std::shared_ptr<Namespace>>()) {
    return a.as<std::shared_ptr<Namespace>>() == b.as<std::shared_ptr<Namespace>>();
  }
  if (a.is<std::shared_ptr<const Callable>>()) {
    return a.as<std::shared_ptr<const Callable>>() == b.as<std::shared_ptr<const Callable>>();
  }
  return true;  // undefined == undefined, none == none
}

// <0, 0, >0 as Python orders a and b; TypeError where Python has no order.
int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is<Undefined>()) fail_undefined(a);
  if (b.is<Undefined>()) fail_undefined(b);
  if (is_number(a) && is_number(b)) {
    if (is_integer(a) && is_integer(b))
      return (as_integer(a) > as_integer(b)) - (as_integer(a) < as_integer(b));
    return (as_double(a) > as_double(b)) - (as_double(a) < as_double(b));
  }
  if (a.is<std::string>() && b.is<std::string>())
    return a.as<std::string>().compare(b.as<std::string>());
  if (a.is<std::shared_ptr<List>>() && b.is<std::shared_ptr<List>>()) {
    const List& x = *a.as<std::shared_ptr<List>>();
    const List& y = *b.as<std::shared_ptr<List>>();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i], op);
    }
    return (x.size() > y.size()) - (x.size() < y.size());
  }
  throw EvalError("'" + std::string(op) + "' not supported between instances of '" + type_name(a) +
                  "' and '" + type_name(b) + "'");
}

// ---- iteration and containment ----

// The items of `for x in v`: a list's items, a dict's keys, a string's characters.
List iterate(const Value& v) {
  if (v.is<Undefined>()) return {};
  if (v.is<std::shared_ptr<List>>()) return *v.as<std::shared_ptr<List>>();
  if (v.is<std::shared_ptr<Dict>>()) {
    List keys;
    for (const auto& entry : *v.as<std::shared_ptr<Dict>>()) keys.push_back(entry.first);
    return keys;
  }
  if (v.is<std::string>()) {
    List chars;
    for (std::string_view c : characters(v.as<std::string>()))
      chars.push_back(str_value(std::string(c)));
    return chars;
  }
  throw EvalError("'" + type_name(v) + "' object is not iterable");
}

bool contains(const Value& container, const Value& item) {
  if (container.is<std::string>()) {
    if (!item.is<std::string>()) {
      throw EvalError("'in <string>' requires string as left operand, not " + type_name(item));
    }
    return container.as<std::string>().find(item.as<std::string>()) != std::string::npos;
  }
  if (container.is<std::shared_ptr<Dict>>()) {
    return dict_find(*container.as<std::shared_ptr<Dict>>(), item) != nullptr;
  }
  if (container.is<std::shared_ptr<List>>() || container.is<Undefined>()) {
    const List items = iterate(container);
    return std::any_of(items.begin(), items.end(), [&](const Value& x) { return equals(x, item); });
  }
  throw EvalError("argument of type '" + type_name(container) + "' is not iterable");
}

int64_t length(const Value& v) {
  if (v.is<std::string>()) return static_cast<int64_t>(character_count(v.as<std::string>()));
  if (v.is<std::shared_ptr<List>>())
    return static_cast<int64_t>(v.as<std::shared_ptr<List>>()->size());
  if (v.is<std::shared_ptr<Dict>>())
    return static_cast<int64_t>(v.as<std::shared_ptr<Dict>>()->size());
  if (v.is<Undefined>()) return 0;
  throw EvalError("object of type '" + type_name(v) + "' has no len()");
}

// ---- arithmetic ----

namespace {

[[noreturn]] void fail_overflow() { throw EvalError("integer overflow"); }

int64_t add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail_overflow();
  return r;
}
int64_t subtract(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) fail_overflow();
  return r;
}
int64_t multiply(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail_overflow();
  return r;
}

int64_t floor_div(int64_t a, int64_t b) {
  if (b == 0) throw EvalError("integer division or modulo by zero");
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

}  // namespace

int64_t floor_mod(int64_t a, int64_t b) {
  if (b == 0) throw EvalError("integer division or modulo by zero");
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

namespace {

Value integer_power(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 0) throw EvalError("0.0 cannot be raised to a negative power");
    return Value{std::pow(static_cast<double>(base), static_cast<double>(exponent))};
  }
  if (exponent == 0) return int_value(1);
  if (base == 0 || base == 1) return int_value(base);
  if (base == -1) return int_value(exponent % 2 == 0 ? 1 : -1);
  int64_t result = 1;  // |base| >= 2 overflows within 63 factors
  for (int64_t i = 0; i < exponent; ++i) {
    result = multiply(result, base);
  }
  return int_value(result);
}

Value integer_arithmetic(const std::string& op, int64_t a, int64_t b) {
  if (op == "+") return int_value(add(a, b));
  if (op == "-") return int_value(subtract(a, b));
  if (op == "*") return int_value(multiply(a, b));
  if (op == "//") return int_value(floor_div(a, b));
  if (op == "%") return int_value(floor_mod(a, b));
  if (op == "**") return integer_power(a, b);
  if (b == 0) throw EvalError("division by zero");
  return Value{static_cast<double>(a) / static_cast<double>(b)};
}

Value float_arithmetic(const std::string& op, double a, double b) {
  if (op == "+") return Value{a + b};
  if (op == "-") return Value{a - b};
  if (op == "*") return Value{a * b};
  if (op == "**") return Value{std::pow(a, b)};
  if (b == 0) throw EvalError("float division by zero");
  if (op == "/") return Value{a / b};
  const double mod = std::fmod(a, b);
  const double floor_mod_value = (mod != 0 && ((mod < 0) != (b < 0))) ? mod + b : mod;
  if (op == "%") return Value{floor_mod_value};
  return Value{std::floor((a - floor_mod_value) / b + 0.5)};  // "//"
}

Value repeat(const Value& sequence, int64_t times) {
  List out;
  std::string text;
  for (int64_t i = 0; i < times; ++i) {
    if (sequence.is<std::string>()) {
      text += sequence.as<std::string>();
    } else {
      const List& items = *sequence.as<std::shared_ptr<List>>();
      out.insert(out.end(), items.begin(), items.end());
    }
    if (text.size() + out.size() > (1u << 26)) throw EvalError("repeated sequence too long");
  }
  return sequence.is<std::string>() ? str_value(std::move(text)) : list_value(std::move(out));
}

}  // namespace

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (a.is<Undefined>()) fail_undefined(a);
  if (b.is<Undefined>()) fail_undefined(b);
  if (is_integer(a) && is_integer(b)) return integer_arithmetic(op, as_integer(a), as_integer(b));
  if (is_number(a) && is_number(b)) return float_arithmetic(op, as_double(a), as_double(b));
  const bool a_sequence = a.is<std::string>() || a.is<std::shared_ptr<List>>();
  if (op == "+" && a_sequence && a.data.index() == b.data.index()) {
    if (a.is<std::string>()) return str_value(a.as<std::string>() + b.as<std::string>());
    List joined = *a.as<std::shared_ptr<List>>();
    const List& tail = *b.as<std::shared_ptr<List>>();
    joined.insert(joined.end(), tail.begin(), tail.end());
    return list_value(std::move(joined));
  }
  if (op == "*" && a_sequence && is_integer(b)) return repeat(a, as_integer(b));
  if (op == "*" && is_integer(a) && (b.is<std::string>() || b.is<std::shared_ptr<List>>())) {
    return repeat(b, as_integer(a));
  }
  if (op == "+" && a.is<std::string>()) {
    throw EvalError("can only concatenate str (not \"" + type_name(b) + "\") to str");
  }
  throw EvalError("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" +
                  type_name(b) + "'");
}

// ---- subscripts ----

namespace {

const Value* namespace_find(const Value& v, const Value& key) {
  return dict_find(v.as<std::shared_ptr<Namespace>>()->attributes, key);
}

}  // namespace

// obj[key] as jinja2's getitem: a missing item is undefined, not an error. (Here and below the
// messages start with std::string("'"): on "'" + std::string GCC 12 -O3 warns -Wrestrict falsely.)
Value get_item(const Value& object, const Value& key) {
  if (object.is<Undefined>()) fail_undefined(object);
  if (object.is<std::shared_ptr<Dict>>()) {
    const Value* found = dict_find(*object.as<std::shared_ptr<Dict>>(), key);
    if (found) return *found;
  } else if (object.is<std::shared_ptr<Namespace>>()) {
    if (const Value* found = namespace_find(object, key)) return *found;
  } else if ((object.is<std::shared_ptr<List>>() || object.is<std::string>()) && is_integer(key)) {
    const bool is_string = object.is<std::string>();
    const std::vector<std::string_view> chars =
        is_string ? characters(object.as<std::string>()) : std::vector<std::string_view>{};
    const auto size =
        static_cast<int64_t>(is_string ? chars.size() : object.as<std::shared_ptr<List>>()->size());
    int64_t index = as_integer(key);
    if (index < 0) index += size;
    if (index >= 0 && index < size) {
      if (is_string) return str_value(std::string(chars[static_cast<size_t>(index)]));
      return (*object.as<std::shared_ptr<List>>())[static_cast<size_t>(index)];
    }
  }
  return undefined(std::string("'") + type_name(object) + " object' has no attribute " + repr(key));
}

namespace {

// obj.name as jinja2's getattr: a dict's key, a namespace's attribute; otherwise undefined.
Value get_attribute(const Value& object, const std::string& name) {
  if (object.is<Undefined>()) fail_undefined(object);
  if (object.is<std::shared_ptr<Dict>>() || object.is<std::shared_ptr<Namespace>>()) {
    Value found = get_item(object, str_value(name));
    if (!found.is<Undefined>()) return found;
  }
  return undefined(std::string("'") + type_name(object) + " object' has no attribute '" + name +
                   "'");
}

// Python's slice indices (start, stop, step) for a sequence of `size`.
std::vector<size_t> slice_indices(int64_t size, const Value& start_v, const Value& stop_v,
                                  const Value& step_v) {
  auto bound = [](const Value& v) {
    return v.is<None>() || v.is<Undefined>() ? std::optional<int64_t>{}
                                             : require_integer(v, "slice index");
  };
  const int64_t step = bound(step_v).value_or(1);
  if (step == 0) throw EvalError("slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t if_none) {
    if (!v) return if_none;
    int64_t i = *v < 0 ? *v + size : *v;
    return step > 0 ? std::clamp<int64_t>(i, 0, size) : std::clamp<int64_t>(i, -1, size - 1);
  };
  const int64_t start = clamp(bound(start_v), step > 0 ? 0 : size - 1);
  const int64_t stop = clamp(bound(stop_v), step > 0 ? size : -1);
  std::vector<size_t> indices;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
    indices.push_back(static_cast<size_t>(i));
  return indices;
}

Value slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is<Undefined>()) fail_undefined(object);
  if (object.is<std::string>()) {
    const std::vector<std::string_view> chars = characters(object.as<std::string>());
    std::string out;
    for (size_t i : slice_indices(static_cast<int64_t>(chars.size()), start, stop, step))
      out += chars[i];
    return str_value(std::move(out));
  }
  if (!object.is<std::shared_ptr<List>>())
    return undefined(std::string("'") + type_name(object) + "' object is not subscriptable");
  const List& list = *object.as<std::shared_ptr<List>>();
  List out;
  for (size_t i : slice_indices(static_cast<int64_t>(list.size()), start, stop, step))
    out.push_back(list[i]);
  return list_value(std::move(out));
}

// ---- context ----

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value{None{}};
    case nlohmann::ordered_json::value_t::boolean:
      return Value{json.get<bool>()};
    case nlohmann::ordered_json::value_t::number_integer:
      return int_value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<uint64_t>();
      return u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                 ? int_value(static_cast<int64_t>(u))
                 : Value{static_cast<double>(u)};
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value{json.get<double>()};
    case nlohmann::ordered_json::value_t::string:
      return str_value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List list;
      for (const auto& item : json) list.push_back(from_json(item));
      return list_value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      for (const auto& entry : json.items())
        dict.emplace_back(str_value(entry.key()), from_json(entry.value()));
      return dict_value(std::move(dict));
    }
    default:
      throw UsageError("chat template context: unsupported JSON value");
  }
}

// ---- rendering ----

using Frame = std::unordered_map<std::string, Value>;

enum class Flow { kNormal, kBreak, kContinue };

constexpr size_t kMaxRenderBytes = size_t{64} << 20;  // a rendering (or capture): 16M tokens

// The state of one render: variables, output, call depth.
class Renderer {
 public:
  Renderer(const std::string& name, const nlohmann::ordered_json& context) : name_(name) {
    for (auto& [global, function] : global_functions()) root_[global] = std::move(function);
    if (!context.is_object()) throw UsageError(name_ + ": the context must be a JSON object");
    for (const auto& entry : context.items()) root_[entry.key()] = from_json(entry.value());
    chain_ = {&root_};
  }

  ChatRendering run(const Body& body) {
    render_body(body);
    return std::move(result_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& what) const {
    throw UsageError(name_ + " line " + std::to_string(line) + ": " + what);
  }

  // Pushes a frame for a scope (a loop iteration, a block) and pops it.
  class ScopedFrame {
   public:
    ScopedFrame(Renderer& renderer, Frame& frame) : renderer_(renderer) {
      renderer_.chain_.push_back(&frame);
    }
    ~ScopedFrame() { renderer_.chain_.pop_back(); }
    ScopedFrame(const ScopedFrame&) = delete;
    ScopedFrame& operator=(const ScopedFrame&) = delete;

   private:
    Renderer& renderer_;
  };

  Value lookup(const std::string& name) const {
    for (auto frame = chain_.rbegin(); frame != chain_.rend(); ++frame) {
      const auto found = (*frame)->find(name);
      if (found != (*frame)->end()) return found->second;
    }
    return undefined("'" + name + "' is undefined");
  }

  // Binds `targets` to `value` in `frame`, unpacking when there are several.
  void bind(Frame& frame, const std::vector<std::string>& targets, const Value& value) const {
    if (targets.size() == 1) {
      frame[targets[0]] = value;
      return;
    }
    const List items = iterate(value);
    if (items.size() != targets.size()) {
      throw EvalError(items.size() < targets.size() ? "not enough values to unpack"
                                                    : "too many values to unpack");
    }
    for (size_t i = 0; i < items.size(); ++i) frame[targets[i]] = items[i];
  }

  Flow render_body(const Body& body) {
    for (const Stmt& stmt : body) {
      const Flow flow = render_statement(stmt);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow render_statement(const Stmt& stmt) {
    try {
      return std::visit([&](const auto& node) { return render_node(node, stmt.line); }, stmt.node);
    } catch (const EvalError& error) {
      fail(stmt.line, error.what());
    }
  }

  // Appends to the output; a rendering past kMaxRenderBytes (a template looping without end, in
  // effect) fails instead of taking the memory.
  void emit(std::string_view text) {
    if (out_->size() + text.size() > kMaxRenderBytes)
      throw EvalError("the rendering exceeds " + std::to_string(kMaxRenderBytes >> 20) + " MiB");
    *out_ += text;
  }

  Flow render_node(const TextNode& node, int) {
    emit(node.text);
    return Flow::kNormal;
  }

  Flow render_node(const OutputNode& node, int) {
    emit(to_str(eval(*node.value)));
    return Flow::kNormal;
  }

  Flow render_node(const IfNode& node, int) {
    for (size_t i = 0; i < node.conditions.size(); ++i) {
      if (truthy(eval(*node.conditions[i]))) return render_body(node.branches[i]);
    }
    if (node.branches.size() > node.conditions.size()) return render_body(node.branches.back());
    return Flow::kNormal;
  }

  // The items a for loop iterates, after its `if` filter.
  List loop_items(const ForNode& node) {
    List all = iterate(eval(*node.iterable));
    if (!node.filter) return all;
    List kept;
    for (Value& item : all) {
      Frame frame;
      bind(frame, node.targets, item);
      ScopedFrame scope(*this, frame);
      if (truthy(eval(*node.filter))) kept.push_back(std::move(item));
    }
    return kept;
  }

  static Value loop_object(const List& items, size_t i) {
    const auto n = static_cast<int64_t>(items.size()), index = static_cast<int64_t>(i);
    return dict_value({
        {str_value("index0"), int_value(index)},
        {str_value("index"), int_value(index + 1)},
        {str_value("revindex0"), int_value(n - index - 1)},
        {str_value("revindex"), int_value(n - index)},
        {str_value("first"), Value{i == 0}},
        {str_value("last"), Value{index == n - 1}},
        {str_value("length"), int_value(n)},
        {str_value("depth0"), int_value(0)},
        {str_value("depth"), int_value(1)},
        {str_value("previtem"), i > 0 ? items[i - 1] : undefined("there is no previous item")},
        {str_value("nextitem"), index + 1 < n ? items[i + 1] : undefined("there is no next item")},
    });
  }

  Flow render_node(const ForNode& node, int) {
    const List items = loop_items(node);
    for (size_t i = 0; i < items.size(); ++i) {
      Frame frame;  // each iteration's own: a `set` in the body does not outlive it
      bind(frame, node.targets, items[i]);
      frame["loop"] = loop_object(items, i);
      ScopedFrame scope(*this, frame);
      if (render_body(node.body) == Flow::kBreak) break;
    }
    if (items.empty() && !node.otherwise.empty()) {
      Frame frame;
      ScopedFrame scope(*this, frame);
      render_body(node.otherwise);
    }
    return Flow::kNormal;
  }

  // Renders `body` into a string of its own, in a scope of its own.
  std::string capture(const Body& body) {
    std::string buffer;
    std::string* saved = std::exchange(out_, &buffer);
    Frame frame;
    ScopedFrame scope(*this, frame);
    try {
      render_body(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buffer;
  }

  Flow render_node(const SetNode& node, int) {
    const Value value = node.value ? eval(*node.value) : str_value(capture(node.body));
    if (node.attribute.empty()) {
      bind(*chain_.back(), node.targets, value);
      return Flow::kNormal;
    }
    const Value target = lookup(node.targets[0]);
    if (!target.is<std::shared_ptr<Namespace>>()) {
      throw EvalError("cannot assign attribute on non-namespace object");
    }
    Dict& attributes = target.as<std::shared_ptr<Namespace>>()->attributes;
    for (auto& [key, old] : attributes) {
      if (equals(key, str_value(node.attribute))) {
        old = value;
        return Flow::kNormal;
      }
    }
    attributes.emplace_back(str_value(node.attribute), value);
    return Flow::kNormal;
  }

  Flow render_node(const MacroNode& node, int) {
    (*chain_.back())[node.name] =
        Value{std::make_shared<const Callable>(Callable{&node, node.name})};
    return Flow::kNormal;
  }

  Flow render_node(const GenerationNode& node, int) {
    const size_t begin = out_->size();
    Frame frame;
    ScopedFrame scope(*this, frame);
    render_body(node.body);
    if (out_ == &result_.text) result_.generation.push_back({begin, out_->size()});
    return Flow::kNormal;
  }

  Flow render_node(const LoopControlNode& node, int) {
    return node.is_break ? Flow::kBreak : Flow::kContinue;
  }

  // ---- expressions ----

  Value eval(const Expr& expr) {
    try {
      return eval_node(expr);
    } catch (const EvalError& error) {
      fail(expr.line, error.what());
    }
  }

  Value eval_or_none(const ExprPtr& expr) { return expr ? eval(*expr) : Value{None{}}; }

  Value eval_node(const Expr& expr) {
    switch (expr.kind) {
      case ExprKind::kLiteral:
        return expr.literal;
      case ExprKind::kName:
        return lookup(expr.name);
      case ExprKind::kList: {
        List list;
        for (const ExprPtr& item : expr.args) list.push_back(eval(*item));
        return list_value(std::move(list));
      }
      case ExprKind::kDict: {
        Dict dict;
        for (size_t i = 0; i + 1 < expr.args.size(); i += 2)
          dict.emplace_back(eval(*expr.args[i]), eval(*expr.args[i + 1]));
        // as dict() builds it: a repeated key keeps its first place and takes its last value
        return call_builtin(Builtin::kDict, Arguments{{dict_value(std::move(dict))}, {}});
      }
      case ExprKind::kAttribute:
        return get_attribute(eval(*expr.args[0]), expr.name);
      case ExprKind::kItem:
        return get_item(eval(*expr.args[0]), eval(*expr.args[1]));
      case ExprKind::kSlice:
        return slice(eval(*expr.args[0]), eval_or_none(expr.args[1]), eval_or_none(expr.args[2]),
                     eval_or_none(expr.args[3]));
      case ExprKind::kCall:
        return eval_call(expr);
      case ExprKind::kFilter:
        return apply_filter(expr.name, eval(*expr.args[0]), eval_arguments(expr));
      case ExprKind::kTest:
        return Value{apply_test(expr.name, eval(*expr.args[0]), eval_arguments(expr).positional) !=
                     expr.negated};
      case ExprKind::kUnary:
        return eval_unary(expr);
      case ExprKind::kBinary:
        return eval_binary(expr);
      case ExprKind::kCompare:
        return Value{eval_compare(expr)};
      case ExprKind::kCondition:
        if (truthy(eval(*expr.args[1]))) return eval(*expr.args[0]);
        return expr.args[2] ? eval(*expr.args[2])
                            : undefined("the inline if's condition was false and it has no else");
    }
    throw EvalError("unknown expression");
  }

  // The arguments after args[0] (the callee, or the filtered or tested value).
  Arguments eval_arguments(const Expr& expr) {
    Arguments args;
    for (size_t i = 1; i < expr.args.size(); ++i) args.positional.push_back(eval(*expr.args[i]));
    for (const Keyword& keyword : expr.keywords)
      args.keywords.emplace_back(keyword.name, eval(*keyword.value));
    return args;
  }

  Value eval_call(const Expr& expr) {
    const Expr& callee = *expr.args[0];
    if (callee.kind == ExprKind::kAttribute) {
      const Value object = eval(*callee.args[0]);
      if (object.is<Undefined>()) fail_undefined(object);
      if (object.is<std::string>())
        return string_method(object.as<std::string>(), callee.name, eval_arguments(expr));
      if (object.is<std::shared_ptr<List>>())
        return list_method(*object.as<std::shared_ptr<List>>(), callee.name, eval_arguments(expr));
      const Value attribute = get_attribute(object, callee.name);
      if (object.is<std::shared_ptr<Dict>>() && !attribute.is<std::shared_ptr<const Callable>>()) {
        return dict_method(*object.as<std::shared_ptr<Dict>>(), callee.name, eval_arguments(expr));
      }
      return call(attribute, eval_arguments(expr));
    }
    return call(eval(callee), eval_arguments(expr));
  }

  Value call(const Value& function, const Arguments& args) {
    if (function.is<Undefined>()) fail_undefined(function);
    if (!function.is<std::shared_ptr<const Callable>>())
      throw EvalError("'" + type_name(function) + "' object is not callable");
    const Callable& callable = *function.as<std::shared_ptr<const Callable>>();
    if (const Builtin* builtin = std::get_if<Builtin>(&callable.target))
      return call_builtin(*builtin, args);
    return call_macro(*std::get<const MacroNode*>(callable.target), args);
  }

  // A macro's output, its parameters bound, in a scope that sees only the template's globals.
  Value call_macro(const MacroNode& macro, const Arguments& args) {
    if (call_depth_ >= kMaxCallDepth)
      throw EvalError("macro calls nested deeper than " + std::to_string(kMaxCallDepth));
    if (args.positional.size() > macro.parameters.size()) {
      throw EvalError("macro '" + macro.name + "' takes not more than " +
                      std::to_string(macro.parameters.size()) + " argument(s)");
    }
    for (const auto& [keyword, value] : args.keywords) {
      if (std::find(macro.parameters.begin(), macro.parameters.end(), keyword) ==
          macro.parameters.end()) {
        throw EvalError("macro '" + macro.name + "' takes no keyword argument '" + keyword + "'");
      }
    }
    Frame frame;
    std::vector<Frame*> saved = std::exchange(chain_, std::vector<Frame*>{&root_, &frame});
    ++call_depth_;
    try {
      for (size_t i = 0; i < macro.parameters.size(); ++i) {
        Value value = args.get(i, macro.parameters[i]);
        if (value.is<Undefined>() && macro.defaults[i]) value = eval(*macro.defaults[i]);
        if (value.is<Undefined>())
          value = undefined("parameter '" + macro.parameters[i] + "' was not provided");
        frame[macro.parameters[i]] = std::move(value);
      }
      std::string output = capture(macro.body);
      --call_depth_;
      chain_ = std::move(saved);
      return str_value(std::move(output));
    } catch (...) {
      --call_depth_;
      chain_ = std::move(saved);
      throw;
    }
  }

  Value eval_unary(const Expr& expr) {
    const Value operand = eval(*expr.args[0]);
    if (expr.name == "not") return Value{!truthy(operand)};
    if (operand.is<Undefined>()) fail_undefined(operand);
    if (!is_number(operand))
      throw EvalError("bad operand type for unary " + expr.name + ": '" + type_name(operand) + "'");
    if (expr.name == "+") return is_integer(operand) ? int_value(as_integer(operand)) : operand;
    if (operand.is<double>()) return Value{-operand.as<double>()};
    return arithmetic("-", int_value(0), operand);
  }

  Value eval_binary(const Expr& expr) {
    const Value left = eval(*expr.args[0]);
    if (expr.name == "and") return truthy(left) ? eval(*expr.args[1]) : left;
    if (expr.name == "or") return truthy(left) ? left : eval(*expr.args[1]);
    const Value right = eval(*expr.args[1]);
    if (expr.name == "~") return str_value(to_str(left) + to_str(right));
    return arithmetic(expr.name, left, right);
  }

  bool eval_compare(const Expr& expr) {
    Value left = eval(*expr.args[0]);
    for (size_t i = 0; i < expr.operators.size(); ++i) {
      Value right = eval(*expr.args[i + 1]);
      if (!compare_once(expr.operators[i], left, right)) return false;
      left = std::move(right);
    }
    return true;
  }

  static bool compare_once(const std::string& op, const Value& left, const Value& right) {
    if (op == "==") return equals(left, right);
    if (op == "!=") return !equals(left, right);
    if (op == "in") return contains(right, left);
    if (op == "not in") return !contains(right, left);
    const int order = compare(left, right, op);
    if (op == "<") return order < 0;
    if (op == ">") return order > 0;
    if (op == "<=") return order <= 0;
    return order >= 0;
  }

  const std::string& name_;
  Frame root_;                 // the globals and the context's variables
  std::vector<Frame*> chain_;  // the scopes visible now, innermost last
  ChatRendering result_;
  std::string* out_ = &result_.text;  // where output goes: the result, or a capture
  int call_depth_ = 0;
};

}  // namespace

}  // namespace chat_template

ChatRendering ChatTemplate::render(const nlohmann::ordered_json& context) const {
  return chat_template::Renderer(name_, context).run(program_->body);
}

}  // namespace mpitrain
