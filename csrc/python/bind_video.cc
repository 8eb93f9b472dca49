// The binding of csrc/video/ (python/ringloader/video.py wraps it): `_C.video_available()` and,
// when the build found FFmpeg's headers, `_C.VideoDecoder`.
#include "python/bind_video.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "video/video_decoder.h"  // no FFmpeg header: the options' defaults build without it
#ifdef RINGLOADER_WITH_VIDEO
#include "video/ffmpeg_library.h"
#endif

namespace py = pybind11;

namespace ringloader {
namespace {

#ifdef RINGLOADER_WITH_VIDEO
using video::DecodedFrames;
using video::VideoDecoder;
using video::VideoDecoderOptions;

[[noreturn]] void Raise(const absl::Status& status) {
  std::string text(status.message());
  switch (status.code()) {
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, text.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kPermissionDenied:
      PyErr_SetString(PyExc_PermissionError, text.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kOutOfRange:
      throw py::index_error(text);
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnimplemented:
      throw py::value_error(text);
    default:
      throw std::runtime_error(text);
  }
}

template <typename T>
T Check(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return std::move(*value);
}

VideoDecoderOptions Options(uint64_t max_frame_pixels, uint64_t max_clip_bytes, int threads, bool skip) {
  VideoDecoderOptions options;
  options.skip_unwanted_frames = skip;
  options.max_frame_pixels = max_frame_pixels;
  options.max_clip_bytes = max_clip_bytes;
  options.threads = threads;
  return options;
}

// (frames uint8 [T, 3, H, W] owning the decoded buffer, pts seconds, duration seconds)
py::tuple ToPython(DecodedFrames frames) {
  auto* data = new std::vector<uint8_t>(std::move(frames.data));
  py::capsule owner(data, [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); });
  std::vector<py::ssize_t> shape{frames.frames, 3, frames.height, frames.width};
  py::array_t<uint8_t> array(shape, data->data(), owner);
  return py::make_tuple(array, frames.pts_seconds, frames.duration_seconds);
}
#endif

}  // namespace

void BindVideo(py::module_& m) {
  m.attr("VIDEO_MAX_FRAME_PIXELS") = video::VideoDecoderOptions{}.max_frame_pixels;
  m.attr("VIDEO_MAX_CLIP_BYTES") = video::VideoDecoderOptions{}.max_clip_bytes;
#ifdef RINGLOADER_WITH_VIDEO
  m.def("video_available", [] {
    absl::Status status = video::VideoAvailable();
    return py::make_tuple(status.ok(), std::string(status.message()));
  }, "(True, '') when FFmpeg's libraries load, else (False, what to install).");
  m.attr("FFMPEG_LIBRARIES") = video::FfmpegLibraryNames();

  py::class_<VideoDecoder>(m, "VideoDecoder",
                           "One video (a file or bytes) opened by the system's FFmpeg: its frame table "
                           "and frame-exact decoding of frame indices (see ringloader.video).")
      .def(py::init([](const std::string& path, uint64_t max_frame_pixels, uint64_t max_clip_bytes, int threads,
                       bool skip_unwanted_frames) {
             absl::StatusOr<std::unique_ptr<VideoDecoder>> decoder;
             {
               py::gil_scoped_release release;
               decoder = VideoDecoder::OpenFile(
                   path, Options(max_frame_pixels, max_clip_bytes, threads, skip_unwanted_frames));
             }
             return Check(std::move(decoder));
           }),
           py::arg("path"), py::arg("max_frame_pixels"), py::arg("max_clip_bytes"), py::arg("threads") = 1,
           py::arg("skip_unwanted_frames") = true)
      .def_static(
          "from_bytes",
          [](py::buffer data, const std::string& name, uint64_t max_frame_pixels, uint64_t max_clip_bytes,
             int threads, bool skip_unwanted_frames) {
            py::buffer_info info = data.request();
            if (info.itemsize != 1 || info.ndim != 1 || info.strides[0] != 1) {
              throw py::value_error(name + ": video bytes must be a contiguous bytes-like object");
            }
            auto bytes = std::make_shared<std::string>(static_cast<const char*>(info.ptr),
                                                       static_cast<size_t>(info.size));
            absl::StatusOr<std::unique_ptr<VideoDecoder>> decoder;
            {
              py::gil_scoped_release release;
              decoder = VideoDecoder::OpenMemory(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(),
                                                 bytes, name,
                                                 Options(max_frame_pixels, max_clip_bytes, threads, skip_unwanted_frames));
            }
            return Check(std::move(decoder));
          },
          py::arg("data"), py::arg("name"), py::arg("max_frame_pixels"), py::arg("max_clip_bytes"),
          py::arg("threads") = 1, py::arg("skip_unwanted_frames") = true)
      .def_property_readonly("name", &VideoDecoder::name)
      .def_property_readonly("metadata",
                             [](const VideoDecoder& d) {
                               const video::VideoMetadata& meta = d.metadata();
                               py::dict out;
                               out["num_frames"] = meta.num_frames;
                               out["average_fps"] = meta.average_fps;
                               out["width"] = meta.width;
                               out["height"] = meta.height;
                               out["duration_seconds"] = meta.duration_seconds;
                               out["begin_stream_seconds"] = meta.begin_stream_seconds;
                               out["end_stream_seconds"] = meta.end_stream_seconds;
                               out["codec"] = meta.codec;
                               out["rotation"] = meta.rotation;
                               out["pts_seconds"] = meta.pts_seconds;
                               out["key_frame_indices"] = meta.key_frame_indices;
                               return out;
                             })
      .def("stats",
           [](const VideoDecoder& d) {
             video::VideoDecodeStats s = d.stats();
             py::dict out;
             out["frames_decoded"] = s.frames_decoded;
             out["frames_kept"] = s.frames_kept;
             out["seeks"] = s.seeks;
             return out;
           })
      .def("get_frames_at",
           [](VideoDecoder& d, std::vector<int64_t> indices) {
             absl::StatusOr<DecodedFrames> frames;
             {
               py::gil_scoped_release release;
               frames = d.DecodeFrames(indices);
             }
             return ToPython(Check(std::move(frames)));
           },
           py::arg("indices"), "(frames uint8 [T, 3, H, W], pts seconds, duration seconds)")
      .def("get_frames_played_at",
           [](VideoDecoder& d, std::vector<double> seconds) {
             absl::StatusOr<DecodedFrames> frames;
             {
               py::gil_scoped_release release;
               frames = d.DecodeFramesPlayedAt(seconds);
             }
             return ToPython(Check(std::move(frames)));
           },
           py::arg("seconds"))
      .def("indices_played_at",
           [](const VideoDecoder& d, std::vector<double> seconds) { return Check(d.IndicesPlayedAt(seconds)); },
           py::arg("seconds"));
#else
  m.def("video_available", [] {
    return py::make_tuple(false, std::string(
        "this ringloader was built without FFmpeg's headers, so it has no video decoder: install "
        "libavformat-dev libavcodec-dev libavutil-dev libswscale-dev (Debian/Ubuntu) and reinstall "
        "ringloader from source"));
  }, "(True, '') when FFmpeg's libraries load, else (False, what to install).");
  m.attr("FFMPEG_LIBRARIES") = "";
#endif
}

}  // namespace ringloader
