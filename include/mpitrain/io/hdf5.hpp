// A small RAII layer over the HDF5 C API, shared by the token datasets and the checkpoints.
//
//   H5Handle  — owns one HDF5 identifier (file, group, dataset, dataspace, datatype, attribute,
//               property list) and closes it with the matching H5*close on destruction.
//   H5_CHECK  — wraps every HDF5 call: a negative result throws Error with file:line, the call
//               and HDF5's own error stack (HDF5's automatic printing is switched off).
//
// Files are opened with a file-access property list argument (H5P_DEFAULT: the serial sec2
// driver), so parallel checkpoints can pass one set up with H5Pset_fapl_mpio, and reads and
// writes take a transfer property list (H5P_DEFAULT, or one with collective MPI-IO).
// This HDF5 build is not thread-safe: HDF5 is used from one thread at a time in the whole
// process. The main thread alone uses it, except for the asynchronous checkpoint writer
// (ckpt/async_saver.hpp); while that runs, every HDF5 call of either thread is made holding
// lock_hdf5() (the writer's per dataset, the token files' per read).
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>
#include <type_traits>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

// HDF5's current error stack as one line ("H5Dopen2: unable to open dataset; ...").
std::string hdf5_error_text();

// The lock that serialises HDF5 calls between threads. The HDF5 library's state is the whole
// process's, so its lock is too (held by the calling thread; closing a handle is a call).
[[nodiscard]] std::unique_lock<std::mutex> lock_hdf5();

// Switches off HDF5's printing of errors to stderr (we report them ourselves). Idempotent.
void hdf5_silence_errors();

// Throws Error when rc < 0; otherwise returns rc (so hid_t results can be used directly).
template <class T>
T h5_check(T rc, const char* call, const char* file, int line) {
  if (rc < 0) throw Error(where(file, line, std::string(call) + ": " + hdf5_error_text()));
  return rc;
}

}  // namespace mpitrain

#define H5_CHECK(call) ::mpitrain::h5_check((call), #call, __FILE__, __LINE__)

namespace mpitrain {

class H5Handle {
 public:
  H5Handle() = default;
  explicit H5Handle(hid_t id) : id_(id) {}  // takes ownership of a valid id
  ~H5Handle();
  H5Handle(H5Handle&& other) noexcept;
  H5Handle& operator=(H5Handle&& other) noexcept;
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  void close();  // closes now and checks the result (a file's close can fail: flush errors)

 private:
  hid_t id_ = H5I_INVALID_HID;
};

// The HDF5 memory type of T.
template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, uint16_t>)
    return H5T_NATIVE_UINT16;
  else if constexpr (std::is_same_v<T, uint32_t>)
    return H5T_NATIVE_UINT32;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return H5T_NATIVE_UINT64;
  else if constexpr (std::is_same_v<T, int32_t>)
    return H5T_NATIVE_INT32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return H5T_NATIVE_INT64;
  else if constexpr (std::is_same_v<T, float>)
    return H5T_NATIVE_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return H5T_NATIVE_DOUBLE;
  else
    static_assert(sizeof(T) == 0, "native_type: no HDF5 type for T");
}

// ---- files ----------------------------------------------------------------------------------
bool is_hdf5_file(const std::string& path);  // by HDF5's signature; false for other files
H5Handle open_file(const std::string& path, unsigned flags = H5F_ACC_RDONLY,
                   hid_t fapl = H5P_DEFAULT);                             // H5F_ACC_RDONLY|RDWR
H5Handle create_file(const std::string& path, hid_t fapl = H5P_DEFAULT);  // truncates
std::string file_name(hid_t obj);  // the file an object lives in (for error messages)

// ---- 1-D datasets ---------------------------------------------------------------------------
bool has_link(hid_t loc, const std::string& name);  // does loc/name exist
// What the existing loc/name is: "dataset", "group", "named datatype" (for messages and checks).
std::string object_kind(hid_t loc, const std::string& name);
H5Handle open_dataset(hid_t loc, const std::string& name);
// A contiguous 1-D dataset of `size` elements of file type `type` (e.g. H5T_STD_U16LE).
H5Handle create_dataset_1d(hid_t loc, const std::string& name, hid_t type, uint64_t size);
// A contiguous dataset of any rank (dcpl: creation properties, e.g. no_fill_creation()), and a
// write of its whole extent.
H5Handle create_dataset(hid_t loc, const std::string& name, hid_t type,
                        const std::vector<uint64_t>& dims, hid_t dcpl = H5P_DEFAULT);
void write_all(hid_t dset, hid_t mem_type, const void* data);
uint64_t dataset_size_1d(hid_t dset);  // elements; UsageError (names it) if it is not 1-D
// Elements [offset, offset+count) through a hyperslab; mem_type converts (e.g. u16 -> i32).
void read_1d(hid_t dset, hid_t mem_type, uint64_t offset, uint64_t count, void* out,
             hid_t dxpl = H5P_DEFAULT);
void write_1d(hid_t dset, hid_t mem_type, uint64_t offset, uint64_t count, const void* data,
              hid_t dxpl = H5P_DEFAULT);

std::vector<uint64_t> dataset_dims(hid_t dset);  // its extent, any rank
std::string shape_text(const std::vector<uint64_t>& dims);  // "768x64" for messages and tables

// ---- parallel I/O ---------------------------------------------------------------------------
// A file-access property list for the MPI-IO driver over comm: a file opened or created with it
// is shared by comm's ranks, and opening, creating, closing and creating objects are collective.
H5Handle mpio_file_access(MPI_Comm comm);
// A transfer property list for collective MPI-IO: every rank calls each read/write, a rank with
// nothing to move with empty selections.
H5Handle collective_transfer();
// Dataset creation properties for data that will be written in full: no fill values.
H5Handle no_fill_creation();
// Adds the block [start, start+count) (one entry per dimension) to space's selection.
void select_block(hid_t space, const std::vector<uint64_t>& start,
                  const std::vector<uint64_t>& count);

// ---- scalar attributes ----------------------------------------------------------------------
bool has_attribute(hid_t obj, const std::string& name);
void write_attribute_int(hid_t obj, const std::string& name, int64_t value);  // int64
void write_attribute_uint64(hid_t obj, const std::string& name, uint64_t value);
void write_attribute_double(hid_t obj, const std::string& name, double value);  // float64
void write_attribute_string(hid_t obj, const std::string& name, const std::string& value);
// Read any integer attribute / any fixed- or variable-length string attribute. An attribute of
// another type is bad file content: UsageError naming the file and the attribute.
int64_t read_attribute_int(hid_t obj, const std::string& name);
uint64_t read_attribute_uint64(hid_t obj, const std::string& name);  // any unsigned integer
double read_attribute_double(hid_t obj, const std::string& name);    // any float
std::string read_attribute_string(hid_t obj, const std::string& name);

}  // namespace mpitrain
