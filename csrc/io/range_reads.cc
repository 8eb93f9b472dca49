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

std::vector<absl::Status> FetchRanges(const std::vector<RangedCopy>& copies, const RemoteOptions& options,
                                      const std::atomic<bool>* cancel, RangeFetchResult* totals) {
  std::vector<absl::Status> out(copies.size());
  std::vector<DownloadJob> jobs;
  std::vector<size_t> owner;  // the copy of each job
  for (size_t c = 0; c < copies.size(); ++c) {
    const RangedCopy& copy = copies[c];
    for (const auto& [offset, length] : copy.ranges) {
      if (offset < 0 || length <= 0 || (copy.object_size >= 0 && offset + length > copy.object_size)) {
        out[c] = absl::InvalidArgumentError(absl::StrCat("range read of ", copy.url, ": bytes ", offset,
                                                         "+", length, " are not inside its ",
                                                         copy.object_size, " bytes"));
        break;
      }
    }
    if (!out[c].ok()) continue;
    const int fd = open(copy.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      out[c] = ErrnoStatus(errno, "open", copy.path);
      continue;
    }
    // The shard's size, so that every member sits at its index offset; the holes take no disk.
    const bool sized = copy.object_size < 0 || ftruncate(fd, copy.object_size) == 0;
    const int size_errno = errno;
    close(fd);
    if (!sized) {
      out[c] = ErrnoStatus(size_errno, "ftruncate", copy.path);
      continue;
    }
    for (const auto& [offset, length] : copy.ranges) {
      DownloadJob job;
      job.url = copy.url;
      job.path = copy.path;
      job.offset = offset;
      job.length = length;
      job.object_size = copy.object_size;
      job.etag = copy.etag;
      jobs.push_back(std::move(job));
      owner.push_back(c);
    }
  }
  const std::vector<DownloadResult> results = DownloadAll(jobs, options, cancel);
  RangeFetchResult sum;
  for (size_t j = 0; j < results.size(); ++j) {
    const DownloadResult& r = results[j];
    sum.requests += r.attempts;
    sum.bytes += r.size;
    absl::Status& status = out[owner[j]];
    // A changed object outranks any other failure: its index must be rebuilt.
    if (!r.status.ok() && (status.ok() || absl::IsFailedPrecondition(r.status))) status = r.status;
  }
  g_requests.fetch_add(sum.requests, std::memory_order_relaxed);
  g_bytes.fetch_add(sum.bytes, std::memory_order_relaxed);
  if (totals != nullptr) *totals = sum;
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
