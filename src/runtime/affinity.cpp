#include "mpitrain/runtime/affinity.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <utility>

namespace mpitrain {

namespace {

constexpr int kMaxCpus = 1 << 20;  // far above any machine; bounds a list's ranges

struct CpuSetFree {
  void operator()(cpu_set_t* set) const { CPU_FREE(set); }
};

// Every rank's `mine`, in comm's rank order.
std::vector<std::string> allgather_strings(const MpiComm& comm, const std::string& mine) {
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(comm.size()), displs(comm.size());
  MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, comm.get()));
  for (size_t i = 1; i < displs.size(); ++i) displs[i] = displs[i - 1] + lengths[i - 1];
  std::string all(displs.back() + lengths.back(), '\0');
  MPI_CHECK(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(),
                           MPI_CHAR, comm.get()));
  std::vector<std::string> out;
  for (int i = 0; i < comm.size(); ++i) out.push_back(all.substr(displs[i], lengths[i]));
  return out;
}

int parse_id(std::string_view text, std::string_view list) {
  int value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  require(ec == std::errc() && end == text.data() + text.size() && value >= 0,
          "bad CPU list '" + std::string(list) + "'");
  return value;
}

// Disjoint sets of ranks (union-find with path halving).
class RankGroups {
 public:
  explicit RankGroups(int n) : parent_(n) { std::iota(parent_.begin(), parent_.end(), 0); }
  int find(int i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void join(int a, int b) { parent_[find(a)] = find(b); }

 private:
  std::vector<int> parent_;
};

std::string plural(int n, const std::string& word) {
  return std::to_string(n) + " " + word + (n == 1 ? "" : "s");
}

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + format_cpu_list(ranks);
}

// (a): ranks with more threads than allowed CPUs, those alike (threads, CPUs) named together.
std::vector<std::string> too_many_threads(const NodeCpus& n, const std::vector<int>& threads) {
  std::map<std::pair<int, int>, std::vector<int>> alike;  // (threads, CPUs) -> world ranks
  for (size_t i = 0; i < n.cpus.size(); ++i) {
    const int count = static_cast<int>(n.cpus[i].size());
    if (threads[i] > count) alike[{threads[i], count}].push_back(n.world_ranks[i]);
  }
  std::vector<std::string> out;
  for (const auto& [key, ranks] : alike) {
    const bool one = ranks.size() == 1;
    out.push_back(ranks_text(ranks) + (one ? " runs " : " run ") + plural(key.first, "thread") +
                  " on " + plural(key.second, "allowed CPU") + (one ? "" : " each"));
  }
  return out;
}

// (b): groups of ranks whose allowed CPUs overlap and that run more threads than those CPUs.
std::vector<std::string> shared_cpus(const NodeCpus& n, const std::vector<int>& threads) {
  const int ranks = static_cast<int>(n.cpus.size());
  RankGroups groups(ranks);
  std::map<int, int> first_on;  // CPU -> the first rank allowed on it
  for (int i = 0; i < ranks; ++i)
    for (int cpu : n.cpus[i])
      if (auto [it, fresh] = first_on.emplace(cpu, i); !fresh) groups.join(i, it->second);
  std::vector<std::string> out;
  for (int root = 0; root < ranks; ++root) {
    std::vector<int> members, cpus;
    int sum = 0;
    for (int i = 0; i < ranks; ++i) {
      if (groups.find(i) != root) continue;
      members.push_back(n.world_ranks[i]);
      cpus.insert(cpus.end(), n.cpus[i].begin(), n.cpus[i].end());
      sum += threads[i];
    }
    std::sort(cpus.begin(), cpus.end());
    cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
    if (members.size() < 2 || sum <= static_cast<int>(cpus.size())) continue;
    std::sort(members.begin(), members.end());
    out.push_back(ranks_text(members) + " share CPUs " + format_cpu_list(cpus) + " (" +
                  plural(static_cast<int>(cpus.size()), "CPU") + ") and run " +
                  plural(sum, "thread") + " on them");
  }
  return out;
}

// Where no binding helps: the ranks' threads outnumber the CPUs they could have, which are the
// CPUs they share already when every rank may use all of them (unbound, or one cpuset for all:
// a launcher or cgroup gave the job no more), else the host's. "" where binding would help.
std::string too_many_for_host(const NodeCpus& n, const std::vector<int>& threads) {
  std::vector<int> all;  // the CPUs any rank may use
  for (const std::vector<int>& set : n.cpus) all.insert(all.end(), set.begin(), set.end());
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  const bool one_set = std::all_of(n.cpus.begin(), n.cpus.end(),
                                   [&](const std::vector<int>& set) { return set == all; });
  const int usable = static_cast<int>(all.size());
  // A lone rank's set smaller than the host may be its binding (Open MPI binds one to a core).
  const bool unbound =
      one_set && (n.cpus.size() > 1 || (n.host_cpus > 0 && usable >= n.host_cpus));
  const int cpus = unbound ? usable : n.host_cpus;
  const int ranks = static_cast<int>(threads.size());
  const int sum = std::accumulate(threads.begin(), threads.end(), 0);
  if (!unbound && (n.host_cpus <= 0 || sum <= n.host_cpus)) return "";
  const int most = *std::max_element(threads.begin(), threads.end());
  const bool alike = std::all_of(threads.begin(), threads.end(), [&](int t) { return t == most; });
  const std::string what = alike ? plural(ranks, "rank") + " x " + plural(most, "thread") + " = "
                                 : plural(ranks, "rank") + " running ";
  std::vector<std::string> fixes;  // the largest counts that fit
  if (alike && cpus / most >= 1 && cpus / most < ranks) {
    const std::string r = std::to_string(cpus / most);
    fixes.push_back("at most " + plural(cpus / most, "rank") + " of " + plural(most, "thread") +
                    " on this host (mpirun --map-by ppr:" + r + ":node, srun --ntasks-per-node=" +
                    r + ")");
  }
  if (cpus / ranks >= 1 && cpus / ranks < most)
    fixes.push_back("--threads " + std::to_string(cpus / ranks) +
                    (ranks > 1 ? " in each of the " + std::to_string(ranks) + " ranks" : ""));
  if (fixes.empty()) fixes.push_back("fewer ranks or --threads on this host");
  std::string text = "in all " + what + plural(sum, "thread") + " on " + plural(cpus, "CPU") +
                     (unbound ? " (" + format_cpu_list(all) + ")" : " (the host's)") +
                     ": more threads than CPUs, so they wait for each other whatever the "
                     "binding. Fix: ";
  for (size_t i = 0; i < fixes.size(); ++i) text += (i ? ", or " : "") + fixes[i];
  return text;
}

}  // namespace

std::vector<int> allowed_cpus() {
  // The kernel's mask may be wider than cpu_set_t's 1024 CPUs: grow until it fits (EINVAL).
  const long configured = sysconf(_SC_NPROCESSORS_CONF);  // -1 when unknown
  for (int width = static_cast<int>(std::max<long>(CPU_SETSIZE, configured));; width *= 2) {
    const std::unique_ptr<cpu_set_t, CpuSetFree> set(CPU_ALLOC(width));
    if (!set) MPITRAIN_THROW(std::string("CPU_ALLOC: ") + std::strerror(errno));
    const size_t bytes = CPU_ALLOC_SIZE(width);
    if (sched_getaffinity(0, bytes, set.get()) != 0) {
      if (errno == EINVAL && width < kMaxCpus) continue;
      MPITRAIN_THROW(std::string("sched_getaffinity: ") + std::strerror(errno));
    }
    std::vector<int> cpus;
    for (int cpu = 0; cpu < width; ++cpu)
      if (CPU_ISSET_S(cpu, bytes, set.get())) cpus.push_back(cpu);
    return cpus;
  }
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {  // i..j: one run of consecutive CPUs
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  for (std::string_view rest = text; !rest.empty();) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    require(comma == std::string_view::npos || !rest.empty(),
            "bad CPU list '" + std::string(text) + "'");
    const size_t dash = item.find('-');
    const int first = parse_id(item.substr(0, dash), text);
    const int last = dash == std::string_view::npos ? first : parse_id(item.substr(dash + 1), text);
    require(first <= last && last < kMaxCpus, "bad CPU list '" + std::string(text) + "'");
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string mpi_host_name() {
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_CHECK(MPI_Get_processor_name(host, &length));
  return std::string(host, length);
}

NodeCpus gather_node_cpus(const MpiComm& node) {
  NodeCpus n;
  n.host = mpi_host_name();
  n.world_ranks = world_ranks_of(node.get());
  n.me = node.rank();
  n.host_cpus = static_cast<int>(std::max(0L, sysconf(_SC_NPROCESSORS_ONLN)));
  for (const std::string& list : allgather_strings(node, format_cpu_list(allowed_cpus())))
    n.cpus.push_back(parse_cpu_list(list));
  return n;
}

double cpu_share(const NodeCpus& n) {
  std::map<int, int> ranks_on;  // CPU -> the ranks allowed on it
  for (const std::vector<int>& set : n.cpus)
    for (int cpu : set) ++ranks_on[cpu];
  double share = 0.0;
  for (int cpu : n.cpus[n.me]) share += 1.0 / ranks_on[cpu];
  return share;
}

int fair_cpu_share(const NodeCpus& n) {
  return std::max(1, static_cast<int>(cpu_share(n) + 1e-9));  // thirds summed to 0.999...: 1
}

std::string host_affinity_warning(const NodeCpus& n, const std::vector<int>& threads) {
  std::vector<std::string> problems = too_many_threads(n, threads);
  for (std::string& s : shared_cpus(n, threads)) problems.push_back(std::move(s));
  if (problems.empty()) return "";
  std::string text = "warning: host " + n.host + ": ";
  for (size_t i = 0; i < problems.size(); ++i) text += (i ? "; " : "") + problems[i];
  if (const std::string overload = too_many_for_host(n, threads); !overload.empty())
    return text + "; " + overload;
  const std::string per_rank = std::to_string(*std::max_element(threads.begin(), threads.end()));
  return text + "; threads that share a CPU wait for each other. Fix: mpirun --bind-to none, " +
         "or mpirun --map-by slot:PE=" + per_rank +
         " --bind-to core; srun --cpus-per-task=" + per_rank +
         " --cpu-bind=cores; or fewer --threads or ranks per host";
}

std::vector<std::string> affinity_warnings(const MpiComm& world, const MpiComm& node,
                                           const NodeCpus& n, int threads) {
  std::vector<int> all(node.rank() == 0 ? node.size() : 0);
  MPI_CHECK(MPI_Gather(&threads, 1, MPI_INT, all.data(), 1, MPI_INT, 0, node.get()));
  const std::string mine = node.rank() == 0 ? host_affinity_warning(n, all) : "";
  std::vector<std::string> out;
  for (std::string& text : allgather_strings(world, mine))
    if (!text.empty()) out.push_back(std::move(text));
  return out;
}

}  // namespace mpitrain
