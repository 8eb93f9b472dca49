#include "video/ffmpeg_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace ringloader::video {
namespace {

#define RL_STR2(x) #x
#define RL_STR(x) RL_STR2(x)

// libavfilter has no header in the build; its major follows libavutil's within one FFmpeg
// release (FFmpeg 4: 56/7, 5: 57/8, 6: 58/9, 7: 59/10, 8: 60/11).
constexpr int kAvfilterMajor = LIBAVUTIL_VERSION_MAJOR - 49;
constexpr int kFfmpegRelease = LIBAVUTIL_VERSION_MAJOR - 52;

struct Library {
  const char* soname;
  const char* debian_package;
};

std::vector<Library> Libraries() {
  static const std::string names[] = {
      "libavutil.so." RL_STR(LIBAVUTIL_VERSION_MAJOR),
      "libswscale.so." RL_STR(LIBSWSCALE_VERSION_MAJOR),
      "libavcodec.so." RL_STR(LIBAVCODEC_VERSION_MAJOR),
      "libavformat.so." RL_STR(LIBAVFORMAT_VERSION_MAJOR),
      absl::StrCat("libavfilter.so.", kAvfilterMajor),
  };
  static const std::string packages[] = {
      "libavutil" RL_STR(LIBAVUTIL_VERSION_MAJOR),
      "libswscale" RL_STR(LIBSWSCALE_VERSION_MAJOR),
      "libavcodec" RL_STR(LIBAVCODEC_VERSION_MAJOR),
      "libavformat" RL_STR(LIBAVFORMAT_VERSION_MAJOR),
      absl::StrCat("libavfilter", kAvfilterMajor),
  };
  std::vector<Library> out;
  for (int i = 0; i < 5; ++i) out.push_back({names[i].c_str(), packages[i].c_str()});
  return out;
}

std::string InstallHint() {
  std::vector<std::string> packages;
  for (const Library& lib : Libraries()) packages.push_back(lib.debian_package);
  return absl::StrCat("video decoding needs the FFmpeg ", kFfmpegRelease,
                      ".x shared libraries (", FfmpegLibraryNames(),
                      "); install them: Debian/Ubuntu: apt-get install ",
                      absl::StrJoin(packages, " "), "; Fedora/RHEL: dnf install ffmpeg-libs; conda: "
                      "conda install 'ffmpeg=", kFfmpegRelease, "'");
}

FfmpegApi g_api;
absl::Status g_status = absl::OkStatus();

absl::Status Load() {
  std::vector<void*> handles;
  for (const Library& lib : Libraries()) {
    // RINGLOADER_FFMPEG_DIR: a folder holding the libraries (an FFmpeg built or installed
    // outside the loader's search path); else the system's search path. RTLD_GLOBAL is not
    // needed: each library finds its own dependencies by DT_NEEDED.
    const char* dir = std::getenv("RINGLOADER_FFMPEG_DIR");
    std::string path = dir != nullptr && *dir != '\0' ? absl::StrCat(dir, "/", lib.soname) : lib.soname;
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      return absl::FailedPreconditionError(
          absl::StrCat("cannot load ", path, " (", why ? why : "not found", "): ", InstallHint()));
    }
    handles.push_back(handle);
  }
  void* avutil = handles[0];
  void* swscale = handles[1];
  void* avcodec = handles[2];
  void* avformat = handles[3];
  void* avfilter = handles[4];
  std::string missing;
  auto resolve = [&](void* handle, const char* name, auto& slot) {
    void* symbol = dlsym(handle, name);
    if (symbol == nullptr) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(symbol);
  };
#define RL_RESOLVE(handle, name) resolve(handle, #name, g_api.name)
  RL_RESOLVE(avformat, avformat_alloc_context);
  RL_RESOLVE(avformat, avformat_open_input);
  RL_RESOLVE(avformat, avformat_find_stream_info);
  RL_RESOLVE(avformat, avformat_close_input);
  RL_RESOLVE(avformat, av_find_best_stream);
  RL_RESOLVE(avformat, av_read_frame);
  RL_RESOLVE(avformat, avformat_seek_file);
  RL_RESOLVE(avformat, avio_alloc_context);
  RL_RESOLVE(avformat, avio_context_free);
#if LIBAVFORMAT_VERSION_MAJOR < 61
  RL_RESOLVE(avformat, av_stream_get_side_data);
#else
  RL_RESOLVE(avcodec, av_packet_side_data_get);
#endif
  RL_RESOLVE(avcodec, avcodec_alloc_context3);
  RL_RESOLVE(avcodec, avcodec_free_context);
  RL_RESOLVE(avcodec, avcodec_parameters_to_context);
  RL_RESOLVE(avcodec, avcodec_open2);
  RL_RESOLVE(avcodec, avcodec_send_packet);
  RL_RESOLVE(avcodec, avcodec_receive_frame);
  RL_RESOLVE(avcodec, avcodec_flush_buffers);
  RL_RESOLVE(avcodec, avcodec_get_name);
  RL_RESOLVE(avcodec, av_packet_alloc);
  RL_RESOLVE(avcodec, av_packet_free);
  RL_RESOLVE(avcodec, av_packet_unref);
  RL_RESOLVE(avutil, av_frame_alloc);
  RL_RESOLVE(avutil, av_frame_free);
  RL_RESOLVE(avutil, av_frame_unref);
  RL_RESOLVE(avutil, av_malloc);
  RL_RESOLVE(avutil, av_free);
  RL_RESOLVE(avutil, av_strdup);
  RL_RESOLVE(avutil, av_strerror);
  RL_RESOLVE(avutil, av_log_set_level);
  RL_RESOLVE(avutil, av_display_rotation_get);
  RL_RESOLVE(avutil, av_opt_set_bin);
  RL_RESOLVE(avutil, av_opt_set_int);
  RL_RESOLVE(swscale, sws_getContext);
  RL_RESOLVE(swscale, sws_freeContext);
  RL_RESOLVE(swscale, sws_scale);
  RL_RESOLVE(swscale, sws_getColorspaceDetails);
  RL_RESOLVE(swscale, sws_setColorspaceDetails);
  RL_RESOLVE(swscale, sws_getCoefficients);
  RL_RESOLVE(avfilter, avfilter_graph_alloc);
  RL_RESOLVE(avfilter, avfilter_graph_free);
  RL_RESOLVE(avfilter, avfilter_get_by_name);
  RL_RESOLVE(avfilter, avfilter_graph_create_filter);
  RL_RESOLVE(avfilter, avfilter_inout_alloc);
  RL_RESOLVE(avfilter, avfilter_inout_free);
  RL_RESOLVE(avfilter, avfilter_graph_parse_ptr);
  RL_RESOLVE(avfilter, avfilter_graph_config);
  RL_RESOLVE(avfilter, av_buffersrc_write_frame);
  RL_RESOLVE(avfilter, av_buffersink_get_frame);
#undef RL_RESOLVE
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the FFmpeg libraries found lack functions ringloader needs (", missing,
        "): a different FFmpeg build? ", InstallHint()));
  }
  // Decoders report problems through their return codes, which the decoder turns into errors
  // naming the file and frame; FFmpeg's own log lines would only repeat them on stderr.
  g_api.av_log_set_level(AV_LOG_QUIET);
  return absl::OkStatus();
}

}  // namespace

std::string FfmpegLibraryNames() {
  std::vector<std::string> names;
  for (const Library& lib : Libraries()) names.push_back(lib.soname);
  return absl::StrJoin(names, ", ");
}

absl::Status LoadFfmpeg() {
  static std::once_flag once;
  std::call_once(once, [] { g_status = Load(); });
  return g_status;
}

const FfmpegApi& Ffmpeg() { return g_api; }

std::string FfmpegError(int code) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  if (g_api.av_strerror == nullptr || g_api.av_strerror(code, text, sizeof(text)) < 0) {
    return absl::StrCat("FFmpeg error ", code);
  }
  return text;
}

}  // namespace ringloader::video
