#pragma once
/// Members of a remote shard read by HTTP range requests instead of downloading the shard.
///
/// When an epoch wants a small part of a shard that is not in the cache (a rank's share, a
/// Subset, a resume mid-shard) and the link's estimate says ranges cost less than the whole
/// shard (ChooseRangeReads), the Python layer (webdataset.py) fetches only the wanted members'
/// byte ranges (BackgroundRanges, while the epoch reads) into a sparse copy of the shard,
/// `ENTRY.ranges-PID`, beside the cache entry: the file has the shard's size and the fetched
/// bytes at their offsets (holes elsewhere), so the members keep the offsets of the index. The
/// copy is private to the process (never shared, never taken for a cache entry: it has no
/// meta), and bounded by the bytes the epoch wants.
///
/// The loader's samples name the cache entry; `RedirectShard` makes the reader open the copy
/// instead (FileFetcher::OpenCached asks `RedirectedPath`), until the redirect is lifted at the
/// next epoch's start. Only the members fetched may be read from it: the DataLoader reads no
/// epoch ahead while a redirect is in place.
///
/// Threading: any thread.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "io/remote.h"

namespace ringloader {

/// Byte ranges (offset, length) sorted, with ranges closer than `gap` bytes merged into one
/// request (the bytes between are fetched too: fewer round trips for neighbouring members).
std::vector<std::pair<int64_t, int64_t>> MergeRanges(std::vector<std::pair<int64_t, int64_t>> ranges,
                                                     int64_t gap);

struct RangeFetchResult {
  int64_t requests = 0;  ///< HTTP requests made, retries included
  int64_t bytes = 0;     ///< body bytes written
};

/// One shard's wanted byte ranges and where they go.
struct RangedCopy {
  std::string url;
  std::string path;          ///< the sparse copy, created with `object_size` bytes
  int64_t object_size = -1;  ///< the object's size as indexed (-1: not checked)
  std::string etag;          ///< its ETag as indexed (empty: not checked)
  std::vector<std::pair<int64_t, int64_t>> ranges;  ///< (offset, length), merged
  /// The cache entry the copy stands for: registered as downloading (io/pending_downloads.h)
  /// until the copy's last range lands, so that a reader of the entry waits for it. Empty: none.
  std::string entry;
};

/// Writes each copy's ranges of its URL into its path on a thread of its own while the epoch
/// reads: the copies' requests in the order given (the epoch's order of its shards), at most
/// `max_connections` at once, each retried as whole downloads are (remote.h). Each copy's entry
/// is handed to its readers the moment its last range lands; one that failed stays registered
/// with its error, which its readers' samples then carry: a changed object (another size or
/// ETag) is FailedPrecondition "WebDataset shard URL changed since the dataset was built (...)",
/// any other failure names the URL and the byte range. The sparse files are created (sized) by
/// the constructor. Counts requests and bytes in RangeReadTotals as each request ends.
class BackgroundRanges {
 public:
  /// Creates the copies' sparse files, registers their entries and starts the thread.
  BackgroundRanges(std::vector<RangedCopy> copies, RemoteOptions options);
  /// Cancels the transfers still running and joins the thread; the entries are no longer waited for.
  ~BackgroundRanges();
  BackgroundRanges(const BackgroundRanges&) = delete;
  BackgroundRanges& operator=(const BackgroundRanges&) = delete;

  void Cancel() { cancel_.store(true, std::memory_order_release); }
  /// Blocks until every copy landed or failed: one status per copy, in order (not prefixed).
  std::vector<absl::Status> Wait();
  /// Copies finished so far (landed or failed).
  int finished() const;
  /// Totals of this fetch's requests so far.
  RangeFetchResult totals() const;

 private:
  void Run();
  // One request of a copy ended.
  void JobDone(size_t job, const DownloadResult& result);

  const std::vector<RangedCopy> copies_;
  const RemoteOptions options_;
  std::vector<std::string> entries_;  // registered
  std::vector<DownloadJob> jobs_;
  std::vector<size_t> owner_;  // the copy of each job
  std::atomic<bool> cancel_{false};
  mutable std::mutex mu_;
  std::vector<absl::Status> status_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> stale_ ABSL_GUARDED_BY(mu_);
  std::vector<size_t> left_ ABSL_GUARDED_BY(mu_);  // requests not ended, per copy
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
  RangeFetchResult totals_ ABSL_GUARDED_BY(mu_);
  std::condition_variable done_;
  std::thread thread_;
};

/// What reading a shard's wanted members by range would cost against downloading it whole, by
/// the link's estimate (remote.h: LinkEstimate): a whole download takes one round trip and the
/// shard's bytes, `latency + shard_bytes / rate`; range reads take a round trip per wave of
/// `concurrency` requests and the wanted bytes, `ceil(requests / concurrency) * latency +
/// wanted_bytes / rate`. `by_range` when that is less and the epoch wants under half of the
/// shard's bytes: from half on, a whole download moves at most twice the bytes and stays in
/// the cache for the later epochs (a range copy serves one epoch), so most of a shard always
/// comes whole.
struct RangeReadChoice {
  double whole_s = 0;
  double ranges_s = 0;
  bool by_range = false;
};
RangeReadChoice ChooseRangeReads(int64_t shard_bytes, int64_t wanted_bytes, int64_t requests, int concurrency,
                                 const LinkEstimate& link);

/// Process-wide totals of range reads (the loader's stats report them).
RangeFetchResult RangeReadTotals();

/// Reads of `entry` open `copy` from now on; an empty `copy` lifts the redirect.
void RedirectShard(const std::string& entry, const std::string& copy);

/// The copy `path` is redirected to, or `path` itself.
std::string RedirectedPath(const std::string& path);

}  // namespace ringloader
