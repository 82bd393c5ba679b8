// File-system steps made durable with fsync: for commit protocols (checkpoints, prepare-data's
// pair of token files) where each step may depend on the previous one surviving a crash.
// Errors: Error "<what the system said> <doing> <path>", e.g. "No space left on device writing
// /run/checkpoints/latest.tmp" (throw_file_error).
#pragma once

#include <cstdint>
#include <string>

namespace mpitrain {

// "<strerror(err)> <doing> <path>", and the Error that says it.
std::string file_error_text(int err, const std::string& doing, const std::string& path);
[[noreturn]] void throw_file_error(int err, const std::string& doing, const std::string& path);

void fsync_path(const std::string& path);  // a file or a directory
// Writes content to path (created or truncated), fsyncs and closes it, each step checked (NFS
// reports a refused write as late as close). With rename_durably, the two halves of replacing a
// file atomically: write path.tmp, then rename it over path.
void write_file_synced(const std::string& path, const std::string& content);
// Renames from to to (a file, or a directory over none or an empty one) and fsyncs to's directory.
void rename_durably(const std::string& from, const std::string& to);
// Reserves bytes of space for the existing file path, keeping its size (fallocate with
// FALLOC_FL_KEEP_SIZE; release_reserved_space gives back the rest), so that writes
// of up to that much cannot run out of space or quota midway: ENOSPC, EDQUOT or EIO come now,
// with the figures ("... writing <path> (1.8 MB needed, 0.6 MB free)"). Where the file system
// cannot reserve (EOPNOTSUPP), its free space must hold bytes instead (else ENOSPC).
void reserve_space(const std::string& path, uint64_t bytes);
// Gives back what reserve_space reserved beyond path's end (a truncate to its own size).
void release_reserved_space(const std::string& path);

}  // namespace mpitrain
