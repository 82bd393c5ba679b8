// File-system steps made durable with fsync: for commit protocols (checkpoints, prepare-data's
// pair of token files) where each step may depend on the previous one surviving a crash.
// Errors: Error with the path and strerror.
#pragma once

#include <string>

namespace mpitrain {

void fsync_path(const std::string& path);  // a file or a directory
// Writes content to path (created or truncated) and fsyncs it. With rename_durably, the two
// halves of replacing a file atomically: write path.tmp, then rename it over path.
void write_file_synced(const std::string& path, const std::string& content);
// Renames from to to (a file, or a directory over none or an empty one) and fsyncs to's directory.
void rename_durably(const std::string& from, const std::string& to);

}  // namespace mpitrain
