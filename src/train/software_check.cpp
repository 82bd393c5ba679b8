#include "mpitrain/train/software_check.hpp"

#include <cblas.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/build_id.hpp"
#include "mpitrain/runtime/watchdog.hpp"

namespace mpitrain {

namespace {

uint64_t fnv1a(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// "name=value\n" per field; the inverse of parse().
std::string serialize(const std::vector<SoftwareField>& fields) {
  std::string out;
  for (const SoftwareField& f : fields) out += f.name + "=" + f.value + "\n";
  return out;
}

std::vector<SoftwareField> parse(const std::string& text) {
  std::vector<SoftwareField> fields;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = text.find('\n', begin), eq = text.find('=', begin);
    fields.push_back({text.substr(begin, eq - begin), text.substr(eq + 1, end - eq - 1)});
    begin = end + 1;
  }
  return fields;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// The options ("name = value" lines) in which the first few ranks whose configuration differs
// from rank 0's differ from it.
std::string option_differences(const std::vector<std::string>& configs) {
  const std::vector<std::string> base = lines(configs[0]);
  std::string text;
  int shown = 0;
  for (size_t r = 1; r < configs.size() && shown < 4; ++r) {
    if (configs[r] == configs[0]) continue;
    ++shown;
    const std::vector<std::string> other = lines(configs[r]);
    text += "  options of rank " + std::to_string(r) + " that differ from rank 0's:";
    for (const std::string& line : other)
      if (std::find(base.begin(), base.end(), line) == base.end()) text += " [" + line + "]";
    text += " (rank 0:";
    for (const std::string& line : base)
      if (std::find(other.begin(), other.end(), line) == other.end()) text += " [" + line + "]";
    text += ")\n";
  }
  return text;
}

std::string first_line(const char* text) {
  const std::string s(text);
  return s.substr(0, s.find('\n'));
}

}  // namespace

std::vector<SoftwareField> local_software(const std::string& config_text, const FaultPlan& faults,
                                          int world_rank) {
  std::vector<SoftwareField> fields;
  std::string build = build_id();
  if (faults.fires(FaultKind::Version, world_rank, 0)) build += " (fault injection: version)";
  fields.push_back({"build_id", build});
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  MPI_CHECK(MPI_Get_library_version(mpi, &length));
  fields.push_back({"mpi", first_line(mpi)});
  unsigned major = 0, minor = 0, release = 0;
  if (H5get_libversion(&major, &minor, &release) < 0) MPITRAIN_THROW("H5get_libversion failed");
  fields.push_back({"hdf5", std::to_string(major) + "." + std::to_string(minor) + "." +
                                std::to_string(release)});
  fields.push_back({"openblas", first_line(openblas_get_config())});
  // A CUDA build adds "cuda" (cudaRuntimeGetVersion, cudaDriverGetVersion), "cudnn"
  // (cudnnGetVersion) and "nccl" (ncclGetVersion) here.
  char hash[24];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(fnv1a(config_text)));
  fields.push_back({"config", hash});
  for (SoftwareField& f : fields)  // one line each: the serialized form separates by newlines
    std::replace(f.value.begin(), f.value.end(), '\n', ' ');
  return fields;
}

std::string software_differences(const std::vector<std::vector<SoftwareField>>& ranks,
                                 const std::vector<std::string>& hosts) {
  struct Row {
    std::string field, value, ranks, hosts;
  };
  std::vector<Row> rows;
  const size_t n_fields = ranks.empty() ? 0 : ranks[0].size();
  for (size_t f = 0; f < n_fields; ++f) {
    std::map<std::string, std::vector<int>> holders;  // value -> ranks
    for (size_t r = 0; r < ranks.size(); ++r)
      holders[f < ranks[r].size() ? ranks[r][f].value : "(missing)"].push_back(static_cast<int>(r));
    if (holders.size() < 2) continue;
    // The value rank 0 has first, then the others.
    std::vector<std::pair<std::string, std::vector<int>>> values(holders.begin(), holders.end());
    std::stable_partition(values.begin(), values.end(),
                          [](const auto& v) { return v.second.front() == 0; });
    bool first = true;  // the field's name on its first row only
    for (const auto& [value, holder_ranks] : values) {
      std::vector<std::string> names;
      for (int r : holder_ranks)
        if (std::find(names.begin(), names.end(), hosts[r]) == names.end())
          names.push_back(hosts[r]);
      std::string host_list;
      for (const std::string& h : names) host_list.append(host_list.empty() ? "" : ",").append(h);
      rows.push_back({first ? ranks[0][f].name : "", value, rank_ranges(holder_ranks), host_list});
      first = false;
    }
  }
  if (rows.empty()) return "";
  size_t w[3] = {5, 5, 5};  // field, value, ranks
  for (const Row& r : rows) {
    w[0] = std::max(w[0], r.field.size());
    w[1] = std::max(w[1], r.value.size());
    w[2] = std::max(w[2], r.ranks.size());
  }
  auto line = [&](const std::string& a, const std::string& b, const std::string& c,
                  const std::string& d) {
    return "  " + a + std::string(w[0] - a.size() + 2, ' ') + b +
           std::string(w[1] - b.size() + 2, ' ') + c + std::string(w[2] - c.size() + 2, ' ') + d +
           "\n";
  };
  std::string table =
      "the ranks do not run the same software and configuration (mixed installations across "
      "nodes cause silent trouble):\n" +
      line("field", "value", "ranks", "hosts");
  for (const Row& r : rows) table += line(r.field, r.value, r.ranks, r.hosts);
  table.pop_back();  // the caller ends the message
  return table;
}

void check_software(const MpiComm& world, const std::string& config_text, const FaultPlan& faults) {
  const std::string mine = serialize(local_software(config_text, faults, world.rank()));
  uint64_t digest[2] = {fnv1a(mine), ~fnv1a(mine)};  // max of both: equal everywhere iff agreed
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, digest, 2, MPI_UINT64_T, MPI_MAX, world.get()));
  if (digest[0] == ~digest[1]) return;

  // They differ: every rank's fields and host to rank 0.
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int host_length = 0;
  MPI_CHECK(MPI_Get_processor_name(host, &host_length));
  constexpr const char* kOptions = "-- options\n";  // between the fields and the options
  const std::string text = std::string(host, host_length) + "\n" + mine + kOptions + config_text;
  const bool root = world.rank() == 0;
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(root ? world.size() : 0), displs(lengths.size());
  MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world.get()));
  for (size_t i = 1; i < displs.size(); ++i) displs[i] = displs[i - 1] + lengths[i - 1];
  std::string all(root ? displs.back() + lengths.back() : 0, '\0');
  MPI_CHECK(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(),
                        MPI_CHAR, 0, world.get()));
  all_or_none(world, [&] {
    if (!root) return;
    std::vector<std::vector<SoftwareField>> ranks;
    std::vector<std::string> hosts, configs;
    for (size_t r = 0; r < lengths.size(); ++r) {
      const std::string one = all.substr(displs[r], lengths[r]);
      const size_t newline = one.find('\n'), options = one.find(kOptions);
      hosts.push_back(one.substr(0, newline));
      ranks.push_back(parse(one.substr(newline + 1, options - newline - 1)));
      configs.push_back(one.substr(options + std::strlen(kOptions)));
    }
    const std::string options = option_differences(configs);
    throw UsageError(software_differences(ranks, hosts) +
                     (options.empty() ? "" : "\n" + options.substr(0, options.size() - 1)));
  });
}

}  // namespace mpitrain
