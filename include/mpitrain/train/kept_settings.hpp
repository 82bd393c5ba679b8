// The settings of a run that a resume keeps unless given (CheckpointManifest::settings): the
// precision, the optimizer's hyper-parameters, the learning-rate schedule, an MoE run's
// aux-loss form, document masking and positions, as "name = value" lines by option name, each
// value as run.ini writes it (reads back exactly).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/app/options.hpp"

namespace mpitrain {

// Every kept setting of t, "name = value" a line, in a fixed order.
std::string kept_settings(const TrainConfig& t);

// The (name, value) pairs of kept_settings(t), for run.ini.
std::vector<std::pair<std::string, std::string>> kept_setting_values(const TrainConfig& t);

// One recorded setting's text; nullopt where `recorded` lacks it (older checkpoints: none).
std::optional<std::string> recorded_setting(const std::string& recorded, const std::string& name);

// Takes each recorded setting the user did not give into o.train. Returns a line naming those
// given with another value than the checkpoint's run had ("lr 0.002 (the checkpoint's run:
// 0.001)", joined with ", "), "" where none; UsageError for a line this build cannot read.
std::string take_kept_settings(Options& o, const std::string& recorded);

}  // namespace mpitrain
