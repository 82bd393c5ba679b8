// What a run checks and prepares before any work: threads, token ranges, the layout against the
// model, the output directory.
#pragma once

#include <cstdint>
#include <string>

#include "mpitrain/app/options.hpp"
#include "mpitrain/data/dataset.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

// Threads per rank, the first that is set: `requested` (--threads, > 0), else the leading
// number of `omp_num_threads` (the OMP_NUM_THREADS variable; null, empty or not a positive
// number: unset), else `usable_cpus`, the CPUs this rank may keep busy (fair_cpu_share of
// runtime/affinity.hpp: its allowed CPUs, those shared with other ranks split among them).
int resolve_threads(int requested, const char* omp_num_threads, int usable_cpus);
// UsageError naming the first file (train, then val) that holds a token id >= vocab_size, or a
// loss-mask byte other than 0 and 1; and naming a dataset whose every file has a loss mask of
// zeros (no target scored). The files' tokens, taken as one sequence, are split into one
// contiguous share per rank: each rank scans only its share, whatever the number and sizes of
// the files. Collective over world.
void check_token_ids(const Dataset* train, const Dataset* val, int vocab_size,
                     const MpiComm& world);
// Model dimensions that tensor parallelism splits must divide by tp (UsageError otherwise).
void check_tensor_parallel(const ModelConfig& m, int tp);
// --sequence-parallel needs tp > 1 and seq-len divisible by tp (UsageError otherwise).
void check_sequence_parallel(const TrainConfig& t, int tp);
// Why the model cannot run with tp x pp (check_tensor_parallel, then pipeline_layer_split over
// pp_layers); "" if it can.
std::string layout_problem(const ModelConfig& m, int tp, int pp, const std::string& pp_layers);
// The layouts the run's model admits, as far as the options tell before any file is read (the
// vocabulary may come from the data): resolve_grid names only those. None filtered when the
// model comes from a file (--init-from, an explicit --resume).
LayoutFilter layouts_the_model_admits(const Options& o);
// Refuses (UsageError) an out-dir that holds anything but its lock file, or an existing export
// file, unless --overwrite or resuming (--resume auto, or a checkpoint of the run in out-dir: it
// continues the run that is there). Writes nothing: called under the out-dir's lock
// (runtime/dir_lock.hpp), before any other check can fail.
void check_out_dir(const Options& o, bool resuming);
// Once every check has passed: records the run in <out-dir>/run.ini (train/run_record.hpp). A
// run with --overwrite that is not resuming (as check_out_dir) drops the old run's checkpoints,
// so that a later --resume auto cannot pick them up.
void write_out_dir(const Options& o, const std::string& run_ini, bool resuming);

}  // namespace mpitrain
