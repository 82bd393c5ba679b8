// Which CPUs each rank may run on, and whether its threads fit them.
//
// A launcher binds ranks (Open MPI binds one or two ranks to a core each by default; srun binds
// with --cpu-bind): a rank's OpenMP threads then run only on its allowed CPUs
// (sched_getaffinity), and threads beyond them wait for each other. NodeCpus holds every rank
// of one host with its allowed CPUs, gathered once; fair_cpu_share gives the default thread count
// and host_affinity_warning says, once per host, where threads wait and how to launch instead.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

// The CPUs this process may run on (sched_getaffinity), ascending. Error on failure.
std::vector<int> allowed_cpus();

// Linux's CPU list form, as in /sys/devices/system/cpu/online: ascending CPUs with runs
// shortened, "0-3,8,10-11"; "" for none. parse_cpu_list reads it back (any order, overlaps
// allowed) and throws UsageError on anything else.
std::string format_cpu_list(const std::vector<int>& cpus);
std::vector<int> parse_cpu_list(std::string_view text);

// The host as MPI names it (MPI_Get_processor_name).
std::string mpi_host_name();

// The ranks of one host, in node rank order.
struct NodeCpus {
  std::string host;
  std::vector<int> world_ranks;
  std::vector<std::vector<int>> cpus;  // each rank's allowed CPUs, ascending
  int me = 0;                          // this rank's index
  int host_cpus = 0;                   // the host's CPUs online (sysconf); 0: unknown
};

// Collective over node (the ranks of one host: MpiComm::split_shared of world).
NodeCpus gather_node_cpus(const MpiComm& node);

// Pure: rank n.me's share of the host's CPUs when each CPU is shared evenly by the ranks allowed
// on it (a CPU allowed to k ranks counts 1/k): the shares of a host's ranks add up to the CPUs
// they may use, each counted once (the MFU peak counts CPUs so). Ranks bound apart get their
// whole set; unbound ranks split the host.
double cpu_share(const NodeCpus& n);
// Pure: the CPUs rank n.me may keep busy: cpu_share rounded down, at least 1.
int fair_cpu_share(const NodeCpus& n);

// Pure: "" when every rank's threads fit, else one line naming the host, (a) ranks with more
// threads than allowed CPUs, (b) ranks whose allowed CPUs overlap and that together run more
// threads than those CPUs, and the fix: where no binding makes them fit (the ranks may all use
// the same CPUs already, or run more threads than the host has) "N ranks x T threads = S threads
// on C CPUs" and how many ranks or threads fit; else the launch lines that bind them apart.
// threads[i] is rank i's count.
std::string host_affinity_warning(const NodeCpus& n, const std::vector<int>& threads);

// Collective over world and node: every host's warning (those that have one), in world rank
// order of the hosts' first ranks, the same list on every rank. `threads`: this rank's count.
std::vector<std::string> affinity_warnings(const MpiComm& world, const MpiComm& node,
                                           const NodeCpus& n, int threads);

}  // namespace mpitrain
