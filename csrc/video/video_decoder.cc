#include "video/video_decoder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mutex>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "video/ffmpeg_library.h"

namespace ringloader::video {
namespace {

constexpr int kIoBufferSize = 64 * 1024;

// pts <-> seconds as torchcodec computes them (multiplication before division), so frame tables,
// timestamps and the frame "played at" a time agree with it to the last bit.
double PtsToSeconds(int64_t pts, AVRational time_base) {
  return static_cast<double>(pts) * time_base.num / time_base.den;
}
int64_t SecondsToClosestPts(double seconds, AVRational time_base) {
  return static_cast<int64_t>(std::round(seconds * time_base.den / time_base.num));
}
int64_t PtsOrDts(const AVPacket& packet) { return packet.pts == AV_NOPTS_VALUE ? packet.dts : packet.pts; }
int64_t PtsOrDts(const AVFrame& frame) { return frame.pts == AV_NOPTS_VALUE ? frame.pkt_dts : frame.pts; }
int64_t FrameDuration(const AVFrame& frame) {
#if LIBAVUTIL_VERSION_INT >= AV_VERSION_INT(57, 30, 100)
  return frame.duration;
#else
  return frame.pkt_duration;
#endif
}

// The bytes behind the AVIOContext: a file (or `size` bytes of it from `base`) read with pread,
// or a buffer in memory.
struct ByteSource {
  int fd = -1;
  int64_t base = 0;
  const uint8_t* data = nullptr;
  std::shared_ptr<const void> owner;
  int64_t size = 0;
  int64_t pos = 0;
  ~ByteSource() {
    if (fd >= 0) close(fd);
  }
};

int ReadBytes(void* opaque, uint8_t* buffer, int capacity) {
  auto* source = static_cast<ByteSource*>(opaque);
  if (source->pos >= source->size) return AVERROR_EOF;
  size_t want = static_cast<size_t>(std::min<int64_t>(capacity, source->size - source->pos));
  if (source->fd >= 0) {
    ssize_t got;
    do {
      got = pread(source->fd, buffer, want, source->base + source->pos);
    } while (got < 0 && errno == EINTR);
    if (got < 0) return AVERROR(errno);
    if (got == 0) return AVERROR_EOF;
    want = static_cast<size_t>(got);
  } else {
    std::memcpy(buffer, source->data + source->pos, want);
  }
  source->pos += static_cast<int64_t>(want);
  return static_cast<int>(want);
}

int64_t SeekBytes(void* opaque, int64_t offset, int whence) {
  auto* source = static_cast<ByteSource*>(opaque);
  whence &= ~AVSEEK_FORCE;
  if (whence == AVSEEK_SIZE) return source->size;
  int64_t target;
  switch (whence) {
    case SEEK_SET: target = offset; break;
    case SEEK_CUR: target = source->pos + offset; break;
    case SEEK_END: target = source->size + offset; break;
    default: return AVERROR(EINVAL);
  }
  if (target < 0) return AVERROR(EINVAL);
  source->pos = target;
  return target;
}

// torchcodec's rounding of a display-matrix angle to a quarter turn.
int QuarterTurns(double degrees) {
  if (std::isnan(degrees)) return 0;
  return static_cast<int>(std::round(degrees / 90.0)) * 90;
}

struct FrameInfo {
  int64_t pts = 0;
  int64_t next_pts = std::numeric_limits<int64_t>::max();
  bool key = false;
};

}  // namespace

absl::Status VideoAvailable() { return LoadFfmpeg(); }

struct VideoDecoder::Impl {
  // Held by each decode and stats(): one decoder's calls from several threads take turns (the
  // demuxer, codec, converters and cursor below are one state).
  mutable std::mutex mutex;
  std::string name;
  VideoDecoderOptions options;
  std::unique_ptr<ByteSource> source;
  AVIOContext* avio = nullptr;
  AVFormatContext* format = nullptr;
  AVCodecContext* codec = nullptr;
  AVPacket* packet = nullptr;
  AVFrame* frame = nullptr;
  int stream_index = -1;
  AVRational time_base{0, 1};
  bool is_mpeg_ps = false;
  int rotation = 0;  // 0, 90 (counter-clockwise), -90 or 180/-180

  VideoMetadata meta;
  std::vector<FrameInfo> frames;      // sorted by pts
  std::vector<int64_t> key_pts;       // sorted
  std::vector<int64_t> key_index;     // frame index of key_pts[k]

  // Decode position (torchcodec's cursor logic, so seeks happen where its seeks happen).
  int64_t cursor = std::numeric_limits<int64_t>::min();
  bool cursor_set = false;
  int64_t last_pts = std::numeric_limits<int64_t>::min();
  int64_t last_duration = 0;
  int64_t last_index = std::numeric_limits<int64_t>::min();

  // Converters, rebuilt when a frame's size or format changes.
  SwsContext* sws = nullptr;
  std::array<int, 4> sws_key{-1, -1, -1, -1};
  AVFilterGraph* graph = nullptr;
  AVFilterContext* graph_source = nullptr;
  AVFilterContext* graph_sink = nullptr;
  std::string graph_key;
  std::vector<uint8_t> rgb;  // one frame, HWC
  std::vector<int64_t> wanted_pts;  // the pts of the frames the current call returns, sorted
  // The pts of packets sent as skippable (AVDISCARD_NONREF) since the codec was last flushed: a
  // later call that wants one of them must seek, as the codec never returns that frame now.
  std::vector<int64_t> discarded_pts;

  VideoDecodeStats stats;

  ~Impl() {
    const FfmpegApi& ff = Ffmpeg();
    if (graph != nullptr) ff.avfilter_graph_free(&graph);
    if (sws != nullptr) ff.sws_freeContext(sws);
    if (frame != nullptr) ff.av_frame_free(&frame);
    if (packet != nullptr) ff.av_packet_free(&packet);
    if (codec != nullptr) ff.avcodec_free_context(&codec);
    if (format != nullptr) ff.avformat_close_input(&format);
    if (avio != nullptr) {
      ff.av_free(avio->buffer);
      ff.avio_context_free(&avio);
    }
  }

  absl::Status Error(absl::StatusCode code, absl::string_view what) const {
    return absl::Status(code, absl::StrCat(name, ": ", what));
  }
  absl::Status FfError(absl::StatusCode code, absl::string_view what, int status) const {
    return Error(code, absl::StrCat(what, " (FFmpeg: ", FfmpegError(status), ")"));
  }

  absl::Status Open();
  absl::Status Scan();
  int KeyIdForPts(int64_t pts) const;
  int64_t IndexLowerBound(double seconds) const;
  bool CanAvoidSeeking() const;
  absl::Status MaybeSeek(int64_t frame_index);
  absl::Status DecodeUntilCursor(int64_t frame_index);
  absl::Status CheckFrame(const AVFrame& f, int64_t frame_index) const;
  absl::Status Convert(const AVFrame& f, int64_t frame_index, uint8_t* chw);
  absl::Status ConvertWithSwscale(const AVFrame& f);
  absl::Status ConvertWithFilterGraph(const AVFrame& f, const std::string& filters, int64_t frame_index,
                                      uint8_t* chw);
};

absl::Status VideoDecoder::Impl::Open() {
  const FfmpegApi& ff = Ffmpeg();
  auto* io_buffer = static_cast<unsigned char*>(ff.av_malloc(kIoBufferSize));
  if (io_buffer == nullptr) return Error(absl::StatusCode::kResourceExhausted, "out of memory");
  avio = ff.avio_alloc_context(io_buffer, kIoBufferSize, 0, source.get(), ReadBytes, nullptr, SeekBytes);
  if (avio == nullptr) {
    ff.av_free(io_buffer);
    return Error(absl::StatusCode::kResourceExhausted, "out of memory");
  }
  format = ff.avformat_alloc_context();
  if (format == nullptr) return Error(absl::StatusCode::kResourceExhausted, "out of memory");
  format->pb = avio;
  format->flags |= AVFMT_FLAG_CUSTOM_IO;
  // The name only helps the format probe (by extension); the bytes come from `avio`.
  int status = ff.avformat_open_input(&format, name.c_str(), nullptr, nullptr);
  if (status < 0) {
    format = nullptr;  // freed by avformat_open_input
    return FfError(absl::StatusCode::kInvalidArgument,
                   "not a video FFmpeg can read (unknown container, or a damaged or truncated file)", status);
  }
  is_mpeg_ps = std::strcmp(format->iformat->name, "mpeg") == 0;
  status = ff.avformat_find_stream_info(format, nullptr);
  if (status < 0) return FfError(absl::StatusCode::kInvalidArgument, "cannot read the streams' parameters", status);

  const AVCodec* decoder = nullptr;
  stream_index = ff.av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &decoder, 0);
  if (stream_index < 0) {
    return Error(absl::StatusCode::kInvalidArgument,
                 stream_index == AVERROR_DECODER_NOT_FOUND
                     ? "its video codec has no decoder in this FFmpeg build (unsupported codec)"
                     : "has no video stream");
  }
  AVStream* stream = format->streams[stream_index];
  if (decoder == nullptr) {
    return Error(absl::StatusCode::kUnimplemented,
                 absl::StrCat("no decoder for its codec '", ff.avcodec_get_name(stream->codecpar->codec_id),
                              "' in this FFmpeg build (unsupported codec)"));
  }
  time_base = stream->time_base;
  const AVCodecParameters& par = *stream->codecpar;
  if (par.width <= 0 || par.height <= 0) {
    return Error(absl::StatusCode::kInvalidArgument, "its video stream has no frame size");
  }
  uint64_t pixels = static_cast<uint64_t>(par.width) * static_cast<uint64_t>(par.height);
  if (pixels > options.max_frame_pixels) {
    return Error(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("frames of ", par.width, "x", par.height, " (", pixels,
                              " pixels) exceed max_frame_pixels=", options.max_frame_pixels,
                              " (a decompression-bomb guard; raise it for such videos)"));
  }

  codec = ff.avcodec_alloc_context3(decoder);
  if (codec == nullptr) return Error(absl::StatusCode::kResourceExhausted, "out of memory");
  status = ff.avcodec_parameters_to_context(codec, stream->codecpar);
  if (status < 0) return FfError(absl::StatusCode::kInvalidArgument, "bad codec parameters", status);
  codec->thread_count = std::max(options.threads, 0);
  codec->pkt_timebase = stream->time_base;
  status = ff.avcodec_open2(codec, decoder, nullptr);
  if (status < 0) {
    return FfError(absl::StatusCode::kInvalidArgument,
                   absl::StrCat("cannot open the '", ff.avcodec_get_name(par.codec_id), "' decoder"), status);
  }
  codec->time_base = stream->time_base;
  for (unsigned i = 0; i < format->nb_streams; ++i) {
    if (static_cast<int>(i) != stream_index) format->streams[i]->discard = AVDISCARD_ALL;
  }
  packet = ff.av_packet_alloc();
  frame = ff.av_frame_alloc();
  if (packet == nullptr || frame == nullptr) return Error(absl::StatusCode::kResourceExhausted, "out of memory");

  const int32_t* matrix = nullptr;
#if LIBAVFORMAT_VERSION_MAJOR < 61
  matrix = reinterpret_cast<const int32_t*>(ff.av_stream_get_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, nullptr));
#else
  if (const AVPacketSideData* side = ff.av_packet_side_data_get(par.coded_side_data, par.nb_coded_side_data,
                                                                AV_PKT_DATA_DISPLAYMATRIX)) {
    matrix = reinterpret_cast<const int32_t*>(side->data);
  }
#endif
  if (matrix != nullptr) {
    double degrees = ff.av_display_rotation_get(matrix);
    if (!std::isnan(degrees)) {
      meta.rotation = degrees;
      rotation = QuarterTurns(degrees);
      if (rotation != 0 && rotation != 90 && rotation != -90 && rotation != 180 && rotation != -180) {
        return Error(absl::StatusCode::kInvalidArgument,
                     absl::StrCat("unexpected rotation ", degrees, " degrees in its display matrix"));
      }
    }
  }
  bool quarter = rotation == 90 || rotation == -90;
  meta.width = quarter ? par.height : par.width;
  meta.height = quarter ? par.width : par.height;
  meta.codec = ff.avcodec_get_name(codec->codec_id);
  return Scan();
}

// Every packet of the stream once: its pts (or dts) and key flag, then sorted by pts. This is
// the frame table torchcodec's "exact" seek mode builds, so frame i is the same frame in both.
absl::Status VideoDecoder::Impl::Scan() {
  const FfmpegApi& ff = Ffmpeg();
  int64_t begin = std::numeric_limits<int64_t>::max();
  int64_t end = std::numeric_limits<int64_t>::min();
  while (true) {
    int status = ff.av_read_frame(format, packet);
    if (status == AVERROR_EOF) break;
    if (status < 0) {
      return FfError(absl::StatusCode::kDataLoss,
                     absl::StrCat("reading packet ", frames.size(), " of its video stream failed"), status);
    }
    if (packet->stream_index == stream_index && !(packet->flags & AV_PKT_FLAG_DISCARD)) {
      int64_t pts = PtsOrDts(*packet);
      begin = std::min(begin, pts);
      end = std::max(end, pts + packet->duration);
      FrameInfo info;
      info.pts = pts;
      info.key = (packet->flags & AV_PKT_FLAG_KEY) != 0;
      frames.push_back(info);
    }
    ff.av_packet_unref(packet);
  }
  if (frames.empty()) return Error(absl::StatusCode::kInvalidArgument, "its video stream has no frames (empty video)");
  std::sort(frames.begin(), frames.end(), [](const FrameInfo& a, const FrameInfo& b) { return a.pts < b.pts; });
  meta.pts_seconds.reserve(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    if (i + 1 < frames.size()) frames[i].next_pts = frames[i + 1].pts;
    if (frames[i].key) {
      key_pts.push_back(frames[i].pts);
      key_index.push_back(static_cast<int64_t>(i));
      meta.key_frame_indices.push_back(static_cast<int64_t>(i));
    }
    meta.pts_seconds.push_back(PtsToSeconds(frames[i].pts, time_base));
  }
  meta.num_frames = static_cast<int64_t>(frames.size());
  meta.begin_stream_seconds = PtsToSeconds(begin, time_base);
  meta.end_stream_seconds = PtsToSeconds(end, time_base);
  meta.duration_seconds = meta.end_stream_seconds - meta.begin_stream_seconds;
  if (meta.duration_seconds != 0.0) {
    meta.average_fps = static_cast<double>(meta.num_frames) / meta.duration_seconds;
  } else {
    meta.average_fps = av_q2d(format->streams[stream_index]->r_frame_rate);
  }
  // Back to the start, as torchcodec leaves it after its scan.
  int status = ff.avformat_seek_file(format, 0, std::numeric_limits<int64_t>::min(), 0, 0, 0);
  if (status < 0) return FfError(absl::StatusCode::kDataLoss, "cannot seek back to its start", status);
  return absl::OkStatus();
}

int VideoDecoder::Impl::KeyIdForPts(int64_t pts) const {
  auto it = std::upper_bound(key_pts.begin(), key_pts.end(), pts);
  if (it == key_pts.begin()) return -1;
  return static_cast<int>(it - key_pts.begin()) - 1;
}

int64_t VideoDecoder::Impl::IndexLowerBound(double seconds) const {
  auto it = std::lower_bound(frames.begin(), frames.end(), seconds, [this](const FrameInfo& f, double t) {
    return PtsToSeconds(f.next_pts, time_base) <= t;
  });
  return it - frames.begin();
}

// torchcodec's rule: decode forward instead of seeking while the target's keyframe is no
// further ahead than the frames the decoder holds anyway (its reorder buffer and, with frame
// threading, the frames in flight); seek backwards always.
bool VideoDecoder::Impl::CanAvoidSeeking() const {
  if (!cursor_set) return true;
  if (cursor <= last_pts) return false;
  int last_key = KeyIdForPts(last_pts);
  int target_key = KeyIdForPts(cursor);
  if (last_key < 0 || target_key < 0) return false;
  if (last_key == target_key) return true;
  int64_t last = IndexLowerBound(PtsToSeconds(last_pts, time_base));
  int64_t target_key_frame = key_index[target_key];
  int64_t reorder = std::max(codec->has_b_frames, 0);
  int64_t in_flight = (codec->active_thread_type & FF_THREAD_FRAME) ? std::max(codec->thread_count, 1) - 1 : 0;
  return target_key_frame - last <= reorder + in_flight;
}

absl::Status VideoDecoder::Impl::MaybeSeek(int64_t frame_index) {
  if (CanAvoidSeeking()) return absl::OkStatus();
  int64_t target = cursor;
  int key = KeyIdForPts(target);
  if (key >= 0) target = key_pts[key];
  const FfmpegApi& ff = Ffmpeg();
  int status = ff.avformat_seek_file(format, stream_index, std::numeric_limits<int64_t>::min(), target, target, 0);
  if (status < 0) {
    return FfError(absl::StatusCode::kDataLoss,
                   absl::StrCat("seeking to the keyframe before frame ", frame_index, " failed"), status);
  }
  ff.avcodec_flush_buffers(codec);
  discarded_pts.clear();
  ++stats.seeks;
  return absl::OkStatus();
}

absl::Status VideoDecoder::Impl::DecodeUntilCursor(int64_t frame_index) {
  const FfmpegApi& ff = Ffmpeg();
  bool seeked_ps = is_mpeg_ps && !CanAvoidSeeking();
  if (absl::Status s = MaybeSeek(frame_index); !s.ok()) return s;
  cursor_set = false;
  bool misaligned = seeked_ps;  // MPEG-PS packets right after a seek may not start on a boundary
  bool reached_eof = false;
  int status = 0;
  while (true) {
    status = ff.avcodec_receive_frame(codec, frame);
    if (status != 0 && status != AVERROR(EAGAIN)) break;
    if (status == 0) {
      ++stats.frames_decoded;
      if (PtsOrDts(*frame) >= cursor) break;
      continue;
    }
    if (reached_eof) continue;
    do {
      status = ff.av_read_frame(format, packet);
      if (status == 0 && packet->stream_index != stream_index) ff.av_packet_unref(packet);
    } while (status == 0 && packet->stream_index != stream_index);
    if (status == AVERROR_EOF) {
      status = ff.avcodec_send_packet(codec, nullptr);
      if (status < 0) return FfError(absl::StatusCode::kDataLoss, "cannot drain the decoder", status);
      reached_eof = true;
      continue;
    }
    if (status < 0) {
      return FfError(absl::StatusCode::kDataLoss,
                     absl::StrCat("reading the packets of frame ", frame_index, " failed"), status);
    }
    // A frame no call wants and no other frame references is not decoded at all (the
    // codec's skip_frame for this packet): the frames kept are bit-identical, fewer frames cost.
    if (options.skip_unwanted_frames) {
      bool wanted = std::binary_search(wanted_pts.begin(), wanted_pts.end(), PtsOrDts(*packet));
      codec->skip_frame = wanted ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
      if (!wanted) discarded_pts.push_back(PtsOrDts(*packet));
    }
    status = ff.avcodec_send_packet(codec, packet);
    ff.av_packet_unref(packet);
    if (status == AVERROR_INVALIDDATA && misaligned) continue;
    if (status < 0) {
      return FfError(absl::StatusCode::kDataLoss,
                     absl::StrCat("decoding failed at frame ", frame_index, " (corrupt data?)"), status);
    }
    misaligned = false;
  }
  if (status < 0) {
    if (reached_eof || status == AVERROR_EOF) {
      return Error(absl::StatusCode::kDataLoss,
                   absl::StrCat("the decoder ended before frame ", frame_index,
                                " (frames missing from the stream: a damaged or truncated file?)"));
    }
    return FfError(absl::StatusCode::kDataLoss, absl::StrCat("decoding failed at frame ", frame_index), status);
  }
  last_pts = PtsOrDts(*frame);
  last_duration = FrameDuration(*frame);
  return absl::OkStatus();
}

absl::Status VideoDecoder::Impl::CheckFrame(const AVFrame& f, int64_t frame_index) const {
  if ((f.flags & AV_FRAME_FLAG_CORRUPT) != 0 || f.decode_error_flags != 0) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat("frame ", frame_index, " is damaged (the decoder reported corrupt data)"));
  }
  uint64_t pixels = static_cast<uint64_t>(std::max(f.width, 0)) * static_cast<uint64_t>(std::max(f.height, 0));
  if (pixels > options.max_frame_pixels) {
    return Error(absl::StatusCode::kResourceExhausted,
                 absl::StrCat("frame ", frame_index, " is ", f.width, "x", f.height,
                              ", over max_frame_pixels=", options.max_frame_pixels, " (a decompression-bomb guard)"));
  }
  return absl::OkStatus();
}

absl::Status VideoDecoder::Impl::ConvertWithSwscale(const AVFrame& f) {
  const FfmpegApi& ff = Ffmpeg();
  std::array<int, 4> key{f.width, f.height, f.format, static_cast<int>(f.colorspace)};
  if (sws == nullptr || key != sws_key) {
    if (sws != nullptr) ff.sws_freeContext(sws);
    sws_key = key;
    // As torchcodec: no scaler flags (same size), the frame's colorspace matrix both ways and
    // the ranges swscale derives from the pixel formats.
    sws = ff.sws_getContext(f.width, f.height, static_cast<AVPixelFormat>(f.format), f.width, f.height,
                            AV_PIX_FMT_RGB24, 0, nullptr, nullptr, nullptr);
    if (sws == nullptr) return Error(absl::StatusCode::kInvalidArgument, "swscale cannot convert its pixel format");
    int* inv_table = nullptr;
    int* table = nullptr;
    int src_range = 0, dst_range = 0, brightness = 0, contrast = 0, saturation = 0;
    if (ff.sws_getColorspaceDetails(sws, &inv_table, &src_range, &table, &dst_range, &brightness, &contrast,
                                    &saturation) != -1) {
      const int* coefficients = ff.sws_getCoefficients(f.colorspace);
      ff.sws_setColorspaceDetails(sws, coefficients, src_range, coefficients, dst_range, brightness, contrast,
                                  saturation);
    }
  }
  uint8_t* planes[4] = {rgb.data(), nullptr, nullptr, nullptr};
  int strides[4] = {f.width * 3, 0, 0, 0};
  int rows = ff.sws_scale(sws, f.data, f.linesize, 0, f.height, planes, strides);
  if (rows != f.height) return Error(absl::StatusCode::kInternal, "swscale converted a partial frame");
  return absl::OkStatus();
}

absl::Status VideoDecoder::Impl::ConvertWithFilterGraph(const AVFrame& f, const std::string& filters,
                                                        int64_t frame_index, uint8_t* chw) {
  const FfmpegApi& ff = Ffmpeg();
  AVRational sar = f.sample_aspect_ratio;
  std::string args = absl::StrFormat("video_size=%dx%d:pix_fmt=%d:time_base=%d/%d:pixel_aspect=%d/%d", f.width,
                                     f.height, f.format, time_base.num, time_base.den, sar.num, sar.den);
  std::string key = absl::StrCat(args, "|", filters);
  if (graph == nullptr || key != graph_key) {
    if (graph != nullptr) ff.avfilter_graph_free(&graph);
    graph_key.clear();
    graph = ff.avfilter_graph_alloc();
    if (graph == nullptr) return Error(absl::StatusCode::kResourceExhausted, "out of memory");
    ff.av_opt_set_int(graph, "threads", std::max(options.threads, 1), 0);
    int status = ff.avfilter_graph_create_filter(&graph_source, ff.avfilter_get_by_name("buffer"), "in",
                                                 args.c_str(), nullptr, graph);
    if (status < 0) return FfError(absl::StatusCode::kInternal, "cannot set up the color conversion", status);
    status = ff.avfilter_graph_create_filter(&graph_sink, ff.avfilter_get_by_name("buffersink"), "out", nullptr,
                                             nullptr, graph);
    if (status < 0) return FfError(absl::StatusCode::kInternal, "cannot set up the color conversion", status);
    int formats[] = {AV_PIX_FMT_RGB24};
    status = ff.av_opt_set_bin(graph_sink, "pix_fmts", reinterpret_cast<const uint8_t*>(formats), sizeof(formats),
                               AV_OPT_SEARCH_CHILDREN);
    if (status < 0) return FfError(absl::StatusCode::kInternal, "cannot set up the color conversion", status);
    FilterInOut* outputs = ff.avfilter_inout_alloc();
    FilterInOut* inputs = ff.avfilter_inout_alloc();
    if (outputs == nullptr || inputs == nullptr) {
      ff.avfilter_inout_free(&outputs);
      ff.avfilter_inout_free(&inputs);
      return Error(absl::StatusCode::kResourceExhausted, "out of memory");
    }
    outputs->name = ff.av_strdup("in");
    outputs->filter_ctx = graph_source;
    outputs->pad_idx = 0;
    outputs->next = nullptr;
    inputs->name = ff.av_strdup("out");
    inputs->filter_ctx = graph_sink;
    inputs->pad_idx = 0;
    inputs->next = nullptr;
    status = ff.avfilter_graph_parse_ptr(graph, filters.c_str(), &inputs, &outputs, nullptr);
    ff.avfilter_inout_free(&outputs);
    ff.avfilter_inout_free(&inputs);
    if (status < 0) return FfError(absl::StatusCode::kInternal, absl::StrCat("bad filter graph '", filters, "'"), status);
    status = ff.avfilter_graph_config(graph, nullptr);
    if (status < 0) return FfError(absl::StatusCode::kInvalidArgument, "cannot convert its pixel format to RGB", status);
    graph_key = key;
  }
  int status = ff.av_buffersrc_write_frame(graph_source, &f);
  if (status < 0) return FfError(absl::StatusCode::kInternal, "color conversion failed", status);
  AVFrame* out = ff.av_frame_alloc();
  if (out == nullptr) return Error(absl::StatusCode::kResourceExhausted, "out of memory");
  status = ff.av_buffersink_get_frame(graph_sink, out);
  absl::Status result = absl::OkStatus();
  if (status < 0) {
    result = FfError(absl::StatusCode::kInternal, "color conversion failed", status);
  } else if (out->width != meta.width || out->height != meta.height || out->format != AV_PIX_FMT_RGB24) {
    result = Error(absl::StatusCode::kUnimplemented,
                   absl::StrCat("frame ", frame_index, " is ", out->width, "x", out->height, " but the stream is ",
                                meta.width, "x", meta.height, " (resolution changes mid-stream are not supported)"));
  } else {
    const size_t plane = static_cast<size_t>(meta.width) * meta.height;
    for (int y = 0; y < out->height; ++y) {
      const uint8_t* row = out->data[0] + static_cast<ptrdiff_t>(y) * out->linesize[0];
      uint8_t* r = chw + static_cast<size_t>(y) * meta.width;
      for (int x = 0; x < out->width; ++x) {
        r[x] = row[3 * x];
        r[plane + x] = row[3 * x + 1];
        r[2 * plane + x] = row[3 * x + 2];
      }
    }
  }
  ff.av_frame_free(&out);
  return result;
}

// To RGB as torchcodec 0.17's CPU device converts a frame without transforms: swscale when the
// width is a multiple of 32, else a filter graph ("copy" into an RGB24 sink, whose automatic
// scale filter converts); a rotated stream always through the graph, rotated there by
// transpose / hflip,vflip after the conversion to RGB.
absl::Status VideoDecoder::Impl::Convert(const AVFrame& f, int64_t frame_index, uint8_t* chw) {
  std::string filters;
  if (rotation == 90) {
    filters = "format=rgb24,transpose=cclock";
  } else if (rotation == -90) {
    filters = "format=rgb24,transpose=clock";
  } else if (rotation == 180 || rotation == -180) {
    filters = "format=rgb24,hflip,vflip";
  } else if (f.width % 32 != 0) {
    filters = "copy";
  }
  if (!filters.empty()) return ConvertWithFilterGraph(f, filters, frame_index, chw);
  if (f.width != meta.width || f.height != meta.height) {
    return Error(absl::StatusCode::kUnimplemented,
                 absl::StrCat("frame ", frame_index, " is ", f.width, "x", f.height, " but the stream is ", meta.width,
                              "x", meta.height, " (resolution changes mid-stream are not supported)"));
  }
  rgb.resize(static_cast<size_t>(f.width) * f.height * 3);
  if (absl::Status s = ConvertWithSwscale(f); !s.ok()) return s;
  const size_t plane = static_cast<size_t>(f.width) * f.height;
  const uint8_t* src = rgb.data();
  for (size_t i = 0; i < plane; ++i) {
    chw[i] = src[3 * i];
    chw[plane + i] = src[3 * i + 1];
    chw[2 * plane + i] = src[3 * i + 2];
  }
  return absl::OkStatus();
}

VideoDecoder::VideoDecoder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VideoDecoder::~VideoDecoder() = default;

absl::StatusOr<std::unique_ptr<VideoDecoder>> VideoDecoder::OpenFile(const std::string& path,
                                                                     const VideoDecoderOptions& options,
                                                                     const ByteRange& range, const std::string& name) {
  const std::string& label = name.empty() ? path : name;
  if (absl::Status s = LoadFfmpeg(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(label, ": ", s.message()));
  }
  auto source = std::make_unique<ByteSource>();
  source->fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source->fd < 0) {
    int err = errno;
    std::string what = absl::StrCat(label, ": cannot open", label == path ? "" : " " + path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(what) : absl::PermissionDeniedError(what);
  }
  struct stat st{};
  if (fstat(source->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not a regular file"));
  }
  source->size = st.st_size;
  if (range.offset != 0 || range.length >= 0) {
    const int64_t length = range.length >= 0 ? range.length : st.st_size - range.offset;
    if (range.offset < 0 || length < 0 || range.offset + length > st.st_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          label, ": bytes ", range.offset, "..", range.offset + length, " of ", path, " are past its end (",
          st.st_size, " bytes): the file changed since it was indexed?"));
    }
    source->base = range.offset;
    source->size = length;
  }
  auto impl = std::make_unique<Impl>();
  impl->name = label;
  impl->options = options;
  impl->source = std::move(source);
  if (absl::Status s = impl->Open(); !s.ok()) return s;
  return std::unique_ptr<VideoDecoder>(new VideoDecoder(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<VideoDecoder>> VideoDecoder::OpenMemory(const uint8_t* data, size_t size,
                                                                       std::shared_ptr<const void> owner,
                                                                       const std::string& name,
                                                                       const VideoDecoderOptions& options) {
  if (absl::Status s = LoadFfmpeg(); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(name, ": ", s.message()));
  }
  auto source = std::make_unique<ByteSource>();
  source->data = data;
  source->size = static_cast<int64_t>(size);
  source->owner = std::move(owner);
  auto impl = std::make_unique<Impl>();
  impl->name = name;
  impl->options = options;
  impl->source = std::move(source);
  if (absl::Status s = impl->Open(); !s.ok()) return s;
  return std::unique_ptr<VideoDecoder>(new VideoDecoder(std::move(impl)));
}

const VideoMetadata& VideoDecoder::metadata() const { return impl_->meta; }
const std::string& VideoDecoder::name() const { return impl_->name; }
VideoDecodeStats VideoDecoder::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->stats;
}

absl::StatusOr<DecodedFrames> VideoDecoder::DecodeFrames(absl::Span<const int64_t> indices) {
  Impl& d = *impl_;
  std::lock_guard<std::mutex> lock(d.mutex);
  const int64_t n = d.meta.num_frames;
  std::vector<int64_t> wanted(indices.begin(), indices.end());
  for (int64_t& index : wanted) {
    int64_t given = index;
    if (index < 0) index += n;
    if (index < 0 || index >= n) {
      return absl::OutOfRangeError(absl::StrCat(d.name, ": frame index ", given, " is out of range (the video has ", n,
                                                " frames: 0..", n - 1, ", or -", n, "..-1 from the end)"));
    }
  }
  const uint64_t frame_bytes = 3ull * static_cast<uint64_t>(d.meta.width) * static_cast<uint64_t>(d.meta.height);
  if (!wanted.empty() && frame_bytes * wanted.size() > d.options.max_clip_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        d.name, ": ", wanted.size(), " frames of ", d.meta.width, "x", d.meta.height, " need ",
        frame_bytes * wanted.size(), " bytes, over max_clip_bytes=", d.options.max_clip_bytes,
        " (a decompression-bomb guard; ask for fewer frames or raise the limit)"));
  }
  DecodedFrames out;
  out.frames = static_cast<int64_t>(wanted.size());
  out.height = d.meta.height;
  out.width = d.meta.width;
  out.data.resize(frame_bytes * wanted.size());
  out.pts_seconds.resize(wanted.size());
  out.duration_seconds.resize(wanted.size());
  d.wanted_pts.clear();
  for (int64_t index : wanted) d.wanted_pts.push_back(d.frames[index].pts);
  std::sort(d.wanted_pts.begin(), d.wanted_pts.end());
  // A frame this call wants may have been skipped by an earlier call (sent past the frames it
  // kept, then dropped by the codec): decoding on would return the next frame in its place.
  std::sort(d.discarded_pts.begin(), d.discarded_pts.end());
  if (std::any_of(d.wanted_pts.begin(), d.wanted_pts.end(), [&](int64_t pts) {
        return std::binary_search(d.discarded_pts.begin(), d.discarded_pts.end(), pts);
      })) {
    d.last_index = std::numeric_limits<int64_t>::min();  // the first frame seeks
    d.last_pts = std::numeric_limits<int64_t>::min();
  }
  std::vector<size_t> order(wanted.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return wanted[a] < wanted[b]; });
  for (size_t k = 0; k < order.size(); ++k) {
    size_t slot = order[k];
    int64_t index = wanted[slot];
    uint8_t* target = out.data.data() + frame_bytes * slot;
    if (k > 0 && wanted[order[k - 1]] == index) {
      size_t previous = order[k - 1];
      std::memcpy(target, out.data.data() + frame_bytes * previous, frame_bytes);
      out.pts_seconds[slot] = out.pts_seconds[previous];
      out.duration_seconds[slot] = out.duration_seconds[previous];
      continue;
    }
    if (index != d.last_index + 1) {
      d.cursor = SecondsToClosestPts(PtsToSeconds(d.frames[index].pts, d.time_base), d.time_base);
      d.cursor_set = true;
    }
    absl::Status status = d.DecodeUntilCursor(index);
    if (status.ok()) status = d.CheckFrame(*d.frame, index);
    if (status.ok()) status = d.Convert(*d.frame, index, target);
    if (!status.ok()) {
      // The codec's state is unknown after a failure: the next call seeks afresh.
      d.last_index = std::numeric_limits<int64_t>::min();
      d.last_pts = std::numeric_limits<int64_t>::min();
      return status;
    }
    ++d.stats.frames_kept;
    out.pts_seconds[slot] = PtsToSeconds(PtsOrDts(*d.frame), d.time_base);
    out.duration_seconds[slot] = PtsToSeconds(FrameDuration(*d.frame), d.time_base);
    d.last_index = index;
  }
  return out;
}

absl::StatusOr<std::vector<int64_t>> VideoDecoder::IndicesPlayedAt(absl::Span<const double> seconds) const {
  const Impl& d = *impl_;
  std::vector<int64_t> indices;
  indices.reserve(seconds.size());
  for (double t : seconds) {
    if (!(t >= d.meta.begin_stream_seconds && t < d.meta.end_stream_seconds)) {
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: no frame is played at %g s: the video's frames play in [%g, %g) s", d.name, t,
          d.meta.begin_stream_seconds, d.meta.end_stream_seconds));
    }
    indices.push_back(d.IndexLowerBound(t));
  }
  return indices;
}

absl::StatusOr<DecodedFrames> VideoDecoder::DecodeFramesPlayedAt(absl::Span<const double> seconds) {
  absl::StatusOr<std::vector<int64_t>> indices = IndicesPlayedAt(seconds);
  if (!indices.ok()) return indices.status();
  return DecodeFrames(*indices);
}

}  // namespace ringloader::video
