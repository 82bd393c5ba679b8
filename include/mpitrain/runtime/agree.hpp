// Collective error agreement for the set-up phase.
//
// Set-up steps can fail on some ranks only (a file one rank reads, a check one rank makes). If
// every rank ran on alone, the others would hang in their next collective. all_or_none() runs a
// step on every rank and then agrees: if any rank threw, every rank throws the same exception
// type with the message of the lowest failing rank, so rank 0 can print it once and all exit.
#pragma once

#include <functional>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

void all_or_none(const MpiComm& comm, const std::function<void()>& step);

// A failure that every rank of the world has agreed on and throws together (a checkpoint's write
// that failed: ckpt/checkpoint.hpp). main prints it once (rank 0) and every rank exits 1 without
// MPI_Abort, so that what holds the run (the out-dir lock) is released on the way out.
class AgreedError : public Error {
 public:
  using Error::Error;
};

}  // namespace mpitrain
