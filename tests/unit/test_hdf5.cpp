// The RAII layer over HDF5: handles, checked calls, 1-D datasets and scalar attributes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "mpitrain/io/hdf5.hpp"

using namespace mpitrain;

namespace {

class Hdf5Test : public ::testing::Test {  // a fresh temporary directory per test
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpitrain-hdf5-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

}  // namespace

TEST_F(Hdf5Test, DatasetRoundTripWithHyperslabs) {
  std::vector<uint32_t> data(1000);
  std::iota(data.begin(), data.end(), 70000u);
  {
    H5Handle file = create_file(path("a.h5"));
    H5Handle dset = create_dataset_1d(file.get(), "x", H5T_STD_U32LE, data.size());
    write_1d(dset.get(), native_type<uint32_t>(), 0, 600, data.data());
    write_1d(dset.get(), native_type<uint32_t>(), 600, 400, data.data() + 600);
    write_1d(dset.get(), native_type<uint32_t>(), 1000, 0, nullptr);  // empty selection is fine
  }
  H5Handle file = open_file(path("a.h5"));
  EXPECT_TRUE(has_link(file.get(), "x"));
  EXPECT_FALSE(has_link(file.get(), "y"));
  H5Handle dset = open_dataset(file.get(), "x");
  EXPECT_EQ(dataset_size_1d(dset.get()), 1000u);
  std::vector<int64_t> part(5);
  read_1d(dset.get(), native_type<int64_t>(), 995, 5, part.data());  // converted to int64
  for (int i = 0; i < 5; ++i) EXPECT_EQ(part[i], 70995 + i);
  EXPECT_THROW(read_1d(dset.get(), native_type<int64_t>(), 996, 5, part.data()), Error);
  EXPECT_TRUE(is_hdf5_file(path("a.h5")));
  EXPECT_EQ(file_name(dset.get()), path("a.h5"));
}

TEST_F(Hdf5Test, ScalarAttributes) {
  {
    H5Handle file = create_file(path("a.h5"));
    write_attribute_int(file.get(), "n", 50257);
    write_attribute_int(file.get(), "n", -3);  // replaced
    write_attribute_string(file.get(), "name", "gpt2");
    write_attribute_string(file.get(), "empty", "");
    file.close();
    EXPECT_FALSE(file);
  }
  H5Handle file = open_file(path("a.h5"));
  EXPECT_TRUE(has_attribute(file.get(), "n"));
  EXPECT_FALSE(has_attribute(file.get(), "missing"));
  EXPECT_EQ(read_attribute_int(file.get(), "n"), -3);
  EXPECT_EQ(read_attribute_string(file.get(), "name"), "gpt2");
  EXPECT_EQ(read_attribute_string(file.get(), "empty"), "");
  EXPECT_THROW(read_attribute_int(file.get(), "name"), UsageError);  // a string, not an int
  EXPECT_THROW(read_attribute_string(file.get(), "n"), UsageError);  // an int, not a string
  EXPECT_THROW(read_attribute_int(file.get(), "missing"), Error);
}

TEST_F(Hdf5Test, VariableLengthStringAttribute) {  // as h5py writes str attributes
  {
    H5Handle file = create_file(path("a.h5"));
    H5Handle type(H5_CHECK(H5Tcopy(H5T_C_S1)));
    H5_CHECK(H5Tset_size(type.get(), H5T_VARIABLE));
    H5Handle space(H5_CHECK(H5Screate(H5S_SCALAR)));
    H5Handle attr(
        H5_CHECK(H5Acreate2(file.get(), "tok", type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT)));
    const char* value = "bytes";
    H5_CHECK(H5Awrite(attr.get(), type.get(), &value));
  }
  H5Handle file = open_file(path("a.h5"));
  EXPECT_EQ(read_attribute_string(file.get(), "tok"), "bytes");
}

TEST_F(Hdf5Test, CheckedCallsReportWhereAndHdf5sText) {
  H5Handle file = create_file(path("a.h5"));
  try {
    H5_CHECK(H5Dopen2(file.get(), "nope", H5P_DEFAULT));
    FAIL() << "no exception";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("test_hdf5.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("H5Dopen2"), std::string::npos) << what;
    EXPECT_EQ(what.find("no error details"), std::string::npos) << what;
  }
  try {
    open_file(path("missing.h5"));
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.h5"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(is_hdf5_file(path("missing.h5")));
}

TEST_F(Hdf5Test, HandlesMoveAndClose) {
  H5Handle a(H5_CHECK(H5Screate(H5S_SCALAR)));
  const hid_t id = a.get();
  H5Handle b(std::move(a));
  EXPECT_FALSE(a);
  EXPECT_EQ(b.get(), id);
  H5Handle c;
  c = std::move(b);
  EXPECT_TRUE(H5Iis_valid(id) > 0);
  c.close();
  EXPECT_FALSE(H5Iis_valid(id) > 0);
}
