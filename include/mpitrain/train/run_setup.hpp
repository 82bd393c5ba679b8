// What a run checks and prepares before any work: threads, token ranges, the layout against the
// model, the output directory.
#pragma once

#include <cstdint>

#include "mpitrain/app/options.hpp"
#include "mpitrain/data/token_source.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

// Threads per rank: the option, else OMP_NUM_THREADS, else this node's cores shared evenly by
// its ranks_on_node ranks.
int resolve_threads(int requested, int ranks_on_node);
// Largest token id in this rank's share of the file (0 for no file).
uint32_t local_max_token(const TokenSource* src, const MpiComm& world);
// Model dimensions that tensor parallelism splits must divide by tp (UsageError otherwise).
void check_tensor_parallel(const ModelConfig& m, int tp);
// Refuses to write into a directory that holds anything, or over an existing export file,
// unless --overwrite (or --resume, which continues the run that is there); then creates the
// directory and records the options used. A fresh run with --overwrite drops the old run's
// checkpoints, so that a later --resume auto cannot pick them up.
void prepare_out_dir(const Options& o);

}  // namespace mpitrain
