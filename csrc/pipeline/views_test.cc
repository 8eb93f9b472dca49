// Several views of one sample (LoaderOptions::views) and samples held in memory
// (SourceKind::kMemory), through the public Loader API.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "pipeline/epoch.h"
#include "pipeline/views.h"
#include "ringloader/ringloader.h"
#include "ringloader/transforms.h"
#include "testing/jpeg_fixtures.h"
#include "transform/augment.h"
#include "transform/render.h"

namespace ringloader {
namespace {

// One file's bytes, as DecodeViews takes a sample's files.
std::vector<EncodedFile> OneFile(const std::vector<uint8_t>& bytes) {
  return {EncodedFile{bytes.data(), bytes.size(), nullptr}};
}

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

// A binary PPM of width x height, black with the rectangle [x0,x1) x [y0,y1) in `rgb`: lossless,
// so a rendered pixel's colour says where in the source it came from.
std::vector<uint8_t> RectanglePpm(int width, int height, int x0, int y0, int x1, int y1,
                                  const uint8_t rgb[3]) {
  const std::string header =
      "P6\n" + std::to_string(width) + " " + std::to_string(height) + "\n255\n";
  std::vector<uint8_t> out(header.begin(), header.end());
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const bool in = x >= x0 && x < x1 && y >= y0 && y < y1;
      for (int c = 0; c < 3; ++c) out.push_back(in ? rgb[c] : 0);
    }
  }
  return out;
}

TEST(ViewsTest, GeometryRecordSaysWhereTheRenderedPixelsCameFrom) {
  const uint8_t red[3] = {250, 20, 10};
  const int src_w = 90, src_h = 60, rx0 = 30, ry0 = 15, rx1 = 70, ry1 = 45;
  const std::vector<uint8_t> ppm = RectanglePpm(src_w, src_h, rx0, ry0, rx1, ry1, red);
  std::vector<LoaderOptions::View> options(3);
  // A fixed chain (the record is known), a random one, and a padded RandomCrop (the crop
  // reaches outside the source). uint8 HWC output, so a row's pixel is 3 bytes.
  options[0].transform = {transforms::CenterCrop(20, 30), transforms::RandomHorizontalFlip(1.0)};
  options[1].transform = {transforms::RandomResizedCrop(24, 32, 0.3, 1.0),
                          transforms::RandomHorizontalFlip(), transforms::RandomVerticalFlip(),
                          transforms::ColorJitter(0.0, 0.0, 0.0, 0.0)};
  options[2].transform = {transforms::RandomCrop(50, 80, 8), transforms::RandomHorizontalFlip()};
  for (LoaderOptions::View& v : options) {
    v.dtype = DType::kUint8;
    v.geometry = true;
  }
  absl::StatusOr<ViewSet> set = ViewSet::Create(options, Layout::kHWC);
  ASSERT_TRUE(set.ok()) << set.status();
  for (size_t v = 0; v < 3; ++v) {
    EXPECT_EQ(set->geometry_offsets[v] % 8, 0);
    EXPECT_GE(static_cast<size_t>(set->geometry_offsets[v]),
              set->offsets[v] + set->pipelines[v].SampleBytes());
  }
  LoaderOptions loader_options;
  loader_options.fast_decode = false;
  std::unique_ptr<ImageDecoder> decoder = MakeDecoder(loader_options);
  RenderState state;
  std::vector<double> row_storage(set->row_bytes / sizeof(double) + 1);
  auto* row = reinterpret_cast<uint8_t*>(row_storage.data());
  int flips = 0, inside = 0, outside = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    ASSERT_TRUE(DecodeViews(*decoder, OneFile(ppm), *set, seed, state, row).ok());
    for (size_t v = 0; v < 3; ++v) {
      const double* g = reinterpret_cast<const double*>(row + set->geometry_offsets[v]);
      // The record is the geometry Plan draws for this view's seed.
      SampleRng rng(ViewSeed(seed, v));
      const SampleGeometry planned = set->pipelines[v].Plan(src_w, src_h, rng);
      EXPECT_EQ(g[kGeoSrcW], src_w);
      EXPECT_EQ(g[kGeoSrcH], src_h);
      EXPECT_EQ(g[kGeoLeft], std::min(planned.x0, planned.x1));
      EXPECT_EQ(g[kGeoHFlip], planned.flipped() ? 1.0 : 0.0);
      EXPECT_EQ(g[kGeoOutW], set->pipelines[v].out_w());
      EXPECT_EQ(g[kGeoOutH], set->pipelines[v].out_h());
      if (v == 0) {  // CenterCrop(20x30) of 90x60: left round(30) = 30, top round(20) = 20
        EXPECT_EQ(g[kGeoLeft], 30);
        EXPECT_EQ(g[kGeoTop], 20);
        EXPECT_EQ(g[kGeoRight], 60);
        EXPECT_EQ(g[kGeoBottom], 40);
        EXPECT_EQ(g[kGeoHFlip], 1);
        EXPECT_EQ(g[kGeoVFlip], 0);
        EXPECT_EQ(g[kGeoKeyDx], -1);  // v2 flips keypoints about (width - 1) / 2
        EXPECT_EQ(g[kGeoKeyDy], 0);
      }
      if (v == 2) EXPECT_EQ(g[kGeoRight] - g[kGeoLeft], 80);
      // The seed of the row's Python draws: the sample's, the same in every view, exact.
      EXPECT_EQ(g[kGeoDrawSeed], static_cast<double>(RowDrawSeed(seed)));
      EXPECT_LT(RowDrawSeed(seed), uint64_t{1} << 53);
      if (seed > 0) EXPECT_NE(RowDrawSeed(seed), RowDrawSeed(seed - 1));
      flips += static_cast<int>(g[kGeoHFlip] + g[kGeoVFlip]);
      // Map the rectangle through the record; output pixels whose centre lies a filter width
      // inside it are red, those a filter width outside it are black.
      const int out_w = static_cast<int>(g[kGeoOutW]), out_h = static_cast<int>(g[kGeoOutH]);
      const double sx = out_w / (g[kGeoRight] - g[kGeoLeft]);
      const double sy = out_h / (g[kGeoBottom] - g[kGeoTop]);
      double bx0 = (rx0 - g[kGeoLeft]) * sx, bx1 = (rx1 - g[kGeoLeft]) * sx;
      double by0 = (ry0 - g[kGeoTop]) * sy, by1 = (ry1 - g[kGeoTop]) * sy;
      if (g[kGeoHFlip] != 0) std::tie(bx0, bx1) = std::make_pair(out_w - bx1, out_w - bx0);
      if (g[kGeoVFlip] != 0) std::tie(by0, by1) = std::make_pair(out_h - by1, out_h - by0);
      const double margin = std::max({1.0, 1.0 / sx, 1.0 / sy}) + 0.5;
      const uint8_t* image = row + set->offsets[v];
      for (int y = 0; y < out_h; ++y) {
        for (int x = 0; x < out_w; ++x) {
          const double cx = x + 0.5, cy = y + 0.5;
          const uint8_t* px = image + (static_cast<size_t>(y) * out_w + x) * 3;
          if (cx > bx0 + margin && cx < bx1 - margin && cy > by0 + margin && cy < by1 - margin) {
            EXPECT_EQ(px[0], red[0]) << "view " << v << " seed " << seed << " at " << x << "," << y;
            ++inside;
          } else if (cx < bx0 - margin || cx > bx1 + margin || cy < by0 - margin ||
                     cy > by1 + margin) {
            EXPECT_EQ(px[0], 0) << "view " << v << " seed " << seed << " at " << x << "," << y;
            ++outside;
          }
        }
      }
    }
  }
  EXPECT_GT(flips, 6);  // the random flips were drawn both ways
  EXPECT_GT(inside, 1000);
  EXPECT_GT(outside, 1000);
}

TEST(ViewsTest, GeometryIsRefusedWhenTheImageStageMovesPixels) {
  std::vector<LoaderOptions::View> options(1);
  options[0].dtype = DType::kUint8;
  options[0].geometry = true;
  // A flip after a colour step moves the 8-bit image's pixels, after the resample.
  options[0].transform = {transforms::CenterCrop(16), transforms::ColorJitter(0.4),
                          transforms::RandomHorizontalFlip()};
  absl::StatusOr<ViewSet> set = ViewSet::Create(options, Layout::kCHW);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("view 0: its geometry cannot be recorded"),
            std::string::npos) << set.status();
  EXPECT_NE(set.status().message().find("RandomHorizontalFlip"), std::string::npos);
  options[0].geometry = false;
  EXPECT_TRUE(ViewSet::Create(options, Layout::kCHW).ok());
}

TEST(ViewsTest, GeometryRecordsTheDrawsOfARotationOrAffineThatTurnsTheOutputFirst) {
  // A Joint turns its boxes and masks by these draws (v2's kernels, in Python): they must be the
  // ones the image step made, drawn from the generator right after the plan.
  RandomAffineParams affine;
  affine.degrees = {-30.0, 30.0};
  affine.translate = Range{0.2, 0.1};
  affine.scale = Range{0.8, 1.2};
  affine.shear_x = Range{-5.0, 5.0};
  RandomRotationParams rotation;
  rotation.degrees = {-45.0, 45.0};
  const uint8_t red[3] = {200, 30, 30};
  const std::vector<uint8_t> ppm = RectanglePpm(90, 60, 10, 10, 40, 30, red);
  LoaderOptions loader_options;
  loader_options.fast_decode = false;
  std::unique_ptr<ImageDecoder> decoder = MakeDecoder(loader_options);
  RenderState state;
  for (const TransformStep& turn : {TransformStep(affine), TransformStep(rotation)}) {
    std::vector<LoaderOptions::View> options(1);
    options[0].dtype = DType::kUint8;
    options[0].geometry = true;
    options[0].transform = {transforms::RandomResizedCrop(24, 32, 0.3, 1.0),
                            transforms::RandomHorizontalFlip(), turn,
                            transforms::ColorJitter(0.4)};
    absl::StatusOr<ViewSet> set = ViewSet::Create(options, Layout::kHWC);
    ASSERT_TRUE(set.ok()) << set.status();
    std::vector<double> row_storage(set->row_bytes / sizeof(double) + 1);
    auto* row = reinterpret_cast<uint8_t*>(row_storage.data());
    std::vector<double> angles;
    for (uint64_t seed = 0; seed < 6; ++seed) {
      ASSERT_TRUE(DecodeViews(*decoder, OneFile(ppm), *set, seed, state, row).ok());
      const double* g = reinterpret_cast<const double*>(row + set->geometry_offsets[0]);
      SampleRng rng(ViewSeed(seed, 0));
      set->pipelines[0].Plan(90, 60, rng);
      AffineDraw want;
      if (turn.kind() == TransformStep::Kind::kRandomAffine) {
        want = DrawRandomAffine(affine, rng, 32, 24);
        EXPECT_EQ(want.translate_x, std::nearbyint(want.translate_x));
        EXPECT_LE(std::abs(want.translate_x), 0.2 * 32);
        EXPECT_NE(want.scale, 1.0);
        EXPECT_EQ(want.scale, static_cast<float>(want.scale));  // torch's float32 draw
      } else {
        want.angle = DrawRandomRotation(rotation, rng);
        EXPECT_EQ(want.angle, static_cast<float>(want.angle));  // torch's float32 draw
      }
      const double got[] = {g[kGeoAngle], g[kGeoTranslateX], g[kGeoTranslateY],
                            g[kGeoScale], g[kGeoShearX], g[kGeoShearY]};
      const double expected[] = {want.angle, want.translate_x, want.translate_y,
                                 want.scale, want.shear_x, want.shear_y};
      for (int f = 0; f < 6; ++f) EXPECT_EQ(got[f], expected[f]) << "field " << f;
      angles.push_back(g[kGeoAngle]);
    }
    std::sort(angles.begin(), angles.end());
    EXPECT_EQ(std::unique(angles.begin(), angles.end()), angles.end());  // the draws vary
  }
  // Only as the first image step: after a colour step it would draw after that step's draws.
  std::vector<LoaderOptions::View> options(1);
  options[0].dtype = DType::kUint8;
  options[0].geometry = true;
  options[0].transform = {transforms::CenterCrop(16), transforms::ColorJitter(0.4),
                          TransformStep(rotation)};
  absl::StatusOr<ViewSet> set = ViewSet::Create(options, Layout::kHWC);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("RandomRotation"), std::string::npos) << set.status();
}

// An 8-bit BMP of `labels` (width x height, row-major) with a gray palette: a label image.
std::vector<uint8_t> GrayBmp(int width, int height, const std::vector<uint8_t>& labels) {
  const int stride = (width + 3) / 4 * 4;
  const uint32_t data_at = 14 + 40 + 1024;
  const uint32_t size = data_at + static_cast<uint32_t>(stride * height);
  std::vector<uint8_t> out(size, 0);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int b = 0; b < 4; ++b) out[at + b] = static_cast<uint8_t>(v >> (8 * b));
  };
  out[0] = 'B', out[1] = 'M';
  put32(2, size);
  put32(10, data_at);
  put32(14, 40);
  put32(18, static_cast<uint32_t>(width));
  put32(22, static_cast<uint32_t>(height));
  out[26] = 1, out[28] = 8;  // one plane, 8 bits a pixel, no compression
  put32(46, 256);
  for (uint32_t i = 0; i < 256; ++i) put32(54 + 4 * i, i * 0x010101u);
  for (int y = 0; y < height; ++y) {  // bottom-up rows
    std::memcpy(&out[data_at + static_cast<size_t>(stride) * (height - 1 - y)],
                &labels[static_cast<size_t>(y) * width], static_cast<size_t>(width));
  }
  return out;
}

TEST(ViewsTest, AJointMaskPadsWithItsOwnFillOnTheImagesRandomResizeAndCrop) {
  // v2's RandomResize(10, 70), a flip and RandomCrop(48, pad_if_needed=True) with fill 0 for
  // the image and 255 for the mask (torchvision's segmentation reference): the label view
  // shares the image's draws, and its padding is 255 exactly where the image's is 0.
  const int w = 60, h = 40;
  std::vector<uint8_t> labels(static_cast<size_t>(w) * h);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) labels[static_cast<size_t>(y) * w + x] = 1 + (x + 3 * y) % 200;
  }
  const std::vector<uint8_t> bmp = GrayBmp(w, h, labels);
  TransformStep resize = transforms::Resize(10);
  resize.get<ResizeParams>().size_max = 70;
  TransformStep crop = transforms::RandomCrop(48);
  crop.get<RandomCropParams>().pad_if_needed = true;
  std::vector<LoaderOptions::View> options(2);
  options[0].transform = {resize, transforms::RandomHorizontalFlip(), crop};
  std::fill_n(crop.get<RandomCropParams>().fill, 3, 255.f);
  for (const TransformStep& step : {resize, transforms::RandomHorizontalFlip(), crop}) {
    options[1].transform.push_back(transforms::WithInterpolation(step, Interpolation::kNearest));
  }
  options[1].mask = options[1].share_geometry = options[1].tensor_nearest = true;
  for (LoaderOptions::View& v : options) {
    v.dtype = DType::kUint8;
    v.geometry = true;
  }
  absl::StatusOr<ViewSet> set = ViewSet::Create(options, Layout::kCHW);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->mask_fill, (std::vector<int>{0, 255}));
  LoaderOptions loader_options;
  loader_options.fast_decode = false;
  std::unique_ptr<ImageDecoder> decoder = MakeDecoder(loader_options);
  RenderState state;
  std::vector<double> row_storage(set->row_bytes / sizeof(double) + 1);
  auto* row = reinterpret_cast<uint8_t*>(row_storage.data());
  std::vector<int> sides;
  int padded = 0;
  const size_t n = 48 * 48;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    ASSERT_TRUE(DecodeViews(*decoder, OneFile(bmp), *set, seed, state, row).ok());
    const double* g0 = reinterpret_cast<const double*>(row + set->geometry_offsets[0]);
    const double* g1 = reinterpret_cast<const double*>(row + set->geometry_offsets[1]);
    for (int f = 0; f < kGeometryFields; ++f) EXPECT_EQ(g0[f], g1[f]) << "field " << f;
    // The drawn short side (the source's height): 48 output pixels span (bottom - top) rows.
    const int side = static_cast<int>(std::lround(48.0 * h / (g0[kGeoBottom] - g0[kGeoTop])));
    EXPECT_GE(side, 10);
    EXPECT_LT(side, 70);
    sides.push_back(side);
    const uint8_t* image = row + set->offsets[0];
    const uint8_t* mask = row + set->offsets[1];
    bool any_pad = false;
    for (size_t i = 0; i < n; ++i) {
      const bool pad = image[i] == 0 && image[n + i] == 0 && image[2 * n + i] == 0;
      any_pad |= pad;
      if (pad) {
        ASSERT_EQ(mask[i], 255) << "seed " << seed << " pixel " << i;
      } else {
        ASSERT_GE(mask[i], 1) << "seed " << seed << " pixel " << i;
        ASSERT_LE(mask[i], 200) << "seed " << seed << " pixel " << i;
      }
      ASSERT_EQ(mask[n + i], mask[i]);  // replicated again (the marker channel is gone)
      ASSERT_EQ(mask[2 * n + i], mask[i]);
    }
    padded += any_pad;
  }
  std::sort(sides.begin(), sides.end());
  EXPECT_GT(std::unique(sides.begin(), sides.end()) - sides.begin(), 10);
  EXPECT_GT(padded, 5);  // short sides below 48 pad
  EXPECT_LT(padded, 35);
}

TEST(ViewsTest, AJointMaskPadsWithOneIntegerFillOnly) {
  const auto why = [](std::vector<TransformStep> steps) {
    int fill = -1;
    const std::string error = TakeMaskFill(&steps, &fill);
    return error.empty() ? "fill " + std::to_string(fill) : error;
  };
  TransformStep crop = transforms::RandomCrop(32, 0, 4);
  EXPECT_EQ(why({crop}), "fill 0");
  std::fill_n(crop.get<RandomCropParams>().fill, 3, 255.f);
  EXPECT_EQ(why({crop}), "fill 255");
  EXPECT_EQ(why({transforms::CenterCrop(40), crop}),
            "a label image that pads with 255 cannot also pad with 0 (CenterCrop)");
  TransformStep other = crop;
  std::fill_n(other.get<RandomCropParams>().fill, 3, 7.f);
  EXPECT_EQ(why({crop, other}), "a label image pads with one fill, not 255 and 7");
  other.get<RandomCropParams>().fill[1] = 3.f;
  EXPECT_EQ(why({other}), "a label image pads with one integer level in 0..255, not (7, 3, 7)");
}

TEST(ViewsTest, TensorNearestIsForLabelImagesOnly) {
  std::vector<LoaderOptions::View> options(2);
  for (LoaderOptions::View& view : options) {
    view.dtype = DType::kUint8;
    view.transform = {transforms::CenterCrop(16)};
  }
  options[1].tensor_nearest = true;
  absl::StatusOr<ViewSet> set = ViewSet::Create(options, Layout::kCHW);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.status().message(), "view 1: tensor_nearest is for label images (mask) only");
  options[1].mask = true;
  set = ViewSet::Create(options, Layout::kCHW);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->tensor_nearest, (std::vector<bool>{false, true}));
}

TEST(ViewsTest, AViewSharingViewZerosGeometryDrawsItsCropsAndFlips) {
  const uint8_t red[3] = {250, 20, 10};
  const int src_w = 90, src_h = 60;
  const std::vector<uint8_t> ppm = RectanglePpm(src_w, src_h, 25, 10, 65, 50, red);
  // View 0: the photo's chain (bilinear, colour, float output). View 1: the same geometric
  // steps, nearest, sharing view 0's draws (a label image's). View 2: the same as view 1 but
  // drawing its own.
  const std::vector<TransformStep> geometric = {transforms::RandomResizedCrop(24, 32, 0.2, 1.0),
                                                transforms::RandomHorizontalFlip(),
                                                transforms::RandomVerticalFlip()};
  std::vector<LoaderOptions::View> options(3);
  options[0].transform = geometric;
  options[0].transform.push_back(transforms::ColorJitter(0.4, 0.4));
  options[0].transform.push_back(transforms::ToTensor());
  for (const TransformStep& step : geometric) {
    options[1].transform.push_back(
        transforms::WithInterpolation(step, Interpolation::kNearest));
  }
  options[2].transform = options[1].transform;
  options[1].share_geometry = true;
  for (LoaderOptions::View& v : options) {
    v.dtype = v.transform.back().kind() == TransformStep::Kind::kToTensor ? DType::kFloat32
                                                                            : DType::kUint8;
    v.geometry = true;
  }
  absl::StatusOr<ViewSet> set = ViewSet::Create(options, Layout::kHWC);
  ASSERT_TRUE(set.ok()) << set.status();
  LoaderOptions loader_options;
  loader_options.fast_decode = false;
  std::unique_ptr<ImageDecoder> decoder = MakeDecoder(loader_options);
  RenderState state;
  std::vector<double> row_storage(set->row_bytes / sizeof(double) + 1);
  auto* row = reinterpret_cast<uint8_t*>(row_storage.data());
  int differ = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    ASSERT_TRUE(DecodeViews(*decoder, OneFile(ppm), *set, seed, state, row).ok());
    const double* g0 = reinterpret_cast<const double*>(row + set->geometry_offsets[0]);
    const double* g1 = reinterpret_cast<const double*>(row + set->geometry_offsets[1]);
    const double* g2 = reinterpret_cast<const double*>(row + set->geometry_offsets[2]);
    for (int f = 0; f < kGeometryFields; ++f) EXPECT_EQ(g0[f], g1[f]) << "field " << f;
    differ += !std::equal(g0, g0 + kGeometryFields, g2);
    // Where view 1 (nearest: exact colours) is red, view 0 is red up to the bilinear edge
    // and the colour jitter: its red channel dominates at every pixel whose 3x3 neighbourhood
    // in view 1 is all red, and is grey where that neighbourhood is all black.
    const auto* labels = row + set->offsets[1];
    const auto* photo = reinterpret_cast<const float*>(row + set->offsets[0]);
    int checked = 0;
    for (int y = 1; y < 23; ++y) {
      for (int x = 1; x < 31; ++x) {
        bool all_red = true, all_black = true;
        for (int dy = -1; dy <= 1; ++dy) {
          for (int dx = -1; dx <= 1; ++dx) {
            const uint8_t level = labels[((y + dy) * 32 + (x + dx)) * 3];
            all_red &= level == red[0];
            all_black &= level == 0;
          }
        }
        const float* px = photo + (y * 32 + x) * 3;
        if (all_red) {
          EXPECT_GT(px[0], px[1] + 0.2f) << "seed " << seed << " at " << x << "," << y;
          ++checked;
        } else if (all_black) {
          // Contrast jitter blends black toward the mean grey: grey, never red.
          EXPECT_LT(std::abs(px[0] - px[1]), 0.05f) << "seed " << seed << " at " << x << "," << y;
          ++checked;
        }
      }
    }
    EXPECT_GT(checked, 300);
  }
  EXPECT_GT(differ, 5);  // a view that does not share draws its own crops
}

TEST(ViewsTest, SharingViewZerosGeometryIsRefusedUnlessItDrawsAlike) {
  std::vector<LoaderOptions::View> options(2);
  options[0].transform = {transforms::RandomResizedCrop(24), transforms::RandomHorizontalFlip()};
  options[1].share_geometry = true;
  options[0].dtype = options[1].dtype = DType::kUint8;
  const auto error = [&]() {
    absl::StatusOr<ViewSet> set = ViewSet::Create(options, Layout::kCHW);
    return set.ok() ? std::string() : std::string(set.status().message());
  };
  options[1].transform = {transforms::RandomResizedCrop(32), transforms::RandomHorizontalFlip()};
  EXPECT_NE(error().find("view 1: cannot share view 0's geometric draws: its step 0 "
                         "(RandomResizedCrop)"), std::string::npos) << error();
  options[1].transform = {transforms::RandomResizedCrop(24), transforms::RandomHorizontalFlip(),
                          transforms::ColorJitter(0.4)};
  EXPECT_NE(error().find("(ColorJitter) draws on its own"), std::string::npos) << error();
  options[1].transform = {transforms::RandomResizedCrop(24)};
  EXPECT_NE(error().find("it has 1 geometric steps, view 0 has 2"), std::string::npos) << error();
  options[1].transform = {transforms::RandomResizedCrop(24), transforms::RandomHorizontalFlip()};
  EXPECT_EQ(error(), "");
  // View 0's output steps are no geometric steps: a label view beside a normalized image.
  options[0].transform.push_back(transforms::ToTensor());
  options[0].transform.push_back(transforms::Normalize({0.5f, 0.5f, 0.5f}, {0.2f, 0.2f, 0.2f}));
  options[0].dtype = DType::kFloat32;
  EXPECT_EQ(error(), "");
  options[0].share_geometry = true;
  EXPECT_NE(error().find("view 0 draws its own geometry"), std::string::npos) << error();
}

// Every byte of `path`.
std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::vector<uint8_t> out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  uint8_t buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.insert(out.end(), buf, buf + n);
  std::fclose(f);
  return out;
}

TEST(ViewsTest, OneRecordingViewDecodesThroughTheDecodersOwnPathAlike) {
  // A single view (a Joint's image) takes the decoder's region-of-interest path; its pixels and
  // record equal those of the same chain as view 0 of a full-decode view set.
  LoaderOptions::View view;
  view.transform = {transforms::RandomResizedCrop(24, 32, 0.2, 1.0),
                    transforms::RandomHorizontalFlip(), transforms::RandomVerticalFlip()};
  view.dtype = DType::kUint8;
  view.geometry = true;
  LoaderOptions::View other = view;
  other.transform = {transforms::CenterCrop(16)};
  absl::StatusOr<ViewSet> one = ViewSet::Create({view}, Layout::kCHW);
  absl::StatusOr<ViewSet> two = ViewSet::Create({view, other}, Layout::kCHW);
  ASSERT_TRUE(one.ok() && two.ok());
  const std::vector<Sample> jpegs = WriteJpegDataset(MakeTempDir(), 1);
  const uint8_t green[3] = {10, 240, 30};
  const std::vector<std::vector<uint8_t>> sources = {ReadBytes(jpegs[0].path),
                                                     RectanglePpm(70, 50, 10, 5, 40, 30, green)};
  LoaderOptions loader_options;
  loader_options.fast_decode = false;
  std::unique_ptr<ImageDecoder> decoder = MakeDecoder(loader_options);
  RenderState state;
  std::vector<double> a(one->row_bytes / sizeof(double) + 1);
  std::vector<double> b(two->row_bytes / sizeof(double) + 1);
  auto* row_a = reinterpret_cast<uint8_t*>(a.data());
  auto* row_b = reinterpret_cast<uint8_t*>(b.data());
  for (const std::vector<uint8_t>& bytes : sources) {
    ASSERT_FALSE(bytes.empty());
    for (uint64_t seed = 0; seed < 6; ++seed) {
      ASSERT_TRUE(DecodeViews(*decoder, OneFile(bytes), *one, seed, state, row_a).ok());
      ASSERT_TRUE(DecodeViews(*decoder, OneFile(bytes), *two, seed, state, row_b).ok());
      EXPECT_EQ(std::memcmp(row_a, row_b, one->pipelines[0].SampleBytes()), 0) << "seed " << seed;
      EXPECT_EQ(std::memcmp(row_a + one->geometry_offsets[0], row_b + two->geometry_offsets[0],
                            kGeometryFields * sizeof(double)), 0) << "seed " << seed;
    }
  }
}

}  // namespace
}  // namespace ringloader
