// Several views of one sample (LoaderOptions::views) and samples held in memory
// (SourceKind::kMemory), through the public Loader API.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "pipeline/views.h"
#include "ringloader/ringloader.h"
#include "ringloader/transforms.h"
#include "testing/jpeg_fixtures.h"

namespace ringloader {
namespace {

using testing::MakeTempDir;
using testing::WriteJpegDataset;

LoaderOptions Base() {
  LoaderOptions o;
  o.batch_size = 3;
  o.num_workers = 2;
  o.prefetch_batches = 2;
  o.fast_decode = false;
  return o;
}

std::vector<int64_t> Order(size_t n) {
  std::vector<int64_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<int64_t>(i);
  return order;
}

// Every row of an epoch in sequential order, as bytes.
std::vector<uint8_t> Rows(Loader& loader, size_t n) {
  std::vector<int64_t> offsets;
  for (size_t b = 0; b < n; b += 3) offsets.push_back(static_cast<int64_t>(b));
  offsets.push_back(static_cast<int64_t>(n));
  EXPECT_TRUE(loader.StartEpoch(0, 5, Order(n), offsets).ok());
  std::vector<uint8_t> out;
  while (true) {
    absl::StatusOr<Batch> batch = loader.Next();
    if (absl::IsOutOfRange(batch.status())) break;
    EXPECT_TRUE(batch.ok()) << batch.status();
    if (!batch.ok()) break;
    const auto* p = static_cast<const uint8_t*>(batch->images());
    out.insert(out.end(), p, p + batch->size() * batch->sample_bytes());
  }
  return out;
}

TEST(ViewsTest, DecodesOnceAndRendersEachViewIntoItsPartOfTheRow) {
  std::vector<Sample> samples = WriteJpegDataset(MakeTempDir(), 6);
  const std::vector<TransformStep> fixed = {transforms::Resize(40), transforms::CenterCrop(32),
                                            transforms::ToTensor()};
  const std::vector<TransformStep> random = {transforms::RandomResizedCrop(16),
                                             transforms::RandomHorizontalFlip()};
  LoaderOptions single = Base();
  single.transform = fixed;
  absl::StatusOr<std::unique_ptr<Loader>> one = Loader::Create(samples, single);
  ASSERT_TRUE(one.ok()) << one.status();

  LoaderOptions multi = Base();
  multi.views = {{fixed, DType::kFloat32}, {random, DType::kUint8}, {random, DType::kUint8}};
  absl::StatusOr<std::unique_ptr<Loader>> views = Loader::Create(samples, multi);
  ASSERT_TRUE(views.ok()) << views.status();
  const std::vector<ViewLayout> set = (*views)->views();
  const size_t fixed_bytes = 3 * 32 * 32 * 4, random_bytes = 3 * 16 * 16;
  ASSERT_EQ(set.size(), 3u);
  EXPECT_EQ(set[0].offset, 0u);
  EXPECT_EQ(set[1].offset, fixed_bytes);
  EXPECT_EQ(set[2].offset, fixed_bytes + 768);
  EXPECT_EQ(set[0].height, 32);
  EXPECT_EQ(set[1].width, 16);
  EXPECT_EQ(set[1].dtype, DType::kUint8);
  EXPECT_TRUE((*one)->views().empty());
  EXPECT_EQ((*views)->row_bytes(), fixed_bytes + 2 * 768);  // 16x16x3 = 768, 64-aligned
  EXPECT_EQ(random_bytes, 768u);

  const std::vector<uint8_t> expected = Rows(**one, samples.size());
  const std::vector<uint8_t> rows = Rows(**views, samples.size());
  ASSERT_EQ(rows.size(), samples.size() * (*views)->row_bytes());
  for (size_t i = 0; i < samples.size(); ++i) {
    const uint8_t* row = rows.data() + i * (*views)->row_bytes();
    // View 0 (a fixed chain) equals the single-view loader's output for the sample.
    EXPECT_EQ(std::memcmp(row, expected.data() + i * fixed_bytes, fixed_bytes), 0) << i;
    // Views 1 and 2 share a chain but draw apart.
    EXPECT_NE(std::memcmp(row + set[1].offset, row + set[2].offset, random_bytes), 0) << i;
  }
  const LoaderStats stats = (*views)->Stats();
  EXPECT_EQ(stats.decodes, static_cast<int64_t>(samples.size()));
  EXPECT_EQ(stats.views_rendered, static_cast<int64_t>(3 * samples.size()));
  // Rendering is deterministic: a second epoch with the same seed repeats every view.
  EXPECT_EQ(Rows(**views, samples.size()), rows);
}

TEST(ViewsTest, RefusesChainsWithoutAFixedSizeNamingTheView) {
  LoaderOptions o = Base();
  o.views = {{{transforms::CenterCrop(8)}, DType::kUint8}, {{transforms::Resize(8)}, DType::kUint8}};
  absl::StatusOr<std::unique_ptr<Loader>> loader =
      Loader::Create(WriteJpegDataset(MakeTempDir(), 2), o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("view 1"), std::string::npos) << loader.status();
}

TEST(ViewsTest, LumaIsPillowsConvertL) {
  RgbImage rgb;
  rgb.width = 4;
  rgb.height = 1;
  rgb.pixels = {255, 0, 0, 0, 255, 0, 0, 0, 255, 17, 200, 93};
  RgbImage gray;
  ReplicateLuma(rgb, &gray);
  // Image.new("RGB", (1, 1), c).convert("L").getpixel((0, 0)) for each colour.
  EXPECT_EQ(gray.pixels, (std::vector<uint8_t>{76, 76, 76, 150, 150, 150, 29, 29, 29, 133, 133, 133}));
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::vector<uint8_t> bytes;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return bytes;
  int c;
  while ((c = std::fgetc(f)) != EOF) bytes.push_back(static_cast<uint8_t>(c));
  std::fclose(f);
  return bytes;
}

TEST(SeveralFilesTest, EachViewRendersItsFileAndEachFileDecodesOnce) {
  const std::vector<Sample> files = WriteJpegDataset(MakeTempDir(), 6);
  const size_t n = files.size();
  std::vector<std::vector<uint8_t>> blobs;
  for (const Sample& s : files) blobs.push_back(ReadAll(s.path));
  // Sample i: its own file, then the next sample's file (a path), then the one after that
  // held in memory.
  std::vector<Sample> samples = files;
  for (size_t i = 0; i < n; ++i) {
    samples[i].more_files.push_back(Sample::File{files[(i + 1) % n].path});
    const std::vector<uint8_t>& blob = blobs[(i + 2) % n];
    samples[i].more_files.push_back(
        Sample::File{"<in memory>", blob.data(), static_cast<int64_t>(blob.size())});
  }
  const std::vector<TransformStep> fixed = {transforms::Resize(40), transforms::CenterCrop(32)};
  LoaderOptions single = Base();
  single.transform = fixed;
  single.dtype = DType::kUint8;
  absl::StatusOr<std::unique_ptr<Loader>> one = Loader::Create(files, single);
  ASSERT_TRUE(one.ok()) << one.status();
  const std::vector<uint8_t> expected = Rows(**one, n);

  LoaderOptions o = Base();
  LoaderOptions::View view{fixed, DType::kUint8};
  o.views = {view, view, view, view};
  o.views[1].file = 1;
  o.views[2].file = 2;
  o.views[3].file = 1;
  o.views[3].luma = true;
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  const size_t bytes = 3 * 32 * 32;
  const std::vector<uint8_t> rows = Rows(**loader, n);
  ASSERT_EQ(rows.size(), n * (*loader)->row_bytes());
  for (size_t i = 0; i < n; ++i) {
    const uint8_t* row = rows.data() + i * (*loader)->row_bytes();
    const std::vector<ViewLayout> set = (*loader)->views();
    for (size_t v = 0; v < 3; ++v) {
      const size_t file = (i + v) % n;
      EXPECT_EQ(std::memcmp(row + set[v].offset, expected.data() + file * bytes, bytes), 0) << i << " " << v;
    }
  }
  // Three files a sample, one decode each (file 1 feeds two views: RGB and its luma).
  const LoaderStats stats = (*loader)->Stats();
  EXPECT_EQ(stats.decodes, static_cast<int64_t>(3 * n));
  EXPECT_EQ(stats.views_rendered, static_cast<int64_t>(4 * n));

  // A missing file makes its sample bad, named by that file; the others are delivered.
  samples[3].more_files[0].path = files[0].path + ".missing";
  o.on_error = ErrorPolicy::kSkip;
  loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ(Rows(**loader, n).size(), (n - 1) * (*loader)->row_bytes());
  const LoaderStats skipped = (*loader)->Stats();
  EXPECT_EQ(skipped.skipped, 1);
  ASSERT_EQ(skipped.recent_errors.size(), 1u);
  EXPECT_NE(skipped.recent_errors[0].find("sample 3 (" + files[0].path + ".missing)"),
            std::string::npos)
      << skipped.recent_errors[0];

  // A view of a file the samples do not have is refused when the loader is built.
  o.views[2].file = 3;
  loader = Loader::Create(samples, o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("has 3 file(s); the views render 4"), std::string::npos)
      << loader.status();
  // So is a several-file sample streamed from a pipe: command, and a mask view in luma.
  o.views[2].file = 2;
  samples[1].source = SourceKind::kPipe;
  samples[1].path = "pipe:cat " + files[1].path;
  loader = Loader::Create(samples, o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("a pipe: stream and has several files"),
            std::string::npos)
      << loader.status();
  samples[1] = files[1];
  samples[1].more_files = samples[0].more_files;
  o.views[3].mask = true;
  loader = Loader::Create(samples, o);
  ASSERT_FALSE(loader.ok());
  EXPECT_NE(loader.status().message().find("view 3: luma and mask exclude each other"), std::string::npos)
      << loader.status();
}

TEST(MemorySamplesTest, DecodeFromTheCallersBytesAsFromTheFile) {
  std::vector<Sample> files = WriteJpegDataset(MakeTempDir(), 6);
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<Sample> memory = files;
  for (Sample& s : memory) {
    FILE* f = std::fopen(s.path.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    std::vector<uint8_t> bytes;
    int c;
    while ((c = std::fgetc(f)) != EOF) bytes.push_back(static_cast<uint8_t>(c));
    std::fclose(f);
    blobs.push_back(std::move(bytes));
  }
  for (size_t i = 0; i < memory.size(); ++i) {
    memory[i].path = "<in memory>";
    memory[i].source = SourceKind::kMemory;
    memory[i].memory = blobs[i].data();
    memory[i].length = static_cast<int64_t>(blobs[i].size());
  }
  blobs[4][0] = 0;  // not a JPEG any more: a sample error naming it
  LoaderOptions o = Base();
  o.transform = {transforms::Resize(40), transforms::CenterCrop(32)};
  o.on_error = ErrorPolicy::kSkip;
  absl::StatusOr<std::unique_ptr<Loader>> from_files = Loader::Create(files, o);
  absl::StatusOr<std::unique_ptr<Loader>> from_memory = Loader::Create(memory, o);
  ASSERT_TRUE(from_files.ok() && from_memory.ok());
  std::vector<uint8_t> want = Rows(**from_files, files.size());
  const size_t sample = (*from_files)->row_bytes();
  want.erase(want.begin() + 4 * sample, want.begin() + 5 * sample);
  EXPECT_EQ(Rows(**from_memory, memory.size()), want);
  EXPECT_EQ((*from_memory)->Stats().skipped, 1);

  memory[0].memory = nullptr;
  EXPECT_FALSE(Loader::Create(memory, o).ok());
}

}  // namespace
}  // namespace ringloader
