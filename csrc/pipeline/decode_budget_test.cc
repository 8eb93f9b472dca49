// The memory budget covers decode buffers (memory/decode_budget.h): the ledger's rules, the
// decoders' charges against what they really allocate, and a loader whose budget is smaller
// than one image's need failing that sample (by name, with the bytes) instead of allocating.

#include "memory/decode_budget.h"

#include <gtest/gtest.h>
#include <libdeflate.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "decode/image_decoder.h"
#include "ringloader/ringloader.h"
#include "testing/jpeg_fixtures.h"
#include "transform/image_transform.h"

namespace ringloader {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr uint64_t kMiB = uint64_t{1} << 20;

void Put32(Bytes& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
}

void PutChunk(Bytes& out, const char* type, const Bytes& data) {
  Put32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  Put32(out, libdeflate_crc32(0, out.data() + start, data.size() + 4));
}

// A w x h PNG (not interlaced) of `depth`-bit samples of colour `type`, filter 0 rows of a
// compressible gradient, its IDAT data split into 64 KiB chunks.
Bytes Png(int w, int h, int depth, int type) {
  const int channels = type == 2 ? 3 : type == 4 ? 2 : type == 6 ? 4 : 1;
  const size_t row = (static_cast<size_t>(w) * channels * depth + 7) / 8;
  Bytes raw((row + 1) * static_cast<size_t>(h));
  for (int y = 0; y < h; ++y) {
    uint8_t* line = raw.data() + (row + 1) * static_cast<size_t>(y);
    line[0] = 0;
    for (size_t x = 0; x < row; ++x) line[1 + x] = static_cast<uint8_t>(x * 7 + y);
  }
  libdeflate_compressor* c = libdeflate_alloc_compressor(1);
  Bytes z(libdeflate_zlib_compress_bound(c, raw.size()));
  z.resize(libdeflate_zlib_compress(c, raw.data(), raw.size(), z.data(), z.size()));
  libdeflate_free_compressor(c);
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  Bytes ihdr;
  Put32(ihdr, static_cast<uint32_t>(w));
  Put32(ihdr, static_cast<uint32_t>(h));
  ihdr.insert(ihdr.end(), {static_cast<uint8_t>(depth), static_cast<uint8_t>(type), 0, 0, 0});
  PutChunk(out, "IHDR", ihdr);
  if (type == 3) {
    Bytes plte(256 * 3);
    for (size_t i = 0; i < plte.size(); ++i) plte[i] = static_cast<uint8_t>(i * 5);
    PutChunk(out, "PLTE", plte);
  }
  for (size_t at = 0; at < z.size(); at += 65536) {
    PutChunk(out, "IDAT", Bytes(z.begin() + at, z.begin() + std::min(z.size(), at + 65536)));
  }
  PutChunk(out, "IEND", {});
  return out;
}

// A binary PPM (P6) and a bottom-up 24-bit BMP of a w x h gradient.
Bytes Ppm(int w, int h) {
  const std::string head = absl::StrCat("P6\n", w, " ", h, "\n255\n");
  Bytes out(head.begin(), head.end());
  for (int i = 0; i < w * h * 3; ++i) out.push_back(static_cast<uint8_t>(i * 7));
  return out;
}

Bytes Bmp(int w, int h) {
  const uint32_t row = (static_cast<uint32_t>(w) * 3 + 3) & ~3u, data = row * static_cast<uint32_t>(h);
  Bytes out = {'B', 'M'};
  for (uint32_t v : {54 + data, 0u, 54u, 40u}) testing::PutLe(&out, v, 4);
  testing::PutLe(&out, static_cast<uint32_t>(w), 4);
  testing::PutLe(&out, static_cast<uint32_t>(h), 4);
  testing::PutLe(&out, 1, 2);
  testing::PutLe(&out, 24, 2);
  for (uint32_t v : {0u, data, 2835u, 2835u, 0u, 0u}) testing::PutLe(&out, v, 4);
  for (uint32_t i = 0; i < data; ++i) out.push_back(static_cast<uint8_t>(i * 5));
  return out;
}

TransformPipeline Train(int size) {
  RandomResizedCropParams crop;
  crop.size_h = crop.size_w = size;
  ToTensorParams tensor;
  return *TransformPipeline::Create({crop, tensor}, DType::kFloat32, Layout::kCHW, false);
}

TEST(DecodeBudget, ANeedLargerThanTheBudgetIsRefusedAtOnceWithTheBytes) {
  DecodeBudget budget(100 * kMiB, kMiB);
  absl::StatusOr<DecodeBudget::Grant> grant = budget.Acquire(200 * kMiB, "PNG image 13000 x 13000");
  ASSERT_TRUE(absl::IsResourceExhausted(grant.status())) << grant.status();
  EXPECT_NE(grant.status().message().find("PNG image 13000 x 13000 needs 209715200 bytes (200.0 MiB)"),
            std::string::npos)
      << grant.status();
  EXPECT_NE(grant.status().message().find("Raise max_memory="), std::string::npos);
  EXPECT_EQ(budget.counts().refused, 1);
  // Within the allowance nothing is charged; within the budget it is.
  ASSERT_TRUE(budget.Acquire(kMiB, "small").ok());
  EXPECT_EQ(budget.counts().grants, 0);
  {
    absl::StatusOr<DecodeBudget::Grant> fits = budget.Acquire(60 * kMiB, "large");
    ASSERT_TRUE(fits.ok());
    EXPECT_EQ(budget.counts().decode_bytes, 60 * kMiB);
  }
  EXPECT_EQ(budget.counts().decode_bytes, 0u);
}

TEST(DecodeBudget, SlotsTakeTheirShareFirst) {
  DecodeBudget budget(100 * kMiB, kMiB);
  budget.AddSlotBytes(70 * kMiB);
  absl::StatusOr<DecodeBudget::Grant> grant = budget.Acquire(40 * kMiB, "PNG image 4000 x 3500");
  ASSERT_TRUE(absl::IsResourceExhausted(grant.status())) << grant.status();
  EXPECT_NE(grant.status().message().find("of which 70.0 MiB are batch slots"), std::string::npos) << grant.status();
  EXPECT_NE(grant.status().message().find("at least 110.0 MiB"), std::string::npos) << grant.status();
  EXPECT_TRUE(budget.Acquire(30 * kMiB, "fits beside the slots").ok());
}

// A slot that does not fit beside the grants in force waits for them (and goes before decodes
// waiting in line); a waiting decode that can no longer fit beside the slots is refused, not
// left waiting.
TEST(DecodeBudget, ASlotWaitsForLargeDecodesAndAWaiterThatNoLongerFitsIsRefused) {
  DecodeBudget budget(100 * kMiB, kMiB);
  absl::StatusOr<DecodeBudget::Grant> held = budget.Acquire(60 * kMiB, "first");
  ASSERT_TRUE(held.ok());
  std::atomic<bool> second_done{false}, slot_done{false};
  absl::Status second;
  std::thread waiter([&] {
    second = budget.Acquire(50 * kMiB, "second").status();
    second_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::thread slot([&] {
    budget.AddSlotBytes(60 * kMiB);
    slot_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(second_done.load());  // 60 + 50 > 100: it waits
  EXPECT_FALSE(slot_done.load());    // 60 + 60 > 100: the slot waits for the first decode
  held->Release();
  slot.join();
  waiter.join();
  EXPECT_TRUE(absl::IsResourceExhausted(second)) << second;  // 50 never fits beside 60 of slots
  const DecodeBudget::Counts c = budget.counts();
  EXPECT_EQ(c.slot_bytes, 60 * kMiB);
  EXPECT_EQ(c.slot_waits, 1);
  EXPECT_LE(c.peak_total_bytes, 100 * kMiB);
}

// Many threads asking for large grants: each one within the budget is served (in turn), and
// what is held never exceeds the budget.
TEST(DecodeBudget, ConcurrentLargeNeedsWaitTheirTurnAndStayWithinTheBudget) {
  DecodeBudget budget(100 * kMiB, kMiB);
  budget.AddSlotBytes(10 * kMiB);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const uint64_t need = (20 + 7 * ((t + i) % 10)) * kMiB;  // 20..83 MiB, all fit alone
        absl::StatusOr<DecodeBudget::Grant> grant = budget.Acquire(need, "image");
        if (!grant.ok()) continue;
        ++ok;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const DecodeBudget::Counts c = budget.counts();
  EXPECT_EQ(ok.load(), 160);
  EXPECT_EQ(c.refused, 0);
  EXPECT_GT(c.waits, 0);
  EXPECT_LE(c.peak_total_bytes, 100 * kMiB);
  EXPECT_EQ(c.decode_bytes, 0u);
}

// What a decoder charges covers what it allocates: an unbudgeted decoder's grow-only buffers
// after the same decode (what it allocated, at least) are no larger than the charge.
TEST(DecodeBudget, DecodersChargeAtLeastWhatTheyAllocate) {
  struct Case {
    std::string name;
    Bytes file;
  };
  std::vector<Case> cases = {
      {"png rgb8", Png(1500, 1100, 8, 2)},      {"png rgba8", Png(1500, 1100, 8, 6)},
      {"png gray8", Png(1500, 1100, 8, 0)},     {"png palette8", Png(1500, 1100, 8, 3)},
      {"png rgb16", Png(1200, 900, 16, 2)},     {"png gray+alpha8", Png(1500, 1100, 8, 4)},
      {"png gray1", Png(3000, 2000, 1, 0)},     {"ppm", Ppm(1500, 1100)},
      {"bmp", Bmp(1500, 1100)},
  };
  for (bool progressive : {false, true}) {
    testing::JpegFlavor f;
    f.width = 2400;
    f.height = 1800;
    f.progressive = progressive;
    f.h_samp = f.v_samp = progressive ? 1 : 2;
    cases.push_back({progressive ? "jpeg progressive 4:4:4" : "jpeg baseline 4:2:0", testing::EncodeJpeg(f)});
  }
  for (const Case& c : cases) {
    for (int size : {64, 1024}) {
      SCOPED_TRACE(absl::StrCat(c.name, ", RandomResizedCrop(", size, ")"));
      const TransformPipeline p = Train(size);
      std::vector<uint8_t> out(p.SampleBytes());
      DecodeBudget budget(8ull << 30, /*allowance=*/0);  // every decode charged
      ImageDecoder charged;
      charged.set_memory_budget(&budget);
      SampleRng rng1(7);
      ASSERT_TRUE(charged.DecodeInto(c.file.data(), c.file.size(), p, rng1, out.data()).ok());
      ImageDecoder plain;
      SampleRng rng2(7);
      ASSERT_TRUE(plain.DecodeInto(c.file.data(), c.file.size(), p, rng2, out.data()).ok());
      const DecodeBudget::Counts counts = budget.counts();
      EXPECT_EQ(counts.grants, 1);
      EXPECT_GE(counts.peak_decode_bytes, plain.RetainedBytes());
      if (c.name.rfind("jpeg", 0) != 0) {
        // Not wildly more either: within twice the buffers, plus the slack for the image stage
        // (three output images, 9 MiB at 1024 x 1024) and the libraries' tables.
        EXPECT_LE(counts.peak_decode_bytes, 2 * plain.RetainedBytes() + 12 * kMiB);
      } else if (c.name.find("progressive") != std::string::npos) {
        // libjpeg keeps every coefficient of a progressive file (2 bytes a sample) beside them.
        EXPECT_GE(counts.peak_decode_bytes, plain.RetainedBytes() + uint64_t{2400} * 1800 * 3 * 2);
      }
      EXPECT_EQ(counts.decode_bytes, 0u);
      EXPECT_LE(charged.RetainedBytes(), 256u << 10);  // trimmed: a few rows and tables are kept
    }
  }
}

TEST(DecodeBudget, ADecoderKeepsAtMostTheAllowanceBetweenImages) {
  const Bytes big = Png(3000, 2500, 8, 2);  // 22.5 MB decoded
  const TransformPipeline p = Train(224);
  std::vector<uint8_t> out(p.SampleBytes());
  DecodeBudget budget(1ull << 30);
  ImageDecoder decoder;
  decoder.set_memory_budget(&budget);
  SampleRng rng(1);
  ASSERT_TRUE(decoder.DecodeInto(big.data(), big.size(), p, rng, out.data()).ok());
  EXPECT_LE(decoder.RetainedBytes(), kDecodeAllowanceBytes);
  EXPECT_EQ(budget.counts().grants, 1);
  ImageDecoder unbudgeted;  // keeps the image's buffers
  ASSERT_TRUE(unbudgeted.DecodeInto(big.data(), big.size(), p, rng, out.data()).ok());
  EXPECT_GT(unbudgeted.RetainedBytes(), kDecodeAllowanceBytes);
}

// N decode threads on large images under a budget that holds about one and a half of them:
// every image decodes (they take turns), and the decoders never hold more than the budget.
TEST(DecodeBudget, DecodeThreadsTogetherStayWithinTheBudget) {
  const Bytes big = Png(2500, 2000, 8, 2);  // 15 MB decoded
  const TransformPipeline p = Train(224);
  DecodeBudget probe(1ull << 30, 0);
  {
    ImageDecoder d;
    d.set_memory_budget(&probe);
    std::vector<uint8_t> out(p.SampleBytes());
    SampleRng rng(3);
    ASSERT_TRUE(d.DecodeInto(big.data(), big.size(), p, rng, out.data()).ok());
  }
  const uint64_t need = probe.counts().peak_decode_bytes;
  DecodeBudget budget(need * 3 / 2, /*allowance=*/kMiB);
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      ImageDecoder d;
      d.set_memory_budget(&budget);
      std::vector<uint8_t> out(p.SampleBytes());
      for (int i = 0; i < 3; ++i) {
        SampleRng rng(static_cast<uint64_t>(t * 10 + i));
        if (d.DecodeInto(big.data(), big.size(), p, rng, out.data()).ok()) ++ok;
        EXPECT_LE(d.RetainedBytes(), kMiB);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const DecodeBudget::Counts c = budget.counts();
  EXPECT_EQ(ok.load(), 12);
  EXPECT_EQ(c.refused, 0);
  EXPECT_GT(c.waits, 0);
  EXPECT_LE(c.peak_decode_bytes, budget.total());  // two never fit: one at a time
}

// A loader whose max_memory cannot hold one image's decode fails that sample, naming the file
// and the bytes, under on_error like any bad sample; the other samples decode.
TEST(DecodeBudget, LoaderFailsTheSampleThatDoesNotFitItsBudget) {
  const std::string dir = testing::MakeTempDir();
  std::vector<Sample> samples = testing::WriteJpegDataset(dir, 6);
  const std::string big_path = dir + "/class_0/big.png";
  testing::WriteFile(big_path, Png(4000, 3000, 8, 2));  // 36 MB decoded
  samples.insert(samples.begin() + 3, Sample(big_path, 0));
  LoaderOptions o;
  o.batch_size = 7;
  o.num_workers = 2;
  o.prefetch_batches = 1;
  o.shuffle = false;
  ResizeParams resize;
  resize.size_h = resize.size_w = 32;
  ToTensorParams tensor;
  o.transform = {resize, tensor};
  o.dtype = DType::kFloat32;
  o.max_memory = 24 * kMiB;  // slots are tiny: about 24 MiB left for decoding, under the need
  for (ErrorPolicy policy : {ErrorPolicy::kSkip, ErrorPolicy::kRaise}) {
    SCOPED_TRACE(static_cast<int>(policy));
    o.on_error = policy;
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(samples, o);
    ASSERT_TRUE(loader.ok()) << loader.status();
    ASSERT_TRUE((*loader)->StartEpoch(0).ok());
    absl::StatusOr<Batch> batch = (*loader)->Next();
    const LoaderStats stats = (*loader)->Stats();
    ASSERT_EQ(stats.errors, 1);
    const std::string& error = stats.last_error;
    EXPECT_NE(error.find(big_path), std::string::npos) << error;
    EXPECT_NE(error.find("PNG image 4000 x 3000 needs "), std::string::npos) << error;
    EXPECT_NE(error.find("more than the memory budget leaves for decoding: max_memory 24.0 MiB"),
              std::string::npos) << error;
    if (policy == ErrorPolicy::kSkip) {
      ASSERT_TRUE(batch.ok()) << batch.status();
      EXPECT_EQ(batch->size(), 6);
    } else {
      ASSERT_FALSE(batch.ok());
      EXPECT_TRUE(IsSampleError(batch.status())) << batch.status();
      EXPECT_NE(batch.status().message().find(big_path), std::string::npos) << batch.status();
    }
  }
  // With room for it, the same image decodes.
  o.max_memory = 256 * kMiB;
  o.on_error = ErrorPolicy::kRaise;
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok());
  ASSERT_TRUE((*loader)->StartEpoch(0).ok());
  absl::StatusOr<Batch> batch = (*loader)->Next();
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->size(), 7);
}

// Large images that fit the budget one or two at a time, on more decode threads than fit: they
// take turns (and the queued next epoch's decoders share the same budget); none fails, nothing
// hangs.
TEST(DecodeBudget, LoaderDecodesLargeImagesInTurnOnEveryThread) {
  const std::string dir = testing::MakeTempDir();
  const Bytes png = Png(3000, 2500, 8, 2);  // 22.5 MB decoded: charged
  std::vector<Sample> samples;
  for (int i = 0; i < 8; ++i) {
    const std::string path = absl::StrCat(dir, "/c/big_", i, ".png");
    testing::WriteFile(path, png);
    samples.emplace_back(path, i % 2);
  }
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 4;
  o.prefetch_batches = 2;
  o.on_error = ErrorPolicy::kRaise;
  RandomResizedCropParams crop;
  crop.size_h = crop.size_w = 32;
  ToTensorParams tensor;
  o.transform = {crop, tensor};
  o.dtype = DType::kFloat32;
  o.max_memory = 40 * kMiB;  // about one and a half images beside the slots
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(samples, o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    ASSERT_TRUE((*loader)->StartEpoch(epoch).ok());
    ASSERT_TRUE((*loader)->QueueEpoch(epoch + 1).ok());
    int rows = 0;
    while (true) {
      absl::StatusOr<Batch> batch = (*loader)->Next(60.0);
      if (IsEndOfEpoch(batch.status())) break;
      ASSERT_TRUE(batch.ok()) << batch.status();
      rows += batch->size();
    }
    EXPECT_EQ(rows, 8);
  }
  EXPECT_EQ((*loader)->Stats().errors, 0);
}

}  // namespace
}  // namespace ringloader
