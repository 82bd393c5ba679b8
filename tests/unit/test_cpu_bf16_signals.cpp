// The oneDNN bf16 products survive a storm of signals (issue 22: oneDNN 2.6.3's AVX-512 f32 GEMM
// points its stack pointer into the heap, so a signal handled inside it writes its frame over
// heap memory). A forked child runs GPT-2-shaped bf16 products (fc: 512 x 768 -> 3072, forward
// and both backward products: oneDNN's jit gemm, or its brgemm with AMX, cpu_matmul_bf16.hpp;
// then the same at 256 tokens: its brgemm) through CpuBackend while another thread sends it
// SIGUSR1 every few microseconds; every result must equal the first, bit for bit, and the child
// must exit cleanly (a corrupted heap aborts in free). Replacing the products with dnnl_sgemm
// makes it fail: the child died of SIGSEGV/SIGABRT after a few thousand signals on the AMD EPYC
// Zen 5 host.
#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "mpitrain/backend/bf16_gemm_rate.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/precision.hpp"

namespace mpitrain {
namespace {

volatile sig_atomic_t handled = 0;
void on_signal(int) {
  volatile char frame[2048];  // a handler that uses its stack, as the trainer's may
  std::memset(const_cast<char*>(frame), 1, sizeof frame);
  handled = handled + 1;
}

// n bf16 values in (-1, 1): sin of the index times a seed.
std::vector<float> bf16_values(size_t n, int seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = round_to(std::sin(static_cast<float>(i * seed + 1)), Precision::Bf16);
  return v;
}

// The child: 0 when every round's results equal the first's and signals arrived, 1 otherwise;
// N tokens.
int products_under_signals(int rounds, int N) {
  omp_set_num_threads(1);  // no OpenMP pool is inherited across fork
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  if (sigaction(SIGUSR1, &sa, nullptr) != 0) return 1;
  const int IC = 768, OC = 3072;
  handled = 0;
  CpuBackend<float> be(1, Precision::Bf16);
  const std::vector<float> inp = bf16_values(size_t{1} * N * IC, 1),
                           w = bf16_values(size_t{1} * OC * IC, 2),
                           dout = bf16_values(size_t{1} * N * OC, 3);
  std::vector<std::vector<float>> first;
  const pthread_t me = pthread_self();
  std::atomic<bool> done{false};
  std::thread storm([&] {
    while (!done.load()) {
      pthread_kill(me, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::microseconds(5));
    }
  });
  bool same = true;
  for (int r = 0; r < rounds && same; ++r) {
    std::vector<float> out(size_t{1} * N * OC), dinp(size_t{1} * N * IC),
        dw(size_t{1} * OC * IC, 0.0f);
    be.matmul_forward(out.data(), inp.data(), w.data(), {}, N, IC, OC);
    be.matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, IC,
                       OC, GradWrite::Add);
    std::vector<std::vector<float>> all{std::move(out), std::move(dinp), std::move(dw)};
    if (r == 0)
      first = std::move(all);
    else
      same = all == first;
  }
  done = true;
  storm.join();
  return same && handled > 0 ? 0 : 1;
}

TEST(CpuBf16Signals, ProductsSurviveASignalStorm) {
  if (!cpu_bf16_gemms()) GTEST_SKIP() << "this CPU has no bf16 instructions: sgemm runs instead";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(products_under_signals(12, 512) | products_under_signals(12, 256));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "results changed under signals, or none arrived";
}

}  // namespace
}  // namespace mpitrain
