// CPU affinity: this process's allowed CPUs, the list form, the fair share of a host's CPUs,
// the default thread count and the once-per-host warning.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "mpitrain/runtime/affinity.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/run_setup.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;

namespace {

// Restricts this process to `cpus` for the scope, then restores what it had.
class ScopedAffinity {
 public:
  explicit ScopedAffinity(const std::vector<int>& cpus) {
    if (sched_getaffinity(0, sizeof saved_, &saved_) != 0) ADD_FAILURE() << std::strerror(errno);
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu : cpus) CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0) ADD_FAILURE() << std::strerror(errno);
  }
  ~ScopedAffinity() {
    if (sched_setaffinity(0, sizeof saved_, &saved_) != 0) ADD_FAILURE() << std::strerror(errno);
  }
  ScopedAffinity(const ScopedAffinity&) = delete;
  ScopedAffinity& operator=(const ScopedAffinity&) = delete;

 private:
  cpu_set_t saved_;
};

NodeCpus node(std::vector<std::vector<int>> cpus, int me = 0, int host_cpus = 0) {
  NodeCpus n;
  n.host = "n1";
  n.host_cpus = host_cpus;
  for (size_t i = 0; i < cpus.size(); ++i) n.world_ranks.push_back(static_cast<int>(i));
  n.cpus = std::move(cpus);
  n.me = me;
  return n;
}

}  // namespace

TEST(Affinity, CpuListFormat) {
  EXPECT_EQ(format_cpu_list({}), "");
  EXPECT_EQ(format_cpu_list({0}), "0");
  EXPECT_EQ(format_cpu_list({0, 1}), "0-1");
  EXPECT_EQ(format_cpu_list({0, 2}), "0,2");
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
}

TEST(Affinity, CpuListParse) {
  EXPECT_EQ(parse_cpu_list(""), std::vector<int>{});
  EXPECT_EQ(parse_cpu_list("5"), std::vector<int>{5});
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(parse_cpu_list("4,0-1,1"), (std::vector<int>{0, 1, 4}));  // sorted, once each
  for (const char* bad : {",", "0,", ",0", "a", "1-", "-1", "3-1", "1-2-3", " 1", "0x1", "1;2"})
    EXPECT_THROW(parse_cpu_list(bad), UsageError) << bad;
  const std::vector<int> cpus = {0, 2, 3, 4, 7, 63, 64, 1000};
  EXPECT_EQ(parse_cpu_list(format_cpu_list(cpus)), cpus);
}

TEST(Affinity, AllowedCpusFollowSchedSetaffinity) {
  const std::vector<int> all = allowed_cpus();
  ASSERT_FALSE(all.empty());
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0) << std::strerror(errno);
  EXPECT_EQ(static_cast<int>(all.size()), CPU_COUNT(&set));
  {
    const ScopedAffinity one({all.front()});
    EXPECT_EQ(allowed_cpus(), std::vector<int>{all.front()});
    if (all.size() >= 2) {
      const ScopedAffinity two({all.front(), all.back()});
      EXPECT_EQ(allowed_cpus(), (std::vector<int>{all.front(), all.back()}));
    }
  }
  EXPECT_EQ(allowed_cpus(), all);
}

TEST(Affinity, FairShareSplitsSharedCpus) {
  EXPECT_EQ(fair_cpu_share(node({{0, 1, 2, 3}})), 4);
  EXPECT_EQ(fair_cpu_share(node({{0, 1}, {2, 3}}, 1)), 2);                   // bound apart
  EXPECT_EQ(fair_cpu_share(node({{0, 1, 2, 3}, {0, 1, 2, 3}}, 1)), 2);       // unbound
  EXPECT_EQ(fair_cpu_share(node({{0, 1, 2}, {0, 1, 2}, {0, 1, 2}}, 2)), 1);  // thirds add to 1
  EXPECT_EQ(fair_cpu_share(node({{0}, {0}, {0}, {0}})), 1);                  // at least 1
  // Two ranks per socket of 4 CPUs, one rank alone on its own CPUs.
  const auto sockets = node({{0, 1, 2, 3}, {0, 1, 2, 3}, {4, 5, 6, 7}});
  EXPECT_EQ(fair_cpu_share(sockets), 2);
  NodeCpus third = sockets;
  third.me = 2;
  EXPECT_EQ(fair_cpu_share(third), 4);
}

TEST(Threads, OptionThenEnvironmentThenUsableCpus) {
  EXPECT_EQ(resolve_threads(3, "5", 8), 3);      // --threads wins
  EXPECT_EQ(resolve_threads(0, "5", 8), 5);      // then OMP_NUM_THREADS
  EXPECT_EQ(resolve_threads(0, "4,2", 8), 4);    // nested levels: the outer one
  EXPECT_EQ(resolve_threads(0, nullptr, 8), 8);  // then the CPUs this rank may use
  for (const char* unset : {"", "0", "-2", "many"}) EXPECT_EQ(resolve_threads(0, unset, 6), 6);
  EXPECT_EQ(resolve_threads(0, nullptr, 0), 1);
}

TEST(Threads, DefaultIsTheAffinityCount) {
  const std::vector<int> all = allowed_cpus();
  const ScopedAffinity one({all.front()});
  NodeCpus n = node({allowed_cpus()});
  EXPECT_EQ(resolve_threads(0, nullptr, fair_cpu_share(n)), 1);
}

TEST(Affinity, NoWarningWhenThreadsFit) {
  EXPECT_EQ(host_affinity_warning(node({{0, 1}, {2, 3}}), {2, 2}), "");
  EXPECT_EQ(host_affinity_warning(node({{0, 1, 2, 3}, {0, 1, 2, 3}}), {2, 2}), "");  // unbound
  EXPECT_EQ(host_affinity_warning(node({{0}, {1}}), {1, 1}), "");
}

TEST(Affinity, WarnsOfMoreThreadsThanAllowedCpus) {
  // The report's case: one rank bound to one core by Open MPI, --threads 2.
  const std::string w = host_affinity_warning(node({{0}}), {2});
  EXPECT_EQ(w.find('\n'), std::string::npos);
  EXPECT_EQ(w.rfind("warning: host n1: rank 0 runs 2 threads on 1 allowed CPU;", 0), 0u) << w;
  EXPECT_NE(w.find("mpirun --bind-to none"), std::string::npos) << w;
  EXPECT_NE(w.find("--map-by slot:PE=2 --bind-to core"), std::string::npos) << w;
  EXPECT_NE(w.find("srun --cpus-per-task=2 --cpu-bind=cores"), std::string::npos) << w;
  // Ranks alike are named together.
  const std::string many = host_affinity_warning(node({{0}, {1}, {2}, {3}}), {2, 2, 2, 2});
  EXPECT_NE(many.find("ranks 0-3 run 2 threads on 1 allowed CPU each"), std::string::npos) << many;
}

TEST(Affinity, WarnsOfRanksSharingCpus) {
  // 4 ranks unbound on 2 CPUs (the oversubscribed test runs): one line for the host.
  const std::string w = host_affinity_warning(node({{0, 1}, {0, 1}, {0, 1}, {0, 1}}), {1, 1, 1, 1});
  EXPECT_EQ(w.find('\n'), std::string::npos);
  EXPECT_NE(w.find("ranks 0-3 share CPUs 0-1 (2 CPUs) and run 4 threads on them"),
            std::string::npos)
      << w;
  EXPECT_EQ(w.find("allowed CPU"), std::string::npos) << w;  // each fits its own set
  // Overlap links ranks: 0-1 and 1-2 make one group; rank 3 apart is fine.
  const std::string chain =
      host_affinity_warning(node({{0, 1}, {1, 2}, {2, 3}, {4, 5}}), {2, 2, 2, 2});
  EXPECT_NE(chain.find("ranks 0-2 share CPUs 0-3 (4 CPUs) and run 6 threads"), std::string::npos)
      << chain;
  EXPECT_EQ(chain.find("rank 3"), std::string::npos) << chain;
}

// Issue 32: 4 ranks x 1 thread, mpirun --bind-to none on 2 CPUs was told "Fix: mpirun
// --bind-to none". Unbound already: what is wrong is the count, and only fewer ranks fix it.
TEST(Affinity, UnboundRanksOutnumberingCpusAreToldTheCount) {
  for (const int host_cpus : {2, 0}) {  // the host's CPUs known, or not: the ranks share one set
    const std::string w = host_affinity_warning(
        node({{0, 1}, {0, 1}, {0, 1}, {0, 1}}, 0, host_cpus), {1, 1, 1, 1});
    EXPECT_EQ(w.find('\n'), std::string::npos) << w;
    EXPECT_NE(w.find("in all 4 ranks x 1 thread = 4 threads on 2 CPUs (0-1): more threads than "
                     "CPUs"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("Fix: at most 2 ranks of 1 thread on this host (mpirun --map-by ppr:2:node, "
                     "srun --ntasks-per-node=2)"),
              std::string::npos)
        << w;
    EXPECT_EQ(w.find("bind-to"), std::string::npos) << w;  // no binding helps
    EXPECT_EQ(w.find("--threads"), std::string::npos) << w;  // 1 thread is the fewest
  }
  // One rank, all of a 2-CPU host, 4 threads: fewer threads.
  const std::string lone = host_affinity_warning(node({{0, 1}}, 0, 2), {4});
  EXPECT_NE(lone.find("in all 1 rank x 4 threads = 4 threads on 2 CPUs (0-1)"), std::string::npos)
      << lone;
  EXPECT_NE(lone.find("Fix: --threads 2"), std::string::npos) << lone;
  EXPECT_EQ(lone.find("bind-to"), std::string::npos) << lone;
}

TEST(Affinity, BoundRanksAreToldToBindOtherwiseWhereTheHostHasTheCpus) {
  // Bound to a core each on a 4-CPU host, 2 threads each: binding apart fixes it.
  const std::string fits = host_affinity_warning(node({{0}, {1}}, 0, 4), {2, 2});
  EXPECT_NE(fits.find("Fix: mpirun --bind-to none"), std::string::npos) << fits;
  EXPECT_EQ(fits.find("in all"), std::string::npos) << fits;
  // The same on a 2-CPU host: 4 threads cannot fit 2 CPUs however bound.
  const std::string full = host_affinity_warning(node({{0}, {1}}, 0, 2), {2, 2});
  EXPECT_NE(full.find("in all 2 ranks x 2 threads = 4 threads on 2 CPUs (the host's)"),
            std::string::npos)
      << full;
  EXPECT_NE(full.find("Fix: at most 1 rank of 2 threads on this host"), std::string::npos)
      << full;
  EXPECT_NE(full.find(", or --threads 1 in each of the 2 ranks"), std::string::npos) << full;
  EXPECT_EQ(full.find("bind-to"), std::string::npos) << full;
}

// The MFU peak counts each CPU of a host once: shares add up to the CPUs the ranks may use.
TEST(Affinity, CpuShareCountsEachCpuOnce) {
  for (int me = 0; me < 4; ++me)
    EXPECT_DOUBLE_EQ(cpu_share(node({{0, 1}, {0, 1}, {0, 1}, {0, 1}}, me)), 0.5);
  EXPECT_DOUBLE_EQ(cpu_share(node({{0, 1}, {2, 3}}, 1)), 2.0);
  double sum = 0.0;  // 0-1 and 1-2 overlap on CPU 1: 1.5 + 1.5 = the 3 CPUs
  for (int me = 0; me < 2; ++me) sum += cpu_share(node({{0, 1}, {1, 2}}, me));
  EXPECT_DOUBLE_EQ(sum, 3.0);
}

TEST(Affinity, WarningsOnePerHostOverMpi) {
  mpitrain::test::start_mpi();
  const MpiComm world = MpiComm::world();
  const MpiComm node_comm = world.split_shared();
  const NodeCpus n = gather_node_cpus(node_comm);
  ASSERT_EQ(static_cast<int>(n.cpus.size()), node_comm.size());
  EXPECT_EQ(n.cpus[n.me], allowed_cpus());
  EXPECT_EQ(n.world_ranks[n.me], world.rank());
  // More threads than this rank's CPUs: the host (every rank here is on one) warns once.
  const int too_many = static_cast<int>(allowed_cpus().size()) + 1;
  const std::vector<std::string> w = affinity_warnings(world, node_comm, n, too_many);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("host " + mpi_host_name() + ":"), std::string::npos) << w[0];
  // The fair share fits unless the host has more ranks than CPUs.
  std::set<int> host_cpus;
  for (const std::vector<int>& set : n.cpus) host_cpus.insert(set.begin(), set.end());
  const auto fair = affinity_warnings(world, node_comm, n, fair_cpu_share(n));
  EXPECT_EQ(fair.size(), node_comm.size() > static_cast<int>(host_cpus.size()) ? 1u : 0u);
}
