// --profile-ops: the profile's bookkeeping (OpProfile) and the decorator that feeds it
// (ProfilingBackend): the warm-up step and ops outside a step are dropped, the floors are the
// slower of FLOPs at the sgemm rate and bytes at the bandwidth, and a profiled backend computes
// the same bits as the backend it wraps.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/profiling_backend.hpp"
#include "mpitrain/monitor/op_profile.hpp"

using namespace mpitrain;

namespace {

// The table's row of `op`, split into words ("" fields are not kept); empty if there is none.
std::vector<std::string> row(const std::string& table, const std::string& op) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    if (w.size() > 1 && w[1] == op) return w;
  }
  return {};
}

// The words after `prefix` on the line that starts with it; empty if there is none.
std::vector<std::string> after(const std::string& table, const std::string& prefix) {
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    std::istringstream words(line.substr(prefix.size()));
    std::vector<std::string> w;
    for (std::string x; words >> x;) w.push_back(x);
    return w;
  }
  return {};
}

}  // namespace

TEST(OpProfile, WarmupAndOpsOutsideStepsDropped) {
  OpProfile p;
  p.record(OpPhase::Forward, "matmul_forward", 9.0, 0, 0);  // set-up: no step yet
  p.begin_step(false);                                      // the warm-up
  p.record(OpPhase::Forward, "matmul_forward", 5.0, 0, 0);
  p.end_step(6.0);
  p.record(OpPhase::Forward, "matmul_forward", 7.0, 0, 0);  // evaluation, between steps
  for (int s = 0; s < 2; ++s) {
    p.begin_step(true);
    // 1 ms: 1e8 FLOPs (1 ms at 100 GFLOP/s), 1e6 bytes (0.1 ms at 10 GB/s): floor 1 ms
    p.record(OpPhase::Forward, "matmul_forward", 1e-3, 1e8, 1e6);
    p.record(OpPhase::Forward, "matmul_forward", 1e-3, 1e8, 1e6);
    // 0.5 ms moving 2e6 bytes: floor 0.2 ms at 10 GB/s
    p.record(OpPhase::Optimizer, "adamw", 0.5e-3, 0, 2e6);
    p.end_step(3e-3);
  }
  EXPECT_EQ(p.steps(), 2);
  const std::string t = p.table("header", 100.0, 10.0);
  EXPECT_EQ(t.substr(0, 7), "header\n");
  const auto mm = row(t, "matmul_forward");
  ASSERT_EQ(mm.size(), 9u) << t;
  EXPECT_EQ(mm[0], "forward");
  EXPECT_EQ(mm[2], "2");      // calls per step
  EXPECT_EQ(mm[3], "2.000");  // ms per step
  EXPECT_EQ(mm[5], "100.0");  // GFLOP/s
  EXPECT_EQ(mm[7], "2.000");  // floor ms
  EXPECT_EQ(mm[8], "1.00");   // x floor
  const auto adam = row(t, "adamw");
  ASSERT_EQ(adam.size(), 9u) << t;
  EXPECT_EQ(adam[0], "optimizer");
  EXPECT_EQ(adam[3], "0.500");
  EXPECT_EQ(adam[6], "4.0");    // GB/s
  EXPECT_EQ(adam[7], "0.200");  // floor ms
  EXPECT_EQ(adam[8], "2.50");
  // ops 2.5 of a 3 ms step, floors 2.2 ms
  EXPECT_EQ(after(t, "all ops"), (std::vector<std::string>{"2.500", "83.3%", "2.200", "1.14"}));
  EXPECT_EQ(after(t, "outside the ops (comm, data, loop)"),
            (std::vector<std::string>{"0.500", "16.7%"}));
  EXPECT_EQ(after(t, "step"), (std::vector<std::string>{"3.000", "100.0%", "2.200", "1.36"}));
}

TEST(OpProfile, NoProfiledStepSaysSo) {
  OpProfile p;
  p.begin_step(false);
  p.record(OpPhase::Forward, "add", 1.0, 0, 8);
  p.end_step(1.0);
  EXPECT_EQ(p.steps(), 0);
  EXPECT_NE(p.table("h", 1, 1).find("no step was profiled"), std::string::npos);
}

// Each op forwarded with its arguments: the same output bits as the wrapped backend's, one
// record per call, with the FLOPs of its products.
TEST(ProfilingBackend, ForwardsUnchangedAndCountsFlops) {
  constexpr int N = 8, IC = 16, OC = 12;
  std::vector<float> inp(N * IC), w(OC * IC), bias(OC), direct(N * OC), profiled(N * OC);
  for (size_t i = 0; i < inp.size(); ++i) inp[i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.02f * static_cast<float>(i % 13) - 0.1f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * static_cast<float>(i);
  CpuBackend<float> cpu(1);
  cpu.matmul_forward(direct.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
  OpProfile profile;
  ProfilingBackend wrapped(std::make_unique<CpuBackend<float>>(1), profile);
  profile.begin_step(true);
  wrapped.matmul_forward(profiled.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
  wrapped.gelu_forward(profiled.data(), profiled.data(), N * OC);
  cpu.gelu_forward(direct.data(), direct.data(), N * OC);
  profile.end_step(1.0);
  EXPECT_EQ(direct, profiled);
  // 2 N IC OC FLOPs; floor at 1 GFLOP/s (and an unlimited bandwidth): 3072 ns = 3.072e-3 ms
  const auto mm = row(profile.table("h", 1.0, 1e30), "matmul_forward");
  ASSERT_EQ(mm.size(), 9u);
  EXPECT_EQ(mm[2], "1");
  EXPECT_EQ(mm[7], "0.003");
  // gelu: N OC floats read and written = 768 bytes; at 1 GB/s 768 ns
  const auto gelu = row(profile.table("h", 1e30, 1.0), "gelu_forward");
  ASSERT_EQ(gelu.size(), 9u);
  EXPECT_EQ(gelu[7], "0.001");
}

// Attention's FLOPs count the (query, key) pairs its mask keeps: with a sliding window W of T
// positions, W (W + 1) / 2 + (T - W) W a head (the whole sequence and the block API alike).
TEST(ProfilingBackend, AttentionFlopsCountTheWindowsPairs) {
  constexpr int T = 64, NH = 2, hs = 16, W = 8, QKV = 3 * NH * hs;
  std::vector<float> qkv(T * QKV, 0.1f), out(T * NH * hs), lse(NH * T);
  std::vector<int> pos(T);
  for (int t = 0; t < T; ++t) pos[t] = t;
  OpProfile profile;
  ProfilingBackend wrapped(std::make_unique<CpuBackend<float>>(1), profile);
  profile.begin_step(true);
  wrapped.attention_forward(out.data(), lse.data(), qkv.data(), 1, T, NH, NH, hs, 0.25f, W);
  wrapped.attention_block_forward(out.data(), lse.data(), qkv.data(), qkv.data() + NH * hs, QKV,
                                  pos.data(), pos.data(), 1, T, T, NH, NH, hs, 0.25f, W, false);
  profile.end_step(1.0);
  // 484 pairs a head, 4 hs FLOPs each: 2 x 484 x 64 = 61952 at 1 GFLOP/s, 0.062 ms (causal:
  // 2080 pairs, 0.266 ms)
  const std::string table = profile.table("h", 1.0, 1e30);
  EXPECT_EQ(row(table, "attention_forward").at(7), "0.062");
  EXPECT_EQ(row(table, "attention_block_forward").at(7), "0.062");
}

// And with document masking, the pairs within each query's document: documents of 16 positions,
// 4 x 136 = 544 pairs a head; with the window of 8 as well 4 x (36 + 8 x 8) = 400.
TEST(ProfilingBackend, AttentionFlopsCountTheDocumentsPairs) {
  constexpr int T = 64, NH = 2, hs = 16, QKV = 3 * NH * hs;
  std::vector<float> qkv(T * QKV, 0.1f), out(T * NH * hs), lse(NH * T);
  std::vector<int> pos(T), starts(T);
  for (int t = 0; t < T; ++t) pos[t] = t, starts[t] = t / 16 * 16;
  OpProfile profile;
  ProfilingBackend wrapped(std::make_unique<CpuBackend<float>>(1), profile);
  profile.begin_step(true);
  wrapped.attention_forward(out.data(), lse.data(), qkv.data(), 1, T, NH, NH, hs, 0.25f,
                            AttentionMask(0, starts.data()));
  wrapped.attention_block_forward(out.data(), lse.data(), qkv.data(), qkv.data() + NH * hs, QKV,
                                  pos.data(), pos.data(), 1, T, T, NH, NH, hs, 0.25f,
                                  AttentionMask(8, starts.data()), false);
  profile.end_step(1.0);
  // 2 heads x 544 pairs x 64 FLOPs = 69632 at 1 GFLOP/s: 0.070 ms; 2 x 400 x 64: 0.051 ms
  const std::string table = profile.table("h", 1.0, 1e30);
  EXPECT_EQ(row(table, "attention_forward").at(7), "0.070");
  EXPECT_EQ(row(table, "attention_block_forward").at(7), "0.051");
}
