// --micro-batch-size auto: the largest micro-batch whose memory fits on the device.
//
// A pure function over the planner's memory model (memory.hpp), which counts exactly what Model
// allocates for its activations (tested against Model::activation_bytes() in test_planner.cpp):
// params, grads, optimizer state and master (as the ZeRO level 0-3 and HSDP's shard groups shard
// them), the activations of the slots the pipeline schedule keeps, the pipeline's buffers.
// Candidates are the divisors of global_batch / dp (every rank runs whole micro-batches), largest
// first; the first whose largest stage fits in (1 - margin) x free_bytes wins. free_bytes is what
// cudaMemGetInfo reports once the CUDA context and the libraries are up and before the model
// allocates; the margin covers what is allocated later (cuBLASLt/cuDNN workspaces, NCCL buffers,
// fragmentation).
#pragma once

#include <string>

#include "mpitrain/planner/memory.hpp"

namespace mpitrain {

struct MicroBatchPlan {
  int micro_batch = 0;    // 0: not even a micro-batch of 1 fits
  MemoryEstimate memory;  // per rank at that micro-batch (at 1 when none fits)
  // "micro-batch auto: 79.10 GiB free, 10% margin -> 71.19 GiB usable; mb 8: 80.34 GiB, too
  // large; mb 4: 47.02 GiB (params 1.45 GiB, grads 1.45 GiB, optimizer 5.80 GiB, master
  // 2.90 GiB, activations 35.42 GiB, buffers 0.00 MiB) fits -> micro-batch 4"
  std::string text;
};

// layout.micro_batch is ignored (it is what is chosen). margin in [0, 1).
MicroBatchPlan plan_micro_batch(const ModelConfig& config, const RunShape& run, Layout layout,
                                double free_bytes, double margin = kMemoryMargin);

// What one of the `ranks` ranks that share a device may plan for: its share of the device's
// free memory, free_bytes / ranks, less `reserved` (what it allocates besides the plan: its
// workspace), at least 0. Error unless ranks >= 1.
double device_share(double free_bytes, int ranks, double reserved);

}  // namespace mpitrain
