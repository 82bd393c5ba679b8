// Writing one checkpoint file: every rank, collectively, each writer the owned part of every
// tensor's primary copy. Any thread: every HDF5 call holds lock_hdf5(), let go between datasets
// so that the main thread's token reads wait for one dataset at most.
#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"

namespace mpitrain {

void write_checkpoint_file(const std::string& path, const MpiComm& world,
                           const CheckpointManifest& m, const CheckpointState& s,
                           const FaultPlan& faults) {
  std::unique_lock<std::mutex> hdf5 = lock_hdf5();  // first: held until every handle is closed
  const ParamLayout full(s.config);
  const std::vector<std::string> groups = checkpoint_groups(s.optimizer);
  // Per tensor (by global index): its owned part and the part's selections. Only writers
  // write, and only the copies that count once.
  std::vector<TensorParts> parts;
  std::vector<Selection> sels;
  agree_on(world, "checkpoint layout", [&] {
    parts = tensor_parts(full, s);
    for (const ParamTensor& whole : full.tensors()) {
      TensorParts& p = parts[whole.global_index];
      if (!s.writer || (p.t && !p.t->primary)) p = {};
      sels.push_back(select_range(whole, p.t, p.owned.a, p.owned.b));
    }
  });
  H5Handle fapl = mpio_file_access(world.get());
  H5Handle file = create_file(path, fapl.get());
  const H5Handle dxpl = collective_transfer(), dcpl = no_fill_creation();
  std::vector<const float*> buffers = {s.master};  // each group's, compact over owned
  buffers.insert(buffers.end(), s.state.begin(), s.state.end());
  const float unused = 0.0f;  // the buffer of an empty selection

  std::vector<H5Handle> dsets;  // [group][tensor], kept open for the checksums
  std::vector<uint64_t> sums;
  for (size_t g = 0; g < groups.size(); ++g) {
    H5Handle group(
        H5_CHECK(H5Gcreate2(file.get(), groups[g].c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    for (const ParamTensor& whole : full.tensors()) {
      const TensorParts& p = parts[whole.global_index];
      const auto [a, b, at] = p.owned;
      const Selection& sel = sels[whole.global_index];
      const std::vector<uint64_t> dims(whole.global_shape.begin(), whole.global_shape.end());
      H5Handle dset = create_dataset(group.get(), whole.name, H5T_IEEE_F32LE, dims, dcpl.get());
      const float* data = a < b ? buffers[g] + at : &unused;
      H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, sel.memory.get(), sel.file.get(), dxpl.get(),
                        data));
      sums.push_back(a < b ? range_checksum(*p.t, data, a, b) : 0);
      dsets.push_back(std::move(dset));
      hdf5.unlock();
      hdf5.lock();
    }
  }
  // Sums wrap mod 2^64 alike on every rank.
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T,
                          MPI_SUM, world.get()));
  for (size_t k = 0; k < dsets.size(); ++k)
    write_attribute_uint64(dsets[k].get(), kChecksumAttribute, sums[k]);
  dsets.clear();
  write_manifest(file.get(), m);
  faults.at("write", world.rank(), m.step);
  file.close();
}

}  // namespace mpitrain
