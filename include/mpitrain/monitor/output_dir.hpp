// Checks an output directory option before anything is written.
#pragma once

#include <string>

namespace mpitrain {

// Throws UsageError naming `option` unless dir is "" (off), an existing writable directory, or
// could be created: its nearest existing ancestor is a writable directory.
void require_creatable_dir(const std::string& dir, const std::string& option);

}  // namespace mpitrain
