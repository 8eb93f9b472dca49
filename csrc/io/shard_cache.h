#pragma once
/// A node-local cache of whole remote shards (http(s)://, s3://), shared by every process on the
/// node that points at the same folder (the ranks of one job, later jobs).
///
/// Layout, per URL: `ENTRY` = `DIR/<16 hex of FNV-1a(url)>-<the url's file name>`, the shard's
/// bytes; `ENTRY.meta`, four lines (url, size, ETag, `crc32 <8 hex>`: the CRC-32 of the bytes as
/// downloaded; a meta of three lines predates checksums); `ENTRY.lock`, the lock file. An entry
/// is complete when both exist, the meta names this URL and the file has the recorded size: a
/// download goes to `ENTRY.part`, is verified (size as stated by the server, one ETag throughout;
/// see remote.h; and the size the shard was indexed with, when the caller knows it), and only
/// then gets its meta and is renamed to `ENTRY`, so a partial file is never taken for a complete
/// one, whoever crashed where.
///
/// Before a complete entry is handed out it is checked: of the size the shard was indexed with
/// (Ensure's `sizes`), every time; against its checksum, once per process (the first time this
/// process hands it out; again only if the file changed since). An entry that fails is removed
/// and downloaded again. An entry whose meta has no checksum is accepted as it is and its
/// checksum recorded then. A truncated copy that the server itself stated as complete (its
/// Content-Length) has the checksum of the cut bytes: it is caught where the index knows the
/// shard's size (a kept index, a pack sidecar), or by Revalidate, which a caller that finds the
/// copy damaged (a tar cut inside a member) asks.
///
/// One download per shard per node: the work on an entry (checking, downloading, evicting) holds
/// an exclusive flock on `ENTRY.lock`. A process that finds it held waits (polling, so `cancel`
/// is seen) and then finds the entry complete.
///
/// Least recently used eviction: the meta's mtime is set to now whenever an entry is handed out
/// (Ensure, CacheEntryReady) or opened by a reader (HoldCacheEntry); the entry's own file is
/// never touched, so its modification and status change times keep saying whether it is the
/// file that was read (the DataLoader checks them before it uses an epoch read ahead). After
/// downloading, Ensure removes the oldest complete entries (not the ones it was asked for,
/// nor one locked by another process or held open by a reader) until the folder's complete
/// entries fit `limit_bytes`. The folder can pass the limit by the shards being downloaded at
/// that moment. Readers hold a shared lock (HoldCacheEntry) while an entry is open; Ensure
/// serves a complete entry under a shared lock when the exclusive one is taken by readers.
///
/// Lock files stay when their entry is evicted (empty files): removing one while another
/// process may be opening it would let two processes hold "the" lock on two different files.
///
/// Threading: any thread; an instance holds no state between calls beyond its settings.

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <utility>
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

/// While a reader has `path` open: a shared lock on its entry's lock file when `path` is a cache
/// entry (it has one), so that no eviction, in this process or another, removes a shard being
/// read; the entry counts as just used. Returns the lock's descriptor (close it to release), or
/// -1 when `path` is not an entry or its lock is held exclusively at this moment (being evicted
/// or downloaded: the read then goes on without it).
int HoldCacheEntry(const std::string& path);

/// True when `entry` (a path from EntryPath) is in the cache, `size` bytes long (-1: any), and
/// was verified or downloaded by this process and not changed since: it may be read without
/// going through Ensure again (which checks it). Marks it used (the eviction order).
bool CacheEntryReady(const std::string& entry, int64_t size);

/// CRC-32 (libdeflate's, the zlib polynomial) of the file at `path`, read sequentially.
absl::StatusOr<uint32_t> FileCrc32(const std::string& path);

/// A shard smaller than two of these downloads in one request.
inline constexpr int64_t kMinPieceBytes = 1 << 20;

/// How a shard of `size` bytes is downloaded when its size is known: (offset, length) pieces,
/// one per connection (`max_connections`, at least kMinPieceBytes each), fetched at once with
/// Range requests into the one `.part` file; empty: in one request. A shard's pieces together
/// take every connection, so the shards an epoch reads first land first, each as soon as the
/// link has moved its bytes; whole downloads of several shards at once would share the link
/// between them and land all together, the first as late as the last.
std::vector<std::pair<int64_t, int64_t>> DownloadPieces(int64_t size, int max_connections);

class ShardCache {
 public:
  /// `limit_bytes` 0: no limit.
  ShardCache(std::string dir, int64_t limit_bytes, RemoteOptions options);

  /// Where `url`'s shard lives in the cache (whether it is there or not).
  std::string EntryPath(const std::string& url) const;

  /// Every URL as a complete local file, downloading those not in the cache (at most
  /// `max_connections` at once), then evicting to the limit. One result per URL, in order; a
  /// shard that could not be fetched has its download's error (remote.h's fault rules).
  /// `also_keep`, when set: entries (paths from EntryPath) the eviction after the downloads must
  /// keep besides those of `urls`, asked for when it runs. `sizes`, empty or one per URL (-1:
  /// not known): the size each object was indexed with; a cached copy of another size is
  /// removed and fetched again, and a download of another size is fetched whole once more, then
  /// not kept (FailedPrecondition "changed since the dataset was built"); a shard of known size
  /// downloads in pieces (DownloadPieces), whole when they fail (a server that ignores Range, an
  /// object of another size or of changing ETag).
  /// `ticket` (DrawDownloadTicket; -1: none) orders the first download among other threads'.
  std::vector<absl::StatusOr<CachedShard>> Ensure(
      const std::vector<std::string>& urls, const std::atomic<bool>* cancel = nullptr,
      const std::function<std::set<std::string>()>& also_keep = nullptr,
      const std::vector<int64_t>& sizes = {}, int64_t ticket = -1);

  /// Asks the server whether the complete entry of `url` is its object: a request for the
  /// object's last byte that expects the entry's size and ETag. An entry the server disagrees
  /// with (another size: a copy cut short by a server that said so; or another ETag: the object
  /// changed) is removed, and the result is true. False when the entry is kept: the server
  /// agrees, or could not tell (unreachable, no ranges), or there is no complete entry. For a
  /// copy in doubt (its shard indexes as damaged), where one request costs less than trusting
  /// a cut copy for ever. Waits for the entry's lock as Ensure does.
  absl::StatusOr<bool> Revalidate(const std::string& url, const std::atomic<bool>* cancel = nullptr);

  /// Removes least recently used complete entries until those left fit `target_bytes` (-1: the
  /// limit), keeping the entries of `keep` (paths from EntryPath) and any locked by someone else
  /// (a download, an eviction, a reader: see HoldCacheEntry). Returns the bytes of complete
  /// entries left.
  absl::StatusOr<int64_t> Evict(const std::set<std::string>& keep, int64_t target_bytes = -1);

  int64_t limit_bytes() const { return limit_bytes_; }

 private:
  const std::string dir_;
  const int64_t limit_bytes_;
  const RemoteOptions options_;
};

}  // namespace ringloader
