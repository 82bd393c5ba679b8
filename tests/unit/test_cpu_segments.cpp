// The CPU backend's optimizer ops over a segment list (backend.hpp): one call over a step's
// segments gives the bits of one call per segment (the per-tensor path it replaced: each segment
// cut as before, the sums added in the same order), the same at 1, 2 and 3 threads, and leaves
// the elements between segments alone; AdamW and SGD round the compute copy in the same pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/precision.hpp"
#include "mpitrain/runtime/error.hpp"
#include "random_values.hpp"

using namespace mpitrain;
using mpitrain::test_inputs::random_floats;

namespace {

// A step's segments: decayed matrices and undecayed vectors, sizes around the 8192-element
// blocks and 32768-element chunks and no multiple of 16, an empty one, gaps between some (the
// grad norm skips tensors that are not primary). 503k elements: every op runs in parallel.
const std::vector<Segment> kSegments = {
    {0, 37, false},         {37, 100003, true},    {100040, 8191, true}, {108231, 8193, false},
    {116424, 0, true},      {116500, 70001, true}, {186501, 17, false},  {186600, 300000, true},
    {486600, 16384, false}, {502984, 1, true}};
const size_t kTotal = 502985;

using Floats = std::vector<float>;

bool same_bits(const Floats& a, const Floats& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The buffers of one optimizer, random.
struct State {
  Floats param = random_floats(kTotal, 1), grad = random_floats(kTotal, 2, -0.1f, 0.1f),
         m = random_floats(kTotal, 3, -0.01f, 0.01f), v = random_floats(kTotal, 4, 0.0f, 1e-4f);
};

// The sum of squares of one tensor as the per-tensor path computed it, written out: chunks of
// [0, n) of at least 32768 elements (at most 64), each chunk's squares in 16 lanes added in lane
// order then its tail, the chunks added in order.
double per_tensor_sum(const float* x, size_t n) {
  const size_t chunks = std::clamp<size_t>((n + 32767) / 32768, 1, 64);
  const size_t per = (n + chunks - 1) / chunks;
  double sum = 0.0;
  for (size_t c = 0; c < chunks; ++c) {
    const size_t b = std::min(n, c * per), e = std::min(n, b + per);
    double lane[16] = {}, chunk = 0.0;
    size_t i = b;
    for (; i + 16 <= e; i += 16)
      for (size_t k = 0; k < 16; ++k) lane[k] += double(x[i + k]) * double(x[i + k]);
    for (double l : lane) chunk += l;
    for (; i < e; ++i) chunk += double(x[i]) * double(x[i]);
    sum += chunk;
  }
  return sum;
}

// Each op's call over the whole list, or one call per segment, at `threads`.
enum class Calls { Fused, PerSegment };

double sum_squares(const Floats& x, Calls calls, int threads) {
  CpuBackend<float> be(threads);
  if (calls == Calls::Fused) return be.sum_squares(x.data(), kSegments);
  double sum = 0.0;
  for (const Segment& s : kSegments) sum += be.sum_squares(x.data(), Segments(&s, 1));
  return sum;
}

// Three steps of op(segments, t): one call over the whole list, or one per segment.
template <class Op>
void three_steps(Calls calls, Op&& op) {
  for (int t = 1; t <= 3; ++t) {
    if (calls == Calls::Fused)
      op(Segments(kSegments), t);
    else
      for (const Segment& s : kSegments) op(Segments(&s, 1), t);
  }
}

// A random State with values whose rounding is a case of its own planted, with zero gradient
// and moments (an update then only scales them by 1 - lr wd, or keeps them; an infinity becomes
// NaN, as wd inf - inf or 0 inf): NaNs (one with a payload), infinities, beyond fp16's and bf16's
// largest (inf when rounded), just below fp16's rounding to inf, fp16 subnormals, fp32 (and bf16)
// subnormals, zeros; at every 7th element from 40 on, so they fall in each lane of the vectors
// and in the segments' partial last vectors.
State with_special_values() {
  State st;
  const float nan_payload = std::bit_cast<float>(0x7fa12345u);
  const float values[] = {std::nanf(""), -nan_payload, INFINITY, -INFINITY, 70000.0f,
                          -65519.0f,     3.4e38f,      1e-6f,    -3e-7f,    1e-40f,
                          -0.0f,         0.0f,         65504.0f};
  size_t k = 0;
  for (size_t i = 40; i < kTotal; i += 7, ++k) {
    st.param[i] = values[k % std::size(values)];
    st.grad[i] = st.m[i] = st.v[i] = 0.0f;
  }
  return st;
}

// Three steps from `st`; rounded: the compute copy the updates also write, or null.
State adamw(Calls calls, int threads, Buf<float> rounded = {}, State st = {}) {
  CpuBackend<float> be(threads);
  three_steps(calls, [&](Segments segments, int t) {
    be.adamw(st.param.data(), st.grad.data(), st.m.data(), st.v.data(), segments, 1e-3f, 0.9f,
             0.95f, 1e-8f, 0.1f, t, 0.5f, rounded);
  });
  return st;
}

State sgd(Calls calls, int threads, Buf<float> rounded = {}, State st = {}) {
  CpuBackend<float> be(threads);
  three_steps(calls, [&](Segments segments, int) {
    be.sgd_momentum(st.param.data(), st.grad.data(), st.m.data(), segments, 1e-2f, 0.9f, 0.01f,
                    2.0f, rounded);
  });
  return st;
}

// Two LAMB steps; sums: the last first pass's, 2 per segment.
State lamb(Calls calls, int threads, std::vector<double>& sums) {
  CpuBackend<float> be(threads);
  State st;
  sums.assign(2 * kSegments.size(), -1.0);
  std::vector<float> lr(kSegments.size());
  for (size_t s = 0; s < lr.size(); ++s) lr[s] = 1e-3f * static_cast<float>(s + 1);
  for (int t = 1; t <= 2; ++t) {
    auto moments = [&](Segments segments, double* out) {
      be.lamb_moments(st.param.data(), st.grad.data(), st.m.data(), st.v.data(), segments, 2e-3f,
                      0.9f, 0.999f, 1e-6f, 0.01f, t, 1.0f, out);
    };
    auto update = [&](Segments segments, const float* rates) {
      be.lamb_update(st.param.data(), st.m.data(), st.v.data(), segments, rates, 0.9f, 0.999f,
                     1e-6f, 0.01f, t);
    };
    if (calls == Calls::Fused) {
      moments(kSegments, sums.data());
      update(kSegments, lr.data());
    } else {
      for (size_t s = 0; s < kSegments.size(); ++s)
        moments(Segments(&kSegments[s], 1), &sums[2 * s]);
      for (size_t s = 0; s < kSegments.size(); ++s) update(Segments(&kSegments[s], 1), &lr[s]);
    }
  }
  return st;
}

void expect_same(const State& a, const State& b, const char* what) {
  EXPECT_TRUE(same_bits(a.param, b.param)) << what << ": param";
  EXPECT_TRUE(same_bits(a.m, b.m)) << what << ": m";
  EXPECT_TRUE(same_bits(a.v, b.v)) << what << ": v";
}

// The elements in no segment keep their values.
void expect_gaps_untouched(const State& st) {
  const State fresh;
  size_t at = 0;
  for (const Segment& s : kSegments) {
    for (size_t i = at; i < s.at; ++i) ASSERT_EQ(st.param[i], fresh.param[i]) << "gap at " << i;
    at = s.at + s.n;
  }
}

TEST(CpuSegments, SumSquaresIsThePerSegmentSumsInOrder) {
  const Floats x = random_floats(kTotal, 5);
  const double fused = sum_squares(x, Calls::Fused, 1);
  EXPECT_TRUE(same_bits(fused, sum_squares(x, Calls::PerSegment, 1)));
  double per_tensor = 0.0;  // the grad norm's sum before: one call per tensor, added in order
  for (const Segment& s : kSegments) per_tensor += per_tensor_sum(x.data() + s.at, s.n);
  EXPECT_TRUE(same_bits(fused, per_tensor)) << fused << " vs " << per_tensor;
  for (int threads : {2, 3})
    EXPECT_TRUE(same_bits(fused, sum_squares(x, Calls::Fused, threads))) << threads << " threads";
  long double ref = 0.0L;  // the squares of floats are exact in double; the sum in long double
  for (const Segment& s : kSegments)
    for (size_t i = s.at; i < s.at + s.n; ++i) ref += static_cast<long double>(x[i]) * x[i];
  // 503k positive terms added in double (16 lanes a chunk), in another order than the long
  // double reference: measured 8.2e-15 relative
  EXPECT_NEAR(fused, static_cast<double>(ref), 3e-14 * static_cast<double>(ref));
}

TEST(CpuSegments, AdamWIsThePerSegmentCalls) {
  const State fused = adamw(Calls::Fused, 1);
  expect_same(fused, adamw(Calls::PerSegment, 1), "per segment");
  for (int threads : {2, 3}) expect_same(fused, adamw(Calls::Fused, threads), "threads");
  expect_gaps_untouched(fused);
  const State fresh;  // the updates did run: decayed and undecayed segments changed
  EXPECT_NE(fused.param[kSegments[0].at], fresh.param[kSegments[0].at]);
  EXPECT_NE(fused.param[kSegments[1].at], fresh.param[kSegments[1].at]);
}

TEST(CpuSegments, SgdIsThePerSegmentCalls) {
  const State fused = sgd(Calls::Fused, 1);
  expect_same(fused, sgd(Calls::PerSegment, 1), "per segment");
  for (int threads : {2, 3}) expect_same(fused, sgd(Calls::Fused, threads), "threads");
  expect_gaps_untouched(fused);
}

TEST(CpuSegments, LambIsThePerSegmentCalls) {
  std::vector<double> sums, other;
  const State fused = lamb(Calls::Fused, 1, sums);
  expect_same(fused, lamb(Calls::PerSegment, 1, other), "per segment");
  for (size_t i = 0; i < sums.size(); ++i) EXPECT_TRUE(same_bits(sums[i], other[i])) << i;
  for (int threads : {2, 3}) {
    expect_same(fused, lamb(Calls::Fused, threads, other), "threads");
    for (size_t i = 0; i < sums.size(); ++i) EXPECT_TRUE(same_bits(sums[i], other[i])) << i;
  }
  expect_gaps_untouched(fused);
  for (size_t s = 0; s < kSegments.size(); ++s) {  // sums only of decayed, non-empty segments
    const bool summed = kSegments[s].decay && kSegments[s].n > 0;
    EXPECT_EQ(sums[2 * s] > 0, summed) << s;
    EXPECT_EQ(sums[2 * s + 1] > 0, summed) << s;
  }
}

// AdamW and SGD given a 2-byte compute copy: the same master bits, and the copy holds each
// updated element rounded (as convert writes it: precision.hpp's bits, the special values'
// too), the elements between segments untouched.
TEST(CpuSegments, UpdatesWriteTheRoundedComputeCopy) {
  for (const Precision p : {Precision::Bf16, Precision::Fp16}) {
    for (const bool is_adamw : {true, false}) {
      const State start = with_special_values();
      const State plain =
          is_adamw ? adamw(Calls::Fused, 1, {}, start) : sgd(Calls::Fused, 1, {}, start);
      for (const int threads : {1, 3}) {
        const uint16_t kUntouched = 0x7bcd;
        std::vector<uint16_t> copy(kTotal, kUntouched);
        const Buf<float> rounded(copy.data(), p);
        const State st = is_adamw ? adamw(Calls::Fused, threads, rounded, start)
                                  : sgd(Calls::Fused, threads, rounded, start);
        const std::string what = std::string(is_adamw ? "adamw " : "sgd ") + to_string(p) + ", " +
                                 std::to_string(threads) + " threads";
        expect_same(st, plain, what.c_str());
        size_t at = 0, wrong = 0, gap = 0;
        for (const Segment& s : kSegments) {
          for (size_t i = at; i < s.at; ++i) gap += copy[i] != kUntouched;
          for (size_t i = s.at; i < s.at + s.n; ++i)
            wrong += copy[i] != to_half_bits(st.param[i], p);
          at = s.at + s.n;
        }
        EXPECT_EQ(wrong, 0u) << what;
        EXPECT_EQ(gap, 0u) << what;
        size_t nan = 0, inf = 0, subnormal = 0;  // the special values reached the copy
        const uint16_t exponent = p == Precision::Bf16 ? 0x7f80 : 0x7c00;
        for (const uint16_t h : copy) {
          nan += std::isnan(from_half_bits(h, p));
          inf += std::isinf(from_half_bits(h, p));
          subnormal += (h & exponent) == 0 && (h & 0x7fff) != 0;
        }
        EXPECT_GT(nan, 1000u) << what;
        EXPECT_GT(inf, 1000u) << what;
        EXPECT_GT(subnormal, 1000u) << what;
      }
    }
  }
  CpuBackend<float> be(1);  // an fp32 copy is no compute copy
  State st;
  EXPECT_THROW(be.adamw(st.param.data(), st.grad.data(), st.m.data(), st.v.data(), kSegments, 1e-3f,
                        0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, Buf<float>(st.m.data())),
               Error);
}

}  // namespace
