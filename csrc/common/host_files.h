#pragma once
/// Where a loader reads the machine: the NUMA topology (sysfs), the CPU quota and memory limit
/// (the cgroup tree and /proc/self/cgroup) and MemAvailable (/proc/meminfo). Not installed:
/// only tests point these elsewhere (fake trees), through LoaderOptions::host_files.
///
/// Threading: plain data.

#include <string>

#include "ringloader/types.h"

namespace ringloader::internal {

struct HostFiles {
  std::string sysfs_root = "/sys";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string meminfo_path = "/proc/meminfo";
};

/// The files `options` reads: its host_files, or the real ones when it has none.
inline const HostFiles& HostFilesOf(const LoaderOptions& options) {
  static const HostFiles real;
  return options.host_files != nullptr ? *options.host_files : real;
}

}  // namespace ringloader::internal
