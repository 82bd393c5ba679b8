// Conversations as training tokens (prepare-data --messages-field): a chat template renders the
// messages as the model's chat format, the tokenizer encodes that text as one string (as
// transformers' apply_chat_template(tokenize=True) does: the template writes the special tokens),
// and the loss mask scores the assistant's turns only.
//
// An assistant turn is what the template's {% generation %} blocks render (transformers'
// return_assistant_tokens_mask) or, for a template without them, what the template adds for that
// message after the generation prompt: the text between render(messages[:i],
// add_generation_prompt=true) and render(messages[:i+1]), both of which must begin the whole
// conversation's rendering (a template that renders earlier turns differently once later ones
// follow, as Qwen3's drops their <think> blocks, cannot be split so: a UsageError). A token is
// scored when its text overlaps an assistant turn's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mpitrain/data/chat_template.hpp"
#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

// A template and the variables transformers gives it besides the conversation: the tokenizer's
// special tokens (bos_token, eos_token, unk_token, pad_token, additional_special_tokens) and the
// caller's chat_template_kwargs (e.g. Qwen3's enable_thinking).
struct ChatFormat {
  ChatTemplate chat_template;
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();
  std::string source;  // where the template came from, for messages
  // The template's own file (--chat-template's, or the tokenizer's kChatTemplateFile), which
  // prepare-data copies beside the token files as the tokenizer's; "" for tokenizer_config.json's
  // chat_template, which its copy carries.
  std::string file;
};

// The chat format of tok: the template of template_file (a Jinja file) if it is not "", else the
// chat_template of tok's tokenizer_config.json (a string, or the one named "default" of a list;
// tok's chat_template.jinja comes first, as in transformers), with that file's special
// tokens, and the variables of `kwargs` (a JSON object, as transformers' apply_chat_template
// takes them; they replace special tokens of the same name). UsageError when there is no template
// or it does not parse, or kwargs is not an object or names a variable each conversation sets
// (messages, tools, documents, add_generation_prompt).
ChatFormat load_chat_format(
    const Tokenizer& tok, const std::string& template_file,
    const nlohmann::ordered_json& kwargs = nlohmann::ordered_json::object());

// A conversation's tokens, one loss-mask byte each (1: a target of an assistant turn), and
// whether the tokenizer's document boundary marks it: its start token first and nowhere else, or
// where it has none its end token last and nowhere else (document_starts.hpp: where
// --document-mask finds documents).
struct ChatTokens {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> scored;
  bool marked = false;
};

// The tokens of a conversation, `row` = {"messages": [...], "tools": [...] (optional)}, the
// variables the template sees. UsageError naming `where` when the template raises or cannot be
// split into turns, or the tokens do not spell the rendered text (a tokenizer that changes the
// text, so a token's place in it is unknown).
ChatTokens encode_conversation(const Tokenizer& tok, const ChatFormat& format,
                               const nlohmann::ordered_json& row, const std::string& where);

}  // namespace mpitrain
