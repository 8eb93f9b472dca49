// The binding of csrc/video/ (python/ringloader/sources/video.py and video_batches.py wrap it):
// `_C.video_available()` and, when the build found FFmpeg's headers, `_C.VideoDecoder`, the native
// video chain's planning functions and `_C.ClipPool`, each bound by a function of its own.
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
#include "video/clip_batch.h"
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

// The exception Raise would raise for `status`, as an object (a batch's errors are per clip).
py::object ErrorObject(const absl::Status& status) {
  try {
    Raise(status);
  } catch (py::error_already_set& error) {
    return error.value();
  } catch (const py::builtin_exception& error) {
    error.set_error();
    py::error_already_set raised;
    return raised.value();
  } catch (const std::exception& error) {
    return py::module_::import("builtins").attr("RuntimeError")(std::string(error.what()));
  }
  return py::none();
}

video::VideoChain ChainFrom(const py::list& steps, const py::object& levels) {
  using Kind = video::VideoStep::Kind;
  video::VideoChain chain;
  for (const py::handle& item : steps) {
    py::dict d = py::reinterpret_borrow<py::dict>(item);
    video::VideoStep s;
    const std::string kind = d["kind"].cast<std::string>();
    if (kind == "resize") s.kind = Kind::kResize;
    else if (kind == "center_crop") s.kind = Kind::kCenterCrop;
    else if (kind == "random_crop") s.kind = Kind::kRandomCrop;
    else if (kind == "random_resized_crop") s.kind = Kind::kRandomResizedCrop;
    else if (kind == "horizontal_flip") s.kind = Kind::kHorizontalFlip;
    else throw py::value_error("video chain: unknown step kind '" + kind + "'");
    if (d.contains("height")) s.height = d["height"].cast<int>();
    if (d.contains("width")) s.width = d["width"].cast<int>();
    if (d.contains("max_size")) s.max_size = d["max_size"].cast<int>();
    if (d.contains("scale")) {
      auto r = d["scale"].cast<std::pair<double, double>>();
      s.scale_min = r.first, s.scale_max = r.second;
    }
    if (d.contains("ratio")) {
      auto r = d["ratio"].cast<std::pair<double, double>>();
      s.ratio_min = r.first, s.ratio_max = r.second;
    }
    if (d.contains("p")) s.p = d["p"].cast<double>();
    chain.steps.push_back(s);
  }
  if (!levels.is_none()) {
    chain.levels = levels.cast<std::vector<float>>();
    if (chain.levels.size() != 3 * 256) throw py::value_error("video chain: levels must hold 3 x 256 values");
  }
  return chain;
}

// A batch's clips, and a view of each `memory` entry the jobs point into. The views hold the
// objects' buffer exports until the caller drops them, after the GIL-free decode has returned: an
// exported bytearray refuses to resize (BufferError), so its bytes stay where the jobs read them.
struct Jobs {
  std::vector<video::ClipJob> clips;
  std::vector<py::buffer_info> views;
};

// `names` (errors' names), `ranges` ((offset, length) of the file, or None) and `keys` (memory
// jobs' keys: their decoders are kept on a copy) apply to the jobs they reach; empty: none.
Jobs JobsFrom(const std::vector<std::string>& paths, const py::list& memory, const py::list& names,
              const py::list& ranges, const py::list& keys) {
  Jobs jobs;
  jobs.clips.resize(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    jobs.clips[i].path = paths[i];
    if (i < names.size() && !names[i].is_none()) jobs.clips[i].name = names[i].cast<std::string>();
    if (i < keys.size() && !keys[i].is_none()) jobs.clips[i].key = keys[i].cast<std::string>();
    if (i < ranges.size() && !ranges[i].is_none()) {
      auto range = ranges[i].cast<std::pair<int64_t, int64_t>>();
      jobs.clips[i].range = video::ByteRange{range.first, range.second};
    }
    if (i < memory.size() && !memory[i].is_none()) {
      jobs.views.push_back(py::reinterpret_borrow<py::buffer>(memory[i]).request());
      const py::buffer_info& info = jobs.views.back();
      jobs.clips[i].data = static_cast<const uint8_t*>(info.ptr);
      jobs.clips[i].size = static_cast<size_t>(info.size * info.itemsize);
    }
  }
  return jobs;
}

py::dict MetadataDict(const video::VideoMetadata& meta) {
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
}

// (frames uint8 [T, 3, H, W] owning the decoded buffer, pts seconds, duration seconds)
py::tuple ToPython(DecodedFrames frames) {
  auto* data = new std::vector<uint8_t>(std::move(frames.data));
  py::capsule owner(data, [](void* p) { delete static_cast<std::vector<uint8_t>*>(p); });
  std::vector<py::ssize_t> shape{frames.frames, 3, frames.height, frames.width};
  py::array_t<uint8_t> array(shape, data->data(), owner);
  return py::make_tuple(array, frames.pts_seconds, frames.duration_seconds);
}

// _C.VideoDecoder: one video opened, its metadata and frame-exact decodes (ringloader.video).
void BindVideoDecoder(py::module_& m) {
  py::class_<VideoDecoder>(m, "VideoDecoder",
                           "One video (a file or bytes) opened by the system's FFmpeg: its frame table "
                           "and frame-exact decoding of frame indices (see ringloader.video).")
      .def(py::init([](const std::string& path, uint64_t max_frame_pixels, uint64_t max_clip_bytes, int threads,
                       bool skip_unwanted_frames, int64_t offset, int64_t length, const std::string& name) {
             absl::StatusOr<std::unique_ptr<VideoDecoder>> decoder;
             {
               py::gil_scoped_release release;
               decoder = VideoDecoder::OpenFile(
                   path, Options(max_frame_pixels, max_clip_bytes, threads, skip_unwanted_frames),
                   video::ByteRange{offset, length}, name);
             }
             return Check(std::move(decoder));
           }),
           py::arg("path"), py::arg("max_frame_pixels"), py::arg("max_clip_bytes"), py::arg("threads") = 1,
           py::arg("skip_unwanted_frames") = true, py::arg("offset") = 0, py::arg("length") = -1,
           py::arg("name") = "",
           "The file at `path`, or its `length` bytes from `offset` (a tar member); errors name `name`, "
           "else the path.")
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
      .def_property_readonly("metadata", [](const VideoDecoder& d) { return MetadataDict(d.metadata()); })
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
}

// The native video chain as Python plans it: output sizes and one clip's drawn operations.
void BindVideoChain(py::module_& m) {
  m.def("video_chain_output_size",
        [](const py::list& steps, int width, int height) {
          int w = 0, h = 0;
          absl::Status status = ChainFrom(steps, py::none()).OutputSize(width, height, &w, &h);
          if (!status.ok()) Raise(status);
          return py::make_tuple(h, w);
        },
        py::arg("steps"), py::arg("width"), py::arg("height"),
        "(height, width) of frames of width x height after a native video chain.");

  m.def("video_chain_plan",
        [](const py::list& steps, int width, int height, uint64_t seed, bool every_step) {
          absl::StatusOr<std::vector<video::PlannedOp>> ops =
              video::PlanClip(ChainFrom(steps, py::none()), width, height, seed, every_step);
          if (!ops.ok()) Raise(ops.status());
          py::list out;
          for (const video::PlannedOp& op : *ops) {
            const char* kind = op.kind == video::PlannedOp::Kind::kCrop     ? "crop"
                               : op.kind == video::PlannedOp::Kind::kResize ? "resize"
                                                                            : "flip";
            if (every_step) {
              out.append(py::make_tuple(kind, op.top, op.left, op.height, op.width, op.applied));
            } else {
              out.append(py::make_tuple(kind, op.top, op.left, op.height, op.width));
            }
          }
          return out;
        },
        py::arg("steps"), py::arg("width"), py::arg("height"), py::arg("seed"), py::arg("every_step") = false,
        "The operations (kind, top, left, height, width) a clip gets with the draws of `seed`; with "
        "every_step, each step's whatever they change, and whether each is applied (a flip's draw).");
}

// _C.ClipPool: a batch's clips probed and decoded on native threads (ringloader.video_batches).
void BindClipPool(py::module_& m) {
  py::class_<video::ClipPool>(m, "ClipPool",
                              "Native threads that decode a batch's clips, each thread with its own decoders, "
                              "into the rows of one batch buffer (ringloader.video_batches).")
      .def(py::init([](int threads, uint64_t max_frame_pixels, uint64_t max_clip_bytes) {
             return std::make_unique<video::ClipPool>(threads, Options(max_frame_pixels, max_clip_bytes, 1, true));
           }),
           py::arg("threads"), py::arg("max_frame_pixels"), py::arg("max_clip_bytes"))
      .def_property_readonly("threads", &video::ClipPool::threads)
      .def("probe",
           [](video::ClipPool& pool, const std::vector<std::string>& paths, const py::list& memory,
              const py::list& names, const py::list& ranges, const py::list& keys) {
             Jobs jobs = JobsFrom(paths, memory, names, ranges, keys);  // its views outlive the probe
             std::vector<absl::StatusOr<video::VideoMetadata>> metas;
             {
               py::gil_scoped_release release;
               metas = pool.Probe(jobs.clips);
             }
             py::list out;
             for (auto& meta : metas) out.append(meta.ok() ? py::object(MetadataDict(*meta)) : ErrorObject(meta.status()));
             return out;
           },
           py::arg("paths"), py::arg("memory"), py::arg("names") = py::list(), py::arg("ranges") = py::list(),
           py::arg("keys") = py::list(),
           "Each video's metadata dict, or the exception its opening raised. A job reads paths[i], "
           "or memory[i] when not None (kept open under keys[i] when given), or the (offset, length) "
           "ranges[i] of paths[i]; its errors name names[i] when given.")
      .def("decode",
           [](video::ClipPool& pool, const std::vector<std::string>& paths, const py::list& memory,
              std::vector<std::vector<int64_t>> indices, const std::vector<uint64_t>& seeds, const py::list& steps,
              const py::object& levels, py::buffer out, int out_h, int out_w, const py::list& names,
              const py::list& ranges, const py::list& keys) {
             Jobs held = JobsFrom(paths, memory, names, ranges, keys);  // its views outlive the decode
             std::vector<video::ClipJob>& jobs = held.clips;
             if (indices.size() != jobs.size() || seeds.size() != jobs.size()) {
               throw py::value_error("ClipPool.decode: paths, indices and seeds differ in length");
             }
             for (size_t i = 0; i < jobs.size(); ++i) jobs[i].indices = std::move(indices[i]), jobs[i].seed = seeds[i];
             video::VideoChain chain = ChainFrom(steps, levels);
             py::buffer_info info = out.request(true);
             const size_t total = static_cast<size_t>(info.size * info.itemsize);
             const size_t row = jobs.empty() ? 0 : total / jobs.size();
             if (row * jobs.size() != total) throw py::value_error("ClipPool.decode: the buffer is not one row per clip");
             std::vector<video::ClipOutcome> outcomes;
             {
               py::gil_scoped_release release;
               outcomes = pool.Decode(jobs, chain, out_h, out_w, static_cast<uint8_t*>(info.ptr), row);
             }
             py::list result;
             for (const auto& o : outcomes) {
               result.append(py::make_tuple(o.status.ok() ? py::none() : ErrorObject(o.status), o.frames_decoded,
                                            o.frames_kept));
             }
             return result;
           },
           py::arg("paths"), py::arg("memory"), py::arg("indices"), py::arg("seeds"), py::arg("steps"),
           py::arg("levels"), py::arg("out"), py::arg("out_h"), py::arg("out_w"), py::arg("names") = py::list(),
           py::arg("ranges") = py::list(), py::arg("keys") = py::list(),
           "Jobs as probe's. Decodes clip j into row j of `out` (GIL released); per clip (error or None, frames decoded, "
           "frames kept).");
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

  BindVideoDecoder(m);
  BindVideoChain(m);
  BindClipPool(m);
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
