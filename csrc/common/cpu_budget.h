#pragma once
/// How many CPUs the loader may really use, and how its threads are sized from them
/// (LoaderOptions::auto_threads).
///
/// usable CPUs = |affinity mask ∩ the NUMA node's CPUs (when numa is set)|, capped by the cgroup
/// CPU quota. The quota is found through /proc/self/cgroup and read from the cgroup filesystem
/// (both paths are options, so tests fake them in a temporary directory):
///
///   cgroup v2:  "0::/a/b"                  -> <root>/a/b/cpu.max         "150000 100000" | "max 100000"
///   cgroup v1:  "4:cpu,cpuacct:/a/b"       -> <root>/cpu,cpuacct/a/b/cpu.cfs_quota_us (-1: none)
///                                             and .../cpu.cfs_period_us
///
/// Every level from the process's cgroup up to the mount's root is read and the smallest quota
/// wins (a parent's limit binds its children); levels that do not exist are skipped (a container
/// without a cgroup namespace sees the host's path, while its mount root is its own cgroup).
/// A fractional quota rounds to the nearest whole CPU, halves up, and never below 1: 1.5 -> 2,
/// 2.4 -> 2, 0.3 -> 1 (a thread for a fraction under half a CPU would mostly sit throttled).
///
/// The thread rule (PlanThreads):
///   reserved = min(T, usable - 1) when the training loop's thread count T was set explicitly
///              (torch.set_num_threads / OMP_NUM_THREADS), else 1 when usable >= 4, else 0;
///   R        = usable - reserved (>= 1);
///   decode   = R - floor(R / 9)  (>= 1): readers take one CPU per 9; below 9 the single
///              reader shares the decode threads' CPUs (with io_uring it is busy for a few per
///              cent of the decode time: it submits and reaps, the kernel reads);
///   readers  = ceil(decode / 8)  (>= 1), unless given.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ringloader {

/// A cgroup CPU quota. cpus == 0: no quota anywhere on the path.
struct CpuQuota {
  double cpus = 0;
  std::string source;  ///< e.g. "cgroup v2 /a/b cpu.max" (where the binding limit was found)
};

/// Reads the quota that applies to this process (see the header comment). A missing
/// `proc_self_cgroup` or cgroup tree means no quota; a malformed quota file is InvalidArgument
/// naming the file.
absl::StatusOr<CpuQuota> ReadCpuQuota(const std::string& cgroup_root = "/sys/fs/cgroup",
                                      const std::string& proc_self_cgroup = "/proc/self/cgroup");

/// A quota in CPUs rounded to whole CPUs: nearest, halves up, at least 1.
int RoundCpuQuota(double cpus);

/// What limits the CPUs the loader may use.
struct CpuBudget {
  int affinity_cpus = 0;  ///< CPUs in the affinity mask.
  int numa_node = -1;     ///< The node the threads are placed on (-1: none) ...
  int node_cpus = -1;     ///< ... and the CPUs left after intersecting with it.
  CpuQuota quota;
  /// CPUs the loader may use: the affinity (or node) count, capped by the rounded quota; >= 1.
  int usable() const;
  /// "4 usable CPUs (affinity 8, NUMA node 0: 4, cgroup quota 4.0 from ...)".
  std::string Describe() const;
};

/// Memory this process may still use: MemAvailable from /proc/meminfo, capped by the cgroup
/// memory limit minus the cgroup's usage (v2 memory.max / memory.current, v1
/// memory.limit_in_bytes / memory.usage_in_bytes; every level up to the mount root, the tightest
/// wins). The usage leaves out the inactive file cache it includes (memory.stat inactive_file,
/// v1 total_inactive_file): the kernel reclaims it before it kills. bytes == 0: unknown.
struct AvailableMemory {
  uint64_t bytes = 0;
  std::string source;  ///< "MemAvailable" or "cgroup v2 /a memory.max - memory.current"
};

/// Reads AvailableMemory (see above); files that are missing or malformed are skipped.
AvailableMemory ReadAvailableMemory(const std::string& meminfo = "/proc/meminfo",
                                    const std::string& cgroup_root = "/sys/fs/cgroup",
                                    const std::string& proc_self_cgroup = "/proc/self/cgroup");

/// "512 B", "6.0 KiB", "115.5 MiB", "2.0 GiB": sizes in messages and notes.
std::string FormatMemorySize(uint64_t bytes);

/// The slot-memory budget when LoaderOptions::max_memory is 0: a quarter of the available
/// memory, at most 2 GiB (2 GiB when unknown). `note` (when given) says where it came from.
uint64_t DefaultMemoryBudget(const AvailableMemory& available, std::string* note = nullptr);

/// The threads of the training loop's own compute, when known.
struct TrainingThreads {
  int count = -1;      ///< -1: not set explicitly.
  std::string source;  ///< "torch.get_num_threads()", "OMP_NUM_THREADS", ...
};

/// OMP_NUM_THREADS from the environment when it is a positive integer (its first value, as in
/// "4,2"); otherwise count -1.
TrainingThreads TrainingThreadsFromEnvironment();

/// The threads auto_threads chooses, and why.
struct ThreadPlan {
  int usable = 1;
  int reserved = 0;
  int decode = 1;
  int readers = 1;
  std::string budget;  ///< CpuBudget::Describe()
  std::string reason;  ///< why `reserved` CPUs were left to the training loop
  /// "decode 3, readers 1: 4 usable CPUs (...), 1 reserved for the training loop (...)".
  std::string Describe() const;
};

/// The rule in the header comment. `fixed_readers` > 0 keeps that reader count (given by the
/// user) and takes its share from the decode threads as the rule would.
ThreadPlan PlanThreads(const CpuBudget& budget, const TrainingThreads& training, int fixed_readers = 0);

}  // namespace ringloader
