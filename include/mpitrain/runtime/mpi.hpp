// MPI lifetime and handles, RAII.
//
//   MpiRuntime  — MPI_Init_thread / MPI_Finalize for the whole program (one per process).
//   MpiComm     — owns an MPI communicator (MPI_Comm_free on destruction); MPI_COMM_WORLD is
//                 wrapped without ownership. Every MPI call is checked with MPI_CHECK, which
//                 throws with MPI's own error string.
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

std::string mpi_error_string(int code);

}  // namespace mpitrain

#define MPI_CHECK(call)                                                                     \
  do {                                                                                      \
    int mpitrain_mpi_rc_ = (call);                                                          \
    if (mpitrain_mpi_rc_ != MPI_SUCCESS)                                                    \
      MPITRAIN_THROW(std::string(#call) + ": " + ::mpitrain::mpi_error_string(mpitrain_mpi_rc_)); \
  } while (0)

namespace mpitrain {

class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);  // MULTIPLE if offered, at least FUNNELED; errors return
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
};

class MpiComm {
 public:
  static MpiComm world();                 // not owned
  explicit MpiComm(MPI_Comm comm, bool owned = true);
  ~MpiComm();
  MpiComm(MpiComm&& other) noexcept;
  MpiComm& operator=(MpiComm&& other) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

  MpiComm split(int color, int key) const;  // MPI_Comm_split; color >= 0
  // As split, but a negative color joins no group (MPI_UNDEFINED) and yields nothing.
  std::optional<MpiComm> split_optional(int color, int key) const;
  MpiComm split_shared() const;             // ranks on the same node (MPI_Comm_split_type)
  MpiComm dup() const;                      // the same ranks, a context of its own

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
  int rank_ = 0;
  int size_ = 1;
};

// The members of comm as ranks of MPI_COMM_WORLD, in comm's rank order.
std::vector<int> world_ranks_of(MPI_Comm comm);

// The MPI library takes device buffers (CUDA-aware): Open MPI built with CUDA
// (MPIX_CUDA_AWARE_SUPPORT) and with it enabled now (MPIX_Query_cuda_support). False for an MPI
// that cannot say.
bool mpi_cuda_aware();

}  // namespace mpitrain
