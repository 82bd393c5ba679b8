// Tokenizers as files: descriptors, llm.c's gpt2_tokenizer.bin, the uint32 llm.c shard, and
// documents tokenized on several threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mpitrain/data/document_starts.hpp"
#include "mpitrain/data/gpt2_tokenizer.hpp"
#include "mpitrain/data/token_source.hpp"
#include "mpitrain/data/token_writer.hpp"
#include "mpitrain/data/tokenize_documents.hpp"
#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {

class TokenizerFilesTest : public ::testing::Test {  // a fresh temporary directory per test
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpitrain-tok-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // llm.c's gpt2_tokenizer.bin holding tokens, version 2 with end-of-text id eot.
  void write_llmc_tokenizer(const std::string& file, const std::vector<std::string>& tokens,
                            int32_t eot) const {
    std::array<int32_t, 256> header{};
    header[0] = Gpt2Tokenizer::kLlmcMagic;
    header[1] = 2;
    header[2] = static_cast<int32_t>(tokens.size());
    header[3] = eot;
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
    for (const auto& t : tokens) out << static_cast<char>(t.size()) << t;
  }

  // The message of the UsageError that load_tokenizer(file) throws ("" if none).
  static std::string load_error(const std::string& file) {
    try {
      load_tokenizer(file);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
};

TEST_F(TokenizerFilesTest, ByteDescriptorRoundTrips) {
  std::ofstream(path(kTokenizerFile)) << tokenizer_descriptor_json(ByteTokenizer(), {});
  const auto tok = load_tokenizer(dir_.string());
  EXPECT_EQ(tok->name(), "bytes");
  EXPECT_EQ(tok->vocab_size(), 256);
}

TEST_F(TokenizerFilesTest, DescriptorNamingAMissingRoleIsRefused) {
  std::ofstream(path(kTokenizerFile)) << R"({"name": "gpt2", "files": {}})";
  EXPECT_NE(load_error(path(kTokenizerFile)).find("names tokenizer 'gpt2' but no files.encoder"),
            std::string::npos)
      << load_error(path(kTokenizerFile));
}

// A descriptor that came with a data set names files in its own directory only, by the roles
// of its tokenizer: neither loading nor copying it reads any other file.
TEST_F(TokenizerFilesTest, DescriptorFilesOutsideItsDirectoryAreRefused) {
  namespace fs = std::filesystem;
  fs::create_directories(path("data"));
  std::ofstream(path("secret.model")) << "SECRET";
  fs::create_symlink("../secret.model", path("data/link.model"));
  const std::string descriptor = path("data/") + kTokenizerFile;
  const auto refusal = [&](const std::string& text) {
    std::ofstream(descriptor) << text;
    const std::string loading = load_error(descriptor);
    std::string copying;
    try {
      copy_tokenizer(descriptor, path("copy"));
    } catch (const UsageError& e) {
      copying = e.what();
    }
    EXPECT_EQ(copying, loading);
    EXPECT_FALSE(fs::exists(path("copy/secret.model")));
    EXPECT_FALSE(fs::exists(path("copy/link.model")));
    return loading;
  };
  const std::string secret = path("secret.model");
  EXPECT_EQ(refusal(R"({"name": "sentencepiece", "files": {"model": ")" + secret + "\"}}"),
            "'" + descriptor + "': files.model = '" + secret +
                "' is not a plain file name: a tokenizer's files lie in its own directory");
  EXPECT_EQ(refusal(R"({"name": "sentencepiece", "files": {"model": "../secret.model"}})"),
            "'" + descriptor +
                "': files.model = '../secret.model' is not a plain file name: a tokenizer's "
                "files lie in its own directory");
  EXPECT_EQ(refusal(R"({"name": "sentencepiece", "files": {"model": "link.model"}})"),
            "'" + descriptor + "': files.model = 'link.model' is a link to '" +
                fs::canonical(secret).string() +
                "', outside the tokenizer's directory: a tokenizer's files lie in its own "
                "directory");
  EXPECT_EQ(refusal(R"({"name": "bytes", "files": {"x": "link.model"}})"),
            "'" + descriptor + "': files.x is not a file of tokenizer 'bytes' (it reads none)");
  EXPECT_EQ(refusal(R"({"name": "gpt2", "files": {"model": "link.model"}})"),
            "'" + descriptor + "': files.model is not a file of tokenizer 'gpt2'");
}

TEST_F(TokenizerFilesTest, DirectoryWithoutTokenizerIsRefused) {
  EXPECT_NE(load_error(dir_.string()).find("holds no tokenizer"), std::string::npos);
  EXPECT_NE(load_error(path("none.model")).find("does not exist"), std::string::npos);
}

TEST_F(TokenizerFilesTest, LlmcTokenizerDecodesAndRefusesToEncode) {
  write_llmc_tokenizer(path("gpt2_tokenizer.bin"), {"He", "llo", " world", "<|endoftext|>"}, 3);
  const auto tok = load_tokenizer(path("gpt2_tokenizer.bin"));
  EXPECT_EQ(tok->name(), "gpt2");
  EXPECT_EQ(tok->vocab_size(), 4);
  EXPECT_EQ(tok->document_start(), 3u);
  const DocumentBoundary boundary = document_boundary(*tok, "document-mask");  // --document-mask's
  EXPECT_EQ(boundary.token, 3);
  EXPECT_TRUE(boundary.before);
  EXPECT_EQ(describe(boundary, *tok), "a document starts at each token 3 (<|endoftext|>)");
  const std::vector<int32_t> ids = {0, 1, 2, 3, 9};
  EXPECT_EQ(tok->decode(ids.data(), ids.size()), "Hello world<|endoftext|><|9|>");
  try {
    tok->encode("Hello");
    FAIL() << "encode with gpt2_tokenizer.bin did not throw";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "llm.c's gpt2_tokenizer.bin only decodes; give encoder.json + vocab.bpe");
  }
}

TEST_F(TokenizerFilesTest, LlmcTokenizerWithEndOfTextOutsideIsRefused) {
  write_llmc_tokenizer(path("t.bin"), {"a", "b"}, 7);
  EXPECT_NE(load_error(path("t.bin")).find("end-of-text id 7 is not in its vocabulary"),
            std::string::npos)
      << load_error(path("t.bin"));
}

TEST_F(TokenizerFilesTest, LlmcUint32ShardReadsBack) {
  const std::vector<uint32_t> tokens = {0, 65535, 65536, 128255, 7};
  write_llmc_shard_u32(path("shard.bin"), tokens);
  const auto src = open_tokens(path("shard.bin"), TokenFormat::Llmc);
  ASSERT_EQ(src->size(), tokens.size());
  std::vector<int32_t> back(tokens.size());
  src->read(0, tokens.size(), back.data());
  EXPECT_EQ(std::vector<uint32_t>(back.begin(), back.end()), tokens);
}

// A loss mask of n tokens whose first `unscored` are 0.
std::vector<uint8_t> scored_after(size_t unscored, size_t n) {
  std::vector<uint8_t> mask(n, 1);
  std::fill_n(mask.begin(), unscored, uint8_t{0});
  return mask;
}

TEST(TokenizePieces, ThreadsGiveTheSerialResult) {
  std::vector<TextPiece> docs;
  for (int i = 0; i < 9; ++i)
    docs.push_back({std::string(1000 + 37 * i, static_cast<char>('a' + i)),
                    i == 0   ? PieceStart::Corpus
                    : i == 2 ? PieceStart::Continued
                             : PieceStart::Document});
  const ByteTokenizer tok;
  const auto serial = tokenize_pieces(tok, docs, 1);
  EXPECT_EQ(tokenize_pieces(tok, docs, 4), serial);
  ASSERT_EQ(serial.size(), docs.size());
  EXPECT_EQ(serial[0].tokens.size(), docs[0].text.size());  // no separator before the first
  EXPECT_EQ(serial[1].tokens.front(), static_cast<uint32_t>('\n'));
  EXPECT_EQ(serial[2].tokens.size(), docs[2].text.size());  // none inside a document
  EXPECT_EQ(serial[0].scored, scored_after(0, serial[0].tokens.size()));  // nothing before the text
  EXPECT_EQ(serial[1].scored, scored_after(1, serial[1].tokens.size()));  // "\n"
  EXPECT_EQ(serial[2].scored, scored_after(0, serial[2].tokens.size()));
}

// A prompt's tokens follow the document's start, encoded apart from the text; they and the start
// are the piece's unscored ones (prepare-data --prompt-field's loss mask).
TEST(TokenizePieces, PromptsComeFirstAndAreUnscored) {
  const std::vector<TextPiece> docs = {{"4", PieceStart::Corpus, true, "2+2="},
                                       {" yes", PieceStart::Document, true, "ok?"},
                                       {"none", PieceStart::Document, true, ""}};
  const ByteTokenizer bytes;  // no document marks: "\n" before each document after the first
  const auto b = tokenize_pieces(bytes, docs, 2);
  const auto ids = [](const std::string& text) {
    return std::vector<uint32_t>(text.begin(), text.end());
  };
  EXPECT_EQ(b[0], (PieceTokens{ids("2+2=4"), scored_after(4, 5)}));
  EXPECT_EQ(b[1], (PieceTokens{ids("\nok? yes"), scored_after(4, 8)}));
  EXPECT_EQ(b[2], (PieceTokens{ids("\nnone"), scored_after(1, 5)}));

  struct Marked final : Tokenizer {  // bytes between a start (300) and an end (301), as Llama 3
    std::string name() const override { return "marked"; }
    int64_t vocab_size() const override { return 302; }
    std::vector<uint32_t> encode(std::string_view text) const override {
      return std::vector<uint32_t>(text.begin(), text.end());
    }
    std::string decode(const int32_t*, size_t) const override { return ""; }
    std::optional<uint32_t> document_start() const override { return 300; }
    std::optional<uint32_t> document_end() const override { return 301; }
  };
  const auto m = tokenize_pieces(Marked(), docs, 1);
  const auto marked = [&](const std::string& text) {
    std::vector<uint32_t> t = ids(text);
    t.insert(t.begin(), 300);
    t.push_back(301);  // the end is scored: the model learns to stop
    return t;
  };
  EXPECT_EQ(m[0], (PieceTokens{marked("2+2=4"), scored_after(5, 7)}));  // the start, the prompt
  EXPECT_EQ(m[1], (PieceTokens{marked("ok? yes"), scored_after(4, 9)}));
  EXPECT_EQ(m[2], (PieceTokens{marked("none"), scored_after(1, 6)}));  // all but the start
}

}  // namespace
