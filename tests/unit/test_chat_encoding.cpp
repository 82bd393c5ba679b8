// Conversations as training tokens (data/chat_encoding.hpp): which tokens the loss mask scores
// (the assistant's turns, told by {% generation %} blocks or by rendering prefixes), templates that
// cannot be split refused, tokens that do not spell the text refused, and where the template, the
// special tokens and the kwargs come from.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "mpitrain/data/chat_encoding.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;
using ojson = nlohmann::ordered_json;

namespace {

// A ChatML-like template of this test's (no model's): each message between <|im_start|> and
// <|im_end|>, the generation prompt "<|im_start|>assistant\n".
constexpr const char* kChatMl =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

ojson conversation() {
  return {{"messages",
           {{{"role", "system"}, {"content", "Be brief."}},
            {{"role", "user"}, {"content", "Q1"}},
            {{"role", "assistant"}, {"content", "A1"}},
            {{"role", "user"}, {"content", "Q2"}},
            {{"role", "assistant"}, {"content", "A2 \xc3\xa9"}}}}};  // a 2-byte character
}

ChatFormat format(const std::string& source) {
  return {ChatTemplate(source, "test"), {}, "test", ""};
}

// The bytes whose token is scored, in order (one token per byte for ByteTokenizer).
std::string scored_text(const std::string& text, const ChatTokens& t) {
  std::string out;
  for (size_t k = 0; k < t.scored.size(); ++k)
    if (t.scored[k]) out += text[k];
  return out;
}

std::string usage_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(ChatEncoding, PrefixRenderingsScoreEachAnswerAndWhatEndsIt) {
  const ByteTokenizer bytes;
  const ChatFormat chat = format(kChatMl);
  ASSERT_FALSE(chat.chat_template.has_generation());
  const ChatTokens t = encode_conversation(bytes, chat, conversation(), "f.jsonl:1");
  const std::string text =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nQ1<|im_end|>\n"
      "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nQ2<|im_end|>\n"
      "<|im_start|>assistant\nA2 \xc3\xa9<|im_end|>\n";
  const auto* bytes_of = reinterpret_cast<const unsigned char*>(text.data());
  EXPECT_EQ(t.tokens, std::vector<uint32_t>(bytes_of, bytes_of + text.size()));  // nothing added
  EXPECT_EQ(scored_text(text, t), "A1<|im_end|>\nA2 \xc3\xa9<|im_end|>\n");
}

TEST(ChatEncoding, GenerationBlocksAreTheTurns) {
  const ByteTokenizer bytes;
  const ChatFormat chat = format(
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
      "{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}"
      "<|im_end|>{% endif %}\n{% endfor %}");
  ASSERT_TRUE(chat.chat_template.has_generation());
  const ChatTokens t = encode_conversation(bytes, chat, conversation(), "f.jsonl:1");
  const std::string text(t.tokens.begin(), t.tokens.end());
  EXPECT_EQ(scored_text(text, t), "A1<|im_end|>A2 \xc3\xa9<|im_end|>");
}

// Tokens of two bytes (id = 256 * first + second + 256; a last odd byte is its own id): a token
// that straddles a turn's edge is scored, as transformers' char_to_token marks it.
struct PairTokenizer final : Tokenizer {
  std::string name() const override { return "pairs"; }
  int64_t vocab_size() const override { return 65536 + 256; }
  std::vector<uint32_t> encode(std::string_view text) const override {
    std::vector<uint32_t> ids;
    for (size_t i = 0; i < text.size(); i += 2)
      ids.push_back(i + 1 < text.size() ? 256 + 256 * static_cast<unsigned char>(text[i]) +
                                              static_cast<unsigned char>(text[i + 1])
                                        : static_cast<unsigned char>(text[i]));
    return ids;
  }
  std::string decode(const int32_t* ids, size_t n) const override {
    std::string text;
    for (size_t k = 0; k < n; ++k)
      if (ids[k] < 256)
        text += static_cast<char>(ids[k]);
      else
        text += {static_cast<char>((ids[k] - 256) / 256), static_cast<char>((ids[k] - 256) % 256)};
    return text;
  }
};

TEST(ChatEncoding, ATokenOverlappingATurnIsScored) {
  const ChatFormat chat = format(
      "{% for m in messages %}{{ m.role[0] }}:{{ m.content }};"
      "{% endfor %}{% if add_generation_prompt %}a:{% endif %}");
  const ojson row = {{"messages",
                      {{{"role", "user"}, {"content", "xy"}},  // "u:xy;" is 5 bytes
                       {{"role", "assistant"}, {"content", "bc"}}}}};
  const ChatTokens t = encode_conversation(PairTokenizer(), chat, row, "f.jsonl:1");
  // "u:xy;a:bc;" in pairs "u:" "xy" ";a" ":b" "c;": the turn is "bc;", from byte 7
  EXPECT_EQ(t.scored, (std::vector<uint8_t>{0, 0, 0, 1, 1}));
}

TEST(ChatEncoding, TurnsThatCannotBeToldApartAreRefused) {
  const auto refusal = [](const std::string& source) {
    return usage_error(
        [&] { encode_conversation(ByteTokenizer(), format(source), conversation(), "f.jsonl:7"); });
  };
  // the last message is marked when it is the assistant's: alone, A1 is; in the whole, it is not
  const std::string rewritten = refusal(
      "{% for m in messages %}{{ m.role }}:{% if loop.last and m.role == 'assistant' %}*"
      "{% endif %}{{ m.content }};{% endfor %}");
  EXPECT_NE(rewritten.find("f.jsonl:7: test renders message 3 (assistant) differently once later"),
            std::string::npos)
      << rewritten;
  EXPECT_NE(rewritten.find("{% generation %}"), std::string::npos) << rewritten;
  // a generation prompt the answer does not follow
  const std::string prompt = refusal(
      "{% for m in messages %}{{ m.role }}:{{ m.content }};{% endfor %}"
      "{% if add_generation_prompt %}assistant:?{% endif %}");
  EXPECT_NE(prompt.find("f.jsonl:7: the generation prompt that test renders before message 3 "
                        "(assistant) is not how the conversation goes on"),
            std::string::npos)
      << prompt;
}

TEST(ChatEncoding, TokensThatDoNotSpellTheTextAreRefused) {
  struct Upper final : Tokenizer {  // decodes to other bytes than it encoded
    std::string name() const override { return "upper"; }
    int64_t vocab_size() const override { return 256; }
    std::vector<uint32_t> encode(std::string_view text) const override {
      return {text.begin(), text.end()};
    }
    std::string decode(const int32_t* ids, size_t n) const override {
      std::string text;
      for (size_t k = 0; k < n; ++k) text += static_cast<char>(std::toupper(ids[k]));
      return text;
    }
  };
  const std::string e = usage_error(
      [&] { encode_conversation(Upper(), format(kChatMl), conversation(), "f.jsonl:2"); });
  EXPECT_NE(e.find("f.jsonl:2: token 2 of the rendered conversation is not its text at byte 2"),
            std::string::npos)
      << e;
}

TEST(ChatEncoding, ToolsAndDocumentsAreNoneUnlessTheRowHasThem) {
  const ChatFormat chat =
      format("{{ tools is none }} {{ documents is none }} {{ tools|length if tools else '-' }}");
  ojson row = conversation();
  const auto text = [&] {
    const ChatTokens t = encode_conversation(ByteTokenizer(), chat, row, "f.jsonl:1");
    return std::string(t.tokens.begin(), t.tokens.end());
  };
  EXPECT_EQ(text(), "True True -");
  row["tools"] = {{{"type", "function"}}};
  EXPECT_EQ(text(), "False True 1");
}

class ChatFormatTest : public ::testing::Test {  // a fresh temporary directory per test
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpitrain-chat-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }
  // The bytes tokenizer with a tokenizer_config.json (as a Hugging Face tokenizer has).
  struct Configured final : Tokenizer {
    explicit Configured(std::string config) : config_(std::move(config)) {}
    std::string name() const override { return "configured"; }
    int64_t vocab_size() const override { return 256; }
    std::vector<uint32_t> encode(std::string_view text) const override {
      return {text.begin(), text.end()};
    }
    std::string decode(const int32_t* ids, size_t n) const override {
      return std::string(ids, ids + n);
    }
    std::vector<TokenizerFile> files() const override {  // with a chat_template.jinja beside
      std::vector<TokenizerFile> f = {{"config", config_, "tokenizer_config.json"}};
      const auto beside = std::filesystem::path(config_).parent_path() / kChatTemplateFile;
      if (std::filesystem::exists(beside))
        f.push_back({"chat_template", beside, kChatTemplateFile});
      return f;
    }
    std::string config_;
  };
  std::string render(const ChatFormat& f) const {
    ojson context = f.variables;
    context["messages"] = ojson::array();
    return f.chat_template.render(context).text;
  }

  std::filesystem::path dir_;
};

TEST_F(ChatFormatTest, TheTemplateFileTheJinjaBesideOrTheConfigs) {
  const ojson config = {{"bos_token", {{"content", "<s>"}, {"lstrip", false}}},  // an AddedToken
                        {"eos_token", "</s>"},
                        {"unk_token", nullptr},  // unset: undefined in the template
                        {"additional_special_tokens", {"<x>", {{"content", "<y>"}}}},
                        {"chat_template",
                         {{{"name", "tool_use"}, {"template", "tools"}},
                          {{"name", "default"},
                           {"template",
                            "{{ bos_token }}{{ eos_token }}{{ unk_token is defined }}"
                            "{{ additional_special_tokens|join(',') }}"}}}}};
  const Configured tok(write("tokenizer_config.json", config.dump()));
  const ChatFormat from_config = load_chat_format(tok, "");
  EXPECT_EQ(render(from_config), "<s></s>False<x>,<y>");
  EXPECT_NE(from_config.source.find("tokenizer_config.json' chat_template"), std::string::npos);
  EXPECT_EQ(from_config.file, "");  // the config's copy carries it

  const std::string beside = write("chat_template.jinja", "beside {{ eos_token }}");
  const ChatFormat from_jinja = load_chat_format(tok, "");  // transformers reads it first
  EXPECT_EQ(render(from_jinja), "beside </s>");
  EXPECT_EQ(from_jinja.file, beside);
  const std::string own = write("own.jinja", "own {{ bos_token }}");
  const ChatFormat given = load_chat_format(tok, own);
  EXPECT_EQ(render(given), "own <s>");
  EXPECT_EQ(given.source, "--chat-template '" + own + "'");
  EXPECT_EQ(given.file, own);
}

// transformers' apply_chat_template(..., **kwargs): variables beside the special tokens, which
// they replace where they share a name; the ones each conversation sets are refused.
TEST_F(ChatFormatTest, KwargsAreVariables) {
  const Configured tok(write("tokenizer_config.json", R"({"eos_token": "</s>"})"));
  const std::string source = write("t.jinja", "{{ eos_token }} {{ enable_thinking }}");
  EXPECT_EQ(render(load_chat_format(tok, source)), "</s> ");
  EXPECT_EQ(render(load_chat_format(tok, source, {{"enable_thinking", false}})), "</s> False");
  EXPECT_EQ(render(load_chat_format(tok, source, {{"eos_token", "<e>"}})), "<e> ");
  EXPECT_NE(usage_error([&] {
              load_chat_format(tok, source, {{"messages", ojson::array()}});
            }).find("--chat-template-kwargs sets 'messages', which each conversation sets"),
            std::string::npos);
  EXPECT_NE(usage_error([&] {
              load_chat_format(tok, source, ojson::array());
            }).find("--chat-template-kwargs is not a JSON object"),
            std::string::npos);
}

TEST_F(ChatFormatTest, NoTemplateIsRefused) {
  const Configured tok(write("tokenizer_config.json", R"({"eos_token": "</s>"})"));
  EXPECT_NE(usage_error([&] { load_chat_format(tok, ""); })
                .find("has no chat_template: give "
                      "the template with "
                      "--chat-template FILE"),
            std::string::npos);
  EXPECT_NE(usage_error([&] {
              load_chat_format(ByteTokenizer(), "");
            }).find("the bytes tokenizer has no tokenizer_config.json"),
            std::string::npos);
  const Configured bad(write("bad.json", R"({"chat_template": 3})"));
  EXPECT_NE(usage_error([&] { load_chat_format(bad, ""); }).find("neither a string nor a list"),
            std::string::npos);
  EXPECT_NE(usage_error([&] {
              load_chat_format(ByteTokenizer(), (dir_ / "none").string());
            }).find("cannot read --chat-template"),
            std::string::npos);
}

}  // namespace
