// Conversations rendered by a chat template, encoded, and masked to their assistant turns.
#include "mpitrain/data/chat_encoding.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include "mpitrain/data/document_starts.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_text(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  require(in.good(), "cannot read " + what + " '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The path of tok's file of this role (e.g. "config": tokenizer_config.json); "" if it has none.
std::string file_of(const Tokenizer& tok, const std::string& role) {
  for (const TokenizerFile& f : tok.files())
    if (f.role == role) return f.path;
  return "";
}

// A special token as tokenizer_config.json writes it: a string or an AddedToken {"content": ...}.
std::optional<std::string> token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

// transformers' special_tokens_map: the special tokens that are set, as text.
ojson special_tokens_of(const ojson& config) {
  ojson map = ojson::object();
  for (const char* key :
       {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"})
    if (config.contains(key))
      if (const auto text = token_text(config[key])) map[key] = *text;
  if (config.contains("additional_special_tokens") &&
      config["additional_special_tokens"].is_array()) {
    ojson list = ojson::array();
    for (const ojson& t : config["additional_special_tokens"])
      if (const auto text = token_text(t)) list.push_back(*text);
    map["additional_special_tokens"] = list;
  }
  return map;
}

// tokenizer_config.json's chat_template: a string, or the "default" of a list of named ones.
std::string config_template(const ojson& config, const std::string& path) {
  require(config.contains("chat_template"),
          "'" + path + "' has no chat_template: give the template with --chat-template FILE");
  const ojson& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_array())
    for (const ojson& named : t)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string())
        return named["template"].get<std::string>();
  throw UsageError("'" + path + "': chat_template is neither a string nor a list holding one " +
                   "named \"default\": give the template with --chat-template FILE");
}

// The conversation `messages` (of row) rendered; UsageError naming `where` when the template fails.
ChatRendering rendered(const ChatFormat& format, const ojson& row, const ojson& messages,
                       bool generation_prompt, const std::string& where) {
  ojson context = format.variables;
  context["messages"] = messages;
  context["tools"] = row.contains("tools") ? row["tools"] : ojson();
  context["documents"] = ojson();  // transformers passes none unless given
  context["add_generation_prompt"] = generation_prompt;
  try {
    return format.chat_template.render(context);
  } catch (const UsageError& e) {
    throw UsageError(where + ": " + e.what());
  }
}

// The assistant turns of a template without {% generation %}: for each assistant message i, the
// text its rendering adds after render(messages[:i]) with the generation prompt.
std::vector<TextSpan> assistant_turns(const ChatFormat& format, const ojson& row,
                                      const std::string& whole, const std::string& where) {
  const ojson& messages = row["messages"];
  std::vector<TextSpan> turns;
  ojson before = ojson::array();
  for (size_t i = 0; i < messages.size(); before.push_back(messages[i]), ++i) {
    const ojson& m = messages[i];
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    ojson upto = before;
    upto.push_back(m);
    const std::string prompt = rendered(format, row, before, true, where).text;
    const std::string turn = rendered(format, row, upto, false, where).text;
    const std::string message = "message " + std::to_string(i + 1) + " (assistant)";
    const std::string remedy =
        ", so its tokens cannot be told apart: give a template that marks the assistant's turns "
        "with {% generation %} blocks (--chat-template FILE)";
    require(whole.starts_with(prompt), where + ": the generation prompt that " + format.source +
                                           " renders before " + message +
                                           " is not how the conversation goes on (as an empty "
                                           "<think> block before an answer that thinks)" +
                                           remedy);
    require(whole.starts_with(turn) && turn.size() >= prompt.size(),
            where + ": " + format.source + " renders " + message +
                " differently once later messages follow (as Qwen3's drops the <think> blocks of "
                "earlier turns)" +
                remedy);
    turns.push_back({prompt.size(), turn.size()});
  }
  return turns;
}

// Whether tok's document boundary, as --document-mask finds it (document_boundary), marks a
// document of these tokens alone (ChatTokens::marked).
bool marked_by_boundary(const Tokenizer& tok, const std::vector<uint32_t>& tokens) {
  if ((!tok.document_start() && !tok.document_end()) || tokens.empty()) return false;
  const DocumentBoundary boundary = document_boundary(tok, "document-mask");
  const auto mark = static_cast<uint32_t>(boundary.token);
  if (std::count(tokens.begin(), tokens.end(), mark) != 1) return false;
  return boundary.before ? tokens.front() == mark : tokens.back() == mark;
}

}  // namespace

ChatFormat load_chat_format(const Tokenizer& tok, const std::string& template_file,
                            const ojson& kwargs) {
  require(kwargs.is_object(), "--chat-template-kwargs is not a JSON object: " + kwargs.dump());
  for (const char* set : {"messages", "tools", "documents", "add_generation_prompt"})
    require(!kwargs.contains(set),
            std::string("--chat-template-kwargs sets '") + set + "', which each conversation sets");
  const std::string config_file = file_of(tok, "config");
  ojson config = ojson::object();
  if (!config_file.empty()) {
    config = ojson::parse(read_text(config_file, "tokenizer config"), nullptr, false);
    require(config.is_object(), "'" + config_file + "' is not a JSON object");
  }
  std::string source, name, file = template_file;
  if (file.empty()) file = file_of(tok, "chat_template");
  if (!template_file.empty()) {
    source = read_text(template_file, "--chat-template");
    name = "--chat-template '" + template_file + "'";
  } else if (!file.empty()) {
    source = read_text(file, "chat template");
    name = "'" + file + "'";
  } else {
    require(!config_file.empty(),
            "the " + tok.name() +
                " tokenizer has no tokenizer_config.json to take a chat_template from: give "
                "the template with --chat-template FILE");
    source = config_template(config, config_file);
    name = "'" + config_file + "' chat_template";
  }
  ojson variables = special_tokens_of(config);
  for (const auto& [key, value] : kwargs.items()) variables[key] = value;
  return ChatFormat{ChatTemplate(source, name), std::move(variables), name, file};
}

ChatTokens encode_conversation(const Tokenizer& tok, const ChatFormat& format, const ojson& row,
                               const std::string& where) {
  const ChatRendering whole = rendered(format, row, row["messages"], false, where);
  const std::vector<TextSpan> turns = format.chat_template.has_generation()
                                          ? whole.generation
                                          : assistant_turns(format, row, whole.text, where);
  ChatTokens out;
  out.tokens = tok.encode(whole.text);
  out.scored.resize(out.tokens.size());
  size_t at = 0, turn = 0;  // the token's first byte in the text; the first turn not behind it
  for (size_t k = 0; k < out.tokens.size(); ++k) {
    const auto id = static_cast<int32_t>(out.tokens[k]);
    const std::string piece = tok.decode(&id, 1);
    require(whole.text.compare(at, piece.size(), piece) == 0,
            where + ": token " + std::to_string(k) + " of the rendered conversation is not its " +
                "text at byte " + std::to_string(at) + " (the " + tok.name() +
                " tokenizer changes the text it encodes), so the assistant's tokens are unknown");
    const size_t end = at + piece.size();
    while (turn < turns.size() && turns[turn].end <= at) ++turn;
    out.scored[k] = turn < turns.size() && turns[turn].begin < end && at < turns[turn].end;
    at = end;
  }
  require(at == whole.text.size(), where + ": the tokens of the rendered conversation spell " +
                                       std::to_string(at) + " of its " +
                                       std::to_string(whole.text.size()) + " bytes");
  out.marked = marked_by_boundary(tok, out.tokens);
  return out;
}

}  // namespace mpitrain
