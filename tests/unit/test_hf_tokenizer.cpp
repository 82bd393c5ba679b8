// Hugging Face tokenizer.json on small files written here: the BPE merges (both forms) and
// ignore_merges, the Split behaviors, \s as Unicode White_Space, added tokens, NFC, document
// boundaries from tokenizer_config.json or the post-processor, and every setting this tokenizer
// does not run refused (UsageError naming it).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../../src/data/byte_level.hpp"
#include "../../src/data/pcre2_regex.hpp"
#include "mpitrain/data/document_starts.hpp"
#include "mpitrain/data/hf_tokenizer.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;
using json = nlohmann::json;

namespace {

class HfTokenizerTest : public ::testing::Test {  // a fresh temporary directory per test
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpitrain-hf-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A byte-level BPE: the 256 byte tokens (id = byte) and "he" 256, "ll" 257, "hell" 258,
  // "hello" 259 (a token no merge makes); pre-tokenizer ByteLevel alone, GPT-2's regex off.
  static json small() {
    const ByteAlphabet alphabet;
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[utf8(alphabet.code_point[b])] = b;
    vocab["he"] = 256;
    vocab["ll"] = 257;
    vocab["hell"] = 258;
    vocab["hello"] = 259;
    const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                             {"trim_offsets", true}, {"use_regex", false}};
    return {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", byte_level},
            {"post_processor", byte_level},
            {"decoder", byte_level},
            {"model",
             {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"merges", json::array({"h e", json::array({"l", "l"}), "he ll"})}}}};
  }
  // A Split step then ByteLevel with add_prefix_space: each piece shows as " piece" decoded.
  static json split(const json& pattern, const std::string& behavior) {
    json j = small();
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", pattern}, {"behavior", behavior}, {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}}}};
    return j;
  }
  std::unique_ptr<HfTokenizer> load(const json& j, const json& config = nullptr) const {
    const std::string file = (dir_ / "tokenizer.json").string();
    std::ofstream(file) << j.dump();
    std::string config_file;
    if (!config.is_null()) {
      config_file = (dir_ / "tokenizer_config.json").string();
      std::ofstream(config_file) << config.dump();
    }
    return HfTokenizer::from_files(file, config_file);
  }
  // The message of the UsageError that loading j throws ("" if none).
  std::string load_error(const json& j) const {
    try {
      load(j);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
  static std::string round_trip(const Tokenizer& tok, const std::string& text) {
    const std::vector<uint32_t> ids = tok.encode(text);
    const std::vector<int32_t> signed_ids(ids.begin(), ids.end());
    return tok.decode(signed_ids.data(), signed_ids.size());
  }

  std::filesystem::path dir_;
};

TEST_F(HfTokenizerTest, MergesInBothFormsAndIgnoreMerges) {
  const auto tok = load(small());
  EXPECT_EQ(tok->vocab_size(), 260);
  EXPECT_EQ(tok->encode("hello"), (std::vector<uint32_t>{258, 'o'}));  // he + ll -> hell, o
  EXPECT_EQ(round_trip(*tok, "hello wörld\n"), "hello wörld\n");
  json ignore = small();
  ignore["model"]["ignore_merges"] = true;  // a whole piece in the vocabulary is that token
  EXPECT_EQ(load(ignore)->encode("hello"), (std::vector<uint32_t>{259}));
  EXPECT_EQ(load(ignore)->encode("hellos"), (std::vector<uint32_t>{258, 'o', 's'}));
}

TEST_F(HfTokenizerTest, SplitBehaviorsAsHuggingFaceDocumentsThem) {
  const std::string text = "the-final--countdown";
  const json dash = {{"String", "-"}};
  EXPECT_EQ(round_trip(*load(split(dash, "Removed")), text), " the final countdown");
  EXPECT_EQ(round_trip(*load(split(dash, "Isolated")), text), " the - final - - countdown");
  EXPECT_EQ(round_trip(*load(split(dash, "MergedWithPrevious")), text), " the- final- - countdown");
  EXPECT_EQ(round_trip(*load(split(dash, "MergedWithNext")), text), " the -final - -countdown");
  EXPECT_EQ(round_trip(*load(split(dash, "Contiguous")), text), " the - final -- countdown");
}

TEST_F(HfTokenizerTest, WhiteSpaceIsUnicodeWhiteSpace) {
  const auto tok = load(split({{"Regex", R"(\s+)"}}, "Isolated"));
  EXPECT_EQ(round_trip(*tok, "a\u2003b\u3000c"), " a \u2003 b \u3000 c");  // em, ideographic space
  EXPECT_EQ(round_trip(*tok, "a\u180Eb"), " a\u180Eb");  // U+180E is not white space
  const auto not_space = load(split({{"Regex", R"(\S+)"}}, "Isolated"));
  EXPECT_EQ(round_trip(*not_space, "a\u180Eb c"), " a\u180Eb  c");
  EXPECT_EQ(with_unicode_white_space(R"([^\s\p{L}]|\s+(?!\S))"),
            "[^\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
            "\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\p{L}]|[\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}"
            "\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}]+"
            "(?![^\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}"
            "\\x{2029}\\x{202F}\\x{205F}\\x{3000}])");
}

TEST_F(HfTokenizerTest, AddedTokensLongestLeftmostBeforeThePreTokenizer) {
  json j = split({{"Regex", R"(\s+)"}}, "Removed");
  j["added_tokens"] = {
      {{"id", 300}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 301}, {"content", "<s>x"}, {"special", false}, {"normalized", false}}};
  const auto tok = load(j);
  EXPECT_EQ(tok->vocab_size(), 302);
  const uint32_t space = ' ';  // small()'s token ids are the bytes
  EXPECT_EQ(tok->encode("a<s>b <s>x"),
            (std::vector<uint32_t>{space, 'a', 300, space, 'b', 301}));
  EXPECT_EQ(round_trip(*tok, "<s>x<s>"), "<s>x<s>");
}

TEST_F(HfTokenizerTest, NfcComposesAndKeepsBytesThatAreNotUtf8) {
  json j = small();
  j["normalizer"] = {{"type", "NFC"}};
  const auto tok = load(j);
  EXPECT_EQ(round_trip(*tok, "cafe\u0301"), "caf\u00e9");
  EXPECT_EQ(round_trip(*tok, "\xff" "e\u0301\xc3"), "\xff\u00e9\xc3");
  EXPECT_EQ(round_trip(*load(small()), "cafe\u0301"), "cafe\u0301");  // no normalizer
}

TEST_F(HfTokenizerTest, DocumentBoundariesFromTheConfigElseTheTemplate) {
  json j = small();
  j["added_tokens"] = {{{"id", 260}, {"content", "<|bos|>"}, {"special", true}},
                       {{"id", 261}, {"content", "<|eos|>"}, {"special", true}}};
  EXPECT_FALSE(load(j)->document_start().has_value());
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens", {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {260}}, {"tokens", {"<|bos|>"}}}}}}};
  EXPECT_EQ(load(j)->document_start(), 260u);
  EXPECT_FALSE(load(j)->document_end().has_value());
  const auto configured = load(j, {{"bos_token", nullptr}, {"eos_token", {{"content", "<|eos|>"}}}});
  EXPECT_FALSE(configured->document_start().has_value());
  EXPECT_EQ(configured->document_end(), 261u);
  // --document-mask: a document starts at the BOS where there is one, else after the EOS
  EXPECT_TRUE(document_boundary(*load(j), "document-mask").before);
  EXPECT_EQ(document_boundary(*configured, "document-mask").token, 261);
  EXPECT_FALSE(document_boundary(*configured, "document-mask").before);
  EXPECT_EQ(describe(document_boundary(*configured, "document-mask"), *configured),
            "a document starts after each token 261 (<|eos|>)");
  EXPECT_EQ(load(j, {{"bos_token", "<|eos|>"}, {"add_bos_token", false}})->document_start(),
            std::nullopt);
  EXPECT_EQ(configured->files().size(), 2u);
}

TEST_F(HfTokenizerTest, WhatItDoesNotRunIsRefusedByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/model/type", "model.type = \"WordPiece\" is not supported"},
      {"/model/dropout", "model.dropout = 0.1 is not supported"},
      {"/model/byte_fallback", "model.byte_fallback = true is not supported"},
      {"/model/continuing_subword_prefix", "model.continuing_subword_prefix = \"##\""},
      {"/normalizer", "normalizer.type = \"NFKC\" is not supported"},
      {"/pre_tokenizer", "pre_tokenizer.type = \"Whitespace\" is not supported"},
      {"/decoder", "decoder = {\"type\":\"Metaspace\"} is not supported"},
      {"/post_processor", "post_processor.type = \"RobertaProcessing\" is not supported"},
      {"/truncation", "truncation = {\"max_length\":8} is not supported"},
      {"/extra", "(top level).extra = 1 is not supported"},
      {"/added_tokens", "added_tokens[0].single_word = true is not supported"},
      {"/split_invert",
       "pre_tokenizer.pretokenizers[0].invert = true with behavior \"Isolated\" is not supported"},
      {"/split_regex", "\\w means one thing in PCRE2 and another"},
      {"/behavior", "pre_tokenizer.pretokenizers[0].behavior = \"Shuffled\" is not supported"},
  };
  for (const auto& [what, expected] : cases) {
    json j = small();
    if (what == "/model/type") j["model"]["type"] = "WordPiece";
    if (what == "/model/dropout") j["model"]["dropout"] = 0.1;
    if (what == "/model/byte_fallback") j["model"]["byte_fallback"] = true;
    if (what == "/model/continuing_subword_prefix") j["model"]["continuing_subword_prefix"] = "##";
    if (what == "/normalizer") j["normalizer"] = {{"type", "NFKC"}};
    if (what == "/pre_tokenizer") j["pre_tokenizer"] = {{"type", "Whitespace"}};
    if (what == "/decoder") j["decoder"] = {{"type", "Metaspace"}};
    if (what == "/post_processor") j["post_processor"] = {{"type", "RobertaProcessing"}};
    if (what == "/truncation") j["truncation"] = {{"max_length", 8}};
    if (what == "/extra") j["extra"] = 1;
    if (what == "/added_tokens")
      j["added_tokens"] = {{{"id", 260}, {"content", "<x>"}, {"single_word", true}}};
    if (what == "/split_invert") {
      j = split({{"String", "-"}}, "Isolated");
      j["pre_tokenizer"]["pretokenizers"][0]["invert"] = true;
    }
    if (what == "/split_regex") j = split({{"Regex", R"(\w+)"}}, "Isolated");
    if (what == "/behavior") j = split({{"String", "-"}}, "Shuffled");
    EXPECT_NE(load_error(j).find(expected), std::string::npos)
        << what << ": " << load_error(j) << "\n  expected: " << expected;
  }
  json no_bytes = small();
  no_bytes["model"]["vocab"].erase("a");
  no_bytes["model"]["merges"] = json::array();
  EXPECT_NE(load_error(no_bytes).find("lacks the token of byte 97"), std::string::npos);
}

}  // namespace
