// The process's table of downloads in flight (remote.h: TransfersInFlight), fed by DownloadAll:
// a download whose source is a FIFO (file://) moves only when the test writes to it, so the test
// sees it in flight with the bytes written so far, its rate and its age, and gone once its result
// is final.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/remote.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

using Clock = std::chrono::steady_clock;

RemoteOptions FileOptions() {
  RemoteOptions options;
  options.protocols = "file";
  options.max_attempts = 1;
  options.min_rate_bytes_per_s = 0;
  return options;
}

/// Polls the table until `url` has `bytes` bytes (and, when asked, a measured rate), 10 s at most.
bool WaitFor(const std::string& url, int64_t bytes, bool rate, TransferInFlight* out) {
  const Clock::time_point until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    for (const TransferInFlight& t : TransfersInFlight()) {
      if (t.url == url && t.bytes == bytes && (!rate || t.bytes_per_s >= 0)) {
        *out = t;
        return true;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool InFlight(const std::string& url) {
  for (const TransferInFlight& t : TransfersInFlight()) {
    if (t.url == url) return true;
  }
  return false;
}

TEST(TransfersInFlight, AStalledDownloadIsNamedWithItsBytesRateAndAgeUntilItEnds) {
  const std::string dir = testing::MakeTempDir();
  const std::string fifo = dir + "/slow.tar";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const std::string url = absl::StrCat("file://", fifo);
  std::vector<DownloadResult> results;
  std::thread download([&] {
    results = DownloadAll({DownloadJob{url, dir + "/copy"}}, FileOptions());
  });
  const int fd = open(fifo.c_str(), O_WRONLY);  // waits for the download to open it
  ASSERT_GE(fd, 0);
  // Past the table's 100 ms between updates of one transfer: the first chunk is noted at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string chunk(1000, 'x');
  ASSERT_EQ(write(fd, chunk.data(), chunk.size()), 1000);
  TransferInFlight seen;
  ASSERT_TRUE(WaitFor(url, 1000, /*rate=*/false, &seen));
  // (What it expects is what libcurl states for the file: 0 bytes, a FIFO's size.)
  EXPECT_EQ(seen.transfers, 1);
  EXPECT_EQ(seen.attempts, 1);
  // Stalled for over a second, then 1000 bytes more: the rate is measured over that time.
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  ASSERT_EQ(write(fd, chunk.data(), chunk.size()), 1000);
  ASSERT_TRUE(WaitFor(url, 2000, /*rate=*/true, &seen));
  // 2000 bytes since the request, 1.4 s and a little more before.
  EXPECT_GT(seen.bytes_per_s, 500.0);
  EXPECT_LT(seen.bytes_per_s, 1500.0);
  EXPECT_GE(seen.seconds, 1.4);
  const std::string line = DescribeTransfersInFlight();
  EXPECT_NE(line.find(absl::StrCat(url, ": 2000 of ", seen.expected, " bytes, ")), std::string::npos) << line;
  EXPECT_NE(line.find(" bytes/s now, started "), std::string::npos) << line;
  EXPECT_NE(line.find("downloads in flight ("), std::string::npos) << line;
  close(fd);
  download.join();
  ASSERT_EQ(results.size(), 1u);
  // Final (a FIFO's 2000 bytes are not the 0 its size says: DataLoss): out of the table.
  EXPECT_FALSE(absl::IsCancelled(results[0].status)) << results[0].status;
  EXPECT_EQ(results[0].size, 2000);
  EXPECT_FALSE(InFlight(url));
}

TEST(TransfersInFlight, AFailedDownloadLeavesNothingInFlight) {
  const std::string dir = testing::MakeTempDir();
  const std::string url = absl::StrCat("file://", dir, "/missing.tar");
  const std::vector<DownloadResult> results = DownloadAll({DownloadJob{url, dir + "/copy"}}, FileOptions());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].status.ok());
  EXPECT_FALSE(InFlight(url));
}

TEST(TransfersInFlight, NothingInFlightDescribesAsEmpty) {
  if (!TransfersInFlight().empty()) GTEST_SKIP() << "another test's download is still running";
  EXPECT_EQ(DescribeTransfersInFlight(), "");
}

}  // namespace
}  // namespace ringloader
