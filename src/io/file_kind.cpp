#include "mpitrain/io/file_kind.hpp"

#include <filesystem>

namespace fs = std::filesystem;

namespace mpitrain {

std::string not_regular_file_reason(const std::string& path) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  switch (status.type()) {
    case fs::file_type::regular:
      return "";
    case fs::file_type::not_found:
      return "does not exist";
    case fs::file_type::directory:
      return "is a directory, not a regular file";
    case fs::file_type::fifo:
      return "is a FIFO, not a regular file";
    case fs::file_type::character:
      return "is a character device, not a regular file";
    case fs::file_type::block:
      return "is a block device, not a regular file";
    case fs::file_type::socket:
      return "is a socket, not a regular file";
    default:
      return "cannot be examined" + (ec ? ": " + ec.message() : std::string());
  }
}

}  // namespace mpitrain
