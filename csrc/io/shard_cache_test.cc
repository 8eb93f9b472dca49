// The shard cache's rules over local files (file:// URLs through the same libcurl path): an entry
// is taken only when complete, of the indexed size and of its recorded checksum, a second Ensure
// is served from the folder, one process at a time works on an entry (flock), least recently
// used entries go first (recorded on the meta, never on the entry's own file). HTTP(S), S3 and faults are
// tested from Python against real servers (tests/python/test_remote.py).

#include "io/shard_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "io/pending_downloads.h"
#include "io/range_reads.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

RemoteOptions FileOptions() {
  RemoteOptions options;
  options.protocols = "file";
  options.max_attempts = 2;
  options.backoff_initial_s = 0.01;
  return options;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

/// A source file of `size` bytes (a pattern of `seed`), as a file:// URL.
std::string Source(const std::string& dir, const std::string& name, size_t size, int seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>((i * 31 + seed) & 0xff);
  const std::string path = absl::StrCat(dir, "/", name);
  testing::WriteFile(path, bytes);
  return absl::StrCat("file://", path);
}

void SetMtime(const std::string& path, int64_t seconds) {
  struct timespec times[2] = {{seconds, 0}, {seconds, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
}

// Bytes of the complete entries in the cache folder `dir`: what Evict leaves of a cache with no
// limit, which removes nothing.
int64_t CachedBytes(const std::string& dir) { return ShardCache(dir, 0, {}).Evict({}).value(); }

TEST(ShardCacheTest, DownloadsOnceThenServesTheCompleteEntry) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir() + "/cache";
  const std::string a = Source(src, "train-000000.tar", 300000, 1);
  const std::string b = Source(src, "train-000001.tar", 5000, 2);
  ShardCache cache(dir, 0, FileOptions());
  auto first = cache.Ensure({a, b});
  ASSERT_EQ(first.size(), 2u);
  ASSERT_TRUE(first[0].ok()) << first[0].status();
  ASSERT_TRUE(first[1].ok()) << first[1].status();
  EXPECT_TRUE(first[0]->downloaded);
  EXPECT_EQ(first[0]->size, 300000);
  EXPECT_EQ(first[0]->path, cache.EntryPath(a));
  EXPECT_NE(cache.EntryPath(a), cache.EntryPath(b));
  EXPECT_EQ(ReadAll(first[0]->path), ReadAll(src + "/train-000000.tar"));
  EXPECT_EQ(ReadAll(first[1]->path), ReadAll(src + "/train-000001.tar"));
  EXPECT_FALSE(std::ifstream(first[0]->path + ".part").good());

  auto second = cache.Ensure({a, b});
  ASSERT_TRUE(second[0].ok());
  EXPECT_FALSE(second[0]->downloaded);
  EXPECT_EQ(second[0]->path, first[0]->path);
  EXPECT_EQ(CachedBytes(dir), 305000);
}

TEST(ShardCacheTest, AShardOfKnownSizeIsSplitIntoOnePiecePerConnection) {
  EXPECT_TRUE(DownloadPieces(-1, 8).empty());                      // size unknown
  EXPECT_TRUE(DownloadPieces(2 * kMinPieceBytes - 1, 8).empty());  // too small to split
  EXPECT_TRUE(DownloadPieces(64 * kMinPieceBytes, 1).empty());     // one connection
  const auto four = DownloadPieces(10 * kMinPieceBytes + 3, 4);
  ASSERT_EQ(four.size(), 4u);
  int64_t at = 0;
  for (const auto& [offset, length] : four) {
    EXPECT_EQ(offset, at);
    EXPECT_GE(length, kMinPieceBytes);
    at += length;
  }
  EXPECT_EQ(at, 10 * kMinPieceBytes + 3);
  EXPECT_EQ(DownloadPieces(3 * kMinPieceBytes, 8).size(), 3u);  // no piece under the minimum
}

TEST(ShardCacheTest, AShardOfKnownSizeLandsFromItsPiecesAndWholeWhenTheSizeIsWrong) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir() + "/cache";
  const size_t size = 3 * kMinPieceBytes + 12345;
  const std::string a = Source(src, "train-000000.tar", size, 3);
  const std::string b = Source(src, "train-000001.tar", size, 4);
  RemoteOptions options = FileOptions();
  options.max_connections = 4;
  ShardCache cache(dir, 0, options);
  auto got = cache.Ensure({a, b}, nullptr, nullptr, {static_cast<int64_t>(size), static_cast<int64_t>(size) + 7});
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_EQ(got[0]->attempts, 3);  // three pieces, one request each
  EXPECT_EQ(got[0]->size, static_cast<int64_t>(size));
  EXPECT_EQ(ReadAll(got[0]->path), ReadAll(src + "/train-000000.tar"));
  // Indexed 7 bytes longer: the last piece is past the end, so the shard comes whole, twice,
  // and is not kept: another size than indexed is another object (or a cut copy).
  ASSERT_FALSE(got[1].ok());
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(got[1].status().message().find(absl::StrCat("changed since the dataset was built (", size + 7,
                                                        " bytes indexed, ", size, " bytes downloaded")),
            std::string::npos)
      << got[1].status();
  EXPECT_NE(got[1].status().message().find(b), std::string::npos);
  EXPECT_FALSE(std::ifstream(cache.EntryPath(b)).good());
  EXPECT_FALSE(std::ifstream(cache.EntryPath(b) + ".meta").good());
  EXPECT_FALSE(std::ifstream(cache.EntryPath(b) + ".part").good());
  auto again = cache.Ensure({a}, nullptr, nullptr, {static_cast<int64_t>(size)});
  ASSERT_TRUE(again[0].ok());
  EXPECT_FALSE(again[0]->downloaded);
}

TEST(ShardCacheTest, APartialOrForeignEntryIsFetchedAgain) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string a = Source(src, "a.tar", 20000, 3);
  ShardCache cache(dir, 0, FileOptions());
  const std::string entry = cache.EntryPath(a);
  // A crash after the meta was written but with a short file, and a leftover .part.
  testing::WriteFile(entry, std::vector<uint8_t>(100, 7));
  testing::WriteText(entry + ".meta", absl::StrCat(a, "\n20000\n\n"));
  testing::WriteFile(entry + ".part", std::vector<uint8_t>(50, 9));
  auto got = cache.Ensure({a});
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_TRUE(got[0]->downloaded);
  EXPECT_EQ(ReadAll(entry), ReadAll(src + "/a.tar"));

  // An entry whose meta names another URL (a hash collision) is not this URL's.
  testing::WriteText(entry + ".meta", "file:///elsewhere.tar\n20000\n\n");
  got = cache.Ensure({a});
  ASSERT_TRUE(got[0].ok());
  EXPECT_TRUE(got[0]->downloaded);
}

TEST(ShardCacheTest, ACachedCopyOfAnotherSizeThanIndexedIsFetchedAgain) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string a = Source(src, "a.tar", 5000, 6);
  ShardCache cache(dir, 0, FileOptions());
  const std::string entry = cache.EntryPath(a);
  // What a server that sent half the object under a Content-Length of half left: a complete
  // entry of the cut size (with the checksum of the cut bytes).
  const std::string whole = ReadAll(src + "/a.tar");
  testing::WriteText(entry, whole.substr(0, 2500));
  testing::WriteText(entry + ".meta", absl::StrCat(a, "\n2500\n\"v1\"\n"));
  // Nothing says it is cut when the size is not known (the caller has no index of it).
  auto unknown = cache.Ensure({a});
  ASSERT_TRUE(unknown[0].ok()) << unknown[0].status();
  EXPECT_FALSE(unknown[0]->downloaded);
  EXPECT_FALSE(CacheEntryReady(entry, 5000));
  // Indexed at 5000 bytes: removed and fetched again.
  auto got = cache.Ensure({a}, nullptr, nullptr, {5000});
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_TRUE(got[0]->downloaded);
  EXPECT_EQ(got[0]->size, 5000);
  EXPECT_EQ(ReadAll(entry), whole);
  EXPECT_TRUE(CacheEntryReady(entry, 5000));
}

TEST(ShardCacheTest, AChangedByteInACachedEntryFailsItsChecksumAndIsFetchedAgain) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string a = Source(src, "a.tar", 70000, 7);
  ShardCache cache(dir, 0, FileOptions());
  const std::string entry = cache.EntryPath(a);
  ASSERT_TRUE(cache.Ensure({a})[0].ok());
  // The meta records the CRC-32 of the bytes downloaded.
  const absl::StatusOr<uint32_t> crc = FileCrc32(src + "/a.tar");
  ASSERT_TRUE(crc.ok()) << crc.status();
  EXPECT_NE(ReadAll(entry + ".meta").find(absl::StrFormat("\ncrc32 %08x\n", *crc)), std::string::npos)
      << ReadAll(entry + ".meta");
  EXPECT_TRUE(CacheEntryReady(entry, 70000));  // downloaded by this process: checked
  // One bit flipped in place, the size unchanged.
  const int fd = open(entry.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char byte = 0;
  ASSERT_EQ(pread(fd, &byte, 1, 40000), 1);
  byte ^= 0x10;
  ASSERT_EQ(pwrite(fd, &byte, 1, 40000), 1);
  close(fd);
  EXPECT_FALSE(CacheEntryReady(entry, 70000));  // not the file that was checked
  auto got = cache.Ensure({a});
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_TRUE(got[0]->downloaded);
  EXPECT_EQ(ReadAll(entry), ReadAll(src + "/a.tar"));
  EXPECT_TRUE(CacheEntryReady(entry, 70000));
  auto again = cache.Ensure({a});
  ASSERT_TRUE(again[0].ok());
  EXPECT_FALSE(again[0]->downloaded);
}

TEST(ShardCacheTest, AnEntryWithoutAChecksumIsAcceptedAndGetsOne) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string a = Source(src, "a.tar", 3000, 8);
  ShardCache cache(dir, 0, FileOptions());
  const std::string entry = cache.EntryPath(a);
  // An entry of an earlier version: a meta of three lines.
  testing::WriteText(entry, ReadAll(src + "/a.tar"));
  testing::WriteText(entry + ".meta", absl::StrCat(a, "\n3000\n\"v1\"\n"));
  auto got = cache.Ensure({a}, nullptr, nullptr, {3000});
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_FALSE(got[0]->downloaded);
  EXPECT_EQ(got[0]->etag, "\"v1\"");
  const absl::StatusOr<uint32_t> crc = FileCrc32(src + "/a.tar");
  ASSERT_TRUE(crc.ok());
  EXPECT_EQ(ReadAll(entry + ".meta"), absl::StrCat(a, "\n3000\n\"v1\"\n", absl::StrFormat("crc32 %08x\n", *crc)));
}

TEST(ShardCacheTest, HandingOutOrReadingAnEntryLeavesItsFileTimesAndMarksItsMeta) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string a = Source(src, "a.tar", 4000, 9);
  ShardCache cache(dir, 0, FileOptions());
  const std::string entry = cache.EntryPath(a);
  ASSERT_TRUE(cache.Ensure({a})[0].ok());
  SetMtime(entry + ".meta", 1000000);
  struct stat before, after, meta;
  ASSERT_EQ(stat(entry.c_str(), &before), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  // What staleness checks look at (inode, size, mtime, ctime) stays; recency goes on the meta.
  ASSERT_TRUE(cache.Ensure({a})[0].ok());
  ASSERT_EQ(stat((entry + ".meta").c_str(), &meta), 0);
  EXPECT_GT(meta.st_mtim.tv_sec, 1000000);
  SetMtime(entry + ".meta", 1000000);
  EXPECT_TRUE(CacheEntryReady(entry, 4000));
  ASSERT_EQ(stat((entry + ".meta").c_str(), &meta), 0);
  EXPECT_GT(meta.st_mtim.tv_sec, 1000000);
  SetMtime(entry + ".meta", 1000000);
  const int held = HoldCacheEntry(entry);
  ASSERT_GE(held, 0);
  close(held);
  ASSERT_EQ(stat((entry + ".meta").c_str(), &meta), 0);
  EXPECT_GT(meta.st_mtim.tv_sec, 1000000);
  ASSERT_EQ(stat(entry.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_EQ(after.st_ctim.tv_sec, before.st_ctim.tv_sec);
  EXPECT_EQ(after.st_ctim.tv_nsec, before.st_ctim.tv_nsec);
}

TEST(ShardCacheTest, AMissingObjectIsAnErrorNamingItsUrlAndLeavesNothing) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string url = absl::StrCat("file://", src, "/missing.tar");
  ShardCache cache(dir, 0, FileOptions());
  auto got = cache.Ensure({url});
  ASSERT_FALSE(got[0].ok());
  EXPECT_NE(got[0].status().message().find(url), std::string::npos) << got[0].status();
  EXPECT_FALSE(std::ifstream(cache.EntryPath(url)).good());
  EXPECT_FALSE(std::ifstream(cache.EntryPath(url) + ".part").good());
}

TEST(ShardCacheTest, EvictsLeastRecentlyUsedWithinTheLimitKeepingTheRequested) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  std::vector<std::string> urls;
  for (int i = 0; i < 4; ++i) urls.push_back(Source(src, absl::StrCat("s", i, ".tar"), 1000, i));
  ShardCache unlimited(dir, 0, FileOptions());
  for (const auto& u : urls) ASSERT_TRUE(unlimited.Ensure({u})[0].ok());
  // Used in the order 2, 0, 3, 1 (oldest first): recorded on the metas.
  const int64_t used[4] = {1000002, 1000004, 1000001, 1000003};
  for (int i = 0; i < 4; ++i) SetMtime(unlimited.EntryPath(urls[i]) + ".meta", used[i]);

  ShardCache cache(dir, 2500, FileOptions());
  // Entry 2 is the oldest but locked by another process: it stays, and 0 and 3 go instead.
  const int fd = open((cache.EntryPath(urls[2]) + ".lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  auto left = cache.Evict({cache.EntryPath(urls[1])});
  close(fd);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_EQ(*left, 2000);
  EXPECT_TRUE(std::ifstream(cache.EntryPath(urls[2])).good());
  EXPECT_FALSE(std::ifstream(cache.EntryPath(urls[0])).good());
  EXPECT_FALSE(std::ifstream(cache.EntryPath(urls[0]) + ".meta").good());
  EXPECT_TRUE(std::ifstream(cache.EntryPath(urls[1])).good());
  EXPECT_EQ(CachedBytes(dir), 2000);

  // A download past the limit evicts the least recently used one that was not asked for.
  auto got = cache.Ensure({urls[0]});
  ASSERT_TRUE(got[0].ok());
  EXPECT_TRUE(got[0]->downloaded);
  EXPECT_EQ(CachedBytes(dir), 2000);
  EXPECT_TRUE(std::ifstream(cache.EntryPath(urls[0])).good());
  EXPECT_FALSE(std::ifstream(cache.EntryPath(urls[2])).good());
}

TEST(ShardCacheTest, WaitsForTheProcessHoldingTheEntryAndTakesItsDownload) {
  const std::string src = testing::MakeTempDir(), dir = testing::MakeTempDir();
  const std::string a = Source(src, "a.tar", 4096, 5);
  ShardCache cache(dir, 0, FileOptions());
  const std::string entry = cache.EntryPath(a);
  // Another rank holds the lock while it downloads; its result is what this one gets.
  const int fd = open((entry + ".lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX), 0);
  std::thread other([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    testing::WriteFile(entry, std::vector<uint8_t>(4096, 42));
    testing::WriteText(entry + ".meta", absl::StrCat(a, "\n4096\n\"v1\"\n"));
    close(fd);
  });
  const auto start = std::chrono::steady_clock::now();
  auto got = cache.Ensure({a});
  other.join();
  ASSERT_TRUE(got[0].ok()) << got[0].status();
  EXPECT_FALSE(got[0]->downloaded);
  EXPECT_EQ(got[0]->etag, "\"v1\"");
  EXPECT_EQ(ReadAll(entry), std::string(4096, 42));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(100));
}

TEST(RemoteTest, S3UrlsArePathStyleOnTheEndpointAndBadUrlsAreRefused) {
  RemoteOptions options;
  options.s3.region = "eu-west-1";
  EXPECT_EQ(*HttpUrlOf("s3://bkt/a/train-0.tar", options),
            "https://s3.eu-west-1.amazonaws.com/bkt/a/train-0.tar");
  options.s3.endpoint = "http://127.0.0.1:9000/";
  EXPECT_EQ(*HttpUrlOf("s3://bkt/k.tar", options), "http://127.0.0.1:9000/bkt/k.tar");
  EXPECT_EQ(*HttpUrlOf("https://h/x.tar", options), "https://h/x.tar");
  EXPECT_FALSE(HttpUrlOf("s3://bucket-only", options).ok());
  EXPECT_FALSE(HttpUrlOf("s3://bkt/", options).ok());
  EXPECT_FALSE(HttpUrlOf("ftp://h/x.tar", options).ok());
}

TEST(RemoteTest, AFailedWriteToTheCacheDiskIsFinalNotRetried) {
  const std::string src = testing::MakeTempDir();
  const std::string url = Source(src, "a.tar", 70000, 6);
  RemoteOptions options = FileOptions();
  options.max_attempts = 4;
  // /dev/full: every write fails with ENOSPC, as a full cache disk would.
  std::vector<DownloadResult> got = DownloadAll({{url, "/dev/full"}}, options);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status.code(), absl::StatusCode::kFailedPrecondition) << got[0].status;
  EXPECT_NE(got[0].status.message().find("write(/dev/full)"), std::string::npos) << got[0].status;
  EXPECT_NE(got[0].status.message().find(url), std::string::npos);
  EXPECT_EQ(got[0].attempts, 1);
}

TEST(RemoteTest, BackoffDoublesUpToItsCapAndJittersBelowIt) {
  RemoteOptions options;
  options.backoff_initial_s = 0.5;
  options.backoff_max_s = 3.0;
  EXPECT_DOUBLE_EQ(BackoffSeconds(1, options, 0.999999), 0.5 * 0.999999);
  EXPECT_DOUBLE_EQ(BackoffSeconds(3, options, 0.5), 1.0);
  EXPECT_DOUBLE_EQ(BackoffSeconds(10, options, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(BackoffSeconds(2, options, 0.0), 0.0);
}

}  // namespace
}  // namespace ringloader

namespace ringloader {
namespace {

TEST(RangeReadsTest, NeighbouringRangesMergeWithinTheGapAndEmptyOnesDrop) {
  const std::vector<std::pair<int64_t, int64_t>> got =
      MergeRanges({{5000, 100}, {0, 512}, {600, 50}, {700, 0}, {5050, 10}}, 100);
  const std::vector<std::pair<int64_t, int64_t>> want = {{0, 650}, {5000, 100}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(MergeRanges({{0, 10}, {20, 10}}, 0).size(), 2u);
}

TEST(RangeReadsTest, ARedirectSendsReadsOfTheEntryToTheCopyUntilLifted) {
  EXPECT_EQ(RedirectedPath("/cache/a.tar"), "/cache/a.tar");
  RedirectShard("/cache/a.tar", "/cache/a.tar.ranges-1");
  EXPECT_EQ(RedirectedPath("/cache/a.tar"), "/cache/a.tar.ranges-1");
  EXPECT_EQ(RedirectedPath("/cache/b.tar"), "/cache/b.tar");
  RedirectShard("/cache/a.tar", "");
  EXPECT_EQ(RedirectedPath("/cache/a.tar"), "/cache/a.tar");
}

TEST(RangeReadsTest, ARangeOutsideTheObjectIsRefusedNamingTheUrlAndFailsItsEntry) {
  const std::string entry = "/nonexistent/cache/x.tar";
  BackgroundRanges fetch({RangedCopy{"http://127.0.0.1:9/x.tar", "/nonexistent/x", 100, "", {{90, 20}}, entry}},
                         RemoteOptions{});
  const std::vector<absl::Status> got = fetch.Wait();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(got[0].message().find("http://127.0.0.1:9/x.tar"), absl::string_view::npos);
  EXPECT_EQ(fetch.finished(), 1);
  // A reader of the entry gets that error instead of waiting.
  const absl::Status read = WaitForPendingDownload(entry, nullptr);
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(read.message().find("could not be downloaded"), absl::string_view::npos);
}

TEST(RangeReadsTest, ReadersOfACopysEntryWaitUntilItsRangesLandAndNotAfterTheFetchEnds) {
  const std::string dir = testing::MakeTempDir();  // removed at exit
  const std::string source = dir + "/ranged_source.tar", copy = dir + "/ranged_source.tar.ranges-1";
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7);
  {
    std::ofstream out(source, std::ios::binary);
    out << bytes;
  }
  RemoteOptions options;
  options.protocols = "file";
  const std::string entry = dir + "/cache-entry.tar";
  {
    BackgroundRanges fetch({RangedCopy{"file://" + source, copy, 100000, "", {{10, 5}, {50000, 1000}}, entry}},
                           options);
    ASSERT_TRUE(WaitForPendingDownload(entry, nullptr).ok());  // waits for both ranges
    EXPECT_EQ(fetch.finished(), 1);
    EXPECT_FALSE(IsPendingDownload(entry));
    ASSERT_TRUE(fetch.Wait()[0].ok());
    EXPECT_EQ(fetch.totals().requests, 2);
    EXPECT_EQ(fetch.totals().bytes, 1005);
    std::ifstream in(copy, std::ios::binary);
    std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_EQ(got.size(), 100000u);  // sparse, the object's size: members keep their offsets
    EXPECT_EQ(got.substr(10, 5), bytes.substr(10, 5));
    EXPECT_EQ(got.substr(50000, 1000), bytes.substr(50000, 1000));
    EXPECT_EQ(got[20], '\0');
  }
  EXPECT_TRUE(WaitForPendingDownload(entry, nullptr).ok());
}

TEST(RangeReadsTest, RangesWaitingTheirTurnHoldNoDescriptor) {
  const std::string dir = testing::MakeTempDir();  // removed at exit
  const std::string source = dir + "/many_ranges.tar", copy = dir + "/many_ranges.tar.ranges-1";
  std::string bytes(80 * 10, 'x');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 13);
  {
    std::ofstream out(source, std::ios::binary);
    out << bytes;
  }
  std::vector<std::pair<int64_t, int64_t>> ranges;
  // 80 requests, unmerged (a file:// transfer has no socket to wake the wait: a wave of
  // max_connections takes its full 100 ms poll, so few of them).
  for (int64_t i = 0; i < 80; ++i) ranges.emplace_back(i * 10, 5);
  RemoteOptions options;
  options.protocols = "file";
  struct rlimit was;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &was), 0);
  struct rlimit low = was;
  low.rlim_cur = 48;  // fewer descriptors than ranges
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<absl::Status> got;
  {
    BackgroundRanges fetch({RangedCopy{"file://" + source, copy, 800, "", ranges, ""}}, options);
    got = fetch.Wait();
    EXPECT_EQ(fetch.totals().requests, 80);
  }
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &was), 0);
  ASSERT_TRUE(got[0].ok()) << got[0];
  std::ifstream in(copy, std::ios::binary);
  std::string written((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(written.size(), 800u);
  EXPECT_EQ(written.substr(790, 5), bytes.substr(790, 5));
  EXPECT_EQ(written[795], '\0');
}

TEST(RangeReadsTest, ManySmallMembersFarApartOnAHighLatencyLinkDownloadTheShardWhole) {
  LinkEstimate link;
  link.latency_s = 0.2;      // a distant object store
  link.bytes_per_s = 50e6;
  // 400 members of 20 KB spread over a 64 MB shard: 50 waves of 8 requests cost 10 s of round
  // trips, against 1.5 s for the whole shard.
  const RangeReadChoice choice = ChooseRangeReads(64'000'000, 400 * 20'000, 400, 8, link);
  EXPECT_FALSE(choice.by_range);
  EXPECT_NEAR(choice.whole_s, 0.2 + 64e6 / 50e6, 1e-9);
  EXPECT_NEAR(choice.ranges_s, 50 * 0.2 + 8e6 / 50e6, 1e-9);
}

TEST(RangeReadsTest, AFewMembersOfALargeShardAreReadByRange) {
  LinkEstimate link;
  link.latency_s = 0.2;
  link.bytes_per_s = 50e6;
  const RangeReadChoice choice = ChooseRangeReads(1'000'000'000, 3 * 150'000, 3, 8, link);
  EXPECT_TRUE(choice.by_range);
  EXPECT_LT(choice.ranges_s, 0.3);
  EXPECT_GT(choice.whole_s, 20.0);
  // Half of it or more comes whole (it stays in the cache), even in one cheaper request.
  EXPECT_FALSE(ChooseRangeReads(1'000'000'000, 500'000'000, 1, 8, link).by_range);
  EXPECT_TRUE(ChooseRangeReads(1'000'000'000, 499'000'000, 1, 8, link).by_range);
}

TEST(RangeReadsTest, ThePriorReadsAQuarterOfATypicalShardByRangeAndMostOfItWhole) {
  const LinkEstimate prior;  // 50 ms, 100 MB/s
  // A 256 MB shard of 100 KB members: a quarter of them in 640 runs (80 waves: 4 s + 0.64 s)
  // against 2.6 s whole; 64 runs (8 waves) cost 1.04 s.
  EXPECT_FALSE(ChooseRangeReads(256'000'000, 64'000'000, 640, 8, prior).by_range);
  EXPECT_TRUE(ChooseRangeReads(256'000'000, 64'000'000, 64, 8, prior).by_range);
}

TEST(RangeReadsTest, TheLinkEstimateStartsAtThePriorAndFollowsWhatWasMeasured) {
  RemoteOptions options;
  const std::string url = "http://link-estimate.test:81/a.tar";
  LinkEstimate e = MeasuredLink(url, options);
  EXPECT_EQ(e.latency_samples, 0);
  EXPECT_DOUBLE_EQ(e.latency_s, LinkEstimate::kPriorLatencyS);
  EXPECT_DOUBLE_EQ(e.bytes_per_s, LinkEstimate::kPriorBytesPerS);
  EXPECT_EQ(e.host, "http://link-estimate.test:81");
  NoteLinkSample("http://link-estimate.test:81", 0.4, 1 << 20, 0.5);  // the first replaces the prior
  e = MeasuredLink(url, options);
  EXPECT_DOUBLE_EQ(e.latency_s, 0.4);
  EXPECT_DOUBLE_EQ(e.bytes_per_s, (1 << 20) / 0.5);
  NoteLinkSample("http://link-estimate.test:81", 0.0, 100, 0.001);  // too short a body to time
  e = MeasuredLink(url, options);
  EXPECT_DOUBLE_EQ(e.latency_s, 0.3);  // a quarter of the way towards 0
  EXPECT_DOUBLE_EQ(e.bytes_per_s, (1 << 20) / 0.5);
  EXPECT_EQ(e.latency_samples, 2);
  EXPECT_EQ(e.rate_samples, 1);
  EXPECT_EQ(LastMeasuredLink().host, "http://link-estimate.test:81");
  // Another host still has the prior.
  EXPECT_EQ(MeasuredLink("http://other.test/a.tar", options).latency_samples, 0);
}

}  // namespace
}  // namespace ringloader
