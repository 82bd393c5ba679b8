// Writing one checkpoint file: every rank, collectively, each writer the owned part of every
// tensor's primary copy. Any thread: every HDF5 call holds lock_hdf5(), let go between datasets
// so that the main thread's token reads wait for one dataset at most.
//
// Every collective HDF5 call is agreed on before the next (agree_within): where one rank's write
// fails (a full disk: the aggregator's MPI-IO write fails, the others' succeed), no rank goes on
// into a collective that the failing one skips, and every rank closes the file with the others.
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"

namespace mpitrain {

namespace {

// The file's size at most: every group's float32 tensor data, and HDF5's metadata (measured
// 36 KB for 81 datasets, about 450 B each; taken as 2 KiB each and 64 KiB).
uint64_t file_bytes_at_most(const ParamLayout& full, size_t groups) {
  const uint64_t datasets = full.tensors().size() * groups;
  return static_cast<uint64_t>(full.total()) * groups * sizeof(float) + datasets * 2048 +
         64 * 1024;
}

// Why writing path failed, as the system would say it: HDF5's MPI-IO driver reports a short
// write without its errno. The directory gone (ENOENT), the file system too full for the file
// (ENOSPC), else HDF5's own text.
std::string write_failure(const std::string& path, uint64_t bytes, const std::string& hdf5) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return file_error_text(errno, "writing", path);
  struct statvfs fs_info {};
  if (::statvfs(dir.c_str(), &fs_info) == 0 &&
      static_cast<double>(fs_info.f_bavail) * fs_info.f_frsize < static_cast<double>(bytes))
    return file_error_text(ENOSPC, "writing", path);
  return "cannot write " + path + ": " + hdf5;
}

}  // namespace

void write_checkpoint_file(const std::string& path, const std::string& save,
                           const MpiComm& world, const CheckpointManifest& m,
                           const CheckpointState& s, const FaultPlan& faults) {
  std::unique_lock<std::mutex> hdf5 = lock_hdf5();  // first: held until every handle is closed
  const ParamLayout full(s.config);
  const std::vector<std::string> groups = checkpoint_groups(s.optimizer);
  const uint64_t bytes = file_bytes_at_most(full, groups.size());
  // Per tensor (by global index): its owned part and the part's selections. Only writers
  // write, and only the copies that count once.
  std::vector<TensorParts> parts;
  std::vector<Selection> sels;
  agree_on(world, "checkpoint layout", [&] {
    parts = tensor_parts(full, s);
    for (const ParamTensor& whole : full.tensors()) {
      TensorParts& p = parts[whole.global_index];
      const bool writes = p.t && p.t->ep_split ? s.expert_writer : s.writer;
      if (!writes || (p.t && !p.t->primary)) p = {};
      sels.push_back(select_range(whole, p.t, p.owned.a, p.owned.b));
    }
  });
  const H5Handle fapl = mpio_file_access(world.get());
  const H5Handle dxpl = collective_transfer(), dcpl = no_fill_creation();
  std::vector<const float*> buffers = {s.master};  // each group's, compact over owned
  buffers.insert(buffers.end(), s.state.begin(), s.state.end());
  const float unused = 0.0f;  // the buffer of an empty selection

  // fn's HDF5 calls under the lock; the agreement without it (fn lets it go when done).
  const auto agreed = [&](const std::function<void()>& fn) {
    agree_within(world, save, "", [&] {
      if (!hdf5.owns_lock()) hdf5.lock();
      try {
        fn();
      } catch (const Error& e) {
        throw Error(write_failure(path, bytes, e.what()));
      }
      hdf5.unlock();
    });
    if (!hdf5.owns_lock()) hdf5.lock();
  };
  H5Handle file, group;
  std::vector<H5Handle> dsets;  // [group][tensor], kept open for the checksums
  try {
    agreed([&] { file = create_file(path, fapl.get()); });
    agree_within(world, save, "", [&] {
      if (world.rank() == 0) reserve_space(path, bytes);
    });
    faults.at("reserved", world.rank(), m.step);
    std::vector<uint64_t> sums;
    for (size_t g = 0; g < groups.size(); ++g) {
      agreed([&] {
        group = H5Handle(H5_CHECK(
            H5Gcreate2(file.get(), groups[g].c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
      });
      for (const ParamTensor& whole : full.tensors()) {
        const TensorParts& p = parts[whole.global_index];
        const auto [a, b, at] = p.owned;
        const Selection& sel = sels[whole.global_index];
        const float* data = a < b ? buffers[g] + at : &unused;
        agreed([&] {
          const std::vector<uint64_t> dims(whole.global_shape.begin(), whole.global_shape.end());
          dsets.push_back(
              create_dataset(group.get(), whole.name, H5T_IEEE_F32LE, dims, dcpl.get()));
          H5_CHECK(H5Dwrite(dsets.back().get(), H5T_NATIVE_FLOAT, sel.memory.get(),
                            sel.file.get(), dxpl.get(), data));
        });
        sums.push_back(a < b ? range_checksum(*p.t, data, a, b) : 0);
      }
      group = H5Handle();
    }
    // Sums wrap mod 2^64 alike on every rank.
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()),
                            MPI_UINT64_T, MPI_SUM, world.get()));
    agreed([&] {
      for (size_t k = 0; k < dsets.size(); ++k)
        write_attribute_uint64(dsets[k].get(), kChecksumAttribute, sums[k]);
      dsets.clear();
      write_manifest(file.get(), m, world.rank() == 0);
    });
    faults.at("write", world.rank(), m.step);
    agreed([&] { file.close(); });
  } catch (const Error& e) {  // agreed: every rank closes what it has open, with the others
    try {
      agree_within(world, save, e.what(), [&] {
        if (!hdf5.owns_lock()) hdf5.lock();
        dsets.clear();
        group = H5Handle();
        // The close flushes HDF5's metadata, which needs space: the data of a file that is
        // removed anyway give it back.
        std::error_code ignored;
        if (world.rank() == 0) std::filesystem::resize_file(path, 0, ignored);
        file.close();
      });
    } catch (const Error& close) {
      // HDF5 keeps a file whose close failed in its tables and crashes on it when MPI ends:
      // the last resort.
      if (world.rank() == 0)
        std::fprintf(stderr, "%s: %s (and closing it: %s; ending the job)\n", save.c_str(),
                     e.what(), close.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    }
    throw;
  }
}

}  // namespace mpitrain
