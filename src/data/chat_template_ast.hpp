// The parsed chat template shared by chat_template_parse.cpp (which builds it) and
// chat_template_render.cpp (which evaluates it): Python's values as Jinja2 sees them, and the
// syntax tree of expressions and statements.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "mpitrain/data/chat_template.hpp"

namespace mpitrain::chat_template {

struct Value;
struct MacroNode;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<Value, Value>>;  // insertion order, as Python's dict

// jinja2's Undefined: a missing variable, attribute or item; `what` says which, for errors.
struct Undefined {
  std::string what;
};
struct None {};

// A function templates can call: a macro, or one of the globals.
enum class Builtin { kRaiseException, kStrftimeNow, kNamespace, kRange, kDict };
struct Callable {
  std::variant<const MacroNode*, Builtin> target;
  std::string name;
};

// namespace(): the one mutable object, assigned with {% set ns.attr = value %}.
struct Namespace {
  Dict attributes;
};

struct Value {
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<Namespace>, std::shared_ptr<const Callable>>
      data;

  template <typename T>
  bool is() const {
    return std::holds_alternative<T>(data);
  }
  template <typename T>
  const T& as() const {
    return std::get<T>(data);
  }
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprKind {
  kLiteral,    // literal
  kName,       // name
  kList,       // [args...]; tuples too
  kDict,       // {args[0]: args[1], ...}
  kAttribute,  // args[0].name
  kItem,       // args[0][args[1]]
  kSlice,      // args[0][args[1]:args[2]:args[3]], absent parts null
  kCall,       // args[0](args[1:]..., keywords...)
  kFilter,     // args[0]|name(args[1:]..., keywords...)
  kTest,       // args[0] is [not] name(args[1:]...)
  kUnary,      // name args[0], name one of - + not
  kBinary,     // args[0] name args[1], name one of + - * / // % ** ~ and or in "not in"
  kCompare,    // args[0] names[0] args[1] names[1] args[2] ..., chained as in Python
  kCondition,  // args[0] if args[1] else args[2] (args[2] null: undefined)
};

struct Keyword {
  std::string name;
  ExprPtr value;
};

struct Expr {
  ExprKind kind;
  int line = 0;
  std::string name;
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<Keyword> keywords;
  std::vector<std::string> operators;  // kCompare's
  bool negated = false;                // kTest's "is not"
};

struct Stmt;
using Body = std::vector<Stmt>;

struct TextNode {
  std::string text;
};
struct OutputNode {
  ExprPtr value;
};
struct IfNode {
  std::vector<ExprPtr> conditions;  // if, elif...
  std::vector<Body> branches;       // one per condition, then else's if present
};
struct ForNode {
  std::vector<std::string> targets;  // several: unpacked from each item
  ExprPtr iterable;
  ExprPtr filter;  // `for x in seq if filter`, or null
  Body body;
  Body otherwise;  // {% else %}: rendered when nothing was iterated
};
struct SetNode {
  std::vector<std::string> targets;  // several: unpacked from the value
  std::string attribute;             // {% set ns.attribute = ... %}: targets[0] is the namespace
  ExprPtr value;                     // null for {% set x %}body{% endset %}
  Body body;
};
struct MacroNode {
  std::string name;
  std::vector<std::string> parameters;
  std::vector<ExprPtr> defaults;  // one per parameter; null where there is none
  Body body;
};
struct GenerationNode {
  Body body;
};
struct LoopControlNode {
  bool is_break;
};

struct Stmt {
  int line = 0;
  std::variant<TextNode, OutputNode, IfNode, ForNode, SetNode, MacroNode, GenerationNode,
               LoopControlNode>
      node;
};

// The filters and tests chat_template_builtins.cpp knows, for the parser to refuse others.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

}  // namespace mpitrain::chat_template

namespace mpitrain {

struct ChatTemplate::Program {
  chat_template::Body body;
  bool has_generation = false;
};

}  // namespace mpitrain
