// Chat templates' lexer and parser: the source, as jinja2's lexer splits it (trim_blocks,
// lstrip_blocks, whitespace control), parsed with jinja2's grammar and precedence into the tree
// of chat_template_ast.hpp.
#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat_template_ast.hpp"
#include "mpitrain/data/chat_template.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {
namespace chat_template {
namespace {

constexpr int kMaxNesting = 128;  // expressions and blocks nested deeper are refused

enum class TokenKind {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;  // data, name, operator, a string's value, a number's digits
  int line;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) {
  return is_name_start(c) || std::isdigit(static_cast<unsigned char>(c));
}

// jinja2 normalises newlines to "\n" and drops one trailing newline (keep_trailing_newline=False).
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '\r') {
      out += source[i];
    } else {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The tokens of a template, lexed as jinja2's Lexer with trim_blocks and lstrip_blocks.
class Lexer {
 public:
  Lexer(std::string_view source, const std::string& name) : src_(source), name_(name) {}

  std::vector<Token> tokenize() {
    while (pos_ < src_.size()) lex_data_and_tag();
    tokens_.push_back({TokenKind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError(name_ + " line " + std::to_string(line_) + ": " + what);
  }

  // Moves to `to`, counting lines.
  void advance(size_t to) {
    line_ += static_cast<int>(std::count(src_.begin() + pos_, src_.begin() + to, '\n'));
    line_starting_ = to > pos_ && src_[to - 1] == '\n';
    pos_ = to;
  }

  size_t skip_spaces(size_t at) const {
    while (at < src_.size() && is_space(src_[at])) ++at;
    return at;
  }

  bool starts_with_at(size_t at, std::string_view s) const {
    return src_.substr(std::min(at, src_.size())).starts_with(s);
  }

  // The text before a tag, stripped as its sign ('-', '+' or none) and lstrip_blocks say.
  std::string_view strip_before(std::string_view text, char sign, bool is_variable) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      return text.substr(0, end);
    }
    if (sign == '+' || is_variable) return text;
    const size_t line_begin = text.rfind('\n') + 1;  // npos + 1 == 0
    if (line_begin == 0 && !line_starting_) return text;
    const std::string_view rest = text.substr(line_begin);
    const bool blank = !rest.empty() && std::all_of(rest.begin(), rest.end(), is_space);
    return blank ? text.substr(0, line_begin) : text;
  }

  void emit_data(std::string_view text, int line) {
    if (!text.empty()) tokens_.push_back({TokenKind::kData, std::string(text), line});
  }

  // Text up to the next tag, then the tag.
  void lex_data_and_tag() {
    const size_t tag = find_tag(pos_);
    if (tag == std::string_view::npos) {
      emit_data(src_.substr(pos_), line_);
      advance(src_.size());
      return;
    }
    const char type = src_[tag + 1];
    const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
    const size_t raw_end = match_raw_begin(tag);
    const int text_line = line_;
    emit_data(strip_before(src_.substr(pos_, tag - pos_), sign, type == '{'), text_line);
    const size_t after_begin = tag + 2 + (sign == '-' || sign == '+' ? 1 : 0);
    advance(after_begin);
    if (raw_end != std::string_view::npos) {
      advance(raw_end);
      lex_raw();
    } else if (type == '#') {
      lex_comment();
    } else {
      lex_tag(type == '%');
    }
  }

  size_t find_tag(size_t from) const {
    for (size_t at = src_.find('{', from); at != std::string_view::npos;
         at = src_.find('{', at + 1)) {
      if (at + 1 < src_.size() &&
          (src_[at + 1] == '{' || src_[at + 1] == '%' || src_[at + 1] == '#')) {
        return at;
      }
    }
    return std::string_view::npos;
  }

  // Where the block end of `{% raw %}` at `tag` ends, or npos when the tag is not raw.
  size_t match_raw_begin(size_t tag) const {
    if (src_[tag + 1] != '%') return std::string_view::npos;
    size_t at = tag + 2;
    if (at < src_.size() && (src_[at] == '-' || src_[at] == '+')) ++at;
    at = skip_spaces(at);
    if (!starts_with_at(at, "raw")) return std::string_view::npos;
    at = skip_spaces(at + 3);
    if (starts_with_at(at, "-%}")) return skip_spaces(at + 3);
    if (starts_with_at(at, "%}")) return at + 2;
    return std::string_view::npos;
  }

  // The end of a block tag at `at` (`+%}`, `-%}` and whitespace, `%}` and one newline), or npos.
  size_t match_block_end(size_t at) const {
    if (starts_with_at(at, "+%}")) return at + 3;
    if (starts_with_at(at, "-%}")) return skip_spaces(at + 3);
    if (!starts_with_at(at, "%}")) return std::string_view::npos;
    return starts_with_at(at + 2, "\n") ? at + 3 : at + 2;
  }

  size_t match_variable_end(size_t at) const {
    if (starts_with_at(at, "-}}")) return skip_spaces(at + 3);
    return starts_with_at(at, "}}") ? at + 2 : std::string_view::npos;
  }

  void lex_raw() {
    const int line = line_;
    for (size_t at = src_.find("{%", pos_); at != std::string_view::npos;
         at = src_.find("{%", at + 1)) {
      const char sign = at + 2 < src_.size() ? src_[at + 2] : '\0';
      size_t name = skip_spaces(at + 2 + (sign == '-' || sign == '+' ? 1 : 0));
      if (!starts_with_at(name, "endraw")) continue;
      const size_t end = match_block_end(skip_spaces(name + 6));
      if (end == std::string_view::npos) continue;
      emit_data(strip_before(src_.substr(pos_, at - pos_), sign, false), line);
      advance(end);
      return;
    }
    fail("missing end of raw directive");
  }

  void lex_comment() {
    for (size_t at = pos_; at < src_.size(); ++at) {
      if (starts_with_at(at, "+#}")) return advance(at + 3);
      if (starts_with_at(at, "-#}")) return advance(skip_spaces(at + 3));
      if (starts_with_at(at, "#}")) return advance(starts_with_at(at + 2, "\n") ? at + 3 : at + 2);
    }
    fail("missing end of comment tag");
  }

  // The tokens of a {% %} or {{ }} tag, up to and including its end.
  void lex_tag(bool is_block) {
    tokens_.push_back({is_block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", line_});
    std::string brackets;  // the closing brackets expected, innermost last
    while (pos_ < src_.size()) {
      if (brackets.empty()) {
        const size_t end = is_block ? match_block_end(pos_) : match_variable_end(pos_);
        if (end != std::string_view::npos) {
          tokens_.push_back({is_block ? TokenKind::kBlockEnd : TokenKind::kVariableEnd, "", line_});
          return advance(end);
        }
      }
      if (is_space(src_[pos_])) {
        advance(skip_spaces(pos_));
      } else {
        lex_token(brackets);
      }
    }
    fail(is_block ? "missing end of block tag '%}'" : "missing end of print tag '}}'");
  }

  void lex_token(std::string& brackets) {
    const char c = src_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number();
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      return push_and_advance(TokenKind::kName, std::string(src_.substr(pos_, end - pos_)), end);
    }
    if (c == '\'' || c == '"') return lex_string();
    lex_operator(brackets);
  }

  void push_and_advance(TokenKind kind, std::string text, size_t end) {
    tokens_.push_back({kind, std::move(text), line_});
    advance(end);
  }

  size_t digits_end(size_t at) const {
    while (at < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[at])) ||
                                (src_[at] == '_' && at + 1 < src_.size() &&
                                 std::isdigit(static_cast<unsigned char>(src_[at + 1]))))) {
      ++at;
    }
    return at;
  }

  // Integers and floats (1, 1_000, 1.5, 1e5, 1.5e-3).
  void lex_number() {
    size_t end = digits_end(pos_);
    bool is_float = false;
    const bool after_dot = pos_ > 0 && src_[pos_ - 1] == '.';  // x.0.1 is two subscripts
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[end + 1]))) {
      end = digits_end(end + 1);
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t exponent = end + 1;
      if (exponent < src_.size() && (src_[exponent] == '+' || src_[exponent] == '-')) ++exponent;
      if (exponent < src_.size() && std::isdigit(static_cast<unsigned char>(src_[exponent]))) {
        end = digits_end(exponent);
        is_float = true;
      }
    }
    std::string digits(src_.substr(pos_, end - pos_));
    std::erase(digits, '_');
    push_and_advance(is_float ? TokenKind::kFloat : TokenKind::kInteger, digits, end);
  }

  // A quoted string with Python's escapes (jinja2 decodes them with "unicode-escape").
  void lex_string() {
    const char quote = src_[pos_];
    std::string value;
    size_t at = pos_ + 1;
    while (at < src_.size() && src_[at] != quote) {
      if (src_[at] != '\\' || at + 1 >= src_.size()) {
        value += src_[at++];
      } else {
        at = unescape(at + 1, value);
      }
    }
    if (at >= src_.size()) fail("unterminated string");
    push_and_advance(TokenKind::kString, std::move(value), at + 1);
  }

  // Appends the escape after a backslash at `at`; returns where it ends.
  size_t unescape(size_t at, std::string& value) const {
    const char c = src_[at];
    if (const char simple = simple_escape(c)) {
      value += simple;
      return at + 1;
    }
    if (c >= '0' && c <= '7') return unescape_octal(at, value);
    if (c == '\n') return at + 1;  // a backslash-newline continues the line
    const size_t hex_digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (hex_digits == 0) {
      value += '\\';  // an unknown escape stays as written
      return at;
    }
    const std::string hex(src_.substr(at + 1, hex_digits));
    if (hex.size() < hex_digits ||
        !std::all_of(hex.begin(), hex.end(), [](char h) { return std::isxdigit(h); })) {
      fail("truncated \\" + std::string(1, c) + " escape in a string");
    }
    append_utf8(value, static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)));
    return at + 1 + hex_digits;
  }

  static char simple_escape(char c) {
    switch (c) {
      case 'n':
        return '\n';
      case 't':
        return '\t';
      case 'r':
        return '\r';
      case 'a':
        return '\a';
      case 'b':
        return '\b';
      case 'f':
        return '\f';
      case 'v':
        return '\v';
      case '\\':
      case '\'':
      case '"':
        return c;
      default:
        return '\0';
    }
  }

  // \o, \oo, \ooo: a code point in octal.
  size_t unescape_octal(size_t at, std::string& value) const {
    uint32_t code = 0;
    size_t end = at;
    while (end < at + 3 && end < src_.size() && src_[end] >= '0' && src_[end] <= '7') {
      code = code * 8 + static_cast<uint32_t>(src_[end++] - '0');
    }
    append_utf8(value, code);
    return end;
  }

  void lex_operator(std::string& brackets) {
    static constexpr std::array<std::string_view, 6> kTwoChar = {
        "**", "//", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwoChar) {
      if (starts_with_at(pos_, op))
        return push_and_advance(TokenKind::kOperator, std::string(op), pos_ + 2);
    }
    const char c = src_[pos_];
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      fail(std::string("unexpected character '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') brackets += c == '(' ? ')' : c == '[' ? ']' : '}';
    if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty() || brackets.back() != c) fail(std::string("unexpected '") + c + "'");
      brackets.pop_back();
    }
    push_and_advance(TokenKind::kOperator, std::string(1, c), pos_ + 1);
  }

  std::string_view src_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the last match ended a line (lstrip_blocks at the start of text)
  std::vector<Token> tokens_;
};

ExprPtr make_expr(ExprKind kind, int line, std::string name = {}) {
  auto expr = std::make_unique<Expr>();
  expr->kind = kind;
  expr->line = line;
  expr->name = std::move(name);
  return expr;
}

ExprPtr make_literal(Value value, int line) {
  ExprPtr expr = make_expr(ExprKind::kLiteral, line);
  expr->literal = std::move(value);
  return expr;
}

// jinja2's Parser over the tokens: statements, and expressions by precedence.
class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name)
      : tokens_(std::move(tokens)), name_(name) {}

  ChatTemplate::Program parse() {
    ChatTemplate::Program program;
    program.body = parse_body({}, nullptr);
    program.has_generation = has_generation_;
    return program;
  }

 private:
  // Counts nesting while in scope; refuses hostile depths.
  class NestingGuard {
   public:
    explicit NestingGuard(Parser& parser) : parser_(parser) {
      if (++parser_.nesting_ > kMaxNesting) parser_.fail("nested too deeply");
    }
    ~NestingGuard() { --parser_.nesting_; }
    NestingGuard(const NestingGuard&) = delete;
    NestingGuard& operator=(const NestingGuard&) = delete;

   private:
    Parser& parser_;
  };

  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError(name_ + " line " + std::to_string(current().line) + ": " + what);
  }

  const Token& current() const { return tokens_[pos_]; }
  const Token& peek() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  Token take() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }

  bool at_operator(std::string_view op) const {
    return current().kind == TokenKind::kOperator && current().text == op;
  }
  bool at_name(std::string_view name) const {
    return current().kind == TokenKind::kName && current().text == name;
  }
  bool skip_operator(std::string_view op) {
    if (!at_operator(op)) return false;
    ++pos_;
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    ++pos_;
    return true;
  }

  std::string describe(const Token& token) const {
    switch (token.kind) {
      case TokenKind::kEnd:
        return "end of template";
      case TokenKind::kBlockEnd:
        return "end of statement block";
      case TokenKind::kVariableEnd:
        return "end of print statement";
      case TokenKind::kData:
        return "template data";
      default:
        return "'" + token.text + "'";
    }
  }

  void expect_operator(std::string_view op) {
    if (!skip_operator(op)) fail("expected '" + std::string(op) + "', got " + describe(current()));
  }
  void expect_kind(TokenKind kind, std::string_view what) {
    if (current().kind != kind)
      fail("expected " + std::string(what) + ", got " + describe(current()));
    ++pos_;
  }
  std::string expect_name() {
    if (current().kind != TokenKind::kName) fail("expected a name, got " + describe(current()));
    return take().text;
  }

  // Statements up to a {% tag %} named in `ends` (its name consumed, stored in *found_end).
  Body parse_body(std::initializer_list<std::string_view> ends, std::string* found_end) {
    NestingGuard guard(*this);
    Body body;
    while (true) {
      const Token& token = current();
      if (token.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return body;
        fail("unexpected end of template, expected '" + std::string(*ends.begin()) + "'");
      }
      if (token.kind == TokenKind::kData) {
        body.push_back({token.line, TextNode{take().text}});
      } else if (token.kind == TokenKind::kVariableBegin) {
        ++pos_;
        const int line = current().line;
        ExprPtr value = parse_tuple(true);
        expect_kind(TokenKind::kVariableEnd, "'}}'");
        body.push_back({line, OutputNode{std::move(value)}});
      } else {
        expect_kind(TokenKind::kBlockBegin, "a statement");
        const std::string& tag = current().text;
        if (std::find(ends.begin(), ends.end(), tag) != ends.end()) {
          *found_end = take().text;
          return body;
        }
        body.push_back(parse_statement());
      }
    }
  }

  Stmt parse_statement() {
    const int line = current().line;
    if (current().kind != TokenKind::kName)
      fail("expected a statement name, got " + describe(current()));
    const std::string tag = take().text;
    if (tag == "if") return {line, parse_if()};
    if (tag == "for") return {line, parse_for()};
    if (tag == "set") return {line, parse_set()};
    if (tag == "macro") return {line, parse_macro()};
    if (tag == "generation") return {line, parse_generation()};
    if (tag == "break" || tag == "continue") return {line, parse_loop_control(tag)};
    static constexpr std::array<std::string_view, 11> kUnsupported = {
        "include", "extends", "import",     "from", "block", "call",
        "with",    "filter",  "autoescape", "do",   "raw"};
    if (std::find(kUnsupported.begin(), kUnsupported.end(), tag) != kUnsupported.end()) {
      fail("'" + tag + "' is not supported");
    }
    fail("unknown statement '" + tag + "'");
  }

  void end_block() { expect_kind(TokenKind::kBlockEnd, "'%}'"); }

  IfNode parse_if() {
    IfNode node;
    std::string end = "elif";
    while (end == "elif") {
      node.conditions.push_back(parse_tuple(false));
      end_block();
      node.branches.push_back(parse_body({"elif", "else", "endif"}, &end));
    }
    if (end == "else") {
      end_block();
      node.branches.push_back(parse_body({"endif"}, &end));
    }
    end_block();
    return node;
  }

  // Names assigned by for and set: `x`, `a, b`, `(a, b)`.
  std::vector<std::string> parse_targets() {
    const bool parenthesized = skip_operator("(");
    std::vector<std::string> names{expect_name()};
    while (skip_operator(",")) {
      if (current().kind != TokenKind::kName || at_name("in")) break;
      names.push_back(expect_name());
    }
    if (parenthesized) expect_operator(")");
    return names;
  }

  ForNode parse_for() {
    ForNode node;
    node.targets = parse_targets();
    if (!skip_name("in")) fail("expected 'in', got " + describe(current()));
    node.iterable = parse_tuple(false, "recursive");
    if (skip_name("if")) node.filter = parse_expression();
    if (at_name("recursive")) fail("recursive loops are not supported");
    end_block();
    ++loop_depth_;
    std::string end;
    node.body = parse_body({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") {
      end_block();
      node.otherwise = parse_body({"endfor"}, &end);
    }
    end_block();
    return node;
  }

  SetNode parse_set() {
    SetNode node;
    if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
        peek().text == ".") {
      node.targets.push_back(take().text);
      ++pos_;
      node.attribute = expect_name();
    } else {
      node.targets = parse_targets();
    }
    if (skip_operator("=")) {
      node.value = parse_tuple(true);
      end_block();
      return node;
    }
    if (node.targets.size() != 1 || !node.attribute.empty()) fail("expected '='");
    end_block();
    std::string end;
    node.body = parse_body({"endset"}, &end);
    end_block();
    return node;
  }

  MacroNode parse_macro() {
    MacroNode node;
    node.name = expect_name();
    expect_operator("(");
    while (!skip_operator(")")) {
      if (!node.parameters.empty()) expect_operator(",");
      if (skip_operator(")")) break;
      node.parameters.push_back(expect_name());
      if (skip_operator("=")) {
        node.defaults.push_back(parse_expression());
      } else {
        if (!node.defaults.empty() && node.defaults.back()) {
          fail("non-default argument follows default argument");
        }
        node.defaults.push_back(nullptr);
      }
    }
    end_block();
    const int saved_loop_depth = std::exchange(loop_depth_, 0);
    std::string end;
    node.body = parse_body({"endmacro"}, &end);
    loop_depth_ = saved_loop_depth;
    if (current().kind == TokenKind::kName) ++pos_;  // {% endmacro name %}
    end_block();
    return node;
  }

  GenerationNode parse_generation() {
    end_block();
    has_generation_ = true;
    GenerationNode node;
    const int saved_loop_depth = std::exchange(loop_depth_, 0);  // the body is a function
    std::string end;
    node.body = parse_body({"endgeneration"}, &end);
    loop_depth_ = saved_loop_depth;
    end_block();
    return node;
  }

  LoopControlNode parse_loop_control(const std::string& tag) {
    if (loop_depth_ == 0) fail("'" + tag + "' outside a loop");
    end_block();
    return LoopControlNode{tag == "break"};
  }

  bool at_tuple_end(std::string_view extra_end) const {
    const TokenKind kind = current().kind;
    return kind == TokenKind::kVariableEnd || kind == TokenKind::kBlockEnd || at_operator(")") ||
           (!extra_end.empty() && at_name(extra_end));
  }

  // An expression, or several separated by commas (a tuple, made a list).
  ExprPtr parse_tuple(bool with_condition, std::string_view extra_end = {}) {
    const int line = current().line;
    ExprPtr first = with_condition ? parse_expression() : parse_or();
    if (!at_operator(",")) return first;
    ExprPtr tuple = make_expr(ExprKind::kList, line);
    tuple->args.push_back(std::move(first));
    while (skip_operator(",") && !at_tuple_end(extra_end)) {
      tuple->args.push_back(with_condition ? parse_expression() : parse_or());
    }
    return tuple;
  }

  // `a if cond else b`, the lowest precedence.
  ExprPtr parse_expression() {
    NestingGuard guard(*this);
    ExprPtr expr = parse_or();
    while (at_name("if")) {
      ExprPtr condition = make_expr(ExprKind::kCondition, take().line);
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression() : nullptr;
      condition->args.push_back(std::move(expr));
      condition->args.push_back(std::move(test));
      condition->args.push_back(std::move(otherwise));
      expr = std::move(condition);
    }
    return expr;
  }

  ExprPtr make_binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    ExprPtr expr = make_expr(ExprKind::kBinary, line, std::move(op));
    expr->args.push_back(std::move(left));
    expr->args.push_back(std::move(right));
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const int line = take().line;
      left = make_binary("or", std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const int line = take().line;
      left = make_binary("and", std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (!at_name("not")) return parse_compare();
    NestingGuard guard(*this);
    ExprPtr expr = make_expr(ExprKind::kUnary, take().line, "not");
    expr->args.push_back(parse_not());
    return expr;
  }

  // The comparison operator at the current token ("" if none), consumed.
  std::string take_comparison() {
    static constexpr std::array<std::string_view, 6> kOperators = {"==", "!=", "<",
                                                                   ">",  "<=", ">="};
    if (current().kind == TokenKind::kOperator &&
        std::find(kOperators.begin(), kOperators.end(), current().text) != kOperators.end()) {
      return take().text;
    }
    if (skip_name("in")) return "in";
    if (at_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
      pos_ += 2;
      return "not in";
    }
    return "";
  }

  ExprPtr parse_compare() {
    const int line = current().line;
    ExprPtr first = parse_math1();
    std::string op = take_comparison();
    if (op.empty()) return first;
    ExprPtr compare = make_expr(ExprKind::kCompare, line);
    compare->args.push_back(std::move(first));
    for (; !op.empty(); op = take_comparison()) {
      compare->operators.push_back(op);
      compare->args.push_back(parse_math1());
    }
    return compare;
  }

  // Left-associative binary operators of one precedence level.
  template <typename Next>
  ExprPtr parse_left_binary(std::initializer_list<std::string_view> ops, Next next) {
    ExprPtr left = (this->*next)();
    while (current().kind == TokenKind::kOperator &&
           std::find(ops.begin(), ops.end(), current().text) != ops.end()) {
      const Token op = take();
      left = make_binary(op.text, std::move(left), (this->*next)(), op.line);
    }
    return left;
  }

  ExprPtr parse_math1() { return parse_left_binary({"+", "-"}, &Parser::parse_concat); }
  ExprPtr parse_concat() { return parse_left_binary({"~"}, &Parser::parse_math2); }
  ExprPtr parse_math2() { return parse_left_binary({"*", "/", "//", "%"}, &Parser::parse_pow); }
  ExprPtr parse_pow() { return parse_left_binary({"**"}, &Parser::parse_unary_with_filters); }
  ExprPtr parse_unary_with_filters() { return parse_unary(true); }

  // Unary minus/plus, a primary and its postfixes, then (with_filters) filters, tests, calls.
  ExprPtr parse_unary(bool with_filters) {
    NestingGuard guard(*this);
    ExprPtr expr;
    if (at_operator("-") || at_operator("+")) {
      const Token op = take();
      expr = make_expr(ExprKind::kUnary, op.line, op.text);
      expr->args.push_back(parse_unary(false));
    } else {
      expr = parse_primary();
    }
    expr = parse_postfix(std::move(expr));
    return with_filters ? parse_filters(std::move(expr)) : std::move(expr);
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    switch (token.kind) {
      case TokenKind::kName:
        return parse_name();
      case TokenKind::kString: {
        const int line = token.line;
        std::string value;
        while (current().kind == TokenKind::kString) value += take().text;
        return make_literal(Value{std::move(value)}, line);
      }
      case TokenKind::kInteger:
        return parse_integer();
      case TokenKind::kFloat:
        return make_literal(Value{std::strtod(token.text.c_str(), nullptr)}, take().line);
      default:
        break;
    }
    if (at_operator("(")) return parse_parenthesized();
    if (at_operator("[")) return parse_list();
    if (at_operator("{")) return parse_dict();
    fail("unexpected " + describe(token));
  }

  ExprPtr parse_name() {
    const Token token = take();
    const std::string& n = token.text;
    if (n == "true" || n == "True") return make_literal(Value{true}, token.line);
    if (n == "false" || n == "False") return make_literal(Value{false}, token.line);
    if (n == "none" || n == "None") return make_literal(Value{None{}}, token.line);
    return make_expr(ExprKind::kName, token.line, n);
  }

  ExprPtr parse_integer() {
    const Token token = take();
    errno = 0;
    const long long value = std::strtoll(token.text.c_str(), nullptr, 10);
    if (errno == ERANGE) fail("integer " + token.text + " is too large");
    return make_literal(Value{static_cast<int64_t>(value)}, token.line);
  }

  // (expr) or a tuple (a, b) / () / (a,).
  ExprPtr parse_parenthesized() {
    const int line = take().line;
    if (skip_operator(")")) return make_expr(ExprKind::kList, line);
    ExprPtr first = parse_expression();
    if (skip_operator(")")) return first;
    ExprPtr tuple = make_expr(ExprKind::kList, line);
    tuple->args.push_back(std::move(first));
    while (!skip_operator(")")) {
      expect_operator(",");
      if (skip_operator(")")) break;
      tuple->args.push_back(parse_expression());
    }
    return tuple;
  }

  ExprPtr parse_list() {
    ExprPtr list = make_expr(ExprKind::kList, take().line);
    while (!skip_operator("]")) {
      if (!list->args.empty()) expect_operator(",");
      if (skip_operator("]")) break;
      list->args.push_back(parse_expression());
    }
    return list;
  }

  ExprPtr parse_dict() {
    ExprPtr dict = make_expr(ExprKind::kDict, take().line);
    while (!skip_operator("}")) {
      if (!dict->args.empty()) expect_operator(",");
      if (skip_operator("}")) break;
      dict->args.push_back(parse_expression());
      expect_operator(":");
      dict->args.push_back(parse_expression());
    }
    return dict;
  }

  // .attr, .0, [index], [a:b:c], (args).
  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      if (at_operator(".")) {
        expr = parse_dot(std::move(expr));
      } else if (at_operator("[")) {
        expr = parse_subscript(std::move(expr));
      } else if (at_operator("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_dot(ExprPtr object) {
    const int line = take().line;
    if (current().kind == TokenKind::kInteger) {
      ExprPtr item = make_expr(ExprKind::kItem, line);
      item->args.push_back(std::move(object));
      item->args.push_back(parse_integer());
      return item;
    }
    ExprPtr attribute = make_expr(ExprKind::kAttribute, line, expect_name());
    attribute->args.push_back(std::move(object));
    return attribute;
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const int line = take().line;
    std::array<ExprPtr, 3> parts;
    size_t colons = 0;
    while (!skip_operator("]")) {
      if (skip_operator(":")) {
        if (++colons > 2) fail("unexpected ':'");
      } else if (!parts[colons]) {
        parts[colons] = parse_expression();
      } else {
        fail("expected ']', got " + describe(current()));
      }
    }
    if (colons == 0 && !parts[0]) fail("expected an index");
    ExprPtr expr = make_expr(colons == 0 ? ExprKind::kItem : ExprKind::kSlice, line);
    expr->args.push_back(std::move(object));
    for (size_t i = 0; i <= (colons == 0 ? 0 : 2); ++i) expr->args.push_back(std::move(parts[i]));
    return expr;
  }

  // (positional..., name=value...) appended to expr's args and keywords.
  void parse_arguments(Expr& expr) {
    expect_operator("(");
    bool first = true;
    while (!skip_operator(")")) {
      if (!std::exchange(first, false)) expect_operator(",");
      if (skip_operator(")")) break;
      if (at_operator("*") || at_operator("**")) fail("*args and **kwargs are not supported");
      if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
          peek().text == "=") {
        std::string keyword = take().text;
        ++pos_;
        expr.keywords.push_back({std::move(keyword), parse_expression()});
      } else {
        if (!expr.keywords.empty()) fail("positional argument follows keyword argument");
        expr.args.push_back(parse_expression());
      }
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr call = make_expr(ExprKind::kCall, current().line);
    call->args.push_back(std::move(callee));
    parse_arguments(*call);
    return call;
  }

  // Filters, tests and calls after a unary expression, left to right.
  ExprPtr parse_filters(ExprPtr expr) {
    while (true) {
      if (at_operator("|")) {
        expr = parse_filter(std::move(expr));
      } else if (at_name("is")) {
        expr = parse_test(std::move(expr));
      } else if (at_operator("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (skip_operator(".")) name.append(".").append(expect_name());
    return name;
  }

  ExprPtr parse_filter(ExprPtr value) {
    const int line = take().line;
    std::string filter = parse_dotted_name();
    if (!is_known_filter(filter)) fail("unknown filter '" + filter + "'");
    ExprPtr expr = make_expr(ExprKind::kFilter, line, std::move(filter));
    expr->args.push_back(std::move(value));
    if (at_operator("(")) parse_arguments(*expr);
    return expr;
  }

  bool at_test_argument() const {
    const TokenKind kind = current().kind;
    if (kind == TokenKind::kName) return !at_name("else") && !at_name("or") && !at_name("and");
    return kind == TokenKind::kString || kind == TokenKind::kInteger || kind == TokenKind::kFloat ||
           at_operator("(") || at_operator("[") || at_operator("{");
  }

  ExprPtr parse_test(ExprPtr value) {
    const int line = take().line;
    const bool negated = skip_name("not");
    std::string test = parse_dotted_name();
    if (!is_known_test(test)) fail("unknown test '" + test + "'");
    ExprPtr expr = make_expr(ExprKind::kTest, line, std::move(test));
    expr->negated = negated;
    expr->args.push_back(std::move(value));
    if (at_operator("(")) {
      parse_arguments(*expr);
    } else if (at_test_argument()) {
      if (at_name("is")) fail("you cannot chain multiple tests with is");
      expr->args.push_back(parse_postfix(parse_primary()));
    }
    return expr;
  }

  std::vector<Token> tokens_;
  const std::string& name_;
  size_t pos_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;  // for loops around the statement being parsed (break, continue)
  bool has_generation_ = false;
};

}  // namespace
}  // namespace chat_template

ChatTemplate::ChatTemplate(std::string_view source, std::string name) : name_(std::move(name)) {
  const std::string normalized = chat_template::normalize_newlines(source);
  std::vector<chat_template::Token> tokens = chat_template::Lexer(normalized, name_).tokenize();
  program_ =
      std::make_unique<const Program>(chat_template::Parser(std::move(tokens), name_).parse());
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

bool ChatTemplate::has_generation() const { return program_->has_generation; }

}  // namespace mpitrain
