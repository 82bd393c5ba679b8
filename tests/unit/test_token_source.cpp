// Token files: write -> open -> read for HDF5, llm.c and nanoGPT, and the errors users meet.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/data/token_source.hpp"
#include "mpitrain/data/token_writer.hpp"
#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/io/hdf5.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {

class TokenSourceTest : public ::testing::Test {  // a fresh temporary directory per test
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpitrain-tokens-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    for (uint32_t i = 0; i < 1000; ++i) tokens_.push_back((i * 7919) % 50257);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Every token of src, read in pieces of various sizes.
  static std::vector<uint32_t> read_all(const TokenSource& src) {
    std::vector<uint32_t> all;
    std::vector<int32_t> buf(97);
    for (uint64_t pos = 0; pos < src.size(); pos += 97) {
      const uint64_t n = std::min<uint64_t>(97, src.size() - pos);
      src.read(pos, n, buf.data());
      all.insert(all.end(), buf.begin(), buf.begin() + n);
    }
    return all;
  }

  // The message of the UsageError that opening `file` throws ("" if none).
  static std::string open_error(const std::string& file, TokenFormat format = TokenFormat::Auto) {
    try {
      open_tokens(file, format);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
  std::vector<uint32_t> tokens_;
};

// A 1-D dataset `name` of n elements in chunks of 64, deflated (as h5repack may leave a file).
void write_deflated(hid_t file, const char* name, hid_t file_type, hid_t mem_type, hsize_t n,
                    const void* data) {
  const hsize_t chunk = 64;
  H5Handle space(H5_CHECK(H5Screate_simple(1, &n, nullptr)));
  H5Handle plist(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_chunk(plist.get(), 1, &chunk));
  H5_CHECK(H5Pset_deflate(plist.get(), 6));
  H5Handle dset(H5_CHECK(
      H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT)));
  H5_CHECK(H5Dwrite(dset.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

void write_bytes(const std::string& file, const std::string& bytes) {
  std::ofstream(file, std::ios::binary) << bytes;
}

}  // namespace

TEST_F(TokenSourceTest, ParseFormat) {
  EXPECT_EQ(parse_token_format("auto"), TokenFormat::Auto);
  EXPECT_EQ(parse_token_format("hdf5"), TokenFormat::Hdf5);
  EXPECT_EQ(parse_token_format("llmc"), TokenFormat::Llmc);
  EXPECT_EQ(parse_token_format("nanogpt"), TokenFormat::NanoGpt);
  EXPECT_THROW(parse_token_format("parquet"), UsageError);
}

TEST_F(TokenSourceTest, Hdf5Uint16RoundTrip) {
  write_tokens_hdf5(path("t.h5"), tokens_, 50257, "gpt2");
  for (auto format : {TokenFormat::Auto, TokenFormat::Hdf5}) {
    auto src = open_tokens(path("t.h5"), format);
    EXPECT_EQ(src->size(), tokens_.size());
    EXPECT_EQ(src->vocab_size(), 50257);
    EXPECT_EQ(src->tokenizer(), "gpt2");
    EXPECT_EQ(src->path(), path("t.h5"));
    EXPECT_EQ(read_all(*src), tokens_);
    int32_t x = 0;
    EXPECT_THROW(src->read(1000, 1, &x), Error);
    src->read(1000, 0, &x);  // empty range at the end is fine
  }
  H5Handle file = open_file(path("t.h5"));  // stored as uint16, attributes on /tokens
  H5Handle dset = open_dataset(file.get(), "tokens");
  H5Handle type(H5Dget_type(dset.get()));
  EXPECT_EQ(H5Tget_size(type.get()), 2u);
  EXPECT_EQ(read_attribute_int(dset.get(), "vocab_size"), 50257);
}

TEST_F(TokenSourceTest, ContiguousHdf5IsMappedChunkedIsReadThroughHdf5) {
  write_tokens_hdf5(path("flat.h5"), tokens_, 50257, "gpt2");  // prepare-data's layout
  EXPECT_TRUE(open_tokens(path("flat.h5"))->concurrent_reads());
  {  // the same tokens chunked and deflated, as h5repack or another writer may leave them
    H5Handle file = create_file(path("packed.h5"));
    write_deflated(file.get(), "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT32, tokens_.size(),
                   tokens_.data());
  }
  const auto flat = open_tokens(path("flat.h5")), packed = open_tokens(path("packed.h5"));
  EXPECT_FALSE(packed->concurrent_reads());
  EXPECT_EQ(flat->vocab_size(), 50257);
  EXPECT_EQ(flat->tokenizer(), "gpt2");
  EXPECT_EQ(read_all(*flat), tokens_);
  EXPECT_EQ(read_all(*packed), tokens_);
}

TEST_F(TokenSourceTest, Hdf5Uint32RoundTrip) {
  std::vector<uint32_t> big = {0, 65535, 65536, 100000, 128255};
  write_tokens_hdf5(path("t.h5"), big, 128256, "llama3");
  auto src = open_tokens(path("t.h5"));
  EXPECT_EQ(src->vocab_size(), 128256);
  EXPECT_EQ(read_all(*src), big);
  EXPECT_EQ(max_token(*src, 0, src->size()), 128255u);
  EXPECT_THROW(write_tokens_hdf5(path("u.h5"), big, 1000, "x"), Error);  // token >= vocab
}

TEST_F(TokenSourceTest, LlmcRoundTrip) {
  write_llmc_shard(path("shard.bin"), tokens_);
  EXPECT_EQ(std::filesystem::file_size(path("shard.bin")), 1024 + 2 * tokens_.size());
  for (auto format : {TokenFormat::Auto, TokenFormat::Llmc}) {
    auto src = open_tokens(path("shard.bin"), format);
    EXPECT_EQ(src->vocab_size(), -1);
    EXPECT_EQ(src->tokenizer(), "");
    EXPECT_EQ(read_all(*src), tokens_);
    int32_t x = 0;
    EXPECT_THROW(src->read(999, 2, &x), Error);
  }
  EXPECT_THROW(write_llmc_shard(path("bad.bin"), {70000}), Error);
}

TEST_F(TokenSourceTest, LlmcUint32Shard) {  // the Llama-3 variant, written by hand
  std::vector<int32_t> header(256, 0);
  header[0] = 20240801;
  header[1] = 7;
  header[2] = 3;
  const std::vector<uint32_t> body = {1, 128000, 70000};
  std::ofstream out(path("llama.bin"), std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 1024);
  out.write(reinterpret_cast<const char*>(body.data()), 12);
  out.close();
  auto src = open_tokens(path("llama.bin"));
  EXPECT_EQ(read_all(*src), body);
}

TEST_F(TokenSourceTest, NanoGptRoundTrip) {
  write_nanogpt_bin(path("train.bin"), tokens_);
  EXPECT_EQ(std::filesystem::file_size(path("train.bin")), 2 * tokens_.size());
  for (auto format : {TokenFormat::Auto, TokenFormat::NanoGpt}) {
    auto src = open_tokens(path("train.bin"), format);
    EXPECT_EQ(src->vocab_size(), -1);
    EXPECT_EQ(read_all(*src), tokens_);
  }
}

TEST_F(TokenSourceTest, TruncatedLlmcShardNamesTheFile) {
  write_llmc_shard(path("shard.bin"), tokens_);
  std::filesystem::resize_file(path("shard.bin"), 1024 + 2 * 500);
  const std::string msg = open_error(path("shard.bin"));
  EXPECT_NE(msg.find(path("shard.bin")), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  std::filesystem::resize_file(path("shard.bin"), 100);  // shorter than the header
  EXPECT_NE(open_error(path("shard.bin"), TokenFormat::Llmc).find("truncated"), std::string::npos);
}

TEST_F(TokenSourceTest, WrongMagicAndVersion) {
  write_bytes(path("x.dat"), std::string(2048, 'a'));
  const std::string msg = open_error(path("x.dat"));  // auto: no format matches
  EXPECT_NE(msg.find(path("x.dat")), std::string::npos) << msg;
  EXPECT_NE(msg.find("HDF5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llm.c"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nanoGPT"), std::string::npos) << msg;
  EXPECT_NE(open_error(path("x.dat"), TokenFormat::Llmc).find("magic"), std::string::npos);
  EXPECT_NE(open_error(path("x.dat"), TokenFormat::Hdf5).find("not an HDF5 file"),
            std::string::npos);

  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 7;  // uint16 magic with the uint32 version
  write_bytes(path("v.bin"), std::string(reinterpret_cast<const char*>(header.data()), 1024));
  EXPECT_NE(open_error(path("v.bin")).find("version"), std::string::npos);
}

TEST_F(TokenSourceTest, OddSizedNanoGptFile) {
  write_bytes(path("odd.bin"), "abc");
  EXPECT_NE(open_error(path("odd.bin"), TokenFormat::NanoGpt).find("odd size"), std::string::npos);
  EXPECT_NE(open_error(path("odd.bin")).find("not a token file"), std::string::npos);
}

TEST_F(TokenSourceTest, MissingFile) {
  for (auto format : {TokenFormat::Auto, TokenFormat::Hdf5, TokenFormat::Llmc}) {
    const std::string msg = open_error(path("nope.h5"), format);
    EXPECT_NE(msg.find(path("nope.h5")), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  }
  EXPECT_NE(open_error(dir_.string()).find("not a regular file"), std::string::npos);
}

TEST_F(TokenSourceTest, Hdf5WithoutTokensOrWithWrongType) {
  { H5Handle file = create_file(path("empty.h5")); }
  const std::string msg = open_error(path("empty.h5"));
  EXPECT_NE(msg.find(path("empty.h5")), std::string::npos) << msg;
  EXPECT_NE(msg.find("/tokens"), std::string::npos) << msg;
  {
    H5Handle file = create_file(path("i64.h5"));
    H5Handle dset = create_dataset_1d(file.get(), "tokens", H5T_STD_I64LE, 4);
  }
  const std::string type_msg = open_error(path("i64.h5"));
  EXPECT_NE(type_msg.find("int64"), std::string::npos) << type_msg;
  EXPECT_NE(type_msg.find("uint16 or uint32"), std::string::npos) << type_msg;
}

TEST_F(TokenSourceTest, Hdf5TokensGroupAndVocabOutOfRangeAreNamed) {
  {
    H5Handle file = create_file(path("group.h5"));
    H5Handle(H5_CHECK(H5Gcreate2(file.get(), "tokens", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  }
  const std::string group_msg = open_error(path("group.h5"));  // a UsageError, not HDF5's stack
  EXPECT_NE(group_msg.find(path("group.h5") + "': /tokens is a group, not a dataset"),
            std::string::npos)
      << group_msg;
  for (const int64_t vocab : {int64_t{1} << 40, int64_t{0}, int64_t{-3}}) {
    write_tokens_hdf5(path("vocab.h5"), tokens_, 70000, "bytes");
    {
      H5Handle file = open_file(path("vocab.h5"), H5F_ACC_RDWR);
      H5Handle dset = open_dataset(file.get(), "tokens");
      write_attribute_int(dset.get(), "vocab_size", vocab);
    }
    const std::string msg = open_error(path("vocab.h5"));
    EXPECT_NE(msg.find("vocab_size is " + std::to_string(vocab) +
                       ", out of range: expected 1 to 2147483520"),
              std::string::npos)
        << msg;
  }
}

// prepare-data stopped between its two renames: the marker lists the pair; other files are fine.
TEST_F(TokenSourceTest, FileOfAHalfReplacedPairIsRefused) {
  write_tokens_hdf5(path("train.h5"), tokens_, 70000, "bytes");
  write_tokens_hdf5(path("other.h5"), tokens_, 70000, "bytes");
  std::ofstream(path(kPairReplacingMarker)) << "train.h5\nval.h5\n";
  const std::string msg = open_error(path("train.h5"));
  EXPECT_NE(msg.find("prepare-data was stopped while it replaced them"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path(kPairReplacingMarker)), std::string::npos) << msg;
  EXPECT_EQ(open_error(path("other.h5")), "");
}

TEST_F(TokenSourceTest, Hdf5WithoutAttributes) {
  {
    H5Handle file = create_file(path("plain.h5"));
    H5Handle dset = create_dataset_1d(file.get(), "tokens", H5T_STD_U16LE, 3);
    const std::vector<uint16_t> v = {5, 6, 7};
    write_1d(dset.get(), native_type<uint16_t>(), 0, 3, v.data());
  }
  auto src = open_tokens(path("plain.h5"));
  EXPECT_EQ(src->vocab_size(), -1);
  EXPECT_EQ(src->tokenizer(), "");
  EXPECT_EQ(read_all(*src), (std::vector<uint32_t>{5, 6, 7}));
}

TEST_F(TokenSourceTest, MaxToken) {
  write_nanogpt_bin(path("a.bin"), tokens_);
  auto src = open_tokens(path("a.bin"));
  uint32_t expect_all = 0, expect_part = 0;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    expect_all = std::max(expect_all, tokens_[i]);
    if (i >= 10 && i < 20) expect_part = std::max(expect_part, tokens_[i]);
  }
  EXPECT_EQ(max_token(*src, 0, src->size()), expect_all);
  EXPECT_EQ(max_token(*src, 10, 20), expect_part);
  EXPECT_EQ(max_token(*src, 5, 5), 0u);
  EXPECT_THROW(max_token(*src, 0, src->size() + 1), Error);
}

// Every mask byte of src, read in pieces of various sizes.
std::vector<uint8_t> read_mask(const TokenSource& src) {
  std::vector<uint8_t> all(src.size());
  for (uint64_t pos = 0; pos < src.size(); pos += 97)
    src.read_loss_mask(pos, std::min<uint64_t>(97, src.size() - pos), all.data() + pos);
  return all;
}

// /loss_mask as prepare-data writes it (mapped with the tokens) and chunked (read through HDF5).
TEST_F(TokenSourceTest, Hdf5LossMaskMappedOrThroughHdf5) {
  std::vector<uint8_t> mask(tokens_.size());
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = i % 5 < 2 ? 0 : 1;
  write_tokens_hdf5(path("flat.h5"), tokens_, 50257, "gpt2", &mask);
  {  // the same with /loss_mask chunked and deflated: tokens and mask read through HDF5
    write_tokens_hdf5(path("packed.h5"), tokens_, 50257, "gpt2");
    H5Handle file = open_file(path("packed.h5"), H5F_ACC_RDWR);
    write_deflated(file.get(), "loss_mask", H5T_STD_U8LE, H5T_NATIVE_UINT8, mask.size(),
                   mask.data());
  }
  const auto flat = open_tokens(path("flat.h5")), packed = open_tokens(path("packed.h5"));
  EXPECT_TRUE(flat->concurrent_reads());
  EXPECT_FALSE(packed->concurrent_reads());
  for (const auto* src : {flat.get(), packed.get()}) {
    EXPECT_TRUE(src->has_loss_mask());
    EXPECT_EQ(read_all(*src), tokens_);
    EXPECT_EQ(read_mask(*src), mask);
    uint8_t x = 0;
    EXPECT_THROW(src->read_loss_mask(1000, 1, &x), Error);
    EXPECT_EQ(max_loss_mask(*src, 0, src->size()), 1);
    EXPECT_EQ(max_loss_mask(*src, 5, 7), 0);  // positions 5 and 6: i % 5 < 2
  }
  write_tokens_hdf5(path("none.h5"), tokens_, 50257, "gpt2");
  const auto none = open_tokens(path("none.h5"));
  EXPECT_FALSE(none->has_loss_mask());
  uint8_t x = 0;
  EXPECT_THROW(none->read_loss_mask(0, 1, &x), Error);
  EXPECT_THROW(TokenFileWriter(path("m.bin"), TokenFileKind::NanoGpt, 1, 100, "", true), Error);
}

// Conversations the tokenizer's boundary does not mark (prepare-data --messages-field): the
// attribute the writer sets is read back, mapped or through HDF5; no attribute, or 0, is marked.
TEST_F(TokenSourceTest, DocumentsUnmarkedIsRecorded) {
  {
    TokenFileWriter w(path("chat.h5"), TokenFileKind::Hdf5, tokens_.size(), 50257, "gpt2");
    w.append(tokens_.data(), tokens_.size());
    w.mark_documents_unmarked();
    w.finish();
  }
  write_tokens_hdf5(path("plain.h5"), tokens_, 50257, "gpt2");
  {  // the tokens chunked and deflated, attribute 1, read through HDF5; and one of 0
    H5Handle file = create_file(path("packed.h5"));
    write_deflated(file.get(), "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT32, tokens_.size(),
                   tokens_.data());
    H5Handle tokens = open_dataset(file.get(), "tokens");
    write_attribute_int(tokens.get(), kDocumentsUnmarked, 1);
    write_tokens_hdf5(path("zero.h5"), tokens_, 50257, "gpt2");
    H5Handle zero_file = open_file(path("zero.h5"), H5F_ACC_RDWR);
    H5Handle zero = open_dataset(zero_file.get(), "tokens");
    write_attribute_int(zero.get(), kDocumentsUnmarked, 0);
  }
  const auto chat = open_tokens(path("chat.h5"));
  EXPECT_TRUE(chat->concurrent_reads());  // mapped
  EXPECT_TRUE(chat->documents_unmarked());
  const auto packed = open_tokens(path("packed.h5"));
  EXPECT_FALSE(packed->concurrent_reads());
  EXPECT_TRUE(packed->documents_unmarked());
  EXPECT_FALSE(open_tokens(path("plain.h5"))->documents_unmarked());
  EXPECT_FALSE(open_tokens(path("zero.h5"))->documents_unmarked());
  TokenFileWriter bin(path("t.bin"), TokenFileKind::NanoGpt, 1, 100, "");
  EXPECT_THROW(bin.mark_documents_unmarked(), Error);
}

// A /loss_mask of the wrong type, length or kind, or in another file: named, before any read.
TEST_F(TokenSourceTest, Hdf5LossMaskRefusals) {
  const auto with_mask = [&](const std::string& name, hid_t type, hsize_t n) {
    write_tokens_hdf5(path(name), tokens_, 50257, "gpt2");
    H5Handle file = open_file(path(name), H5F_ACC_RDWR);
    H5Handle dset = create_dataset_1d(file.get(), "loss_mask", type, n);
    const std::vector<uint8_t> ones(n, 1);
    write_1d(dset.get(), H5T_NATIVE_UINT8, 0, n, ones.data());
  };
  with_mask("u16.h5", H5T_STD_U16LE, tokens_.size());
  with_mask("short.h5", H5T_STD_U8LE, tokens_.size() - 1);
  with_mask("other.h5", H5T_STD_U8LE, tokens_.size());
  write_tokens_hdf5(path("group.h5"), tokens_, 50257, "gpt2");
  write_tokens_hdf5(path("external.h5"), tokens_, 50257, "gpt2");
  {
    H5Handle file = open_file(path("group.h5"), H5F_ACC_RDWR);
    H5Handle(H5_CHECK(H5Gcreate2(file.get(), "loss_mask", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    H5Handle ext = open_file(path("external.h5"), H5F_ACC_RDWR);
    ASSERT_GE(H5Lcreate_external(path("other.h5").c_str(), "loss_mask", ext.get(), "loss_mask",
                                 H5P_DEFAULT, H5P_DEFAULT),
              0);
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"u16.h5", "/loss_mask holds uint16 (a loss mask is a 1-D uint8 dataset"},
      {"short.h5", "/loss_mask has 999 elements and /tokens 1000"},
      {"group.h5", "/loss_mask is a group, not a dataset"},
      {"external.h5", "/loss_mask is an external link to 'loss_mask' in '" + path("other.h5")},
  };
  for (const auto& [name, expected] : cases) {
    const std::string msg = open_error(path(name));
    EXPECT_NE(msg.find(path(name) + "': " + expected), std::string::npos) << name << ": " << msg;
  }
  EXPECT_EQ(open_error(path("other.h5")), "");
}

// A Megatron-LM indexed dataset as its preprocessing writes one (indexed_dataset.py's format):
// PREFIX.bin the tokens as `T` (uint16 or int32), PREFIX.idx the header, then each sequence's
// length and byte pointer, then the document indices (here one sequence a document).
template <typename T>
void write_megatron(const std::string& prefix, const std::vector<uint32_t>& tokens,
                    const std::vector<size_t>& lengths) {
  std::ofstream bin(prefix + ".bin", std::ios::binary), idx(prefix + ".idx", std::ios::binary);
  for (uint32_t t : tokens) {
    const T v = static_cast<T>(t);
    bin.write(reinterpret_cast<const char*>(&v), sizeof v);
  }
  const auto put = [&](auto v) { idx.write(reinterpret_cast<const char*>(&v), sizeof v); };
  idx.write("MMIDIDX\0\0", 9);
  put(uint64_t{1});
  put(uint8_t{sizeof(T) == 2 ? 8 : 4});
  put(uint64_t{lengths.size()});
  put(uint64_t{lengths.size() + 1});
  for (size_t n : lengths) put(static_cast<int32_t>(n));
  int64_t pointer = 0;
  for (size_t n : lengths) {
    put(pointer);
    pointer += static_cast<int64_t>(n * sizeof(T));
  }
  for (size_t d = 0; d <= lengths.size(); ++d) put(static_cast<int64_t>(d));
}

TEST_F(TokenSourceTest, MegatronByBinOrPrefix) {
  const std::vector<size_t> documents = {300, 1, 699};  // 1000 tokens
  write_megatron<uint16_t>(path("web_text_document"), tokens_, documents);
  std::vector<uint32_t> big = tokens_;
  big[5] = 128255;
  write_megatron<int32_t>(path("llama3"), big, documents);
  for (const auto& [name, expected] : {std::pair{std::string("web_text_document"), tokens_},
                                       std::pair{std::string("llama3"), big}})
    for (const std::string& named : {path(name + ".bin"), path(name)})
      for (const auto format : {TokenFormat::Auto, TokenFormat::Megatron}) {
        const auto src = open_tokens(named, format);
        EXPECT_EQ(read_all(*src), expected) << named;
        EXPECT_EQ(src->path(), path(name + ".bin"));
        EXPECT_EQ(src->vocab_size(), -1);
        EXPECT_TRUE(src->concurrent_reads());
        EXPECT_FALSE(src->has_loss_mask());
      }
  write_nanogpt_bin(path("plain.bin"), tokens_);  // a .bin with no .idx beside it: nanoGPT
  EXPECT_EQ(read_all(*open_tokens(path("plain.bin"))), tokens_);
  // beside another kind of index (fairseq's "TNTIDX"): refused, unless the format is named
  std::ofstream(path("plain.idx"), std::ios::binary) << std::string("TNTIDX\0\0", 8);
  const std::string msg = open_error(path("plain.bin"));
  EXPECT_NE(msg.find("lies beside an index '" + path("plain.idx") + "' that is not Megatron's"),
            std::string::npos)
      << msg;
  EXPECT_EQ(read_all(*open_tokens(path("plain.bin"), TokenFormat::NanoGpt)), tokens_);
}

// Each way a Megatron pair can be wrong: named, before any read.
TEST_F(TokenSourceTest, MegatronRefusals) {
  const std::vector<size_t> documents = {400, 600};
  const auto damaged = [&](const std::string& name, size_t at, const std::string& bytes) {
    write_megatron<uint16_t>(path(name), tokens_, documents);
    std::fstream idx(path(name + ".idx"), std::ios::binary | std::ios::in | std::ios::out);
    idx.seekp(static_cast<std::streamoff>(at));
    idx.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  damaged("version", 9, std::string("\2", 1));
  damaged("int64", 17, std::string("\5", 1));
  damaged("pointer", 34 + 8 + 8, std::string("\2", 1));  // the last pointer 800 -> 770
  write_megatron<uint16_t>(path("short"), tokens_, documents);
  std::filesystem::resize_file(path("short.bin"), 1998);
  write_megatron<uint16_t>(path("modes"), tokens_, documents);
  std::ofstream(path("modes.idx"), std::ios::binary | std::ios::app) << std::string(2, '\1');
  write_megatron<uint16_t>(path("cut"), tokens_, documents);
  std::filesystem::resize_file(path("cut.idx"), 60);
  write_megatron<uint16_t>(path("alone"), tokens_, documents);
  std::filesystem::remove(path("alone.idx"));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"version.bin", "index version 2; expected 1"},
      {"int64.bin", "dtype code 5; token ids are uint16 (8) or int32 (4)"},
      {"pointer", "its sequences lie at bytes 0 to 1970 of '" + path("pointer.bin") +
                      "', which has 2000: the two files do not match"},
      {"short", "which has 1998: the two files do not match"},
      {"modes", "a multimodal index (a mode per sequence)"},
      {"cut.bin", "60 bytes, where its 2 sequences and 3 document indices take 82"},
      {"version.idx", "is a Megatron index; name its data: '" + path("version.bin") + "'"},
  };
  for (const auto& [name, expected] : cases) {
    const std::string msg = open_error(path(name));
    EXPECT_NE(msg.find(expected), std::string::npos) << name << ": " << msg;
  }
  const std::string alone = open_error(path("alone.bin"), TokenFormat::Megatron);
  EXPECT_NE(alone.find("and " + path("alone.idx") + " is missing"), std::string::npos) << alone;
}

TEST(ByteTokenizer, EncodeDecode) {
  const ByteTokenizer tok;
  const std::string text("h\xc3\xa9llo\n\0x", 9);  // UTF-8 and a NUL byte
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), 9u);
  EXPECT_EQ(ids[1], 0xc3u);
  EXPECT_EQ(ids[7], 0u);
  const std::vector<int32_t> back(ids.begin(), ids.end());
  EXPECT_EQ(tok.decode(back.data(), back.size()), text);
  const std::vector<int32_t> odd = {104, 256, 105, -1};
  EXPECT_EQ(tok.decode(odd.data(), odd.size()), "h<|256|>i<|-1|>");
}
