// GoogleTest main for every test binary: MPI around the tests; only rank 0 prints results.
#include <gtest/gtest.h>

#include "mpitrain/runtime/mpi.hpp"

int main(int argc, char** argv) {
  mpitrain::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpitrain::MpiComm::world().rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
