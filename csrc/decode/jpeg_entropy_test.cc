#include "decode/jpeg_entropy.h"

#include <csetjmp>
#include <cstdint>
#include <cstring>
#include <variant>
#include <string>
#include <vector>

#include <jpeglib.h>

#include "decode/jpeg_decoder.h"
#include "gtest/gtest.h"
#include "testing/jpeg_fixtures.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace ringloader {
namespace {

using decode_internal::BaselineEntropy;
using testing::EncodeJpeg;
using testing::JpegFlavor;
using Color = JpegFlavor::Color;

struct RawError {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
};

void RawErrorExit(j_common_ptr cinfo) { std::longjmp(reinterpret_cast<RawError*>(cinfo->err)->jump, 1); }
void Quiet(j_common_ptr, int) {}

/// A plain libjpeg decode to `space` at DCT scale num/8, every row (own: with the project's
/// entropy decoder installed). Returns false when the decode failed; `installed` and `bailed`
/// say what the project's decoder did.
struct RawResult {
  bool ok = false;
  bool installed = false;
  bool bailed = false;
  bool resumed = false;
  std::vector<uint8_t> pixels;
};

RawResult RawDecode(const std::vector<uint8_t>& jpeg, bool own, int num = 8, int skip = 0,
                    std::vector<decode_internal::ResumePoint>* record = nullptr,
                    std::vector<decode_internal::ResumePoint>* resume = nullptr,
                    BaselineEntropy* reused = nullptr, JDIMENSION crop_x = 0, JDIMENSION crop_w = 0) {
  RawResult r;
  jpeg_decompress_struct cinfo;
  RawError err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = RawErrorExit;
  err.pub.emit_message = Quiet;
  jpeg_create_decompress(&cinfo);
  BaselineEntropy own_entropy;
  BaselineEntropy& entropy = reused != nullptr ? *reused : own_entropy;
  decode_internal::ProgressiveMonitor progress(&entropy);
  if (setjmp(err.jump) == 0) {
    jpeg_mem_src(&cinfo, jpeg.data(), jpeg.size());
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK
                                ? JCS_CMYK
                                : JCS_RGB;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.scale_num = static_cast<unsigned>(num);
    cinfo.scale_denom = 8;
    progress.Arm(&cinfo, own);
    jpeg_start_decompress(&cinfo);
    r.installed = progress.installed;
    if (own && !cinfo.progressive_mode) r.installed = entropy.Install(&cinfo);
    if (r.installed && record != nullptr) entropy.Record(record);
    uint64_t first_col = 0;
    uint64_t last_col = ~uint64_t{0};
    if (crop_w > 0 && crop_x + crop_w <= cinfo.output_width && crop_w < cinfo.output_width) {
      jpeg_crop_scanline(&cinfo, &crop_x, &crop_w);
      decode_internal::CropColumns(&cinfo, crop_x, &first_col, &last_col);
    }
    if (r.installed && resume != nullptr) entropy.Resume(resume, first_col, last_col);
    // Rows skipped at the top run the entropy decoder without a coefficient buffer.
    if (skip > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(skip));
    const size_t stride = static_cast<size_t>(cinfo.output_width) * cinfo.output_components;
    r.pixels.resize(stride * cinfo.output_height);
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW row = r.pixels.data() + stride * cinfo.output_scanline;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    r.ok = true;
  }
  r.bailed = entropy.bailed();
  r.resumed = entropy.resumed();
  jpeg_destroy_decompress(&cinfo);
  return r;
}

/// RandomResizedCrop(size) to uint8 CHW: a training crop, rows above and below it skipped.
TransformPipeline RandomCrop(int size) {
  TransformStep rrc(TransformStep::Kind::kRandomResizedCrop);
  std::visit(
      [size](auto& params) {
        if constexpr (requires { params.size_h; }) params.size_h = params.size_w = size;
      },
      rrc.params);
  return *TransformPipeline::Create({rrc}, DType::kUint8, Layout::kCHW);
}

std::vector<JpegFlavor> Layouts() {
  std::vector<JpegFlavor> out;
  auto add = [&](int w, int h, int hs, int vs, Color c, int quality, int restart) {
    JpegFlavor f;
    f.width = w;
    f.height = h;
    f.h_samp = hs;
    f.v_samp = vs;
    f.color = c;
    f.quality = quality;
    f.restart_interval = restart;
    f.seed = static_cast<uint64_t>(out.size() + 3);
    out.push_back(f);
  };
  for (int q : {30, 90, 100}) {
    add(173, 97, 2, 2, Color::kYCbCr, q, 0);   // 4:2:0, odd size
    add(160, 64, 2, 1, Color::kYCbCr, q, 0);   // 4:2:2
    add(75, 61, 1, 1, Color::kYCbCr, q, 0);    // 4:4:4
    add(99, 40, 4, 1, Color::kYCbCr, q, 0);    // 4:1:1
    add(48, 83, 1, 2, Color::kYCbCr, q, 0);    // 4:4:0
    add(81, 77, 1, 1, Color::kGray, q, 0);     // one component: an MCU is a block
    add(64, 40, 1, 1, Color::kCmyk, q, 0);     // four components
    add(57, 35, 2, 2, Color::kYcck, q, 0);
  }
  for (int restart : {1, 3, 7, 12}) {
    add(173, 97, 2, 2, Color::kYCbCr, 90, restart);
    add(81, 77, 1, 1, Color::kGray, 95, restart);
  }
  add(1, 1, 2, 2, Color::kYCbCr, 90, 0);
  add(1, 1, 1, 1, Color::kGray, 90, 1);
  add(600, 8, 2, 2, Color::kYCbCr, 100, 0);
  return out;
}

/// `jpeg` (encoded as `f`) decoded at scale num/8 after skipping `skip` rows by the library's
/// entropy decoder and by the project's (`reused`, or a new one): the project's takes the file
/// and gives the library's pixels.
void ExpectSamePixels(const std::vector<uint8_t>& jpeg, const JpegFlavor& f, int num, int skip,
                      BaselineEntropy* reused = nullptr, JDIMENSION crop_x = 0, JDIMENSION crop_w = 0) {
  const RawResult lib = RawDecode(jpeg, false, num, skip);
  const RawResult own = RawDecode(jpeg, true, num, skip, nullptr, nullptr, reused);
  const std::string what =
      ::testing::PrintToString(f.width) + "x" + ::testing::PrintToString(f.height) + " q" +
      ::testing::PrintToString(f.quality) + " restart " +
      ::testing::PrintToString(f.restart_interval) + (f.progressive ? " progressive" : "") +
      (f.deep_refinement ? " deep" : "") + " scale " + ::testing::PrintToString(num) + " skip " +
      ::testing::PrintToString(skip);
  ASSERT_TRUE(lib.ok) << what;
  EXPECT_TRUE(own.installed) << what;
  EXPECT_FALSE(own.bailed) << what;
  ASSERT_TRUE(own.ok) << what;
  EXPECT_TRUE(own.pixels == lib.pixels) << what;
}

TEST(BaselineEntropy, SamePixelsAsTheLibraryForEveryLayoutScaleAndSkip) {
  int compared = 0;
  for (const JpegFlavor& f : Layouts()) {
    const std::vector<uint8_t> jpeg = EncodeJpeg(f);
    for (int num : {8, 4, 2, 1}) {
      for (int skip : {0, 9}) {
        ExpectSamePixels(jpeg, f, num, skip);
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 200);
}

TEST(BaselineEntropy, OneDecoderTakesEachFilesOwnHuffmanTables) {
  // A decoder keeps its derived tables for the next file with the same ones; files whose
  // tables were made for their own image (optimize_coding) must each get theirs.
  BaselineEntropy entropy;
  int compared = 0;
  for (const JpegFlavor& layout : Layouts()) {
    for (const bool optimized : {true, false, true}) {
      JpegFlavor f = layout;
      f.optimize_coding = optimized;
      f.seed += static_cast<uint64_t>(compared);
      const std::vector<uint8_t> jpeg = EncodeJpeg(f);
      const RawResult lib = RawDecode(jpeg, false);
      const RawResult own = RawDecode(jpeg, true, 8, 0, nullptr, nullptr, &entropy);
      ASSERT_TRUE(lib.ok && own.ok && own.installed && !own.bailed) << compared;
      EXPECT_TRUE(own.pixels == lib.pixels) << f.width << "x" << f.height << " q" << f.quality
                                            << (optimized ? " optimized" : " standard tables");
      ++compared;
    }
  }
  EXPECT_GT(compared, 80);
}

TEST(BaselineEntropy, ProgressiveFilesSamePixelsAsTheLibrary) {
  // libjpeg's progression: DC first and refinement scans of interleaved components, AC bands
  // first and refined, end-of-band runs; every layout, restart intervals, scales and skips.
  BaselineEntropy entropy;  // one decoder: each scan's own tables replace the last one's
  int compared = 0;
  for (JpegFlavor f : Layouts()) {
    f.progressive = true;
    f.deep_refinement = compared % 3 == 1;
    const std::vector<uint8_t> jpeg = EncodeJpeg(f);
    for (int num : {8, 2}) {
      for (int skip : {0, 9}) {
        ExpectSamePixels(jpeg, f, num, skip, &entropy);
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 100);
}

TEST(BaselineEntropy, LeavesArithmeticFilesToTheLibrary) {
  JpegFlavor f;
  f.width = 64;
  f.height = 48;
  f.arithmetic = true;
  EXPECT_FALSE(RawDecode(EncodeJpeg(f), true).installed);
  f.progressive = true;
  EXPECT_FALSE(RawDecode(EncodeJpeg(f), true).installed);
}

/// The scan's bytes of a baseline file: after the SOS segment, up to the EOI.
size_t ScanStart(const std::vector<uint8_t>& jpeg) {
  for (size_t i = 2; i + 4 < jpeg.size();) {
    if (jpeg[i] != 0xFF) return 0;
    const int marker = jpeg[i + 1];
    const size_t len = (size_t{jpeg[i + 2]} << 8) | jpeg[i + 3];
    if (marker == 0xDA) return i + 2 + len;
    i += 2 + len;
  }
  return 0;
}

TEST(BaselineEntropy, GivesUpOnDamageItCannotJudge) {
  JpegFlavor f;
  f.width = 96;
  f.height = 64;
  const std::vector<uint8_t> clean = EncodeJpeg(f);
  const size_t scan = ScanStart(clean);
  ASSERT_GT(scan, 0u);
  // Cut in the middle of the scan, an EOI put after it: data runs out.
  std::vector<uint8_t> cut(clean.begin(), clean.begin() + static_cast<long>(scan + (clean.size() - scan) / 2));
  cut.push_back(0xFF);
  cut.push_back(0xD9);
  RawResult r = RawDecode(cut, true);
  EXPECT_TRUE(r.installed);
  EXPECT_TRUE(r.bailed);
  EXPECT_FALSE(r.ok);
  // Junk between the scan and the EOI: the library warns about it (or not) by its own reading.
  std::vector<uint8_t> junk(clean.begin(), clean.end() - 2);
  for (int i = 0; i < 20; ++i) junk.push_back(0x11);
  junk.push_back(0xFF);
  junk.push_back(0xD9);
  r = RawDecode(junk, true);
  EXPECT_TRUE(r.bailed);
  // FF FF 00 before the EOI: the library's bit reader takes it for a stuffed FF (no warning),
  // its marker reader for two extraneous bytes.
  std::vector<uint8_t> fill(clean.begin(), clean.end() - 2);
  fill.insert(fill.end(), {0xFF, 0xFF, 0x00, 0xFF, 0xD9});
  r = RawDecode(fill, true);
  EXPECT_TRUE(r.bailed);
  // Fill bytes before the EOI are a marker's: no reason to give up.
  std::vector<uint8_t> ok_fill(clean.begin(), clean.end() - 2);
  ok_fill.insert(ok_fill.end(), {0xFF, 0xFF, 0xFF, 0xD9});
  r = RawDecode(ok_fill, true);
  EXPECT_FALSE(r.bailed);
  EXPECT_TRUE(r.ok);
  // A restart marker out of order.
  f.restart_interval = 2;
  std::vector<uint8_t> rst = EncodeJpeg(f);
  for (size_t i = ScanStart(rst); i + 1 < rst.size(); ++i) {
    if (rst[i] == 0xFF && rst[i + 1] == 0xD1) {
      rst[i + 1] = 0xD3;
      break;
    }
  }
  r = RawDecode(rst, true);
  EXPECT_TRUE(r.bailed);
}

/// The decoder with the project's entropy decoder against the decoder with the library's, on
/// damaged bytes: the same status (code and message) and, where it decodes, the same output.
TEST(BaselineEntropy, DamagedFilesGetTheLibrarysVerdictAndPixels) {
  std::vector<std::vector<uint8_t>> sources;
  JpegFlavor f;
  f.width = 120;
  f.height = 88;
  sources.push_back(EncodeJpeg(f));
  f.restart_interval = 3;
  sources.push_back(EncodeJpeg(f));
  f.restart_interval = 0;
  f.color = Color::kGray;
  f.quality = 98;
  sources.push_back(EncodeJpeg(f));
  f.progressive = true;  // damage in any scan, or in the markers between them
  sources.push_back(EncodeJpeg(f));
  f.color = Color::kYCbCr;
  f.quality = 90;
  sources.push_back(EncodeJpeg(f));
  f.restart_interval = 2;
  sources.push_back(EncodeJpeg(f));
  f.restart_interval = 0;
  f.deep_refinement = true;
  sources.push_back(EncodeJpeg(f));
  const TransformPipeline p = RandomCrop(40);
  std::vector<uint8_t> out_own(p.SampleBytes()), out_lib(p.SampleBytes());
  JpegDecoder decoder;
  SampleRng chaos(11);
  int rejected = 0, decoded = 0;
  for (int iter = 0; iter < 1200; ++iter) {
    std::vector<uint8_t> bytes = sources[iter % sources.size()];
    const size_t scan = ScanStart(bytes);
    const int kind = iter % 5;
    if (kind == 4) {
      // Bytes between the scan and the EOI, fill bytes among them.
      static const std::vector<std::vector<uint8_t>> kTails = {
          {0xFF, 0xFF, 0x00}, {0xFF, 0xFF, 0xFF, 0x00, 0x12}, {0xFF, 0xFF}, {0x00}, {0xFF, 0x00}};
      const std::vector<uint8_t>& tail = kTails[static_cast<size_t>(iter / 5) % kTails.size()];
      bytes.insert(bytes.end() - 2, tail.begin(), tail.end());
    } else if (kind == 3) {
      // Truncated inside the scan, with or without an EOI after it.
      bytes.resize(scan + static_cast<size_t>(chaos.RandInt(0, static_cast<int64_t>(bytes.size() - scan))));
      if (iter % 8 == 3) bytes.insert(bytes.end(), {0xFF, 0xD9});
    } else {
      const int flips = 1 + kind * 2;  // kinds 0-2
      for (int k = 0; k < flips; ++k) {
        const size_t pos = scan + static_cast<size_t>(chaos.RandInt(0, static_cast<int64_t>(bytes.size() - scan)));
        bytes[pos] ^= static_cast<uint8_t>(1u << chaos.RandInt(0, 8));
      }
    }
    decoder.set_strict(iter % 2 == 0);
    decoder.set_fast_paths(iter % 5 != 0);
    decode_internal::SetOwnEntropyEnabled(true);
    SampleRng rng_own(iter);
    const absl::Status own = decoder.DecodeInto(bytes.data(), bytes.size(), p, rng_own, out_own.data());
    decode_internal::SetOwnEntropyEnabled(false);
    SampleRng rng_lib(iter);
    const absl::Status lib = decoder.DecodeInto(bytes.data(), bytes.size(), p, rng_lib, out_lib.data());
    ASSERT_EQ(own, lib) << "iteration " << iter;
    if (own.ok()) {
      ASSERT_TRUE(out_own == out_lib) << "iteration " << iter;
      ++decoded;
    } else {
      ++rejected;
    }
  }
  decode_internal::SetOwnEntropyEnabled(true);
  EXPECT_GT(rejected, 100);
  EXPECT_GT(decoded, 100);
}


/// Points recorded by a whole decode, then decodes that skip rows from them: the same pixels
/// as the library's decode with the same skip, for every layout (restart intervals too).
TEST(BaselineEntropy, ResumesFromRecordedPointsWithTheSamePixels) {
  int resumed = 0;
  for (const JpegFlavor& f : Layouts()) {
    const std::vector<uint8_t> jpeg = EncodeJpeg(f);
    std::vector<decode_internal::ResumePoint> points;
    const RawResult first = RawDecode(jpeg, true, 8, 0, &points);
    ASSERT_TRUE(first.ok);
    if (f.height >= 64) {
      EXPECT_GE(points.size(), 2u) << f.width << "x" << f.height;
    }
    EXPECT_LE(points.size(), static_cast<size_t>(decode_internal::ScanIndex::kMaxPointsPerScan));
    for (int num : {8, 2}) {
      const int w = (f.width * num + 7) / 8;
      // Crops (left edge, width; 0: none) at the left edge, inside, at the right edge, one
      // column, and the whole width.
      const std::pair<int, int> crops[] = {{0, 0}, {0, w / 3}, {w / 4, w / 2}, {w / 2, w - w / 2}, {w - 1, 1},
                                           {w / 3, 1}};
      for (int skip : {0, 1, 17, 40, 63, 90}) {
        if (skip * 8 / num >= f.height) continue;
        for (const auto& [x, cw] : crops) {
          if (cw <= 0 && x > 0) continue;
          const auto cx = static_cast<JDIMENSION>(x);
          const auto cwidth = static_cast<JDIMENSION>(cw);
          const RawResult lib = RawDecode(jpeg, false, num, skip * num / 8, nullptr, nullptr, nullptr, cx, cwidth);
          std::vector<decode_internal::ResumePoint> copy = points;
          const RawResult own = RawDecode(jpeg, true, num, skip * num / 8, nullptr, &copy, nullptr, cx, cwidth);
          ASSERT_TRUE(lib.ok);
          ASSERT_TRUE(own.ok) << f.width << "x" << f.height << " skip " << skip;
          EXPECT_FALSE(own.bailed);
          EXPECT_TRUE(own.pixels == lib.pixels) << f.width << "x" << f.height << " restart " << f.restart_interval
                                                << " skip " << skip << " crop " << x << "+" << cw << " at " << num;
          resumed += own.resumed;
        }
      }
    }
  }
  EXPECT_GT(resumed, 200);
}

bool SamePoint(const decode_internal::ResumePoint& a, const decode_internal::ResumePoint& b) {
  return a.mcu == b.mcu && a.offset == b.offset && a.bit == b.bit && a.next_restart == b.next_restart &&
         a.restarts_to_go == b.restarts_to_go && std::equal(a.dc, a.dc + 4, b.dc);
}

/// A decode that resumes from the first points of a scan (those a decode stopped after its
/// crop recorded) and reads on to the end continues them: the points a whole decode records.
TEST(BaselineEntropy, ContinuesThePointsOfADecodeThatStoppedEarly) {
  int continued = 0;
  for (const JpegFlavor& f : Layouts()) {
    const std::vector<uint8_t> jpeg = EncodeJpeg(f);
    std::vector<decode_internal::ResumePoint> points;
    ASSERT_TRUE(RawDecode(jpeg, true, 8, 0, &points).ok);
    if (points.size() < 3) continue;
    for (size_t keep : {size_t{1}, points.size() / 2, points.size() - 1}) {
      const int w = f.width;
      for (const auto& [x, cw] : {std::pair<int, int>{0, 0}, {w / 3, w / 3}}) {
        std::vector<decode_internal::ResumePoint> part(points.begin(), points.begin() + keep);
        const int skip = f.height / 3;
        const RawResult lib = RawDecode(jpeg, false, 8, skip, nullptr, nullptr, nullptr, x, cw);
        const RawResult own = RawDecode(jpeg, true, 8, skip, nullptr, &part, nullptr, x, cw);
        ASSERT_TRUE(lib.ok && own.ok);
        EXPECT_TRUE(own.pixels == lib.pixels) << f.width << "x" << f.height << " kept " << keep;
        // Every row was read to the end of the scan: every point is there again, the same.
        ASSERT_EQ(part.size(), points.size()) << f.width << "x" << f.height << " kept " << keep << " crop " << cw;
        for (size_t k = 0; k < points.size(); ++k) {
          EXPECT_TRUE(SamePoint(part[k], points[k])) << f.width << "x" << f.height << " point " << k;
        }
        ++continued;
      }
    }
  }
  EXPECT_GT(continued, 30);
}

/// A scan of more rows than kMaxPointsPerScan: a point on every other row, one a row (a
/// grayscale file, restart interval 7); crops resumed from them at 8/8 and 1/8 (DC alone).
TEST(BaselineEntropy, ResumesInATallScanWithPointsOnEveryOtherRow) {
  JpegFlavor f;
  f.width = 40;
  f.height = 8 * 1030;  // 1,030 MCU rows of 5 MCUs
  f.color = Color::kGray;
  f.h_samp = f.v_samp = 1;
  f.restart_interval = 7;
  const std::vector<uint8_t> jpeg = EncodeJpeg(f);
  std::vector<decode_internal::ResumePoint> points;
  ASSERT_TRUE(RawDecode(jpeg, true, 8, 0, &points).ok);
  ASSERT_EQ(points.size(), 514u);  // rows 2, 4, ..., 1028
  for (const auto& p : points) EXPECT_EQ(p.mcu % 10, 0u);
  int resumed = 0;
  for (int num : {8, 1}) {
    const int w = (f.width * num + 7) / 8;
    for (int skip : {0, 3001 * num / 8, (f.height - 9) * num / 8}) {
      for (const auto& [x, cw] : {std::pair<int, int>{0, 0}, {w - 1, 1}, {w / 2, 1}}) {
        std::vector<decode_internal::ResumePoint> copy = points;
        const RawResult lib = RawDecode(jpeg, false, num, skip, nullptr, nullptr, nullptr, x, cw);
        const RawResult own = RawDecode(jpeg, true, num, skip, nullptr, &copy, nullptr, x, cw);
        ASSERT_TRUE(lib.ok && own.ok);
        EXPECT_FALSE(own.bailed);
        EXPECT_TRUE(own.pixels == lib.pixels) << "scale " << num << " skip " << skip << " crop " << x << "+" << cw;
        resumed += own.resumed;
      }
    }
  }
  EXPECT_GE(resumed, 12);
}

/// Points on every MCU row, at its start and a few columns along it, within the bound.
TEST(BaselineEntropy, RecordsPointsAlongEachRow) {
  JpegFlavor f;
  f.width = 400;
  f.height = 96;
  f.h_samp = f.v_samp = 2;  // 16x16 MCUs: 25 columns, 6 rows
  const std::vector<uint8_t> jpeg = EncodeJpeg(f);
  std::vector<decode_internal::ResumePoint> points;
  ASSERT_TRUE(RawDecode(jpeg, true, 8, 0, &points).ok);
  std::vector<uint32_t> mcus;
  for (const auto& p : points) mcus.push_back(p.mcu);
  // Every 7th column (25 / 4 rounded up), each row; none at MCU 0, where a decode starts.
  std::vector<uint32_t> want;
  for (uint32_t row = 0; row < 6; ++row) {
    for (uint32_t col = 0; col < 25; col += 7) {
      if (row + col > 0) want.push_back(row * 25 + col);
    }
  }
  EXPECT_EQ(mcus, want);
}

TEST(BaselineEntropy, TheIndexKeepsPointsBySizeAndFingerprintWithinItsLimit) {
  decode_internal::ScanIndex index(1000);
  std::vector<decode_internal::ResumePoint> points(3), got;
  points[0].mcu = 4;
  points[1].mcu = 8;
  points[2].mcu = 12;
  EXPECT_TRUE(index.Add(7, 100, points));
  EXPECT_TRUE(index.Find(7, 100, &got));
  EXPECT_EQ(got.size(), 3u);
  EXPECT_FALSE(index.Find(7, 101, &got));  // another size: other bytes
  EXPECT_FALSE(index.Find(8, 100, &got));
  // Fewer points never replace more; more replace fewer.
  EXPECT_FALSE(index.Add(7, 100, std::vector<decode_internal::ResumePoint>(points.begin(), points.begin() + 1)));
  points.push_back(points.back());
  points.back().mcu = 16;
  EXPECT_TRUE(index.Add(7, 100, points));
  EXPECT_TRUE(index.Find(7, 100, &got));
  EXPECT_EQ(got.size(), 4u);
  // Full: a new scan is not taken.
  const uint64_t before = index.bytes();
  int taken = 0;
  for (uint64_t k = 100; k < 200; ++k) taken += index.Add(k, 100, points);
  EXPECT_LT(taken, 20);
  EXPECT_LE(index.bytes(), 1000u);
  EXPECT_GT(index.bytes(), before);
}

/// Past half its limit the index keeps a few evenly spaced points of a scan, in order.
TEST(BaselineEntropy, TheIndexThinsScansPastHalfItsLimit) {
  const size_t n = 100;
  decode_internal::ScanIndex index(10000);  // half: two whole scans of 100 points (2,064 bytes)
  std::vector<decode_internal::ResumePoint> points(n), got;
  for (size_t k = 0; k < n; ++k) points[k].mcu = static_cast<uint32_t>(3 * k + 1);
  for (uint64_t scan = 0; scan < 3; ++scan) EXPECT_TRUE(index.Add(scan, 100, points));
  ASSERT_TRUE(index.Find(0, 100, &got));
  EXPECT_EQ(got.size(), n);
  ASSERT_TRUE(index.Find(1, 100, &got));
  EXPECT_EQ(got.size(), n);
  ASSERT_TRUE(index.Find(2, 100, &got));
  ASSERT_EQ(got.size(), static_cast<size_t>(decode_internal::ScanIndex::kThinPoints));
  for (size_t k = 1; k < got.size(); ++k) EXPECT_LT(got[k - 1].mcu, got[k].mcu);
  EXPECT_GT(got.front().mcu, points.front().mcu);
  EXPECT_LT(got.back().mcu, points.back().mcu);
  EXPECT_LE(index.bytes(), 10000u);
}

/// The decoder's strict decodes of the same bytes: the first records resume points, later ones
/// start above their crop from them; every sample equals the library's.
TEST(BaselineEntropy, DecodesResumedAboveTheCropEqualTheLibrarys) {
  std::vector<std::vector<uint8_t>> sources;
  for (const JpegFlavor& f : Layouts()) {
    if (f.height >= 60 && f.width >= 40) sources.push_back(EncodeJpeg(f));
  }
  const TransformPipeline p = RandomCrop(24);
  std::vector<uint8_t> out_own(p.SampleBytes()), out_lib(p.SampleBytes());
  JpegDecoder decoder;
  decoder.set_strict(true);
  const uint64_t scans_before = decode_internal::ScanIndex::ProcessWide().scans();
  for (int round = 0; round < 6; ++round) {
    for (size_t i = 0; i < sources.size(); ++i) {
      const std::vector<uint8_t>& bytes = sources[i];
      decode_internal::SetOwnEntropyEnabled(true);
      SampleRng rng_own(static_cast<uint64_t>(round * 1000) + i);
      ASSERT_TRUE(decoder.DecodeInto(bytes.data(), bytes.size(), p, rng_own, out_own.data()).ok());
      decode_internal::SetOwnEntropyEnabled(false);
      SampleRng rng_lib(static_cast<uint64_t>(round * 1000) + i);
      ASSERT_TRUE(decoder.DecodeInto(bytes.data(), bytes.size(), p, rng_lib, out_lib.data()).ok());
      ASSERT_TRUE(out_own == out_lib) << "round " << round << " file " << i;
    }
  }
  decode_internal::SetOwnEntropyEnabled(true);
  EXPECT_GE(decode_internal::ScanIndex::ProcessWide().scans(), scans_before + sources.size() / 2);
}

}  // namespace
}  // namespace ringloader
