#include "io/reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::WriteFile;

// A pread reader that misbehaves like a real kernel may: short reads, EINTR and EAGAIN.
class FaultyReader final : public Reader {
 public:
  explicit FaultyReader(int depth) : depth_(depth) {}
  const char* name() const override { return "faulty"; }
  int depth() const override { return depth_; }
  absl::Status Submit(ReadOp* op) override {
    ++calls_;
    if (calls_ % 3 == 0) {
      op->result = -EINTR;
    } else if (calls_ % 5 == 0) {
      op->result = -EAGAIN;
    } else {
      const size_t len = std::min<size_t>(op->length, 1 + calls_ % 977);  // always short
      const ssize_t n = pread(op->fd, op->dst, len, static_cast<off_t>(op->offset));
      op->result = n < 0 ? -errno : n;
    }
    done_.push_back(op);
    return absl::OkStatus();
  }
  absl::Status Flush() override { return absl::OkStatus(); }
  absl::StatusOr<int> Reap(std::vector<ReadOp*>* done, bool) override {
    const int n = static_cast<int>(done_.size());
    done->insert(done->end(), done_.begin(), done_.end());
    done_.clear();
    return n;
  }

 private:
  int depth_;
  int calls_ = 0;
  std::vector<ReadOp*> done_;
};

struct Corpus {
  std::string dir;
  std::vector<std::string> paths;
  std::vector<std::vector<uint8_t>> contents;
};

Corpus MakeCorpus() {
  Corpus c;
  c.dir = MakeTempDir();
  std::mt19937 rng(5);
  const size_t sizes[] = {0, 1, 17, 4095, 4096, 4097, 65536, 200000, 1 << 20, (1 << 20) + 7};
  for (int i = 0; i < 40; ++i) {
    std::vector<uint8_t> bytes(sizes[i % 10] + (i / 10));
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    c.paths.push_back(c.dir + "/file_" + std::to_string(i));
    WriteFile(c.paths.back(), bytes);
    c.contents.push_back(std::move(bytes));
  }
  return c;
}

// Reads every corpus file through `reader`, with as many in flight as it allows.
std::map<uint64_t, std::vector<uint8_t>> ReadAll(std::unique_ptr<Reader> reader, const Corpus& c) {
  FileFetcher fetcher(std::move(reader), size_t{64} << 20);
  std::vector<ByteBuffer> buffers(c.paths.size());
  std::map<uint64_t, std::vector<uint8_t>> out;
  size_t next = 0;
  std::vector<FetchedFile> done;
  while (out.size() < c.paths.size()) {
    while (next < c.paths.size() && fetcher.has_room()) {
      fetcher.Start(c.paths[next], &buffers[next], next);
      ++next;
    }
    EXPECT_TRUE(fetcher.Flush().ok());
    done.clear();
    EXPECT_TRUE(fetcher.Poll(&done, true).ok());
    for (FetchedFile& f : done) {
      EXPECT_TRUE(f.status.ok()) << f.status;
      out[f.tag] = std::vector<uint8_t>(f.buffer->data(), f.buffer->data() + f.buffer->size());
    }
  }
  return out;
}

bool UringAvailable() { return MakeUringReader(4).ok(); }

TEST(ReaderTest, PreadReadsExactBytes) {
  Corpus c = MakeCorpus();
  auto got = ReadAll(MakePreadReader(8), c);
  for (size_t i = 0; i < c.paths.size(); ++i) EXPECT_EQ(got[i], c.contents[i]) << c.paths[i];
}

TEST(ReaderTest, UringAndPreadReturnIdenticalBytes) {
  if (!UringAvailable()) GTEST_SKIP() << "io_uring is refused here: " << MakeUringReader(4).status();
  Corpus c = MakeCorpus();
  auto uring = ReadAll(*MakeUringReader(16), c);
  auto pread = ReadAll(MakePreadReader(16), c);
  EXPECT_EQ(uring, pread);
  for (size_t i = 0; i < c.paths.size(); ++i) EXPECT_EQ(uring[i], c.contents[i]) << c.paths[i];
}

TEST(ReaderTest, ShortReadsEintrAndEagainAreRetried) {
  Corpus c = MakeCorpus();
  auto got = ReadAll(std::make_unique<FaultyReader>(4), c);
  for (size_t i = 0; i < c.paths.size(); ++i) EXPECT_EQ(got[i], c.contents[i]) << c.paths[i];
}

TEST(ReaderTest, ErrorsNameTheFile) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/big", std::vector<uint8_t>(5000, 1));
  FileFetcher fetcher(MakePreadReader(4), 4096);
  ByteBuffer a, b, c;
  fetcher.Start(dir + "/missing.jpg", &a, 1);
  fetcher.Start(dir, &b, 2);
  fetcher.Start(dir + "/big", &c, 3);
  ASSERT_TRUE(fetcher.Flush().ok());
  std::vector<FetchedFile> done;
  while (done.size() < 3) ASSERT_TRUE(fetcher.Poll(&done, true).ok());
  std::map<uint64_t, absl::Status> by_tag;
  for (auto& f : done) by_tag[f.tag] = f.status;
  EXPECT_TRUE(absl::IsNotFound(by_tag[1])) << by_tag[1];
  EXPECT_NE(by_tag[1].message().find("missing.jpg"), std::string::npos);
  EXPECT_NE(by_tag[2].message().find("directory"), std::string::npos) << by_tag[2];
  EXPECT_TRUE(absl::IsOutOfRange(by_tag[3])) << by_tag[3];
  EXPECT_EQ(fetcher.outstanding(), 0);
}

TEST(ReaderTest, RefusedUringFallsBackToPread) {
  SetUringSetupFailureForTesting(EPERM);
  std::string note;
  auto reader = MakeReader(IoBackend::kAuto, 8, &note);
  ASSERT_TRUE(reader.ok());
  EXPECT_STREQ((*reader)->name(), "pread");
  EXPECT_NE(note.find("io_uring unavailable"), std::string::npos) << note;
  auto forced = MakeReader(IoBackend::kUring, 8, nullptr);
  EXPECT_TRUE(absl::IsPermissionDenied(forced.status())) << forced.status();
  SetUringSetupFailureForTesting(0);
}

// Regression: a reader thread cancelled between Start() and Flush() destroyed its fetcher with
// reads queued in the ring but never submitted, and the destructor waited for them forever.
TEST(ReaderTest, DestroyingWithUnsubmittedReadsDoesNotHang) {
  if (!UringAvailable()) GTEST_SKIP() << "io_uring is refused here";
  Corpus c = MakeCorpus();
  std::vector<ByteBuffer> buffers(8);
  for (int round = 0; round < 20; ++round) {
    FileFetcher fetcher(*MakeUringReader(8), size_t{64} << 20);
    for (int i = 0; i < 8; ++i) fetcher.Start(c.paths[(round + i) % c.paths.size()], &buffers[i], i);
    // no Flush: the destructor must submit and wait for the queued reads itself
  }
  // Waiting in Poll also submits what is queued.
  FileFetcher fetcher(*MakeUringReader(4), size_t{64} << 20);
  fetcher.Start(c.paths[5], &buffers[0], 0);
  std::vector<FetchedFile> done;
  ASSERT_TRUE(fetcher.Poll(&done, true).ok());
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok());
}

// Reads byte ranges of one file (a shard) in a shuffled order, many in flight, and checks each
// against the file's bytes; the file is opened once.
void CheckRangeReads(std::unique_ptr<Reader> reader) {
  const std::string dir = MakeTempDir();
  std::mt19937 rng(11);
  std::vector<uint8_t> shard(3 << 20);
  for (auto& b : shard) b = static_cast<uint8_t>(rng());
  WriteFile(dir + "/shard.tar", shard);
  struct Range { uint64_t offset; int64_t length; };
  std::vector<Range> ranges;
  for (int i = 0; i < 200; ++i) {
    const uint64_t offset = rng() % shard.size();
    const int64_t length = static_cast<int64_t>(std::min<uint64_t>(rng() % 300000, shard.size() - offset));
    ranges.push_back({offset, length});
  }
  ranges.push_back({0, 0});
  ranges.push_back({shard.size(), 0});
  ranges.push_back({0, static_cast<int64_t>(shard.size())});
  FileFetcher fetcher(std::move(reader), size_t{64} << 20);
  std::vector<ByteBuffer> buffers(ranges.size());
  size_t next = 0, finished = 0;
  std::vector<FetchedFile> done;
  while (finished < ranges.size()) {
    while (next < ranges.size() && fetcher.has_room()) {
      fetcher.Start(dir + "/shard.tar", &buffers[next], next, ranges[next].offset, ranges[next].length);
      ++next;
    }
    ASSERT_TRUE(fetcher.Flush().ok());
    done.clear();
    ASSERT_TRUE(fetcher.Poll(&done, true).ok());
    for (FetchedFile& f : done) {
      ASSERT_TRUE(f.status.ok()) << f.status;
      const Range& r = ranges[f.tag];
      ASSERT_EQ(f.buffer->size(), static_cast<size_t>(r.length));
      EXPECT_TRUE(std::equal(f.buffer->data(), f.buffer->data() + r.length, shard.begin() + r.offset)) << f.tag;
      ++finished;
    }
  }
  EXPECT_EQ(fetcher.opens(), 1u) << "the shard stays open across member reads";
  EXPECT_EQ(fetcher.bytes_read(), [&] {
    uint64_t total = 0;
    for (const Range& r : ranges) total += static_cast<uint64_t>(r.length);
    return total;
  }());
}

TEST(ReaderTest, RangeReadsWithPread) { CheckRangeReads(MakePreadReader(8)); }

TEST(ReaderTest, RangeReadsWithUring) {
  if (!UringAvailable()) GTEST_SKIP() << "io_uring is refused here: " << MakeUringReader(4).status();
  CheckRangeReads(*MakeUringReader(16));
}

TEST(ReaderTest, RangeReadsSurviveShortReadsAndRetries) { CheckRangeReads(std::make_unique<FaultyReader>(4)); }

TEST(ReaderTest, TruncatedRangeIsDataLossNamingTheFile) {
  const std::string dir = MakeTempDir();
  WriteFile(dir + "/short.tar", std::vector<uint8_t>(1000, 7));
  FileFetcher fetcher(MakePreadReader(4), 4096);
  ByteBuffer a, b, c, d;
  fetcher.Start(dir + "/short.tar", &a, 1, 512, 1024);   // runs past the end
  fetcher.Start(dir + "/short.tar", &b, 2, 2000, 0);     // starts past the end
  fetcher.Start(dir + "/short.tar", &c, 3, 0, 1000);     // exactly the file
  fetcher.Start(dir + "/missing.tar", &d, 4, 0, 10);
  ASSERT_TRUE(fetcher.Flush().ok());
  std::vector<FetchedFile> done;
  while (done.size() < 4) ASSERT_TRUE(fetcher.Poll(&done, true).ok());
  std::map<uint64_t, absl::Status> by_tag;
  for (auto& f : done) by_tag[f.tag] = f.status;
  EXPECT_TRUE(absl::IsDataLoss(by_tag[1])) << by_tag[1];
  EXPECT_EQ(by_tag[1].message(),
            absl::StrCat("truncated: ", dir, "/short.tar has 1000 bytes, member needs 1536 (offset 512, length 1024)"));
  EXPECT_TRUE(absl::IsDataLoss(by_tag[2])) << by_tag[2];
  EXPECT_TRUE(by_tag[3].ok()) << by_tag[3];
  EXPECT_EQ(c.size(), 1000u);
  EXPECT_TRUE(absl::IsNotFound(by_tag[4])) << by_tag[4];
  EXPECT_NE(by_tag[4].message().find("missing.tar"), std::string::npos);
  EXPECT_EQ(fetcher.outstanding(), 0);
}

TEST(ReaderTest, ManyShardsEvictIdleCachedFiles) {
  const std::string dir = MakeTempDir();
  const int files = static_cast<int>(FileFetcher::kMaxCachedFiles) + 5;
  for (int i = 0; i < files; ++i) WriteFile(dir + "/s" + std::to_string(i), std::vector<uint8_t>(64, static_cast<uint8_t>(i)));
  FileFetcher fetcher(MakePreadReader(2), 4096);
  ByteBuffer buffer;
  std::vector<FetchedFile> done;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < files; ++i) {
      fetcher.Start(dir + "/s" + std::to_string(i), &buffer, 0, 8, 4);
      ASSERT_TRUE(fetcher.Flush().ok());
      done.clear();
      while (done.empty()) ASSERT_TRUE(fetcher.Poll(&done, true).ok());
      ASSERT_TRUE(done[0].status.ok()) << done[0].status;
      EXPECT_EQ(buffer.data()[0], static_cast<uint8_t>(i));
    }
  }
  // Cycling through more shards than the cache holds reopens them; it never leaks descriptors.
  EXPECT_EQ(fetcher.opens(), 2u * files);
}

TEST(ReaderTest, ByteBufferGrowsOnlyWhenNeeded) {
  ByteBuffer b;
  b.Resize(100);
  const uint8_t* first = b.data();
  b.Resize(10);
  b.Resize(100);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(b.size(), 100u);
  b.Resize(1000);
  EXPECT_GE(b.capacity(), 1000u);
}

}  // namespace
}  // namespace ringloader
