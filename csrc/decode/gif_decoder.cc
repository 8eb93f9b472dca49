/// GIF reader following Pillow's GifImagePlugin and its LZW decoder: the first frame only, as
/// `Image.open(f).convert("RGB")` sees it.
///
///  * The canvas is the logical screen, grown (as Pillow grows it) when the first frame reaches
///    past its right or bottom edge. Outside the frame it holds the frame's transparency index
///    when a graphic control extension gives one, else index 0; the background colour is unused.
///  * Colours: the local colour table, else the global one. A table that is the grey ramp
///    (entry i = (i, i, i)) counts as none; with no table at all an index i is grey (i, i, i),
///    with a table an index past its entries is black.
///  * LZW as Pillow decodes it: minimum code sizes 0..12; a clear code right after a clear is
///    ignored; the data ends once the frame is full (a missing block terminator or trailer does
///    not matter). An end code before the frame is full makes Pillow read on from the next
///    64 KiB of the file, and a file that has none left is truncated; this reader does the same.
///  * Truncated or broken files are errors, as in Pillow without LOAD_TRUNCATED_IMAGES.

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "decode/image_formats.h"

namespace ringloader::decode_internal {
namespace {

constexpr int kTable = 4096;        // LZW table entries (12-bit codes)
constexpr size_t kChunk = 65536;    // Pillow's ImageFile.MAXBLOCK: the reads the decoder is fed

uint16_t Le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

absl::Status Truncated(const std::string& what) {
  return absl::DataLossError(absl::StrCat("truncated GIF: ", what));
}
absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("corrupt GIF: ", what));
}

struct Palette {
  bool present = false;  ///< false: index i is grey (i, i, i)
  int entries = 0;
  const uint8_t* rgb = nullptr;
};

/// The first frame's description, read as GifImageFile._open and _seek(0) read it.
struct Header {
  int screen_width = 0;
  int screen_height = 0;
  int width = 0;   ///< the canvas: the screen, grown to hold the frame
  int height = 0;
  int x0 = 0, y0 = 0, frame_width = 0, frame_height = 0;
  bool interlace = false;
  int transparency = -1;
  int bits = 0;         ///< LZW minimum code size
  size_t offset = 0;    ///< first byte after the code size: the data sub-blocks
  Palette palette;
};

/// A colour table of 1 << `bits` entries at `d`, or none when it is the grey ramp
/// (GifImageFile._is_palette_needed).
Palette ReadPalette(const uint8_t* d, int bits) {
  const int entries = 1 << bits;
  Palette p;
  for (int i = 0; i < entries; ++i) {
    if (d[3 * i] != i || d[3 * i + 1] != i || d[3 * i + 2] != i) {
      p.present = true;
      break;
    }
  }
  p.entries = entries;
  p.rgb = d;
  return p;
}

absl::Status ParseHeader(const uint8_t* d, size_t n, Header* h) {
  if (n < 13) return Truncated("logical screen descriptor ends early");
  h->screen_width = Le16(d + 6);
  h->screen_height = Le16(d + 8);
  size_t pos = 13;
  Palette global;
  if (d[10] & 0x80) {
    const size_t bytes = size_t{3} << ((d[10] & 7) + 1);
    if (n - pos < bytes) return Truncated("global colour table ends early");
    global = ReadPalette(d + pos, (d[10] & 7) + 1);
    pos += bytes;
  }
  // GifImageFile.data(): one sub-block, or nothing at a terminator or the end of the file.
  auto data = [&](const uint8_t** block, size_t* len) {
    *block = nullptr;
    *len = 0;
    if (pos >= n) return false;
    const size_t size = d[pos++];
    if (size == 0) return false;
    *block = d + pos;
    *len = std::min(size, n - pos);
    pos += *len;
    return *len > 0;
  };
  const uint8_t* block;
  size_t len;
  for (;;) {
    if (pos >= n) return Truncated("no image before the end of the file");
    const uint8_t introducer = d[pos++];
    if (introducer == ';') return Corrupt("trailer before the first image");
    if (introducer == '!') {
      if (pos >= n) return Truncated("extension ends early");
      const uint8_t label = d[pos++];
      const bool has_block = data(&block, &len);
      if (label == 0xF9 && has_block) {  // graphic control extension
        const bool transparent = block[0] & 1;
        if (len < (transparent ? 4u : 3u)) return Corrupt("graphic control extension too short");
        if (transparent) h->transparency = block[3];
      } else if (label == 0xFE) {  // comment: its blocks up to the terminator
        while (data(&block, &len)) {
        }
        continue;
      } else if (label == 0xFF && has_block && len >= 11 &&
                 std::memcmp(block, "NETSCAPE2.0", 11) == 0) {
        data(&block, &len);  // the loop count
      }
      while (data(&block, &len)) {
      }
      continue;
    }
    if (introducer != ',') continue;  // Pillow skips any other byte
    if (n - pos < 9) return Truncated("image descriptor ends early");
    h->x0 = Le16(d + pos);
    h->y0 = Le16(d + pos + 2);
    h->frame_width = Le16(d + pos + 4);
    h->frame_height = Le16(d + pos + 6);
    const uint8_t flags = d[pos + 8];
    pos += 9;
    h->interlace = flags & 0x40;
    h->palette = global;
    if (flags & 0x80) {
      const size_t bytes = size_t{3} << ((flags & 7) + 1);
      if (n - pos < bytes) return Truncated("local colour table ends early");
      const Palette local = ReadPalette(d + pos, (flags & 7) + 1);
      // A grey-ramp local table leaves the frame in mode "L", but Pillow's load() then puts
      // the global table (if any) on it: the global colours, else grey.
      if (local.present) h->palette = local;
      pos += bytes;
    }
    if (pos >= n) return Truncated("LZW code size missing");
    h->bits = d[pos++];
    h->offset = pos;
    break;
  }
  h->width = std::max(h->screen_width, h->x0 + h->frame_width);
  h->height = std::max(h->screen_height, h->y0 + h->frame_height);
  return absl::OkStatus();
}

/// Pillow's GIF decoder (GifDecode.c semantics) writing the frame's indices into `canvas`.
class Lzw {
 public:
  Lzw(const uint8_t* d, size_t n, const Header& h, uint8_t* canvas, size_t canvas_stride)
      : d_(d), n_(n), h_(h), canvas_(canvas), canvas_stride_(canvas_stride) {}

  absl::Status Run() {
    if (h_.bits > 12) return Corrupt(absl::StrCat("LZW code size ", h_.bits));
    clear_ = 1 << h_.bits;
    end_ = clear_ + 1;
    step_ = h_.interlace ? 8 : 1;
    pass_ = h_.interlace ? 1 : 0;
    pos_ = h_.offset;
    buffered_end_ = std::min(n_, h_.offset + kChunk);
    if (h_.offset >= n_) return Truncated("no image data");
    row_ = canvas_ + size_t(h_.y0) * canvas_stride_ + h_.x0;
    Reset();
    uint8_t stack[kTable];
    for (;;) {
      int c;
      RL_RETURN_IF_ERROR(NextCode(&c));
      if (c == clear_) {
        if (!first_) Reset();
        continue;
      }
      if (c == end_) {
        // Pillow's decoder returns here; ImageFile.load then reads the next chunk of the file
        // and goes on decoding with it, or fails when there is none.
        RL_RETURN_IF_ERROR(ReadChunk());
        continue;
      }
      int depth = 0;
      if (first_) {
        if (c > clear_) return Corrupt("LZW code out of range after a clear code");
        last_data_ = last_code_ = c;
        first_ = false;
      } else {
        const int this_code = c;
        if (c > next_) return Corrupt("LZW code out of range");
        if (c == next_) {
          stack[depth++] = static_cast<uint8_t>(last_data_);
          c = last_code_;
        }
        while (c >= clear_) {
          if (depth >= kTable || c >= kTable) return Corrupt("LZW string too long");
          stack[depth++] = data_[c];
          c = link_[c];
        }
        last_data_ = c;
        if (next_ < kTable) {
          data_[next_] = static_cast<uint8_t>(c);
          link_[next_] = static_cast<uint16_t>(last_code_);
          if (next_ == code_mask_ && code_size_ < 12) {
            ++code_size_;
            code_mask_ = (1 << code_size_) - 1;
          }
          ++next_;
        }
        last_code_ = this_code;
      }
      if (Put(static_cast<uint8_t>(last_data_))) return absl::OkStatus();
      while (depth > 0) {
        if (Put(stack[--depth])) return absl::OkStatus();
      }
    }
  }

 private:
  void Reset() {
    next_ = clear_ + 2;
    code_size_ = h_.bits + 1;
    code_mask_ = (1 << code_size_) - 1;
    first_ = true;
  }

  /// One more 64 KiB read of the file, as ImageFile.load asks for when the decoder stops.
  absl::Status ReadChunk() {
    if (buffered_end_ >= n_) return Truncated("image data ends before the frame is complete");
    buffered_end_ = std::min(n_, buffered_end_ + kChunk);
    return absl::OkStatus();
  }

  absl::Status NextCode(int* code) {
    while (bit_count_ < code_size_) {
      if (block_left_ > 0) {
        bit_buffer_ |= uint32_t{d_[pos_++]} << bit_count_;
        bit_count_ += 8;
        --block_left_;
        continue;
      }
      // A new sub-block: decoded only once all of it has been read.
      while (pos_ >= buffered_end_ || buffered_end_ - pos_ < size_t{d_[pos_]} + 1) {
        RL_RETURN_IF_ERROR(ReadChunk());
      }
      block_left_ = d_[pos_++];
    }
    *code = static_cast<int>(bit_buffer_ & uint32_t(code_mask_));
    bit_buffer_ >>= code_size_;
    bit_count_ -= code_size_;
    return absl::OkStatus();
  }

  /// Writes one index; true once the frame is complete.
  bool Put(uint8_t v) {
    row_[x_] = v;
    if (++x_ < h_.frame_width) return false;
    x_ = 0;
    y_ += step_;
    while (y_ >= h_.frame_height) {
      switch (pass_) {
        case 1: y_ = 4; pass_ = 2; break;
        case 2: step_ = 4; y_ = 2; pass_ = 3; break;
        case 3: step_ = 2; y_ = 1; pass_ = 0; break;
        default: return true;
      }
    }
    row_ = canvas_ + size_t(h_.y0 + y_) * canvas_stride_ + h_.x0;
    return false;
  }

  const uint8_t* d_;
  size_t n_;
  const Header& h_;
  uint8_t* canvas_;
  size_t canvas_stride_;
  uint8_t* row_ = nullptr;
  int x_ = 0, y_ = 0, step_ = 1, pass_ = 0;
  int clear_ = 0, end_ = 0, next_ = 0, code_size_ = 0, code_mask_ = 0;
  int last_code_ = 0, last_data_ = 0;
  bool first_ = true;
  size_t pos_ = 0, buffered_end_ = 0, block_left_ = 0;
  uint32_t bit_buffer_ = 0;
  int bit_count_ = 0;
  uint8_t data_[kTable] = {};
  uint16_t link_[kTable] = {};
};

}  // namespace

absl::StatusOr<ImageSize> GifHeader(const uint8_t* data, size_t size) {
  Header h;
  RL_RETURN_IF_ERROR(ParseHeader(data, size, &h));
  return ImageSize{h.width, h.height};
}

absl::Status GifDecode(const uint8_t* data, size_t size, uint64_t max_pixels, Scratch& scratch,
                       Decoded* out) {
  if (size >= 10) {  // the logical screen first, before anything else is read
    const uint64_t screen = uint64_t{Le16(data + 6)} * Le16(data + 8);
    if (screen > max_pixels) {
      RL_RETURN_IF_ERROR(CheckPixelLimit("GIF", Le16(data + 6), Le16(data + 8), max_pixels));
    }
  }
  Header h;
  RL_RETURN_IF_ERROR(ParseHeader(data, size, &h));
  if (h.frame_width == 0 || h.frame_height == 0) {
    return Corrupt(absl::StrCat("first frame is ", h.frame_width, " x ", h.frame_height));
  }
  RL_RETURN_IF_ERROR(CheckPixelLimit("GIF", h.width, h.height, max_pixels));
  const size_t w = size_t(h.width), hh = size_t(h.height);
  uint8_t* index = scratch.Raw(w * hh);
  std::memset(index, h.transparency >= 0 ? h.transparency : 0, w * hh);
  // ~12 KiB of tables: off the stack.
  RL_RETURN_IF_ERROR(std::make_unique<Lzw>(data, size, h, index, w)->Run());

  uint8_t lut[256][3];
  for (int i = 0; i < 256; ++i) {
    for (int c = 0; c < 3; ++c) {
      lut[i][c] = !h.palette.present          ? static_cast<uint8_t>(i)
                  : i < h.palette.entries     ? h.palette.rgb[3 * i + c]
                                              : 0;
    }
  }
  uint8_t* px = scratch.Pixels(w * hh * 3);
  for (size_t i = 0; i < w * hh; ++i) std::memcpy(px + 3 * i, lut[index[i]], 3);
  *out = Decoded{px, w * 3, 3, h.width, h.height};
  return absl::OkStatus();
}

}  // namespace ringloader::decode_internal
