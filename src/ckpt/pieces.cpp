// Where a rank's part of a tensor lies in the full tensor: runs, hyperslabs, agreement.
#include "ckpt_io.hpp"
#include "mpitrain/runtime/agree.hpp"

namespace mpitrain {

std::vector<const ParamTensor*> held_tensors(const ParamLayout& full, const ParamLayout& local) {
  std::vector<const ParamTensor*> held(full.tensors().size(), nullptr);
  for (const ParamTensor& t : local.tensors()) {
    const ParamTensor*& slot = held.at(t.global_index);
    if (slot) MPITRAIN_THROW("the layout holds tensor " + t.name + " twice");
    slot = &t;
  }
  return held;
}

Selection select_pieces(const ParamTensor& whole, const ParamTensor* t) {
  const std::vector<hsize_t> full(whole.global_shape.begin(), whole.global_shape.end());
  Selection s{
      H5Handle(H5_CHECK(H5Screate_simple(static_cast<int>(full.size()), full.data(), nullptr))),
      {}};
  if (!t) {  // an empty selection of an (arbitrary) one-element memory space
    const hsize_t one = 1;
    s.memory = H5Handle(H5_CHECK(H5Screate_simple(1, &one, nullptr)));
    H5_CHECK(H5Sselect_none(s.file.get()));
    H5_CHECK(H5Sselect_none(s.memory.get()));
    return s;
  }
  const std::vector<hsize_t> local(t->shape.begin(), t->shape.end());
  s.memory =
      H5Handle(H5_CHECK(H5Screate_simple(static_cast<int>(local.size()), local.data(), nullptr)));
  if (t->split_dim < 0) return s;  // whole tensor on both sides (the default selections)
  // HDF5 pairs the selected elements of both sides in row-major order: the pieces must come in
  // the same order along the split dimension on both sides.
  for (size_t i = 1; i < t->pieces.size(); ++i)
    if (t->pieces[i].global_start <= t->pieces[i - 1].global_start ||
        t->pieces[i].local_start <= t->pieces[i - 1].local_start)
      MPITRAIN_THROW("tensor " + t->name + ": pieces out of order");
  H5_CHECK(H5Sselect_none(s.file.get()));
  H5_CHECK(H5Sselect_none(s.memory.get()));
  std::vector<uint64_t> file_start(local.size(), 0), mem_start(local.size(), 0);
  std::vector<uint64_t> count(full.begin(), full.end());
  for (const ShardPiece& p : t->pieces) {
    file_start[t->split_dim] = p.global_start;
    mem_start[t->split_dim] = p.local_start;
    count[t->split_dim] = p.length;
    select_block(s.file.get(), file_start, count);
    select_block(s.memory.get(), mem_start, count);
  }
  // Checked here, before any collective call, rather than by HDF5 inside one.
  if (H5_CHECK(H5Sselect_valid(s.file.get())) <= 0 ||
      H5_CHECK(H5Sselect_valid(s.memory.get())) <= 0 ||
      H5_CHECK(H5Sget_select_npoints(s.file.get())) != static_cast<hssize_t>(t->numel) ||
      H5_CHECK(H5Sget_select_npoints(s.memory.get())) != static_cast<hssize_t>(t->numel))
    MPITRAIN_THROW("tensor " + t->name + ": its pieces do not fit its shapes");
  return s;
}

void agree_on(const MpiComm& world, const std::string& what, const std::function<void()>& step) {
  all_or_none(world, [&] {
    try {
      step();
    } catch (const std::exception& e) {
      throw Error(what + ": " + e.what());
    }
  });
}

}  // namespace mpitrain
