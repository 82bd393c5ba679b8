// A training run from options to trained model: set-up (every check before any work), the step
// loop (micro-batches, data-parallel gradient all-reduce, clipping, AdamW), evaluation, metrics,
// and the text sample at the end.
#pragma once

#include "mpitrain/app/options.hpp"
#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

// Returns the exit code: kExitOk, or kExitRequeue when a signal or the time limit stopped the
// run after saving a checkpoint. Throws UsageError (on every rank alike) for bad input found
// during set-up.
int train(const Options& options, const MpiComm& world);

}  // namespace mpitrain
