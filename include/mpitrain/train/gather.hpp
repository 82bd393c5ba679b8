// The whole model in one place: for export, the text sample and comparisons across layouts.
#pragma once

#include <string>
#include <vector>

#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/grid.hpp"

namespace mpitrain {

// What (tp rank, stage, ep rank) of a grid holds, with stage_first_layer from
// pipeline_layer_split.
ModelShard shard_of(const GridShape& shape, const std::vector<int>& stage_first_layer, int tp_rank,
                    int stage, int ep_rank = 0);

// All parameters on world rank 0, in the single-rank layout ParamLayout(config), collected from
// the shards of data-parallel replica 0 (each tensor from its primary holders; under expert
// parallelism the ep-split experts from dp ranks 0 .. ep-1). Empty elsewhere.
// Collective over the world. stage: this rank's whole parameters in host fp32 where the model
// holds none (ZeRO-3: ShardedUnits::gather_whole), else null (the model's are read).
std::vector<float> gather_parameters(const Model<float>& model, const float* stage,
                                     const Grid& grid, const std::vector<int>& stage_first_layer,
                                     const MpiComm& world);

// Writes full parameters (single-rank layout) to an HDF5 file: one dataset per tensor, named as
// in params.hpp, with its logical shape.
void write_parameters_hdf5(const std::string& path, const ModelConfig& config,
                           const std::vector<float>& params);

}  // namespace mpitrain
