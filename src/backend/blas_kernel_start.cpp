// run_on_best_blas_kernel (see blas_kernel.hpp): the program started again on the chosen kernel.
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mpitrain/backend/blas_kernel.hpp"

namespace mpitrain {

namespace {

// This program's file, "" (errno set) where it cannot be read. Executed by this path, not as
// /proc/self/exe, so that the process keeps its name ("trainer", which pgrep and top show).
std::string own_file() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

}  // namespace

void run_on_best_blas_kernel(char** argv) {
  if (const char* own = std::getenv("MPITRAIN_OPENBLAS_OWN_CORE"); own != nullptr && *own != '\0')
    return;  // this is the start again: never a second one
  const BlasKernel kernel = blas_kernel();
  if (!kernel.choice.switch_core) return;
  // The library reads OPENBLAS_CORETYPE in its constructor, before main(): only a new image of
  // this program takes it. execv keeps the environment (mpirun's and srun's PMIx variables),
  // the process id a launcher waits for, and the open descriptors (stdout, stderr).
  const std::string file = own_file();
  if (!file.empty() && ::setenv("OPENBLAS_CORETYPE", kernel.choice.core.c_str(), 1) == 0 &&
      ::setenv("MPITRAIN_OPENBLAS_OWN_CORE", kernel.in_use.c_str(), 1) == 0)
    ::execv(file.c_str(), argv);
  const int error = errno;
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv("MPITRAIN_OPENBLAS_OWN_CORE");
  std::fprintf(stderr,
               "%s: warning: cannot start again with OPENBLAS_CORETYPE=%s (%s%s): products run on "
               "the library's own %s kernels; set OPENBLAS_CORETYPE=%s before starting it\n",
               argv[0], kernel.choice.core.c_str(), file.empty() ? "/proc/self/exe: " : "",
               std::strerror(error), kernel.in_use.c_str(), kernel.choice.core.c_str());
}

}  // namespace mpitrain
