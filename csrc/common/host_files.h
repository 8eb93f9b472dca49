#pragma once
/// Where a loader reads the machine: the NUMA topology (sysfs), the CPU quota and memory limit
/// (the cgroup tree and /proc/self/cgroup) and MemAvailable (/proc/meminfo); the defaults are
/// the real files. Not installed: only tests point these elsewhere (fake trees), through
/// LoaderFactory (pipeline/loader_factory.h).
///
/// Threading: plain data.

#include <string>

namespace ringloader::internal {

struct HostFiles {
  std::string sysfs_root = "/sys";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string meminfo_path = "/proc/meminfo";
};

}  // namespace ringloader::internal
