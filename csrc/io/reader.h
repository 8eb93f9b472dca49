#pragma once
/// File reading: a `Reader` moves bytes (io_uring with many reads in flight, or plain pread),
/// and a `FileFetcher` drives one to read whole files or byte ranges of them (members of a tar
/// shard), retrying short reads, EINTR and EAGAIN.
///
/// Threading: a Reader and its FileFetcher belong to one reader thread; nothing here is
/// thread-safe.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ringloader/types.h"

namespace ringloader {

/// A grow-only byte buffer: resizing within capacity neither allocates nor zero-fills.
class ByteBuffer {
 public:
  /// Makes room for `size` bytes (reallocating only to grow) and sets size().
  void Resize(size_t size);
  uint8_t* data() { return data_.get(); }
  const uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

/// One positional read. The Reader fills `result` (bytes read, or -errno) on completion.
struct ReadOp {
  int fd = -1;
  uint8_t* dst = nullptr;
  size_t length = 0;
  uint64_t offset = 0;
  int64_t result = 0;
  void* owner = nullptr;  ///< Opaque back-pointer for the driver.
};

/// Moves bytes. Implementations: io_uring (asynchronous) and pread (synchronous).
class Reader {
 public:
  virtual ~Reader() = default;
  /// "io_uring" or "pread".
  virtual const char* name() const = 0;
  /// Most operations in flight at once.
  virtual int depth() const = 0;
  /// Queues `op`; at most depth() ops may be queued or in flight.
  virtual absl::Status Submit(ReadOp* op) = 0;
  /// Hands queued ops to the kernel (io_uring batches submissions; pread: no-op).
  virtual absl::Status Flush() = 0;
  /// Appends completed ops to `done`. With `wait`, blocks until at least one completes
  /// (when any is in flight). Returns how many were appended.
  virtual absl::StatusOr<int> Reap(std::vector<ReadOp*>* done, bool wait) = 0;
};

/// A pread(2) reader: Submit performs the read at once.
std::unique_ptr<Reader> MakePreadReader(int depth);

/// An io_uring reader with `depth` entries. Fails (e.g. PermissionDenied when seccomp refuses
/// io_uring_setup, as Docker's default profile does) so the caller can fall back to pread.
absl::StatusOr<std::unique_ptr<Reader>> MakeUringReader(int depth);

/// Test hook: when set, MakeUringReader fails as if io_uring_setup returned this errno.
void SetUringSetupFailureForTesting(int errno_value);

/// Picks a backend: kUring/kAuto try io_uring first; kAuto falls back to pread and explains why
/// in `*fallback_reason`; kUring fails instead.
absl::StatusOr<std::unique_ptr<Reader>> MakeReader(IoBackend backend, int depth,
                                                   std::string* fallback_reason);

/// A completed whole-file read.
struct FetchedFile {
  uint64_t tag = 0;
  absl::Status status;  ///< Error names the file and the failing call.
  ByteBuffer* buffer = nullptr;
};

/// Reads whole files, or byte ranges of files, through a Reader, at most reader->depth() at a
/// time. Files read by range (shards) stay open in a small cache until the fetcher is destroyed
/// (at epoch end), so reading one member costs no open().
class FileFetcher {
 public:
  FileFetcher(std::unique_ptr<Reader> reader, size_t max_file_bytes);
  ~FileFetcher();
  FileFetcher(const FileFetcher&) = delete;
  FileFetcher& operator=(const FileFetcher&) = delete;

  /// Opens `path` and queues a read of the whole file (`length` < 0) or of the bytes
  /// [offset, offset + length) into `buffer`. Failures to open or stat are not returned here:
  /// they come back from Poll as a FetchedFile with an error status, like any other completion;
  /// a file too short for the range is DataLoss ("truncated: ..."). Call Flush() after a group
  /// of Starts.
  void Start(const std::string& path, ByteBuffer* buffer, uint64_t tag, uint64_t offset = 0,
             int64_t length = -1);
  /// Submits what Start queued.
  absl::Status Flush();
  /// Appends finished files to `out`. With `wait`, blocks until at least one finishes when any
  /// is outstanding.
  absl::Status Poll(std::vector<FetchedFile>* out, bool wait);
  /// Files started and not yet returned by Poll.
  int outstanding() const { return outstanding_ + static_cast<int>(early_.size()); }
  /// True when another Start fits.
  bool has_room() const;
  const Reader& reader() const { return *reader_; }
  /// The flag that stops a wait for a shard still downloading (io/pending_downloads.h); the
  /// loader's cancel flag, so Stop() never waits for a transfer.
  void set_cancel(const std::atomic<bool>* cancel) { cancel_ = cancel; }
  uint64_t bytes_read() const { return bytes_read_; }
  /// open() calls made so far (ranged reads of a cached file make none).
  uint64_t opens() const { return opens_; }

  /// Files kept open for ranged reads.
  static constexpr size_t kMaxCachedFiles = 16;
  /// Remote-shard cache entries (io/shard_cache.h) kept open while no read uses them.
  static constexpr size_t kIdleCacheEntries = 0;

 private:
  struct Job;
  struct CachedFile {
    std::string path;
    int fd = -1;
    uint64_t size = 0;
    int users = 0;  // jobs reading through fd now
    uint64_t last_use = 0;
    int entry_lock = -1;  // a remote-shard cache entry's shared lock (HoldCacheEntry), or -1
  };
  void Close(CachedFile* file);
  void Finish(Job* job, absl::Status status, std::vector<FetchedFile>* out);
  // The cache entry of `path`, opening (and evicting an idle entry) when needed; null with
  // `*error` set when the file cannot be used.
  CachedFile* OpenCached(const std::string& path, absl::Status* error);

  std::unique_ptr<Reader> reader_;
  size_t max_file_bytes_;
  std::vector<std::unique_ptr<Job>> jobs_;  // one per depth entry
  std::vector<Job*> idle_jobs_;
  std::vector<FetchedFile> early_;           // open/stat failures waiting for Poll
  std::vector<ReadOp*> reaped_;
  int outstanding_ = 0;  // started and not finished (finished ones may still sit in early_)
  uint64_t bytes_read_ = 0;
  uint64_t opens_ = 0;
  uint64_t use_clock_ = 0;
  std::vector<std::unique_ptr<CachedFile>> cache_;
  const std::atomic<bool>* cancel_ = nullptr;
};

}  // namespace ringloader
