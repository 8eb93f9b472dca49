#include "io/stream_cache.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "ringloader/ringloader.h"
#include "testing/jpeg_fixtures.h"
#include "testing/tar_builder.h"

namespace ringloader {
namespace {

using Clock = std::chrono::steady_clock;
using testing::MakeTempDir;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// True once `pid` no longer exists (killed and reaped: not even a zombie).
bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

// Processes of group `pgid` that still run (zombies of reparented grandchildren, which init
// reaps in its own time, do not count).
int LiveMembersOfGroup(pid_t pgid) {
  int live = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!stat || !std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    long ppid, pgrp;
    if (!(rest >> state >> ppid >> pgrp)) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') ++live;
  }
  return live;
}

struct Stream {
  std::string dir, file;
  std::vector<uint8_t> bytes;
  std::vector<StreamCache::Range> members;  // consecutive ranges with gaps between them
};

Stream MakeStream(size_t size = 3 << 20) {
  Stream s;
  s.dir = MakeTempDir();
  s.file = s.dir + "/stream.bin";
  std::mt19937 rng(3);
  s.bytes.resize(size);
  for (auto& b : s.bytes) b = static_cast<uint8_t>(rng());
  testing::WriteFile(s.file, s.bytes);
  uint64_t at = 100;
  while (true) {
    const int64_t len = 1 + static_cast<int64_t>(rng() % 200000);
    if (at + static_cast<uint64_t>(len) > size) break;
    s.members.push_back({at, len});
    at += static_cast<uint64_t>(len) + rng() % 3000;
  }
  return s;
}

void ExpectMember(const Stream& s, const StreamCache::Range& r, const ByteBuffer& got) {
  ASSERT_EQ(got.size(), static_cast<size_t>(r.length));
  EXPECT_TRUE(std::equal(got.data(), got.data() + got.size(), s.bytes.begin() + static_cast<long>(r.offset)))
      << "member at " << r.offset;
}

TEST(ChildProcessTest, ReadsStdoutAndReportsTheExitStatus) {
  auto child = ChildProcess::Spawn("printf hello; exit 4");
  ASSERT_TRUE(child.ok()) << child.status();
  uint8_t buf[16];
  std::string out;
  while (true) {
    absl::StatusOr<size_t> got = (*child)->Read(buf, sizeof(buf));
    ASSERT_TRUE(got.ok());
    if (*got == 0) break;
    out.append(reinterpret_cast<char*>(buf), *got);
  }
  EXPECT_EQ(out, "hello");
  EXPECT_EQ((*child)->Wait(), 4);
}

TEST(ChildProcessTest, DestroyingKillsTheWholePipelineAndReapsIt) {
  const auto start = Clock::now();
  pid_t pid;
  {
    auto child = ChildProcess::Spawn("sleep 30 | sleep 30");
    ASSERT_TRUE(child.ok());
    pid = (*child)->pid();
  }
  EXPECT_TRUE(Gone(pid)) << "killed and reaped, no zombie";
  // The rest of the pipeline was killed with it.
  while (LiveMembersOfGroup(pid) > 0 && SecondsSince(start) < 5.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(LiveMembersOfGroup(pid), 0);
  EXPECT_LT(SecondsSince(start), 5.0);
}

TEST(StreamCacheTest, InOrderAndShuffledWithinTheWantedSetNeverRestart) {
  Stream s = MakeStream();
  const std::string path = "pipe:cat " + s.file;
  StreamCache cache(size_t{1} << 30);
  // An order like the Python side's: roughly sequential with a bounded shuffle.
  std::vector<StreamCache::Range> order = s.members;
  std::mt19937 rng(9);
  for (size_t i = 0; i + 4 <= order.size(); i += 4) std::shuffle(order.begin() + i, order.begin() + i + 4, rng);
  cache.StartEpoch({{path, order}});
  ByteBuffer got;
  int64_t max_kept = 0;
  for (const auto& r : order) {
    ASSERT_TRUE(cache.Fetch(path, r.offset, r.length, &got, nullptr).ok());
    ExpectMember(s, r, got);
    max_kept = std::max(max_kept, cache.kept_bytes());
  }
  EXPECT_EQ(cache.restarts(), 0);
  EXPECT_EQ(cache.starts(), 1);
  EXPECT_EQ(cache.kept_bytes(), 0) << "served members are dropped";
  // The window (4 members of <= 200 KB) plus members begun in the last 256 KiB chunk read.
  EXPECT_LE(max_kept, 8 * 200000) << "memory bounded by the shuffle window";
  EXPECT_LE(cache.bytes_read(), static_cast<int64_t>(s.bytes.size()));
}

TEST(StreamCacheTest, RequestBehindTheStreamThatWasNotKeptRestarts) {
  Stream s = MakeStream(1 << 20);
  const std::string path = "pipe:cat " + s.file;
  StreamCache cache(size_t{1} << 30);
  cache.StartEpoch({});  // nothing declared: nothing is kept
  ByteBuffer got;
  const auto& last = s.members.back();
  const auto& first = s.members.front();
  ASSERT_TRUE(cache.Fetch(path, last.offset, last.length, &got, nullptr).ok());
  ExpectMember(s, last, got);
  ASSERT_TRUE(cache.Fetch(path, first.offset, first.length, &got, nullptr).ok());
  ExpectMember(s, first, got);
  EXPECT_EQ(cache.restarts(), 1);
  // A member wanted twice in the epoch is kept after its first request.
  cache.StartEpoch({{path, {first, first}}});
  ASSERT_TRUE(cache.Fetch(path, first.offset, first.length, &got, nullptr).ok());
  ASSERT_TRUE(cache.Fetch(path, last.offset, last.length, &got, nullptr).ok());
  ASSERT_TRUE(cache.Fetch(path, first.offset, first.length, &got, nullptr).ok());
  ExpectMember(s, first, got);
  EXPECT_EQ(cache.restarts(), 1) << "the second copy was kept";
}

TEST(StreamCacheTest, MembersFetchedAsideLeaveTheEpochsStreamAlone) {
  Stream s = MakeStream(1 << 20);
  const std::string path = "pipe:cat " + s.file;
  StreamCache cache(size_t{1} << 30);
  const std::vector<StreamCache::Range>& order = s.members;
  cache.StartEpoch({{path, order}});
  ByteBuffer got;
  const size_t half = order.size() / 2;
  for (size_t i = 0; i < half; ++i) ASSERT_TRUE(cache.Fetch(path, order[i].offset, order[i].length, &got, nullptr).ok());
  // A member behind the stream and one ahead of it (a substitute, a single sample): each read by
  // a private run of the command.
  for (const auto& r : {order.front(), order.back()}) {
    ASSERT_TRUE(cache.FetchAside(path, r.offset, r.length, &got, nullptr).ok());
    ExpectMember(s, r, got);
  }
  EXPECT_EQ(cache.starts(), 3);
  // The epoch goes on where it was: no restart, and the last member is still wanted and served.
  for (size_t i = half; i < order.size(); ++i) {
    ASSERT_TRUE(cache.Fetch(path, order[i].offset, order[i].length, &got, nullptr).ok());
    ExpectMember(s, order[i], got);
  }
  EXPECT_EQ(cache.restarts(), 0);
  EXPECT_EQ(cache.starts(), 3);
  // A failing command is a sample error here too.
  EXPECT_TRUE(absl::IsDataLoss(cache.FetchAside("pipe:false", 0, 10, &got, nullptr)));
}

TEST(StreamCacheTest, EndedOrFailedStreamsAreSampleErrors) {
  Stream s = MakeStream(1 << 20);
  StreamCache cache(size_t{1} << 30);
  ByteBuffer got;
  const std::string cut = "pipe:cat " + s.file + " | head -c 5000";
  absl::Status status = cache.Fetch(cut, 4000, 2000, &got, nullptr);
  EXPECT_TRUE(absl::IsDataLoss(status)) << status;
  EXPECT_EQ(status.message(), absl::StrCat(cut, ": stream ended at byte 5000 before member at offset 4000 (2000 bytes)"));
  ASSERT_TRUE(cache.Fetch(cut, 10, 100, &got, nullptr).ok()) << "a member before the cut restarts and reads";
  status = cache.Fetch("pipe:false", 0, 10, &got, nullptr);
  EXPECT_EQ(status.message(), "pipe:false exited with status 1 before member at offset 0");
  status = cache.Fetch("pipe:cat " + s.file, 0, -1, &got, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  StreamCache small(100);
  status = small.Fetch("pipe:cat " + s.file, 0, 1000, &got, nullptr);
  EXPECT_TRUE(absl::IsOutOfRange(status)) << status;
}

TEST(StreamCacheTest, CancelReturnsPromptlyFromASlowProducerAndResetReaps) {
  StreamCache cache(size_t{1} << 30);
  std::atomic<bool> cancel{false};
  absl::Status status;
  const auto start = Clock::now();
  std::thread reader([&] {
    ByteBuffer got;
    status = cache.Fetch("pipe:printf abc; sleep 30", 0, 100, &got, &cancel);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  cancel.store(true);
  reader.join();
  EXPECT_TRUE(absl::IsCancelled(status)) << status;
  EXPECT_LT(SecondsSince(start), 2.0);
  cache.Reset();
  EXPECT_LT(SecondsSince(start), 3.0) << "Reset kills the sleeping command instead of waiting";
  int wstatus;
  EXPECT_EQ(waitpid(-1, &wstatus, WNOHANG), -1) << "no child left to reap";
}

// A shard of image members written in every header style the reader accepts (ustar with a
// prefix, GNU long name, pax path, GNU base-256 size), each followed by its label member; the
// image sizes come from `sizes`. Returns the archive and the image members' ranges (its index).
std::pair<std::string, std::vector<StreamCache::Range>> TarShard(const std::vector<size_t>& sizes, uint32_t seed) {
  testing::TarBuilder tar;
  std::vector<StreamCache::Range> index;
  std::mt19937 rng(seed);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string data(sizes[i], '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const std::string key = absl::StrCat(i);
    testing::TarBuilder::Layout at;
    switch (i % 4) {
      case 0: at = tar.AddFile(key + ".jpg", data, '0', testing::TarBuilder::Magic::kUstar, "train"); break;
      case 1: at = tar.AddGnuLongName(std::string(120, 'l') + "/" + key + ".jpg", data); break;
      case 2: at = tar.AddPax(std::string(130, 'p') + "/" + key + ".jpg", data); break;
      default: at = tar.AddFile(key + ".jpg", data, '0', testing::TarBuilder::Magic::kGnu, "", true); break;
    }
    index.push_back({at.data, static_cast<int64_t>(at.size), /*tar_member=*/true});
    tar.AddFile(key + ".cls", std::to_string(i % 3));
  }
  tar.End();
  return {tar.bytes(), index};
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  testing::WriteFile(path, std::vector<uint8_t>(bytes.begin(), bytes.end()));
}

TEST(StreamCacheTest, TarMemberHeadersAreCheckedAsTheStreamPassesThem) {
  const std::string dir = MakeTempDir();
  const std::vector<size_t> sizes = {700, 1024, 33, 5000, 300000, 1, 90000, 511, 513};
  auto [archive, index] = TarShard(sizes, 1);
  WriteBytes(dir + "/s.tar", archive);
  // Short reads too (dd writes 100 bytes at a time): a header then spans reads.
  for (const std::string path : {"pipe:cat " + dir + "/s.tar", "pipe:dd if=" + dir + "/s.tar bs=100 status=none"}) {
    StreamCache cache(size_t{1} << 30);
    std::vector<StreamCache::Range> order = index;
    std::swap(order[1], order[5]);  // members passed on the way to another are kept, and checked
    cache.StartEpoch({{path, order}});
    ByteBuffer got;
    for (const auto& r : order) {
      absl::Status status = cache.Fetch(path, r.offset, r.length, &got, nullptr, /*tar_member=*/true);
      ASSERT_TRUE(status.ok()) << path << ": " << status;
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()), archive.substr(r.offset, r.length));
    }
    EXPECT_EQ(cache.restarts(), 0);
    ASSERT_TRUE(cache.FetchAside(path, index[3].offset, index[3].length, &got, nullptr, true).ok());
  }
}

TEST(StreamCacheTest, AShardRewrittenSinceItsIndexIsAStaleIndexNotASampleError) {
  const std::string dir = MakeTempDir();
  const std::string path = "pipe:cat " + dir + "/s.tar";
  std::vector<size_t> sizes = {700, 1024, 33, 5000, 3000, 1};
  auto [a, index] = TarShard(sizes, 1);
  // Shard B: the same names, the second image of another size, so its first member still matches.
  sizes[1] = 1100;
  auto [b, b_index] = TarShard(sizes, 2);
  ASSERT_EQ(b_index[0].offset, index[0].offset);
  WriteBytes(dir + "/s.tar", b);
  StreamCache cache(size_t{1} << 30);
  cache.StartEpoch({{path, index}});
  ByteBuffer got;
  // Member 0's own header matches, but the read that brings it passes member 1 (wanted later),
  // where B has another header: the index is wrong, so this request fails too.
  absl::Status status = cache.Fetch(path, index[0].offset, index[0].length, &got, nullptr, true);
  ASSERT_TRUE(IsStaleIndex(status)) << status;
  EXPECT_FALSE(IsSampleError(status));
  EXPECT_EQ(status.GetPayload(kStaleIndexPayload).value_or(absl::Cord()), path);
  EXPECT_NE(status.message().find(absl::StrCat(path, ": the shard's index is out of date: its member at offset ",
                                               index[1].offset, " (1024 bytes) is not where the index says")),
            std::string::npos)
      << status;
  EXPECT_NE(status.message().find("1100 bytes"), std::string::npos) << status;
  // Every later request of the stream fails alike, kept copies and private reads included.
  EXPECT_TRUE(IsStaleIndex(cache.Fetch(path, index[5].offset, index[5].length, &got, nullptr, true)));
  EXPECT_TRUE(IsStaleIndex(cache.Fetch(path, index[0].offset, index[0].length, &got, nullptr, true)));
  EXPECT_TRUE(IsStaleIndex(cache.FetchAside(path, index[0].offset, index[0].length, &got, nullptr, true)));
  // A new epoch reads afresh: a member whose header matches is read; a private read finds a
  // stale header itself.
  cache.StartEpoch({});
  ASSERT_TRUE(cache.Fetch(path, index[0].offset, index[0].length, &got, nullptr, true).ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(got.data()), got.size()), b.substr(index[0].offset, 700));
  EXPECT_TRUE(IsStaleIndex(cache.FetchAside(path, index[2].offset, index[2].length, &got, nullptr, true)));
  cache.StartEpoch({});
  status = cache.Fetch(path, index[4].offset, index[4].length, &got, nullptr, true);
  EXPECT_TRUE(IsStaleIndex(status)) << status;
  // Offsets that land in the middle of B's data: no header there.
  cache.StartEpoch({});
  status = cache.Fetch(path, index[0].offset + 100, 10, &got, nullptr, true);
  EXPECT_NE(status.message().find("are no tar header: bad header checksum"), std::string::npos) << status;
  cache.StartEpoch({});
  status = cache.Fetch(path, 100, 10, &got, nullptr, true);
  EXPECT_NE(status.message().find("the stream has no tar header before it"), std::string::npos) << status;
  // Ranges that are not tar members are not checked (any byte stream can be read by range).
  cache.StartEpoch({});
  EXPECT_TRUE(cache.Fetch(path, 100, 10, &got, nullptr).ok());
}

TEST(StreamCacheTest, MembersAppendedSinceTheIndexAreAStaleIndex) {
  const std::string dir = MakeTempDir();
  const std::vector<size_t> sizes = {700, 1024, 33, 5000, 3000, 1};
  auto [a, index] = TarShard(sizes, 1);
  // The same members, two appended: every indexed header is where the index says.
  std::vector<size_t> grown = sizes;
  grown.push_back(900);
  grown.push_back(20);
  auto [b, b_index] = TarShard(grown, 1);
  ASSERT_EQ(b.substr(0, index.back().offset + index.back().length),
            a.substr(0, index.back().offset + index.back().length));
  index.back().stream_end = a.size();  // the index's last member carries the stream's length
  const std::string path = "pipe:cat " + dir + "/s.tar";
  for (const bool appended : {false, true}) {
    WriteBytes(dir + "/s.tar", appended ? b : a);
    for (const std::string p : {path, "pipe:dd if=" + dir + "/s.tar bs=100 status=none"}) {
      StreamCache cache(size_t{1} << 30);
      std::vector<StreamCache::Range> order = index;
      std::swap(order[2], order[5]);  // the last member read ahead and kept: checked when served
      cache.StartEpoch({{p, order}});
      ByteBuffer got;
      absl::Status status;
      for (const auto& r : order) {
        status = cache.Fetch(p, r.offset, r.length, &got, nullptr, true);
        if (!status.ok()) break;
      }
      if (!appended) {
        EXPECT_TRUE(status.ok()) << p << ": " << status;
        EXPECT_EQ(cache.restarts(), 0);
        continue;
      }
      ASSERT_TRUE(IsStaleIndex(status)) << p << ": " << status;
      EXPECT_EQ(status.GetPayload(kStaleIndexPayload).value_or(absl::Cord()), p);
      EXPECT_NE(status.message().find(absl::StrCat("the stream goes on past byte ", a.size(),
                                                   ", where it ended when it was indexed (members were appended)")),
                std::string::npos)
          << status;
      // The stream stays stale for the rest of the epoch.
      EXPECT_TRUE(IsStaleIndex(cache.Fetch(p, index[0].offset, index[0].length, &got, nullptr, true)));
    }
  }
  // Cut after the last member's data (the end-of-archive blocks gone): it ends early.
  WriteBytes(dir + "/s.tar", a.substr(0, index.back().offset + 512));
  StreamCache cache(size_t{1} << 30);
  cache.StartEpoch({{path, {index.back()}}});
  ByteBuffer got;
  absl::Status status = cache.Fetch(path, index.back().offset, index.back().length, &got, nullptr, true);
  ASSERT_TRUE(IsStaleIndex(status)) << status;
  EXPECT_NE(status.message().find(absl::StrCat("ends at byte ", index.back().offset + 512, ", before byte ",
                                               a.size())),
            std::string::npos)
      << status;
}

}  // namespace
}  // namespace ringloader
