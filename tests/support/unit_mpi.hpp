// MPI for the unit tests (unit_tests, tests/support/unit_main.cpp): a test that calls MPI, or
// code that does, starts it first with start_mpi(); the others never start it. Under ctest each
// test case is a process of its own (gtest_discover_tests), so most of them start no MPI at all.
#pragma once

namespace mpitrain::test {

// MPI_Init (one rank, a singleton) on the first call of the process, in an Open MPI session
// directory of its own: a new one under test-tmp/unit_tests/ beside the test binary (the build
// directory), so that tests started at the same moment never create the same directory
// (open-mpi/ompi#8510). Later calls do nothing; MPI ends when main returns.
void start_mpi();

}  // namespace mpitrain::test
