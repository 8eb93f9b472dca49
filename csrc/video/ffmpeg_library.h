#pragma once
/// FFmpeg loaded at run time: the system's libavformat, libavcodec, libavutil, libswscale and
/// libavfilter of the major versions whose headers the build found, opened with dlopen and their
/// functions resolved into one table. Nothing of FFmpeg is linked into ringloader, so images work
/// on a machine without it, and a user picks the FFmpeg build their distribution ships.
///
/// The headers give the structures' layouts (stable within a major version, which is why only
/// the build's majors are opened); libavfilter's few functions are declared here, since the
/// build needs no libavfilter headers (it only configures a filter graph by strings).

#include <string>

#include "absl/status/status.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/display.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

// libavfilter (opaque here; FFmpeg's own declarations have these exact signatures).
struct AVFilterGraph;
struct AVFilter;
struct AVFilterContext;
}

namespace ringloader::video {

/// The public layout of libavfilter's AVFilterInOut (unchanged from FFmpeg 4 to 8).
struct FilterInOut {
  char* name;
  AVFilterContext* filter_ctx;
  int pad_idx;
  FilterInOut* next;
};

/// One pointer per FFmpeg function ringloader calls, named as FFmpeg names them.
struct FfmpegApi {
#define RL_FFMPEG_FN(name) decltype(&::name) name = nullptr;
  // libavformat
  RL_FFMPEG_FN(avformat_alloc_context)
  RL_FFMPEG_FN(avformat_open_input)
  RL_FFMPEG_FN(avformat_find_stream_info)
  RL_FFMPEG_FN(avformat_close_input)
  RL_FFMPEG_FN(av_find_best_stream)
  RL_FFMPEG_FN(av_read_frame)
  RL_FFMPEG_FN(avformat_seek_file)
  RL_FFMPEG_FN(avio_alloc_context)
  RL_FFMPEG_FN(avio_context_free)
#if LIBAVFORMAT_VERSION_MAJOR < 61
  RL_FFMPEG_FN(av_stream_get_side_data)
#else
  RL_FFMPEG_FN(av_packet_side_data_get)
#endif
  // libavcodec
  RL_FFMPEG_FN(avcodec_alloc_context3)
  RL_FFMPEG_FN(avcodec_free_context)
  RL_FFMPEG_FN(avcodec_parameters_to_context)
  RL_FFMPEG_FN(avcodec_open2)
  RL_FFMPEG_FN(avcodec_send_packet)
  RL_FFMPEG_FN(avcodec_receive_frame)
  RL_FFMPEG_FN(avcodec_flush_buffers)
  RL_FFMPEG_FN(avcodec_get_name)
  RL_FFMPEG_FN(av_packet_alloc)
  RL_FFMPEG_FN(av_packet_free)
  RL_FFMPEG_FN(av_packet_unref)
  // libavutil
  RL_FFMPEG_FN(av_frame_alloc)
  RL_FFMPEG_FN(av_frame_free)
  RL_FFMPEG_FN(av_frame_unref)
  RL_FFMPEG_FN(av_malloc)
  RL_FFMPEG_FN(av_free)
  RL_FFMPEG_FN(av_strdup)
  RL_FFMPEG_FN(av_strerror)
  RL_FFMPEG_FN(av_log_set_level)
  RL_FFMPEG_FN(av_display_rotation_get)
  RL_FFMPEG_FN(av_opt_set_bin)
  RL_FFMPEG_FN(av_opt_set_int)
  // libswscale
  RL_FFMPEG_FN(sws_getContext)
  RL_FFMPEG_FN(sws_freeContext)
  RL_FFMPEG_FN(sws_scale)
  RL_FFMPEG_FN(sws_getColorspaceDetails)
  RL_FFMPEG_FN(sws_setColorspaceDetails)
  RL_FFMPEG_FN(sws_getCoefficients)
#undef RL_FFMPEG_FN
  // libavfilter
  AVFilterGraph* (*avfilter_graph_alloc)() = nullptr;
  void (*avfilter_graph_free)(AVFilterGraph**) = nullptr;
  const AVFilter* (*avfilter_get_by_name)(const char*) = nullptr;
  int (*avfilter_graph_create_filter)(AVFilterContext**, const AVFilter*, const char*, const char*,
                                      void*, AVFilterGraph*) = nullptr;
  FilterInOut* (*avfilter_inout_alloc)() = nullptr;
  void (*avfilter_inout_free)(FilterInOut**) = nullptr;
  int (*avfilter_graph_parse_ptr)(AVFilterGraph*, const char*, FilterInOut**, FilterInOut**,
                                  void*) = nullptr;
  int (*avfilter_graph_config)(AVFilterGraph*, void*) = nullptr;
  int (*av_buffersrc_write_frame)(AVFilterContext*, const AVFrame*) = nullptr;
  int (*av_buffersink_get_frame)(AVFilterContext*, AVFrame*) = nullptr;
};

/// The table, loaded on first use (once per process, thread-safe); FailedPrecondition naming
/// the libraries and what to install when they cannot be opened or lack a function.
absl::Status LoadFfmpeg();
/// The loaded table; only after LoadFfmpeg() returned OK.
const FfmpegApi& Ffmpeg();
/// The libraries this build opens, e.g. "libavformat.so.59, libavcodec.so.59, ...".
std::string FfmpegLibraryNames();
/// FFmpeg's text for an error code (through the loaded av_strerror).
std::string FfmpegError(int code);

}  // namespace ringloader::video
