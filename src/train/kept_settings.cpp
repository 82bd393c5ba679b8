#include "mpitrain/train/kept_settings.hpp"

#include <algorithm>
#include <charconv>
#include <iterator>
#include <sstream>
#include <type_traits>
#include <variant>

#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

using Field = std::variant<double TrainConfig::*, int TrainConfig::*, std::string TrainConfig::*,
                           bool TrainConfig::*>;

// What the saved state, the schedule and the objective mean: the optimizer's moments and
// momentum are accumulated under these, and a resume that fell back to a default would go on
// otherwise. An MoE run's aux-loss form is the objective's (dense runs record auto), and so are
// document masking, document positions and the boundary's loss mask.
const std::pair<const char*, Field> kKept[] = {
    {"precision", &TrainConfig::precision},
    {"lr", &TrainConfig::lr},
    {"lr-schedule", &TrainConfig::lr_schedule},
    {"lr-wsd-decay-steps", &TrainConfig::lr_wsd_decay_steps},
    {"lr-wsd-decay-style", &TrainConfig::lr_wsd_decay_style},
    {"warmup-steps", &TrainConfig::warmup_steps},
    {"min-lr-ratio", &TrainConfig::min_lr_ratio},
    {"weight-decay", &TrainConfig::weight_decay},
    {"beta1", &TrainConfig::beta1},
    {"beta2", &TrainConfig::beta2},
    {"adam-eps", &TrainConfig::adam_eps},
    {"momentum", &TrainConfig::momentum},
    {"grad-clip", &TrainConfig::grad_clip},
    {"moe-aux-loss-form", &TrainConfig::moe_aux_loss_form},
    {"moe-expert-bias-rate", &TrainConfig::moe_expert_bias_rate},
    {"document-mask", &TrainConfig::document_mask},
    {"document-positions", &TrainConfig::document_positions},
    {"mask-boundary-loss", &TrainConfig::mask_boundary_loss}};

std::string text_of(const TrainConfig& t, const Field& field) {
  return std::visit(
      [&](auto member) -> std::string {
        const auto& value = t.*member;
        if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>)
          return value;
        else if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>)
          return std::string(value ? "true" : "false");
        else if constexpr (std::is_same_v<std::decay_t<decltype(value)>, int>)
          return std::to_string(value);
        else
          return shortest_text(value);
      },
      field);
}

// Sets t's field from its text; false where the text is not one.
bool set_from(TrainConfig& t, const Field& field, const std::string& text) {
  return std::visit(
      [&](auto member) {
        auto& value = t.*member;
        if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::string>) {
          value = text;
          return !text.empty();
        } else if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>) {
          value = text == "true";
          return text == "true" || text == "false";
        } else {
          const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
          return error == std::errc() && end == text.data() + text.size();
        }
      },
      field);
}

// The recorded lines as (name, value).
std::vector<std::pair<std::string, std::string>> lines_of(const std::string& recorded) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(recorded);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find(" = ");
    require(eq != std::string::npos,
            "the checkpoint's settings hold '" + line + "', not a 'name = value' line");
    out.emplace_back(line.substr(0, eq), line.substr(eq + 3));
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> kept_setting_values(const TrainConfig& t) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [name, field] : kKept) out.emplace_back(name, text_of(t, field));
  return out;
}

std::string kept_settings(const TrainConfig& t) {
  std::string out;
  for (const auto& [name, value] : kept_setting_values(t)) out += name + " = " + value + "\n";
  return out;
}

std::optional<std::string> recorded_setting(const std::string& recorded,
                                            const std::string& name) {
  for (const auto& [key, value] : lines_of(recorded))
    if (key == name) return value;
  return std::nullopt;
}

std::string take_kept_settings(Options& o, const std::string& recorded) {
  std::string differ;
  for (const auto& [name, value] : lines_of(recorded)) {
    const auto kept = std::find_if(std::begin(kKept), std::end(kKept),
                                   [&](const auto& k) { return name == k.first; });
    require(kept != std::end(kKept), "the checkpoint records the setting '" + name +
                                         "', which this build does not know: resume it with "
                                         "the build that wrote it, or a newer one");
    if (o.was_given(name)) {
      const std::string given = text_of(o.train, kept->second);
      if (given != value)
        differ += (differ.empty() ? "" : ", ") + name + " " + given + " (the checkpoint's run: " +
                  value + ")";
      continue;
    }
    require(set_from(o.train, kept->second, value),
            "the checkpoint's setting " + name + " = '" + value + "' is not a value of it");
    // a number within the option's range, as a flag must be (the text kinds are parsed later)
    const std::vector<OptionRange>& ranges = trainer_option_ranges();
    const auto range = std::find_if(ranges.begin(), ranges.end(),
                                    [&](const OptionRange& r) { return name == r.name; });
    double number = 0;
    std::from_chars(value.data(), value.data() + value.size(), number);
    if (range != ranges.end())
      require(in_range(*range, number), "the checkpoint's setting " + name + " = " + value +
                                            " lies outside " + range_text(*range));
  }
  return differ;
}

}  // namespace mpitrain
