#include "io/range_reads.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"

namespace ringloader {
namespace {

std::atomic<int64_t> g_requests{0};
std::atomic<int64_t> g_bytes{0};

std::mutex& RedirectMu() {
  static std::mutex mu;
  return mu;
}

std::map<std::string, std::string>& Redirects() {
  static auto* redirects = new std::map<std::string, std::string>();
  return *redirects;
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> MergeRanges(std::vector<std::pair<int64_t, int64_t>> ranges,
                                                     int64_t gap) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& [offset, length] : ranges) {
    if (length <= 0) continue;
    if (!out.empty() && offset <= out.back().first + out.back().second + gap) {
      out.back().second = std::max(out.back().second, offset + length - out.back().first);
    } else {
      out.emplace_back(offset, length);
    }
  }
  return out;
}

absl::StatusOr<RangeFetchResult> FetchRanges(const std::string& url, const std::string& path,
                                             int64_t object_size, const std::string& etag,
                                             const std::vector<std::pair<int64_t, int64_t>>& ranges,
                                             const RemoteOptions& options,
                                             const std::atomic<bool>* cancel) {
  for (const auto& [offset, length] : ranges) {
    if (offset < 0 || length <= 0 || (object_size >= 0 && offset + length > object_size)) {
      return absl::InvalidArgumentError(absl::StrCat("range read of ", url, ": bytes ", offset, "+",
                                                     length, " are not inside its ", object_size,
                                                     " bytes"));
    }
  }
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus(errno, "open", path);
  // The shard's size, so that every member sits at its index offset; the holes take no disk.
  const bool sized = object_size < 0 || ftruncate(fd, object_size) == 0;
  const int size_errno = errno;
  close(fd);
  if (!sized) return ErrnoStatus(size_errno, "ftruncate", path);

  std::vector<DownloadJob> jobs;
  jobs.reserve(ranges.size());
  for (const auto& [offset, length] : ranges) {
    DownloadJob job;
    job.url = url;
    job.path = path;
    job.offset = offset;
    job.length = length;
    job.object_size = object_size;
    job.etag = etag;
    jobs.push_back(std::move(job));
  }
  const std::vector<DownloadResult> results = DownloadAll(jobs, options, cancel);
  RangeFetchResult out;
  absl::Status first_error;
  for (const DownloadResult& r : results) {
    out.requests += r.attempts;
    out.bytes += r.size;
    // A changed object outranks any other failure: its index must be rebuilt.
    if (!r.status.ok() && (first_error.ok() || absl::IsFailedPrecondition(r.status))) {
      first_error = r.status;
    }
  }
  g_requests.fetch_add(out.requests, std::memory_order_relaxed);
  g_bytes.fetch_add(out.bytes, std::memory_order_relaxed);
  if (!first_error.ok()) return first_error;
  return out;
}

RangeFetchResult RangeReadTotals() {
  return RangeFetchResult{g_requests.load(std::memory_order_relaxed), g_bytes.load(std::memory_order_relaxed)};
}

void RedirectShard(const std::string& entry, const std::string& copy) {
  std::lock_guard<std::mutex> lock(RedirectMu());
  if (copy.empty()) {
    Redirects().erase(entry);
  } else {
    Redirects()[entry] = copy;
  }
}

std::string RedirectedPath(const std::string& path) {
  std::lock_guard<std::mutex> lock(RedirectMu());
  if (Redirects().empty()) return path;
  auto it = Redirects().find(path);
  return it == Redirects().end() ? path : it->second;
}

}  // namespace ringloader
