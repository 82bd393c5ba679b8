// Internals shared by the checkpoint sources: tensor pieces as runs and hyperslabs, the parallel
// file's writer and reader, and the durable file-system steps of the commit.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/io/durable.hpp"
#include "mpitrain/io/hdf5.hpp"

namespace mpitrain {

// The file and memory selections that move the elements [a, b) (local row-major indices) of t,
// this rank's part of the full tensor `whole`: in the file their places in the full shape, in
// memory b - a contiguous floats (element a first). t == nullptr or a >= b: nothing, for a rank
// that only takes part in a collective call. Local work only, so it is done and agreed on for
// all tensors before the first collective transfer.
struct Selection {
  H5Handle file, memory;
};
Selection select_range(const ParamTensor& whole, const ParamTensor* t, uint64_t a, uint64_t b);

// The local elements [a, b) of a tensor that some ranges hold, at compact offset `at` of the
// buffer over them (a == b when none).
struct TensorPart {
  uint64_t a = 0, b = 0;
  size_t at = 0;
};
// Per tensor of the whole model (by global index): this rank's copy (nullptr if none) and its
// parts in s.params_held and in s.owned. Error if s has the wrong number of state buffers, holds
// a tensor twice, or a range that is not in the layout or owns an element it does not hold.
struct TensorParts {
  const ParamTensor* t = nullptr;
  TensorPart held, owned;
};
std::vector<TensorParts> tensor_parts(const ParamLayout& full, const CheckpointState& s);

// Runs step on every rank; if it failed on any, every rank throws Error("<what>: <message of
// the lowest failing rank>") — never UsageError: a bad file is damage, not bad input.
void agree_on(const MpiComm& world, const std::string& what, const std::function<void()>& step);

// How long a rank that knows of a failure waits for the others to agree on it: longer, and one
// of them is stuck inside HDF5 in a collective call that the failure left unmatched.
inline constexpr double kAgreeDeadlineSeconds = 60;

// A step of a checkpoint's write, agreed: step runs on every rank, then every rank learns whether
// it failed anywhere and, if so, throws Error(<message of the lowest failing rank>). A rank whose
// step failed, or that knows the save failed already (failure: that message; "" none), waits
// kAgreeDeadlineSeconds at most for the others; past it, the last resort: it prints
// "<save>: <message> (the other ranks did not agree ...)" and ends the job (MPI_Abort, exit 1).
void agree_within(const MpiComm& world, const std::string& save, const std::string& failure,
                  const std::function<void()>& step);

// Collective: creates path, reserves its size (rank 0, io/durable.hpp reserve_space), writes the
// manifest, every dataset and its checksum and closes it, each collective HDF5 call agreed on
// (agree_within) before the next: a failure anywhere is every rank's Error, which names the cause
// as the system does ("No space left on device writing <path> (...)"), with the file closed on
// every rank. save names the checkpoint in a last-resort message ("checkpoint step-00000020").
// Fault phases: "reserved" once the file is created and its space reserved, "write" after the
// data are written, before the close.
void write_checkpoint_file(const std::string& path, const std::string& save,
                           const MpiComm& world, const CheckpointManifest& m,
                           const CheckpointState& s, const FaultPlan& faults);
// Collective: reads and verifies <dir>/checkpoint.h5 into s. Error (agreed) if it is damaged,
// UsageError (on every rank) if it holds another model.
CheckpointManifest read_checkpoint(const std::string& dir, const MpiComm& world,
                                   const CheckpointState& s);

// The checks that the loader and ckpt-inspect share (one rank, no MPI):
// Where load_latest looks, in order: the directory `latest` names (a plain name in dir), then
// the step directories newest first. problem: set when `latest` names no checkpoint (the scan
// alone then counts). UsageError when `latest` is not a regular file (see load_latest).
std::vector<std::string> checkpoint_candidates(const std::string& dir, std::string& problem);
// Error unless a manifest read from a file in directory dir fits it: a step-N (or step-N.old)
// directory holds the checkpoint of step N.
void check_step_matches_dir(const CheckpointManifest& m, const std::string& dir);
// The tensor dataset `path` (e.g. "/params/wte") of file, as the loader reads it: float32, with
// a checksum (into stored), of the full logical shape when shape is given. Error naming it.
H5Handle open_tensor(hid_t file, const std::string& path, const std::vector<uint64_t>* shape,
                     uint64_t& stored);

// Text for messages and tables: "0x00c0ffee00c0ffee" (shapes: shape_text, io/hdf5.hpp).
std::string hex_text(uint64_t x);

// ---- durable file-system steps (one rank; the plain ones in io/durable.hpp) -----------------
// Renames tmp to final (an existing final first to final.old, removed once final is in place)
// and fsyncs their directory.
void replace_dir(const std::string& tmp, const std::string& final);
// path if it is a directory, else path.old if that is (a replace cut short), else "".
std::string resolve_dir(const std::string& path);

}  // namespace mpitrain
