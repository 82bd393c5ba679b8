// Checks an output option before anything is written.
#pragma once

#include <string>

namespace mpitrain {

// Throws UsageError naming `option` unless dir is "" (off), an existing writable directory, or
// could be created: its nearest existing ancestor is a directory something can be created in.
void require_creatable_dir(const std::string& dir, const std::string& option);

// Throws UsageError naming `option` unless file is "" (off) or a file name (not a directory) in
// a directory that exists or could be created (as require_creatable_dir); create_parent_dirs
// makes it when the file is written.
void require_writable_file(const std::string& file, const std::string& option);

// Throws UsageError naming `option` unless dir is "" (off), an empty directory, or a new name in
// a directory that exists or could be created (an export written whole, its parents made as
// Hugging Face's save_pretrained makes them).
void require_new_dir(const std::string& dir, const std::string& option);

// Creates the directories above `path` that do not exist yet (a file or directory about to be
// written, checked by the functions above); Error naming the directory when that fails.
void create_parent_dirs(const std::string& path);

}  // namespace mpitrain
