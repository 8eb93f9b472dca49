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
#include "testing/jpeg_fixtures.h"

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

}  // namespace
}  // namespace ringloader
