// Software agreement at start-up: mixed installations across nodes (another build of the
// trainer, another MPI, HDF5 or BLAS, another configuration file) are a classic cause of silent
// trouble, so every rank compares what it runs before any work.
//
// Fields: build_id (build_id()), mpi (MPI_Get_library_version, first line), hdf5
// (H5get_libversion), openblas (openblas_get_config), config (a 64-bit hash of every resolved
// option). A CUDA build adds its runtime, cuDNN and NCCL versions in local_software().
// One all-reduce of a hash of all fields when they agree; otherwise rank 0 gathers every rank's
// fields and host and every rank throws the same UsageError (exit 2) with a table of the fields
// that differ, each value with the ranks and hosts that have it.
#pragma once

#include <string>
#include <vector>

#include "mpitrain/runtime/fault.hpp"
#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

struct SoftwareField {
  std::string name, value;
};

// This rank's fields. config_text: every option's final value (Options::effective);
// MPITRAIN_FAULT=version:rank=R makes rank R's build id differ.
std::vector<SoftwareField> local_software(const std::string& config_text, const FaultPlan& faults,
                                          int world_rank);

// The table of fields that differ ("" if none): ranks[r] are rank r's fields (same names in the
// same order on every rank), hosts[r] its host.
std::string software_differences(const std::vector<std::vector<SoftwareField>>& ranks,
                                 const std::vector<std::string>& hosts);

// Collective over world: UsageError on every rank, with the table, if any field differs.
void check_software(const MpiComm& world, const std::string& config_text, const FaultPlan& faults);

}  // namespace mpitrain
