#pragma once
/// Frame-exact video decoding with the system's FFmpeg (loaded at run time, ffmpeg_library.h).
///
/// A VideoDecoder opens one file (by path) or one buffer in memory (a custom AVIOContext over
/// the bytes, so a shard member or a remote range decodes the same way), scans its packets once
/// into a frame table (every frame's pts, sorted, and which are keyframes: torchcodec's "exact"
/// seek mode), and decodes lists of frame indices: it seeks to the keyframe at or before a
/// wanted frame, decodes forward, and converts only the frames it keeps to RGB, as torchcodec
/// 0.17's CPU VideoDecoder does (same seek decisions, same swscale / filter-graph conversion on
/// the same FFmpeg, so the pixels are equal). Output: uint8 [T, 3, H, W].
///
/// One decoder per thread: a decoder holds its demuxer, codec and converters; nothing is shared
/// between decoders but the loaded FFmpeg table. Calls on one decoder from several threads are
/// safe but take turns.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace ringloader::video {

/// Whether video decoding can run: OK, or FailedPrecondition naming the FFmpeg libraries to
/// install (the build found FFmpeg's headers; the libraries are looked for at run time).
absl::Status VideoAvailable();

struct VideoDecoderOptions {
  /// Largest frame (width * height) accepted: a decompression-bomb guard, checked on the
  /// stream's header and on every decoded frame. Default: the image limit (kDefaultMaxImagePixels).
  uint64_t max_frame_pixels = 178956970;
  /// Largest decoded output (frames * 3 * height * width bytes) one call may return.
  uint64_t max_clip_bytes = uint64_t{2} << 30;
  /// FFmpeg decoder threads (1, as torchcodec's default: a loader runs one decoder per thread).
  int threads = 1;
  /// Packets of frames the call does not return and no frame references (B-frames mostly) are
  /// not decoded (the codec's skip_frame = AVDISCARD_NONREF for them). The frames returned are
  /// the same; false decodes every frame as torchcodec does.
  bool skip_unwanted_frames = true;
};

struct VideoMetadata {
  int64_t num_frames = 0;           // frames in the scanned table
  double average_fps = 0;           // num_frames / (end - begin), else the header's rate
  int width = 0;                    // as decoded frames are returned (after rotation)
  int height = 0;
  double duration_seconds = 0;      // end - begin
  double begin_stream_seconds = 0;  // smallest packet pts
  double end_stream_seconds = 0;    // largest packet pts + its duration
  std::string codec;                // FFmpeg's codec name ("h264", "hevc", "vp9", ...)
  double rotation = 0;              // the stream's display-matrix rotation in degrees (0: none)
  std::vector<double> pts_seconds;  // every frame's pts, sorted (index i is frame i)
  std::vector<int64_t> key_frame_indices;
};

/// Decoded frames: data is frames x 3 x height x width uint8 (CHW per frame).
struct DecodedFrames {
  std::vector<uint8_t> data;
  int64_t frames = 0;
  int height = 0;
  int width = 0;
  std::vector<double> pts_seconds;       // each returned frame's pts
  std::vector<double> duration_seconds;  // each returned frame's duration
};

/// What a decoder has done since it was opened (the decode work per frame kept).
struct VideoDecodeStats {
  int64_t frames_decoded = 0;  // frames the codec produced
  int64_t frames_kept = 0;     // frames converted to RGB and returned
  int64_t seeks = 0;
};

/// A part of a file: `length` bytes from `offset` (length < 0: to the end of the file).
struct ByteRange {
  int64_t offset = 0;
  int64_t length = -1;
};

class VideoDecoder {
 public:
  /// Opens a file (read with pread by ringloader, never through FFmpeg's URL protocols, so a
  /// name such as "http:x" or "pipe:0" is a file name), or the `range` of its bytes (a member of
  /// a tar shard: the video is those bytes alone). Errors give `name`, else the path.
  static absl::StatusOr<std::unique_ptr<VideoDecoder>> OpenFile(const std::string& path,
                                                                const VideoDecoderOptions& options = {},
                                                                const ByteRange& range = {},
                                                                const std::string& name = "");
  /// Opens bytes in memory; `owner` keeps them alive while the decoder lives; `name` is the name
  /// errors give (a path, a shard member).
  static absl::StatusOr<std::unique_ptr<VideoDecoder>> OpenMemory(const uint8_t* data, size_t size,
                                                                  std::shared_ptr<const void> owner,
                                                                  const std::string& name,
                                                                  const VideoDecoderOptions& options = {});
  ~VideoDecoder();
  VideoDecoder(const VideoDecoder&) = delete;
  VideoDecoder& operator=(const VideoDecoder&) = delete;

  const VideoMetadata& metadata() const;
  const std::string& name() const;
  VideoDecodeStats stats() const;

  /// The frames at these indices, in this order (any order, repeats allowed; negative counts
  /// from the end as in Python). An index out of range is InvalidArgument (OutOfRange) naming the
  /// range; a frame that fails to decode is DataLoss naming the file and the frame index.
  absl::StatusOr<DecodedFrames> DecodeFrames(absl::Span<const int64_t> indices);
  /// The frames played at these times (the frame whose pts <= t < next pts); a time outside
  /// [begin_stream_seconds, end_stream_seconds) is OutOfRange naming the range.
  absl::StatusOr<DecodedFrames> DecodeFramesPlayedAt(absl::Span<const double> seconds);
  /// The frame index played at each time (the rule above), without decoding.
  absl::StatusOr<std::vector<int64_t>> IndicesPlayedAt(absl::Span<const double> seconds) const;

  struct Impl;

 private:
  explicit VideoDecoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringloader::video
