// Replica drift: the data-parallel copies of the parameters must stay bit-identical (same
// summed gradients, same update). A flipped bit in memory, a faulty core or a rank that missed an
// update makes them drift apart silently; every --check-replicas steps this finds it.
//
// Each rank hashes each of its tensors (64 bits over the bytes); the data-parallel group
// compares them (min and max all-reduce of the hashes: equal on every replica iff they agree) and
// the world agrees on whether any group differs: three small all-reduces and one pass over the
// parameters. On a mismatch the group of the first differing tensor (smallest global index, then
// lowest world rank) works out its versions: which ranks hold which, each version's statistics
// and how many elements differ from dp rank 0's copy; rank 0 prints it.
#pragma once

#include <cstdint>

#include "mpitrain/backend/buf.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/params.hpp"
#include "mpitrain/runtime/fault.hpp"

namespace mpitrain {

// 64-bit hash of n floats' bits: any one changed value changes it.
uint64_t tensor_hash(const float* data, size_t n);

// Collective over world (dp: this rank's data-parallel group). True when every replica agrees;
// false once rank 0 has printed the mismatch to stderr (then the trainer exits kExitFailure).
bool replicas_agree(const ParamLayout& layout, const float* params, MpiCommunicator& dp,
                    MpiCommunicator& world, int64_t step);

// MPITRAIN_FAULT=drift:rank=R[:step=S]: after step S's update, rank R moves element 0 of the
// middle tensor it holds by one ulp.
void apply_drift_fault(const FaultPlan& faults, const ParamLayout& layout, Buf<float> params,
                       int world_rank, int64_t step);

}  // namespace mpitrain
