// The OpenBLAS kernel choice (see blas_kernel.hpp).
#include "mpitrain/backend/blas_kernel.hpp"

#include <cblas.h>
#include <strings.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

namespace mpitrain {

namespace {

bool same_core(const std::string& a, const std::string& b) {  // as OpenBLAS compares them
  return a.size() == b.size() && ::strcasecmp(a.c_str(), b.c_str()) == 0;
}

// The environment variable `name`, "" where unset.
std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

// Whether this OpenBLAS reads OPENBLAS_CORETYPE: one built with DYNAMIC_ARCH, which its
// configuration line names ("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY ...").
bool library_switches() {
  return std::string(openblas_get_config()).find("DYNAMIC_ARCH") != std::string::npos;
}

}  // namespace

CpuFeatures cpu_features_of_flags(std::string_view flags) {
  std::set<std::string, std::less<>> words;
  std::istringstream in{std::string(flags)};
  for (std::string word; in >> word;) words.insert(word);
  const auto has = [&](std::string_view w) { return words.count(w) > 0; };
  CpuFeatures f;
  f.avx2 = has("avx2");
  f.fma = has("fma");
  f.avx512f = has("avx512f");
  f.avx512bw = has("avx512bw");
  f.avx512vl = has("avx512vl");
  f.avx512dq = has("avx512dq");
  return f;
}

CpuFeatures cpu_features(const std::string& cpuinfo) {
  std::ifstream in(cpuinfo);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (line.rfind("flags", 0) == 0 && colon != std::string::npos)
      return cpu_features_of_flags(std::string_view(line).substr(colon + 1));
  }
  return {};
}

std::vector<std::string> runnable_blas_kernels(const CpuFeatures& cpu) {
  std::vector<std::string> cores;
  if (cpu.avx512()) cores.push_back("SkylakeX");
  if (cpu.avx2_fma()) cores.push_back("Haswell");
  return cores;
}

BlasKernelChoice choose_blas_kernel(const CpuFeatures& cpu, const std::string& library_choice,
                                    const std::string& user_set, bool switchable) {
  const bool avx512 = cpu.avx512();
  // The best core for the CPU's class, and the cores that are of that class already.
  const std::vector<std::string> runnable = runnable_blas_kernels(cpu);
  const std::string best = runnable.empty() ? "" : runnable.front();
  const std::vector<std::string> as_good = avx512 ? std::vector<std::string>{best, "SapphireRapids"}
                                                  : std::vector<std::string>{best, "Zen"};
  const std::string isa = avx512 ? "AVX-512" : "AVX2";
  const auto good = [&](const std::string& core) {
    return best.empty() || std::any_of(as_good.begin(), as_good.end(),
                                       [&](const std::string& c) { return same_core(c, core); });
  };
  if (!user_set.empty())
    return {user_set,
            "set by OPENBLAS_CORETYPE" +
                (good(user_set) ? "" : "; " + best + " would be faster on this CPU's " + isa),
            false};
  if (best.empty())
    return {library_choice,
            "the library's own choice; this CPU has neither AVX-512 nor AVX2 with FMA", false};
  if (good(library_choice))
    return {library_choice, "the library's own choice, for this CPU's " + isa, false};
  if (!switchable)
    return {library_choice,
            "the library's own choice: " + best + " would be faster on this CPU's " + isa +
                ", but this OpenBLAS is built without DYNAMIC_ARCH and cannot switch",
            false};
  return {best, "chosen: the library's own choice was " + library_choice, true};
}

BlasKernel blas_kernel() {
  const std::string own = env("MPITRAIN_OPENBLAS_OWN_CORE");  // set by run_on_best_blas_kernel
  const std::string in_use = openblas_get_corename();
  const std::string user = own.empty() ? env("OPENBLAS_CORETYPE") : "";
  return {in_use,
          choose_blas_kernel(cpu_features(), own.empty() ? in_use : own, user, library_switches())};
}

std::string describe(const BlasKernel& kernel) {
  const std::string text = "OpenBLAS " + kernel.in_use;
  const BlasKernelChoice& c = kernel.choice;
  if (same_core(kernel.in_use, c.core)) return text + " (" + c.reason + ")";
  const std::string asked = env("OPENBLAS_CORETYPE");
  if (!asked.empty()) return text + " (the library did not take OPENBLAS_CORETYPE=" + asked + ")";
  return text + ", not the " + c.core + " this CPU runs faster (this program did not start again " +
         "with OPENBLAS_CORETYPE set)";
}

}  // namespace mpitrain
