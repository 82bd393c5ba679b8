// The build id that checkpoints record, --version prints and the ranks compare before any work:
// "<version>+<commit>", "-dirty" after the commit where the build's tracked sources differed from
// it, "+unknown" outside a git checkout. Taken at every build (cmake/build_id.cmake), not at
// configure time, so an incremental build after a pull or an edit names its own source.
#pragma once

namespace mpitrain {

const char* build_id();

}  // namespace mpitrain
