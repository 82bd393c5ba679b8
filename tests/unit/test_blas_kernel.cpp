// The OpenBLAS kernel choice (backend/blas_kernel.hpp) over recorded cases of each CPU kind met:
// the "flags" line of /proc/cpuinfo (abridged to the words that matter, except the development
// VMs') and the core OpenBLAS 0.3.21 (Debian 12) chose itself (OPENBLAS_VERBOSE=2,
// OPENBLAS_CORETYPE unset): Zen 5 recorded on a 2-core development VM (2026-12-03), Zen 3 on
// another (2026-12-07), Emerald Rapids in issue 33.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/backend/blas_kernel.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;

namespace {

// AMD EPYC, family 26 model 2 (Zen 5), the development VM: the whole line.
const char* kZen5 =
    "fpu vme de pse tsc msr pae mce cx8 apic sep pge mca cmov pat pse36 clflush mmx fxsr sse sse2 "
    "ht syscall nx mmxext lm constant_tsc rep_good nopl xtopology tsc_reliable nonstop_tsc cpuid "
    "extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 x2apic movbe popcnt "
    "tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm cr8_legacy misalignsse "
    "3dnowprefetch topoext pti        vmmcall bmi1 avx2 bmi2 erms avx512f avx512dq adx avx512ifma "
    "clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 avx_vnni "
    "avx512_bf16 clzero xsaveerptr arat avx512vbmi avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni "
    "avx512_bitalg avx512_vpopcntdq movdiri movdir64b fsrm avx512_vp2intersect";
// AMD EPYC, family 25 model 1 (Zen 3, a Milan), a development VM: the whole line. AVX2 and FMA,
// no AVX-512; OpenBLAS 0.3.21 chose Zen (Zen 2, EPYC 7742, has the same words that matter).
const char* kZen3 =
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse "
    "sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology "
    "nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 "
    "x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm "
    "cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp "
    "vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb "
    "sha_ni xsaveopt xsavec xgetbv1 xsaves clzero xsaveerptr wbnoinvd arat umip pku ospke vaes "
    "vpclmulqdq rdpid fsrm";
// AMD EPYC 9654 (Zen 4): AVX-512 with BF16.
const char* kZen4 =
    "sse sse2 fma avx avx2 avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 "
    "avx512vbmi avx512_vbmi2 avx512_vnni avx512_bitalg avx512_vpopcntdq";
// Intel Xeon Sapphire / Emerald Rapids (family 6 model 143 / 207): AVX-512, BF16, FP16, AMX.
const char* kXeonAmx =
    "sse sse2 fma avx avx2 avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx_vnni "
    "avx512_bf16 avx512vbmi avx512_vbmi2 avx512_vnni avx512_bitalg avx512_vpopcntdq "
    "amx_bf16 avx512_fp16 amx_tile amx_int8";
// The same Xeons where a hypervisor hides AMX.
const char* kXeonNoAmx =
    "sse sse2 fma avx avx2 avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx_vnni "
    "avx512_bf16 avx512vbmi avx512_vbmi2 avx512_vnni avx512_fp16";
// Intel Xeon Gold 6148 (Skylake-X): AVX-512 F, CD, BW, DQ, VL.
const char* kSkylakeX = "sse sse2 fma avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl";
// Intel Xeon Phi 7250 (Knights Landing): AVX-512 F without BW, VL, DQ: AVX2's class.
const char* kKnl = "sse sse2 fma avx avx2 avx512f avx512pf avx512er avx512cd";
// Intel Xeon E5-2670 (Sandy Bridge): AVX without AVX2 or FMA.
const char* kSandyBridge = "sse sse2 ssse3 sse4_1 sse4_2 avx";

struct Case {
  const char* cpu;
  const char* flags;
  const char* library;  // OpenBLAS's own choice
  const char* runs;     // the core chosen
  bool switch_core;
};

}  // namespace

TEST(BlasKernel, RecordedCpus) {
  const Case cases[] = {
      {"Zen 5", kZen5, "Cooperlake", "SkylakeX", true},
      {"Zen 5 (an older library)", kZen5, "Haswell", "SkylakeX", true},
      {"Zen 3", kZen3, "Zen", "Zen", false},
      {"Zen 3 (Haswell)", kZen3, "Haswell", "Haswell", false},
      {"Zen 4", kZen4, "Cooperlake", "SkylakeX", true},
      {"Xeon with AMX", kXeonAmx, "Prescott", "SkylakeX", true},
      {"Xeon with AMX, a newer library", kXeonAmx, "SapphireRapids", "SapphireRapids", false},
      {"Xeon without AMX", kXeonNoAmx, "Prescott", "SkylakeX", true},
      {"Skylake-X", kSkylakeX, "SkylakeX", "SkylakeX", false},
      {"Knights Landing", kKnl, "Prescott", "Haswell", true},
      {"Sandy Bridge", kSandyBridge, "Sandybridge", "Sandybridge", false},
  };
  for (const Case& c : cases) {
    const BlasKernelChoice k =
        choose_blas_kernel(cpu_features_of_flags(c.flags), c.library, "", true);
    EXPECT_EQ(k.core, c.runs) << c.cpu;
    EXPECT_EQ(k.switch_core, c.switch_core) << c.cpu;
    if (c.switch_core)
      EXPECT_EQ(k.reason, std::string("chosen: the library's own choice was ") + c.library);
    else
      EXPECT_EQ(k.reason.rfind("the library's own choice", 0), 0u) << c.cpu << ": " << k.reason;
  }
}

// The cores bench/blas_kernel.sh forces on each CPU kind: every class the CPU runs, best first.
TEST(BlasKernel, RunnableKernelsOfEachCpuKind) {
  const std::pair<const char*, std::vector<std::string>> cases[] = {
      {kZen5, {"SkylakeX", "Haswell"}},
      {kZen4, {"SkylakeX", "Haswell"}},
      {kZen3, {"Haswell"}},
      {kXeonAmx, {"SkylakeX", "Haswell"}},
      {kXeonNoAmx, {"SkylakeX", "Haswell"}},
      {kSkylakeX, {"SkylakeX", "Haswell"}},
      {kKnl, {"Haswell"}},
      {kSandyBridge, {}},
      {"sse sse2 avx avx2", {}},  // a VM that hides FMA: Haswell's kernels would die of SIGILL
  };
  for (const auto& [flags, cores] : cases)
    EXPECT_EQ(runnable_blas_kernels(cpu_features_of_flags(flags)), cores) << flags;
}

TEST(BlasKernel, UserSettingRespected) {
  const CpuFeatures zen5 = cpu_features_of_flags(kZen5);
  const BlasKernelChoice slower = choose_blas_kernel(zen5, "Haswell", "Haswell", true);
  EXPECT_EQ(slower.core, "Haswell");
  EXPECT_FALSE(slower.switch_core);
  EXPECT_EQ(slower.reason,
            "set by OPENBLAS_CORETYPE; SkylakeX would be faster on this CPU's AVX-512");
  const BlasKernelChoice best = choose_blas_kernel(zen5, "skylakex", "skylakex", true);
  EXPECT_EQ(best.core, "skylakex");  // OpenBLAS compares names without case
  EXPECT_EQ(best.reason, "set by OPENBLAS_CORETYPE");
  EXPECT_EQ(choose_blas_kernel(cpu_features_of_flags(kZen3), "Zen", "Zen", true).reason,
            "set by OPENBLAS_CORETYPE");
}

TEST(BlasKernel, LibraryThatCannotSwitchKept) {
  const BlasKernelChoice k =
      choose_blas_kernel(cpu_features_of_flags(kXeonAmx), "Prescott", "", false);
  EXPECT_EQ(k.core, "Prescott");
  EXPECT_FALSE(k.switch_core);
  EXPECT_NE(k.reason.find("without DYNAMIC_ARCH"), std::string::npos) << k.reason;
}

TEST(BlasKernel, FlagsParsedAsWholeWords) {
  const CpuFeatures none = cpu_features_of_flags("avx512fx xavx2 fma4 avx512_bw");
  EXPECT_FALSE(none.avx512f || none.avx2 || none.fma || none.avx512bw);
  const CpuFeatures x = cpu_features_of_flags(kSkylakeX);
  EXPECT_TRUE(x.avx2 && x.fma && x.avx512f && x.avx512bw && x.avx512vl && x.avx512dq);
}

TEST(BlasKernel, FeaturesFromCpuinfoFile) {
  const fs::path file = fs::temp_directory_path() / ("cpuinfo." + std::to_string(::getpid()));
  std::ofstream(file) << "processor\t: 0\nmodel name\t: Test\nflags\t\t: " << kZen3
                      << "\n\nprocessor\t: 1\nflags\t\t: " << kSkylakeX << "\n";
  const CpuFeatures f = cpu_features(file.string());
  fs::remove(file);
  EXPECT_TRUE(f.avx2 && f.fma);
  EXPECT_FALSE(f.avx512f);  // the first CPU's line
  const CpuFeatures missing =
      cpu_features((fs::temp_directory_path() / "no-such-cpuinfo").string());
  EXPECT_FALSE(missing.avx2 || missing.fma || missing.avx512f);
  // No AVX2 or AVX-512 known: the library's own choice stays.
  EXPECT_EQ(choose_blas_kernel(missing, "Haswell", "", true).core, "Haswell");
}
