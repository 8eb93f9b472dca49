#pragma once
#include <pybind11/pybind11.h>

namespace ringloader {
/// The video decoder's binding (bind_video.cc): `_C.VideoDecoder` when the build found FFmpeg's
/// headers, and `_C.video_available()` always.
void BindVideo(pybind11::module_& m);
}  // namespace ringloader
