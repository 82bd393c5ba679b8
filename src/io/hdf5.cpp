#include "mpitrain/io/hdf5.hpp"

#include <utility>
#include <vector>

#include "mpitrain/io/file_kind.hpp"

namespace mpitrain {

namespace {

// One frame of the error stack: "H5Dopen2: unable to open dataset".
herr_t append_frame(unsigned /*n*/, const H5E_error2_t* err, void* client) {
  auto* text = static_cast<std::string*>(client);
  if (!text->empty()) *text += "; ";
  *text += std::string(err->func_name ? err->func_name : "?") + ": " +
           (err->desc && *err->desc ? err->desc : "(no description)");
  return 0;
}

// "file.h5:/tokens" — where an object lives, for messages about file content.
std::string object_name(hid_t obj) {
  ssize_t len = H5Iget_name(obj, nullptr, 0);
  std::string name = "?";
  if (len > 0) {
    std::vector<char> buf(static_cast<size_t>(len) + 1);
    H5Iget_name(obj, buf.data(), buf.size());
    name.assign(buf.data(), static_cast<size_t>(len));
  }
  return file_name(obj) + ":" + name;
}

// An attribute's element count must be one (we read into a single value).
void require_scalar(hid_t attr, const std::string& what) {
  H5Handle space(H5_CHECK(H5Aget_space(attr)));
  require(H5_CHECK(H5Sget_simple_extent_npoints(space.get())) == 1, what + " is not a scalar");
}

// A file-space selection of [offset, offset+count) and the matching memory space.
std::pair<H5Handle, H5Handle> select_1d(hid_t dset, uint64_t offset, uint64_t count) {
  H5Handle file_space(H5_CHECK(H5Dget_space(dset)));
  const auto size = static_cast<uint64_t>(H5_CHECK(H5Sget_simple_extent_npoints(file_space.get())));
  if (offset > size || count > size - offset)
    MPITRAIN_THROW(object_name(dset) + ": elements [" + std::to_string(offset) + ", " +
                   std::to_string(offset + count) + ") are outside the dataset of " +
                   std::to_string(size));
  const hsize_t dims = count;
  H5Handle mem_space(H5_CHECK(H5Screate_simple(1, &dims, nullptr)));
  if (count == 0) {  // still a valid (empty) call, so collective transfers stay matched
    H5_CHECK(H5Sselect_none(file_space.get()));
    H5_CHECK(H5Sselect_none(mem_space.get()));
  } else {
    const hsize_t start = offset;
    H5_CHECK(
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &dims, nullptr));
  }
  return {std::move(file_space), std::move(mem_space)};
}

}  // namespace

std::unique_lock<std::mutex> lock_hdf5() {
  static std::mutex hdf5;
  return std::unique_lock<std::mutex>(hdf5);
}

std::string hdf5_error_text() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, append_frame, &text);
  return text.empty() ? "HDF5 call failed (no error details)" : text;
}

void hdf5_silence_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// ---- H5Handle -------------------------------------------------------------------------------

namespace {

herr_t close_id(hid_t id) {
  switch (H5Iget_type(id)) {
    case H5I_FILE:
      return H5Fclose(id);
    case H5I_GROUP:
      return H5Gclose(id);
    case H5I_DATASET:
      return H5Dclose(id);
    case H5I_DATASPACE:
      return H5Sclose(id);
    case H5I_DATATYPE:
      return H5Tclose(id);
    case H5I_ATTR:
      return H5Aclose(id);
    case H5I_GENPROP_LST:
      return H5Pclose(id);
    default:
      return H5Idec_ref(id) < 0 ? -1 : 0;
  }
}

}  // namespace

H5Handle::~H5Handle() {
  if (id_ >= 0) close_id(id_);  // errors cannot be reported here; call close() to see them
}

H5Handle::H5Handle(H5Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)) {}

H5Handle& H5Handle::operator=(H5Handle&& other) noexcept {
  if (this != &other) {
    if (id_ >= 0) close_id(id_);
    id_ = std::exchange(other.id_, H5I_INVALID_HID);
  }
  return *this;
}

void H5Handle::close() {
  if (id_ < 0) return;
  H5_CHECK(close_id(std::exchange(id_, H5I_INVALID_HID)));
}

// ---- files ----------------------------------------------------------------------------------

bool is_hdf5_file(const std::string& path) {
  hdf5_silence_errors();
  return not_regular_file_reason(path).empty() && H5Fis_hdf5(path.c_str()) > 0;
}

H5Handle open_file(const std::string& path, unsigned flags, hid_t fapl) {
  hdf5_silence_errors();
  // HDF5 would open a FIFO and block until a writer comes.
  if (const std::string why = not_regular_file_reason(path); !why.empty())
    throw Error("cannot open HDF5 file '" + path + "': it " + why);
  hid_t id = H5Fopen(path.c_str(), flags, fapl);
  if (id < 0) MPITRAIN_THROW("cannot open HDF5 file '" + path + "': " + hdf5_error_text());
  return H5Handle(id);
}

H5Handle create_file(const std::string& path, hid_t fapl) {
  hdf5_silence_errors();
  hid_t id = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (id < 0) MPITRAIN_THROW("cannot create HDF5 file '" + path + "': " + hdf5_error_text());
  return H5Handle(id);
}

std::string file_name(hid_t obj) {
  ssize_t len = H5Fget_name(obj, nullptr, 0);
  if (len <= 0) return "?";
  std::vector<char> buf(static_cast<size_t>(len) + 1);
  H5Fget_name(obj, buf.data(), buf.size());
  return std::string(buf.data(), static_cast<size_t>(len));
}

// ---- 1-D datasets ---------------------------------------------------------------------------

bool has_link(hid_t loc, const std::string& name) {
  return H5_CHECK(H5Lexists(loc, name.c_str(), H5P_DEFAULT)) > 0;
}

std::string object_kind(hid_t loc, const std::string& name) {
  H5O_info_t info;
  H5_CHECK(H5Oget_info_by_name2(loc, name.c_str(), &info, H5O_INFO_BASIC, H5P_DEFAULT));
  switch (info.type) {
    case H5O_TYPE_GROUP:
      return "group";
    case H5O_TYPE_DATASET:
      return "dataset";
    case H5O_TYPE_NAMED_DATATYPE:
      return "named datatype";
    default:
      return "object of unknown type";
  }
}

H5Handle open_dataset(hid_t loc, const std::string& name) {
  return H5Handle(H5_CHECK(H5Dopen2(loc, name.c_str(), H5P_DEFAULT)));
}

H5Handle create_dataset(hid_t loc, const std::string& name, hid_t type,
                        const std::vector<uint64_t>& dims, hid_t dcpl) {
  const std::vector<hsize_t> extent(dims.begin(), dims.end());
  H5Handle space(H5_CHECK(H5Screate_simple(static_cast<int>(extent.size()), extent.data(), nullptr)));
  return H5Handle(H5_CHECK(
      H5Dcreate2(loc, name.c_str(), type, space.get(), H5P_DEFAULT, dcpl, H5P_DEFAULT)));
}

H5Handle create_dataset_1d(hid_t loc, const std::string& name, hid_t type, uint64_t size) {
  return create_dataset(loc, name, type, {size});
}

void write_all(hid_t dset, hid_t mem_type, const void* data) {
  H5_CHECK(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
}

uint64_t dataset_size_1d(hid_t dset) {
  H5Handle space(H5_CHECK(H5Dget_space(dset)));
  const int rank = H5_CHECK(H5Sget_simple_extent_ndims(space.get()));
  require(rank == 1, object_name(dset) + " has " + std::to_string(rank) +
                         " dimensions, expected a 1-D dataset");
  hsize_t dims = 0;
  H5_CHECK(H5Sget_simple_extent_dims(space.get(), &dims, nullptr));
  return dims;
}

void read_1d(hid_t dset, hid_t mem_type, uint64_t offset, uint64_t count, void* out, hid_t dxpl) {
  auto [file_space, mem_space] = select_1d(dset, offset, count);
  H5_CHECK(H5Dread(dset, mem_type, mem_space.get(), file_space.get(), dxpl, out));
}

void write_1d(hid_t dset, hid_t mem_type, uint64_t offset, uint64_t count, const void* data,
              hid_t dxpl) {
  auto [file_space, mem_space] = select_1d(dset, offset, count);
  H5_CHECK(H5Dwrite(dset, mem_type, mem_space.get(), file_space.get(), dxpl, data));
}

std::vector<uint64_t> dataset_dims(hid_t dset) {
  H5Handle space(H5_CHECK(H5Dget_space(dset)));
  std::vector<hsize_t> dims(H5_CHECK(H5Sget_simple_extent_ndims(space.get())));
  H5_CHECK(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr));
  return {dims.begin(), dims.end()};
}

std::string shape_text(const std::vector<uint64_t>& dims) {
  std::string text;
  for (uint64_t d : dims) {
    if (!text.empty()) text += 'x';
    text += std::to_string(d);
  }
  return text;
}

// ---- parallel I/O ---------------------------------------------------------------------------

H5Handle mpio_file_access(MPI_Comm comm) {
  H5Handle fapl(H5_CHECK(H5Pcreate(H5P_FILE_ACCESS)));
  H5_CHECK(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL));
  return fapl;
}

H5Handle collective_transfer() {
  H5Handle dxpl(H5_CHECK(H5Pcreate(H5P_DATASET_XFER)));
  H5_CHECK(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE));
  return dxpl;
}

H5Handle no_fill_creation() {
  H5Handle dcpl(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE)));
  H5_CHECK(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER));
  return dcpl;
}

void select_block(hid_t space, const std::vector<uint64_t>& start,
                  const std::vector<uint64_t>& count) {
  const std::vector<hsize_t> s(start.begin(), start.end()), c(count.begin(), count.end());
  H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_OR, s.data(), nullptr, c.data(), nullptr));
}

// ---- scalar attributes ----------------------------------------------------------------------

bool has_attribute(hid_t obj, const std::string& name) {
  return H5_CHECK(H5Aexists(obj, name.c_str())) > 0;
}

namespace {

// A new scalar attribute of `type` (an existing one of that name is replaced).
H5Handle create_scalar_attribute(hid_t obj, const std::string& name, hid_t type) {
  if (has_attribute(obj, name)) H5_CHECK(H5Adelete(obj, name.c_str()));
  H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR)));
  return H5Handle(
      H5_CHECK(H5Acreate2(obj, name.c_str(), type, space.get(), H5P_DEFAULT, H5P_DEFAULT)));
}

}  // namespace

void write_attribute_int(hid_t obj, const std::string& name, int64_t value) {
  H5Handle attr = create_scalar_attribute(obj, name, H5T_STD_I64LE);
  H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value));
}

void write_attribute_uint64(hid_t obj, const std::string& name, uint64_t value) {
  H5Handle attr = create_scalar_attribute(obj, name, H5T_STD_U64LE);
  H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_UINT64, &value));
}

void write_attribute_double(hid_t obj, const std::string& name, double value) {
  H5Handle attr = create_scalar_attribute(obj, name, H5T_IEEE_F64LE);
  H5_CHECK(H5Awrite(attr.get(), H5T_NATIVE_DOUBLE, &value));
}

void write_attribute_string(hid_t obj, const std::string& name, const std::string& value) {
  H5Handle type(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_size(type.get(), value.size() + 1));  // fixed length, NUL-terminated
  H5_CHECK(H5Tset_strpad(type.get(), H5T_STR_NULLTERM));
  H5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  H5Handle attr = create_scalar_attribute(obj, name, type.get());
  H5_CHECK(H5Awrite(attr.get(), type.get(), value.c_str()));
}

int64_t read_attribute_int(hid_t obj, const std::string& name) {
  const std::string what = object_name(obj) + ": attribute '" + name + "'";
  H5Handle attr(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
  H5Handle type(H5_CHECK(H5Aget_type(attr.get())));
  require(H5_CHECK(H5Tget_class(type.get())) == H5T_INTEGER, what + " is not an integer");
  require_scalar(attr.get(), what);
  int64_t value = 0;
  H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_INT64, &value));
  return value;
}

uint64_t read_attribute_uint64(hid_t obj, const std::string& name) {
  const std::string what = object_name(obj) + ": attribute '" + name + "'";
  H5Handle attr(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
  H5Handle type(H5_CHECK(H5Aget_type(attr.get())));
  require(H5_CHECK(H5Tget_class(type.get())) == H5T_INTEGER &&
              H5_CHECK(H5Tget_sign(type.get())) == H5T_SGN_NONE,
          what + " is not an unsigned integer");
  require_scalar(attr.get(), what);
  uint64_t value = 0;
  H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_UINT64, &value));
  return value;
}

double read_attribute_double(hid_t obj, const std::string& name) {
  const std::string what = object_name(obj) + ": attribute '" + name + "'";
  H5Handle attr(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
  H5Handle type(H5_CHECK(H5Aget_type(attr.get())));
  require(H5_CHECK(H5Tget_class(type.get())) == H5T_FLOAT,
          what + " is not a floating-point number");
  require_scalar(attr.get(), what);
  double value = 0;
  H5_CHECK(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value));
  return value;
}

std::string read_attribute_string(hid_t obj, const std::string& name) {
  const std::string what = object_name(obj) + ": attribute '" + name + "'";
  H5Handle attr(H5_CHECK(H5Aopen(obj, name.c_str(), H5P_DEFAULT)));
  H5Handle type(H5_CHECK(H5Aget_type(attr.get())));
  require(H5_CHECK(H5Tget_class(type.get())) == H5T_STRING, what + " is not a string");
  require_scalar(attr.get(), what);
  H5Handle mem_type(H5_CHECK(H5Tcopy(H5T_C_S1)));
  H5_CHECK(H5Tset_cset(mem_type.get(), H5_CHECK(H5Tget_cset(type.get()))));  // ASCII or UTF-8
  if (H5_CHECK(H5Tis_variable_str(type.get())) > 0) {
    H5_CHECK(H5Tset_size(mem_type.get(), H5T_VARIABLE));
    char* text = nullptr;
    H5_CHECK(H5Aread(attr.get(), mem_type.get(), &text));
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  const size_t size = H5Tget_size(type.get());
  H5_CHECK(H5Tset_size(mem_type.get(), size));
  std::vector<char> buf(size + 1, '\0');
  H5_CHECK(H5Aread(attr.get(), mem_type.get(), buf.data()));
  return std::string(buf.data());  // up to the first NUL
}

}  // namespace mpitrain
