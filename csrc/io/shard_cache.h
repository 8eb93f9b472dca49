#pragma once
/// A node-local cache of whole remote shards (http(s)://, s3://), shared by every process on the
/// node that points at the same folder (the ranks of one job, later jobs).
///
/// Layout, per URL: `ENTRY` = `DIR/<16 hex of FNV-1a(url)>-<the url's file name>`, the shard's
/// bytes; `ENTRY.meta`, three lines (url, size, ETag); `ENTRY.lock`, the lock file. An entry is
/// complete when both exist, the meta names this URL and the file has the recorded size: a
/// download goes to `ENTRY.part`, is verified (size as stated by the server, one ETag throughout;
/// see remote.h), and only then gets its meta and is renamed to `ENTRY`, so a partial file is
/// never taken for a complete one, whoever crashed where.
///
/// One download per shard per node: the work on an entry (checking, downloading, evicting) holds
/// an exclusive flock on `ENTRY.lock`. A process that finds it held waits (polling, so `cancel`
/// is seen) and then finds the entry complete.
///
/// Least recently used eviction: an entry's mtime is set to now whenever Ensure hands it out;
/// after downloading, Ensure removes the oldest complete entries (not the ones it was asked for,
/// nor one locked by another process) until the folder's complete entries fit `limit_bytes`.
/// The folder can pass the limit by the shards being downloaded at that moment.
///
/// Lock files stay when their entry is evicted (empty files): removing one while another
/// process may be opening it would let two processes hold "the" lock on two different files.
///
/// Threading: any thread; an instance holds no state between calls beyond its settings.

#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "io/remote.h"

namespace ringloader {

struct CachedShard {
  std::string path;         ///< the complete local copy
  int64_t size = 0;
  std::string etag;         ///< as the server sent it, empty when none
  bool downloaded = false;  ///< fetched by this call (false: it was in the cache already)
  int attempts = 0;         ///< requests this call made for it
};

class ShardCache {
 public:
  /// `limit_bytes` 0: no limit.
  ShardCache(std::string dir, int64_t limit_bytes, RemoteOptions options);

  /// Where `url`'s shard lives in the cache (whether it is there or not).
  std::string EntryPath(const std::string& url) const;

  /// Every URL as a complete local file, downloading those not in the cache (at most
  /// `max_connections` at once), then evicting to the limit. One result per URL, in order; a
  /// shard that could not be fetched has its download's error (remote.h's fault rules).
  std::vector<absl::StatusOr<CachedShard>> Ensure(const std::vector<std::string>& urls,
                                                  const std::atomic<bool>* cancel = nullptr);

  /// Removes least recently used complete entries until those left fit the limit, keeping the
  /// entries of `keep` (paths from EntryPath) and any locked by someone else. Returns the bytes
  /// of complete entries left.
  absl::StatusOr<int64_t> Evict(const std::set<std::string>& keep);

  /// Bytes of the complete entries in the folder.
  absl::StatusOr<int64_t> CachedBytes() const;

 private:
  const std::string dir_;
  const int64_t limit_bytes_;
  const RemoteOptions options_;
};

}  // namespace ringloader
