#include "io/reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "io/pending_downloads.h"
#include "io/range_reads.h"
#include "io/shard_cache.h"

namespace ringloader {

void ByteBuffer::Resize(size_t size) {
  if (size > capacity_) {
    // Grow by at least 1.5x so a stream of slightly larger files does not reallocate each time.
    size_t capacity = std::max(size, capacity_ + capacity_ / 2);
    data_.reset(new uint8_t[capacity]);  // no zero-fill: the bytes are about to be overwritten
    capacity_ = capacity;
  }
  size_ = size;
}

absl::StatusOr<std::unique_ptr<Reader>> MakeReader(IoBackend backend, int depth,
                                                   std::string* fallback_reason) {
  if (depth < 1) return absl::InvalidArgumentError(absl::StrCat("io depth must be >= 1, got ", depth));
  if (backend == IoBackend::kPread) return MakePreadReader(depth);
  absl::StatusOr<std::unique_ptr<Reader>> uring = MakeUringReader(depth);
  if (uring.ok() || backend == IoBackend::kUring) return uring;
  if (fallback_reason != nullptr) {
    *fallback_reason = absl::StrCat("io_uring unavailable (", uring.status().message(),
                                    "); using pread");
  }
  return MakePreadReader(depth);
}

struct FileFetcher::Job {
  ReadOp op;
  std::string path;
  ByteBuffer* buffer = nullptr;
  uint64_t tag = 0;
  uint64_t base = 0;              // file offset of the first byte wanted
  size_t done = 0;
  CachedFile* cached = nullptr;   // op.fd belongs to this cache entry (not closed by Finish)
};

FileFetcher::FileFetcher(std::unique_ptr<Reader> reader, size_t max_file_bytes)
    : reader_(std::move(reader)), max_file_bytes_(max_file_bytes) {
  const int depth = reader_->depth();
  jobs_.reserve(depth);
  for (int i = 0; i < depth; ++i) {
    jobs_.push_back(std::make_unique<Job>());
    jobs_.back()->op.owner = jobs_.back().get();
    idle_jobs_.push_back(jobs_.back().get());
  }
  reaped_.reserve(depth);
}

FileFetcher::~FileFetcher() {
  // Reads still in the kernel write into buffers the caller owns: wait for all of them before
  // the buffers can be reused or freed.
  std::vector<FetchedFile> sink;
  (void)reader_->Flush();  // reads queued but never submitted must reach the kernel to complete
  while (outstanding_ > 0) {
    if (!Poll(&sink, /*wait=*/true).ok()) break;
    sink.clear();
  }
  for (auto& job : jobs_) {
    if (job->op.fd >= 0 && job->cached == nullptr) close(job->op.fd);
  }
  for (auto& file : cache_) Close(file.get());
}

void FileFetcher::Close(CachedFile* file) {
  close(file->fd);
  if (file->entry_lock >= 0) close(file->entry_lock);
}

bool FileFetcher::has_room() const { return !idle_jobs_.empty(); }

void FileFetcher::Finish(Job* job, absl::Status status, std::vector<FetchedFile>* out) {
  if (job->cached != nullptr) {
    CachedFile* file = job->cached;
    --file->users;
    job->cached = nullptr;
    if (file->entry_lock >= 0 && file->users == 0 && file->last_use != use_clock_) {
      // A cached remote shard this reader has moved on from (another was opened or used
      // since): closed, so that the cache may evict it (see OpenCached).
      Close(file);
      cache_.erase(std::find_if(cache_.begin(), cache_.end(), [file](const auto& f) { return f.get() == file; }));
    }
  } else if (job->op.fd >= 0) {
    close(job->op.fd);
  }
  job->op.fd = -1;
  out->push_back(FetchedFile{job->tag, std::move(status), job->buffer});
  idle_jobs_.push_back(job);
  --outstanding_;
}

namespace {

// Opens of a remote shard evicted from a cache smaller than the epoch's shards between its
// landing and the open, each fetching it again (io/pending_downloads.h), before the open fails.
constexpr int kOpenAttempts = 3;

// Why a stat()ed file cannot be read as a sample, or OK.
absl::Status CheckRegular(const std::string& path, const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, " is a directory, not a file"));
  if (!S_ISREG(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat(path, " is not a regular file"));
  return absl::OkStatus();
}

}  // namespace

FileFetcher::CachedFile* FileFetcher::OpenCached(const std::string& path, absl::Status* error) {
  for (auto& file : cache_) {
    if (file->path == path) {
      file->last_use = ++use_clock_;
      return file.get();
    }
  }
  int fd = -1;
  for (int attempt = 0; attempt < kOpenAttempts && fd < 0; ++attempt) {
    // A remote shard the epoch's background download has not landed yet: wait for it, or fail
    // with its download's error. One evicted since it landed (a cache smaller than the epoch's
    // shards) is fetched again by that wait, hence the further attempts.
    if (absl::Status pending = WaitForPendingDownload(path, cancel_); !pending.ok()) {
      *error = std::move(pending);
      return nullptr;
    }
    // O_NONBLOCK: see Start. A shard whose wanted members were fetched by range this epoch is
    // read from that copy (io/range_reads.h).
    fd = open(RedirectedPath(path).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    const int open_errno = errno;
    ++opens_;
    if (fd < 0 && (open_errno != ENOENT || attempt + 1 == kOpenAttempts || !RefetchIfEvicted(path))) {
      *error = ErrnoStatus(open_errno, "open", path);
      return nullptr;
    }
  }
  struct stat st;
  absl::Status usable = fstat(fd, &st) != 0 ? ErrnoStatus(errno, "fstat", path) : CheckRegular(path, st);
  if (!usable.ok()) {
    close(fd);
    *error = std::move(usable);
    return nullptr;
  }
  auto file = std::make_unique<CachedFile>();
  file->path = path;
  file->fd = fd;
  file->size = static_cast<uint64_t>(st.st_size);
  file->last_use = ++use_clock_;
  // A remote shard's cached copy stays in the cache while this reader has it open (and counts
  // as just used, on its meta: the copy's own file times are left as they are).
  file->entry_lock = HoldCacheEntry(path);
  if (file->entry_lock >= 0) {
    NoteShardOpened(path);
    // Readers move on from shard to shard: copies a reader kept open (locked) after moving on
    // would hold the cache past its limit, so those no read uses are closed (opening one again
    // while it is cached costs a few system calls).
    std::vector<CachedFile*> idle;
    for (auto& other : cache_) {
      if (other->entry_lock >= 0 && other->users == 0) idle.push_back(other.get());
    }
    std::sort(idle.begin(), idle.end(), [](CachedFile* a, CachedFile* b) { return a->last_use > b->last_use; });
    for (size_t k = kIdleCacheEntries; k < idle.size(); ++k) {
      Close(idle[k]);
      idle[k]->fd = -1;
    }
    cache_.erase(std::remove_if(cache_.begin(), cache_.end(), [](const auto& f) { return f->fd < 0; }),
                 cache_.end());
  }
  if (cache_.size() >= kMaxCachedFiles) {
    // Evict the least recently used file no read is using; when all are busy, grow past the
    // bound for now (at most depth() files can be busy).
    auto victim = cache_.end();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if ((*it)->users == 0 && (victim == cache_.end() || (*it)->last_use < (*victim)->last_use)) victim = it;
    }
    if (victim != cache_.end()) {
      Close(victim->get());
      cache_.erase(victim);
    }
  }
  cache_.push_back(std::move(file));
  return cache_.back().get();
}

void FileFetcher::Start(const std::string& path, ByteBuffer* buffer, uint64_t tag, uint64_t offset,
                        int64_t length) {
  Job* job = idle_jobs_.back();
  idle_jobs_.pop_back();
  ++outstanding_;
  job->path = path;
  job->buffer = buffer;
  job->tag = tag;
  job->done = 0;
  job->base = 0;
  job->cached = nullptr;
  buffer->Resize(0);

  size_t size = 0;
  if (length >= 0) {
    // A member of a shard: the file stays open for the next member.
    absl::Status error;
    CachedFile* file = OpenCached(path, &error);
    if (file == nullptr) return Finish(job, std::move(error), &early_);
    ++file->users;
    job->cached = file;
    job->op.fd = file->fd;
    const uint64_t end = offset + static_cast<uint64_t>(length);
    if (end < offset || end > file->size) {
      return Finish(job,
                    absl::DataLossError(absl::StrCat("truncated: ", path, " has ", file->size,
                                                     " bytes, member needs ", end, " (offset ", offset,
                                                     ", length ", length, ")")),
                    &early_);
    }
    size = static_cast<size_t>(length);
    job->base = offset;
  } else {
    // O_NONBLOCK: opening a FIFO or device named like an image must not hang the reader (the
    // S_ISREG check below then refuses it); it has no effect on regular files.
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    ++opens_;
    if (fd < 0) return Finish(job, ErrnoStatus(errno, "open", path), &early_);
    job->op.fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) return Finish(job, ErrnoStatus(errno, "fstat", path), &early_);
    if (absl::Status regular = CheckRegular(path, st); !regular.ok()) {
      return Finish(job, std::move(regular), &early_);
    }
    size = static_cast<size_t>(st.st_size);
  }
  if (size > max_file_bytes_) {
    return Finish(job,
                  absl::OutOfRangeError(absl::StrCat(path, length >= 0 ? " member at offset " : "",
                                                     length >= 0 ? absl::StrCat(offset) : "", " is ", size,
                                                     " bytes, over the limit of ", max_file_bytes_,
                                                     " bytes per file")),
                  &early_);
  }
  buffer->Resize(size);
  if (size == 0) return Finish(job, absl::OkStatus(), &early_);
  job->op.dst = buffer->data();
  job->op.length = size;
  job->op.offset = job->base;
  absl::Status submitted = reader_->Submit(&job->op);
  if (!submitted.ok()) Finish(job, std::move(submitted), &early_);
}

absl::Status FileFetcher::Flush() { return reader_->Flush(); }

absl::Status FileFetcher::Poll(std::vector<FetchedFile>* out, bool wait) {
  const size_t before = out->size();
  for (auto& file : early_) out->push_back(std::move(file));
  early_.clear();
  bool resubmitted = false;
  while (outstanding_ > 0) {
    const bool block = wait && out->size() == before;
    reaped_.clear();
    RL_ASSIGN_OR_RETURN(int n, reader_->Reap(&reaped_, block));
    for (ReadOp* op : reaped_) {
      Job* job = static_cast<Job*>(op->owner);
      const int64_t result = op->result;
      if (result == -EINTR || result == -EAGAIN) {
        // Interrupted or would block: nothing was transferred, ask again.
      } else if (result < 0) {
        Finish(job, ErrnoStatus(static_cast<int>(-result), "read", job->path), out);
        continue;
      } else if (result == 0) {
        Finish(job,
               absl::DataLossError(absl::StrCat(job->path, " shrank while being read: got ", job->done,
                                                " of ", job->buffer->size(), " bytes")),
               out);
        continue;
      } else {
        job->done += static_cast<size_t>(result);
        bytes_read_ += static_cast<uint64_t>(result);
        if (job->done >= job->buffer->size()) {
          Finish(job, absl::OkStatus(), out);
          continue;
        }
      }
      // Short read (or retry): queue the rest of the file.
      op->dst = job->buffer->data() + job->done;
      op->length = job->buffer->size() - job->done;
      op->offset = job->base + job->done;
      absl::Status submitted = reader_->Submit(op);
      if (!submitted.ok()) {
        Finish(job, std::move(submitted), out);
        continue;
      }
      resubmitted = true;
    }
    if (resubmitted) {
      RL_RETURN_IF_ERROR(reader_->Flush());
      resubmitted = false;
    }
    if (n == 0 || !wait || out->size() > before) break;
  }
  return absl::OkStatus();
}

}  // namespace ringloader
