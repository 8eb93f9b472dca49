#include "io/shard_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libdeflate.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/small_file.h"
#include "common/status_util.h"

namespace ringloader {

absl::StatusOr<uint32_t> FileCrc32(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  constexpr size_t kChunk = size_t{1} << 20;
  std::unique_ptr<unsigned char[]> buffer(new unsigned char[kChunk]);
  uint32_t crc = libdeflate_crc32(0, nullptr, 0);
  while (true) {
    const ssize_t n = read(fd, buffer.get(), kChunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status status = ErrnoStatus(errno, "read", path);
      close(fd);
      return status;
    }
    if (n == 0) break;
    crc = libdeflate_crc32(crc, buffer.get(), static_cast<size_t>(n));
  }
  close(fd);
  return crc;
}

namespace {

constexpr char kMetaSuffix[] = ".meta";
constexpr char kLockSuffix[] = ".lock";
constexpr char kPartSuffix[] = ".part";
constexpr auto kLockPoll = std::chrono::milliseconds(50);

uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

/// The URL's last path component, reduced to characters safe in a file name (for people
/// looking at the folder; the hash is what makes the name unique).
std::string SafeBaseName(const std::string& url) {
  std::string base = url.substr(url.find_last_of('/') + 1);
  base = base.substr(0, base.find_first_of("?#"));
  for (char& c : base) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == '_';
    if (!ok) c = '_';
  }
  if (base.size() > 100) base.resize(100);
  return base.empty() ? "shard" : base;
}

/// An exclusive flock on a lock file, released (and closed) on destruction.
class EntryLock {
 public:
  EntryLock() = default;
  EntryLock(const EntryLock&) = delete;
  EntryLock& operator=(const EntryLock&) = delete;
  EntryLock(EntryLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ~EntryLock() {
    if (fd_ >= 0) close(fd_);  // closing the description releases the flock
  }
  /// Locked: OK + true; held by someone else: OK + false. `op`: LOCK_EX, or LOCK_SH (shared
  /// with readers, to serve a complete entry).
  absl::StatusOr<bool> TryLock(const std::string& path, int op = LOCK_EX) {
    if (fd_ < 0) {
      fd_ = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (fd_ < 0) return ErrnoStatus(errno, "open", path);
    }
    while (flock(fd_, op | LOCK_NB) != 0) {
      if (errno == EINTR) continue;
      if (errno == EWOULDBLOCK) return false;
      return ErrnoStatus(errno, "flock", path);
    }
    return true;
  }

 private:
  int fd_ = -1;
};

struct Meta {
  std::string url;
  int64_t size = -1;
  std::string etag;
  bool has_crc = false;  ///< false: written before checksums were kept
  uint32_t crc = 0;      ///< CRC-32 of the entry's bytes, computed when it was downloaded
};

constexpr char kCrcPrefix[] = "crc32 ";

bool ReadMeta(const std::string& path, Meta* meta) {
  std::string text;
  if (!ReadSmallFile(path, &text)) return false;
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.size() < 3) return false;
  meta->url = lines[0];
  meta->etag = lines[2];
  meta->has_crc = false;
  if (lines.size() > 3 && absl::StartsWith(lines[3], kCrcPrefix)) {
    uint32_t crc = 0;
    if (absl::SimpleHexAtoi(lines[3].substr(sizeof(kCrcPrefix) - 1), &crc)) {
      meta->has_crc = true;
      meta->crc = crc;
    }
  }
  return ParseWholeInteger(lines[1], &meta->size);
}

std::string MetaText(const std::string& url, int64_t size, const std::string& etag, uint32_t crc) {
  return absl::StrCat(url, "\n", size, "\n", etag, "\n", kCrcPrefix, absl::StrFormat("%08x", crc), "\n");
}

absl::Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "open", tmp);
  const ssize_t w = write(fd, text.data(), text.size());
  const int write_errno = errno;
  close(fd);
  if (w != static_cast<ssize_t>(text.size())) return ErrnoStatus(write_errno, "write", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) return ErrnoStatus(errno, "rename", tmp);
  return absl::OkStatus();
}

/// The complete entry at `entry` for `url`, if there is one (and its meta).
bool CompleteEntry(const std::string& entry, const std::string& url, CachedShard* out, Meta* meta_out = nullptr) {
  Meta meta;
  struct stat st;
  if (!ReadMeta(entry + kMetaSuffix, &meta) || meta.url != url) return false;
  if (stat(entry.c_str(), &st) != 0 || st.st_size != meta.size) return false;
  out->path = entry;
  out->size = meta.size;
  out->etag = meta.etag;
  if (meta_out != nullptr) *meta_out = meta;
  return true;
}

/// Recency for the eviction order lives on the meta file: the entry's own file keeps the
/// modification and status change times it landed with, which say whether a file is still the
/// one read (the DataLoader's check before it uses an epoch read ahead).
void NoteUsed(const std::string& entry) {
  utimensat(AT_FDCWD, absl::StrCat(entry, kMetaSuffix).c_str(), nullptr, 0);
}

/// What says an entry's file is the one verified: a replaced, rewritten or touched file differs.
struct Identity {
  dev_t dev;
  ino_t ino;
  int64_t size, mtime_ns, ctime_ns;
  bool operator==(const Identity& o) const {
    return std::tie(dev, ino, size, mtime_ns, ctime_ns) == std::tie(o.dev, o.ino, o.size, o.mtime_ns, o.ctime_ns);
  }
};

Identity IdentityOf(const struct stat& st) {
  return {st.st_dev, st.st_ino, static_cast<int64_t>(st.st_size),
          int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec,
          int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec};
}

/// Entries this process verified (or downloaded), as they were then: checked once per process.
struct Verified {
  std::mutex mu;
  std::map<std::string, Identity> entries;
};

Verified& TheVerified() {
  static Verified* v = new Verified;  // never destroyed: used from threads at exit
  return *v;
}

bool IsVerified(const std::string& entry, const struct stat& st) {
  Verified& v = TheVerified();
  std::lock_guard<std::mutex> lock(v.mu);
  auto it = v.entries.find(entry);
  return it != v.entries.end() && it->second == IdentityOf(st);
}

void NoteVerified(const std::string& entry) {
  struct stat st;
  if (stat(entry.c_str(), &st) != 0) return;
  Verified& v = TheVerified();
  std::lock_guard<std::mutex> lock(v.mu);
  v.entries[entry] = IdentityOf(st);
}

void ForgetVerified(const std::string& entry) {
  Verified& v = TheVerified();
  std::lock_guard<std::mutex> lock(v.mu);
  v.entries.erase(entry);
}

/// Removes an entry found damaged (the data first, as Evict does). Under its exclusive lock.
void Discard(const std::string& entry) {
  ForgetVerified(entry);
  unlink(entry.c_str());
  unlink(absl::StrCat(entry, kMetaSuffix).c_str());
}

/// Whether the complete entry `entry` (its meta `meta`) may be handed out: of the size the index
/// recorded (`want`, -1: not known) and, once per process, of the checksum recorded at its
/// download. An entry whose meta predates checksums is accepted and, with `may_record` (the
/// exclusive lock held), gets the checksum of its bytes as they are now. OK or why not.
absl::Status CheckEntry(const std::string& entry, const Meta& meta, int64_t want, bool may_record) {
  if (want >= 0 && meta.size != want) {
    return absl::DataLossError(absl::StrCat("cached copy ", entry, " of ", meta.url, " holds ", meta.size,
                                            " bytes, the shard was indexed with ", want));
  }
  struct stat st;
  if (stat(entry.c_str(), &st) != 0) return ErrnoStatus(errno, "stat", entry);
  if (IsVerified(entry, st)) return absl::OkStatus();
  absl::StatusOr<uint32_t> crc = FileCrc32(entry);
  if (!crc.ok()) return crc.status();
  if (meta.has_crc && *crc != meta.crc) {
    return absl::DataLossError(absl::StrFormat("cached copy %s of %s fails its checksum (CRC-32 %08x, downloaded as %08x)",
                                               entry, meta.url, *crc, meta.crc));
  }
  if (!meta.has_crc && may_record) {
    // Appended in place (not a new meta renamed over the old one): the folder stays as it was.
    const std::string path = absl::StrCat(entry, kMetaSuffix);
    const std::string line = absl::StrCat(kCrcPrefix, absl::StrFormat("%08x", *crc), "\n");
    const int fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd >= 0) {
      (void)!write(fd, line.data(), line.size());
      close(fd);
    }
  }
  Verified& v = TheVerified();
  std::lock_guard<std::mutex> lock(v.mu);
  v.entries[entry] = IdentityOf(st);
  return absl::OkStatus();
}

}  // namespace

int HoldCacheEntry(const std::string& path) {
  const std::string lock_path = absl::StrCat(path, kLockSuffix);
  const int fd = open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  while (flock(fd, LOCK_SH | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    close(fd);
    return -1;
  }
  NoteUsed(path);
  return fd;
}

ShardCache::ShardCache(std::string dir, int64_t limit_bytes, RemoteOptions options)
    : dir_(std::move(dir)), limit_bytes_(limit_bytes), options_(std::move(options)) {}

std::string ShardCache::EntryPath(const std::string& url) const {
  return absl::StrCat(dir_, "/", absl::StrFormat("%016x", Fnv1a(url)), "-", SafeBaseName(url));
}

std::vector<std::pair<int64_t, int64_t>> DownloadPieces(int64_t size, int max_connections) {
  if (size < 2 * kMinPieceBytes || max_connections < 2) return {};
  const int64_t count = std::min<int64_t>(max_connections, size / kMinPieceBytes);
  const int64_t piece = (size + count - 1) / count;
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t at = 0; at < size; at += piece) out.emplace_back(at, std::min(piece, size - at));
  return out;
}

namespace {

/// A download that succeeded with another size than the shard was indexed with (want < 0:
/// not indexed).
bool OtherSize(const DownloadResult& r, int64_t want) {
  return r.status.ok() && want >= 0 && r.size != want;
}

/// Downloads `jobs` (the shards whose indexed sizes are `sizes`, -1 where unknown) into their
/// part files: in pieces first where the size is known, whole where pieces cannot serve, and
/// once more a download of another size than indexed. One result per job. `ticket` (the
/// caller's place in the connection budget's queue, -1: none) serves the first requests and is
/// spent (-1) once the pieces went out.
std::vector<DownloadResult> DownloadShards(const std::vector<DownloadJob>& jobs,
                                           const std::vector<int64_t>& sizes,
                                           const RemoteOptions& options,
                                           const std::atomic<bool>* cancel, int64_t& ticket) {
  std::vector<DownloadResult> results(jobs.size());
  // A shard of known size comes in pieces first (see DownloadPieces); one whose pieces
  // did not all land with one ETag (a server without ranges, another object) is fetched
  // whole below. A failure that a whole download would meet as well (the server refuses,
  // or kept failing through the retries) is the shard's.
  std::vector<DownloadJob> piece_jobs;
  std::vector<size_t> piece_of;  // the job each piece belongs to
  std::vector<bool> in_pieces(jobs.size(), false);
  for (size_t j = 0; j < jobs.size(); ++j) {
    const int64_t size = sizes[j];
    const auto pieces = DownloadPieces(size, options.max_connections);
    if (pieces.empty()) continue;
    const int fd = open(jobs[j].path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) continue;  // the whole download reports the error
    close(fd);
    in_pieces[j] = true;
    for (const auto& [offset, length] : pieces) {
      DownloadJob job = jobs[j];
      job.offset = offset;
      job.length = length;
      job.object_size = size;
      piece_jobs.push_back(std::move(job));
      piece_of.push_back(j);
    }
  }
  if (!piece_jobs.empty()) {
    const std::vector<DownloadResult> got = DownloadAll(piece_jobs, options, cancel, nullptr, ticket);
    ticket = -1;  // the whole downloads below, if any, come after these
    std::vector<bool> first(jobs.size(), true);
    for (size_t k = 0; k < got.size(); ++k) {
      DownloadResult& r = results[piece_of[k]];
      r.attempts += got[k].attempts;
      if (first[piece_of[k]]) {
        first[piece_of[k]] = false;
        r.etag = got[k].etag;
      } else if (r.status.ok() && got[k].etag != r.etag) {
        r.status = absl::DataLossError(absl::StrCat("GET ", piece_jobs[k].url, ": pieces of two ETags, ",
                                                    r.etag, " and ", got[k].etag));
      }
      if (r.status.ok() && !got[k].status.ok()) r.status = got[k].status;
      r.size += got[k].size;
    }
  }
  std::vector<DownloadJob> whole_jobs;
  std::vector<size_t> whole_of;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (in_pieces[j] && results[j].status.ok()) continue;
    const absl::StatusCode code = results[j].status.code();
    if (in_pieces[j] && code != absl::StatusCode::kFailedPrecondition &&
        code != absl::StatusCode::kDataLoss && code != absl::StatusCode::kInvalidArgument) {
      continue;
    }
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      results[j].status = absl::CancelledError(absl::StrCat("GET ", jobs[j].url, ": cancelled"));
      continue;
    }
    whole_jobs.push_back(jobs[j]);
    whole_of.push_back(j);
  }
  if (!whole_jobs.empty()) {
    const std::vector<DownloadResult> got = DownloadAll(whole_jobs, options, cancel, nullptr, ticket);
    for (size_t k = 0; k < got.size(); ++k) {
      const int earlier = results[whole_of[k]].attempts;
      results[whole_of[k]] = got[k];
      results[whole_of[k]].attempts += earlier;
    }
  }
  // A download of another size than the shard was indexed with is not kept: a server that
  // cut the body short and said so (its Content-Length) would leave the cut copy in the
  // cache for every later run. It is fetched whole once more; a second copy of that other
  // size means the object changed (the index is stale).
  std::vector<DownloadJob> again_jobs;
  std::vector<size_t> again_of;
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (!OtherSize(results[j], sizes[j]) || (cancel != nullptr && cancel->load(std::memory_order_relaxed))) continue;
    again_jobs.push_back(jobs[j]);
    again_of.push_back(j);
  }
  if (!again_jobs.empty()) {
    const std::vector<DownloadResult> got = DownloadAll(again_jobs, options, cancel, nullptr, -1);
    for (size_t k = 0; k < got.size(); ++k) {
      const int earlier = results[again_of[k]].attempts;
      results[again_of[k]] = got[k];
      results[again_of[k]].attempts += earlier;
    }
  }
  return results;
}

}  // namespace

std::vector<absl::StatusOr<CachedShard>> ShardCache::Ensure(const std::vector<std::string>& urls,
                                                            const std::atomic<bool>* cancel,
                                                            const std::function<std::set<std::string>()>& also_keep,
                                                            const std::vector<int64_t>& sizes, int64_t ticket) {
  std::vector<absl::StatusOr<CachedShard>> out(urls.size(), absl::UnknownError("not fetched"));
  if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) {
    const absl::Status status = ErrnoStatus(errno, "mkdir", dir_);
    for (auto& r : out) r = status;
    return out;
  }
  std::set<std::string> keep;
  for (const std::string& url : urls) keep.insert(EntryPath(url));

  std::vector<size_t> pending(urls.size());
  for (size_t i = 0; i < urls.size(); ++i) pending[i] = i;
  bool downloaded_any = false;
  while (!pending.empty()) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      for (size_t i : pending) out[i] = absl::CancelledError(absl::StrCat("fetch ", urls[i], ": cancelled"));
      break;
    }
    // Take the lock of every pending entry that is free; a complete entry is served at once.
    std::vector<size_t> busy, fetch;
    std::vector<EntryLock> locks;
    std::vector<DownloadJob> jobs;
    for (size_t i : pending) {
      const std::string entry = EntryPath(urls[i]);
      EntryLock lock;
      absl::StatusOr<bool> locked = lock.TryLock(entry + kLockSuffix);
      if (!locked.ok()) {
        out[i] = locked.status();
        continue;
      }
      CachedShard shard;
      Meta meta;
      const int64_t want = sizes.empty() ? -1 : sizes[i];
      if (!*locked) {
        // Held: by a download or an eviction (exclusive), or by readers (shared), whose entry
        // is complete and is served without waiting for them to close it, once it checks out
        // (one that does not waits for the readers: replacing it needs the exclusive lock).
        EntryLock shared;
        absl::StatusOr<bool> read_locked = shared.TryLock(entry + kLockSuffix, LOCK_SH);
        if (read_locked.ok() && *read_locked && CompleteEntry(entry, urls[i], &shard, &meta) &&
            CheckEntry(entry, meta, want, /*may_record=*/false).ok()) {
          NoteUsed(entry);
          out[i] = shard;
        } else {
          busy.push_back(i);
        }
        continue;
      }
      if (CompleteEntry(entry, urls[i], &shard, &meta)) {
        if (CheckEntry(entry, meta, want, /*may_record=*/true).ok()) {
          NoteUsed(entry);
          out[i] = shard;
          continue;
        }
        // Damaged (another size than indexed: a truncated download; or not the bytes that
        // were downloaded): fetched again.
        Discard(entry);
      }
      fetch.push_back(i);
      locks.push_back(std::move(lock));
      DownloadJob job;
      job.url = urls[i];
      job.path = entry + kPartSuffix;
      jobs.push_back(std::move(job));
    }
    std::vector<int64_t> job_sizes;
    for (size_t i : fetch) job_sizes.push_back(sizes.empty() ? -1 : sizes[i]);
    std::vector<DownloadResult> results =
        jobs.empty() ? std::vector<DownloadResult>{}
                     : DownloadShards(jobs, job_sizes, options_, cancel, ticket);
    for (size_t j = 0; j < jobs.size(); ++j) {
      const size_t i = fetch[j];
      const std::string entry = EntryPath(urls[i]);
      DownloadResult& r = results[j];
      if (OtherSize(r, job_sizes[j])) {
        r.status = absl::FailedPreconditionError(absl::StrCat(
            urls[i], " changed since the dataset was built (", sizes[i], " bytes indexed, ", r.size,
            " bytes downloaded, twice): the download is not kept in the cache"));
      }
      // The checksum every later process verifies the entry against (see CheckEntry).
      absl::StatusOr<uint32_t> crc = r.status.ok() ? FileCrc32(jobs[j].path) : r.status;
      if (!crc.ok()) {
        unlink(jobs[j].path.c_str());
        out[i] = crc.status();
        continue;
      }
      absl::Status status = WriteFileAtomically(entry + kMetaSuffix, MetaText(urls[i], r.size, r.etag, *crc));
      if (status.ok() && rename(jobs[j].path.c_str(), entry.c_str()) != 0) {
        status = ErrnoStatus(errno, "rename", jobs[j].path);
      }
      if (!status.ok()) {
        out[i] = status;
        continue;
      }
      NoteVerified(entry);
      downloaded_any = true;
      out[i] = CachedShard{entry, r.size, r.etag, true, r.attempts};
    }
    locks.clear();  // released before waiting for others' locks
    pending = std::move(busy);
    if (!pending.empty()) std::this_thread::sleep_for(kLockPoll);
  }
  if (downloaded_any && limit_bytes_ > 0) {
    // Best effort: a cache that cannot be trimmed still served this call's shards.
    if (also_keep) keep.merge(also_keep());
    (void)Evict(keep);
  }
  return out;
}

absl::StatusOr<bool> ShardCache::Revalidate(const std::string& url, const std::atomic<bool>* cancel) {
  const std::string entry = EntryPath(url);
  EntryLock lock;
  while (true) {
    RL_ASSIGN_OR_RETURN(bool locked, lock.TryLock(entry + kLockSuffix));
    if (locked) break;
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) {
      return absl::CancelledError(absl::StrCat("check ", url, ": cancelled"));
    }
    std::this_thread::sleep_for(kLockPoll);
  }
  CachedShard shard;
  Meta meta;
  if (!CompleteEntry(entry, url, &shard, &meta) || meta.size <= 0) return false;
  // One byte, written nowhere: what matters is the size and ETag the server answers with.
  DownloadJob probe;
  probe.url = url;
  probe.path = "/dev/null";
  probe.offset = meta.size - 1;
  probe.length = 1;
  probe.object_size = meta.size;
  probe.etag = meta.etag;
  const std::vector<DownloadResult> got = DownloadAll({probe}, options_, cancel);
  if (got.empty() || !got[0].changed) return false;
  Discard(entry);
  return true;
}

namespace {

struct Entry {
  int64_t mtime_ns;
  int64_t size;
  std::string path;
  bool operator<(const Entry& o) const { return std::tie(mtime_ns, path) < std::tie(o.mtime_ns, o.path); }
};

/// The complete entries of `dir` (a meta, and a file of its size).
absl::StatusOr<std::vector<Entry>> CompleteEntries(const std::string& dir) {
  std::vector<Entry> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return out;
    return ErrnoStatus(errno, "opendir", dir);
  }
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (!absl::EndsWith(name, kMetaSuffix)) continue;
    const std::string entry = absl::StrCat(dir, "/", name.substr(0, name.size() - (sizeof(kMetaSuffix) - 1)));
    Meta meta;
    struct stat st, used;
    if (!ReadMeta(entry + kMetaSuffix, &meta) || stat(entry.c_str(), &st) != 0 ||
        st.st_size != meta.size || stat((entry + kMetaSuffix).c_str(), &used) != 0) {
      continue;
    }
    // Last used: the meta's modification time (NoteUsed).
    out.push_back({int64_t{used.st_mtim.tv_sec} * 1000000000 + used.st_mtim.tv_nsec, meta.size, entry});
  }
  closedir(d);
  return out;
}

}  // namespace

bool CacheEntryReady(const std::string& entry, int64_t size) {
  struct stat st;
  if (stat(entry.c_str(), &st) != 0 || (size >= 0 && st.st_size != size) || !IsVerified(entry, st)) return false;
  NoteUsed(entry);
  return true;
}

absl::StatusOr<int64_t> ShardCache::Evict(const std::set<std::string>& keep, int64_t target_bytes) {
  RL_ASSIGN_OR_RETURN(std::vector<Entry> entries, CompleteEntries(dir_));
  int64_t total = 0;
  for (const Entry& e : entries) total += e.size;
  if (limit_bytes_ <= 0) return total;
  const int64_t target = target_bytes < 0 ? limit_bytes_ : target_bytes;
  std::sort(entries.begin(), entries.end());
  for (const Entry& e : entries) {
    if (total <= target) break;
    if (keep.count(e.path)) continue;
    EntryLock lock;
    absl::StatusOr<bool> locked = lock.TryLock(e.path + kLockSuffix);
    if (!locked.ok() || !*locked) continue;  // someone is using it: not ours to remove now
    // The data first: a meta without its file is an incomplete entry, never a wrong one.
    if (unlink(e.path.c_str()) != 0 && errno != ENOENT) continue;
    unlink((e.path + kMetaSuffix).c_str());
    ForgetVerified(e.path);
    total -= e.size;
  }
  return total;
}

}  // namespace ringloader
