#pragma once
/// JPEG decode + transform into an output row, on libjpeg-turbo's libjpeg API (2.1.x: no tj3).
///
/// One `JpegDecoder` per thread: it owns its libjpeg state and grow-only scratch buffers, and a
/// whole image is decoded on the calling thread (libjpeg-turbo 2.1.5 keeps its SIMD flag in
/// thread-local state). With a `FastDecode` level the decoder picks a reduced DCT scale per
/// sample (ChooseDctScale); it always decodes only the rows and iMCU columns that the sample's
/// source rectangle (plus resampling support) touches.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "memory/decode_budget.h"
#include "ringloader/types.h"
#include "transform/image_transform.h"

namespace ringloader {

/// What the header says about an image.
struct JpegInfo {
  int width = 0;
  int height = 0;
  int components = 0;  ///< 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK
  bool progressive = false;
};

/// An 8-bit RGB image, rows packed (stride = width * 3).
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;
};

/// Per-decode counters, for tests and the benchmark report.
struct DecodeStats {
  int scale_num = 8;       ///< DCT scale used: scale_num / 8.
  int decoded_width = 0;   ///< Columns actually produced by libjpeg (after ROI crop).
  int decoded_height = 0;  ///< Rows actually produced by libjpeg (after skip).
  int warnings = 0;        ///< libjpeg warnings: corrupt data it decoded past.
};

/// How far a decode may depart from Pillow's pixels for speed (`DataLoader(fast_decode=...)`).
enum class FastDecode {
  kOff,      ///< full-scale ISLOW decode: exactly Pillow's pixels (region of interest still on)
  kScale,    ///< reduced DCT scale whose output still covers the crop at the target size
  kFastest,  ///< kScale's rule with 3/4 coverage (the resampler may enlarge up to 4/3) and the
             ///< fast integer IDCT (JDCT_IFAST)
};

/// The level named `name`: "off", "scale" or "fastest" (the Python binding maps False to "off"
/// and True to "scale"). InvalidArgument naming the argument and the accepted values.
absl::StatusOr<FastDecode> ParseFastDecode(absl::string_view name);
/// The canonical name of a level: "off", "scale", "fastest".
const char* FastDecodeName(FastDecode level);

/// The DCT scale M (decode at M/8) for a sample of geometry `g` at `level`: the smallest M whose
/// decoded source rectangle is at least as large as the output in both dimensions (kFastest: at
/// least 3/4 of it), among M in {1, 2, 4, 8}; 8 at kOff, for a nearest filter, for torch's
/// kernels on a tensor (SampleGeometry::tensor), or when no smaller scale covers. libjpeg-turbo
/// 2.1 decodes at any M/8 (M = 1..16), but only 1/8, 2/8, 4/8 and 8/8 have SIMD IDCTs; 3/8,
/// 5/8, 6/8 and 7/8 run C IDCTs (and a 4:2:0 file's chroma at twice that size: 10x10, 12x12,
/// 14x14), which cost more than the next SIMD scale up (measured
/// on a 500x375 4:2:0 q90 photo, whole image, one core: M=1..8 took 0.63, 0.81, 0.89, 0.90,
/// 1.12, 1.23, 1.41, 1.09 ms), so they are never the faster choice. M > 8 would enlarge in the
/// IDCT, which the resampler does more cheaply.
int ChooseDctScale(const SampleGeometry& g, FastDecode level);

/// Decodes JPEG byte buffers. Not thread-safe: one per thread.
class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  /// Refuse images with more pixels than this (decompression bombs) before allocating.
  void set_max_image_pixels(uint64_t max_pixels) { max_pixels_ = max_pixels; }
  /// Use DCT scaling and region-of-interest decoding (default true). Off: always full decode.
  void set_fast_paths(bool enabled) { fast_paths_ = enabled; }
  /// With fast paths: may decode at a reduced DCT scale (1/8..1/2) when the output is that much
  /// smaller (default true: FastDecode::kScale). Off: region-of-interest decoding at full scale
  /// only, which gives exactly the pixels of a full decode (what Pillow decodes), and still
  /// skips the rows and columns the sample does not read.
  void set_dct_scaling(bool enabled) { level_ = enabled ? FastDecode::kScale : FastDecode::kOff; }
  /// The same choice as a level (ChooseDctScale; kFastest also uses the fast integer IDCT).
  void set_fast_decode(FastDecode level) { level_ = level; }
  /// Refuse data libjpeg only warns about (default true): "Corrupt JPEG data: N extraneous bytes
  /// before marker", "premature end of data segment", bad Huffman or arithmetic codes, a wrong
  /// restart marker, an inconsistent progression: libjpeg decodes past them into wrong pixels.
  /// Off: accepted, as Pillow and torchvision.io.decode_jpeg do. Either way the whole scan is
  /// read up to the end-of-image marker, also when a sample needs only some rows, so a file's
  /// verdict never depends on its crop; a broken marker there is an error, as in Pillow.
  /// Strict DecodeInto remembers the bytes it has read to the end cleanly, in a memo shared by
  /// the processes of the machine (decode/clean_scans.h), and stops after the crop when it
  /// meets the same bytes again.
  void set_strict(bool enabled) { strict_ = enabled; }
  /// Charge each decode's buffers (libjpeg's coefficients for a progressive or multi-scan file,
  /// the decoded rows, the resampler's intermediates) to `budget` before allocating them, and
  /// keep at most its allowance between images (memory/decode_budget.h). Null (the default):
  /// no accounting.
  void set_memory_budget(DecodeBudget* budget) { budget_ = budget; }

  /// Bytes the decoder keeps between images (grow-only buffers), and their release.
  uint64_t RetainedBytes() const;
  void Trim();

  /// Reads the header only. Errors: InvalidArgument (not a JPEG: names what it looks like,
  /// e.g. "PNG signature"), DataLoss (corrupt or truncated header), OutOfRange (pixel limit).
  absl::StatusOr<JpegInfo> ReadInfo(const uint8_t* data, size_t size);

  /// Full-resolution decode to RGB (gray replicated, CMYK/YCCK converted as Pillow does).
  absl::StatusOr<RgbImage> DecodeFull(const uint8_t* data, size_t size);

  /// Decodes, applies `pipeline` with random draws from `rng`, and writes exactly
  /// pipeline.SampleBytes() bytes at `dst` in the pipeline's dtype and layout.
  /// A truncated file (no end-of-image marker, or libjpeg hit the end of data) is DataLoss, and
  /// so is corrupt data (see set_strict).
  absl::Status DecodeInto(const uint8_t* data, size_t size, const TransformPipeline& pipeline,
                          SampleRng& rng, void* dst, DecodeStats* stats = nullptr);

 private:
  absl::Status DecodeIntoBudgeted(const uint8_t* data, size_t size, const TransformPipeline& pipeline,
                                  SampleRng& rng, void* dst, DecodeStats* stats, DecodeBudget::Grant* grant);
  /// With a budget: the grant for a DecodeInto whose header is read and geometry `g` planned, to
  /// decode at DCT scale num/8 (nothing when it needs no more than the allowance).
  absl::Status Reserve(const SampleGeometry& g, int num, DecodeBudget::Grant* grant);
  /// The rest of a fast-path DecodeInto from jpeg_start_decompress on (header read, geometry
  /// planned, decode parameters set): the region of interest, its resample and write-out.
  absl::Status DecodeRegion(const uint8_t* data, size_t size, const TransformPipeline& pipeline,
                            const SampleGeometry& g, int num, SampleRng& rng, void* dst,
                            DecodeStats* stats);

  struct State;
  std::unique_ptr<State> state_;
  uint64_t max_pixels_ = kDefaultMaxImagePixels;
  bool fast_paths_ = true;
  FastDecode level_ = FastDecode::kScale;
  bool strict_ = true;
  DecodeBudget* budget_ = nullptr;
};

}  // namespace ringloader
