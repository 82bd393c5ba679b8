// Parallel HDF5 checkpoints that load under any dp x tp x pp layout and survive kill -9.
//
// Directory <out_dir>/checkpoints (a CheckpointStore):
//   step-00000010/checkpoint.h5   one committed checkpoint per saved step (N = optimizer steps
//   step-00000020/checkpoint.h5   done, 8 digits when written, any number of digits when read)
//   latest                        a regular file: the newest committed directory's name, one line
//   best/checkpoint.h5            save_as("best"): same protocol, any name
//   step-00000030.tmp/            a save in progress or cut short: never loaded, removed later
//
// checkpoint.h5 (format version 3; `h5dump -A` shows the manifest):
//   /manifest                     attributes: the fields of CheckpointManifest, same names, and
//                                 a uint64 `checksum`: CRC-32C of the fields' text (format.hpp);
//   /manifest/expert_bias         a --moe-expert-bias model's router biases (format.hpp)
//   /params/<tensor>              float32, the tensor's FULL logical shape (names as in
//   /<state>/<tensor>             model/params.hpp), whatever layout wrote it; each with a
//                                 uint64 attribute `checksum` (format.hpp: layout-independent)
// /params holds the fp32 values the optimizer updates (its master weights when the model is
// kept in bf16/fp16); <state> are the optimizer's buffers (optim/optimizer.hpp state_names:
// adam_m and adam_v for adamw and lamb, momentum for sgd). Version 1 (adamw only, no loss-scaler
// counters) and version 2 (no manifest checksum: a warning, the fields' ranges still checked)
// are read too.
// Written with the MPI-IO driver and collective I/O: every rank of the world creates every
// dataset; each element is written by exactly one rank: the writer (CheckpointState::writer)
// whose optimizer owns it, in the tensor's primary copy (hyperslabs); the others take part with
// empty selections. On load every rank reads the params it holds and its owned part of the rest,
// so any layout of the same model, at any ZeRO level, can resume from any other.
//
// Commit protocol of save / save_as. Rank 0 does the file-system work, each such step only once
// every rank has reached it (barrier) and agreed on by all:
//   1. remove a stale <name>.tmp/, create it
//   2. all ranks write <name>.tmp/checkpoint.h5 (checksums all-reduced)
//        fault phase "write": the data and attributes are written, the file is not closed
//   3. collective close
//        fault phase "close": the file is closed, not yet fsynced nor renamed
//   4. rank 0 fsyncs the file and <name>.tmp/; barrier; rank 0 renames <name>.tmp -> <name> (an
//      existing <name> first to <name>.old, removed after) and fsyncs the store directory
//        fault phase "rename": <name> is committed, `latest` still names the previous one
//   5. save only: rank 0 writes latest.tmp and fsyncs it
//        fault phase "latest": latest.tmp is durable, `latest` still names the previous step
//      then renames it over `latest` (fsync directory) and renames the step directories beyond
//      keep_last to step-N.pruned, a name the loader never takes (fsync directory)
//        fault phase "prune": `latest` names <name>, the retired steps are not yet deleted
//      then deletes every step-N.tmp and step-N.pruned.
// At a fault phase every rank calls FaultPlan::at(phase, world rank, m.step); a kill there on
// any rank stops the job before rank 0's next file-system step. A kill anywhere leaves the
// previous checkpoint loadable: a crash between the two renames of step 4 leaves only
// <name>.old, which load() and load_latest() use in place of <name>.
//
// Loading verifies the manifest (format version, checksum, every field's range, step = the number
// in a step-N directory name), every dataset's presence, type, shape and checksum. Every
// decision is agreed by all ranks; problems are reported on rank 0's stderr as "checkpoint:
// <file>: <what>" (e.g. "dataset /params/wte: checksum mismatch (stored 0x..., computed 0x...)").
// The model config must be the run's (arch and every size), and so must the optimizer kind: another
// one is a UsageError, also from load_latest.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/model/config.hpp"
#include "mpitrain/model/params.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"
#include "mpitrain/runtime/fault.hpp"
#include "mpitrain/runtime/grid.hpp"

namespace mpitrain {

inline constexpr int64_t kCheckpointFormatVersion = 3;
inline constexpr int64_t kManifestChecksumVersion = 3;  // the first whose /manifest has a checksum

// Everything a checkpoint says besides the tensors. Every rank passes the same values to save.
struct CheckpointManifest {
  int64_t format_version = kCheckpointFormatVersion;  // set by save
  int64_t step = 0;                                   // optimizer steps done
  uint64_t consumed_samples = 0;                      // samples of the global order used so far
  // The whole RNG state: every random stream is derived from (seed, stream number) alone
  // (runtime/rng.hpp), so the seed and the step/sample counters reproduce all of them.
  uint64_t seed = 0;
  int64_t adam_steps = 0;  // the optimizer's step count (Adam's bias correction)
  // Version 2 on (version 1 files read as adamw, no overflow seen):
  OptimizerKind optimizer = OptimizerKind::AdamW;  // set by save from the CheckpointState
  double loss_scale = 1.0;                         // the dynamic loss scale; 1.0 for fp32 training
  int64_t loss_scale_clean_steps = 0;  // steps since the last overflow (the scaler's counter)
  int64_t skipped_steps = 0;           // optimizer steps skipped for inf/nan gradients so far
  double val_loss = std::numeric_limits<double>::quiet_NaN();  // last validation loss; NaN: none
  ModelConfig model;
  // The writer's layout (for information: any layout can load it).
  GridShape layout;
  std::string pp_layers;  // blocks per stage as given ("" = balanced)
  int64_t global_batch_size = 0, micro_batch_size = 0, seq_len = 0;
  std::string build_id;   // set by save: build_id()
  std::string wall_time;  // set by save: rank 0's clock, ISO 8601 UTC
  // The training data (Dataset::record: "<weight> <tokens> <path>" a line); "" = not recorded
  // (files written before it: the attribute `data` is absent, and a resume does not compare).
  std::string data;
  // The sample order's --shuffle, "true" or "false", which a resume keeps unless given; "" = not
  // recorded (files written before it: the attribute `shuffle` is absent).
  std::string shuffle;
  // The run's precision, optimizer hyper-parameters, lr schedule and MoE aux-loss form
  // (train/kept_settings.hpp), which a resume keeps unless given; "" = not recorded (files
  // written before it).
  std::string settings;
  // The lr schedule's length in steps (LrSchedule::total_steps), which a resume keeps; 0 = not
  // recorded (files written before it: the attribute `lr_decay_steps` is absent).
  int64_t lr_decay_steps = 0;
  // A mixture-of-experts run's routing loss weights (--moe-aux-loss-coef, --moe-z-loss-coef),
  // which a resume keeps unless given; negative = not recorded (dense models, and files written
  // before them: the attributes are absent).
  double moe_aux_loss_coef = -1, moe_z_loss_coef = -1;
  // A --moe-expert-bias model's router biases (MoE layer i's expert e at i x n_experts + e),
  // which training updates after every step; empty for every other model.
  std::vector<float> expert_bias;
};

// The buffers one rank saves or loads, each compact over ranges of the layout's flat buffer
// (parallel/shard_ranges.hpp): params over params_held (the whole buffer, or under ZeRO-3 this
// rank's piece of every unit), the optimizer's master and state over its owned ranges.
// Save: /params from master, the state from state; only writers write, each the owned part of
// every tensor's primary copy (the writers' owned ranges must not overlap: dp rank 0 alone
// without ZeRO, every dp rank with ZeRO). Load: params for each tensor's part in params_held
// (owned must lie inside it), the state for the owned part; a separate master then takes its
// values from params and params is rounded to `precision`, as the optimizer keeps them.
struct CheckpointState {
  const ModelConfig& config;
  const ParamLayout& layout;  // this rank's shard
  float* params;              // params_held.size() floats
  ShardRanges params_held;
  ShardRanges owned;
  float* master;  // owned.size() floats; unless separate_master, master_view of params
  bool separate_master;
  OptimizerKind optimizer;
  std::vector<float*> state;  // in state_names(optimizer) order, owned.size() floats each
  Precision precision;
  bool writer;
  // Under expert parallelism the ep-split expert tensors (ParamTensor::ep_split) are written by
  // these ranks instead (expert-dp rank 0: one per ep rank), so each expert piece once.
  bool expert_writer = false;
};

// Where the owned elements lie in params (compact over params_held) when they lie there back
// to back, as one block: the fp32 master that is no buffer of its own. nullptr otherwise (e.g.
// ZeRO-2's unit pieces of a whole buffer) or when params is.
float* master_view(float* params, const ShardRanges& params_held, const ShardRanges& owned);

// The state of `optimizer` (over params, compact over params_held of `layout`) for saving and
// loading; its master is separate unless it is master_view of params. writer: without ZeRO
// data-parallel rank 0, with ZeRO every rank; expert_writer: see CheckpointState.
CheckpointState checkpoint_state(const ModelConfig& config, const ParamLayout& layout,
                                 float* params, ShardRanges params_held, Optimizer& optimizer,
                                 bool writer, bool expert_writer = false);

class CheckpointStore {
 public:
  // dir: the checkpoints directory (created on first save). world: every rank of the run, all of
  // which take part in every call. keep_last: step checkpoints kept, 0 = all.
  CheckpointStore(std::string dir, const MpiComm& world, int keep_last = 0, FaultPlan faults = {});

  const std::string& dir() const { return dir_; }
  const MpiComm& world() const { return world_; }
  int keep_last() const { return keep_last_; }
  const FaultPlan& faults() const { return faults_; }

  // Commits step-<m.step>/, points `latest` at it, prunes. Returns the committed directory.
  std::string save(const CheckpointManifest& m, const CheckpointState& s);
  // Commits <dir>/<name>/ (e.g. "best"), replacing an existing one; `latest` is not touched.
  std::string save_as(const std::string& name, const CheckpointManifest& m,
                      const CheckpointState& s);

  // The newest valid checkpoint into s: the one `latest` names, else step-* newest first (damaged
  // ones reported on rank 0 and skipped; *.tmp never looked at). nullopt when there is none.
  // When there are checkpoints but every one is damaged: UsageError naming them (nothing is
  // removed, so that an operator can look before a fresh start writes over them), unless
  // fresh_over_damaged (--overwrite), then nullopt. A `latest` that is not a regular file (a
  // directory, a link, a FIFO: nothing the store writes) is a UsageError, from load too.
  // Both loads may have overwritten s's buffers when they fail or return nullopt.
  std::optional<CheckpointManifest> load_latest(const CheckpointState& s,
                                                bool fresh_over_damaged = false);
  // Whether load_latest(s, fresh_over_damaged) either loads a checkpoint or throws, never
  // returning nullopt: there is a checkpoint to try and no fresh start over damaged ones (found
  // on rank 0, the same answer on every rank). The UsageError of a `latest` that is not a regular
  // file, as load_latest's.
  bool load_latest_loads_or_stops(bool fresh_over_damaged);
  // The checkpoint in directory `path` (or `path`.old, see above); UsageError "cannot resume
  // from <path>: <file>: <what>" if it is missing or damaged.
  CheckpointManifest load(const std::string& path, const CheckpointState& s);

 private:
  std::string commit(const std::string& name, const CheckpointManifest& m,
                     const CheckpointState& s);
  // Runs steps (every one agreed by all ranks); a failure is rethrown as AgreedError
  // "checkpoint <name>: <cause>; the newest checkpoint is <saved_>", rank 0 having removed
  // leftover ("" none) as far as it could.
  void as_agreed(const std::string& name, const std::function<void()>& steps,
                 const std::string& leftover);

  std::string dir_;
  const MpiComm& world_;
  int keep_last_;
  FaultPlan faults_;
  std::string saved_;  // the last checkpoint this store committed ("" none yet)
};

}  // namespace mpitrain
