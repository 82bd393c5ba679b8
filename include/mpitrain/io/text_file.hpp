// Opening a text file the user named (an INI file), with the reason when it cannot be read.
#pragma once

#include <fstream>
#include <string>

namespace mpitrain {

// The file open for reading; UsageError "cannot read <what> '<path>': <reason>" when it is
// missing, unreadable or a directory (which would otherwise read as an empty file). Pipes such
// as --config <(...) are taken.
std::ifstream open_text_file(const std::string& path, const std::string& what);

}  // namespace mpitrain
