// GPU selection and the start-up device table, without a GPU: the choice of device for each local
// rank, the note when ranks share one, the table's columns and "(shared)" marks, and its gather
// (one rank here; tests/gpu/test_staged_comm.cpp gathers over two).
#include <gtest/gtest.h>

#include "mpitrain/runtime/device.hpp"
#include "mpitrain/runtime/error.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;

TEST(DeviceChoice, LocalRankModuloVisible) {
  const DeviceChoice alone = choose_device(3, 8, 8);
  EXPECT_EQ(alone.device, 3);
  EXPECT_FALSE(alone.shared);
  EXPECT_TRUE(alone.note.empty());
  const DeviceChoice shared = choose_device(3, 4, 2);
  EXPECT_EQ(shared.device, 1);
  EXPECT_TRUE(shared.shared);
  EXPECT_EQ(shared.note, "4 ranks on this node share 2 GPUs: local rank i uses GPU i % 2");
  EXPECT_EQ(choose_device(1, 2, 1).note,
            "2 ranks on this node share 1 GPU: local rank i uses GPU i % 1");
  EXPECT_THROW(choose_device(0, 1, 0), Error);
  EXPECT_THROW(choose_device(2, 2, 4), Error);
}

TEST(DeviceTable, OneLinePerRankSharedMarked) {
  const std::vector<DeviceInfo> table = {
      {0, "node01", 0, "NVIDIA H200", "0000:19:00.0"},
      {1, "node01", 0, "NVIDIA H200", "0000:19:00.0"},
      {2, "node02-long", 1, "NVIDIA H200", "0000:19:00.0"},
  };
  EXPECT_EQ(format_device_table(table),
            "rank  host         gpu  name         pci bus id\n"
            "   0  node01         0  NVIDIA H200  0000:19:00.0  (shared)\n"
            "   1  node01         0  NVIDIA H200  0000:19:00.0  (shared)\n"
            "   2  node02-long    1  NVIDIA H200  0000:19:00.0\n");
}

TEST(DeviceTable, GatherOnOneRank) {
  mpitrain::test::start_mpi();
  const DeviceInfo mine{0, "h", 2, "some GPU", "0000:01:00.0"};
  const std::vector<DeviceInfo> table = gather_device_table(mine, MPI_COMM_WORLD);
  ASSERT_EQ(table.size(), 1u);
  EXPECT_EQ(table[0].host, "h");
  EXPECT_EQ(table[0].device, 2);
  EXPECT_EQ(table[0].name, "some GPU");
  EXPECT_EQ(table[0].pci_bus_id, "0000:01:00.0");
}
