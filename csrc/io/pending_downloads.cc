#include "io/pending_downloads.h"

#include <pthread.h>
#include <sys/stat.h>
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

/// The cache entries that some BackgroundFetch has not landed yet; one that landed is removed
/// (kept, marked landed, by a bounded fetch).
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
    int waiters = 0;  // readers waiting for it now
    // A bounded fetch keeps an entry that landed (see RefetchIfEvicted), and whether a reader
    // has come for it since (until then the cache keeps it).
    bool landed = false;
    bool opened = false;
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
// An idle bounded fetch trims the cache every this many polls; the workers waiting for room
// look (list the folder) once per interval between them.
constexpr int kTrimEvery = 10;
constexpr auto kRoomLookInterval = std::chrono::milliseconds(100);

}  // namespace

absl::Status WaitForPendingDownload(const std::string& path, const std::atomic<bool>* cancel) {
  Registry& r = TheRegistry();
  if (r.count.load(std::memory_order_acquire) == 0) return absl::OkStatus();
  std::unique_lock<std::mutex> lock(r.mu);
  while (true) {
    auto it = r.entries.find(path);
    if (it == r.entries.end() || it->second.pid != getpid()) return absl::OkStatus();
    if (it->second.landed) return absl::OkStatus();
    if (it->second.failed) return *it->second.failed;
    if (cancel != nullptr && cancel->load(std::memory_order_acquire)) {
      return absl::CancelledError(absl::StrCat("open ", path, ": cancelled while it downloads"));
    }
    // Counted while waiting: a bounded fetch takes this shard first, past the cache's limit.
    const void* owner = it->second.owner;
    ++it->second.waiters;
    r.changed.wait_for(lock, kCancelPoll);
    it = r.entries.find(path);
    if (it != r.entries.end() && it->second.owner == owner && it->second.waiters > 0) {
      --it->second.waiters;
    }
  }
}

bool IsPendingDownload(const std::string& path) {
  Registry& r = TheRegistry();
  if (r.count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(path);
  return it != r.entries.end() && it->second.pid == getpid() && !it->second.failed &&
         !it->second.landed;
}

void NoteShardOpened(const std::string& path) {
  Registry& r = TheRegistry();
  if (r.count.load(std::memory_order_acquire) == 0) return;
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(path);
  if (it != r.entries.end() && it->second.pid == getpid() && it->second.landed) it->second.opened = true;
}

bool RefetchIfEvicted(const std::string& path) {
  Registry& r = TheRegistry();
  if (r.count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.entries.find(path);
  if (it == r.entries.end() || it->second.pid != getpid()) return false;
  // Another reader of the shard found it gone first and asked for it (it is downloading), or
  // it has landed again since this reader's open failed: either way, this reader tries again
  // (it waits for that download, then opens it).
  if (!it->second.landed) return true;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) return true;
  it->second.landed = it->second.opened = false;
  r.changed.notify_all();
  return true;
}

void RegisterPendingDownloads(const void* owner, const std::vector<std::string>& paths) {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const std::string& path : paths) r.entries[path] = Registry::Entry{owner, std::nullopt, getpid()};
  r.count.store(r.entries.size(), std::memory_order_release);
}

void FinishPendingDownload(const void* owner, const std::string& path, absl::Status status) {
  Registry& r = TheRegistry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.entries.find(path);
    if (it == r.entries.end() || it->second.owner != owner) return;
    if (status.ok()) {
      r.entries.erase(it);
      r.count.store(r.entries.size(), std::memory_order_release);
    } else {
      it->second.failed = std::move(status);
    }
  }
  r.changed.notify_all();
}

void UnregisterPendingDownloads(const void* owner, const std::vector<std::string>& paths) {
  Registry& r = TheRegistry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    for (const std::string& path : paths) {
      auto it = r.entries.find(path);
      if (it != r.entries.end() && it->second.owner == owner) r.entries.erase(it);
    }
    r.count.store(r.entries.size(), std::memory_order_release);
  }
  r.changed.notify_all();
}

BackgroundFetch::BackgroundFetch(std::vector<std::string> urls, std::vector<ExpectedCopy> expected,
                                 std::string cache_dir, int64_t limit_bytes, RemoteOptions options)
    : urls_(std::move(urls)),
      expected_(std::move(expected)),
      max_connections_(std::max(1, options.max_connections)),
      cache_(std::move(cache_dir), limit_bytes, std::move(options)),
      bounded_(limit_bytes > 0),
      results_(urls_.size(), absl::UnknownError("not fetched")),
      state_(urls_.size(), State::kQueued),
      counted_(urls_.size(), false) {
  for (const std::string& url : urls_) paths_.push_back(cache_.EntryPath(url));
  RegisterPendingDownloads(this, paths_);
  const int workers = std::min<int>(max_connections_, static_cast<int>(urls_.size()));
  for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { Run(w); });
}

BackgroundFetch::~BackgroundFetch() {
  Cancel();
  for (std::thread& t : threads_) t.join();
  // Failed entries of this fetch stop being reported once it is gone (a later epoch retries).
  UnregisterPendingDownloads(this, paths_);
}

std::vector<int> BackgroundFetch::WaitedFor() const {
  std::vector<int> waited;
  {
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (size_t i = 0; i < paths_.size(); ++i) {
      auto it = r.entries.find(paths_[i]);
      if (it != r.entries.end() && it->second.owner == this && it->second.waiters > 0 &&
          !it->second.landed && !it->second.failed) {
        waited.push_back(static_cast<int>(i));
      }
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  waited.erase(std::remove_if(waited.begin(), waited.end(),
                              [this](int i) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                const State st = state_[static_cast<size_t>(i)];
                                return st == State::kTaken || st == State::kInFlight;
                              }),
               waited.end());
  return waited;
}

std::set<std::string> BackgroundFetch::Kept() const {
  // The shards of this fetch that no reader has opened since it registered them (the epoch
  // reads them later; those in the cache when it started among them), in the epoch's order, as
  // many as fit the limit: the rest may go, and come again if a reader comes for them.
  std::set<std::string> keep;
  int64_t budget = cache_.limit_bytes();
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (size_t i = 0; i < paths_.size(); ++i) {
    auto it = r.entries.find(paths_[i]);
    if (it == r.entries.end() || it->second.owner != this || it->second.opened) continue;
    const int64_t size = expected_.empty() ? 0 : std::max<int64_t>(0, expected_[i].size);
    if (size > budget) break;
    budget -= size;
    keep.insert(paths_[i]);
  }
  return keep;
}

int BackgroundFetch::Take(int64_t* ticket) {
  // Only a bounded fetch is ever behind its readers by more than a shard or two per connection.
  const std::vector<int> waited = bounded_ ? WaitedFor() : std::vector<int>{};
  const State taken = bounded_ ? State::kTaken : State::kInFlight;
  std::lock_guard<std::mutex> lock(mu_);
  for (int i : waited) {
    if (state_[static_cast<size_t>(i)] == State::kQueued || state_[static_cast<size_t>(i)] == State::kDone) {
      state_[static_cast<size_t>(i)] = taken;
      *ticket = DrawDownloadTicket();  // drawn here, under mu_: tickets in the order taken
      return i;
    }
  }
  while (next_ < urls_.size() && state_[next_] != State::kQueued) ++next_;
  if (next_ == urls_.size()) return -1;
  state_[next_] = taken;
  *ticket = DrawDownloadTicket();
  return static_cast<int>(next_);
}

bool BackgroundFetch::WaitForRoom(int* i) {
  Registry& r = TheRegistry();
  auto size_of = [this](size_t j) {
    return expected_.empty() ? int64_t{0} : std::max<int64_t>(0, expected_[j].size);
  };
  while (!cancel_.load(std::memory_order_acquire)) {
    bool go = false;
    // One look at a time (two workers must not count the same room), and one every
    // kRoomLookInterval among all the workers (each lists the folder).
    std::unique_lock<std::mutex> deciding(room_mu_);
    if (std::chrono::steady_clock::now() >= next_look_) {
      next_look_ = std::chrono::steady_clock::now() + kRoomLookInterval;
      int64_t in_flight = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (size_t j = 0; j < urls_.size(); ++j) {
          if (state_[j] == State::kInFlight) in_flight += size_of(j);
        }
      }
      std::set<std::string> keep = Kept();
      keep.insert(paths_[static_cast<size_t>(*i)]);
      const int64_t room = cache_.limit_bytes() - in_flight - size_of(static_cast<size_t>(*i));
      absl::StatusOr<int64_t> left = cache_.Evict(keep, std::max<int64_t>(0, room));
      // Room; or a folder that cannot be listed (the download's own error will say more); or
      // nothing else there (a shard larger than the whole limit still comes, alone).
      go = !left.ok() || *left <= room || *left + in_flight == 0;
    }
    if (!go) {
      // Else only a shard a reader waits for passes the limit.
      std::lock_guard<std::mutex> lock(r.mu);
      auto it = r.entries.find(paths_[static_cast<size_t>(*i)]);
      go = it != r.entries.end() && it->second.waiters > 0;
    }
    if (go) {
      std::lock_guard<std::mutex> lock(mu_);
      state_[static_cast<size_t>(*i)] = State::kInFlight;
      return true;
    }
    deciding.unlock();
    // A reader waits for another shard: that one comes first (past the limit if need be).
    const std::vector<int> waited = WaitedFor();
    if (!waited.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_[static_cast<size_t>(waited.front())] == State::kQueued ||
          state_[static_cast<size_t>(waited.front())] == State::kDone) {
        state_[static_cast<size_t>(*i)] = State::kQueued;
        next_ = std::min(next_, static_cast<size_t>(*i));
        *i = waited.front();
        state_[static_cast<size_t>(*i)] = State::kTaken;
        continue;
      }
    }
    std::this_thread::sleep_for(kCancelPoll);
  }
  return false;
}

void BackgroundFetch::Run(int worker) {
  Registry& r = TheRegistry();
  int idle = 0;
  while (true) {
    int64_t ticket = -1;
    int taken = Take(&ticket);
    if (taken < 0) {
      // A bounded fetch stays until it is closed: a shard evicted after its readers closed it
      // may be wanted again (RefetchIfEvicted). Meanwhile it trims the folder back to the limit
      // once readers close the shards that the downloads they waited for pushed past it.
      if (!bounded_ || cancel_.load(std::memory_order_acquire)) return;
      std::this_thread::sleep_for(kCancelPoll);
      if (worker == 0 && ++idle % kTrimEvery == 0) (void)cache_.Evict(Kept());
      continue;
    }
    bool go = !cancel_.load(std::memory_order_acquire);
    struct stat st;
    if (go && bounded_ && stat(paths_[static_cast<size_t>(taken)].c_str(), &st) == 0) {
      // In the cache already (Ensure checks it is whole): it needs no room.
      std::lock_guard<std::mutex> lock(mu_);
      state_[static_cast<size_t>(taken)] = State::kInFlight;
    } else if (go && bounded_) {
      // Not holding a ticket while it waits: the room may come from shards later tickets fetch.
      ReleaseDownloadTicket(ticket);
      go = WaitForRoom(&taken);
      ticket = DrawDownloadTicket();
    }
    const size_t i = static_cast<size_t>(taken);
    absl::StatusOr<CachedShard> got = absl::CancelledError(absl::StrCat("fetch ", urls_[i], ": cancelled"));
    // One shard per call, so that each is handed to the readers the moment it lands.
    std::function<std::set<std::string>()> keep;
    if (bounded_) keep = [this] { return Kept(); };
    // In pieces when its size is known (shard_cache.h: DownloadPieces).
    const int64_t size = expected_.empty() ? -1 : expected_[i].size;
    if (go) got = std::move(cache_.Ensure({urls_[i]}, &cancel_, keep, {size}, ticket)[0]);
    ReleaseDownloadTicket(ticket);  // when nothing was downloaded (in the cache, cancelled)
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
        if (got.ok() && bounded_) {
          it->second.landed = true;  // kept: see RefetchIfEvicted
          it->second.opened = false;
        } else if (got.ok()) {
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
      state_[i] = State::kDone;
      if (!counted_[i]) ++finished_;
      counted_[i] = true;
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
