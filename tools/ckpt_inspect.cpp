// ckpt-inspect: shows a checkpoint's manifest and datasets; --verify recomputes every checksum.
//
//   ckpt-inspect PATH [--verify]
//
// PATH: what --resume takes: a run directory (holding checkpoints/), a checkpoints directory
// (both: the checkpoint a resume takes, normally the one `latest` names), a checkpoint directory
// (step-N/, best/) or its checkpoint.h5. One process, no mpirun needed.
// Exit code: 0 all well, 1 a checksum mismatch / missing dataset / bad manifest, 2 bad usage or
// no readable checkpoint at PATH.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>

#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/runtime/mpi.hpp"

using namespace mpitrain;

int main(int argc, char** argv) {
  try {
    MpiRuntime mpi(&argc, &argv);  // a singleton: parallel HDF5 is linked in
    std::string path;
    bool verify = false;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--verify") == 0) {
        verify = true;
      } else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
        std::printf("usage: ckpt-inspect PATH [--verify]\n");
        return kExitOk;
      } else if (path.empty() && argv[i][0] != '-') {
        path = argv[i];
      } else {
        std::fprintf(
            stderr, "ckpt-inspect: unexpected argument '%s'\nusage: ckpt-inspect PATH [--verify]\n",
            argv[i]);
        return kExitUsage;
      }
    }
    if (path.empty()) {
      std::fprintf(stderr, "usage: ckpt-inspect PATH [--verify]\n");
      return kExitUsage;
    }
    return inspect_checkpoint(path, verify, std::cout, std::cerr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt-inspect: %s\n", e.what());
    return kExitFailure;
  }
}
