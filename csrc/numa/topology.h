#pragma once
/// NUMA placement: which CPUs the loader's threads run on and which node its slot memory lives
/// on. The topology is read from a sysfs root (default "/sys") so tests can fake a multi-node
/// machine in a temporary directory:
///
///   <root>/devices/system/node/node<N>/cpulist      "0-3,8-11"
///   <root>/bus/pci/devices/<bus id>/numa_node       "1" (or "-1": unknown)
///
/// Everything here is plain Linux (sysfs, sched_getaffinity, pthread_setaffinity_np); memory
/// binding uses libnuma when the build found it (RINGLOADER_WITH_NUMA).

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "memory/slot_allocator.h"
#include "ringloader/ringloader.h"

namespace ringloader {

/// Parses a kernel CPU list ("0-3,8-11", "5", "" = none) into sorted, unique CPU ids.
absl::StatusOr<std::vector<int>> ParseCpuList(absl::string_view text);

/// Formats sorted CPU ids back into the kernel's compact form ("0-3,8-11").
std::string FormatCpuList(const std::vector<int>& cpus);

/// CPUs present in both sorted lists.
std::vector<int> IntersectCpus(const std::vector<int>& a, const std::vector<int>& b);

/// Canonical PCI bus id: lower case with the 4-digit domain ("3B:00.0" -> "0000:3b:00.0",
/// "00000000:3B:00.0" as printed by some tools -> "0000:3b:00.0").
std::string NormalizePciBusId(absl::string_view bus_id);

/// One NUMA node and its CPUs (all of them, not only the ones this process may use).
struct NumaNode {
  int id = 0;
  std::vector<int> cpus;
};

/// The machine's NUMA layout as sysfs describes it.
class NumaTopology {
 public:
  /// Reads `<sysfs_root>/devices/system/node/node*/cpulist`. A kernel without NUMA support (no
  /// node directory) gives an empty topology, not an error; a malformed cpulist is an error.
  static absl::StatusOr<NumaTopology> Read(const std::string& sysfs_root = "/sys");

  /// Nodes sorted by id.
  const std::vector<NumaNode>& nodes() const { return nodes_; }
  /// The node with `id`, or nullptr.
  const NumaNode* Find(int id) const;
  /// Node holding `cpu`, or -1.
  int NodeOfCpu(int cpu) const;
  /// Node of a PCI device (a GPU) from `<root>/bus/pci/devices/<bus id>/numa_node`; -1 when
  /// the file is missing or says -1 (firmware did not tell).
  int NodeOfPciDevice(absl::string_view bus_id) const;
  /// The CPUs of `cpu`'s core (itself and its SMT siblings) from
  /// `<root>/devices/system/cpu/cpu<N>/topology/thread_siblings_list`; empty when not told.
  std::vector<int> CoreOf(int cpu) const;
  const std::string& sysfs_root() const { return root_; }

 private:
  std::string root_;
  std::vector<NumaNode> nodes_;
};

/// Where the loader's threads and memory go. Empty `cpus` = threads are not pinned; node -1 =
/// memory is not bound.
struct NumaPlacement {
  int node = -1;
  std::vector<int> cpus;
  std::string note;  ///< How the choice was made, or why nothing was pinned.
};

/// The decision, as a pure function of its inputs so tests can drive every branch.
/// `allowed_cpus`: the process's CPUs (sched_getaffinity); threads are never placed outside it.
/// `current_cpu`: the CPU the constructing thread runs on (-1 unknown), used by kAuto without a
/// device. `gpu_bus_id`: the staging GPU's PCI bus id ("" = no device: then `option.gpu_bus_id`,
/// the process's own GPU, when set). With `option.share_count` > 1 the threads get that share
/// (ShareOfCpus) of the placed CPUs, or of `allowed_cpus` when nothing else placed them (numa off
/// or unknown: memory stays unbound then); a share_index outside [0, share_count) is
/// InvalidArgument.
/// An explicit node that does not exist, or whose CPUs are all outside `allowed_cpus`, is
/// InvalidArgument naming the nodes that exist.
absl::StatusOr<NumaPlacement> ChooseNumaPlacement(const NumaTopology& topology, const NumaOption& option,
                                                  const std::vector<int>& allowed_cpus, int current_cpu,
                                                  absl::string_view gpu_bus_id);

/// Part `index` of `count` equal parts of sorted `cpus` (the i-th rank's share of a node's
/// CPUs). When the list is several runs of consecutive ids, each with at least `count` CPUs
/// ("20-39,60-79": cores, then their SMT siblings), the part is the i-th slice of every run, so
/// a rank's cores come with their siblings; otherwise the i-th contiguous slice of the list.
/// Parts differ in size by at most one per run; with fewer CPUs than parts, part i is the single
/// CPU i mod |cpus|. count <= 1: all of `cpus`.
std::vector<int> ShareOfCpus(const std::vector<int>& cpus, int index, int count);
/// The same share by whole cores when `core_of` tells every CPU's core (NumaTopology::CoreOf):
/// the cores in `cpus`, ordered by their first CPU, are divided into `count` contiguous parts and
/// part `index` keeps its cores' CPUs that are in `cpus` (a rank never splits a core with
/// another, whatever the numbering of siblings). When a CPU's core is not told, or there are
/// fewer cores than parts, the rule above.
std::vector<int> ShareOfCpus(const std::vector<int>& cpus, int index, int count,
                             const std::function<std::vector<int>(int)>& core_of);

/// CPUs the calling thread may run on (sched_getaffinity).
std::vector<int> AllowedCpus();

/// CPU the calling thread runs on now (sched_getcpu), or -1.
int CurrentCpu();

/// Restricts the calling thread to `cpus` (pthread_setaffinity_np). Empty `cpus`: no change.
absl::Status PinCurrentThread(const std::vector<int>& cpus);

/// Names the calling thread (shown by top -H, gdb, /proc/self/task/*/comm); at most 15 chars.
void NameCurrentThread(const char* name);

/// Page-aligned anonymous memory whose pages are placed on `node` (-1: no binding), for slots.
/// With libnuma: mmap + mbind(MPOL_PREFERRED). `*how` (when given) names the placement.
void* AllocateOnNode(size_t bytes, int node, std::string* how = nullptr);
/// Frees memory from AllocateOnNode.
void FreeOnNode(void* ptr, size_t bytes);
/// True when this build can bind memory to a node (libnuma found at build time).
bool CanBindMemory();

/// Host (pageable) slot memory on `node` through AllocateOnNode. Its name says the node and
/// the policy, e.g. "host (NUMA node 1, mbind preferred)".
std::shared_ptr<SlotAllocator> MakeNodeHostAllocator(int node);

}  // namespace ringloader
