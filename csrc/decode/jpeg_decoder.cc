#include "decode/jpeg_decoder.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

// jpeglib.h needs size_t and FILE declared first; jerror.h needs jpeglib.h's configuration
// (D_ARITH_CODING_SUPPORTED declares JWRN_ARITH_BAD_CODE).
#include <jpeglib.h>
#include <jerror.h>
// The entropy decoder and input controller interfaces (their layout is unchanged since IJG 6b):
// FinishScan runs the entropy decoder alone over the rest of a scan. Without the header the
// rest is read through jpeg_skip_scanlines, which also reconstructs a row or two.
#if __has_include(<jpegint.h>)
#include <jpegint.h>
#define RL_HAVE_JPEGINT 1
#else
#define RL_HAVE_JPEGINT 0
#endif

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_util.h"
#include "decode/clean_scans.h"
#include "decode/jpeg_entropy.h"
#include "decode/signature.h"
#include "transform/render.h"
#include "transform/resample.h"

namespace ringloader {
namespace {

/// A corrupt progressive file can hold thousands of tiny scans, each costing a full pass over
/// the coefficient buffer; real encoders write well under a hundred.
constexpr int kMaxScans = 1000;
/// Where to look for the end-of-image marker: encoders may append a little padding or metadata.
/// Scanlines fetched per jpeg_read_scanlines call (amortises the call overhead).
constexpr int kRowChunk = 16;
/// Error code for aborts raised by the decoder itself rather than by libjpeg.
constexpr int kOwnError = -1;

/// libjpeg error manager that longjmps back into the decoder instead of calling exit().
struct ErrorManager {
  jpeg_error_mgr pub;  // first member: libjpeg hands &pub back to the callbacks
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  int error_code;
  int warnings;
  bool hit_eof;  // libjpeg ran out of data and inserted a fake EOI (JWRN_JPEG_EOF)
  bool strict;   // a warning about corrupt data aborts the decode
};

ErrorManager* Err(j_common_ptr cinfo) { return reinterpret_cast<ErrorManager*>(cinfo->err); }

void ErrorExit(j_common_ptr cinfo) {
  ErrorManager* err = Err(cinfo);
  (*cinfo->err->format_message)(cinfo, err->message);
  err->error_code = cinfo->err->msg_code;
  std::longjmp(err->jump, 1);
}

/// Warnings libjpeg gives when it decodes past damaged data (wrong pixels follow). The others
/// (unknown JFIF revision or Adobe transform code, a bad ICC profile) leave the pixels intact.
bool IsCorruptDataWarning(int code) {
  switch (code) {
    case JWRN_EXTRANEOUS_DATA:    // "Corrupt JPEG data: N extraneous bytes before marker"
    case JWRN_HIT_MARKER:         // "Corrupt JPEG data: premature end of data segment"
    case JWRN_HUFF_BAD_CODE:      // "Corrupt JPEG data: bad Huffman code"
    case JWRN_ARITH_BAD_CODE:     // "Corrupt JPEG data: bad arithmetic code"
    case JWRN_MUST_RESYNC:        // "Corrupt JPEG data: found marker ... instead of RST"
    case JWRN_BOGUS_PROGRESSION:  // "Inconsistent progression sequence"
    case JWRN_NOT_SEQUENTIAL:     // "Invalid SOS parameters for sequential JPEG"
      return true;
    default:
      return false;
  }
}

void EmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level >= 0) return;  // trace output
  ErrorManager* err = Err(cinfo);
  ++err->warnings;
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF) err->hit_eof = true;
  if (err->strict && IsCorruptDataWarning(code)) {
    (*cinfo->err->format_message)(cinfo, err->message);
    err->error_code = code;
    std::longjmp(err->jump, 1);
  }
}

void OutputMessage(j_common_ptr) {}  // never print from a library

/// Refuses files of more scans than kMaxScans (called by the ProgressiveMonitor).
void ScanLimit(j_common_ptr cinfo) {
  const auto dinfo = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (dinfo->input_scan_number > kMaxScans) {
    ErrorManager* err = Err(cinfo);
    std::snprintf(err->message, sizeof(err->message), "more than %d scans", kMaxScans);
    err->error_code = kOwnError;
    std::longjmp(err->jump, 1);
  }
}

/// Runs libjpeg calls in `fn` with fatal errors turned into a false return. Between setjmp and
/// longjmp only libjpeg frames and `fn` run, so `fn` must not create objects with destructors.
template <typename Fn>
bool Guarded(ErrorManager& err, Fn&& fn) {
  if (setjmp(err.jump) != 0) return false;
  fn();
  return true;
}

/// InvalidArgument naming what the bytes look like when they are not a JPEG.
absl::Status CheckSignature(const uint8_t* d, size_t n) {
  if (n == 0 || d == nullptr) return absl::InvalidArgumentError("not a JPEG: empty file");
  if (n >= 2 && d[0] == 0xFF && d[1] == 0xD8) {
    // Pillow identifies a JPEG by FF D8 FF: junk right after the start-of-image marker is refused.
    if (n > 2 && d[2] != 0xFF) {
      return absl::DataLossError("corrupt JPEG: no marker after the start-of-image marker");
    }
    return absl::OkStatus();
  }
  if (n == 1 && d[0] == 0xFF) return absl::DataLossError("truncated JPEG: 1 byte");
  return absl::InvalidArgumentError(absl::StrCat("not a JPEG: ", decode_internal::DescribeBytes(d, n)));
}

/// ROI decoding stops reading early, so truncation must be caught before decoding starts.
/// The search covers [scan_start, n): entropy-coded data never holds FF D9 (an FF data byte is
/// stuffed as FF 00), so the first hit from the end after the first scan is the real EOI, even
/// with junk appended after it, while an EXIF thumbnail's EOI (before the scan) cannot fool it.
absl::Status CheckEndMarker(const uint8_t* d, size_t n, size_t scan_start) {
  for (size_t i = n; i > scan_start + 1; --i) {
    if (d[i - 1] == 0xD9 && d[i - 2] == 0xFF) return absl::OkStatus();
  }
  return absl::DataLossError("truncated JPEG: no end-of-image marker");
}

/// Pillow's CMYK path: it reads four-component JPEGs as Adobe-inverted ("CMYK;I") and converts
/// with r = nk - MULDIV255(c, nk), nk = 255 - k. On stored bytes that is c = 255 - sc, nk = sk.
/// Writes `out_bpp` bytes per pixel: 3 (RGB) or 4 (RGBX, X = 0).
void CmykToRgb(const uint8_t* in, int n, int out_bpp, uint8_t* out) {
  for (int i = 0; i < n; ++i) {
    const int nk = in[3];
    for (int c = 0; c < 3; ++c) {
      const int tmp = (255 - in[c]) * nk + 128;
      const int v = nk - (((tmp >> 8) + tmp) >> 8);
      out[c] = static_cast<uint8_t>(std::clamp(v, 0, 255));
    }
    if (out_bpp == 4) out[3] = 0;
    in += 4;
    out += out_bpp;
  }
}

/// Everything a decoder keeps between images. Defined here (not as JpegDecoder::State itself) so
/// the helpers below can use it without being members.
struct DecoderState {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  bool created = false;
  bool cmyk = false;  // current image decodes to CMYK and needs conversion
  RenderState render;
  std::vector<uint8_t> rows;         // kRowChunk decoded scanlines
  std::vector<JSAMPROW> row_ptrs;    // pointers into rows
  std::vector<uint8_t> rgb_row;      // one CMYK scanline converted to RGBX
  std::vector<uint8_t> full;         // full image for the reference path
  // The project's entropy decoder (decode/jpeg_entropy.h: baseline and progressive scans), and
  // whether this decode may use it (not after it gave up on the bytes: then the library
  // decodes them again).
  decode_internal::BaselineEntropy entropy;
  // The progress monitor: the scan limit, and the entropy decoder over progressive scans.
  decode_internal::ProgressiveMonitor progress{&entropy, ScanLimit};
  bool own_entropy = true;
  bool entropy_installed = false;  // by the last StartDecompress
  std::vector<decode_internal::ResumePoint> points;  // recorded, or resumed from
};

}  // namespace

struct JpegDecoder::State : DecoderState {};

JpegDecoder::JpegDecoder() : state_(std::make_unique<State>()) {
  State& s = *state_;
  std::memset(&s.cinfo, 0, sizeof(s.cinfo));
  std::memset(&s.err, 0, sizeof(s.err));
  s.cinfo.err = jpeg_std_error(&s.err.pub);
  s.err.pub.error_exit = ErrorExit;
  s.err.pub.emit_message = EmitMessage;
  s.err.pub.output_message = OutputMessage;
  // jpeg_create_decompress only fails on out-of-memory; then every call reports it.
  s.created = Guarded(s.err, [&] { jpeg_create_decompress(&s.cinfo); });
  if (s.created) s.cinfo.progress = &s.progress.pub;
  s.row_ptrs.resize(kRowChunk);
}

JpegDecoder::~JpegDecoder() {
  if (state_ && state_->created) jpeg_destroy_decompress(&state_->cinfo);
}

namespace {

/// Status for the libjpeg failure recorded in `err`; resets the decompressor for the next image.
absl::Status FailureStatus(j_decompress_ptr cinfo, const ErrorManager& err) {
  jpeg_abort_decompress(cinfo);
  const std::string msg = err.message;
  if (err.hit_eof) return absl::DataLossError(absl::StrCat("truncated JPEG: ", msg));
  if (IsCorruptDataWarning(err.error_code)) {
    return absl::DataLossError(absl::StrCat(
        "corrupt JPEG data (libjpeg decodes past it into wrong pixels; strict_decode=false "
        "accepts it, as Pillow does): ", msg));
  }
  switch (err.error_code) {
    case JERR_SOF_UNSUPPORTED:
      return absl::UnimplementedError(absl::StrCat(
          "unsupported JPEG coding process (lossless, hierarchical or JPEG-LS): ", msg));
    case JERR_BAD_PRECISION:
      return absl::UnimplementedError(
          absl::StrCat("unsupported sample precision (only 8-bit JPEG is supported): ", msg));
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
    case JERR_VIRTUAL_BUG:
      return absl::ResourceExhaustedError(absl::StrCat("JPEG decode needs too much memory: ", msg));
    case JERR_IMAGE_TOO_BIG:
      return absl::OutOfRangeError(absl::StrCat("JPEG too large: ", msg));
    default:
      return absl::DataLossError(absl::StrCat("corrupt JPEG: ", msg));
  }
}

/// Shared start of every entry point: validation, header, limits. Leaves the decompressor with
/// a read header on success and reset on failure.
absl::Status ReadHeader(DecoderState& s, const uint8_t* data, size_t size,
                        uint64_t max_pixels, bool strict, bool need_end_marker) {
  if (!s.created) return absl::ResourceExhaustedError("libjpeg decompressor could not be created");
  RL_RETURN_IF_ERROR(CheckSignature(data, size));
  j_decompress_ptr cinfo = &s.cinfo;
  s.err.warnings = 0;
  s.err.strict = strict;
  s.own_entropy = true;
  s.err.hit_eof = false;
  s.err.error_code = 0;
  s.err.message[0] = '\0';
  // Progressive images keep every coefficient in memory (2 bytes per sample); allow that for
  // any image under the pixel limit and refuse the rest before allocating.
  const uint64_t budget =
      std::clamp<uint64_t>(max_pixels * 8, uint64_t{64} << 20, uint64_t{4} << 30);
  cinfo->mem->max_memory_to_use = static_cast<long>(budget);
  const bool ok = Guarded(s.err, [&] {
    jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
    jpeg_read_header(cinfo, TRUE);
  });
  if (!ok) return FailureStatus(cinfo, s.err);
  if (need_end_marker) {
    // After jpeg_read_header the source sits just past the first SOS header.
    const size_t scan_start = static_cast<size_t>(cinfo->src->next_input_byte - data);
    absl::Status end = CheckEndMarker(data, size, scan_start);
    if (!end.ok()) {
      jpeg_abort_decompress(cinfo);
      return end;
    }
  }
  const uint64_t pixels = uint64_t{cinfo->image_width} * cinfo->image_height;
  if (pixels > max_pixels) {
    jpeg_abort_decompress(cinfo);
    return absl::OutOfRangeError(absl::StrFormat("image %u x %u = %d pixels exceeds the limit %d",
                                                 cinfo->image_width, cinfo->image_height, pixels,
                                                 max_pixels));
  }
  switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
      // libjpeg-turbo converts gray to RGB by replication, as Pillow's convert("RGB") does.
      cinfo->out_color_space = JCS_RGB;
      s.cmyk = false;
      break;
    case JCS_CMYK:
    case JCS_YCCK:
      cinfo->out_color_space = JCS_CMYK;
      s.cmyk = true;
      break;
    default: {
      const int comps = cinfo->num_components;
      jpeg_abort_decompress(cinfo);
      return absl::UnimplementedError(
          absl::StrCat("unsupported JPEG colour space with ", comps, " components"));
    }
  }
  cinfo->dct_method = JDCT_ISLOW;  // Pillow's default; the fast integer IDCT is visibly different
  cinfo->do_fancy_upsampling = TRUE;
  cinfo->scale_num = 8;
  cinfo->scale_denom = 8;
  return absl::OkStatus();
}

/// jpeg_start_decompress with the project's entropy decoder over a progressive file's scans
/// (installed from inside it, by the progress monitor), or over a baseline file's one scan
/// after it, where it applies.
bool StartDecompress(DecoderState& s) {
  j_decompress_ptr cinfo = &s.cinfo;
  const bool own = s.own_entropy && decode_internal::OwnEntropyEnabled();
  s.progress.Arm(cinfo, own);
  const bool ok = Guarded(s.err, [&] { jpeg_start_decompress(cinfo); });
  s.progress.pending = false;
  s.entropy_installed = s.progress.installed;
  if (!ok) return false;
  if (own && !s.entropy_installed) s.entropy_installed = s.entropy.Install(cinfo);
  return true;
}

/// Runs `attempt` (a decode from jpeg_start_decompress on, the header read and the decode
/// parameters set) and, where the project's entropy decoder gave up on the bytes (see
/// decode/jpeg_entropy.h), runs it again with the library's: the header read again, the
/// parameters the first attempt had restored.
template <typename Attempt>
absl::Status WithLibraryRedo(DecoderState& s, const uint8_t* data, size_t size,
                             uint64_t max_pixels, bool strict, Attempt&& attempt) {
  absl::Status status = attempt();
  if (status.ok() || !s.entropy_installed || !s.entropy.bailed()) return status;
  const jpeg_decompress_struct& c = s.cinfo;
  const unsigned scale_num = c.scale_num;
  const J_DCT_METHOD dct = c.dct_method;
  const J_COLOR_SPACE out = c.out_color_space;
  RL_RETURN_IF_ERROR(ReadHeader(s, data, size, max_pixels, strict, /*need_end_marker=*/false));
  s.own_entropy = false;
  s.cinfo.scale_num = scale_num;
  s.cinfo.dct_method = dct;
  s.cinfo.out_color_space = out;
  return attempt();
}

/// Decodes the whole image (header already read) into `out` (grow-only) with `bpp` bytes per
/// pixel: 3 = packed RGB, 4 = RGBX.
absl::Status DecodeWhole(DecoderState& s, int bpp, std::vector<uint8_t>* out, int* width,
                         int* height) {
  j_decompress_ptr cinfo = &s.cinfo;
  if (!s.cmyk) cinfo->out_color_space = bpp == 4 ? JCS_EXT_RGBX : JCS_RGB;
  if (!StartDecompress(s)) return FailureStatus(cinfo, s.err);
  const int w = static_cast<int>(cinfo->output_width);
  const int h = static_cast<int>(cinfo->output_height);
  const size_t stride = static_cast<size_t>(w) * bpp;
  if (out->size() < stride * h) out->resize(stride * h);
  const size_t cmyk_row = static_cast<size_t>(w) * 4;
  if (s.cmyk && s.rows.size() < cmyk_row) s.rows.resize(cmyk_row);
  uint8_t* base = out->data();
  const bool ok = Guarded(s.err, [&] {
    while (cinfo->output_scanline < cinfo->output_height) {
      const JDIMENSION y = cinfo->output_scanline;
      JSAMPROW row = s.cmyk ? s.rows.data() : base + stride * y;
      if (jpeg_read_scanlines(cinfo, &row, 1) != 1) break;
      if (s.cmyk) CmykToRgb(s.rows.data(), w, bpp, base + stride * y);
    }
    // Reads the markers up to end-of-image, as Pillow does: a broken one there is an error.
    if (cinfo->output_scanline == cinfo->output_height) jpeg_finish_decompress(cinfo);
  });
  if (!ok) return FailureStatus(cinfo, s.err);
  if (cinfo->output_scanline < cinfo->output_height) {
    jpeg_abort_decompress(cinfo);
    return absl::DataLossError("corrupt JPEG: decoder returned fewer rows than the image has");
  }
  if (s.err.hit_eof) return absl::DataLossError("truncated JPEG: premature end of data");
  *width = w;
  *height = h;
  return absl::OkStatus();
}

/// Reads the rest of the image after the rows a sample needs and the markers up to end-of-image,
/// so that damage below the crop (a corrupt-data warning in strict mode, a broken marker) gives
/// the same verdict whatever the crop.
///
/// Single-scan Huffman files: the remaining MCUs go through the entropy decoder alone, with no
/// coefficient buffer, exactly the calls jpeg_skip_scanlines makes for the whole iMCU rows it
/// skips, so every byte of the scan meets the same Huffman, restart and end-of-data checks as in
/// a full decode (the verdict is the entropy decoder's and the marker reader's: the IDCT,
/// upsampling and colour conversion never warn). jpeg_skip_scanlines itself reconstructs the
/// rest of the current iMCU row, the context rows of fancy upsampling and the last row in full,
/// about an eighth of the tail's instructions for a training crop. Multi-scan files
/// (progressive, one scan per component) were read whole by jpeg_start_decompress: only the
/// markers after the last scan are left. Arithmetic-coded files (rare) keep the library's skip.
void FinishScan(j_decompress_ptr cinfo, uint8_t* row_buffer) {
  const JDIMENSION h = cinfo->output_height;
#if RL_HAVE_JPEGINT
  const bool multi_scan = cinfo->inputctl->has_multiple_scans;
  if (multi_scan || !cinfo->arith_code) {
    if (!multi_scan && cinfo->input_iMCU_row < cinfo->total_iMCU_rows) {
      // MCU rows per iMCU row, as the coefficient controller counts them: one for an interleaved
      // scan; a lone component's vertical factor, fewer in the last iMCU row.
      const jpeg_component_info* comp = cinfo->cur_comp_info[0];
      while (cinfo->input_iMCU_row < cinfo->total_iMCU_rows) {
        const bool last_row = cinfo->input_iMCU_row + 1 == cinfo->total_iMCU_rows;
        const int mcu_rows = cinfo->comps_in_scan > 1 ? 1
                             : last_row                ? comp->last_row_height
                                                       : comp->v_samp_factor;
        for (int y = 0; y < mcu_rows; ++y) {
          for (JDIMENSION x = 0; x < cinfo->MCUs_per_row; ++x) {
            (*cinfo->entropy->decode_mcu)(cinfo, nullptr);
          }
        }
        ++cinfo->input_iMCU_row;
      }
      (*cinfo->inputctl->finish_input_pass)(cinfo);  // the markers come next
    }
    cinfo->output_scanline = h;  // no row is wanted any more
    jpeg_finish_decompress(cinfo);  // reads the markers up to EOI; a broken one is an error
    return;
  }
#endif
  // The remaining rows are skipped (entropy-decoded, no IDCT) except the last one:
  // jpeg_skip_scanlines does not decode at all when asked to skip to the end.
  if (cinfo->output_scanline + 1 < h) jpeg_skip_scanlines(cinfo, h - 1 - cinfo->output_scanline);
  JSAMPROW row = row_buffer;
  while (cinfo->output_scanline < h && jpeg_read_scanlines(cinfo, &row, 1) == 1) {
  }
  jpeg_finish_decompress(cinfo);  // fails (too little data) if a row was missing
}

}  // namespace

absl::StatusOr<FastDecode> ParseFastDecode(absl::string_view name) {
  if (name == "off") return FastDecode::kOff;
  if (name == "scale") return FastDecode::kScale;
  if (name == "fastest") return FastDecode::kFastest;
  return absl::InvalidArgumentError(absl::StrCat(
      "fast_decode must be False (or 'off'), True (or 'scale') or 'fastest'; got '", name, "'"));
}

const char* FastDecodeName(FastDecode level) {
  switch (level) {
    case FastDecode::kOff:
      return "off";
    case FastDecode::kScale:
      return "scale";
    case FastDecode::kFastest:
      return "fastest";
  }
  return "off";
}

int ChooseDctScale(const SampleGeometry& g, FastDecode level) {
  // Nearest picks source pixels: a DCT-scaled image has different pixels to pick. torch's
  // kernels on a tensor (g.tensor) read the tensor of the whole decode.
  if (level == FastDecode::kOff || g.filter == Interpolation::kNearest || g.tensor) return 8;
  // kFastest lets the resampler enlarge the decoded crop by up to 4/3 (checked in that form, so
  // that the exact boundary is an integer comparison: 4 * decoded >= 3 * output).
  const int cover = level == FastDecode::kFastest ? 3 : 4;
  const double rw = std::abs(g.x1 - g.x0);
  const double rh = std::abs(g.y1 - g.y0);
  for (int num : {1, 2, 4}) {
    if (4 * rw * num / 8.0 >= cover * double(g.out_w) && 4 * rh * num / 8.0 >= cover * double(g.out_h)) {
      return num;
    }
  }
  return 8;
}

namespace {

/// Bytes libjpeg holds for every coefficient of the image (2 per sample, whatever the DCT scale)
/// when it reads more than one scan before output: a progressive file, or one whose first scan
/// does not hold every component. 0 for a single interleaved scan, which is decoded row by row.
uint64_t CoefficientBytes(const jpeg_decompress_struct& c) {
  if (!c.progressive_mode && c.comps_in_scan >= c.num_components) return 0;
  uint64_t bytes = 0;
  for (int ci = 0; ci < c.num_components; ++ci) {
    const jpeg_component_info& comp = c.comp_info[ci];
    const uint64_t h = std::max(1, comp.h_samp_factor), v = std::max(1, comp.v_samp_factor);
    const uint64_t wb = (uint64_t{comp.width_in_blocks} + h - 1) / h * h;
    const uint64_t hb = (uint64_t{comp.height_in_blocks} + v - 1) / v * v;
    bytes += wb * hb * DCTSIZE2 * sizeof(JCOEF);
  }
  return bytes;
}

/// An upper bound of the rows a decode of `width` columns works on: the decoder's chunk of RGBX
/// rows and libjpeg's (an iMCU row of each component and the upsampler's context rows).
uint64_t WorkingRowBytes(uint64_t width) { return width * 4 * (kRowChunk + 3 * 2 * 16); }

}  // namespace

uint64_t JpegDecoder::RetainedBytes() const {
  const State& s = *state_;
  return s.render.resampler.RetainedBytes() + s.render.image.capacity() + s.rows.capacity() +
         s.rgb_row.capacity() + s.full.capacity() + s.render.augment.padded.capacity() +
         s.render.augment.padded2.capacity();
}

void JpegDecoder::Trim() {
  State& s = *state_;
  s.render.resampler.Trim();
  std::vector<uint8_t>().swap(s.render.image);
  std::vector<uint8_t>().swap(s.rows);
  std::vector<uint8_t>().swap(s.rgb_row);
  std::vector<uint8_t>().swap(s.full);
  std::vector<uint8_t>().swap(s.render.augment.padded);
  std::vector<uint8_t>().swap(s.render.augment.padded2);
}

absl::StatusOr<JpegInfo> JpegDecoder::ReadInfo(const uint8_t* data, size_t size) {
  RL_RETURN_IF_ERROR(
      ReadHeader(*state_, data, size, max_pixels_, strict_, /*need_end_marker=*/false));
  const jpeg_decompress_struct& c = state_->cinfo;
  JpegInfo info;
  info.width = static_cast<int>(c.image_width);
  info.height = static_cast<int>(c.image_height);
  info.components = c.num_components;
  info.progressive = c.progressive_mode != 0;
  jpeg_abort_decompress(&state_->cinfo);
  return info;
}

absl::StatusOr<RgbImage> JpegDecoder::DecodeFull(const uint8_t* data, size_t size) {
  RL_RETURN_IF_ERROR(
      ReadHeader(*state_, data, size, max_pixels_, strict_, /*need_end_marker=*/true));
  DecodeBudget::Grant grant;
  if (budget_ != nullptr) {
    const jpeg_decompress_struct& c = state_->cinfo;
    const uint64_t need = CoefficientBytes(c) + WorkingRowBytes(c.image_width) +
                          uint64_t{c.image_width} * c.image_height * 3;
    absl::StatusOr<DecodeBudget::Grant> got = budget_->Acquire(
        need, absl::StrCat("JPEG image ", c.image_width, " x ", c.image_height));
    if (!got.ok()) {
      jpeg_abort_decompress(&state_->cinfo);
      return got.status();
    }
    grant = *std::move(got);
  }
  RgbImage image;
  absl::Status status = WithLibraryRedo(*state_, data, size, max_pixels_, strict_, [&] {
    return DecodeWhole(*state_, 3, &image.pixels, &image.width, &image.height);
  });
  if (budget_ != nullptr && RetainedBytes() > budget_->allowance()) Trim();
  RL_RETURN_IF_ERROR(status);
  image.pixels.resize(static_cast<size_t>(image.width) * image.height * 3);
  return image;
}

absl::Status JpegDecoder::DecodeInto(const uint8_t* data, size_t size,
                                     const TransformPipeline& pipeline, SampleRng& rng, void* dst,
                                     DecodeStats* stats) {
  DecodeBudget::Grant grant;  // released after the trim below: what it covered is gone by then
  absl::Status status = DecodeIntoBudgeted(data, size, pipeline, rng, dst, stats, &grant);
  if (budget_ != nullptr && RetainedBytes() > budget_->allowance()) Trim();
  return status;
}

absl::Status JpegDecoder::Reserve(const SampleGeometry& g, int num, DecodeBudget::Grant* grant) {
  j_decompress_ptr cinfo = &state_->cinfo;
  const uint64_t w = cinfo->image_width, h = cinfo->image_height;
  const uint64_t out = uint64_t(std::max(0, g.out_w)) * uint64_t(std::max(0, g.out_h)) * 3;
  // The image stage's buffers (the 8-bit image and the padding targets): three output images.
  const uint64_t fixed =
      CoefficientBytes(*cinfo) + WorkingRowBytes(w) + 3 * out + (fast_paths_ ? 0 : w * h * 4);
  // The resampler keeps at most every source pixel as RGBX: below the allowance with that, the
  // common photo skips the exact sums.
  if (fixed + w * h * 4 <= budget_->allowance()) return absl::OkStatus();
  AxisMapping ax, ay;
  uint64_t resample = 0;
  if (fast_paths_) {
    cinfo->scale_num = static_cast<unsigned>(num);
    if (!Guarded(state_->err, [&] { jpeg_calc_output_dimensions(cinfo); })) {
      return FailureStatus(cinfo, state_->err);
    }
    const int dw = static_cast<int>(cinfo->output_width), dh = static_cast<int>(cinfo->output_height);
    GeometryToAxes(g, num / 8.0, dw, dh, &ax, &ay);
    resample = Resampler::IntermediateBytes(ax, ay, dw, dh);
  } else {
    GeometryToAxes(g, 1.0, static_cast<int>(w), static_cast<int>(h), &ax, &ay);
    resample = Resampler::IntermediateBytes(ax, ay, static_cast<int>(w), static_cast<int>(h));
  }
  absl::StatusOr<DecodeBudget::Grant> got =
      budget_->Acquire(fixed + resample, absl::StrCat("JPEG image ", w, " x ", h));
  if (!got.ok()) {
    jpeg_abort_decompress(cinfo);
    return got.status();
  }
  *grant = *std::move(got);
  return absl::OkStatus();
}

absl::Status JpegDecoder::DecodeIntoBudgeted(const uint8_t* data, size_t size,
                                             const TransformPipeline& pipeline, SampleRng& rng, void* dst,
                                             DecodeStats* stats, DecodeBudget::Grant* grant) {
  State& s = *state_;
  RL_RETURN_IF_ERROR(ReadHeader(s, data, size, max_pixels_, strict_, /*need_end_marker=*/true));
  j_decompress_ptr cinfo = &s.cinfo;
  const int src_w = static_cast<int>(cinfo->image_width);
  const int src_h = static_cast<int>(cinfo->image_height);
  const SampleGeometry g = pipeline.Plan(src_w, src_h, rng);
  if (budget_ != nullptr && g.error == nullptr) {
    RL_RETURN_IF_ERROR(Reserve(g, fast_paths_ ? ChooseDctScale(g, level_) : 8, grant));
  }

  if (!fast_paths_) {
    // Reference path: exactly what a full decode followed by the resampler gives.
    int w = 0, h = 0;
    RL_RETURN_IF_ERROR(WithLibraryRedo(s, data, size, max_pixels_, strict_,
                                       [&] { return DecodeWhole(s, 4, &s.full, &w, &h); }));
    if (stats) *stats = DecodeStats{8, w, h, s.err.warnings};
    return RenderSample(s.full.data(), static_cast<size_t>(w) * 4, 4, w, h, pipeline, g, rng,
                        s.render, dst);
  }

  const int num = ChooseDctScale(g, level_);
  cinfo->scale_num = static_cast<unsigned>(num);
  // jpeg_read_header reset dct_method to JDCT_ISLOW (Pillow's). Plain (non-fancy) upsampling
  // stays off at every level: at 8/8 it is the slower path here (merged upsampler, 1.08 against
  // 1.23 ms for the 500x375 4:2:0 photo), and below 8/8 libjpeg-turbo decodes 4:2:0 chroma at
  // twice the scale, so nothing is upsampled.
  if (level_ == FastDecode::kFastest) cinfo->dct_method = JDCT_IFAST;
  // RGBX: the resampler's horizontal kernel loads one pixel per integer vector.
  if (!s.cmyk) cinfo->out_color_space = JCS_EXT_RGBX;
  return WithLibraryRedo(s, data, size, max_pixels_, strict_, [&] {
    return DecodeRegion(data, size, pipeline, g, num, rng, dst, stats);
  });
}

absl::Status JpegDecoder::DecodeRegion(const uint8_t* data, size_t size,
                                       const TransformPipeline& pipeline, const SampleGeometry& g,
                                       int num, SampleRng& rng, void* dst, DecodeStats* stats) {
  State& s = *state_;
  j_decompress_ptr cinfo = &s.cinfo;
  Resampler& rs = s.render.resampler;
  AxisMapping ax, ay;
  if (!StartDecompress(s)) return FailureStatus(cinfo, s.err);
  const int dw = static_cast<int>(cinfo->output_width);
  const int dh = static_cast<int>(cinfo->output_height);
  GeometryToAxes(g, num / 8.0, dw, dh, &ax, &ay);
  rs.Prepare(ax, ay, dw, dh);

  // Region of interest. One extra pixel each side keeps the columns and rows we use away from
  // the crop edge, where the chroma upsampler has no neighbour and replicates the edge.
  const int row0 = std::max(0, rs.first_row() - 1);
  const int row1 = rs.end_row() > rs.first_row() ? std::min(dh, rs.end_row() + 1) : row0;
  JDIMENSION xoff = static_cast<JDIMENSION>(std::max(0, rs.first_col() - 1));
  JDIMENSION xwidth = static_cast<JDIMENSION>(std::min(dw, rs.end_col() + 1)) - xoff;
  if (rs.end_col() <= rs.first_col()) xoff = 0, xwidth = static_cast<JDIMENSION>(dw);
  // A crop that leaves a subsampled component under 2 columns makes jpeg_crop_scanline
  // re-initialise the upsampler without fancy upsampling (plain replication: other pixels than
  // the whole decode's): such a crop (torch's nearest reading one edge column) is widened.
  const JDIMENSION min_width = std::min(static_cast<JDIMENSION>(cinfo->max_h_samp_factor) + 1,
                                        static_cast<JDIMENSION>(dw));
  if (xwidth < min_width) {
    xwidth = min_width;
    xoff = std::min(xoff, static_cast<JDIMENSION>(dw) - min_width);
  }
  bool ok = true;
  // The MCU columns the library transforms (all, uncropped).
  uint64_t first_col = 0;
  uint64_t last_col = ~uint64_t{0};
  if (row1 > row0 && xwidth < static_cast<JDIMENSION>(dw)) {
    // Widens to iMCU boundaries; afterwards output_width is the cropped width.
    ok = Guarded(s.err, [&] { jpeg_crop_scanline(cinfo, &xoff, &xwidth); });
    if (!ok) return FailureStatus(cinfo, s.err);
    decode_internal::CropColumns(cinfo, xoff, &first_col, &last_col);
  } else {
    xoff = 0;
    xwidth = static_cast<JDIMENSION>(dw);
  }
  rs.SetColumnOrigin(static_cast<int>(xoff));
  const int comps = cinfo->out_color_components;
  const size_t row_bytes = static_cast<size_t>(cinfo->output_width) * comps;
  if (s.rows.size() < row_bytes * kRowChunk) s.rows.resize(row_bytes * kRowChunk);
  if (s.cmyk && s.rgb_row.size() < static_cast<size_t>(cinfo->output_width) * 4) {
    s.rgb_row.resize(static_cast<size_t>(cinfo->output_width) * 4);
  }
  for (int i = 0; i < kRowChunk; ++i) s.row_ptrs[i] = s.rows.data() + row_bytes * i;

  const int out_cols = static_cast<int>(cinfo->output_width);
  int rows_read = 0;
  // Strict: the verdict is the whole scan's. Bytes already read to the end cleanly (the memo)
  // need not be read past the crop again; anything else is.
  decode_internal::CleanScanTable* clean =
      strict_ ? decode_internal::ProcessWideCleanScans() : nullptr;  // null: RINGLOADER_SCAN_MEMO=off
  const uint64_t fingerprint = clean != nullptr ? clean->Fingerprint(data, size) : 0;
  const bool known_clean = clean != nullptr && clean->Contains(fingerprint);
  // Bytes read clean before by this process start their entropy decoding at the last resume
  // point above the crop, and each row of the crop at the last point left of it; other
  // decodes record points for the next time.
  decode_internal::ScanIndex* index = clean != nullptr && s.entropy_installed && !cinfo->progressive_mode
                                          ? &decode_internal::ScanIndex::ProcessWide()
                                          : nullptr;
  bool recording = false;
  size_t found_points = 0;  // resuming: the points found (more after the decode: continued)
  if (index != nullptr) {
    if (known_clean && index->Find(fingerprint, size, &s.points)) {
      found_points = s.points.size();
      s.entropy.Resume(&s.points, first_col, last_col);
    } else {
      s.entropy.Record(&s.points);
      recording = true;
    }
  }
  ok = Guarded(s.err, [&] {
    if (row1 > row0 && row0 > 0) jpeg_skip_scanlines(cinfo, static_cast<JDIMENSION>(row0));
    while (cinfo->output_scanline < static_cast<JDIMENSION>(row1)) {
      const JDIMENSION y = cinfo->output_scanline;
      const JDIMENSION want = std::min<JDIMENSION>(kRowChunk, static_cast<JDIMENSION>(row1) - y);
      const JDIMENSION got = jpeg_read_scanlines(cinfo, s.row_ptrs.data(), want);
      if (got == 0) break;
      for (JDIMENSION i = 0; i < got; ++i) {
        const uint8_t* row = s.row_ptrs[i];
        if (s.cmyk) {
          CmykToRgb(row, out_cols, 4, s.rgb_row.data());
          row = s.rgb_row.data();
        }
        rs.AddRow(static_cast<int>(y + i), row);
      }
    }
    const bool short_read = row1 > row0 && cinfo->output_scanline < static_cast<JDIMENSION>(row1);
    if (short_read) return;  // reported below
    rows_read = static_cast<int>(cinfo->output_scanline) - row0;
    if (known_clean) {
      jpeg_abort_decompress(cinfo);  // these bytes were read to the end before: clean
    } else {
      FinishScan(cinfo, s.rows.data());
    }
  });
  if (!ok) return FailureStatus(cinfo, s.err);
  if (s.err.hit_eof) {
    jpeg_abort_decompress(cinfo);
    return absl::DataLossError("truncated JPEG: premature end of data");
  }
  if (row1 > row0 && rows_read < row1 - row0) {
    jpeg_abort_decompress(cinfo);
    return absl::DataLossError("corrupt JPEG: decoder returned fewer rows than requested");
  }
  if (clean != nullptr && !known_clean) clean->Add(fingerprint);  // read to the end, no error
  // A decode that stopped after its crop (bytes the memo vouched for, as in a new process)
  // recorded the points above it; one that resumed from them and went further continued them.
  if (recording || (found_points > 0 && s.points.size() > found_points)) index->Add(fingerprint, size, s.points);
  if (stats) *stats = DecodeStats{num, out_cols, std::max(rows_read, 0), s.err.warnings};
  return FinishSample(pipeline, g, rng, s.render, dst);
}

}  // namespace ringloader
