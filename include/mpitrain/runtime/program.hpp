// The main() of every program of the project, one way to fail.
// mpi_program: MPI up, run;
//   UsageError from run (agreed on by every rank, e.g. through all_or_none): rank 0 prints
//     "<name>: error: <what>" and every rank exits 2.
//   AgreedError (runtime/agree.hpp): the same, exit 1.
//   Any other exception: each rank prints "<name>: rank <r>: <what>", then MPI_Abort with 1.
// tool_program (no MPI): UsageError prints "<name>: error: <what>", exit 2; any other exception
//   "<name>: <what>", exit 1.
#pragma once

#include <functional>

namespace mpitrain {

int mpi_program(const char* name, int argc, char** argv,
                const std::function<int(int argc, char** argv)>& run);
int tool_program(const char* name, int argc, char** argv,
                 const std::function<int(int argc, char** argv)>& run);

}  // namespace mpitrain
