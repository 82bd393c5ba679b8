// Collectives over a group of ranks, whatever carries them.
//
// The trainer talks to its process groups only through this interface: MpiCommunicator (host
// memory, any backend) now; an NCCL one for device memory later. Counts are element counts and
// may exceed INT_MAX (implementations split large calls).
#pragma once

#include <cstddef>
#include <cstdint>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

enum class ReduceOp { Sum, Max, Min };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with the reduction of all ranks' data.
  virtual void all_reduce(float* data, size_t n, ReduceOp op) = 0;
  virtual void all_reduce(double* data, size_t n, ReduceOp op) = 0;
  virtual void all_reduce(int64_t* data, size_t n, ReduceOp op) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MpiComm comm) : comm_(std::move(comm)) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  const MpiComm& mpi() const { return comm_; }

  void all_reduce(float* data, size_t n, ReduceOp op) override;
  void all_reduce(double* data, size_t n, ReduceOp op) override;
  void all_reduce(int64_t* data, size_t n, ReduceOp op) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;

 private:
  MpiComm comm_;
};

}  // namespace mpitrain
