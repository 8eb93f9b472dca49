#include "numa/topology.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/small_file.h"
#include "common/status_util.h"
#include "memory/slot_allocator.h"

#ifdef RINGLOADER_WITH_NUMA
#include <numa.h>
#include <numaif.h>
#endif

namespace ringloader {
namespace {

constexpr size_t kPageBytes = 4096;


class NodeHostAllocator final : public SlotAllocator {
 public:
  explicit NodeHostAllocator(int node)
      : node_(node),
        how_(CanBindMemory() ? "mbind preferred" : "first touch by pinned threads, no libnuma") {}
  void* Allocate(size_t bytes) override { return AllocateOnNode(bytes, node_); }
  void Free(void* ptr, size_t bytes) override { FreeOnNode(ptr, bytes); }
  bool pinned() const override { return false; }
  std::string name() const override { return absl::StrCat("host (NUMA node ", node_, ", ", how_, ")"); }

 private:
  int node_;
  std::string how_;
};

}  // namespace

absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return cpus;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    const size_t dash = part.find('-');
    int first = 0, last = 0;
    const bool ok = dash == absl::string_view::npos
                        ? ParseWholeInteger(part, &first) && (last = first, true)
                        : ParseWholeInteger(part.substr(0, dash), &first) && ParseWholeInteger(part.substr(dash + 1), &last);
    if (!ok || first < 0 || last < first || last >= (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat("malformed CPU list '", text, "' at '", part, "'"));
    }
    for (int cpu = first; cpu <= last; ++cpu) cpus.push_back(cpu);
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<std::string> ranges;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    ranges.push_back(i == j ? absl::StrCat(cpus[i]) : absl::StrCat(cpus[i], "-", cpus[j]));
    i = j + 1;
  }
  return absl::StrJoin(ranges, ",");
}

std::vector<int> IntersectCpus(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

std::string NormalizePciBusId(absl::string_view bus_id) {
  std::string id(absl::StripAsciiWhitespace(bus_id));
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // domain:bus:device.function; the domain is optional and may be printed with 8 digits.
  const size_t colons = static_cast<size_t>(std::count(id.begin(), id.end(), ':'));
  if (colons == 1) return absl::StrCat("0000:", id);
  if (colons == 2) {
    const size_t first = id.find(':');
    std::string domain = id.substr(0, first);
    if (domain.size() > 4) {
      // Keep the low 4 digits (the Linux domain); the rest are leading zeros in practice.
      domain = domain.substr(domain.size() - 4);
    }
    while (domain.size() < 4) domain.insert(domain.begin(), '0');
    return absl::StrCat(domain, id.substr(first));
  }
  return id;
}

absl::StatusOr<NumaTopology> NumaTopology::Read(const std::string& sysfs_root) {
  NumaTopology topology;
  topology.root_ = sysfs_root;
  const std::string dir = absl::StrCat(sysfs_root, "/devices/system/node");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return topology;  // kernel without NUMA: one implicit node, nothing to place
  while (dirent* entry = readdir(d)) {
    absl::string_view name(entry->d_name);
    if (!absl::ConsumePrefix(&name, "node")) continue;
    int id = 0;
    if (!ParseWholeInteger(name, &id) || id < 0) continue;
    std::string text;
    if (!ReadSmallFile(absl::StrCat(dir, "/", entry->d_name, "/cpulist"), &text)) continue;
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
    if (!cpus.ok()) {
      absl::Status error = absl::InvalidArgumentError(
          absl::StrCat(dir, "/", entry->d_name, "/cpulist: ", cpus.status().message()));
      closedir(d);  // invalidates entry: the message is built first
      return error;
    }
    topology.nodes_.push_back(NumaNode{id, std::move(*cpus)});
  }
  closedir(d);
  std::sort(topology.nodes_.begin(), topology.nodes_.end(),
            [](const NumaNode& a, const NumaNode& b) { return a.id < b.id; });
  return topology;
}

const NumaNode* NumaTopology::Find(int id) const {
  for (const NumaNode& node : nodes_) {
    if (node.id == id) return &node;
  }
  return nullptr;
}

int NumaTopology::NodeOfCpu(int cpu) const {
  for (const NumaNode& node : nodes_) {
    if (std::binary_search(node.cpus.begin(), node.cpus.end(), cpu)) return node.id;
  }
  return -1;
}

int NumaTopology::NodeOfPciDevice(absl::string_view bus_id) const {
  if (bus_id.empty()) return -1;
  std::string text;
  if (!ReadSmallFile(absl::StrCat(root_, "/bus/pci/devices/", NormalizePciBusId(bus_id), "/numa_node"), &text)) {
    return -1;
  }
  int node = -1;
  if (!ParseWholeInteger(text, &node) || node < 0) return -1;
  return node;
}

std::vector<int> NumaTopology::CoreOf(int cpu) const {
  std::string text;
  if (!ReadSmallFile(absl::StrCat(root_, "/devices/system/cpu/cpu", cpu, "/topology/thread_siblings_list"), &text)) {
    return {};
  }
  absl::StatusOr<std::vector<int>> core = ParseCpuList(text);
  if (!core.ok() || std::find(core->begin(), core->end(), cpu) == core->end()) return {};
  return *core;
}

std::vector<int> ShareOfCpus(const std::vector<int>& cpus, int index, int count,
                             const std::function<std::vector<int>(int)>& core_of) {
  if (count <= 1 || cpus.empty() || !core_of) return ShareOfCpus(cpus, index, count);
  // Each CPU's core, named by its lowest CPU; cores in the order their first CPU appears.
  std::vector<int> core_ids;
  std::vector<std::pair<int, int>> cpu_core;  // (cpu, core id)
  for (int cpu : cpus) {
    const std::vector<int> core = core_of(cpu);
    if (core.empty()) return ShareOfCpus(cpus, index, count);
    const int id = *std::min_element(core.begin(), core.end());
    if (std::find(core_ids.begin(), core_ids.end(), id) == core_ids.end()) core_ids.push_back(id);
    cpu_core.emplace_back(cpu, id);
  }
  const size_t cores = core_ids.size(), parts = static_cast<size_t>(count), i = static_cast<size_t>(index);
  if (cores < parts) return ShareOfCpus(cpus, index, count);
  const std::vector<int> mine(core_ids.begin() + static_cast<std::ptrdiff_t>(i * cores / parts),
                              core_ids.begin() + static_cast<std::ptrdiff_t>((i + 1) * cores / parts));
  std::vector<int> out;
  for (const auto& [cpu, id] : cpu_core) {
    if (std::find(mine.begin(), mine.end(), id) != mine.end()) out.push_back(cpu);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int> ShareOfCpus(const std::vector<int>& cpus, int index, int count) {
  if (count <= 1 || cpus.empty()) return cpus;
  const size_t n = cpus.size(), parts = static_cast<size_t>(count), i = static_cast<size_t>(index);
  // Runs of consecutive ids ([begin, end) positions). Linux numbers a core's SMT siblings a
  // fixed distance apart ("0-19,40-59"): part i of every run keeps a rank's cores whole.
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t b = 0; b < n;) {
    size_t e = b + 1;
    while (e < n && cpus[e] == cpus[e - 1] + 1) ++e;
    runs.emplace_back(b, e);
    b = e;
  }
  const bool each_run = runs.size() > 1 && std::all_of(runs.begin(), runs.end(), [&](const auto& r) {
    return r.second - r.first >= parts;
  });
  if (each_run) {
    std::vector<int> out;
    for (const auto& [b, e] : runs) {
      const size_t len = e - b;
      out.insert(out.end(), cpus.begin() + static_cast<std::ptrdiff_t>(b + i * len / parts),
                 cpus.begin() + static_cast<std::ptrdiff_t>(b + (i + 1) * len / parts));
    }
    return out;
  }
  if (n < parts) return {cpus[i % n]};
  return std::vector<int>(cpus.begin() + static_cast<std::ptrdiff_t>(i * n / parts),
                          cpus.begin() + static_cast<std::ptrdiff_t>((i + 1) * n / parts));
}

namespace {

// ChooseNumaPlacement before the ranks' shares: the node and its allowed CPUs.
absl::StatusOr<NumaPlacement> ChooseNodePlacement(const NumaTopology& topology, const NumaOption& option,
                                                  const std::vector<int>& allowed_cpus, int current_cpu,
                                                  absl::string_view gpu_bus_id) {
  NumaPlacement placement;
  auto existing = [&] {
    std::vector<std::string> ids;
    for (const NumaNode& n : topology.nodes()) ids.push_back(absl::StrCat(n.id));
    return ids.empty() ? std::string("none (no NUMA information under ") + topology.sysfs_root() + ")"
                       : absl::StrJoin(ids, ", ");
  };
  // Threads go on the node's CPUs that this process may use; never outside its affinity mask
  // (a cgroup cpuset or taskset is the operator's decision).
  auto place_on = [&](int node, std::string why) {
    placement.node = node;
    placement.cpus = IntersectCpus(topology.Find(node)->cpus, allowed_cpus);
    placement.note = std::move(why);
  };
  switch (option.mode) {
    case NumaOption::Mode::kOff:
      placement.note = "numa=None: threads and memory not placed";
      return placement;
    case NumaOption::Mode::kNode: {
      if (topology.Find(option.node) == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("numa=", option.node, ": no such NUMA node; nodes: ", existing()));
      }
      place_on(option.node, absl::StrCat("numa=", option.node, " (explicit)"));
      if (placement.cpus.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "numa=", option.node, ": none of the node's CPUs (", FormatCpuList(topology.Find(option.node)->cpus),
            ") is in this process's allowed CPUs (", FormatCpuList(allowed_cpus), ")"));
      }
      return placement;
    }
    case NumaOption::Mode::kAuto:
      break;
  }
  if (topology.nodes().empty()) {
    placement.note = absl::StrCat("numa=auto: ", existing(), "; nothing placed");
    return placement;
  }
  if (!gpu_bus_id.empty()) {
    const int node = topology.NodeOfPciDevice(gpu_bus_id);
    if (node >= 0 && topology.Find(node) != nullptr) {
      place_on(node, absl::StrCat("numa=auto: GPU ", NormalizePciBusId(gpu_bus_id), " is on node ", node));
    } else {
      placement.note = absl::StrCat("numa=auto: the node of GPU ", NormalizePciBusId(gpu_bus_id),
                                    " is unknown (numa_node -1 or missing); nothing placed");
      return placement;
    }
  } else {
    const int node = current_cpu >= 0 ? topology.NodeOfCpu(current_cpu) : -1;
    if (node < 0) {
      placement.note = "numa=auto: no device and the caller's CPU is unknown; nothing placed";
      return placement;
    }
    place_on(node, absl::StrCat("numa=auto: no device; caller runs on CPU ", current_cpu, " of node ", node));
  }
  if (placement.cpus.empty()) {
    // The node is right for memory (it is where the device DMAs from) but this process may not
    // run there; threads stay where the operator put them.
    absl::StrAppend(&placement.note, "; its CPUs are outside the allowed CPUs ", FormatCpuList(allowed_cpus),
                    ", so threads are not pinned");
  }
  return placement;
}

}  // namespace

absl::StatusOr<NumaPlacement> ChooseNumaPlacement(const NumaTopology& topology, const NumaOption& option,
                                                  const std::vector<int>& allowed_cpus, int current_cpu,
                                                  absl::string_view gpu_bus_id) {
  const int count = option.share_count;
  if (count > 1 && (option.share_index < 0 || option.share_index >= count)) {
    return absl::InvalidArgumentError(absl::StrCat("numa share ", option.share_index, " of ", count,
                                                   ": the share (the rank on this machine) must be in [0, ",
                                                   count, ")"));
  }
  const std::string own_gpu = gpu_bus_id.empty() ? option.gpu_bus_id : std::string(gpu_bus_id);
  RL_ASSIGN_OR_RETURN(NumaPlacement placement,
                      ChooseNodePlacement(topology, option, allowed_cpus, current_cpu, own_gpu));
  if (count <= 1) return placement;
  const bool placed = !placement.cpus.empty();
  const std::vector<int> from = placed ? placement.cpus : allowed_cpus;  // a copy: cpus is replaced
  placement.cpus = ShareOfCpus(from, option.share_index, count, [&](int cpu) { return topology.CoreOf(cpu); });
  absl::StrAppend(&placement.note, placed ? "" : " by node", "; threads on CPUs ", FormatCpuList(placement.cpus), ", share ",
                  option.share_index, " of ", count, " of ", placed ? "the node's" : "the allowed", " CPUs ",
                  FormatCpuList(from), " (ranks on disjoint CPUs)");
  return placement;
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

int CurrentCpu() { return sched_getcpu(); }

absl::Status PinCurrentThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::OkStatus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) {
    if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  }
  const int error = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("pthread_setaffinity_np(", FormatCpuList(cpus), "): ", std::strerror(error)));
  }
  return absl::OkStatus();
}

void NameCurrentThread(const char* name) { (void)pthread_setname_np(pthread_self(), name); }

bool CanBindMemory() {
#ifdef RINGLOADER_WITH_NUMA
  return numa_available() >= 0;
#else
  return false;
#endif
}

void* AllocateOnNode(size_t bytes, int node, std::string* how) {
  const size_t rounded = std::max(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes);
  // A private mapping per slot, so the policy covers exactly this slot (mbind on malloc'd memory
  // would also re-place whatever shares its pages).
  void* ptr = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ptr == MAP_FAILED) return nullptr;
  if (how != nullptr) *how = "unbound";
#ifdef RINGLOADER_WITH_NUMA
  if (node >= 0 && node <= numa_max_node() && CanBindMemory()) {
    // MPOL_PREFERRED, not MPOL_BIND: a full node spills to a remote one instead of the OOM
    // killer. Pages are placed when first touched, by whichever thread touches them.
    unsigned long mask[16] = {};
    if (node < static_cast<int>(sizeof(mask) * 8)) {
      mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
      if (mbind(ptr, rounded, MPOL_PREFERRED, mask, sizeof(mask) * 8, 0) == 0 && how != nullptr) {
        *how = absl::StrCat("mbind preferred node ", node);
      }
    }
  }
#else
  (void)node;
#endif
  return ptr;
}

void FreeOnNode(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t rounded = std::max(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes);
  munmap(ptr, rounded);
}

std::shared_ptr<SlotAllocator> MakeNodeHostAllocator(int node) {
  return std::make_shared<NodeHostAllocator>(node);
}

}  // namespace ringloader
