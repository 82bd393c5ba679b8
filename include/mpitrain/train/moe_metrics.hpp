// A step's mixture-of-experts records for metrics.jsonl and the console (metrics.hpp): every
// rank's Model::take_moe_stats reduced over the whole job.
#pragma once

#include <vector>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/model/moe.hpp"
#include "mpitrain/train/metrics.hpp"

namespace mpitrain {

// One record per MoE layer of the model, in layer order. Each pipeline stage's ranks add their
// own layers; every tp and cp rank's statistics are whole (summed over tp x cp in MoeLayer), so
// only those with counts (tp rank 0, cp rank 0) add theirs; the data-parallel ranks' are summed.
// Tokens per expert: the sums; aux and z losses: their sum over the step's `micro_batches` (all
// dp ranks') divided by it, the mean the objective weighs them by (equal micro-batches).
// Collective over `world`.
std::vector<MoeLayerRecord> reduce_moe_stats(const std::vector<MoeLayerStats>& mine,
                                             const ModelConfig& config, bool counts,
                                             int micro_batches, Communicator& world);

}  // namespace mpitrain
