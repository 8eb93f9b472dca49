#include "common/cpu_budget.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/small_file.h"

namespace ringloader {
namespace {


// "/a/b" -> {"/a/b", "/a", ""}: the cgroup and its ancestors, the mount root last.
std::vector<std::string> PathAndAncestors(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path == "/") path.clear();
  std::vector<std::string> out;
  while (true) {
    out.push_back(path);
    if (path.empty()) break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? std::string() : path.substr(0, slash);
  }
  return out;
}

// One level's quota in CPUs (0: none at this level, or the level does not exist).
absl::StatusOr<double> ReadV2Level(const std::string& dir) {
  std::string text;
  const std::string file = dir + "/cpu.max";
  if (!ReadSmallFile(file, &text)) return 0.0;
  std::vector<absl::string_view> fields =
      absl::StrSplit(absl::StripAsciiWhitespace(text), ' ', absl::SkipEmpty());
  int64_t quota = 0, period = 0;
  if (fields.size() == 2 && fields[0] == "max" && ParseWholeInteger(fields[1], &period) && period > 0) return 0.0;
  if (fields.size() != 2 || !ParseWholeInteger(fields[0], &quota) || !ParseWholeInteger(fields[1], &period) ||
      quota <= 0 || period <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed cgroup CPU quota in ", file, ": '", absl::StripAsciiWhitespace(text),
                     "' (expected '<quota> <period>' or 'max <period>')"));
  }
  return static_cast<double>(quota) / static_cast<double>(period);
}

absl::StatusOr<double> ReadV1Level(const std::string& dir) {
  std::string quota_text, period_text;
  const std::string quota_file = dir + "/cpu.cfs_quota_us";
  const std::string period_file = dir + "/cpu.cfs_period_us";
  if (!ReadSmallFile(quota_file, &quota_text)) return 0.0;
  int64_t quota = 0, period = 0;
  if (!ParseWholeInteger(quota_text, &quota) || (quota <= 0 && quota != -1)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed cgroup CPU quota in ", quota_file, ": '",
                                                   absl::StripAsciiWhitespace(quota_text),
                                                   "' (expected microseconds or -1)"));
  }
  if (quota == -1) return 0.0;
  if (!ReadSmallFile(period_file, &period_text) || !ParseWholeInteger(period_text, &period) || period <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("missing or malformed ", period_file, " next to ",
                                                   quota_file));
  }
  return static_cast<double>(quota) / static_cast<double>(period);
}

// Walks `path` and its ancestors under `mount`; the smallest quota found wins.
absl::StatusOr<CpuQuota> WalkQuota(const std::string& mount, const std::string& path, bool v1) {
  CpuQuota best;
  for (const std::string& level : PathAndAncestors(path)) {
    absl::StatusOr<double> cpus = v1 ? ReadV1Level(mount + level) : ReadV2Level(mount + level);
    if (!cpus.ok()) return cpus.status();
    if (*cpus > 0 && (best.cpus == 0 || *cpus < best.cpus)) {
      best.cpus = *cpus;
      best.source = absl::StrCat(v1 ? "cgroup v1 " : "cgroup v2 ", level.empty() ? "/" : level,
                                 v1 ? " cpu.cfs_quota_us" : " cpu.max");
    }
  }
  return best;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string FormatCpus(double cpus) { return absl::StrFormat("%.1f", cpus); }

bool ReadUint64File(const std::string& path, uint64_t* out) {
  std::string text;
  int64_t value = 0;
  if (!ReadSmallFile(path, &text) || !ParseWholeInteger(text, &value) || value < 0) return false;
  *out = static_cast<uint64_t>(value);
  return true;
}

// The inactive file cache a cgroup level's usage includes (memory.stat; 0 when unknown).
uint64_t InactiveFileCache(const std::string& dir, bool v1) {
  std::string text;
  if (!ReadSmallFile(dir + "/memory.stat", &text)) return 0;
  // v1's usage covers the level's children: so does total_inactive_file (inactive_file does
  // not). v2's inactive_file is hierarchical already.
  const absl::string_view key = v1 ? "total_inactive_file " : "inactive_file ";
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    int64_t bytes = 0;
    if (absl::ConsumePrefix(&line, key) && ParseWholeInteger(line, &bytes) && bytes > 0) {
      return static_cast<uint64_t>(bytes);
    }
  }
  return 0;
}

// Memory left under a cgroup level's limit; false when the level sets none (or does not exist).
// The usage counts page cache too; its inactive part is reclaimed before anything is killed
// (the working set that container runtimes report leaves it out likewise), so a job that read
// its dataset through the cache is not taken for one without memory. `*reclaimable` is that part.
bool CgroupMemoryLeft(const std::string& dir, bool v1, uint64_t* left, uint64_t* reclaimable) {
  uint64_t limit = 0, usage = 0;
  if (!ReadUint64File(dir + (v1 ? "/memory.limit_in_bytes" : "/memory.max"), &limit)) return false;  // "max"
  if (v1 && limit >= (uint64_t{1} << 60)) return false;  // v1 writes "unlimited" as about 2^63
  if (!ReadUint64File(dir + (v1 ? "/memory.usage_in_bytes" : "/memory.current"), &usage)) usage = 0;
  *reclaimable = std::min(usage, InactiveFileCache(dir, v1));
  usage -= *reclaimable;
  *left = limit > usage ? limit - usage : 0;
  return true;
}

}  // namespace

std::string FormatMemorySize(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= (1 << 30)) return absl::StrFormat("%.1f GiB", b / (1 << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / (1 << 20));
  return b >= 1024 ? absl::StrFormat("%.1f KiB", b / 1024) : absl::StrCat(bytes, " B");
}

AvailableMemory ReadAvailableMemory(const std::string& meminfo, const std::string& cgroup_root,
                                    const std::string& proc_self_cgroup) {
  AvailableMemory out;
  std::string text;
  if (ReadSmallFile(meminfo, &text)) {
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (!absl::ConsumePrefix(&line, "MemAvailable:")) continue;
      line = absl::StripAsciiWhitespace(line);
      int64_t kib = 0;
      if (absl::ConsumeSuffix(&line, "kB") && ParseWholeInteger(line, &kib) && kib > 0) {
        out.bytes = static_cast<uint64_t>(kib) * 1024;
        out.source = "MemAvailable";
      }
    }
  }
  if (!ReadSmallFile(proc_self_cgroup, &text)) return out;
  std::string mount, path;
  bool v1 = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    if (parts[0] == "0" && parts[1].empty()) {
      if (mount.empty()) {
        mount = cgroup_root;
        path = std::string(parts[2]);
      }
      continue;
    }
    std::vector<absl::string_view> controllers = absl::StrSplit(parts[1], ',');
    if (std::find(controllers.begin(), controllers.end(), "memory") == controllers.end()) continue;
    mount = cgroup_root + "/" + std::string(parts[1]);
    path = std::string(parts[2]);
    v1 = true;
    break;
  }
  if (mount.empty() || !IsDirectory(mount)) return out;
  for (const std::string& level : PathAndAncestors(path)) {
    uint64_t left = 0, reclaimable = 0;
    if (!CgroupMemoryLeft(mount + level, v1, &left, &reclaimable)) continue;
    if (out.bytes == 0 || left < out.bytes) {
      out.bytes = left;
      out.source = absl::StrCat(v1 ? "cgroup v1 " : "cgroup v2 ", level.empty() ? "/" : level,
                                v1 ? " memory.limit_in_bytes - memory.usage_in_bytes" : " memory.max - memory.current",
                                reclaimable > 0 ? absl::StrCat(" + ", FormatMemorySize(reclaimable), " inactive file cache")
                                                : std::string());
    }
  }
  return out;
}

uint64_t DefaultMemoryBudget(const AvailableMemory& available, std::string* note) {
  constexpr uint64_t kCeiling = uint64_t{2} << 30;
  if (available.bytes == 0) {
    if (note) *note = "the default (available memory unknown)";
    return kCeiling;
  }
  const uint64_t quarter = available.bytes / 4;
  const uint64_t budget = std::max<uint64_t>(1, std::min(kCeiling, quarter));
  if (note) {
    *note = absl::StrCat("the default, a quarter of ", FormatMemorySize(available.bytes), " available (",
                         available.source, "), at most 2 GiB");
  }
  return budget;
}

absl::StatusOr<CpuQuota> ReadCpuQuota(const std::string& cgroup_root, const std::string& proc_self_cgroup) {
  std::string text;
  if (!ReadSmallFile(proc_self_cgroup, &text)) return CpuQuota{};
  std::string v2_path;
  bool have_v2 = false;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    // "hierarchy-id:controller-list:path"; the path may itself contain ':'.
    std::vector<absl::string_view> parts = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    const std::string path(parts[2]);
    if (parts[0] == "0" && parts[1].empty()) {
      have_v2 = true;
      v2_path = path;
      continue;
    }
    std::vector<absl::string_view> controllers = absl::StrSplit(parts[1], ',');
    if (std::find(controllers.begin(), controllers.end(), "cpu") == controllers.end()) continue;
    // v1 mounts the hierarchy under the comma-joined controller names (Debian, Ubuntu, RHEL
    // mount "cpu,cpuacct" and link "cpu" to it).
    for (const std::string& dir : {cgroup_root + "/" + std::string(parts[1]), cgroup_root + "/cpu",
                                   cgroup_root + "/cpuacct,cpu"}) {
      if (IsDirectory(dir)) return WalkQuota(dir, path, /*v1=*/true);
    }
    return CpuQuota{};
  }
  if (have_v2) return WalkQuota(cgroup_root, v2_path, /*v1=*/false);
  return CpuQuota{};
}

int RoundCpuQuota(double cpus) { return std::max(1, static_cast<int>(std::floor(cpus + 0.5))); }

int CpuBudget::usable() const {
  int cpus = node_cpus >= 0 ? node_cpus : affinity_cpus;
  if (quota.cpus > 0) cpus = std::min(cpus, RoundCpuQuota(quota.cpus));
  return std::max(1, cpus);
}

std::string CpuBudget::Describe() const {
  const int n = usable();
  std::string out = absl::StrCat(n, n == 1 ? " usable CPU (affinity " : " usable CPUs (affinity ", affinity_cpus);
  if (numa_node >= 0) absl::StrAppend(&out, ", NUMA node ", numa_node, ": ", node_cpus);
  if (quota.cpus > 0) {
    absl::StrAppend(&out, ", cgroup quota ", FormatCpus(quota.cpus), " from ", quota.source);
  } else {
    absl::StrAppend(&out, ", no cgroup quota");
  }
  absl::StrAppend(&out, ")");
  return out;
}

TrainingThreads TrainingThreadsFromEnvironment() {
  TrainingThreads out;
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (value == nullptr) return out;
  // OpenMP allows a list per nesting level ("4,2"): the outer level is what runs beside us.
  const absl::string_view all(value);
  const absl::string_view first = all.substr(0, all.find(','));
  int64_t count = 0;
  if (ParseWholeInteger(first, &count) && count > 0 && count < (1 << 20)) {
    out.count = static_cast<int>(count);
    out.source = "OMP_NUM_THREADS";
  }
  return out;
}

ThreadPlan PlanThreads(const CpuBudget& budget, const TrainingThreads& training, int fixed_readers) {
  ThreadPlan plan;
  plan.usable = budget.usable();
  plan.budget = budget.Describe();
  if (training.count > 0) {
    plan.reserved = std::min(training.count, plan.usable - 1);
    plan.reason = absl::StrCat(training.source, "=", training.count, " set explicitly");
    if (plan.reserved < training.count) absl::StrAppend(&plan.reason, ", capped to leave 1 CPU for decoding");
  } else if (plan.usable >= 4) {
    plan.reserved = 1;
    plan.reason = "training loop threads not set explicitly: 1 CPU kept for it when 4 or more are usable";
  } else {
    plan.reserved = 0;
    plan.reason = "training loop threads not set explicitly: nothing kept for it below 4 usable CPUs";
  }
  const int rest = std::max(1, plan.usable - plan.reserved);
  plan.decode = std::max(1, rest - rest / 9);
  plan.readers = fixed_readers > 0 ? fixed_readers : std::max(1, (plan.decode + 7) / 8);
  return plan;
}

std::string ThreadPlan::Describe() const {
  return absl::StrCat("decode ", decode, ", readers ", readers, ": ", budget, ", ", reserved,
                      " reserved for the training loop (", reason, ")");
}

}  // namespace ringloader
