#include "mpitrain/planner/cluster.hpp"

#include <boost/program_options.hpp>
#include <fstream>
#include <type_traits>
#include <utility>
#include <vector>

#include "mpitrain/io/text_file.hpp"
#include "mpitrain/runtime/error.hpp"

namespace po = boost::program_options;

namespace mpitrain {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kBitsPerByte = 8;
constexpr double kDefaultGpuMemGbps = 3000;  // HBM3 as AdamW sees it (H100 SXM: 3350 peak)
constexpr double kDefaultCpuMemGbps = 40;    // per node: the trainer's AdamW on one core moves 42

void require_positive(double value, const std::string& what) {
  require(value > 0, what + " must be given and positive (got " + std::to_string(value) + ")");
}

}  // namespace

void read_cluster_file(const std::string& path, ClusterSpec& spec) {
  std::ifstream in = open_text_file(path, "cluster file");
  po::options_description keys;
  keys.add_options()
      ("nodes", po::value<int>())
      ("gpus_per_node", po::value<int>())
      ("cores_per_node", po::value<int>())
      ("ranks_per_node", po::value<int>())
      ("memory_gb", po::value<double>())
      ("gpu_memory_gib", po::value<double>())
      ("gpu_peak_tflops", po::value<double>())
      ("node_peak_gflops", po::value<double>())
      ("intra_node_gbps", po::value<double>())
      ("inter_node_gbps", po::value<double>())
      ("memory_bw_gbps", po::value<double>());
  // tools/mkjob's keys (the job script's), read there: known here, so that a misspelt key of
  // either is refused, never ignored.
  for (const char* key :
       {"name", "scheduler", "exclusive", "cpu_bind", "gpu_bind", "setup", "network_interface",
        "partition", "account", "time_limit", "signal_seconds"})
    keys.add_options()(key, po::value<std::vector<std::string>>()->composing());
  po::variables_map vm;
  try {
    po::store(po::parse_config_file(in, keys), vm);
  } catch (const po::error& e) {
    throw UsageError("cluster file " + path + ": " + e.what());
  }
  auto set = [&](const char* key, auto& target) {
    if (vm.count(key)) target = vm[key].as<std::remove_reference_t<decltype(target)>>();
  };
  set("nodes", spec.nodes);
  set("gpus_per_node", spec.gpus_per_node);
  set("cores_per_node", spec.cores_per_node);
  set("ranks_per_node", spec.ranks_per_node);
  set("memory_gb", spec.node_mem_gib);
  set("gpu_memory_gib", spec.gpu_mem_gib);
  set("gpu_peak_tflops", spec.peak_tflops);
  set("node_peak_gflops", spec.peak_gflops);
  // *_gbps keys are gigabits per second, as links are sold (a 400 Gb/s NIC); spec holds GB/s.
  for (auto [key, target] : {std::pair{"intra_node_gbps", &spec.intra_gbps},
                             std::pair{"inter_node_gbps", &spec.inter_gbps},
                             std::pair{"memory_bw_gbps", &spec.mem_gbps}})
    if (vm.count(key)) *target = vm[key].as<double>() / kBitsPerByte;
  spec.cpu = spec.gpus_per_node == 0;
  for (const char* key : {"nodes", "gpus_per_node", "cores_per_node", "ranks_per_node"})
    require(!vm.count(key) || vm[key].as<int>() >= (std::string(key) == "gpus_per_node" ? 0 : 1),
            "cluster file " + path + ": " + key + " must be at least " +
                (std::string(key) == "gpus_per_node" ? "0" : "1"));
  require(!vm.count("memory_gb") || vm["memory_gb"].as<double>() >= 0,  // 0: the scheduler's
          "cluster file " + path + ": memory_gb must not be negative");
  for (const char* key : {"gpu_memory_gib", "gpu_peak_tflops", "node_peak_gflops",
                          "intra_node_gbps", "inter_node_gbps", "memory_bw_gbps"})
    require(!vm.count(key) || vm[key].as<double>() > 0,
            "cluster file " + path + ": " + key + " must be positive");
  // The planner counts a rank per GPU (the trainer's NCCL layout); mkjob refuses fewer.
  require(spec.cpu || spec.ranks_per_node == 0 || spec.ranks_per_node == spec.gpus_per_node,
          "cluster file " + path + ": ranks_per_node " + std::to_string(spec.ranks_per_node) +
              " differs from gpus_per_node " + std::to_string(spec.gpus_per_node) +
              ": the planner counts a rank per GPU");
}

Cluster make_cluster(const ClusterSpec& s) {
  require(s.nodes >= 1, "nodes must be at least 1 (got " + std::to_string(s.nodes) + ")");
  Cluster c;
  c.cpu = s.cpu;
  c.nodes = s.nodes;
  if (s.cpu) {
    require(s.cores_per_node >= 1, "cores-per-node must be at least 1 on a CPU cluster");
    c.cores_per_node = s.cores_per_node;
    c.ranks_per_node = s.ranks_per_node > 0 ? s.ranks_per_node : s.cores_per_node;
    require_positive(s.node_mem_gib, "host memory per node (--host-mem, or memory_gb in a cluster file)");
    require_positive(s.peak_gflops, "peak GFLOP/s per node (--peak-gflops, or node_peak_gflops in a cluster file)");
    c.mem_bytes = s.node_mem_gib * kGiB / c.ranks_per_node;
    c.peak_flops = s.peak_gflops * 1e9 / c.ranks_per_node;
    c.mem_bw = (s.mem_gbps > 0 ? s.mem_gbps : kDefaultCpuMemGbps) * 1e9 / c.ranks_per_node;
  } else {
    require(s.gpus_per_node >= 1, "gpus-per-node must be at least 1 (or --cpu)");
    c.ranks_per_node = s.gpus_per_node;
    require_positive(s.gpu_mem_gib, "GPU memory (--gpu-mem, or gpu_memory_gib in a cluster file)");
    require_positive(s.peak_tflops, "peak TFLOP/s per GPU (--peak-tflops, or gpu_peak_tflops in a cluster file)");
    c.mem_bytes = s.gpu_mem_gib * kGiB;
    c.peak_flops = s.peak_tflops * 1e12;
    c.mem_bw = (s.mem_gbps > 0 ? s.mem_gbps : kDefaultGpuMemGbps) * 1e9;
  }
  if (c.ranks_per_node > 1) require_positive(s.intra_gbps, "intra-node bandwidth (--intra-bw, or intra_node_gbps in a cluster file)");
  if (s.nodes > 1) require_positive(s.inter_gbps, "inter-node bandwidth (--inter-bw, or inter_node_gbps in a cluster file)");
  c.intra_bw = s.intra_gbps * 1e9;
  c.inter_bw = s.inter_gbps * 1e9 / c.ranks_per_node;
  return c;
}

}  // namespace mpitrain
