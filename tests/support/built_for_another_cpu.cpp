// A program that does nothing, linked with the CPU check compiled for an extension this CPU lacks
// (tests/CMakeLists.txt): the check must stop it before main (tests/e2e/build_cpu.sh).
#include <cstdio>

int main() {
  std::puts("main ran");
  return 0;
}
