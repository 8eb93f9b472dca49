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
/// With a cache limit, the epoch's shards need not fit the cache at once ("bounded" fetch): a
/// download starts only when the cache, after evicting least recently used entries, has room
/// for it beside the downloads in flight and the shards landed that no reader has opened yet;
/// or when a reader waits for it (so the folder passes the limit by at most the shards readers
/// wait for, one per reader). The shard a reader waits for is fetched first. An entry stays
/// registered once it landed, so that a reader that finds it evicted (it closed the shard and
/// comes back to it: RefetchIfEvicted) has it fetched again. Shards open in a reader are never
/// evicted (HoldCacheEntry).
///
/// Threading: any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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

/// A reader holds `path` open (and locked: HoldCacheEntry): a shard a bounded fetch landed may
/// be evicted once its readers close it.
void NoteShardOpened(const std::string& path);

/// For a shard a bounded fetch of this process landed and that is gone from the cache (evicted
/// after its readers closed it): registers it as downloading again, to be fetched before the
/// others, and returns true (the reader then waits for it). Also true when another reader of the
/// same shard asked first (the download is under way) or it has landed again since: the reader
/// tries again. False for a path this process does not fetch (the open's error stands).
bool RefetchIfEvicted(const std::string& path);

/// For fetches of another kind than BackgroundFetch (range reads, io/range_reads.h), which use
/// the same table so that the reader waits for them the same way. `owner` is the fetch: only
/// its own entries are changed.
///
/// Registers each path as downloading (a path registered by another owner is taken over).
void RegisterPendingDownloads(const void* owner, const std::vector<std::string>& paths);
/// `path` is done: OK removes it (reads open it at once), an error stays as its readers' error.
void FinishPendingDownload(const void* owner, const std::string& path, absl::Status status);
/// Removes the entries of `owner` among `paths` (failed ones included).
void UnregisterPendingDownloads(const void* owner, const std::vector<std::string>& paths);

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
  // kTaken: a worker waits for room to fetch it (bounded fetch).
  enum class State { kQueued, kTaken, kInFlight, kDone };
  void Run(int worker);
  // The next URL to fetch (one a reader waits for first, then the given order), marked in
  // flight; -1 when none is queued. `*ticket`: its download ticket, drawn in that order
  // (remote.h: DrawDownloadTicket).
  int Take(int64_t* ticket);
  // Bounded fetch: waits until URL `*i` may start (see the file comment); may switch `*i` to a
  // URL a reader waits for. False when cancelled.
  bool WaitForRoom(int* i);
  // Indexes whose registered entry a reader waits for and that are not in flight.
  std::vector<int> WaitedFor() const;
  // Entries the cache must keep: this fetch's that no reader has opened since they were
  // registered, in order, as many as fit the limit.
  std::set<std::string> Kept() const;

  const std::vector<std::string> urls_;
  const std::vector<ExpectedCopy> expected_;
  const int max_connections_;
  ShardCache cache_;
  const bool bounded_;  // a cache limit: see the file comment
  std::vector<std::string> paths_;
  std::atomic<bool> cancel_{false};
  std::mutex room_mu_;  // WaitForRoom's decisions, one at a time
  std::chrono::steady_clock::time_point next_look_ ABSL_GUARDED_BY(room_mu_){};
  mutable std::mutex mu_;
  std::vector<absl::StatusOr<CachedShard>> results_ ABSL_GUARDED_BY(mu_);
  std::vector<State> state_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> counted_ ABSL_GUARDED_BY(mu_);  // in finished_ (a refetch counts once)
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;  // no URL before it is queued in the given order
  std::condition_variable done_;
  std::vector<std::thread> threads_;
};

}  // namespace ringloader
