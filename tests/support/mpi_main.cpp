// GoogleTest main for every test binary: MPI around the tests. Rank 0 prints the usual report;
// the other ranks print only their failures, prefixed with their rank.
#include <gtest/gtest.h>

#include <cstdio>

#include "mpitrain/runtime/mpi.hpp"

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  mpitrain::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = mpitrain::MpiComm::world().rank();
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
