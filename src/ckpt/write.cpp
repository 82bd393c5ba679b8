// Writing one checkpoint file: every rank, collectively, each writer the primary pieces of its
// optimizer range.
#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"

namespace mpitrain {

void write_checkpoint_file(const std::string& path, const MpiComm& world,
                           const CheckpointManifest& m, const CheckpointState& s,
                           const FaultPlan& faults) {
  const ParamLayout full(s.config);
  const std::vector<std::string> groups = checkpoint_groups(s.optimizer);
  // Per tensor (by global index): this rank's part to write, or nullptr, its elements [a, b)
  // and their selections. Only writers write, only their range, and only the copies that count
  // once.
  std::vector<const ParamTensor*> writes;
  std::vector<ElementRange> ranges;
  std::vector<Selection> sels;
  agree_on(world, "checkpoint layout", [&] {
    if (s.state.size() + 1 != groups.size())
      MPITRAIN_THROW("optimizer " + to_string(s.optimizer) + " has " +
                     std::to_string(groups.size() - 1) + " state buffers, not " +
                     std::to_string(s.state.size()));
    writes = held_tensors(full, s.layout);
    for (const ParamTensor& whole : full.tensors()) {
      const ParamTensor*& t = writes[whole.global_index];
      if (!s.writer || (t && !t->primary)) t = nullptr;
      ranges.push_back(t ? in_range(*t, s.lo, s.hi) : ElementRange{0, 0});
      sels.push_back(select_range(whole, t, ranges.back().a, ranges.back().b));
    }
  });
  H5Handle fapl = mpio_file_access(world.get());
  H5Handle file = create_file(path, fapl.get());
  const H5Handle dxpl = collective_transfer(), dcpl = no_fill_creation();
  std::vector<const float*> buffers = {s.master};  // [lo, hi) of each group
  buffers.insert(buffers.end(), s.state.begin(), s.state.end());
  const float unused = 0.0f;  // the buffer of an empty selection

  std::vector<H5Handle> dsets;  // [group][tensor], kept open for the checksums
  std::vector<uint64_t> sums;
  for (size_t g = 0; g < groups.size(); ++g) {
    H5Handle group(
        H5_CHECK(H5Gcreate2(file.get(), groups[g].c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
    for (const ParamTensor& whole : full.tensors()) {
      const ParamTensor* t = writes[whole.global_index];
      const auto [a, b] = ranges[whole.global_index];
      const Selection& sel = sels[whole.global_index];
      const std::vector<uint64_t> dims(whole.global_shape.begin(), whole.global_shape.end());
      H5Handle dset = create_dataset(group.get(), whole.name, H5T_IEEE_F32LE, dims, dcpl.get());
      const float* data = a < b ? buffers[g] + (t->offset + a - s.lo) : &unused;
      H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, sel.memory.get(), sel.file.get(), dxpl.get(),
                        data));
      sums.push_back(a < b ? range_checksum(*t, data, a, b) : 0);
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
