// The machines a plan is for, as figures per rank, and how they are read from a cluster file.
//
// GPU clusters: a rank is a GPU. CPU clusters: a rank is a process on a node's cores; the node's
// cores, memory and memory bandwidth are shared evenly by its ranks (oversubscribed ranks
// time-share the cores).
#pragma once

#include <algorithm>
#include <string>

namespace mpitrain {

// What a user states about the cluster (flags or a cluster file), per node or per GPU as named.
struct ClusterSpec {
  bool cpu = false;
  int nodes = 1;
  int gpus_per_node = 0;    // GPU clusters
  int cores_per_node = 0;   // CPU clusters
  int ranks_per_node = 0;   // CPU clusters; 0 = cores_per_node
  double gpu_mem_gib = 0;   // per GPU
  double node_mem_gib = 0;  // per node (CPU: the ranks' memory)
  double peak_tflops = 0;   // per GPU, dense, in the run's precision
  double peak_gflops = 0;   // per CPU node, all cores (sgemm rate)
  double intra_gbps = 0;    // GB/s of an all-reduce within a node (bus bandwidth; NVLink per GPU)
  double inter_gbps = 0;    // GB/s per node across the network (shared by the node's ranks)
  double mem_gbps = 0;      // GB/s of memory: per GPU (HBM), per node (CPU DRAM); 0 = default
};

struct Cluster {
  bool cpu = false;
  int nodes = 1;
  int ranks_per_node = 1;
  int cores_per_node = 0;  // CPU clusters
  double mem_bytes = 0;   // per rank
  double peak_flops = 0;  // per rank, FLOP/s
  double intra_bw = 0;    // bytes/s, all-reduce bus bandwidth inside a node
  double inter_bw = 0;    // bytes/s per rank across nodes
  double mem_bw = 0;      // bytes/s per rank
  int world() const { return nodes * ranks_per_node; }
  // CPU: threads of a rank (cores / ranks, at least 1), and how many ranks share a core (1 when
  // there are enough cores). GPU: 1 and 1.
  int threads_per_rank() const { return cpu ? std::max(1, cores_per_node / ranks_per_node) : 1; }
  double oversubscription() const {
    return cpu ? std::max(1.0, static_cast<double>(ranks_per_node) / cores_per_node) : 1.0;
  }
  bool same_node(int rank_a, int rank_b) const {
    return rank_a / ranks_per_node == rank_b / ranks_per_node;
  }
};

// Reads the fields of a cluster file (input/cluster-example.ini: key = value, '#' comments; the
// keys tools/mkjob reads, plus the planner's gpu_memory_gib, gpu_peak_tflops, node_peak_gflops,
// memory_bw_gbps) into spec; keys absent from the file leave spec as it is. The *_gbps keys are
// gigabits per second (what the name says, as NICs are sold), converted to spec's GB/s.
// UsageError for an unreadable file or a value that is not a number.
void read_cluster_file(const std::string& path, ClusterSpec& spec);

// Per-rank figures; UsageError naming the first missing or impossible value.
Cluster make_cluster(const ClusterSpec& spec);

}  // namespace mpitrain
