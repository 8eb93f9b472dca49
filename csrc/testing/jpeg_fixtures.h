#pragma once
/// Test data made by the tests: JPEG encodings of synthetic textured images in every flavour
/// the decoder must handle. Nothing is downloaded.

#include <cstdint>
#include <string>
#include <vector>

#include "decode/jpeg_decoder.h"
#include "ringloader/ringloader.h"

namespace ringloader::testing {

/// How to encode a fixture.
struct JpegFlavor {
  int width = 400;
  int height = 320;
  int quality = 90;
  enum class Color { kYCbCr, kGray, kCmyk, kYcck } color = Color::kYCbCr;
  /// Chroma sampling factors of component 0 (h, v): 2x2 = 4:2:0, 2x1 = 4:2:2, 1x1 = 4:4:4,
  /// 4x1 = 4:1:1, 1x2 = 4:4:0.
  int h_samp = 2, v_samp = 2;
  bool progressive = false;
  /// Progressive with a scan script of its own instead of libjpeg's simple progression: the
  /// DC coefficients and the AC band 3-63 sent two bits short, then refined bit by bit (DC
  /// refinements at bit 1, not only 0), the band 1-2 one bit short.
  bool deep_refinement = false;
  int restart_interval = 0;  ///< MCUs per restart interval (0 = none)
  bool arithmetic = false;
  bool optimize_coding = false;  ///< Huffman tables made for this image (not the standard ones)
  uint64_t seed = 1;         ///< texture seed
};

/// Deterministic textured RGB image (smooth gradients, edges and noise, like a photo).
RgbImage MakeTexture(int width, int height, uint64_t seed);

/// Encodes MakeTexture(flavor.width, flavor.height, flavor.seed) as a JPEG.
std::vector<uint8_t> EncodeJpeg(const JpegFlavor& flavor);

/// Byte builders for files written by hand (the decoder tests' fixtures and the fuzz seeds).
/// `n` bytes of a deterministic pattern that covers every byte value.
std::vector<uint8_t> Pattern(size_t n, uint32_t seed);
/// Appends the low `bytes` bytes of `v`, little-endian.
void PutLe(std::vector<uint8_t>* b, uint32_t v, int bytes);
/// Appends a RIFF chunk: 4-byte tag, little-endian size, payload, pad byte to an even size.
void Chunk(std::vector<uint8_t>* b, const char* tag, const std::vector<uint8_t>& payload);
/// A RIFF WEBP file around `chunks` (already framed by Chunk).
std::vector<uint8_t> RiffWebp(const std::vector<uint8_t>& chunks);

/// Writes bytes to a file, creating parent directories. Aborts the test on failure.
void WriteFile(const std::string& path, const std::vector<uint8_t>& bytes);
/// WriteFile for text (the fake sysfs, procfs and cgroup trees of the tests).
void WriteText(const std::string& path, const std::string& text);

/// A fresh, empty temporary directory under $TMPDIR (or /tmp), removed with its contents when
/// the process that made it exits normally; tests may delete it earlier.
std::string MakeTempDir();

/// `n` small JPEGs of mixed sizes (120..209 x 100..179; every 7th progressive, every 11th gray)
/// written as `dir`/class_<label>/img_<i>.jpg with label i % classes, in index order.
std::vector<Sample> WriteJpegDataset(const std::string& dir, int n, int classes = 3);

}  // namespace ringloader::testing
