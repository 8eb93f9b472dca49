/// WebP reader on libwebp. Pillow opens every WebP file through WebPAnimDecoder (MODE_RGBA, not
/// premultiplied) and shows its first frame; for a still image that is WebPDecode of the one
/// bitstream, and for an animation it is the first frame decoded onto a transparent black canvas
/// at the frame's offset (the first frame is a key frame: nothing to blend or dispose). The RGB
/// channels of non-premultiplied RGBA decoding equal those of MODE_RGB, which is decoded here
/// so no alpha plane is written only to be dropped.

#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "decode/image_formats.h"

namespace ringloader::decode_internal {
namespace {

/// Status for a libwebp decode status.
absl::Status WebpStatus(VP8StatusCode code) {
  switch (code) {
    case VP8_STATUS_OK:
      return absl::OkStatus();
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return absl::DataLossError("truncated WebP: not enough data");
    case VP8_STATUS_OUT_OF_MEMORY:
      return absl::ResourceExhaustedError("WebP decode needs too much memory");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return absl::UnimplementedError("unsupported WebP feature");
    case VP8_STATUS_BITSTREAM_ERROR:
      return absl::DataLossError("corrupt WebP: bitstream error");
    default:
      return absl::DataLossError(absl::StrCat("corrupt WebP: decoder status ", code));
  }
}

struct DemuxDeleter {
  void operator()(WebPDemuxer* d) const { WebPDemuxDelete(d); }
};

/// Decodes one bitstream (a still file, or one frame's ALPH/VP8/VP8L chunks) as RGB into `dst`,
/// rows `stride` bytes apart; `w` x `h` must be the bitstream's size.
absl::Status DecodeRgb(const uint8_t* data, size_t size, uint8_t* dst, size_t stride, int w,
                       int h) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return absl::InternalError("libwebp ABI mismatch");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = dst;
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = stride * static_cast<size_t>(h - 1) + static_cast<size_t>(w) * 3;
  const VP8StatusCode code = WebPDecode(data, size, &config);
  WebPFreeDecBuffer(&config.output);
  return WebpStatus(code);
}

}  // namespace

absl::StatusOr<ImageSize> WebpHeader(const uint8_t* data, size_t size) {
  WebPBitstreamFeatures f;
  RL_RETURN_IF_ERROR(WebpStatus(WebPGetFeatures(data, size, &f)));
  return ImageSize{f.width, f.height};
}

absl::Status WebpDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                        Decoded* out) {
  WebPBitstreamFeatures f;
  RL_RETURN_IF_ERROR(WebpStatus(WebPGetFeatures(data, size, &f)));
  RL_RETURN_IF_ERROR(CheckPixelLimit("WebP", f.width, f.height, max_pixels));
  const size_t stride = static_cast<size_t>(f.width) * 3;
  *out = Decoded{nullptr, stride, 3, f.width, f.height};
  uint8_t* px = scratch.Pixels(stride * static_cast<size_t>(f.height));
  out->pixels = px;
  if (!f.has_animation) return DecodeRgb(data, size, px, stride, f.width, f.height);

  const WebPData whole{data, size};
  WebPDemuxState state;
  std::unique_ptr<WebPDemuxer, DemuxDeleter> demux(WebPDemuxPartial(&whole, &state));
  if (state == WEBP_DEMUX_PARSE_ERROR || demux == nullptr) {
    return absl::DataLossError("corrupt WebP: animation container does not parse");
  }
  if (state != WEBP_DEMUX_DONE) return absl::DataLossError("truncated WebP: incomplete animation");
  WebPIterator frame;
  if (!WebPDemuxGetFrame(demux.get(), 1, &frame)) {
    return absl::DataLossError("corrupt WebP: animation without a first frame");
  }
  const int x0 = frame.x_offset, y0 = frame.y_offset, fw = frame.width, fh = frame.height;
  const WebPData bits = frame.fragment;
  const bool complete = frame.complete != 0;
  WebPDemuxReleaseIterator(&frame);
  if (!complete) return absl::DataLossError("truncated WebP: first frame incomplete");
  if (fw <= 0 || fh <= 0 || x0 < 0 || y0 < 0 || x0 + fw > f.width || y0 + fh > f.height) {
    return absl::DataLossError("corrupt WebP: first frame outside the canvas");
  }
  // The canvas outside the first frame is transparent black.
  if (fw != f.width || fh != f.height) std::memset(px, 0, stride * static_cast<size_t>(f.height));
  return DecodeRgb(bits.bytes, bits.size, px + stride * static_cast<size_t>(y0) + size_t(x0) * 3,
                   stride, fw, fh);
}

}  // namespace ringloader::decode_internal
