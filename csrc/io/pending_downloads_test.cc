// BackgroundFetch and the readers' wait for a shard it has not landed yet, over file:// URLs;
// another process's download is stood in for by holding the entry's lock.
#include "io/pending_downloads.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/reader.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

using Clock = std::chrono::steady_clock;

RemoteOptions FileOptions() {
  RemoteOptions options;
  options.protocols = "file";
  options.max_attempts = 2;
  options.backoff_initial_s = 0.01;
  options.max_connections = 2;
  return options;
}

std::string Source(const std::string& dir, const std::string& name, size_t size, int seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>((i * 7 + seed) & 0xff);
  testing::WriteFile(absl::StrCat(dir, "/", name), bytes);
  return absl::StrCat("file://", dir, "/", name);
}

/// Holds `entry`'s lock (as another process downloading it would) until destroyed.
class HeldEntry {
 public:
  explicit HeldEntry(const std::string& entry) : fd_(open((entry + ".lock").c_str(), O_RDWR | O_CREAT, 0644)) {
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(flock(fd_, LOCK_EX), 0);
  }
  ~HeldEntry() { Release(); }
  void Release() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

/// Reads `length` bytes at `offset` of `path` as the loader's readers do.
absl::Status ReadRange(const std::string& path, const std::atomic<bool>* cancel, std::string* out) {
  FileFetcher fetcher(MakePreadReader(1), 1 << 20);
  fetcher.set_cancel(cancel);
  ByteBuffer buffer;
  fetcher.Start(path, &buffer, 0, 10, 100);
  if (absl::Status s = fetcher.Flush(); !s.ok()) return s;
  std::vector<FetchedFile> done;
  while (done.empty()) {
    if (absl::Status s = fetcher.Poll(&done, true); !s.ok()) return s;
  }
  out->assign(reinterpret_cast<const char*>(buffer.data()), buffer.size());
  return done[0].status;
}

// Bytes of the complete entries in the cache folder `dir`: what Evict leaves of a cache with no
// limit, which removes nothing.
int64_t CachedBytes(const std::string& dir) { return ShardCache(dir, 0, {}).Evict({}).value(); }

TEST(PendingDownloadsTest, AReadWaitsForItsShardToLandAndGetsItsBytes) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string a = Source(src, "a.tar", 5000, 1), b = Source(src, "b.tar", 7000, 2);
  const std::string entry_b = ShardCache(dir, 0, {}).EntryPath(b);
  HeldEntry held(entry_b);
  BackgroundFetch fetch({a, b}, {}, dir, 0, FileOptions());
  std::string bytes;
  // The first shard lands while the second is held.
  ASSERT_TRUE(ReadRange(ShardCache(dir, 0, {}).EntryPath(a), nullptr, &bytes).ok());
  EXPECT_EQ(bytes.size(), 100u);
  EXPECT_TRUE(IsPendingDownload(entry_b));
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    held.Release();
  });
  const auto start = Clock::now();
  absl::Status status = ReadRange(entry_b, nullptr, &bytes);
  release.join();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(80));  // it waited for the landing
  std::ifstream in(src + "/b.tar", std::ios::binary);
  std::string want(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(bytes, want.substr(10, 100));
  auto results = fetch.Wait();
  ASSERT_TRUE(results[0].ok() && results[1].ok());
  EXPECT_FALSE(IsPendingDownload(entry_b));
}

TEST(PendingDownloadsTest, AFailedDownloadIsTheReadsErrorNamingTheUrl) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string url = absl::StrCat("file://", src, "/missing.tar");
  BackgroundFetch fetch({url}, {}, dir, 0, FileOptions());
  std::string bytes;
  absl::Status status = ReadRange(ShardCache(dir, 0, {}).EntryPath(url), nullptr, &bytes);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("could not be downloaded"), std::string::npos) << status;
  EXPECT_NE(status.message().find(url), std::string::npos) << status;
}

TEST(PendingDownloadsTest, AnotherCopyThanTheOneIndexedFailsAsStale) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string url = Source(src, "a.tar", 5000, 3);
  BackgroundFetch fetch({url}, {ExpectedCopy{4000, std::nullopt}}, dir, 0, FileOptions());
  auto results = fetch.Wait();
  ASSERT_FALSE(results[0].ok());
  EXPECT_NE(results[0].status().message().find("changed since the dataset was built (4000 bytes"),
            std::string::npos)
      << results[0].status();
}

TEST(PendingDownloadsTest, CancellingTheReaderOrDestroyingTheFetchDoesNotWaitForTheShard) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string url = Source(src, "a.tar", 5000, 4);
  const std::string entry = ShardCache(dir, 0, {}).EntryPath(url);
  HeldEntry held(entry);  // never released while the fetch lives
  auto fetch = std::make_unique<BackgroundFetch>(std::vector<std::string>{url}, std::vector<ExpectedCopy>{}, dir, 0,
                                                 FileOptions());
  std::atomic<bool> cancel{false};
  std::thread stop([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancel.store(true);
  });
  auto start = Clock::now();
  std::string bytes;
  absl::Status status = ReadRange(entry, &cancel, &bytes);
  stop.join();
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  start = Clock::now();
  fetch.reset();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_FALSE(IsPendingDownload(entry));  // forgotten with its fetch: a later read opens the file
}

TEST(PendingDownloadsTest, ABoundedFetchWaitsForRoomServesAWaitingReaderFirstAndRefetches) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  std::vector<std::string> urls, entries;
  for (int i = 0; i < 4; ++i) {
    urls.push_back(Source(src, absl::StrCat("s", i, ".tar"), 5000, 10 + i));
    entries.push_back(ShardCache(dir, 0, {}).EntryPath(urls.back()));
  }
  auto exists = [](const std::string& path) { return access(path.c_str(), F_OK) == 0; };
  RemoteOptions options = FileOptions();
  options.max_connections = 1;
  // Room for one shard and a half: the first lands, the second waits for the first's readers.
  BackgroundFetch fetch(urls, std::vector<ExpectedCopy>(4, ExpectedCopy{5000, std::nullopt}), dir, 8000,
                        options);
  const auto start = Clock::now();
  while (!exists(entries[0]) && Clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_TRUE(exists(entries[0]));
  EXPECT_FALSE(exists(entries[1]));
  EXPECT_TRUE(IsPendingDownload(entries[1]));
  // A reader waiting for the last shard has it fetched first, past the limit.
  std::string bytes;
  ASSERT_TRUE(ReadRange(entries[3], nullptr, &bytes).ok());
  EXPECT_TRUE(exists(entries[0]));  // not opened yet: kept
  EXPECT_FALSE(exists(entries[1]));
  // Each shard read once (its reader closes it): the others come and the cache is trimmed.
  for (int i : {0, 1, 2}) ASSERT_TRUE(ReadRange(entries[static_cast<size_t>(i)], nullptr, &bytes).ok()) << i;
  auto results = fetch.Wait();
  for (const auto& r : results) EXPECT_TRUE(r.ok()) << r.status();
  // The idle fetch trims the folder back to the limit...
  const auto trim_start = Clock::now();
  while (CachedBytes(dir) > 8000 && Clock::now() - trim_start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_LE(CachedBytes(dir), 8000);
  EXPECT_FALSE(exists(entries[0]));  // least recently used
  // ...and a shard it removed is fetched again for a reader that comes back to it.
  ASSERT_TRUE(ReadRange(entries[0], nullptr, &bytes).ok());
  std::ifstream in(src + "/s0.tar", std::ios::binary);
  std::string want(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(bytes, want.substr(10, 100));
}

TEST(PendingDownloadsTest, TwoReadersThatFoundOneShardEvictedBothTryAgainAndGetItsBytes) {
  // Two readers of one shard both find it gone (both opens failed before either asked for it
  // again): the first registers the refetch, the second must wait for that one, not fail; and
  // a reader that asks once it has landed again opens it again. (Before: the second reader's
  // RefetchIfEvicted said no, and its samples failed with ENOENT on the cached path.)
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  std::vector<std::string> urls, entries;
  for (int i = 0; i < 2; ++i) {
    urls.push_back(Source(src, absl::StrCat("t", i, ".tar"), 5000, 30 + i));
    entries.push_back(ShardCache(dir, 0, {}).EntryPath(urls.back()));
  }
  BackgroundFetch fetch(urls, std::vector<ExpectedCopy>(2, ExpectedCopy{5000, std::nullopt}), dir, 6000,
                        FileOptions());
  std::string bytes;
  for (const std::string& entry : entries) ASSERT_TRUE(ReadRange(entry, nullptr, &bytes).ok());
  for (const auto& r : fetch.Wait()) ASSERT_TRUE(r.ok()) << r.status();
  // The idle fetch trims the folder: one shard goes. Usually the first, but both were used
  // within one tick of the file system's coarse clock on a fast machine, and a tie in recency
  // may go either way; the refetch is the same for either.
  auto gone = [&]() -> int {
    for (int i = 0; i < 2; ++i) {
      if (access(entries[static_cast<size_t>(i)].c_str(), F_OK) != 0) return i;
    }
    return -1;
  };
  const auto start = Clock::now();
  while (gone() < 0 && Clock::now() - start < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const int evicted = gone();
  ASSERT_GE(evicted, 0);
  const std::string& entry = entries[static_cast<size_t>(evicted)];
  EXPECT_TRUE(RefetchIfEvicted(entry));  // reader A
  EXPECT_TRUE(RefetchIfEvicted(entry));  // reader B: A's refetch is under way
  ASSERT_TRUE(WaitForPendingDownload(entry, nullptr).ok());
  EXPECT_EQ(access(entry.c_str(), F_OK), 0);
  EXPECT_TRUE(RefetchIfEvicted(entry));  // reader C, late: it is there again, open it again
  ASSERT_TRUE(ReadRange(entry, nullptr, &bytes).ok());
  std::ifstream in(absl::StrCat(src, "/t", evicted, ".tar"), std::ios::binary);
  std::string want(std::istreambuf_iterator<char>(in), {});
  EXPECT_EQ(bytes, want.substr(10, 100));
  EXPECT_FALSE(RefetchIfEvicted(src + "/t1.tar"));  // not an entry of a fetch: the error stands
}

TEST(PendingDownloadsTest, AReaderHoldingACachedShardKeepsItFromEviction) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string a = Source(src, "a.tar", 5000, 20), b = Source(src, "b.tar", 5000, 21);
  ShardCache cache(dir, 6000, FileOptions());
  ASSERT_TRUE(cache.Ensure({a})[0].ok());
  FileFetcher fetcher(MakePreadReader(1), 1 << 20);
  ByteBuffer buffer;
  fetcher.Start(cache.EntryPath(a), &buffer, 0, 10, 100);  // opened, and kept open
  ASSERT_TRUE(fetcher.Flush().ok());
  std::vector<FetchedFile> done;
  while (done.empty()) ASSERT_TRUE(fetcher.Poll(&done, true).ok());
  ASSERT_TRUE(done[0].status.ok());
  ASSERT_TRUE(cache.Ensure({b})[0].ok());  // over the limit: a would go, but it is open
  EXPECT_EQ(access(cache.EntryPath(a).c_str(), F_OK), 0);
  EXPECT_EQ(CachedBytes(dir), 10000);
}

TEST(PendingDownloadsTest, AForkedChildDoesNotWaitForItsParentsDownloads) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string url = Source(src, "a.tar", 5000, 5);
  const std::string entry = ShardCache(dir, 0, {}).EntryPath(url);
  HeldEntry held(entry);
  BackgroundFetch fetch({url}, {}, dir, 0, FileOptions());
  ASSERT_TRUE(IsPendingDownload(entry));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // No thread here would ever land it: the wait must not start.
    _exit(!IsPendingDownload(entry) && WaitForPendingDownload(entry, nullptr).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(IsPendingDownload(entry));  // still this process's to wait for
}

}  // namespace
}  // namespace ringloader
