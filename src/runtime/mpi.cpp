#include "mpitrain/runtime/mpi.hpp"

#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: MPIX_CUDA_AWARE_SUPPORT
#endif

#include <cstdlib>
#include <utility>

namespace mpitrain {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  // Open MPI's non-blocking all-reduce (libnbc) picks, by default, an algorithm that runs large
  // buffers at half the speed of the blocking MPI_Allreduce; the ring algorithm matches it. The
  // data-parallel gradient buckets are non-blocking all-reduces, so default to the ring unless
  // the user chose otherwise (bench/parallel.sh measures the effect). Other MPIs ignore this.
  setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
  // MPI_THREAD_MULTIPLE where MPI has it: the watchdog's thread asks the other ranks' watchdogs
  // where they are while the main thread is blocked in a call (runtime/watchdog.hpp), and the
  // checkpoint writer's thread commits a save while training goes on (ckpt/async_saver.hpp).
  // Only the main thread makes the training calls, so FUNNELED is all the rest needs.
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  if (provided < MPI_THREAD_FUNNELED) MPITRAIN_THROW("MPI does not provide MPI_THREAD_FUNNELED");
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

MpiComm MpiComm::world() { return MpiComm(MPI_COMM_WORLD, false); }

MpiComm::MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiComm::~MpiComm() {
  if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

MpiComm::MpiComm(MpiComm&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)),
      owned_(std::exchange(other.owned_, false)),
      rank_(other.rank_),
      size_(other.size_) {}

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    owned_ = std::exchange(other.owned_, false);
    rank_ = other.rank_;
    size_ = other.size_;
  }
  return *this;
}

MpiComm MpiComm::split(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color, key, &out));
  MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return MpiComm(out, true);
}

std::optional<MpiComm> MpiComm::split_optional(int color, int key) const {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out));
  if (out == MPI_COMM_NULL) return std::nullopt;
  MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return MpiComm(out, true);
}

MpiComm MpiComm::split_shared() const {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &out));
  MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return MpiComm(out, true);
}

MpiComm MpiComm::dup() const {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(comm_, &out));
  MPI_CHECK(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN));
  return MpiComm(out, true);
}

std::vector<int> world_ranks_of(MPI_Comm comm) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  int size = 0, rc = MPI_Comm_size(comm, &size);
  std::vector<int> ranks(size), out(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(comm, &group);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_group(MPI_COMM_WORLD, &world);
  if (rc == MPI_SUCCESS)
    rc = MPI_Group_translate_ranks(group, size, ranks.data(), world, out.data());
  if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  MPI_CHECK(rc);
  return out;
}

bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace mpitrain
