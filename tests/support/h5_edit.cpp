// h5-edit: the damage a test does to a real HDF5 file (checkpoints, token files), without h5py.
//
//   h5-edit flip-bit FILE OBJECT ATTRIBUTE BIT   flips bit BIT of a scalar attribute's stored value
//   h5-edit set-int FILE OBJECT ATTRIBUTE VALUE  stores VALUE's 64-bit two's complement in an
//                                                8-byte integer attribute, keeping its type (-7
//                                                in a uint64 reads as 2^64 - 7)
//   h5-edit to-group FILE PATH                   replaces the object at PATH by an empty group
//   h5-edit to-float64 FILE PATH                 replaces a dataset by a float64 one of the same
//                                                shape and values, its `checksum` attribute kept
//   h5-edit soft-link FILE PATH TARGET           makes PATH a soft link to TARGET
//   h5-edit external-link FILE PATH FILE2 PATH2  makes PATH a link to PATH2 in FILE2
//   h5-edit unwritten FILE PATH N CHUNK WRITTEN  replaces PATH by a uint16 dataset of N elements
//                                                of which little is stored: contiguous and never
//                                                written (CHUNK 0), or in chunks of CHUNK of
//                                                which only the first WRITTEN are written
//   h5-edit external-raw FILE PATH RAW N         replaces PATH by a uint16 dataset of N elements
//                                                whose raw data is the file RAW (HDF5's external
//                                                storage)
// Exit code 0 done, 2 bad usage, 1 an HDF5 failure (the message on stderr).
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mpitrain/io/hdf5.hpp"

using namespace mpitrain;

namespace {

// The scalar attribute's stored bytes, in its own type.
std::vector<unsigned char> raw_value(hid_t object, const std::string& name, H5Handle& type) {
  H5Handle attr(H5_CHECK(H5Aopen(object, name.c_str(), H5P_DEFAULT)));
  type = H5Handle(H5_CHECK(H5Aget_type(attr.get())));
  std::vector<unsigned char> bytes(H5Tget_size(type.get()));
  H5_CHECK(H5Aread(attr.get(), type.get(), bytes.data()));
  return bytes;
}

// Replaces the attribute by one of the same type holding bytes (an in-place H5Awrite fails on
// HDF5 1.10's dense attribute storage, which /manifest's many attributes use).
void store_raw(hid_t object, const std::string& name, hid_t type,
               const std::vector<unsigned char>& bytes) {
  H5_CHECK(H5Adelete(object, name.c_str()));
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR)));
  H5Handle attr(
      H5_CHECK(H5Acreate2(object, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT)));
  H5_CHECK(H5Awrite(attr.get(), type, bytes.data()));
}

void flip_bit(hid_t object, const std::string& name, int bit) {
  H5Handle type;
  std::vector<unsigned char> bytes = raw_value(object, name, type);
  if (bit < 0 || static_cast<size_t>(bit) >= 8 * bytes.size())
    throw Error("bit " + std::to_string(bit) + " is outside the attribute's " +
                std::to_string(8 * bytes.size()) + " bits");
  bytes[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));  // little-endian files
  store_raw(object, name, type.get(), bytes);
}

void set_int(hid_t object, const std::string& name, int64_t value) {
  H5Handle type;
  std::vector<unsigned char> bytes = raw_value(object, name, type);
  if (H5Tget_class(type.get()) != H5T_INTEGER || bytes.size() != 8)
    throw Error(name + " is not an 8-byte integer attribute");
  std::memcpy(bytes.data(), &value, 8);  // the bits, unconverted (little-endian files)
  store_raw(object, name, type.get(), bytes);
}

void to_group(hid_t file, const std::string& path) {
  H5_CHECK(H5Ldelete(file, path.c_str(), H5P_DEFAULT));
  H5Handle(H5_CHECK(H5Gcreate2(file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
}

void to_float64(hid_t file, const std::string& path) {
  std::vector<uint64_t> dims;
  std::vector<double> values;
  bool has_sum = false;
  uint64_t sum = 0;
  {
    H5Handle dset = open_dataset(file, path);
    dims = dataset_dims(dset.get());
    uint64_t n = 1;
    for (uint64_t d : dims) n *= d;
    values.resize(n);
    H5_CHECK(H5Dread(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
    has_sum = has_attribute(dset.get(), "checksum");
    if (has_sum) sum = read_attribute_uint64(dset.get(), "checksum");
  }
  H5_CHECK(H5Ldelete(file, path.c_str(), H5P_DEFAULT));
  H5Handle dset = create_dataset(file, path, H5T_IEEE_F64LE, dims);
  write_all(dset.get(), H5T_NATIVE_DOUBLE, values.data());
  if (has_sum) write_attribute_uint64(dset.get(), "checksum", sum);
}

void unlink_if_present(hid_t file, const std::string& path) {
  if (has_link(file, path)) H5_CHECK(H5Ldelete(file, path.c_str(), H5P_DEFAULT));
}

void to_soft_link(hid_t file, const std::string& path, const std::string& target) {
  unlink_if_present(file, path);
  H5_CHECK(H5Lcreate_soft(target.c_str(), file, path.c_str(), H5P_DEFAULT, H5P_DEFAULT));
}

void to_external_link(hid_t file, const std::string& path, const std::string& other,
                      const std::string& other_path) {
  unlink_if_present(file, path);
  H5_CHECK(H5Lcreate_external(other.c_str(), other_path.c_str(), file, path.c_str(), H5P_DEFAULT,
                              H5P_DEFAULT));
}

void to_unwritten(hid_t file, const std::string& path, uint64_t n, uint64_t chunk,
                  uint64_t written) {
  H5_CHECK(H5Ldelete(file, path.c_str(), H5P_DEFAULT));
  H5Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  if (chunk > 0) {
    const hsize_t dims = chunk;
    H5_CHECK(H5Pset_chunk(dcpl.get(), 1, &dims));
  }
  H5Handle dset = create_dataset(file, path, H5T_STD_U16LE, {n}, dcpl.get());
  const std::vector<uint16_t> ones(chunk, 1);  // the tokens of one chunk
  for (uint64_t c = 0; c < written; ++c)
    write_1d(dset.get(), H5T_NATIVE_UINT16, c * chunk, chunk, ones.data());
}

void to_external_raw(hid_t file, const std::string& path, const std::string& raw, uint64_t n) {
  H5_CHECK(H5Ldelete(file, path.c_str(), H5P_DEFAULT));
  H5Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_external(dcpl.get(), raw.c_str(), 0, 2 * n));
  create_dataset(file, path, H5T_STD_U16LE, {n}, dcpl.get());
}

int usage() {
  std::fprintf(stderr,
               "usage: h5-edit flip-bit|set-int FILE OBJECT ATTRIBUTE N\n"
               "       h5-edit to-group|to-float64 FILE PATH\n"
               "       h5-edit soft-link FILE PATH TARGET\n"
               "       h5-edit external-link FILE PATH FILE2 PATH2\n"
               "       h5-edit unwritten FILE PATH N CHUNK WRITTEN\n"
               "       h5-edit external-raw FILE PATH RAW N\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return usage();
  const std::string op = argv[1];
  try {
    H5Handle file = open_file(argv[2], H5F_ACC_RDWR);
    if ((op == "flip-bit" || op == "set-int") && argc == 6) {
      const long long n = std::strtoll(argv[5], nullptr, 10);
      H5Handle object(H5_CHECK(H5Oopen(file.get(), argv[3], H5P_DEFAULT)));
      if (op == "flip-bit")
        flip_bit(object.get(), argv[4], static_cast<int>(n));
      else
        set_int(object.get(), argv[4], n);
    } else if (op == "to-group" && argc == 4) {
      to_group(file.get(), argv[3]);
    } else if (op == "to-float64" && argc == 4) {
      to_float64(file.get(), argv[3]);
    } else if (op == "soft-link" && argc == 5) {
      to_soft_link(file.get(), argv[3], argv[4]);
    } else if (op == "external-link" && argc == 6) {
      to_external_link(file.get(), argv[3], argv[4], argv[5]);
    } else if (op == "unwritten" && argc == 7) {
      to_unwritten(file.get(), argv[3], std::strtoull(argv[4], nullptr, 10),
                   std::strtoull(argv[5], nullptr, 10), std::strtoull(argv[6], nullptr, 10));
    } else if (op == "external-raw" && argc == 6) {
      to_external_raw(file.get(), argv[3], argv[4], std::strtoull(argv[5], nullptr, 10));
    } else {
      return usage();
    }
    file.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "h5-edit: %s\n", e.what());
    return 1;
  }
  return 0;
}
