#pragma once
/// Remote shards that are still downloading while an epoch already reads.
///
/// `BackgroundFetch` brings a list of URLs into a `ShardCache` on `max_connections` threads of
/// its own, each taking the next URL in the order given (the epoch's shard order) and handing
/// it over the moment it lands, so the epoch's first batches decode while later shards still
/// download. While it runs, every entry it has not finished
/// is registered here, process-wide: `WaitForPendingDownload` (called by the reader before it
/// opens a shard) blocks until that entry lands, and returns its download's error when it failed,
/// so the samples of a shard that could not be fetched fail under `on_error` naming the URL.
///
/// An entry that is not registered (a local file, or a shard that was in the cache already) is
/// never waited for. A failed entry stays registered with its error until a later fetch of the
/// same path starts or the fetch that failed it is destroyed.
///
/// Threading: any thread.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/shard_cache.h"

namespace ringloader {

/// OK at once when `path` is not being downloaded; else waits for it to land (OK) or fail (its
/// error). Returns Cancelled soon after `*cancel` is set, so a stopping loader never hangs.
absl::Status WaitForPendingDownload(const std::string& path, const std::atomic<bool>* cancel);

/// True while `path` is registered and neither landed nor failed (a wait would block).
bool IsPendingDownload(const std::string& path);

/// The size and ETag a shard was indexed with: a copy that differs fails as stale.
struct ExpectedCopy {
  int64_t size = -1;  ///< -1: not known
  std::optional<std::string> etag;  ///< nullopt: not known
};

class BackgroundFetch {
 public:
  /// Registers every URL's cache entry as downloading and starts the threads. `expected` is empty
  /// or one per URL.
  BackgroundFetch(std::vector<std::string> urls, std::vector<ExpectedCopy> expected, std::string cache_dir,
                  int64_t limit_bytes, RemoteOptions options);
  /// Cancels the transfers still running, fails what is left (Cancelled) and joins the threads.
  ~BackgroundFetch();
  BackgroundFetch(const BackgroundFetch&) = delete;
  BackgroundFetch& operator=(const BackgroundFetch&) = delete;

  void Cancel() { cancel_.store(true, std::memory_order_release); }
  /// Blocks until every URL landed or failed; one result per URL, in order.
  std::vector<absl::StatusOr<CachedShard>> Wait();
  /// URLs finished so far (landed or failed).
  int finished() const;

 private:
  void Run();

  const std::vector<std::string> urls_;
  const std::vector<ExpectedCopy> expected_;
  const int max_connections_;
  ShardCache cache_;
  std::vector<std::string> paths_;
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::vector<absl::StatusOr<CachedShard>> results_ ABSL_GUARDED_BY(mu_);
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  std::condition_variable done_;
  std::atomic<size_t> next_{0};  // the next URL a worker takes
  std::vector<std::thread> threads_;
};

}  // namespace ringloader
