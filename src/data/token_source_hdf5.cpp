// Token files in HDF5: dataset /tokens (1-D uint16 or uint32) with optional attributes
// `vocab_size` and `tokenizer` on that dataset. A contiguous, unfiltered little-endian /tokens is
// then read out of a mapping of its raw data (map_tokens: no HDF5 call after open); any other
// layout by hyperslabs converted to int32.
#include <filesystem>
#include <optional>
#include <utility>
#include <vector>

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

// An external link met while following a path fails (H5Pset_elink_cb): no other file is opened.
herr_t refuse_external_link(const char*, const char*, const char*, const char*, unsigned*, hid_t,
                            void*) {
  return -1;
}

// UsageError unless /name is a hard link, or a soft link to an object in this file: an
// external link (or a soft link through one) would make a token file read another file.
void require_own(hid_t file, const std::string& name, const std::string& path) {
  H5L_info_t info;
  H5_CHECK(H5Lget_info(file, name.c_str(), &info, H5P_DEFAULT));
  if (info.type == H5L_TYPE_HARD) return;
  const std::string own = "; a token file holds its own tokens";
  const std::string at = "'" + path + "': /" + name;
  require(info.type == H5L_TYPE_SOFT || info.type == H5L_TYPE_EXTERNAL,
          at + " is a user-defined link" + own);
  std::vector<char> value(info.u.val_size + 1, '\0');
  H5_CHECK(H5Lget_val(file, name.c_str(), value.data(), info.u.val_size, H5P_DEFAULT));
  if (info.type == H5L_TYPE_EXTERNAL) {
    unsigned flags = 0;
    const char *target_file = nullptr, *target = nullptr;
    H5_CHECK(H5Lunpack_elink_val(value.data(), info.u.val_size, &flags, &target_file, &target));
    throw UsageError(at + " is an external link to '" + target + "' in '" + target_file + "'" +
                     own);
  }
  H5Handle lapl(H5_CHECK(H5Pcreate(H5P_LINK_ACCESS)));
  H5_CHECK(H5Pset_elink_cb(lapl.get(), refuse_external_link, nullptr));
  require(
      H5Oexists_by_name(file, name.c_str(), lapl.get()) > 0,  // < 0: through an external link
      at + " is a soft link to '" + value.data() + "', which names no object in this file" + own);
}

// UsageError unless /name (count elements of width bytes) stores every element it declares, in
// this file: compact; contiguous, allocated and inside the file; or chunked with every chunk
// written. In time bounded by the file's size: a file cannot hold more chunks than bytes.
void require_stored(hid_t dset, const std::string& name, uint64_t count, size_t width,
                    const std::string& path) {
  if (count == 0) return;
  H5Handle plist(H5_CHECK(H5Dget_create_plist(dset)));
  const std::string declares = "'" + path + "': /" + name + " declares " + std::to_string(count) +
                               (name == "tokens" ? " tokens" : " elements") + " but ";
  require(H5_CHECK(H5Pget_external_count(plist.get())) == 0,
          declares + "keeps them in external raw files; a token file holds its own tokens");
  const H5D_layout_t layout = H5_CHECK(H5Pget_layout(plist.get()));
  require(layout != H5D_VIRTUAL,
          declares + "is a virtual dataset (of other datasets); a token file holds its own tokens");
  const uint64_t file_bytes = std::filesystem::file_size(path);
  if (layout == H5D_CONTIGUOUS) {
    H5D_space_status_t status;
    H5_CHECK(H5Dget_space_status(dset, &status));
    require(status == H5D_SPACE_STATUS_ALLOCATED,
            declares + "stores none (its data was never written)");
    const haddr_t offset = H5Dget_offset(dset);
    require(offset != HADDR_UNDEF && offset <= file_bytes && count <= (file_bytes - offset) / width,
            declares + "the file ends at byte " + std::to_string(file_bytes) +
                ", before the last of them (a truncated file)");
  } else if (layout == H5D_CHUNKED) {
    hsize_t chunk = 0;
    H5_CHECK(H5Pget_chunk(plist.get(), 1, &chunk));
    const uint64_t chunks = count / chunk + (count % chunk != 0);
    require(chunks <= file_bytes, declares + "the file (" + std::to_string(file_bytes) +
                                      " bytes) cannot hold its " + std::to_string(chunks) +
                                      " chunks: most were never written");
    H5Handle space(H5_CHECK(H5Dget_space(dset)));  // all of it (1.10 takes no H5S_ALL here)
    hsize_t written = 0;
    H5_CHECK(H5Dget_num_chunks(dset, space.get(), &written));
    require(written == chunks, declares + "stores only " + std::to_string(written) + " of its " +
                                   std::to_string(chunks) +
                                   " chunks (the others were never written)");
  }
}

// Where a dataset's raw data lies in the file, when a plain mapping can read it: contiguous (no
// chunks, so no filters), allocated, little-endian.
std::optional<uint64_t> mappable_offset(hid_t dset) {
  H5Handle plist(H5_CHECK(H5Dget_create_plist(dset)));
  if (H5_CHECK(H5Pget_layout(plist.get())) != H5D_CONTIGUOUS) return std::nullopt;
  H5Handle type(H5_CHECK(H5Dget_type(dset)));
  if (H5Tget_size(type.get()) > 1 && H5_CHECK(H5Tget_order(type.get())) != H5T_ORDER_LE)
    return std::nullopt;
  const haddr_t offset = H5Dget_offset(dset);  // HADDR_UNDEF: not allocated (empty)
  if (offset == HADDR_UNDEF) return std::nullopt;
  return static_cast<uint64_t>(offset);
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
    require_own(file_.get(), "tokens", path);
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
    require_stored(dset_.get(), "tokens", size_, H5Tget_size(type.get()), path);
    if (has_attribute(dset_.get(), "vocab_size")) {
      vocab_size_ = read_attribute_int(dset_.get(), "vocab_size");
      require(vocab_size_ > 0 && vocab_size_ <= kMaxVocabSize,
              "'" + path + "': /tokens attribute vocab_size is " + std::to_string(vocab_size_) +
                  ", out of range: expected 1 to " + std::to_string(kMaxVocabSize) +
                  " (the largest vocabulary a model can have)");
    }
    if (has_attribute(dset_.get(), "tokenizer"))
      tokenizer_ = read_attribute_string(dset_.get(), "tokenizer");
    documents_unmarked_ = has_attribute(dset_.get(), kDocumentsUnmarked) &&
                          read_attribute_int(dset_.get(), kDocumentsUnmarked) != 0;
    if (has_link(file_.get(), "loss_mask")) open_loss_mask();
  }

  // Where /tokens' and /loss_mask's raw data lie in the file, when a plain mapping can read them.
  std::optional<uint64_t> raw_offset() const { return mappable_offset(dset_.get()); }
  std::optional<uint64_t> mask_raw_offset() const { return mappable_offset(mask_.get()); }
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
  bool has_loss_mask() const override { return static_cast<bool>(mask_); }
  bool documents_unmarked() const override { return documents_unmarked_; }
  void read_loss_mask(uint64_t offset, uint64_t count, uint8_t* out) const override {
    if (!has_loss_mask()) TokenSource::read_loss_mask(offset, count, out);
    const std::unique_lock<std::mutex> hdf5 = lock_hdf5();
    read_1d(mask_.get(), H5T_NATIVE_UINT8, offset, count, out);
  }

 private:
  // /loss_mask: 1-D uint8, one byte per token, stored in this file.
  void open_loss_mask() {
    const std::string layout =
        " (a loss mask is a 1-D uint8 dataset /loss_mask, one byte per token: 1 scored, 0 not)";
    require_own(file_.get(), "loss_mask", path_);
    const std::string kind = object_kind(file_.get(), "loss_mask");
    require(kind == "dataset",
            "'" + path_ + "': /loss_mask is a " + kind + ", not a dataset" + layout);
    mask_ = open_dataset(file_.get(), "loss_mask");
    H5Handle type(H5_CHECK(H5Dget_type(mask_.get())));
    require(H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 1 &&
                H5Tget_sign(type.get()) == H5T_SGN_NONE,
            "'" + path_ + "': /loss_mask holds " + describe_type(type.get()) + layout);
    const uint64_t n = dataset_size_1d(mask_.get());
    require(n == size_, "'" + path_ + "': /loss_mask has " + std::to_string(n) +
                            " elements and /tokens " + std::to_string(size_) + layout);
    require_stored(mask_.get(), "loss_mask", n, 1, path_);
  }

  std::string path_;
  H5Handle file_;
  H5Handle dset_;  // /tokens, open for the source's lifetime
  H5Handle mask_;  // /loss_mask where the file has one
  uint64_t size_ = 0;
  int64_t vocab_size_ = -1;
  std::string tokenizer_;
  bool documents_unmarked_ = false;
};

}  // namespace

std::unique_ptr<TokenSource> open_hdf5_tokens(const std::string& path) {
  auto src = std::make_unique<Hdf5TokenSource>(path);
  const std::optional<uint64_t> offset = src->raw_offset();
  if (!offset) return src;
  std::optional<uint64_t> mask_offset;
  if (src->has_loss_mask()) {
    mask_offset = src->mask_raw_offset();
    if (!mask_offset) return src;  // a mask HDF5 must read: read both through HDF5
  }
  return map_tokens(path, *offset, src->width(), src->size(), src->vocab_size(), src->tokenizer(),
                    mask_offset, src->documents_unmarked());
}

}  // namespace mpitrain
