#pragma once
/// Members of a remote shard read by HTTP range requests instead of downloading the shard.
///
/// When an epoch wants a small part of a shard that is not in the cache (a rank's share, a
/// Subset, a resume mid-shard), the Python layer (webdataset.py) fetches only the wanted members'
/// byte ranges into a sparse copy of the shard, `ENTRY.ranges-PID`, beside the cache entry: the
/// file has the shard's size and the fetched bytes at their offsets (holes elsewhere), so the
/// members keep the offsets of the index. The copy is private to the process (never shared,
/// never taken for a cache entry: it has no meta), and bounded by the bytes the epoch wants.
///
/// The loader's samples name the cache entry; `RedirectShard` makes the reader open the copy
/// instead (FileFetcher::OpenCached asks `RedirectedPath`), until the redirect is lifted at the
/// next epoch's start. Only the members fetched may be read from it: the DataLoader reads no
/// epoch ahead while a redirect is in place.
///
/// Threading: any thread.

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

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
};

/// Writes each copy's ranges of its URL into its path (sparse, the object's size), all the
/// copies' requests together, at most `max_connections` at once, each retried as whole
/// downloads are (remote.h). One status per copy: a changed object (another size or ETag) is
/// FailedPrecondition naming the URL and saying it changed; any other failure names the URL and
/// the range. Counts requests and bytes in RangeReadTotals and in `*totals` when given.
std::vector<absl::Status> FetchRanges(const std::vector<RangedCopy>& copies, const RemoteOptions& options,
                                      const std::atomic<bool>* cancel = nullptr,
                                      RangeFetchResult* totals = nullptr);

/// Process-wide totals of FetchRanges (the loader's stats report them).
RangeFetchResult RangeReadTotals();

/// Reads of `entry` open `copy` from now on; an empty `copy` lifts the redirect.
void RedirectShard(const std::string& entry, const std::string& copy);

/// The copy `path` is redirected to, or `path` itself.
std::string RedirectedPath(const std::string& path);

}  // namespace ringloader
