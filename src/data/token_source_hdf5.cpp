// Token files in HDF5: dataset /tokens (1-D uint16 or uint32) with optional attributes
// `vocab_size` and `tokenizer` on that dataset. A contiguous, unfiltered little-endian /tokens is
// then read out of a mapping of its raw data (map_tokens: no HDF5 call after open); any other
// layout by hyperslabs converted to int32.
#include <optional>
#include <utility>

#include "mpitrain/io/hdf5.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/runtime/error.hpp"
#include "token_source_formats.hpp"

namespace mpitrain {

namespace {

// "uint16", "int64", "float32", ... for messages about a dataset's type.
std::string describe_type(hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const std::string bits = std::to_string(8 * H5Tget_size(type));
  if (cls == H5T_INTEGER) return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + bits;
  if (cls == H5T_FLOAT) return "float" + bits;
  if (cls == H5T_STRING) return "string";
  return "a non-numeric type (HDF5 class " + std::to_string(static_cast<int>(cls)) + ")";
}

class Hdf5TokenSource final : public TokenSource {
 public:
  explicit Hdf5TokenSource(const std::string& path) : path_(path) {
    require(is_hdf5_file(path), "'" + path + "' is not an HDF5 file (no HDF5 signature)");
    try {
      file_ = open_file(path);
    } catch (const Error& e) {
      throw UsageError(e.what());  // a damaged file is the user's input
    }
    const std::string layout =
        " (an HDF5 token file holds its tokens in a 1-D uint16 or uint32 dataset /tokens)";
    require(has_link(file_.get(), "tokens"), "'" + path + "' has no dataset /tokens" + layout);
    const std::string kind = object_kind(file_.get(), "tokens");
    require(kind == "dataset", "'" + path + "': /tokens is a " + kind + ", not a dataset" + layout);
    dset_ = open_dataset(file_.get(), "tokens");
    H5Handle type(H5_CHECK(H5Dget_type(dset_.get())));
    const bool unsigned_int = H5Tget_class(type.get()) == H5T_INTEGER &&
                              H5Tget_sign(type.get()) == H5T_SGN_NONE &&
                              (H5Tget_size(type.get()) == 2 || H5Tget_size(type.get()) == 4);
    require(unsigned_int, "'" + path + "': /tokens holds " + describe_type(type.get()) +
                              "; expected uint16 or uint32 token ids");
    size_ = dataset_size_1d(dset_.get());
    if (has_attribute(dset_.get(), "vocab_size")) {
      vocab_size_ = read_attribute_int(dset_.get(), "vocab_size");
      require(vocab_size_ > 0 && vocab_size_ <= kMaxVocabSize,
              "'" + path + "': /tokens attribute vocab_size is " + std::to_string(vocab_size_) +
                  ", out of range: expected 1 to " + std::to_string(kMaxVocabSize) +
                  " (the largest vocabulary a model can have)");
    }
    if (has_attribute(dset_.get(), "tokenizer"))
      tokenizer_ = read_attribute_string(dset_.get(), "tokenizer");
  }

  // Where /tokens' raw data lies in the file, when a plain mapping can read it: contiguous (no
  // chunks, so no filters), allocated, little-endian.
  std::optional<uint64_t> raw_offset() const {
    H5Handle plist(H5_CHECK(H5Dget_create_plist(dset_.get())));
    if (H5_CHECK(H5Pget_layout(plist.get())) != H5D_CONTIGUOUS) return std::nullopt;
    H5Handle type(H5_CHECK(H5Dget_type(dset_.get())));
    if (H5_CHECK(H5Tget_order(type.get())) != H5T_ORDER_LE) return std::nullopt;
    const haddr_t offset = H5Dget_offset(dset_.get());  // HADDR_UNDEF: not allocated (empty)
    if (offset == HADDR_UNDEF) return std::nullopt;
    return static_cast<uint64_t>(offset);
  }
  int width() const {
    H5Handle type(H5_CHECK(H5Dget_type(dset_.get())));
    return static_cast<int>(H5Tget_size(type.get()));
  }

  uint64_t size() const override { return size_; }
  void read(uint64_t offset, uint64_t count, int32_t* out) const override {
    const std::unique_lock<std::mutex> hdf5 = lock_hdf5();  // a checkpoint may be written now
    read_1d(dset_.get(), H5T_NATIVE_INT32, offset, count, out);
  }
  int64_t vocab_size() const override { return vocab_size_; }
  std::string tokenizer() const override { return tokenizer_; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  H5Handle file_;
  H5Handle dset_;  // /tokens, open for the source's lifetime
  uint64_t size_ = 0;
  int64_t vocab_size_ = -1;
  std::string tokenizer_;
};

}  // namespace

std::unique_ptr<TokenSource> open_hdf5_tokens(const std::string& path) {
  auto src = std::make_unique<Hdf5TokenSource>(path);
  if (const std::optional<uint64_t> offset = src->raw_offset())
    return map_tokens(path, *offset, src->width(), src->size(), src->vocab_size(),
                      src->tokenizer());
  return src;
}

}  // namespace mpitrain
