// plan: the parallel layout of a model for a cluster — every dp x tp x pp x cp grid of its ranks
// with each micro-batch size, ZeRO 0-3 and recomputation none/selective/full,
// sequence parallelism on and off; memory per rank and step time estimated
// (include/mpitrain/planner/); a ranked table, the trainer flags of the best layout, and the grids
// that do not fit with the reason.
//
//   plan --config MODEL.ini --nodes 8 --gpus-per-node 8 --gpu-mem 80 --peak-tflops 989
//        --intra-bw 450 --inter-bw 400 --global-batch 1024 [--seq-len 4096] [--precision bf16]
//   plan --config MODEL.ini --cpu [--cores-per-node 2 --ranks-per-node 4 --host-mem 16
//        --peak-gflops 200 --intra-bw 5]
//   plan --config MODEL.ini --cluster input/cluster-example.ini [flags override the file]
//
// Exit code: 0 a plan; 1 nothing fits; 2 bad input (one message).
#include <cblas.h>
#include <omp.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <thread>

#include "mpitrain/app/command_line.hpp"
#include "mpitrain/backend/blas_kernel.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/model/summary.hpp"
#include "mpitrain/planner/inputs.hpp"
#include "mpitrain/planner/planner.hpp"
#include "mpitrain/planner/report.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

// Defaults of the machine model. CPU: fitted by bench/plan_validate.sh on a development machine
// (2 cores, OpenBLAS, Open MPI shared memory); GPU: GEMMs near 70% of the bf16 peak and the rest
// of the step at less, half of it at 128-row GEMMs, CUDA context + cuBLAS/cuDNN workspaces +
// NCCL buffers, NCCL's per-call latency.
constexpr double kCpuEfficiency = 0.95, kGpuEfficiency = 0.55;
constexpr double kCpuHalfRows = 13, kGpuHalfRows = 128;
constexpr double kCpuBaselineMib = 40, kGpuBaselineMib = 3072;
constexpr double kCpuLatencyUs = 10, kGpuLatencyUs = 20;
constexpr double kCpuSchedulingUs = 1000;  // part of a scheduler time slice; varies run to run
constexpr double kCpuIntraGbps = 5;

struct PlanOptions {
  std::string config, cluster_file;
  ClusterSpec spec;
  RunOverrides run;
  Calibration calibration;
  SearchLimits limits;
  int top = 10;
  bool measure_peak = false;  // CPU cluster without a peak: this machine's sgemm rate
};

template <typename V>
void set_if(const po::variables_map& vm, const char* name, V& target) {
  if (vm.count(name)) target = vm[name].as<V>();
}

double this_machine_gib() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / (1 << 30);
}

// Fills o from the command line; false if --help was printed instead.
bool parse(int argc, char** argv, PlanOptions& o) {
  po::options_description cluster("Cluster (flags override --cluster)");
  cluster.add_options()
      ("cluster", po::value(&o.cluster_file), "cluster file (input/cluster-example.ini's keys)")
      ("cpu", po::bool_switch(), "CPU nodes: ranks are processes sharing a node's cores, memory "
                                 "and memory bandwidth")
      ("nodes", po::value<int>(), "nodes (default 1)")
      ("gpus-per-node", po::value<int>(), "GPUs per node (a rank each)")
      ("gpu-mem", po::value<double>(), "GiB of memory per GPU")
      ("peak-tflops", po::value<double>(), "dense TFLOP/s per GPU in the run's precision")
      ("cores-per-node", po::value<int>(), "CPU: cores per node (default: this machine's)")
      ("ranks-per-node", po::value<int>(), "CPU: processes per node (default: cores-per-node)")
      ("host-mem", po::value<double>(), "CPU: GiB of memory per node (default: this machine's)")
      ("peak-gflops", po::value<double>(), "CPU: sgemm GFLOP/s of a node, all cores (default: "
                                           "cores-per-node x one core's rate measured here)")
      ("intra-bw", po::value<double>(), "GB/s bus bandwidth of an all-reduce inside a node "
                                        "(NVLink per GPU; comm-bench's busbw on CPU, default 5)")
      ("inter-bw", po::value<double>(), "GB/s per node across the network (all its NICs: "
                                        "8 x 400 Gb/s InfiniBand = 400), shared by its ranks")
      ("mem-bw", po::value<double>(), "GB/s of memory for the optimizer: per GPU (default 3000), "
                                      "per CPU node (default 10)");
  po::options_description run("Run (flags override --config)");
  run.add_options()
      ("config", po::value(&o.config), "the trainer's INI file of the model (required)")
      ("global-batch", po::value(&o.run.global_batch), "sequences per optimizer step")
      ("seq-len", po::value(&o.run.seq_len), "tokens per sequence")
      ("precision", po::value(&o.run.precision), "fp32, bf16 or fp16")
      ("vocab-size", po::value(&o.run.vocab_size), "when the INI leaves it to the data");
  po::options_description model("Model of the machine (calibrated by bench/plan_validate.sh)");
  model.add_options()
      ("efficiency", po::value<double>(), "fraction of peak the model's compute reaches with "
                                          "large GEMMs (default 0.95 CPU, 0.55 GPU)")
      ("half-rows", po::value<double>(), "GEMM rows per thread (micro-batch tokens / threads) "
                                         "at which that fraction halves (default 13 CPU, 128 GPU)")
      ("baseline-mib", po::value<double>(), "MiB per rank besides the model: MPI, OpenBLAS and "
                                            "the binary (CPU, default 40); CUDA context, "
                                            "workspaces, NCCL (GPU, default 3072)")
      ("latency-us", po::value<double>(), "microseconds per collective call or message (default "
                                          "10 CPU, 20 GPU)")
      ("scheduling-us", po::value<double>(), "CPU with more ranks than cores: microseconds a "
                                             "call or message waits for its partner to run "
                                             "(default 1000)");
  po::options_description search("Search");
  search.add_options()
      ("top", po::value(&o.top)->default_value(10), "rows of the table; 0 = every fitting option")
      ("max-micro-batch", po::value(&o.limits.max_micro_batch)->default_value(64),
       "largest micro-batch size tried")
      ("dp", po::value(&o.limits.dp), "only this dp")
      ("tp", po::value(&o.limits.tp), "only this tp")
      ("pp", po::value(&o.limits.pp), "only this pp")
      ("cp", po::value(&o.limits.cp), "only this cp (context parallelism; default: "
                                      "the config's cp if it sets one, else every cp with 2 cp "
                                      "dividing seq-len)")
      ("micro-batch-size", po::value(&o.limits.micro_batch), "only this micro-batch size")
      ("zero", po::value<int>(), "only this ZeRO level: 0 off, 1 optimizer state sharded over "
                                 "dp, 2 and gradients, 3 and parameters")
      ("zero3-reshard-after-forward", po::value<bool>(),
       "ZeRO-3: only true (gather each unit again for backward) or false (keep what forward "
       "gathered: faster, the stage's parameters held whole); default both")
      ("zero-shard-size", po::value(&o.limits.zero_shard),
       "ZeRO-2/3 shard over groups of this many dp ranks, replicated across dp / D (HSDP); only "
       "grids whose dp it divides get ZeRO-2/3 options (default: the whole dp group)")
      ("recompute", po::value<std::string>(), "only none, selective or full")
      ("sequence-parallel", po::value<bool>(),
       "only with (true) or without (false) sequence parallelism; unset: both where tp > 1");
  po::options_description all(
      "plan: the parallel layout of a model for a cluster (ranked by estimated step time)\n"
      "usage: plan --config MODEL.ini (--cluster FILE | --nodes N --gpus-per-node G --gpu-mem GiB "
      "--peak-tflops F --intra-bw GB/s --inter-bw GB/s | --cpu) [--global-batch B] [options]");
  all.add_options()("help,h", "show this help");
  all.add(cluster).add(run).add(model).add(search);

  po::variables_map vm;
  try {
    po::store(parse_last_wins(argc, argv, all), vm);
    if (vm.count("help")) {
      std::cout << all << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "; see --help");
  }
  require(!o.config.empty(), "--config MODEL.ini is required (the trainer's INI file)");
  ClusterSpec& s = o.spec;
  if (!o.cluster_file.empty()) read_cluster_file(o.cluster_file, s);
  if (vm["cpu"].as<bool>()) s.cpu = true;
  if (vm.count("gpus-per-node") && !vm["cpu"].as<bool>()) s.cpu = false;
  set_if(vm, "nodes", s.nodes);
  set_if(vm, "gpus-per-node", s.gpus_per_node);
  set_if(vm, "gpu-mem", s.gpu_mem_gib);
  set_if(vm, "peak-tflops", s.peak_tflops);
  set_if(vm, "cores-per-node", s.cores_per_node);
  set_if(vm, "ranks-per-node", s.ranks_per_node);
  set_if(vm, "host-mem", s.node_mem_gib);
  set_if(vm, "peak-gflops", s.peak_gflops);
  set_if(vm, "intra-bw", s.intra_gbps);
  set_if(vm, "inter-bw", s.inter_gbps);
  set_if(vm, "mem-bw", s.mem_gbps);
  require(s.cpu || s.gpus_per_node > 0,
          "say what the ranks are: --gpus-per-node G (GPU nodes), --cpu, or a --cluster file");
  // A flag of the other kind of node is never used: refused, not dropped.
  const std::vector<const char*> gpu_flags = {"gpus-per-node", "gpu-mem", "peak-tflops"};
  const std::vector<const char*> cpu_flags = {"cores-per-node", "ranks-per-node", "host-mem",
                                              "peak-gflops", "scheduling-us"};
  for (const char* name : s.cpu ? gpu_flags : cpu_flags)
    require(!vm.count(name) || vm[name].defaulted(),
            std::string("--") + name + " describes " + (s.cpu ? "GPU" : "CPU") +
                " nodes, and this plan is for " + (s.cpu ? "CPU (--cpu)" : "GPU") +
                " nodes: leave it out");
  for (const char* name : {"nodes", "gpus-per-node", "cores-per-node", "ranks-per-node"})
    require(!vm.count(name) || vm[name].as<int>() >= 1,
            std::string("--") + name + " must be at least 1");
  for (const char* name :
       {"gpu-mem", "peak-tflops", "host-mem", "peak-gflops", "intra-bw", "inter-bw", "mem-bw"})
    require(!vm.count(name) || vm[name].as<double>() > 0,
            std::string("--") + name + " must be positive");
  if (s.cpu) {
    if (s.cores_per_node == 0) s.cores_per_node = static_cast<int>(std::thread::hardware_concurrency());
    if (s.node_mem_gib == 0) s.node_mem_gib = this_machine_gib();
    if (s.intra_gbps == 0) s.intra_gbps = kCpuIntraGbps;
    o.measure_peak = s.peak_gflops == 0;
  }
  auto given = [&](const char* name, double cpu, double gpu) {
    return vm.count(name) ? vm[name].as<double>() : s.cpu ? cpu : gpu;
  };
  o.calibration.efficiency = given("efficiency", kCpuEfficiency, kGpuEfficiency);
  o.calibration.half_rows = given("half-rows", kCpuHalfRows, kGpuHalfRows);
  o.calibration.scheduling_s = given("scheduling-us", kCpuSchedulingUs, 0) * 1e-6;
  o.calibration.baseline_bytes = given("baseline-mib", kCpuBaselineMib, kGpuBaselineMib) * (1 << 20);
  o.calibration.latency_s = given("latency-us", kCpuLatencyUs, kGpuLatencyUs) * 1e-6;
  require(o.calibration.efficiency > 0 && o.calibration.efficiency <= 1,
          "--efficiency must lie in (0, 1]");
  require(o.calibration.baseline_bytes >= 0 && o.calibration.latency_s >= 0 &&
              o.calibration.half_rows >= 0 && o.calibration.scheduling_s >= 0,
          "--baseline-mib, --half-rows, --latency-us and --scheduling-us must not be negative");
  require(o.top >= 0, "--top must not be negative");
  require(o.limits.max_micro_batch >= 1, "--max-micro-batch must be at least 1");
  require(o.limits.dp >= 0 && o.limits.tp >= 0 && o.limits.pp >= 0 && o.limits.cp >= 0 &&
              o.limits.micro_batch >= 0 && o.limits.zero_shard >= 0,
          "--dp, --tp, --pp, --cp, --micro-batch-size and --zero-shard-size must not be negative");
  if (vm.count("zero")) {
    const int z = vm["zero"].as<int>();
    require(z >= 0 && z <= 3, "--zero must be 0, 1, 2 or 3");
    o.limits.zero = z;
  }
  if (vm.count("zero3-reshard-after-forward"))
    o.limits.reshard_after_forward = vm["zero3-reshard-after-forward"].as<bool>();
  if (vm.count("recompute")) o.limits.recompute = parse_recompute(vm["recompute"].as<std::string>());
  if (vm.count("sequence-parallel"))
    o.limits.sequence_parallel = vm["sequence-parallel"].as<bool>();
  // Options of a layout the other options rule out: refused, not ignored.
  require(!(o.limits.sequence_parallel.value_or(false) && o.limits.tp == 1),
          "--sequence-parallel true splits the activations over tp, and --tp is 1: leave one out");
  const int zero = o.limits.zero.value_or(3);  // unset: every level, ZeRO-3 among them
  require(!o.limits.reshard_after_forward || zero == 3,
          "--zero3-reshard-after-forward is ZeRO-3's, and --zero is " + std::to_string(zero));
  require(o.limits.zero_shard == 0 || zero >= 2,
          "--zero-shard-size shards ZeRO-2/3 state, and --zero is " + std::to_string(zero));
  for (const char* name : {"global-batch", "seq-len", "vocab-size"})
    require(!vm.count(name) || vm[name].as<int>() > 0, std::string("--") + name + " must be positive");
  return true;
}

int run(int argc, char** argv) {
  PlanOptions o;
  if (!parse(argc, argv, o)) return kExitOk;
  const PlanInput in = read_plan_input(o.config, o.run, !o.spec.cpu);
  if (o.limits.cp == 0) o.limits.cp = in.cp;
  if (o.measure_peak) {  // every check is done: measuring takes a second
    omp_set_num_threads(1);  // a node's peak: its cores times one core's rate
    openblas_set_num_threads(1);
    o.spec.peak_gflops = o.spec.cores_per_node * measure_sgemm_gflops(1024, 3);
  }
  const Cluster cluster = make_cluster(o.spec);
  const ModelConfig& m = in.model;
  const double n = static_cast<double>(ParamLayout(m).total()), active = active_params(m);
  const std::string experts = experts_text(m);
  char active_text[48] = "";  // an MoE model: the parameters a token uses
  if (!experts.empty())
    std::snprintf(active_text, sizeof active_text, " (%.4g%s active per token)",
                  active >= 1e9 ? active / 1e9 : active / 1e6, active >= 1e9 ? "B" : "M");
  std::printf("model %s L%d H%d KV%d C%d F%d V%d%s, %.4g%s parameters%s | seq %d, global batch "
              "%d, %s\n",
              to_string(m.arch).c_str(), m.n_layer, m.n_head, m.n_kv_head, m.d_model, m.d_ff,
              m.vocab_size, experts.empty() ? "" : (" " + experts).c_str(),
              n >= 1e9 ? n / 1e9 : n / 1e6, n >= 1e9 ? "B" : "M", active_text, in.run.seq_len,
              in.run.global_batch, to_string(in.run.precision).c_str());
  std::printf("cluster %d x %d %s ranks | per rank %.2f GiB, %.4g %s peak%s x efficiency "
              "%.2f | all-reduce %.4g GB/s in a node",
              cluster.nodes, cluster.ranks_per_node, cluster.cpu ? "CPU" : "GPU",
              cluster.mem_bytes / (1 << 30), cluster.peak_flops / (cluster.cpu ? 1e9 : 1e12),
              cluster.cpu ? "GFLOP/s" : "TFLOP/s",
              o.measure_peak ? " (sgemm measured here)" : "", o.calibration.efficiency,
              cluster.intra_bw / 1e9);
  if (cluster.nodes > 1) std::printf(", %.4g GB/s per rank across nodes", cluster.inter_bw / 1e9);
  std::printf("\n");
  if (!experts.empty() && !cluster.cpu)
    std::printf("note: on GPUs the trainer routes an MoE layer's tokens on the host for now "
                "(model/moe.hpp: staged copies of its rows each way); the step times below "
                "leave that out\n");
  const Plan plan = make_plan(m, in.run, cluster, o.calibration, o.limits);
  print_plan(stdout, plan, in.run, o.top);
  if (plan.fits.empty()) {
    std::fprintf(stderr, "plan: no layout fits (see 'do not fit' above)\n");
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  mpitrain::run_on_best_blas_kernel(argv);  // its sgemm measurement runs the best kernel
  return tool_program("plan", argc, argv, run);
}
