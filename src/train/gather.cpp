#include "mpitrain/train/gather.hpp"

#include "mpitrain/io/hdf5.hpp"

namespace mpitrain {

ModelShard shard_of(const GridShape& shape, const std::vector<int>& stage_first_layer, int tp_rank,
                    int stage, int ep_rank) {
  ModelShard s;
  s.tp = shape.tp;
  s.tp_rank = tp_rank;
  s.ep = shape.ep;
  s.ep_rank = ep_rank;
  s.layer_begin = stage_first_layer[stage];
  s.layer_end = stage_first_layer[stage + 1];
  s.first_stage = stage == 0;
  s.last_stage = stage == shape.pp - 1;
  return s;
}

std::vector<float> gather_parameters(const Model<float>& model, const float* stage,
                                     const Grid& grid, const std::vector<int>& stage_first_layer,
                                     const MpiComm& world) {
  const ModelConfig& cfg = model.config();
  std::vector<float> host;  // a copy of this rank's parameters when they live on a device
  const float* params = stage ? stage
                        : model.backend().host_memory() ? model.params().full()
                                                        : nullptr;
  if (params == nullptr) {  // on a device, or stored in 2 bytes: widened to fp32 (exact)
    host.resize(model.num_params());
    model.backend().download(host.data(), model.params(), host.size());
    params = host.data();
  }
  if (world.rank() != 0) {
    if (grid.dp_rank() < grid.shape().ep && grid.cp_rank() == 0)  // dp rank 0, or an ep piece's
      for (const ParamTensor& t : model.layout().tensors())
        if (t.primary && (grid.dp_rank() == 0 || t.ep_split))
          MPI_CHECK(MPI_Send(params + t.offset, static_cast<int>(t.numel), MPI_FLOAT, 0,
                             t.global_index, world.get()));
    return {};
  }
  const ParamLayout full(cfg);
  std::vector<float> out(full.total());
  std::vector<float> piece;
  const GridShape& shape = grid.shape();
  for (int stage = 0; stage < shape.pp; ++stage) {
    for (int r = 0; r < shape.tp * shape.ep; ++r) {  // tp rank r % tp of ep rank r / tp
      const int e = r / shape.tp, source = Grid::world_rank(shape, e, r % shape.tp, stage);
      const ParamLayout held(cfg, shard_of(shape, stage_first_layer, r % shape.tp, stage, e));
      for (const ParamTensor& t : held.tensors()) {
        if (!t.primary || (e > 0 && !t.ep_split)) continue;
        const float* local = params + t.offset;
        if (source != 0) {
          piece.resize(t.numel);
          MPI_CHECK(MPI_Recv(piece.data(), static_cast<int>(t.numel), MPI_FLOAT, source,
                             t.global_index, world.get(), MPI_STATUS_IGNORE));
          local = piece.data();
        }
        put_shard(t, local, out.data() + full.tensors()[t.global_index].offset);
      }
    }
  }
  return out;
}

void write_parameters_hdf5(const std::string& path, const ModelConfig& config,
                           const std::vector<float>& params) {
  const ParamLayout full(config);
  H5Handle file = create_file(path);
  for (const ParamTensor& t : full.tensors()) {
    const std::vector<uint64_t> dims(t.global_shape.begin(), t.global_shape.end());
    H5Handle dset = create_dataset(file.get(), t.name, H5T_NATIVE_FLOAT, dims);
    write_all(dset.get(), H5T_NATIVE_FLOAT, params.data() + t.offset);
  }
  file.close();
}

}  // namespace mpitrain
