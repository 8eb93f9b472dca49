#include "io/pending_downloads.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ringloader {
namespace {

/// The cache entries that some BackgroundFetch has not landed yet; one that landed is removed.
struct Registry {
  std::mutex mu;
  std::condition_variable changed;
  // The fetch that owns an entry, and its error once it failed (nullopt: still downloading).
  struct Entry {
    const void* owner = nullptr;
    std::optional<absl::Status> failed;
    // A forked child inherits the table but not the threads that would finish its entries:
    // there, they are not waited for (its reads then open the files as they are).
    pid_t pid = 0;
  };
  std::map<std::string, Entry> entries ABSL_GUARDED_BY(mu);
  // entries.size(), read without the lock: every read of every local file asks, and almost
  // always the table is empty.
  std::atomic<size_t> count{0};
};

void TheRegistryLocked(bool lock);

Registry* NewRegistry() {
  auto* registry = new Registry;  // never destroyed: threads may wait at exit
  // A fork while a download thread holds the lock would leave the child's copy locked forever.
  pthread_atfork([] { TheRegistryLocked(true); }, [] { TheRegistryLocked(false); },
                 [] { TheRegistryLocked(false); });
  return registry;
}

Registry& TheRegistry() {
  static Registry* registry = NewRegistry();
  return *registry;
}

void TheRegistryLocked(bool lock) {
  if (lock) {
    TheRegistry().mu.lock();
  } else {
    TheRegistry().mu.unlock();
  }
}

// The reader re-checks its cancel flag this often while it waits.
constexpr auto kCancelPoll = std::chrono::milliseconds(20);

}  // namespace

absl::Status WaitForPendingDownload(const std::string& path, const std::atomic<bool>* cancel) {
  Registry& r = TheRegistry();
  if (r.count.load(std::memory_order_acquire) == 0) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(r.mu);
  while (true) {
    auto it = r.entries.find(path);
    if (it == r.entries.end() || it->second.pid != getpid()) return absl::OkStatus();
    if (it->second.failed) return *it->second.failed;
    if (cancel != nullptr && cancel->load(std::memory_order_acquire)) {
      return absl::CancelledError(absl::StrCat("open ", path, ": cancelled while it downloads"));
    }
    r.changed.wait_for(lock, kCancelPoll);
  }
}

bool IsPendingDownload(const std::string& path) {
  Registry& r = TheRegistry();
  if (r.count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(path);
  return it != r.entries.end() && it->second.pid == getpid() && !it->second.failed;
}

BackgroundFetch::BackgroundFetch(std::vector<std::string> urls, std::vector<ExpectedCopy> expected,
                                 std::string cache_dir, int64_t limit_bytes, RemoteOptions options)
    : urls_(std::move(urls)),
      expected_(std::move(expected)),
      max_connections_(std::max(1, options.max_connections)),
      cache_(std::move(cache_dir), limit_bytes, std::move(options)),
      results_(urls_.size(), absl::UnknownError("not fetched")) {
  Registry& r = TheRegistry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const std::string& url : urls_) {
      paths_.push_back(cache_.EntryPath(url));
      r.entries[paths_.back()] = Registry::Entry{this, std::nullopt, getpid()};
    }
    r.count.store(r.entries.size(), std::memory_order_release);
  }
  const int workers = std::min<int>(max_connections_, static_cast<int>(urls_.size()));
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this] { Run(); });
}

BackgroundFetch::~BackgroundFetch() {
  Cancel();
  for (std::thread& t : threads_) t.join();
  // Failed entries of this fetch stop being reported once it is gone (a later epoch retries).
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const std::string& path : paths_) {
    auto it = r.entries.find(path);
    if (it != r.entries.end() && it->second.owner == this) r.entries.erase(it);
  }
  r.count.store(r.entries.size(), std::memory_order_release);
  r.changed.notify_all();
}

void BackgroundFetch::Run() {
  Registry& r = TheRegistry();
  while (true) {
    const size_t i = next_.fetch_add(1);
    if (i >= urls_.size()) return;
    // One shard per call, so that each is handed to the readers the moment it lands.
    absl::StatusOr<CachedShard> got = absl::CancelledError(absl::StrCat("fetch ", urls_[i], ": cancelled"));
    if (!cancel_.load(std::memory_order_acquire)) got = std::move(cache_.Ensure({urls_[i]}, &cancel_)[0]);
    bool stale = false;
    if (got.ok() && !expected_.empty()) {
      const ExpectedCopy& want = expected_[i];
      const bool size_differs = want.size >= 0 && want.size != got->size;
      const bool etag_differs = want.etag && *want.etag != got->etag;
      if (size_differs || etag_differs) {
        stale = true;
        got = absl::FailedPreconditionError(absl::StrCat(
            "WebDataset shard ", urls_[i], " changed since the dataset was built (", want.size, " bytes, ETag ",
            want.etag && !want.etag->empty() ? *want.etag : "none", " -> ", got->size, " bytes, ETag ",
            got->etag.empty() ? "none" : got->etag, ")"));
      }
    }
    {
      std::lock_guard<std::mutex> lock(r.mu);
      auto it = r.entries.find(paths_[i]);
      if (it != r.entries.end() && it->second.owner == this) {
        if (got.ok()) {
          r.entries.erase(it);
          r.count.store(r.entries.size(), std::memory_order_release);
        } else {
          // Read as a sample's error: it says why the shard's file is not there.
          it->second.failed = stale ? got.status()
                                  : absl::Status(got.status().code(),
                                                 absl::StrCat("the shard could not be downloaded: ",
                                                              got.status().message()));
        }
      }
    }
    r.changed.notify_all();
    {
      std::lock_guard<std::mutex> lock(mu_);
      results_[i] = std::move(got);
      ++finished_;
    }
    done_.notify_all();
  }
}

std::vector<absl::StatusOr<CachedShard>> BackgroundFetch::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return finished_ == static_cast<int>(urls_.size()); });
  return results_;
}

int BackgroundFetch::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

}  // namespace ringloader
