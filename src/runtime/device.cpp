#include "mpitrain/runtime/device.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "mpitrain/runtime/error.hpp"

#if defined(MPITRAIN_HAVE_CUDA)
#include <cuda_runtime_api.h>

#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda/device.hpp"
#endif

namespace mpitrain {

namespace {

// DeviceInfo as fixed-size bytes for MPI_Gather (every rank runs the same build).
struct PackedInfo {
  int32_t device;
  char host[64], name[96], pci_bus_id[32];
};

void copy_text(char* dst, size_t size, const std::string& src) {
  std::snprintf(dst, size, "%s", src.c_str());
}

}  // namespace

DeviceChoice choose_device(int local_rank, int local_size, int visible) {
  if (visible < 1) MPITRAIN_THROW("no CUDA device visible");
  if (local_rank < 0 || local_rank >= local_size)
    MPITRAIN_THROW("local rank " + std::to_string(local_rank) + " not in [0, " +
                   std::to_string(local_size) + ")");
  DeviceChoice c;
  c.device = local_rank % visible;
  c.visible = visible;
  c.shared = local_size > visible;
  if (c.shared)
    c.note = std::to_string(local_size) + " ranks on this node share " + std::to_string(visible) +
             (visible == 1 ? " GPU" : " GPUs") + ": local rank i uses GPU i % " +
             std::to_string(visible);
  return c;
}

std::string format_device_table(const std::vector<DeviceInfo>& table) {
  size_t host_w = 4, name_w = 4;
  for (const DeviceInfo& d : table) {
    host_w = std::max(host_w, d.host.size());
    name_w = std::max(name_w, d.name.size());
  }
  const int hw = static_cast<int>(host_w), nw = static_cast<int>(name_w);
  char line[512];
  std::snprintf(line, sizeof line, "%4s  %-*s  %3s  %-*s  %s\n", "rank", hw, "host", "gpu", nw,
                "name", "pci bus id");
  std::string out = line;
  for (const DeviceInfo& d : table) {
    const bool shared = std::count_if(table.begin(), table.end(), [&](const DeviceInfo& o) {
                          return o.host == d.host && o.pci_bus_id == d.pci_bus_id;
                        }) > 1;
    std::snprintf(line, sizeof line, "%4d  %-*s  %3d  %-*s  %s%s\n", d.rank, hw, d.host.c_str(),
                  d.device, nw, d.name.c_str(), d.pci_bus_id.c_str(), shared ? "  (shared)" : "");
    out += line;
  }
  return out;
}

std::vector<DeviceInfo> gather_device_table(const DeviceInfo& mine, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  PackedInfo packed{};
  packed.device = mine.device;
  copy_text(packed.host, sizeof packed.host, mine.host);
  copy_text(packed.name, sizeof packed.name, mine.name);
  copy_text(packed.pci_bus_id, sizeof packed.pci_bus_id, mine.pci_bus_id);
  std::vector<PackedInfo> all(rank == 0 ? size : 0);
  MPI_CHECK(MPI_Gather(&packed, sizeof packed, MPI_BYTE, all.data(), sizeof packed, MPI_BYTE, 0,
                       comm));
  std::vector<DeviceInfo> table;
  for (int r = 0; r < static_cast<int>(all.size()); ++r)
    table.push_back({r, all[r].host, all[r].device, all[r].name, all[r].pci_bus_id});
  return table;
}

#if defined(MPITRAIN_HAVE_CUDA)

namespace {

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

DeviceChoice select_device(int local_rank, int local_size) {
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count == 0) MPITRAIN_THROW(probe.reason);
  const DeviceChoice c = choose_device(local_rank, local_size, probe.count);
  CUDA_CHECK(cudaSetDevice(c.device));
  return c;
}

DeviceInfo device_info(int rank) {
  DeviceInfo d;
  d.rank = rank;
  d.host = host_name();
  CUDA_CHECK(cudaGetDevice(&d.device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, d.device));
  d.name = prop.name;
  char bus[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, d.device));
  d.pci_bus_id = bus;
  return d;
}

#else

DeviceChoice select_device(int, int) { MPITRAIN_THROW("no CUDA in this build"); }

DeviceInfo device_info(int) { MPITRAIN_THROW("no CUDA in this build"); }

#endif

}  // namespace mpitrain
