// The exceptions of `_C` and the translation of absl::Status into them (bind_common.h).

#include <unistd.h>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/cpu_budget.h"
#include "cuda/device_stager.h"
#include "dataset/image_folder.h"
#include "decode/jpeg_decoder.h"
#include "dataset/tar.h"
#include "dataset/webdataset.h"
#include "io/pending_downloads.h"
#include "io/reader.h"
#include "io/range_reads.h"
#include "io/shard_cache.h"
#include "pipeline/loader_stats_fields.h"
#include "pipeline/slot_pool.h"
#include "pipeline/verdict.h"
#include "pipeline/views.h"
#include "numa/topology.h"
#include "python/dlpack.h"
#include "python/bind_video.h"
#include "transform/augment.h"
#include "transform/image_ops.h"
#include "ringloader/ringloader.h"
#include "python/bind_common.h"

namespace py = pybind11;

namespace ringloader {
namespace {

PyObject* g_sample_error = nullptr;
PyObject* g_slots_exhausted_error = nullptr;
PyObject* g_timeout_error = nullptr;
PyObject* g_stale_index_error = nullptr;

}  // namespace

// ---- status -> Python exception ---------------------------------------------------------

[[noreturn]] void Raise(const absl::Status& status) {
  const std::string message(status.message());
  auto index = status.GetPayload(kSampleIndexPayload);
  if (index.has_value()) {
    auto path = status.GetPayload(kSamplePathPayload);
    py::object error = py::reinterpret_borrow<py::object>(g_sample_error)(message);
    error.attr("index") = py::int_(std::stoll(std::string(*index)));
    error.attr("path") = path ? py::str(std::string(*path)) : py::str("");
    auto reason = status.GetPayload(kSampleReasonPayload);
    auto cause = status.GetPayload(kSampleCausePayload);
    error.attr("reason") = py::str(reason ? std::string(*reason) : message);
    error.attr("code") = py::str(cause ? std::string(*cause) : absl::StatusCodeToString(status.code()));
    PyErr_SetObject(g_sample_error, error.ptr());
    throw py::error_already_set();
  }
  if (auto shard = status.GetPayload(kStaleIndexPayload); shard.has_value()) {
    py::object error = py::reinterpret_borrow<py::object>(g_stale_index_error)(message);
    error.attr("path") = py::str(std::string(*shard));
    PyErr_SetObject(g_stale_index_error, error.ptr());
    throw py::error_already_set();
  }
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      throw py::value_error(message);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, message.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kOutOfRange:
      throw py::index_error(message);
    case absl::StatusCode::kResourceExhausted:
      PyErr_SetString(g_slots_exhausted_error, message.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kDeadlineExceeded:
      PyErr_SetString(g_timeout_error, message.c_str());
      throw py::error_already_set();
    default:
      throw std::runtime_error(message);
  }
}

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

void BindErrors(py::module_& m) {
  g_sample_error = PyErr_NewExceptionWithDoc(
      "ringloader._C.SampleError",
      "A sample could not be read or decoded. Raised by next() (on_error=\"raise\", the default) at "
      "the batch holding the sample, after every earlier batch, and by dataset[i]; iterating again "
      "goes on with the next batch. Attributes: index, path, reason (what failed), code (the status "
      "code)."
      "\n\nExamples:\n"
      "    >>> from torchvision.transforms import v2\n"
      "    >>> import ringloader as rl\n"
      "    >>> from ringloader.sample_data import make_sample_dataset\n"
      "    >>> root = make_sample_dataset(\"photos\", num_images=8, num_classes=2)\n"
      "    >>> with open(\"broken.jpg\", \"wb\") as f:\n"
      "    ...     _ = f.write(b\"not a JPEG\")\n"
      "    >>> crop = v2.Compose([v2.CenterCrop(64), v2.PILToTensor()])\n"
      "    >>> ds = rl.FileList([str(root / \"class_00\" / \"img_00000.jpg\"), \"broken.jpg\"], [0, 1], transform=crop)\n"
      "    >>> try:\n"
      "    ...     next(iter(rl.DataLoader(ds, batch_size=2)))\n"
      "    ... except rl.SampleError as e:\n"
      "    ...     print(e.index, e.path.endswith(\"broken.jpg\"))\n"
      "    1 True\n"
      "    >>> len(next(iter(rl.DataLoader(ds, batch_size=2, on_error=\"skip\")))[1])  # or skip it\n"
      "    1\n",
      PyExc_RuntimeError, nullptr);
  g_slots_exhausted_error = PyErr_NewExceptionWithDoc(
      "ringloader._C.SlotsExhaustedError",
      "Every batch slot is held by the consumer. Raised by next() when the batches (or views of "
      "them) kept hold every slot; nothing is lost: release some batches and call next() again, "
      "or raise max_slots/max_memory."
      "\n\nExamples:\n"
      "    >>> import torch\n"
      "    >>> from torchvision.transforms import v2\n"
      "    >>> import ringloader as rl\n"
      "    >>> from ringloader.sample_data import make_sample_dataset\n"
      "    >>> root = make_sample_dataset(\"photos\", num_images=8, num_classes=2)\n"
      "    >>> ds = rl.ImageFolder(root, transform=v2.Compose([v2.CenterCrop(64), v2.PILToTensor()]))\n"
      "    >>> it = iter(rl.DataLoader(ds, batch_size=2, max_slots=2))\n"
      "    >>> kept = [next(it), next(it)]  # both slots held by batches kept\n"
      "    >>> try:\n"
      "    ...     next(it)\n"
      "    ... except rl.SlotsExhaustedError:\n"
      "    ...     print(\"every slot is held\")\n"
      "    every slot is held\n"
      "    >>> del kept[0]  # release one: nothing was lost\n"
      "    >>> len(next(it)[1])\n"
      "    2\n",
      PyExc_RuntimeError, nullptr);
  g_timeout_error = PyErr_NewExceptionWithDoc(
      "ringloader._C.LoaderTimeoutError",
      "No batch arrived within the timeout. Raised by next() when DataLoader(timeout=T) passes T "
      "seconds without a batch; the message says what each pipeline stage holds and the last "
      "sample error."
      "\n\nExamples:\n"
      "    >>> import time\n"
      "    >>> import torch\n"
      "    >>> import ringloader as rl\n"
      "    >>> class Slow(torch.utils.data.Dataset):\n"
      "    ...     def __len__(self):\n"
      "    ...         return 4\n"
      "    ...     def __getitem__(self, i):\n"
      "    ...         time.sleep(2)\n"
      "    ...         return i\n"
      "    >>> try:\n"
      "    ...     next(iter(rl.DataLoader(Slow(), batch_size=2, timeout=0.5, num_workers=1)))\n"
      "    ... except rl.LoaderTimeoutError:\n"
      "    ...     print(\"no batch within 0.5 s\")\n"
      "    no batch within 0.5 s\n",
      PyExc_RuntimeError, nullptr);
  g_stale_index_error = PyErr_NewExceptionWithDoc(
      "ringloader._C.StaleIndexError",
      "A shard's index no longer matches the shard (it changed since it was indexed). Raised at "
      "iter() and dataset[i] for a local shard whose size or mtime changed, and mid-epoch for a "
      "pipe: stream whose member headers differ; never a SampleError, so on_error does not hide "
      "it: build the WebDataset again. Attribute: path."
      "\n\nExamples:\n"
      "    >>> import ringloader as rl\n"
      "    >>> from ringloader.pack import pack\n"
      "    >>> from ringloader.sample_data import make_sample_dataset\n"
      "    >>> root = make_sample_dataset(\"photos\", num_images=8, num_classes=2)\n"
      "    >>> _ = pack(str(root), \"shards\", shard_size=400_000)\n"
      "    >>> ds = rl.WebDataset(\"shards/shard-000000.tar\")\n"
      "    >>> with open(\"shards/shard-000000.tar\", \"ab\") as f:  # the shard changes after indexing\n"
      "    ...     _ = f.write(bytes(1024))\n"
      "    >>> try:\n"
      "    ...     ds[0]\n"
      "    ... except rl.StaleIndexError as e:\n"
      "    ...     print(e.path)\n"
      "    shards/shard-000000.tar\n",
      PyExc_RuntimeError, nullptr);
  m.attr("SampleError") = py::handle(g_sample_error);
  m.attr("StaleIndexError") = py::handle(g_stale_index_error);
  m.attr("SlotsExhaustedError") = py::handle(g_slots_exhausted_error);
  m.attr("LoaderTimeoutError") = py::handle(g_timeout_error);
}

}  // namespace ringloader
