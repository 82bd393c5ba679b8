#include "mpitrain/runtime/agree.hpp"

#include <string>

namespace mpitrain {

void all_or_none(const MpiComm& comm, const std::function<void()>& step) {
  int kind = 0;  // 0 ok, 1 usage error, 2 other error
  std::string message;
  try {
    step();
  } catch (const UsageError& e) {
    kind = 1;
    message = e.what();
  } catch (const std::exception& e) {
    kind = 2;
    message = e.what();
  }
  // The lowest failing rank speaks for all.
  int mine[2] = {kind ? comm.rank() : comm.size(), kind};
  int first[2] = {0, 0};
  MPI_CHECK(MPI_Allreduce(mine, first, 1, MPI_2INT, MPI_MINLOC, comm.get()));
  const int failing_rank = first[0];
  if (failing_rank == comm.size()) return;
  int header[2] = {kind, static_cast<int>(message.size())};
  MPI_CHECK(MPI_Bcast(header, 2, MPI_INT, failing_rank, comm.get()));
  message.resize(header[1]);
  MPI_CHECK(MPI_Bcast(message.data(), header[1], MPI_CHAR, failing_rank, comm.get()));
  if (header[0] == 1) throw UsageError(message);
  throw Error(message);
}

}  // namespace mpitrain
