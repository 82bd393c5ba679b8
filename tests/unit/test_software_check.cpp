// Start-up software agreement: this rank's fields and the table of differences.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpitrain/runtime/build_id.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/fault.hpp"
#include "mpitrain/train/software_check.hpp"

using namespace mpitrain;

namespace {

std::vector<SoftwareField> fields(const std::string& build, const std::string& mpi) {
  return {{"build_id", build}, {"mpi", mpi}, {"config", "00ff"}};
}

}  // namespace

TEST(SoftwareCheck, LocalFieldsInOrder) {
  const std::vector<SoftwareField> f = local_software("lr = 0.001\n", FaultPlan(), 0);
  const char* names[] = {"build_id", "mpi", "hdf5", "openblas", "config"};
  ASSERT_EQ(f.size(), std::size(names));
  for (size_t i = 0; i < f.size(); ++i) {
    EXPECT_EQ(f[i].name, names[i]);
    EXPECT_FALSE(f[i].value.empty()) << names[i];
    EXPECT_EQ(f[i].value.find('\n'), std::string::npos) << names[i];
  }
  EXPECT_EQ(f[0].value, build_id());
  EXPECT_EQ(f[4].value.size(), 16u);  // 64-bit hash in hex
  EXPECT_NE(local_software("lr = 0.002\n", FaultPlan(), 0)[4].value, f[4].value);
}

TEST(SoftwareCheck, VersionFaultChangesItsRanksBuildIdOnly) {
  if (!FaultPlan::kCompiledIn) GTEST_SKIP() << "fault injection is compiled out";
  const FaultPlan plan = FaultPlan::parse("version:rank=1");
  const std::vector<SoftwareField> mine = local_software("", plan, 1);
  const std::vector<SoftwareField> other = local_software("", plan, 0);
  EXPECT_NE(mine[0].value, other[0].value);
  for (size_t i = 1; i < mine.size(); ++i) EXPECT_EQ(mine[i].value, other[i].value);
}

TEST(SoftwareCheck, AgreementIsNoTable) {
  EXPECT_EQ(software_differences({fields("1+a", "MPI 4"), fields("1+a", "MPI 4")}, {"n0", "n1"}),
            "");
}

TEST(SoftwareCheck, TableOfTheFieldsThatDiffer) {
  const std::string table = software_differences({fields("1+a", "MPI 4"), fields("1+b", "MPI 4"),
                                                  fields("1+a", "MPI 4"), fields("1+b", "MPI 5")},
                                                 {"n0", "n0", "n1", "n1"});
  const std::string expected =
      "the ranks do not run the same software and configuration (mixed installations across "
      "nodes cause silent trouble):\n"
      "  field     value  ranks  hosts\n"
      "  build_id  1+a    0,2    n0,n1\n"
      "            1+b    1,3    n0,n1\n"
      "  mpi       MPI 4  0-2    n0,n1\n"
      "            MPI 5  3      n1";
  EXPECT_EQ(table, expected);
}
