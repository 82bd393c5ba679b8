// Chat templates: the Jinja2 that Hugging Face's chat templates are written in, rendered as
// transformers' apply_chat_template renders them: jinja2's ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, the loop controls (break, continue), the {% generation %} block
// (the text of the assistant's turns), and the globals raise_exception, strftime_now and
// namespace and the filter tojson as transformers defines them.
//
// The subset is what chat templates use (docs/ARCHITECTURE.md lists it): statements if / elif /
// else, for (over lists, strings, dict.items(); loop.index0, index, first, last, length,
// revindex0, revindex; an inline `if` filter; else), set (a name, several names, a namespace's
// attribute, the {% set x %}...{% endset %} block), macro (called with positional and keyword
// arguments), generation, break, continue, comments and whitespace control ({%- -%}); expressions
// with Python's values (none, booleans, integers, floats, strings, lists, dicts), attributes and
// subscripts (negative indices, slices), calls of the string and dict methods templates call, the
// filters and tests they use. Anything else (an unknown filter, test, method or statement, include,
// extends, a call of an undefined name) is a UsageError naming the template and its line, at
// parse time where the parser can tell and otherwise when rendering reaches it: never skipped.
#pragma once

#include <cstddef>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace mpitrain {

// The text [begin, end) of a rendering.
struct TextSpan {
  size_t begin = 0, end = 0;
  bool operator==(const TextSpan&) const = default;
};

struct ChatRendering {
  std::string text;
  std::vector<TextSpan> generation;  // what each {% generation %} block rendered, in order
};

class ChatTemplate {
 public:
  // Parses source; `name` says where it came from in messages ("models/x/tokenizer_config.json's
  // chat_template"). UsageError "NAME line L: what" for a syntax error or a construct outside
  // the subset.
  ChatTemplate(std::string_view source, std::string name);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  // Whether the template has a {% generation %} block.
  bool has_generation() const;

  // The template rendered with the variables of `context`, a JSON object (messages,
  // add_generation_prompt, bos_token, ...; key order is kept, as tojson prints it). UsageError
  // "NAME line L: what" where jinja2 would raise: raise_exception's message, an undefined value
  // used as one (its attribute, a call, arithmetic), a type error. As in jinja2, a missing key or
  // an index out of range is undefined, not an error.
  // Thread-safe: a ChatTemplate renders on several threads at once.
  ChatRendering render(const nlohmann::ordered_json& context) const;

  struct Program;  // the parsed template (chat_template_parse.cpp)

 private:
  std::unique_ptr<const Program> program_;
  std::string name_;
};

}  // namespace mpitrain
