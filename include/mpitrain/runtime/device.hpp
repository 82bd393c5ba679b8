// Which GPU a rank uses, and the start-up table of every rank's GPU.
//
// A rank takes visible device local_rank % visible, where visible is what the CUDA runtime sees
// (it applies CUDA_VISIBLE_DEVICES: device i is the i-th listed one). More ranks on a node than
// visible GPUs is allowed (several ranks then share one, e.g. to test layouts on one GPU over
// MPI); the choice says so. The table (gathered to rank 0) shows each rank's host, device index,
// name and PCI bus id, so two ranks on one GPU or a node with a GPU missing are seen at start.
// In a build without CUDA, select_device and device_info throw Error "no CUDA in this build";
// the pure parts (choose_device, format_device_table) exist in every build.
#pragma once

#include <string>
#include <vector>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

struct DeviceChoice {
  int device = -1;   // index among the visible devices
  int visible = 0;   // devices the runtime sees
  bool shared = false;  // more ranks on this node than visible devices
  // when shared: "4 ranks on this node share 2 GPUs: local rank i uses GPU i % 2"
  std::string note;
};

// Pure: local_rank % visible. Throws Error when visible < 1 or local_rank not in [0, local_size).
DeviceChoice choose_device(int local_rank, int local_size, int visible);
// choose_device over the runtime's device count, then cudaSetDevice. Throws Error (with the
// runtime's reason) when no device is usable.
DeviceChoice select_device(int local_rank, int local_size);

struct DeviceInfo {
  int rank = 0;     // in the communicator the table is gathered over
  std::string host;
  int device = -1;  // visible index
  std::string name, pci_bus_id;  // "NVIDIA H200", "0000:3B:00.0"
};

// This rank's current device (cudaGetDevice): host, index, name, PCI bus id.
DeviceInfo device_info(int rank);
// Every rank's info on rank 0 of comm (collective; other ranks get an empty vector).
std::vector<DeviceInfo> gather_device_table(const DeviceInfo& mine, MPI_Comm comm);
// One line per rank, a header first; ranks of one host on one bus id are marked "(shared)":
//   rank  host     gpu  name         pci bus id
//      0  node01     0  NVIDIA H200  0000:19:00.0  (shared)
std::string format_device_table(const std::vector<DeviceInfo>& table);

}  // namespace mpitrain
