// Checks an output option before anything is written.
#pragma once

#include <string>

namespace mpitrain {

// Throws UsageError naming `option` unless dir is "" (off), an existing writable directory, or
// could be created: its nearest existing ancestor is a directory something can be created in.
void require_creatable_dir(const std::string& dir, const std::string& option);

// Throws UsageError naming `option` unless file is "" (off) or a file name (not a directory) in
// an existing directory that something can be created in.
void require_writable_file(const std::string& file, const std::string& option);

// Throws UsageError naming `option` unless dir is "" (off), an empty directory, or a new name in
// an existing directory that something can be created in (an export written whole).
void require_new_dir(const std::string& dir, const std::string& option);

}  // namespace mpitrain
