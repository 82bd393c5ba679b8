// The checkpoint file format (layout in checkpoint.hpp): names, the manifest's attributes, the
// layout-independent checksum, and the serial inspector behind tools/ckpt_inspect.
//
// Checksum of a dataset = sum over its elements of splitmix64((i << 32) | bits(x_i)) mod 2^64,
// i = the element's row-major index in the full logical tensor, bits = the float32's bit
// pattern. A sum of per-element terms does not depend on who held which element, so each writer
// sums its own pieces and one all-reduce gives the dataset's checksum under any layout.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

inline constexpr const char* kCheckpointFile = "checkpoint.h5";
inline constexpr const char* kManifestGroup = "manifest";
inline constexpr const char* kParamsGroup = "params";
inline constexpr const char* kChecksumAttribute = "checksum";

std::string dataset_path(const std::string& group, const std::string& tensor);  // "/params/wte"
// The tensor groups of a checkpoint of `optimizer`: params, then state_names(optimizer).
std::vector<std::string> checkpoint_groups(OptimizerKind optimizer);
std::string step_dir_name(int64_t step);                         // "step-00000010"
std::optional<int64_t> parse_step_dir(const std::string& name);  // "step-<digits>" -> N

// The checksum of n contiguous elements whose first has full-tensor index first_index.
uint64_t checksum(const float* data, uint64_t first_index, uint64_t n);
// The checksum of the elements [a, b) (local row-major indices) of this rank's part of tensor t;
// data: element a's value, then the rest in order.
uint64_t range_checksum(const ParamTensor& t, const float* data, uint64_t a, uint64_t b);

// The manifest as attributes of /manifest, with a uint64 attribute `checksum`: CRC-32C of the
// fields' text as manifest_fields prints them ("name=value\n" each), which covers the values as
// read. read_manifest: Error naming what is missing or bad: a format version this build does not
// read, a field out of its range (a negative count, counters beyond step, a model that does not
// validate, a micro-batch or seq_len that does not fit), a checksum that is missing (format
// version 3 on) or does not match. Versions 1 and 2 have none (checkpoint.hpp).
// A --moe-expert-bias model's table (CheckpointManifest::expert_bias) is the dataset
// /manifest/expert_bias, float32 (MoE layers, experts), with a `checksum` attribute (the
// dataset checksum above); the printed fields name it by that checksum, so the manifest's covers
// it. In a parallel file every rank creates it, and only where write_tables are its data written.
void write_manifest(hid_t file, const CheckpointManifest& m, bool write_tables);
CheckpointManifest read_manifest(hid_t file);
// Every field as (attribute name, text), in file order: for printing.
std::vector<std::pair<std::string, std::string>> manifest_fields(const CheckpointManifest& m);
// "" when a and b describe the same model (arch and every size), else the differences:
// "n_layer 4 vs 2, d_model 64 vs 32".
std::string model_differences(const ModelConfig& a, const ModelConfig& b);

// ckpt-inspect: path = any form --resume takes (ckpt/resume_source.hpp): a run directory or a
// checkpoints directory (then the checkpoint a resume takes: a committed one newer than
// `latest`'s, else the one `latest` names), a checkpoint directory or its checkpoint.h5. Prints
// the manifest and one row per dataset (name, shape, stored checksum; with verify also the
// recomputed one and OK/MISMATCH/MISSING/BAD) to out. The manifest and datasets are checked as
// the loader checks them, and the checkpoint a checkpoints directory means is the one the loader
// tries first (a `latest` naming none: BAD, then the newest step). Returns 0 (all well), 1 (a mismatch, missing or bad dataset, bad
// manifest or `latest`) or 2 (no readable file at path, e.g. a FIFO, a device, not HDF5; the
// reason on err). Serial HDF5: no MPI job needed.
int inspect_checkpoint(const std::string& path, bool verify, std::ostream& out, std::ostream& err);

}  // namespace mpitrain
