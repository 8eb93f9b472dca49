#include "io/range_reads.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "io/pending_downloads.h"

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

BackgroundRanges::BackgroundRanges(std::vector<RangedCopy> copies, RemoteOptions options)
    : copies_(std::move(copies)),
      options_(std::move(options)),
      status_(copies_.size()),
      stale_(copies_.size(), false),
      left_(copies_.size(), 0) {
  for (const RangedCopy& copy : copies_) {
    if (!copy.entry.empty()) entries_.push_back(copy.entry);
  }
  RegisterPendingDownloads(this, entries_);
  std::vector<size_t> done_now;
  for (size_t c = 0; c < copies_.size(); ++c) {
    const RangedCopy& copy = copies_[c];
    absl::Status& status = status_[c];
    for (const auto& [offset, length] : copy.ranges) {
      if (offset < 0 || length <= 0 || (copy.object_size >= 0 && offset + length > copy.object_size)) {
        status = absl::InvalidArgumentError(absl::StrCat("range read of ", copy.url, ": bytes ", offset, "+",
                                                         length, " are not inside its ", copy.object_size,
                                                         " bytes"));
        break;
      }
    }
    if (status.ok()) {
      const int fd = open(copy.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) {
        status = ErrnoStatus(errno, "open", copy.path);
      } else {
        // The shard's size, so that every member sits at its index offset; the holes take no disk.
        const bool sized = copy.object_size < 0 || ftruncate(fd, copy.object_size) == 0;
        const int size_errno = errno;
        close(fd);
        if (!sized) status = ErrnoStatus(size_errno, "ftruncate", copy.path);
      }
    }
    if (!status.ok() || copy.ranges.empty()) {
      done_now.push_back(c);
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
      jobs_.push_back(std::move(job));
      owner_.push_back(c);
      ++left_[c];
    }
  }
  // Copies that need no request (none wanted, or refused above) are done now.
  for (size_t c : done_now) {
    absl::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status = status_[c];
      ++finished_;
    }
    if (copies_[c].entry.empty()) continue;
    if (!status.ok()) {
      status = absl::Status(status.code(), absl::StrCat("the shard could not be downloaded: ", status.message()));
    }
    FinishPendingDownload(this, copies_[c].entry, std::move(status));
  }
  thread_ = std::thread([this] { Run(); });
}

BackgroundRanges::~BackgroundRanges() {
  Cancel();
  if (thread_.joinable()) thread_.join();
  UnregisterPendingDownloads(this, entries_);
}

void BackgroundRanges::Run() {
  (void)DownloadAll(jobs_, options_, &cancel_,
                    [this](size_t job, const DownloadResult& result) { JobDone(job, result); });
  done_.notify_all();
}

void BackgroundRanges::JobDone(size_t job, const DownloadResult& result) {
  g_requests.fetch_add(result.attempts, std::memory_order_relaxed);
  g_bytes.fetch_add(result.size, std::memory_order_relaxed);
  const size_t c = owner_[job];
  absl::Status finished;
  bool stale = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    totals_.requests += result.attempts;
    totals_.bytes += result.size;
    absl::Status& status = status_[c];
    // A changed object outranks any other failure: its index must be rebuilt.
    if (!result.status.ok() && (status.ok() || (result.changed && !stale_[c]))) {
      status = result.status;
      stale_[c] = result.changed;
    }
    if (--left_[c] > 0) return;
    ++finished_;
    finished = status;
    stale = stale_[c];
  }
  done_.notify_all();
  const RangedCopy& copy = copies_[c];
  if (copy.entry.empty()) return;
  if (!finished.ok()) {
    // Read as a sample's error: it says why the shard's members are not there.
    finished = stale ? absl::FailedPreconditionError(absl::StrCat("WebDataset shard ", copy.url,
                                                                  " changed since the dataset was built (",
                                                                  finished.message(), ")"))
                     : absl::Status(finished.code(),
                                    absl::StrCat("the shard could not be downloaded: ", finished.message()));
  }
  FinishPendingDownload(this, copy.entry, std::move(finished));
}

std::vector<absl::Status> BackgroundRanges::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return finished_ == static_cast<int>(copies_.size()); });
  return status_;
}

int BackgroundRanges::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

RangeFetchResult BackgroundRanges::totals() const {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

RangeReadChoice ChooseRangeReads(int64_t shard_bytes, int64_t wanted_bytes, int64_t requests, int concurrency,
                                 const LinkEstimate& link) {
  RangeReadChoice out;
  const double rate = std::max(link.bytes_per_s, 1.0);
  const double latency = std::max(link.latency_s, 0.0);
  const int64_t waves = (std::max<int64_t>(requests, 0) + std::max(concurrency, 1) - 1) / std::max(concurrency, 1);
  out.whole_s = latency + static_cast<double>(shard_bytes) / rate;
  out.ranges_s = static_cast<double>(waves) * latency + static_cast<double>(wanted_bytes) / rate;
  out.by_range = 2 * wanted_bytes < shard_bytes && out.ranges_s < out.whole_s;
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
