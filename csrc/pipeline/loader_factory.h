#pragma once
/// The library's own way to make a Loader that reads the machine somewhere else than the real
/// files (common/host_files.h): the Python binding passes the fake trees its tests give as
/// options (`numa_sysfs_root`, `cgroup_root`, `proc_self_cgroup`, `meminfo_path`), and the C++
/// tests use it directly. Not installed: the public Loader::Create and ChooseAutoThreads
/// (ringloader/ringloader.h) read the real files.
///
/// Threading: as Loader::Create.

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/host_files.h"
#include "ringloader/ringloader.h"

namespace ringloader {

/// Loader::Create and CreateFromColumns, with the machine read from `host`.
struct LoaderFactory {
  static absl::StatusOr<std::unique_ptr<Loader>> Create(std::vector<Sample> samples, LoaderOptions options,
                                                        const internal::HostFiles& host);
  static absl::StatusOr<std::unique_ptr<Loader>> CreateFromColumns(SampleColumns samples, LoaderOptions options,
                                                                   const internal::HostFiles& host);
};

namespace internal {

/// ChooseAutoThreads with the machine read from `host`.
absl::StatusOr<AutoThreads> ChooseAutoThreads(const LoaderOptions& options, const HostFiles& host);

}  // namespace internal
}  // namespace ringloader
