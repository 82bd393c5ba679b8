// What a path is, in words, for the checks that must not open anything but a regular file (an
// open() of a FIFO blocks until a writer comes; a device is not data).
#pragma once

#include <string>

namespace mpitrain {

// "" when path is a regular file (a symbolic link is followed), else why not: "does not exist",
// "is a directory", "is a FIFO", "is a character device", ... ("is a directory, not a regular
// file" reads as one sentence after the path).
std::string not_regular_file_reason(const std::string& path);

}  // namespace mpitrain
