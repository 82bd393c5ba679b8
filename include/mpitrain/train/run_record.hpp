// run.ini: the run as it was resolved, so that `trainer --config <out-dir>/run.ini` repeats it.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mpitrain {

// `effective` (every option in INI syntax, one "key = value" per line) with the values the
// set-up decided (the layout, threads, micro-batch, model sizes: key -> value) put in, and
// overwrite = false, resume empty: a run repeated from it cannot destroy the one it came from
// (its out-dir holds files, so it is refused without --overwrite); allow-seed-change = false: the
// seed recorded is the one the run used. A key missing from `effective` is appended.
std::string resolved_ini(const std::string& effective,
                         const std::vector<std::pair<std::string, std::string>>& resolved);

}  // namespace mpitrain
