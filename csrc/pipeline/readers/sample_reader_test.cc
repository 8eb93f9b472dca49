// Each SampleReader on its own, through the interface the epoch uses: a whole file, a byte range
// of a tar shard, bytes in memory, a member of a `pipe:` stream and a deferred row each give
// exactly their bytes, both as the epoch's reader threads ask (Read / Bytes) and aside
// (ReadAside); and SampleReaders makes the reader of each kind a loader's samples use.

#include "pipeline/readers/sample_reader.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "io/reader.h"
#include "pipeline/sample_store.h"
#include "testing/jpeg_fixtures.h"
#include "testing/tar_builder.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::Pattern;
using testing::TarBuilder;
using testing::WriteFile;

std::string AsString(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}
std::string AsString(const ByteBuffer& b) { return AsString(b.data(), b.size()); }

// What an epoch's reader thread does with `sample`: Read (on a pread fetcher when it starts an
// asynchronous read), then the decoder's Bytes.
std::string ReadAsTheEpochDoes(const SampleReader& reader, const Sample& sample, bool* asynchronous) {
  FileFetcher fetcher(MakePreadReader(4), 1 << 20);
  std::atomic<bool> cancel{false};
  std::atomic<int> waiting{0};
  const ReadContext ctx{&fetcher, &cancel, &waiting};
  ByteBuffer buffer;
  EXPECT_TRUE(reader.Ready(sample));
  std::optional<absl::Status> now = reader.Read(sample, &buffer, /*tag=*/7, ctx);
  *asynchronous = !now.has_value();
  if (now) {
    EXPECT_TRUE(now->ok()) << *now;
  } else {
    EXPECT_TRUE(fetcher.Flush().ok());
    std::vector<FetchedFile> done;
    while (done.empty()) EXPECT_TRUE(fetcher.Poll(&done, /*wait=*/true).ok());
    EXPECT_EQ(done[0].tag, 7u);
    EXPECT_TRUE(done[0].status.ok()) << done[0].status;
  }
  EXPECT_EQ(waiting.load(), 0);
  SampleBytes bytes;
  EXPECT_TRUE(reader.Bytes(sample, &buffer, &bytes).ok());
  std::string out = AsString(bytes.data, bytes.size);
  reader.Release(sample, bytes);
  return out;
}

std::string ReadAside(const SampleReader& reader, const Sample& sample) {
  ByteBuffer buffer;
  absl::Status status = reader.ReadAside(sample, &buffer, nullptr);
  EXPECT_TRUE(status.ok()) << status;
  return AsString(buffer);
}

TEST(FileReaderTest, ReadsAWholeFileAsynchronouslyAndAside) {
  const std::string dir = MakeTempDir();
  const std::vector<uint8_t> content = Pattern(300000, 5);
  WriteFile(dir + "/a.bin", content);
  const std::string want = AsString(content.data(), content.size());
  const std::unique_ptr<SampleReader> reader = MakeFileReader(1 << 20);
  const Sample sample(dir + "/a.bin", 0);
  bool asynchronous = false;
  EXPECT_EQ(ReadAsTheEpochDoes(*reader, sample, &asynchronous), want);
  EXPECT_TRUE(asynchronous);  // on the fetcher: many reads in flight
  EXPECT_EQ(ReadAside(*reader, sample), want);
  EXPECT_FALSE(reader->InPlace());
  ASSERT_NE(reader->LocalFile(sample), nullptr);
  EXPECT_EQ(*reader->LocalFile(sample), sample.path);
  EXPECT_TRUE(reader->AllowsReadAhead());
}

TEST(FileReaderTest, ReadsAByteRangeOfATarShard) {
  const std::string dir = MakeTempDir();
  TarBuilder tar;
  tar.AddFile("s0.txt", "first member");
  const TarBuilder::Layout image = tar.AddFile("s1.jpg", "the image member's bytes");
  tar.AddFile("s2.txt", "last member");
  WriteFile(dir + "/shard.tar", std::vector<uint8_t>(tar.bytes().begin(), tar.bytes().end()));
  const std::unique_ptr<SampleReader> reader = MakeFileReader(1 << 20);
  const Sample member(dir + "/shard.tar", 1, image.data, static_cast<int64_t>(image.size));
  bool asynchronous = false;
  EXPECT_EQ(ReadAsTheEpochDoes(*reader, member, &asynchronous), "the image member's bytes");
  EXPECT_EQ(ReadAside(*reader, member), "the image member's bytes");
  // A range past the file's end is named as truncated, not padded.
  const Sample past(dir + "/shard.tar", 1, tar.bytes().size() - 4, 16);
  ByteBuffer buffer;
  EXPECT_TRUE(absl::IsDataLoss(reader->ReadAside(past, &buffer, nullptr)));
}

TEST(MemoryReaderTest, HandsTheCallersBytesOnWithoutACopy) {
  const std::string bytes = "encoded image bytes the caller owns";
  Sample sample("row 3", 0);
  sample.source = SourceKind::kMemory;
  sample.memory = reinterpret_cast<const uint8_t*>(bytes.data());
  sample.length = static_cast<int64_t>(bytes.size());
  const std::unique_ptr<SampleReader> reader = MakeMemoryReader();
  EXPECT_TRUE(reader->InPlace());  // no read buffer, no Read
  SampleBytes got;
  ASSERT_TRUE(reader->Bytes(sample, nullptr, &got).ok());
  EXPECT_EQ(got.data, sample.memory);  // where they are
  EXPECT_EQ(AsString(got.data, got.size), bytes);
  EXPECT_EQ(ReadAside(*reader, sample), bytes);  // substitutes copy
  EXPECT_EQ(reader->LocalFile(sample), nullptr);
}

TEST(PipeReaderTest, ReadsAMemberOfAStreamInOrderAndAside) {
  const std::string dir = MakeTempDir();
  TarBuilder tar;
  const TarBuilder::Layout first = tar.AddFile("s0.jpg", "member zero");
  const TarBuilder::Layout second = tar.AddFile("s1.jpg", "member one, a little longer");
  WriteFile(dir + "/shard.tar", std::vector<uint8_t>(tar.bytes().begin(), tar.bytes().end()));
  std::vector<Sample> samples;
  for (const TarBuilder::Layout& at : {first, second}) {
    Sample s("pipe:cat " + dir + "/shard.tar", 0, at.data, static_cast<int64_t>(at.size));
    s.source = SourceKind::kPipe;
    s.tar_member = true;
    samples.push_back(s);
  }
  const SampleStore store(samples);
  const std::unique_ptr<SampleReader> reader = MakePipeReader(1 << 20);
  EXPECT_FALSE(reader->AllowsReadAhead());  // one stream position: one epoch at a time
  const std::vector<int64_t> order = {0, 1};
  reader->BeginEpoch(store, order);
  bool asynchronous = true;
  EXPECT_EQ(ReadAsTheEpochDoes(*reader, samples[0], &asynchronous), "member zero");
  EXPECT_FALSE(asynchronous);  // read here, in the stream's order
  EXPECT_EQ(ReadAsTheEpochDoes(*reader, samples[1], &asynchronous), "member one, a little longer");
  EXPECT_EQ(ReadAside(*reader, samples[0]), "member zero");  // a private run: the stream stays put
  LoaderStats stats;
  reader->AddStats(&stats);
  EXPECT_GT(stats.bytes_read, 0);
  reader->EndEpoch();
  EXPECT_TRUE(absl::IsInvalidArgument(reader->CheckMoreFiles(samples[0], 0)));
}

TEST(DeferredReaderTest, WaitsForItsGroupThenHoldsTheRowUntilReleased) {
  DeferredRows rows(1);
  const std::unique_ptr<SampleReader> reader = MakeDeferredReader(&rows);
  Sample sample("rows 0", 0, /*offset (row)=*/1);
  sample.source = SourceKind::kDeferred;
  sample.group = 0;
  EXPECT_FALSE(reader->Ready(sample));  // not handed over yet
  auto group = std::make_shared<DeferredRows::Group>();
  const std::string bytes = "row zero|row one";
  group->bytes.assign(bytes.begin(), bytes.end());
  group->starts = {0, 9};
  group->lengths = {8, 7};
  ASSERT_TRUE(rows.Attach(0, group, /*uses=*/1).ok());
  EXPECT_TRUE(reader->Ready(sample));
  EXPECT_TRUE(reader->InPlace());
  SampleBytes got;
  ASSERT_TRUE(reader->Bytes(sample, nullptr, &got).ok());
  EXPECT_EQ(AsString(got.data, got.size), "row one");
  EXPECT_EQ(ReadAside(*reader, sample), "row one");
  reader->Release(sample, got);  // its one use: the group goes
  EXPECT_FALSE(rows.Held(0));
  ByteBuffer buffer;
  EXPECT_TRUE(reader->Gone(reader->ReadAside(sample, &buffer, nullptr)));
}

TEST(SampleReadersTest, MakesTheReaderOfEachKindPresent) {
  const std::string bytes = "in memory";
  Sample file("/nonexistent/file.jpg", 0);
  Sample memory("row", 1);
  memory.source = SourceKind::kMemory;
  memory.memory = reinterpret_cast<const uint8_t*>(bytes.data());
  memory.length = static_cast<int64_t>(bytes.size());
  Sample bad("/shard.tar", 2);
  bad.error = "no image member";
  const SampleStore store(std::vector<Sample>{file, memory, bad});
  const std::unique_ptr<SampleReaders> readers = SampleReaders::Create(store, 1 << 20);
  EXPECT_STREQ(readers->For(file).name(), "file");
  EXPECT_STREQ(readers->For(memory).name(), "memory");
  EXPECT_EQ(readers->deferred_rows(), nullptr);
  EXPECT_TRUE(readers->AllowsReadAhead());
  ByteBuffer buffer;
  ASSERT_TRUE(readers->ReadAside(memory, &buffer, nullptr).ok());
  EXPECT_EQ(AsString(buffer), bytes);
  absl::Status known_bad = readers->ReadAside(bad, &buffer, nullptr);
  EXPECT_TRUE(absl::IsDataLoss(known_bad));
  EXPECT_EQ(known_bad.message(), "no image member");
  // A memory sample without its bytes is refused when the loader is created.
  memory.memory = nullptr;
  EXPECT_TRUE(absl::IsInvalidArgument(SampleReaders::Check({file, memory})));
}

TEST(SampleReadersTest, RefusesAKindWithoutAReader) {
  // SourceKind is a public uint8_t enum: a value past the last kind has no reader to hand out
  // (For would index past the table), so Loader::Create refuses it, naming the sample.
  Sample unknown("/data/a.jpg", 0);
  unknown.source = static_cast<SourceKind>(7);
  const absl::Status status = SampleReaders::Check({Sample("/data/b.jpg", 1), unknown});
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_NE(status.message().find("sample 1 (/data/a.jpg)"), std::string::npos) << status;
}

}  // namespace
}  // namespace ringloader
