// Writing one checkpoint file: every rank, collectively, each its primary pieces.
#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"

namespace mpitrain {

void write_checkpoint_file(const std::string& path, const MpiComm& world,
                           const CheckpointManifest& m, const CheckpointState& s,
                           const FaultPlan& faults) {
  const ParamLayout full(s.config);
  // Per tensor (by global index): this rank's part to write, or nullptr, and its selections.
  // Only data-parallel replica 0 writes, and only the copies that count once.
  std::vector<const ParamTensor*> writes;
  std::vector<Selection> sels;
  agree_on(world, "checkpoint layout", [&] {
    writes = held_tensors(full, s.layout);
    for (const ParamTensor& whole : full.tensors()) {
      const ParamTensor*& t = writes[whole.global_index];
      if (!s.dp_writer || (t && !t->primary)) t = nullptr;
      sels.push_back(select_pieces(whole, t));
    }
  });
  H5Handle fapl = mpio_file_access(world.get());
  H5Handle file = create_file(path, fapl.get());
  const H5Handle dxpl = collective_transfer(), dcpl = no_fill_creation();
  float* const buffers[3] = {s.params, s.adam_m, s.adam_v};
  const float unused = 0.0f;  // the buffer of an empty selection

  std::vector<H5Handle> dsets;  // [group][tensor], kept open for the checksums
  std::vector<uint64_t> sums;
  for (int g = 0; g < 3; ++g) {
    H5Handle group(
        H5_CHECK(H5Gcreate2(file.get(), kStateGroups[g], H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    for (const ParamTensor& whole : full.tensors()) {
      const ParamTensor* t = writes[whole.global_index];
      const Selection& sel = sels[whole.global_index];
      const std::vector<uint64_t> dims(whole.global_shape.begin(), whole.global_shape.end());
      H5Handle dset = create_dataset(group.get(), whole.name, H5T_IEEE_F32LE, dims, dcpl.get());
      const float* data = t ? buffers[g] + t->offset : &unused;
      H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, sel.memory.get(), sel.file.get(), dxpl.get(),
                        data));
      sums.push_back(t ? shard_checksum(*t, data) : 0);
      dsets.push_back(std::move(dset));
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
