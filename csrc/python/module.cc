// ringloader._C: translates between Python and the C++ Loader. No business logic lives here.
//
// Batches leave as DLPack-exporting objects (`Tensor`), so the extension does not link against
// torch: `torch.from_dlpack(t)` gives a zero-copy tensor whose deleter drops the slot lease.

#include <pybind11/pybind11.h>

#include "python/bind_common.h"
#include "python/bind_video.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  using namespace ringloader;
  m.doc() = "ringloader native core (private; use the ringloader package)";
  BindVideo(m);  // video_available, VideoDecoder (bind_video.cc)
  BindErrors(m);  // SampleError, StaleIndexError, SlotsExhaustedError, LoaderTimeoutError
  BindLoader(m);  // Loader, Tensor
  BindRules(m);
  BindScans(m);
  BindRemote(m);
}
