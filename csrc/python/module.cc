// ringloader._C: translates between Python and the C++ Loader. No business logic lives here.
//
// Batches leave as DLPack-exporting objects (`Tensor`), so the extension does not link against
// torch: `torch.from_dlpack(t)` gives a zero-copy tensor whose deleter drops the slot lease.

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

namespace py = pybind11;

namespace ringloader {
namespace {

PyObject* g_sample_error = nullptr;
PyObject* g_slots_exhausted_error = nullptr;
PyObject* g_timeout_error = nullptr;
PyObject* g_stale_index_error = nullptr;

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

// ---- DLPack export -------------------------------------------------------------------------

/// An array exported through DLPack; `owner` keeps the memory alive. Host arrays (kDLCPU), or
/// device arrays (kDLCUDA) whose copy may still be running: export makes the consumer's stream
/// wait for it on the GPU.
class Tensor {
 public:
  Tensor(std::shared_ptr<void> owner, void* data, std::vector<int64_t> shape, RlDLDataType dtype,
         bool pinned, int device = -1, std::shared_ptr<DeviceLease> device_lease = nullptr)
      : owner_(std::move(owner)), data_(data), shape_(std::move(shape)), dtype_(dtype), pinned_(pinned),
        device_(device), device_lease_(std::move(device_lease)) {}

  RlDLDevice device() const {
    return device_ >= 0 ? RlDLDevice{kRlDLCUDA, device_} : RlDLDevice{kRlDLCPU, 0};
  }
  py::tuple DlpackDevice() const { return py::make_tuple(device().device_type, device().device_id); }

  py::capsule Dlpack(py::object stream, py::object max_version, py::object dl_device,
                     py::object copy) const {
    if (!dl_device.is_none()) {
      auto wanted = dl_device.cast<std::pair<int, int>>();
      if (wanted.first != device().device_type || wanted.second != device().device_id) {
        throw py::buffer_error(absl::StrCat("this tensor lives on DLPack device (", device().device_type, ", ",
                                            device().device_id, "); copying to another is not supported"));
      }
    }
    if (!copy.is_none() && copy.cast<bool>()) throw py::buffer_error("copy=True is not supported");
    if (!stream.is_none() && !py::isinstance<py::int_>(stream)) throw py::type_error("stream must be an int or None");
    if (device_lease_) {
      // DLPack: for CUDA, None means the legacy default stream; -1 means "do not synchronise".
      const intptr_t consumer = stream.is_none() ? 1 : static_cast<intptr_t>(stream.cast<int64_t>());
      absl::Status waited = device_lease_->WaitOn(consumer);  // GPU-side wait, no host sync
      if (!waited.ok()) throw std::runtime_error(std::string(waited.message()));
    }
    // Host memory: a stream would only order device work; None/-1/any int are accepted.
    bool versioned = false;
    if (!max_version.is_none()) {
      auto version = max_version.cast<std::pair<int, int>>();
      versioned = version.first >= 1;
    }
    auto* ctx = new Context{owner_, shape_, {}};
    ctx->strides.resize(shape_.size());
    int64_t stride = 1;
    for (size_t i = shape_.size(); i-- > 0;) {
      ctx->strides[i] = stride;
      stride *= shape_[i];
    }
    RlDLTensor tensor{};
    tensor.data = data_;
    tensor.device = device();
    tensor.ndim = static_cast<int32_t>(shape_.size());
    tensor.dtype = dtype_;
    tensor.shape = ctx->shape.data();
    tensor.strides = ctx->strides.data();
    tensor.byte_offset = 0;
    if (versioned) {
      auto* managed = new RlDLManagedTensorVersioned{};
      managed->version = RlDLPackVersion{1, 0};
      managed->manager_ctx = ctx;
      managed->deleter = [](RlDLManagedTensorVersioned* self) {
        delete static_cast<Context*>(self->manager_ctx);
        delete self;
      };
      managed->flags = 0;
      managed->dl_tensor = tensor;
      return py::capsule(managed, "dltensor_versioned", [](PyObject* capsule) {
        if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {  // never consumed
          auto* m = static_cast<RlDLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
          if (m != nullptr && m->deleter != nullptr) m->deleter(m);
        }
      });
    }
    auto* managed = new RlDLManagedTensor{};
    managed->dl_tensor = tensor;
    managed->manager_ctx = ctx;
    managed->deleter = [](RlDLManagedTensor* self) {
      delete static_cast<Context*>(self->manager_ctx);
      delete self;
    };
    return py::capsule(managed, "dltensor", [](PyObject* capsule) {
      if (PyCapsule_IsValid(capsule, "dltensor")) {
        auto* m = static_cast<RlDLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
        if (m != nullptr && m->deleter != nullptr) m->deleter(m);
      }
    });
  }

  const std::vector<int64_t>& shape() const { return shape_; }
  bool pinned() const { return pinned_; }
  /// "cpu" or "cuda:N".
  std::string device_name() const { return device_ >= 0 ? absl::StrCat("cuda:", device_) : "cpu"; }
  /// True once a device tensor's copy has completed (always true for host tensors).
  bool ready() const { return !device_lease_ || device_lease_->CopyDone(); }
  std::string dtype_name() const {
    switch (dtype_.code) {
      case kRlDLUInt: return "uint8";
      case kRlDLInt: return "int64";
      case kRlDLBfloat: return "bfloat16";
      default: return dtype_.bits == 16 ? "float16" : "float32";
    }
  }
  /// Address of the first byte, for tests that check zero-copy.
  uintptr_t data_ptr() const { return reinterpret_cast<uintptr_t>(data_); }

 private:
  struct Context {
    std::shared_ptr<void> owner;  // the slot lease (or a heap buffer)
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
  };
  std::shared_ptr<void> owner_;
  void* data_;
  std::vector<int64_t> shape_;
  RlDLDataType dtype_;
  bool pinned_;
  int device_;
  std::shared_ptr<DeviceLease> device_lease_;
};

RlDLDataType ToDl(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return {kRlDLUInt, 8, 1};
    case DType::kFloat16: return {kRlDLFloat, 16, 1};
    case DType::kBFloat16: return {kRlDLBfloat, 16, 1};
    case DType::kFloat32: default: return {kRlDLFloat, 32, 1};
  }
}

// ---- options from a dict ---------------------------------------------------------------

template <typename T>
void Take(py::dict& d, const char* key, T* out) {
  if (d.contains(key)) {
    *out = d[key].cast<T>();
    PyDict_DelItemString(d.ptr(), key);
  }
}

DType ParseDType(const std::string& name) {
  if (name == "uint8") return DType::kUint8;
  if (name == "float32") return DType::kFloat32;
  if (name == "float16") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  throw py::value_error(absl::StrCat("dtype must be one of uint8, float32, float16, bfloat16; got '",
                                     name, "'"));
}

// Removes `key` from `d` and returns its value; a null handle when `d` has no such key.
py::object Pop(py::dict& d, const char* key) {
  if (!d.contains(key)) return py::object();
  py::object value = d[key];
  PyDict_DelItemString(d.ptr(), key);
  return value;
}

// A step dict as the rows' parse functions read it: each key is removed as it is read, so
// ParseStep can refuse what is left. A value of the wrong type raises pybind's TypeError.
class DictParamReader final : public StepParamReader {
 public:
  explicit DictParamReader(py::dict& d) : d_(d) {}
  bool Int(const char* key, int* out) override { return Get(key, out); }
  bool Double(const char* key, double* out) override { return Get(key, out); }
  bool Bool(const char* key, bool* out) override { return Get(key, out); }
  bool String(const char* key, std::string* out) override { return Get(key, out); }
  bool Pair(const char* key, double out[2]) override {
    std::pair<double, double> pair;
    if (!Get(key, &pair)) return false;
    std::tie(out[0], out[1]) = pair;
    return true;
  }
  bool OptionalPair(const char* key, double out[2]) override {
    if (d_.contains(key) && d_[key].is_none()) {
      PyDict_DelItemString(d_.ptr(), key);
      return false;
    }
    return Pair(key, out);
  }
  bool Floats(const char* key, std::vector<float>* out) override { return Get(key, out); }
  bool Ints(const char* key, std::vector<int>* out) override { return Get(key, out); }
  bool Strings(const char* key, std::vector<std::string>* out) override { return Get(key, out); }
  bool Pairs(const char* key, std::vector<std::optional<std::array<double, 2>>>* out) override {
    py::object v = Pop(d_, key);
    if (!v) return false;
    out->clear();
    for (py::handle item : py::list(v)) {
      if (item.is_none()) {
        out->emplace_back();
      } else {
        const auto [lo, hi] = item.cast<std::pair<double, double>>();
        out->push_back(std::array<double, 2>{lo, hi});
      }
    }
    return true;
  }

 private:
  template <typename T>
  bool Get(const char* key, T* out) {
    py::object v = Pop(d_, key);
    if (!v) return false;
    *out = v.cast<T>();
    return true;
  }
  py::dict& d_;
};

TransformStep ParseStep(py::dict step) {
  // A real copy: keys are removed as they are read, and what is left is refused.
  step = py::reinterpret_steal<py::dict>(PyDict_Copy(step.ptr()));
  TransformStep s;
  py::object kind_value = Pop(step, "kind");
  if (!kind_value) throw py::value_error("transform step without a 'kind'");
  const std::string kind = kind_value.cast<std::string>();
  const StepKindInfo* info = KindFromKey(kind);
  if (info == nullptr) throw py::value_error(absl::StrCat("unknown transform step '", kind, "'"));
  s.kind = info->kind;
  for (const auto& item : step) {
    const std::string name = py::str(item.first).cast<std::string>();
    if (!info->Takes(name)) {
      // A key of another kind, or a misspelt one, would otherwise be dropped without a word.
      throw py::type_error(absl::StrCat("transform step '", kind, "' (", info->name, ") has no parameter '",
                                        name, "'; its parameters: ", info->params));
    }
  }
  DictParamReader reader(step);
  if (absl::Status status = info->parse(reader, &s); !status.ok()) {
    throw py::value_error(std::string(status.message()));
  }
  if (py::len(step) != 0) {  // a key in StepKindInfo::params that its parse does not read
    throw py::type_error(absl::StrCat("transform step '", kind, "' (", info->name, "): unread key(s) ",
                                      py::str(py::list(step.attr("keys")())).cast<std::string>()));
  }
  return s;
}

std::vector<TransformStep> ParseSteps(py::handle steps) {
  std::vector<TransformStep> out;
  for (py::handle step : steps) out.push_back(ParseStep(py::reinterpret_borrow<py::dict>(step)));
  return out;
}

// LoaderOptions::views from [{"transform": [steps], "dtype": "float32"}, ...].
std::vector<LoaderOptions::View> ParseViews(py::handle list) {
  std::vector<LoaderOptions::View> views;
  for (py::handle item : list) {
    py::dict view = py::reinterpret_borrow<py::dict>(item);
    for (auto [key, value] : view) {
      const std::string name = py::str(key);
      if (name != "transform" && name != "dtype" && name != "luma" && name != "mask" &&
          name != "file" && name != "geometry" && name != "share_geometry" &&
          name != "tensor_nearest" && name != "variable") {
        throw py::type_error(absl::StrCat(
            "unknown view option '", name,
            "' (a view takes: transform, dtype, luma, mask, file, geometry, share_geometry, "
            "tensor_nearest, variable)"));
      }
    }
    LoaderOptions::View v;
    v.transform = ParseSteps(view["transform"]);
    v.dtype = ParseDType(view.contains("dtype") ? view["dtype"].cast<std::string>() : "float32");
    v.luma = view.contains("luma") && view["luma"].cast<bool>();
    v.mask = view.contains("mask") && view["mask"].cast<bool>();
    v.file = view.contains("file") ? view["file"].cast<int>() : 0;
    v.geometry = view.contains("geometry") && view["geometry"].cast<bool>();
    v.share_geometry = view.contains("share_geometry") && view["share_geometry"].cast<bool>();
    v.tensor_nearest = view.contains("tensor_nearest") && view["tensor_nearest"].cast<bool>();
    v.variable = view.contains("variable") && view["variable"].cast<bool>();
    views.push_back(std::move(v));
  }
  return views;
}

/// `fast_decode`: False / True (the "scale" level) or a level's name (ParseFastDecode).
FastDecode FastDecodeArg(const py::handle& v) {
  if (py::isinstance<py::int_>(v) && !py::isinstance<py::str>(v) &&
      (v.cast<int64_t>() == 0 || v.cast<int64_t>() == 1)) {
    return v.cast<int64_t>() == 1 ? FastDecode::kScale : FastDecode::kOff;  // bool is an int
  }
  // Anything but a level's name is refused with its repr in the message.
  absl::StatusOr<FastDecode> level = ParseFastDecode(
      py::isinstance<py::str>(v) ? v.cast<std::string>() : py::repr(v).cast<std::string>());
  if (!level.ok()) throw py::value_error(std::string(level.status().message()));
  return *level;
}

LoaderOptions ParseOptions(py::dict d) {
  // A real copy (py::dict(d) would alias a dict argument): keys are removed as they are read.
  d = py::reinterpret_steal<py::dict>(PyDict_Copy(d.ptr()));
  LoaderOptions o;
  Take(d, "batch_size", &o.batch_size);
  Take(d, "num_workers", &o.num_workers);
  Take(d, "reader_threads", &o.reader_threads);
  Take(d, "io_depth", &o.io_depth);
  Take(d, "prefetch_batches", &o.prefetch_batches);
  Take(d, "max_slots", &o.max_slots);
  Take(d, "auto_threads", &o.auto_threads);
  Take(d, "training_threads", &o.training_threads);
  Take(d, "training_threads_source", &o.training_threads_source);
  Take(d, "cgroup_root", &o.cgroup_root);            // tests fake the cgroup tree
  Take(d, "proc_self_cgroup", &o.proc_self_cgroup);  // ... and /proc/self/cgroup
  Take(d, "auto_prefetch", &o.auto_prefetch);
  Take(d, "max_memory", &o.max_memory);
  Take(d, "meminfo_path", &o.meminfo_path);  // tests fake /proc/meminfo
  Take(d, "drop_last", &o.drop_last);
  Take(d, "shuffle", &o.shuffle);
  Take(d, "seed", &o.seed);
  Take(d, "variable_size", &o.variable_size);
  Take(d, "rank", &o.rank);
  Take(d, "world_size", &o.world_size);
  Take(d, "max_image_pixels", &o.max_image_pixels);
  Take(d, "max_file_bytes", &o.max_file_bytes);
  Take(d, "stall_seconds", &o.stall_seconds);
  if (d.contains("fast_decode")) {
    const FastDecode level = FastDecodeArg(d["fast_decode"]);
    o.fast_decode = level != FastDecode::kOff;
    o.fast_decode_fastest = level == FastDecode::kFastest;
    PyDict_DelItemString(d.ptr(), "fast_decode");
  }
  Take(d, "strict_decode", &o.strict_decode);
  Take(d, "exif_transpose", &o.exif_transpose);
  Take(d, "pin_memory", &o.pin_memory);
  Take(d, "device", &o.device);
  Take(d, "numa_sysfs_root", &o.numa.sysfs_root);  // tests fake the topology
  Take(d, "numa_gpu_bus_id", &o.numa.gpu_bus_id);    // the rank's own GPU (_node.rank_gpu)
  Take(d, "numa_share_index", &o.numa.share_index);  // the rank's disjoint CPU share
  Take(d, "numa_share_count", &o.numa.share_count);
  if (d.contains("numa")) {
    py::object numa = d["numa"];
    if (numa.is_none()) {
      o.numa.mode = NumaOption::Mode::kOff;
    } else if (py::isinstance<py::str>(numa) && numa.cast<std::string>() == "auto") {
      o.numa.mode = NumaOption::Mode::kAuto;
    } else if (py::isinstance<py::int_>(numa) && !py::isinstance<py::bool_>(numa)) {
      o.numa.mode = NumaOption::Mode::kNode;
      o.numa.node = numa.cast<int>();
    } else {
      throw py::value_error(absl::StrCat("numa must be None, 'auto' or a node number; got ",
                                         py::repr(numa).cast<std::string>()));
    }
    PyDict_DelItemString(d.ptr(), "numa");
  }
  std::string io = "auto", dtype = "float32", layout = "NCHW", on_error = "raise";
  Take(d, "on_error", &on_error);
  if (on_error == "raise") o.on_error = ErrorPolicy::kRaise;
  else if (on_error == "skip") o.on_error = ErrorPolicy::kSkip;
  else if (on_error == "replace") o.on_error = ErrorPolicy::kReplace;
  else throw py::value_error(absl::StrCat("on_error must be 'raise', 'skip' or 'replace'; got '", on_error, "'"));
  Take(d, "io", &io);
  Take(d, "dtype", &dtype);
  Take(d, "layout", &layout);
  if (io == "auto") o.io = IoBackend::kAuto;
  else if (io == "uring" || io == "io_uring") o.io = IoBackend::kUring;
  else if (io == "pread") o.io = IoBackend::kPread;
  else throw py::value_error(absl::StrCat("io must be 'auto', 'uring' or 'pread'; got '", io, "'"));
  o.dtype = ParseDType(dtype);
  if (layout == "NCHW") o.layout = Layout::kCHW;
  else if (layout == "NHWC") o.layout = Layout::kHWC;
  else throw py::value_error(absl::StrCat("layout must be 'NCHW' or 'NHWC'; got '", layout, "'"));
  if (d.contains("transform")) {
    o.transform = ParseSteps(d["transform"]);
    PyDict_DelItemString(d.ptr(), "transform");
  }
  if (d.contains("views")) {
    o.views = ParseViews(d["views"]);
    PyDict_DelItemString(d.ptr(), "views");
  }
  if (py::len(d) != 0) {
    throw py::type_error(absl::StrCat("unknown loader option(s): ", py::str(py::list(d.attr("keys")())).cast<std::string>()));
  }
  return o;
}

std::vector<int64_t> ToVector(py::array_t<int64_t, py::array::c_style | py::array::forcecast> a) {
  return std::vector<int64_t>(a.data(), a.data() + a.size());
}

// Rows given as columns over a few buffers (an Arrow column's data buffers): row i is
// buffers[which[i]][starts[i], starts[i] + lengths[i]), a negative which[i] being the caller's
// to read (`negatives` says which it takes). One buffer export per buffer, kept in `*keep`, and
// three integers a row; `what` names the argument in errors, `unit` what a row is.
class ColumnRows {
 public:
  using Ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

  ColumnRows(const py::sequence& buffers, py::handle which, py::handle starts, py::handle lengths,
             int64_t n, std::string what, const char* unit, std::string negatives,
             std::vector<std::unique_ptr<py::buffer_info>>* keep)
      : what_(std::move(what)), negatives_(std::move(negatives)) {
    for (py::handle b : buffers) {
      if (!PyObject_CheckBuffer(b.ptr())) {
        throw py::type_error(absl::StrCat(what_, " buffers[", buffers_.size(), "] must be bytes-like"));
      }
      auto view = std::make_unique<py::buffer_info>(py::reinterpret_borrow<py::buffer>(b).request());
      buffers_.emplace_back(static_cast<const uint8_t*>(view->ptr), view->size * view->itemsize);
      keep->push_back(std::move(view));
    }
    which_ = Column(which, "which", n, unit);
    n = which_.size();
    starts_ = Column(starts, "starts", n, unit);
    lengths_ = Column(lengths, "lengths", n, unit);
  }

  size_t size() const { return static_cast<size_t>(which_.size()); }
  int64_t which(size_t i) const { return which_.data()[i]; }
  int64_t start(size_t i) const { return starts_.data()[i]; }
  int64_t length(size_t i) const { return lengths_.data()[i]; }

  // Row i's bytes (which(i) >= 0), checked against its buffer.
  const uint8_t* Bytes(size_t i) const {
    const int64_t b = which(i), start = this->start(i), length = this->length(i);
    if (b < 0 || b >= static_cast<int64_t>(buffers_.size())) {
      throw py::value_error(absl::StrCat(what_, " which[", i, "] is ", b, "; expected ", negatives_,
                                         " or a buffer index below ", buffers_.size()));
    }
    const int64_t size = buffers_[static_cast<size_t>(b)].second;
    if (start < 0 || length < 0 || start > size - length) {
      throw py::value_error(absl::StrCat(what_, " row ", i, " (bytes ", start, " + ", length,
                                         ") lies outside buffer ", b, " of ", size, " bytes"));
    }
    return buffers_[static_cast<size_t>(b)].first + start;
  }

 private:
  // n < 0: any length (the first column's sets it for the others).
  Ints Column(py::handle values, const char* name, int64_t n, const char* unit) const {
    Ints array = Ints::ensure(values);
    if (!array || array.ndim() != 1 || (n >= 0 && array.size() != n)) {
      PyErr_Clear();
      throw py::value_error(absl::StrCat(what_, " ", name, " must be integers, one per ", unit,
                                         n >= 0 ? absl::StrCat(" (", n, ")") : std::string()));
    }
    return array;
  }

  std::string what_;
  std::string negatives_;
  std::vector<std::pair<const uint8_t*, int64_t>> buffers_;
  Ints which_, starts_, lengths_;
};

// ---- the Loader binding ------------------------------------------------------------------

class PyLoader {
 public:
  PyLoader(py::object paths, py::array_t<int64_t, py::array::c_style | py::array::forcecast> labels,
           py::dict options, py::object offsets, py::object lengths, py::object errors, py::object pipes,
           py::object tar_members, py::object memory, py::object more_files, py::object stream_ends) {
    const bool whole_files = offsets.is_none() && lengths.is_none() && errors.is_none() && pipes.is_none() &&
                             tar_members.is_none() && memory.is_none() && more_files.is_none() &&
                             stream_ends.is_none();
    if (whole_files && py::isinstance<py::tuple>(paths) && py::len(paths) == 2) {
      // Whole files from a path arena: the loader reads the arena and labels in place.
      SampleColumns columns = ColumnsFrom(py::reinterpret_borrow<py::tuple>(paths), labels);
      absl::StatusOr<std::unique_ptr<Loader>> loader =
          Loader::CreateFromColumns(std::move(columns), ParseOptions(options));
      ThrowIfError(loader.status());
      loader_ = std::move(*loader);
      return;
    }
    std::vector<Sample> samples = SamplesFrom(paths);
    if (labels.ndim() != 1 || static_cast<size_t>(labels.size()) != samples.size()) {
      throw py::value_error("paths and labels differ in length");
    }
    for (size_t i = 0; i < samples.size(); ++i) samples[i].label = labels.data()[i];
    // Byte ranges (members of shards) and known errors, each of len(paths) when given.
    auto column = [&](const py::object& values, const char* name) {
      auto array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(values);
      if (!array) {
        PyErr_Clear();
        throw py::type_error(absl::StrCat(name, " must be a sequence of integers (int64)"));
      }
      if (array.ndim() != 1 || static_cast<size_t>(array.size()) != samples.size()) {
        throw py::value_error(absl::StrCat(name, " has ", array.size(), " entries; expected one per path (",
                                           samples.size(), ")"));
      }
      return ToVector(array);
    };
    if (!offsets.is_none()) {
      std::vector<int64_t> v = column(offsets, "offsets");
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < 0) throw py::value_error(absl::StrCat("offsets[", i, "] is negative: ", v[i]));
        samples[i].offset = static_cast<uint64_t>(v[i]);
      }
    }
    if (!lengths.is_none()) {
      std::vector<int64_t> v = column(lengths, "lengths");
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < -1) throw py::value_error(absl::StrCat("lengths[", i, "] must be >= 0 or -1 (whole file), got ", v[i]));
        samples[i].length = v[i];
      }
    }
    if (!pipes.is_none()) {
      // bool per sample: True only for members of a pipe: stream whose command the user wrote. A
      // path is never run because of its spelling.
      auto array = py::array_t<bool, py::array::c_style | py::array::forcecast>::ensure(pipes);
      if (!array || array.ndim() != 1 || static_cast<size_t>(array.size()) != samples.size()) {
        PyErr_Clear();
        throw py::value_error(absl::StrCat("pipes must be a sequence of bool with one entry per path (",
                                           samples.size(), ")"));
      }
      for (size_t i = 0; i < samples.size(); ++i) {
        if (array.data()[i]) samples[i].source = SourceKind::kPipe;
      }
    }
    if (!tar_members.is_none()) {
      // bool per sample: True for a member's data in a tar shard (its header is checked where a
      // stream passes it; see Sample::tar_member).
      auto array = py::array_t<bool, py::array::c_style | py::array::forcecast>::ensure(tar_members);
      if (!array || array.ndim() != 1 || static_cast<size_t>(array.size()) != samples.size()) {
        PyErr_Clear();
        throw py::value_error(absl::StrCat("tar_members must be a sequence of bool with one entry per path (",
                                           samples.size(), ")"));
      }
      for (size_t i = 0; i < samples.size(); ++i) samples[i].tar_member = array.data()[i];
    }
    if (!stream_ends.is_none()) {
      // int per sample: 0, or a pipe: stream's length when indexed (see Sample::stream_end).
      std::vector<int64_t> v = column(stream_ends, "stream_ends");
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < 0) throw py::value_error(absl::StrCat("stream_ends[", i, "] is negative: ", v[i]));
        samples[i].stream_end = static_cast<uint64_t>(v[i]);
      }
    }
    if (!errors.is_none()) {
      // str per sample: '' (or None) = ok, anything else is why the sample is bad.
      if (!py::isinstance<py::sequence>(errors) || py::isinstance<py::str>(errors)) {
        throw py::type_error("errors must be a list of str ('' = ok), one per path");
      }
      py::sequence v = errors;
      if (static_cast<size_t>(py::len(v)) != samples.size()) {
        throw py::value_error(absl::StrCat("errors has ", py::len(v), " entries; expected one per path (",
                                           samples.size(), ")"));
      }
      for (size_t i = 0; i < samples.size(); ++i) {
        py::object item = v[i];
        if (item.is_none()) continue;
        if (!py::isinstance<py::str>(item)) {
          throw py::type_error(absl::StrCat("errors[", i, "] must be a str ('' = ok) or None"));
        }
        samples[i].error = item.cast<std::string>();
      }
    }
    if (py::isinstance<py::tuple>(memory)) {
      TakeMemoryColumns(py::reinterpret_borrow<py::tuple>(memory), &samples);
    } else if (!memory.is_none()) {
      // A bytes-like object (or None: read `path`) per sample: encoded images held in memory.
      // Each is held, buffer exported, for the loader's lifetime, so its bytes stay where they are.
      py::sequence v = memory;
      if (static_cast<size_t>(py::len(v)) != samples.size()) {
        throw py::value_error(absl::StrCat("memory has ", py::len(v), " entries; expected one per path (",
                                           samples.size(), ")"));
      }
      for (size_t i = 0; i < samples.size(); ++i) {
        py::object item = v[i];
        if (item.is_none()) continue;
        if (!PyObject_CheckBuffer(item.ptr())) {
          throw py::type_error(absl::StrCat("memory[", i, "] must be bytes-like or None"));
        }
        auto view = std::make_unique<py::buffer_info>(py::buffer(item).request());
        samples[i].source = SourceKind::kMemory;
        samples[i].memory = static_cast<const uint8_t*>(view->ptr);
        samples[i].length = view->size * view->itemsize;
        memory_.push_back(std::move(view));
      }
    }
    if (!more_files.is_none()) {
      // Per sample, a list of its files after its own (Sample::more_files): a str (a path) or a
      // (description, bytes-like) pair held in memory, exported like `memory` above.
      py::sequence v = more_files;
      if (static_cast<size_t>(py::len(v)) != samples.size()) {
        throw py::value_error(absl::StrCat("more_files has ", py::len(v),
                                           " entries; expected one per path (", samples.size(), ")"));
      }
      for (size_t i = 0; i < samples.size(); ++i) {
        py::object item = v[i];
        if (item.is_none()) continue;
        for (py::handle f : item) {
          Sample::File file;
          if (py::isinstance<py::str>(f)) {
            file.path = f.cast<std::string>();
          } else {
            if (!py::isinstance<py::tuple>(f) || py::len(f) != 2 ||
                !PyObject_CheckBuffer(py::reinterpret_borrow<py::tuple>(f)[1].ptr())) {
              throw py::type_error(absl::StrCat("more_files[", i, "] entries must be a path (str) or "
                                                "a (description, bytes-like) pair"));
            }
            py::tuple pair = py::reinterpret_borrow<py::tuple>(f);
            file.path = py::str(pair[0]);
            auto view = std::make_unique<py::buffer_info>(py::buffer(pair[1]).request());
            file.memory = static_cast<const uint8_t*>(view->ptr);
            file.length = view->size * view->itemsize;
            memory_.push_back(std::move(view));
          }
          samples[i].more_files.push_back(std::move(file));
        }
      }
    }
    LoaderOptions parsed = ParseOptions(options);
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(std::move(samples), std::move(parsed));
    ThrowIfError(loader.status());
    loader_ = std::move(*loader);
  }

  void StartEpoch(int64_t epoch, uint64_t seed, py::array_t<int64_t, py::array::c_style | py::array::forcecast> indices,
                  py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets, int64_t first_batch) {
    std::vector<int64_t> idx = ToVector(indices), off = ToVector(offsets);
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = loader_->StartEpoch(epoch, seed, std::move(idx), std::move(off), first_batch);
    }
    ThrowIfError(status);
  }

  void StartBuiltinEpoch(int64_t epoch, int64_t first_batch) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = loader_->StartEpoch(epoch, first_batch);
    }
    ThrowIfError(status);
  }

  void QueueEpoch(int64_t epoch, uint64_t seed, py::array_t<int64_t, py::array::c_style | py::array::forcecast> indices,
                  py::array_t<int64_t, py::array::c_style | py::array::forcecast> offsets) {
    std::vector<int64_t> idx = ToVector(indices), off = ToVector(offsets);
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = loader_->QueueEpoch(epoch, seed, std::move(idx), std::move(off));
    }
    ThrowIfError(status);
  }

  void QueueBuiltinEpoch(int64_t epoch) {
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = loader_->QueueEpoch(epoch);
    }
    ThrowIfError(status);
  }

  void CancelQueued() {
    py::gil_scoped_release release;
    loader_->CancelQueued();
  }

  bool HasQueuedEpoch() const { return loader_->HasQueuedEpoch(); }

  /// (images, labels, indices) or None at the end of the epoch.
  py::object Next(double timeout) {
    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    constexpr double kSlice = 0.1;  // return to Python this often so Ctrl-C is seen
    while (true) {
      double slice = kSlice;
      if (timeout > 0) {
        const double left = timeout - std::chrono::duration<double>(Clock::now() - start).count();
        slice = std::max(1e-3, std::min(kSlice, left));
      }
      absl::StatusOr<Batch> batch;
      {
        py::gil_scoped_release release;
        batch = loader_->Next(slice);
      }
      if (batch.ok()) return Wrap(*batch);
      if (IsEndOfEpoch(batch.status())) {
        return py::none();
      }
      if (absl::IsDeadlineExceeded(batch.status())) {
        if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        const double waited = std::chrono::duration<double>(Clock::now() - start).count();
        if (timeout <= 0 || waited < timeout) continue;
        // Say where the batch is stuck: which stage holds what, and the errors seen so far.
        const LoaderStats stats = loader_->Stats();
        std::string detail = stats.pipeline_state.empty() ? "" : absl::StrCat("; ", stats.pipeline_state);
        if (!stats.last_error.empty()) absl::StrAppend(&detail, "; last error: ", stats.last_error);
        // A shard still downloading (trickling, stalled, retried): its URL, bytes, rate and age.
        const std::string downloads = DescribeTransfersInFlight();
        if (!downloads.empty()) absl::StrAppend(&detail, "; ", downloads);
        Raise(absl::DeadlineExceededError(absl::StrCat("DataLoader timed out after ", timeout,
                                                       " seconds waiting for batch ",
                                                       loader_->next_batch(), detail)));
      }
      Raise(batch.status());
    }
  }

  void Stop() {
    py::gil_scoped_release release;
    loader_->Stop();
  }

  Tensor DecodeSample(int64_t index, uint64_t seed, int64_t epoch, int64_t key) {
    const DType dtype = loader_->dtype();
    std::shared_ptr<uint8_t[]> buffer;
    int out_h = 0, out_w = 0;
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = loader_->DecodeSample(index, seed, epoch, key, [&](int h, int w) -> void* {
        out_h = h, out_w = w;
        const size_t bytes = static_cast<size_t>(h) * w * 3 * DTypeSize(dtype);
        buffer.reset(new (std::nothrow) uint8_t[std::max<size_t>(bytes, 1)]);
        return buffer.get();
      });
    }
    ThrowIfError(status);
    std::vector<int64_t> shape = loader_->layout() == Layout::kHWC
                                     ? std::vector<int64_t>{out_h, out_w, 3}
                                     : std::vector<int64_t>{3, out_h, out_w};
    void* data = buffer.get();
    return Tensor(std::shared_ptr<void>(buffer, data), data, std::move(shape), ToDl(dtype), false);
  }

  py::dict Stats() const {
    const LoaderStats s = loader_->Stats();
    py::dict d;
    ForEachStat(s, [&d](const char* name, const auto& value) { d[name] = value; });
    d["transform"] = loader_->DescribeTransform();
    return d;
  }

  // ---- deferred rows (DeferredRows): the feeder's side, for a source read a group at a time ----

  DeferredRows& Deferred() const {
    DeferredRows* rows = loader_->deferred_rows();
    if (rows == nullptr) throw py::value_error("this loader has no deferred rows");
    return *rows;
  }

  // Group `group`'s rows as (buffers, which, starts, lengths) like columnar `memory` (which -1:
  // a row without bytes), copied into one block the loader owns, for `uses` decodes.
  void DeferredAttach(int64_t group, const py::sequence& buffers, const py::object& which,
                      const py::object& starts, const py::object& lengths, int64_t uses,
                      const py::object& row_uses_obj) {
    DeferredRows& deferred = Deferred();
    std::vector<std::unique_ptr<py::buffer_info>> views;  // exported while this copies
    const ColumnRows rows(buffers, which, starts, lengths, -1, "deferred", "row", "-1 (no bytes)", &views);
    const size_t n = rows.size();
    auto group_rows = std::make_shared<DeferredRows::Group>();
    if (!row_uses_obj.is_none()) {
      // Decodes per row in this plan (DeferredRows::Group::row_uses).
      auto counts = py::array_t<int32_t, py::array::c_style | py::array::forcecast>::ensure(row_uses_obj);
      if (!counts || counts.ndim() != 1 || static_cast<size_t>(counts.size()) != n) {
        PyErr_Clear();
        throw py::value_error(absl::StrCat("row_uses must be integers, one per row (", n, ")"));
      }
      group_rows->row_uses.assign(counts.data(), counts.data() + n);
    }
    std::vector<const uint8_t*> from(n, nullptr);  // each row's bytes, checked (null: none)
    group_rows->starts.resize(n);
    group_rows->lengths.resize(n);
    int64_t total = 0;
    for (size_t r = 0; r < n; ++r) {
      group_rows->lengths[r] = -1;
      if (rows.which(r) == -1) continue;
      from[r] = rows.Bytes(r);
      group_rows->starts[r] = total;
      group_rows->lengths[r] = rows.length(r);
      total += rows.length(r);
    }
    absl::Status status;
    {
      py::gil_scoped_release release;  // the buffers stay exported (views) while this copies
      group_rows->bytes.resize(static_cast<size_t>(total));
      for (size_t r = 0; r < n; ++r) {
        if (group_rows->lengths[r] <= 0) continue;
        std::memcpy(group_rows->bytes.data() + group_rows->starts[r], from[r],
                    static_cast<size_t>(group_rows->lengths[r]));
      }
      status = deferred.Attach(group, std::move(group_rows), uses);
    }
    ThrowIfError(status);
  }

  bool DeferredWaitRoom(int64_t group, int64_t incoming, int64_t budget, double timeout) {
    DeferredRows& rows = Deferred();
    py::gil_scoped_release release;
    return rows.WaitForRoom(group, incoming, budget, absl::Seconds(std::max(0.0, timeout)));
  }

  int64_t num_batches() const { return loader_->num_batches(); }
  int64_t next_batch() const { return loader_->next_batch(); }
  int64_t batches_per_epoch() const { return loader_->BatchesPerEpoch(); }
  py::object sample_shape() const {
    const int h = loader_->output_height(), w = loader_->output_width();
    if (h == 0) return py::none();  // depends on the image
    if (loader_->layout() == Layout::kHWC) return py::make_tuple(h, w, 3);
    return py::make_tuple(3, h, w);
  }
  std::string dtype() const { return DTypeName(loader_->dtype()); }
  // Where each view is in a row: [(byte offset, shape of one sample, dtype name, channels the
  // caller keeps: 1 for a luma view, rendered replicated)], or None.
  py::object views() const {
    const std::vector<ViewLayout> views = loader_->views();
    if (views.empty()) return py::none();
    py::list out;
    for (const ViewLayout& v : views) {
      py::tuple shape = loader_->layout() == Layout::kHWC ? py::tuple(py::make_tuple(v.height, v.width, 3))
                                                          : py::tuple(py::make_tuple(3, v.height, v.width));
      out.append(py::make_tuple(v.offset, shape, DTypeName(v.dtype), v.luma || v.mask ? 1 : 3));
    }
    return out;
  }
  // Of each view: True when its rows hold the record of a variable-size output (int64 id,
  // height, width, bytes at the view's offset: take_outputs) instead of its pixels; None
  // without views.
  py::object variable_views() const {
    const std::vector<ViewLayout> views = loader_->views();
    if (views.empty()) return py::none();
    py::list out;
    for (const ViewLayout& v : views) out.append(py::bool_(v.variable));
    return out;
  }
  // The outputs the records' ids name, taken from their batch (call while it is held): a list
  // of tensors of 3 channels in the loader's layout, each owning its buffer (and its share of
  // max_memory) until it is freed.
  py::list TakeOutputs(const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& ids) {
    py::list out;
    const int64_t* id = ids.data();
    for (py::ssize_t i = 0; i < ids.size(); ++i) {
      absl::StatusOr<SampleOutput> taken = loader_->TakeSampleOutput(static_cast<uint64_t>(id[i]));
      ThrowIfError(taken.status());
      const SampleOutput& o = *taken;
      std::vector<int64_t> shape = loader_->layout() == Layout::kHWC
                                       ? std::vector<int64_t>{o.height, o.width, 3}
                                       : std::vector<int64_t>{3, o.height, o.width};
      out.append(py::cast(Tensor(o.hold, o.data, std::move(shape), ToDl(o.dtype), false)));
    }
    return out;
  }
  // The byte offset in a row of each view's geometry record (LoaderOptions::View::geometry:
  // float64 fields in pipeline/views.h's order), None for a view without; None without views.
  py::object geometry() const {
    const std::vector<ViewLayout> views = loader_->views();
    if (views.empty()) return py::none();
    py::list out;
    for (const ViewLayout& v : views) {
      out.append(v.geometry_offset < 0 ? py::object(py::none()) : py::int_(v.geometry_offset));
    }
    return out;
  }

 private:
  // With views a batch's images are its rows as bytes, [B, row_bytes] (see views()).
  std::vector<int64_t> ImageShape(const Batch& batch) const {
    if (loader_->options().views.empty()) return batch.image_shape();
    return {batch.size(), static_cast<int64_t>(loader_->row_bytes())};
  }
  RlDLDataType ImageDType(const Batch& batch) const {
    return loader_->options().views.empty() ? ToDl(batch.dtype()) : ToDl(DType::kUint8);
  }

  py::tuple Wrap(const Batch& batch) {
    if (std::shared_ptr<DeviceLease> lease = batch.device_lease()) {
      // All three views share the device buffer: it returns to the ring when the last is freed.
      const int dev = batch.device();
      const RlDLDataType i64{kRlDLInt, 64, 1};
      Tensor images(lease, batch.device_images(), ImageShape(batch), ImageDType(batch), false, dev, lease);
      Tensor labels(lease, batch.device_labels(), {batch.size()}, i64, false, dev, lease);
      Tensor indices(lease, batch.device_indices(), {batch.size()}, i64, false, dev, lease);
      return py::make_tuple(std::move(images), std::move(labels), std::move(indices), batch.number());
    }
    std::shared_ptr<void> owner = batch.lease();
    Tensor images(owner, batch.images(), ImageShape(batch), ImageDType(batch), batch.pinned());
    // Labels and indices are copied (8 bytes a row) so that keeping them, e.g. for metrics,
    // never pins the slot: only the image tensor holds the slot lease.
    Tensor labels = CopyInt64(batch.labels(), batch.size());
    Tensor indices = CopyInt64(batch.indices(), batch.size());
    return py::make_tuple(std::move(images), std::move(labels), std::move(indices), batch.number());
  }

  // Samples (labels unset) from a list of str paths, or from a path arena: a pair (bytes or uint8
  // array of every path, int64 array of each path's end in it), as SampleTable holds them.
  static std::vector<Sample> SamplesFrom(const py::object& paths) {
    if (py::isinstance<py::tuple>(paths) && py::len(paths) == 2) {
      py::tuple pair = paths;
      auto blob = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(pair[0]);
      auto ends = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(pair[1]);
      if (!blob || !ends || blob.ndim() != 1 || ends.ndim() != 1) {
        PyErr_Clear();
        throw py::type_error("paths as an arena must be (uint8 array of path bytes, int64 array of path ends)");
      }
      const char* bytes = reinterpret_cast<const char*>(blob.data());
      const int64_t* end = ends.data();
      std::vector<Sample> samples(static_cast<size_t>(ends.size()));
      int64_t start = 0;
      for (size_t i = 0; i < samples.size(); ++i) {
        if (end[i] < start || end[i] > blob.size()) {
          throw py::value_error(absl::StrCat("path arena: end ", end[i], " of path ", i, " is outside [", start,
                                             ", ", blob.size(), "]"));
        }
        samples[i].path.assign(bytes + start, static_cast<size_t>(end[i] - start));
        start = end[i];
      }
      return samples;
    }
    auto list = paths.cast<std::vector<std::string>>();
    std::vector<Sample> samples(list.size());
    for (size_t i = 0; i < list.size(); ++i) samples[i].path = std::move(list[i]);
    return samples;
  }

  // A path arena (as SamplesFrom takes it) and its labels as SampleColumns, without a Sample or a
  // copy: their buffers are exported (memory_) while the loader exists, so an ImageNet-sized
  // folder's paths are held once, by the dataset and the loader together.
  SampleColumns ColumnsFrom(const py::tuple& pair,
                            const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& labels) {
    auto blob = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(pair[0]);
    auto ends = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(pair[1]);
    if (!blob || !ends || blob.ndim() != 1 || ends.ndim() != 1) {
      PyErr_Clear();
      throw py::type_error("paths as an arena must be (uint8 array of path bytes, int64 array of path ends)");
    }
    if (labels.ndim() != 1 || labels.size() != ends.size()) throw py::value_error("paths and labels differ in length");
    auto hold = [this](const py::array& array) {
      memory_.push_back(std::make_unique<py::buffer_info>(array.request()));
      return memory_.back()->ptr;
    };
    SampleColumns columns;
    columns.paths = static_cast<const char*>(hold(blob));
    columns.paths_size = static_cast<size_t>(blob.size());
    columns.ends = static_cast<const int64_t*>(hold(ends));
    columns.labels = static_cast<const int64_t*>(hold(labels));
    columns.size = static_cast<size_t>(ends.size());
    return columns;
  }

  // `memory` as columns, for tables of many rows held in a few large buffers (an Arrow column's
  // data buffers): (buffers, which, starts, lengths), sample i's bytes being
  // buffers[which[i]][starts[i], starts[i] + lengths[i]) (which[i] == -1: read its path). One
  // buffer export per buffer and three integers per sample, instead of an object per sample.
  void TakeMemoryColumns(const py::tuple& memory, std::vector<Sample>* samples) {
    if (py::len(memory) != 4 || !py::isinstance<py::sequence>(memory[0])) {
      throw py::type_error("memory as columns must be (buffers, which, starts, lengths)");
    }
    const ColumnRows rows(py::reinterpret_borrow<py::sequence>(memory[0]), memory[1], memory[2], memory[3],
                          static_cast<int64_t>(samples->size()), "memory", "path",
                          "-1 (read the path), -2 (deferred)", &memory_);
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t b = rows.which(i);
      if (b == -1) continue;
      Sample& sample = (*samples)[i];
      if (b == -2) {
        // Deferred: row `length` of group `start`, handed over while epochs run (DeferredRows).
        const int64_t group = rows.start(i), row = rows.length(i);
        if (group < 0 || group > INT32_MAX || row < 0) {
          throw py::value_error(absl::StrCat("memory row ", i, " is deferred with group ", group, " row ", row,
                                             "; expected a group in [0, 2^31) and a row >= 0"));
        }
        sample.source = SourceKind::kDeferred;
        sample.group = static_cast<int32_t>(group);
        sample.offset = static_cast<uint64_t>(row);
        continue;
      }
      sample.memory = rows.Bytes(i);
      sample.source = SourceKind::kMemory;
      sample.length = rows.length(i);
    }
  }

  static Tensor CopyInt64(const int64_t* values, int n) {
    std::shared_ptr<int64_t[]> copy(new int64_t[std::max(n, 1)]);
    std::memcpy(copy.get(), values, sizeof(int64_t) * n);
    void* data = copy.get();
    return Tensor(std::shared_ptr<void>(copy, data), data, {n}, RlDLDataType{kRlDLInt, 64, 1}, false);
  }

  // The buffers of in-memory samples (Sample::memory), exported while the loader exists:
  // declared first, so they are released only after the loader (and its threads) are gone.
  std::vector<std::unique_ptr<py::buffer_info>> memory_;
  std::unique_ptr<Loader> loader_;
};

// A numpy array over `values`, which it keeps alive (no copy).
template <typename T, typename Owner>
py::array_t<T> OwningArray(std::unique_ptr<Owner> owner, T* data, size_t n) {
  Owner* raw = owner.release();
  py::capsule keep(raw, [](void* p) { delete static_cast<Owner*>(p); });
  return py::array_t<T>({static_cast<py::ssize_t>(n)}, {static_cast<py::ssize_t>(sizeof(T))}, data, keep);
}

py::tuple ScanFolder(const std::string& root) {
  std::vector<std::string> classes;
  absl::StatusOr<SampleTable> table;
  {
    py::gil_scoped_release release;
    table = ScanImageFolderTable(root, &classes);
  }
  ThrowIfError(table.status());
  // The arena goes to Python as it is: one path bytes array, path ends, labels; no str per sample.
  const size_t n = table->size();
  auto paths = std::make_unique<std::string>(std::move(table->paths));
  auto ends = std::make_unique<std::vector<uint64_t>>(std::move(table->ends));
  auto labels = std::make_unique<std::vector<int32_t>>(std::move(table->labels));
  uint8_t* path_bytes = reinterpret_cast<uint8_t*>(paths->data());
  const size_t path_size = paths->size();
  int64_t* end_data = reinterpret_cast<int64_t*>(ends->data());
  int32_t* label_data = labels->data();
  return py::make_tuple(classes, OwningArray(std::move(paths), path_bytes, path_size),
                        OwningArray(std::move(ends), end_data, n), OwningArray(std::move(labels), label_data, n));
}

py::tuple FileList(const std::string& list_path) {
  absl::StatusOr<std::vector<Sample>> samples;
  {
    py::gil_scoped_release release;
    samples = ReadFileList(list_path);
  }
  ThrowIfError(samples.status());
  py::list paths, labels;
  for (const Sample& s : *samples) {
    paths.append(s.path);
    labels.append(s.label);
  }
  return py::make_tuple(paths, labels);
}

py::dict ScanShard(const std::string& url, std::vector<std::string> image_exts, const std::string& label_key,
                  const std::string& json_field, bool pipe) {
  WebDatasetOptions options;
  options.image_exts = std::move(image_exts);
  options.label_key = label_key;
  options.json_field = json_field;
  absl::StatusOr<ShardIndex> index;
  {
    py::gil_scoped_release release;
    index = ScanWebDatasetShard(url, options, pipe ? SourceKind::kPipe : SourceKind::kFile);
  }
  ThrowIfError(index.status());
  const auto n = static_cast<py::ssize_t>(index->samples.size());
  py::list keys, members, errors;
  py::array_t<int64_t> offsets(n), lengths(n), labels(n);
  int64_t* off = offsets.mutable_data();
  int64_t* len = lengths.mutable_data();
  int64_t* lab = labels.mutable_data();
  for (py::ssize_t i = 0; i < n; ++i) {
    const ShardSample& s = index->samples[static_cast<size_t>(i)];
    keys.append(s.key);
    members.append(s.member);
    errors.append(s.error);
    off[i] = static_cast<int64_t>(s.offset);
    len[i] = s.length;
    lab[i] = s.label;
  }
  py::dict out;
  out["keys"] = keys;
  out["members"] = members;
  out["offsets"] = offsets;
  out["lengths"] = lengths;
  out["labels"] = labels;
  out["errors"] = errors;
  out["bytes"] = index->bytes;
  out["error"] = index->error;
  return out;
}

/// Remote shards into the node-local cache (io/shard_cache.h), without the GIL: one dict per URL,
/// {path, size, etag, downloaded, attempts} or {error, code} (code: absl's name, lower case).
/// A flag another thread sets to stop a fetch_shards call (Ctrl-C while shards download).
struct FetchCancel {
  std::shared_ptr<std::atomic<bool>> flag = std::make_shared<std::atomic<bool>>(false);
};

RemoteOptions RemoteOptionsFrom(const py::dict& settings) {
  RemoteOptions options;
  auto get = [&](const char* key) -> py::object {
    return settings.contains(key) ? py::object(settings[key]) : py::none();
  };
  if (!get("max_connections").is_none()) options.max_connections = get("max_connections").cast<int>();
  if (!get("max_attempts").is_none()) options.max_attempts = get("max_attempts").cast<int>();
  if (!get("backoff_initial_s").is_none()) options.backoff_initial_s = get("backoff_initial_s").cast<double>();
  if (!get("backoff_max_s").is_none()) options.backoff_max_s = get("backoff_max_s").cast<double>();
  if (!get("connect_timeout_s").is_none()) options.connect_timeout_s = get("connect_timeout_s").cast<long>();
  if (!get("stall_timeout_s").is_none()) options.stall_timeout_s = get("stall_timeout_s").cast<long>();
  if (!get("min_rate_bytes_per_s").is_none()) options.min_rate_bytes_per_s = get("min_rate_bytes_per_s").cast<int64_t>();
  if (!get("min_rate_window_s").is_none()) options.min_rate_window_s = get("min_rate_window_s").cast<double>();
  if (!get("download_deadline_s").is_none()) options.download_deadline_s = get("download_deadline_s").cast<double>();
  if (!get("ca_file").is_none()) options.ca_file = get("ca_file").cast<std::string>();
  if (!get("access_key").is_none()) options.s3.access_key = get("access_key").cast<std::string>();
  if (!get("secret_key").is_none()) options.s3.secret_key = get("secret_key").cast<std::string>();
  if (!get("session_token").is_none()) options.s3.session_token = get("session_token").cast<std::string>();
  if (!get("region").is_none()) options.s3.region = get("region").cast<std::string>();
  if (!get("endpoint").is_none()) options.s3.endpoint = get("endpoint").cast<std::string>();
  if (!get("s3_addressing_style").is_none()) options.s3.addressing_style = get("s3_addressing_style").cast<std::string>();
  return options;
}

py::list CachedShardDicts(const std::vector<absl::StatusOr<CachedShard>>& got) {
  py::list out;
  for (const auto& r : got) {
    py::dict d;
    if (r.ok()) {
      d["path"] = r->path;
      d["size"] = r->size;
      d["etag"] = r->etag;
      d["downloaded"] = r->downloaded;
      d["attempts"] = r->attempts;
    } else {
      d["error"] = std::string(r.status().message());
      d["code"] = absl::AsciiStrToLower(absl::StatusCodeToString(r.status().code()));
    }
    out.append(d);
  }
  return out;
}

py::list FetchShards(const std::vector<std::string>& urls, const std::string& cache_dir, int64_t cache_limit,
                     const py::dict& settings, std::optional<FetchCancel> cancel) {
  RemoteOptions options = RemoteOptionsFrom(settings);
  std::vector<absl::StatusOr<CachedShard>> got;
  {
    py::gil_scoped_release release;
    std::shared_ptr<std::atomic<bool>> flag = cancel ? cancel->flag : nullptr;
    ShardCache cache(cache_dir, cache_limit, std::move(options));
    got = cache.Ensure(urls, flag.get());
  }
  return CachedShardDicts(got);
}

/// A native transfer thread owned by a Python object: close() (or the object's end) cancels
/// what is left and joins, without the GIL. A forked child never joins its parent's thread.
template <typename Transfers>
struct PyBackground {
  std::unique_ptr<Transfers> fetch;
  pid_t pid = getpid();
  void Close() {
    if (getpid() != pid) {
      (void)fetch.release();  // a forked child: its threads are the parent's, not joinable here
      return;
    }
    py::gil_scoped_release release;
    fetch.reset();
  }
  ~PyBackground() { Close(); }
};

/// Remote shards' wanted members by range into sparse copies while the epoch reads
/// (io/range_reads.h).
using PyBackgroundRanges = PyBackground<BackgroundRanges>;

py::dict LinkEstimateDict(const LinkEstimate& link) {
  py::dict d;
  d["host"] = link.host;
  d["latency_s"] = link.latency_s;
  d["bytes_per_s"] = link.bytes_per_s;
  d["latency_samples"] = link.latency_samples;
  d["rate_samples"] = link.rate_samples;
  return d;
}

/// An epoch's downloads on a native thread (io/pending_downloads.h).
using PyBackgroundFetch = PyBackground<BackgroundFetch>;

}  // namespace
}  // namespace ringloader

PYBIND11_MODULE(_C, m) {
  using namespace ringloader;
  m.doc() = "ringloader native core (private; use the ringloader package)";
  BindVideo(m);  // video_available, VideoDecoder (bind_video.cc)

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
  m.attr("GEOMETRY_FIELDS") = py::int_(static_cast<int>(kGeometryFields));
  m.attr("StaleIndexError") = py::handle(g_stale_index_error);
  m.attr("SlotsExhaustedError") = py::handle(g_slots_exhausted_error);
  m.attr("LoaderTimeoutError") = py::handle(g_timeout_error);

  py::class_<Tensor>(m, "Tensor", "A host array exported zero-copy through DLPack.")
      .def("__dlpack__", &Tensor::Dlpack, py::kw_only(), py::arg("stream") = py::none(),
           py::arg("max_version") = py::none(), py::arg("dl_device") = py::none(),
           py::arg("copy") = py::none())
      .def("__dlpack_device__", &Tensor::DlpackDevice)
      .def_property_readonly("shape", [](const Tensor& t) { return py::tuple(py::cast(t.shape())); })
      .def_property_readonly("dtype", &Tensor::dtype_name)
      .def_property_readonly("pinned", &Tensor::pinned)
      .def_property_readonly("device", &Tensor::device_name)
      .def_property_readonly("ready", &Tensor::ready)
      .def_property_readonly("data_ptr", &Tensor::data_ptr);

  py::class_<PyLoader>(m, "Loader")
      .def(py::init<py::object, py::array_t<int64_t, py::array::c_style | py::array::forcecast>, py::dict,
                    py::object, py::object, py::object, py::object, py::object, py::object, py::object,
                    py::object>(),
           py::arg("paths"), py::arg("labels"), py::arg("options"), py::arg("offsets") = py::none(),
           py::arg("lengths") = py::none(), py::arg("errors") = py::none(), py::arg("pipes") = py::none(),
           py::arg("tar_members") = py::none(), py::arg("memory") = py::none(),
           py::arg("more_files") = py::none(), py::arg("stream_ends") = py::none())
      .def("start_epoch", &PyLoader::StartEpoch, py::arg("epoch"), py::arg("seed"), py::arg("indices"),
           py::arg("offsets"), py::arg("first_batch") = 0)
      .def("start_builtin_epoch", &PyLoader::StartBuiltinEpoch, py::arg("epoch"), py::arg("first_batch") = 0)
      .def("queue_epoch", &PyLoader::QueueEpoch, py::arg("epoch"), py::arg("seed"), py::arg("indices"),
           py::arg("offsets"))
      .def("queue_builtin_epoch", &PyLoader::QueueBuiltinEpoch, py::arg("epoch"))
      .def("cancel_queued", &PyLoader::CancelQueued)
      .def("has_queued_epoch", &PyLoader::HasQueuedEpoch)
      .def("next", &PyLoader::Next, py::arg("timeout") = 0.0)
      .def("stop", &PyLoader::Stop)
      .def("decode_sample", &PyLoader::DecodeSample, py::arg("index"), py::arg("seed") = 0,
           py::arg("epoch") = 0, py::arg("key") = -1,
           "One sample (any output size) with the augmentation seed of (seed, epoch, key); "
           "key defaults to the index.")
      .def("stats", &PyLoader::Stats)
      .def("deferred_attach", &PyLoader::DeferredAttach, py::arg("group"), py::arg("buffers"), py::arg("which"),
           py::arg("starts"), py::arg("lengths"), py::arg("uses"), py::arg("row_uses") = py::none(),
           "Hands over a deferred group's rows (copied), for `uses` decodes.")
      .def("deferred_wait_room", &PyLoader::DeferredWaitRoom, py::arg("group"), py::arg("incoming"),
           py::arg("budget"), py::arg("timeout"),
           "True when `incoming` bytes fit the budget, or a reader waits for `group`.")
      .def("deferred_held", [](const PyLoader& l, int64_t group) { return l.Deferred().Held(group); })
      .def("deferred_clear", [](const PyLoader& l) { l.Deferred().Clear(); })
      .def_property_readonly("num_batches", &PyLoader::num_batches)
      .def_property_readonly("next_batch", &PyLoader::next_batch)
      .def_property_readonly("batches_per_epoch", &PyLoader::batches_per_epoch)
      .def_property_readonly("sample_shape", &PyLoader::sample_shape)
      .def_property_readonly("views", &PyLoader::views)
      .def_property_readonly("geometry", &PyLoader::geometry)
      .def_property_readonly("variable_views", &PyLoader::variable_views)
      .def("take_outputs", &PyLoader::TakeOutputs, py::arg("ids"),
           "The variable-size outputs whose records hold these ids, taken from their batch.")
      .def_property_readonly("dtype", &PyLoader::dtype);

  m.def(
      "_apply_image_op",
      [](const std::string& name, py::array_t<uint8_t, py::array::c_style | py::array::forcecast> img,
         const std::map<std::string, std::vector<double>>& args) {
        if (img.ndim() != 3 || img.shape(2) != 3) throw py::value_error("image must be HxWx3 uint8");
        int h = static_cast<int>(img.shape(0)), w = static_cast<int>(img.shape(1));
        std::vector<uint8_t> pixels(img.data(), img.data() + img.size());
        absl::Status status = ApplyImageOpForTesting(name, args, &pixels, &w, &h);
        ThrowIfError(status);
        py::array_t<uint8_t> out({h, w, 3});
        std::memcpy(out.mutable_data(), pixels.data(), pixels.size());
        return out;
      },
      py::arg("name"), py::arg("image"), py::arg("args"),
      "Test hook: one native image operation on an HxWx3 uint8 array (parity tests).");
  m.def(
      "_augmix_for_testing",
      [](py::array_t<uint8_t, py::array::c_style | py::array::forcecast> img, bool v2,
         int interpolation, bool all_ops, float m0, float m1, const std::vector<float>& weights,
         const std::vector<std::vector<std::array<int, 3>>>& chains) {
        if (img.ndim() != 3 || img.shape(2) != 3) throw py::value_error("image must be HxWx3 uint8");
        const int h = static_cast<int>(img.shape(0)), w = static_cast<int>(img.shape(1));
        TransformStep s;
        s.kind = TransformStep::Kind::kAugMix;
        s.v2_magnitudes = v2;
        s.interpolation = static_cast<Interpolation>(interpolation);
        s.augmix_all_ops = all_ops;
        AugMixDraws draws;
        draws.m0 = m0;
        draws.m1 = m1;
        draws.weights = weights;
        for (const auto& chain : chains) {
          draws.chains.emplace_back();
          for (const auto& op : chain) draws.chains.back().push_back({op[0], op[1], op[2] != 0});
        }
        py::array_t<uint8_t> out({h, w, 3});
        std::memcpy(out.mutable_data(), img.data(), static_cast<size_t>(img.size()));
        AugmentScratch scratch;
        ThrowIfError(ApplyAugMixDraws(
            s, draws, scratch, RgbView{out.mutable_data(), w, h, static_cast<size_t>(w) * 3}));
        return out;
      },
      py::arg("image"), py::arg("v2"), py::arg("interpolation"), py::arg("all_ops"), py::arg("m0"),
      py::arg("m1"), py::arg("weights"), py::arg("chains"),
      "Test hook: AugMix with fixed draws (chains of (op index, bin, negated)) on an HxWx3 "
      "uint8 array (parity tests).");

  m.def(
      "choose_auto_threads",
      [](py::dict options) {
        LoaderOptions o = ParseOptions(options);
        absl::StatusOr<AutoThreads> plan;
        {
          py::gil_scoped_release release;
          plan = ChooseAutoThreads(o);
        }
        ThrowIfError(plan.status());
        py::dict d;
        d["decode_threads"] = plan->decode_threads;
        d["reader_threads"] = plan->reader_threads;
        d["usable_cpus"] = plan->usable_cpus;
        d["reserved_cpus"] = plan->reserved_cpus;
        d["note"] = plan->note;
        return d;
      },
      py::arg("options"),
      "The threads num_workers='auto' chooses for these loader options, and why (no loader).");
  // Rules the Python package asks for instead of keeping copies that could drift.
  m.def(
      "default_memory_budget",
      [](py::dict options) {
        // The slot-memory budget a loader with these options gets when max_memory is not given.
        const LoaderOptions o = ParseOptions(options);
        std::string note;
        const uint64_t bytes = DefaultMemoryBudget(
            ReadAvailableMemory(o.meminfo_path, o.cgroup_root, o.proc_self_cgroup), &note);
        return py::make_tuple(bytes, note);
      },
      py::arg("options"),
      "(bytes, note): csrc/common/cpu_budget.h's DefaultMemoryBudget for these loader options.");
  // The node as `ringloader doctor` and a rank's placement see it (numa/topology.h,
  // common/cpu_budget.h, io/reader.h); every path is a parameter so tests fake the trees.
  m.def(
      "numa_nodes",
      [](const std::string& sysfs_root) {
        absl::StatusOr<NumaTopology> t = NumaTopology::Read(sysfs_root);
        ThrowIfError(t.status());
        py::list nodes;
        for (const NumaNode& n : t->nodes()) nodes.append(py::make_tuple(n.id, FormatCpuList(n.cpus)));
        return nodes;
      },
      py::arg("sysfs_root") = "/sys", "[(node id, its CPU list '0-3,8-11')] from sysfs; [] without NUMA.");
  m.def(
      "pci_numa_node",
      [](const std::string& sysfs_root, const std::string& bus_id) {
        absl::StatusOr<NumaTopology> t = NumaTopology::Read(sysfs_root);
        ThrowIfError(t.status());
        return py::make_tuple(NormalizePciBusId(bus_id), t->NodeOfPciDevice(bus_id));
      },
      py::arg("sysfs_root"), py::arg("bus_id"),
      "(canonical bus id, NUMA node or -1 when unknown) of a PCI device such as a GPU.");
  m.def(
      "share_of_cpus",
      [](const std::string& cpus, int index, int count) {
        absl::StatusOr<std::vector<int>> list = ParseCpuList(cpus);
        ThrowIfError(list.status());
        return FormatCpuList(ShareOfCpus(*list, index, count));
      },
      py::arg("cpus"), py::arg("index"), py::arg("count"),
      "numa/topology.h's ShareOfCpus on a CPU list: part `index` of `count` (a rank's CPUs).");
  m.def(
      "cpu_quota",
      [](const std::string& cgroup_root, const std::string& proc_self_cgroup) {
        absl::StatusOr<CpuQuota> q = ReadCpuQuota(cgroup_root, proc_self_cgroup);
        ThrowIfError(q.status());
        return py::make_tuple(q->cpus, q->cpus > 0 ? RoundCpuQuota(q->cpus) : 0, q->source);
      },
      py::arg("cgroup_root") = "/sys/fs/cgroup", py::arg("proc_self_cgroup") = "/proc/self/cgroup",
      "(CPUs, rounded CPUs, where) of the cgroup CPU quota; CPUs 0 when there is none.");
  m.def(
      "available_memory",
      [](const std::string& meminfo, const std::string& cgroup_root, const std::string& proc_self_cgroup) {
        const AvailableMemory a = ReadAvailableMemory(meminfo, cgroup_root, proc_self_cgroup);
        return py::make_tuple(a.bytes, a.source);
      },
      py::arg("meminfo") = "/proc/meminfo", py::arg("cgroup_root") = "/sys/fs/cgroup",
      py::arg("proc_self_cgroup") = "/proc/self/cgroup",
      "(bytes, where) this process may still use: MemAvailable capped by the cgroup memory limit.");
  m.def(
      "io_uring_refusal",
      [] {
        std::string why;
        {
          py::gil_scoped_release release;
          absl::StatusOr<std::unique_ptr<Reader>> r = MakeUringReader(4);
          if (!r.ok()) why = std::string(r.status().message());
        }
        return why;
      },
      "Why io_uring_setup is refused here (seccomp, kernel), or '' when it works: the probe the "
      "readers' io='auto' fallback to pread makes.");
  m.def(
      "plan_threads",
      [](int usable, int training, const std::string& training_source, int fixed_readers) {
        // The thread rule for a share of CPUs (a rank's, on a machine several ranks share).
        CpuBudget budget;
        budget.affinity_cpus = std::max(1, usable);
        const ThreadPlan plan =
            PlanThreads(budget, TrainingThreads{training, training_source}, fixed_readers);
        py::dict d;
        d["decode_threads"] = plan.decode;
        d["reader_threads"] = plan.readers;
        d["usable_cpus"] = plan.usable;
        d["reserved_cpus"] = plan.reserved;
        d["reason"] = plan.reason;
        return d;
      },
      py::arg("usable"), py::arg("training"), py::arg("training_source"),
      py::arg("fixed_readers") = 0,
      "csrc/common/cpu_budget.h's PlanThreads for `usable` CPUs (training: the training loop's "
      "threads, -1 when not set explicitly).");
  m.def(
      "check_transform",
      [](py::list steps, size_t first) -> py::object {
        const std::string why = StageOrderError(ParseSteps(steps), first);
        return why.empty() ? py::none() : py::object(py::str(why));
      },
      py::arg("steps"), py::arg("first") = 0,
      "Why steps[first:] cannot follow steps[:first] in one native chain (the stage order the "
      "loader enforces), or None. Bad step dicts raise.");
  m.def(
      "fixed_size",
      [](py::list steps) {
        absl::StatusOr<TransformPipeline> p =
            TransformPipeline::Create(ParseSteps(steps), DType::kFloat32, Layout::kCHW, true);
        ThrowIfError(p.status());
        return p->fixed_size();
      },
      py::arg("steps"),
      "True when the chain's output size does not depend on the input image (samples can be "
      "batched). Invalid chains raise ValueError.");
  m.def("row_key", &RowKey, py::arg("index"), py::arg("position"),
        "The seed key of dataset index `index` at `position` of an epoch's order.");
  m.def("sample_seed", &SampleSeed, py::arg("seed"), py::arg("epoch"), py::arg("key"),
        "The augmentation seed of the sample with key `key` (row_key) in `epoch` of a loader "
        "seeded with `seed`.");
  m.def("mix64", &Mix64, py::arg("x"), "splitmix64's finaliser, which every native seed goes through.");
  m.def(
      "fast_decode_level", [](const py::handle& value) { return FastDecodeName(FastDecodeArg(value)); },
      py::arg("value"),
      "The fast_decode level `value` names: 'off' (False), 'scale' (True) or 'fastest'; "
      "ValueError for anything else.");
  m.def(
      "judge_loader",
      [](double seconds, double read_busy, double decode_busy, int reader_threads, int decode_threads,
         double consumer_wait, bool next_epoch_beside, int64_t errors, int64_t batches,
         std::string last_error, int hardware_threads, std::string knobs) {
        VerdictInput in;
        in.seconds = seconds;
        in.read_busy = read_busy;
        in.decode_busy = decode_busy;
        in.read_threads = reader_threads;
        in.decode_threads = decode_threads;
        in.consumer_wait = consumer_wait;
        in.next_epoch_beside = next_epoch_beside;
        in.errors = errors;
        in.batches = batches;
        in.last_error = std::move(last_error);
        in.hardware_threads = hardware_threads;
        in.knobs = std::move(knobs);
        const LoaderVerdict v = JudgeLoader(in);
        py::dict out;
        out["bottleneck"] = v.bottleneck;
        out["label"] = v.label;
        out["evidence"] = v.evidence;
        out["read_busy"] = v.read_share;
        out["decode_busy"] = v.decode_share;
        out["consumer_wait_fraction"] = v.wait_fraction;
        return out;
      },
      py::kw_only(), py::arg("seconds"), py::arg("read_busy"), py::arg("decode_busy"),
      py::arg("reader_threads"), py::arg("decode_threads"), py::arg("consumer_wait"),
      py::arg("next_epoch_beside"), py::arg("errors"), py::arg("batches"), py::arg("last_error"),
      py::arg("hardware_threads"), py::arg("knobs"),
      "Which stage limited the loader over a window of `seconds` (pipeline/verdict.h, the "
      "native benchmark's rule): a dict of bottleneck, label, evidence and the shares compared "
      "(read_busy, decode_busy per thread; consumer_wait_fraction).");
  {
    py::tuple extensions(ImageExtensions().size());
    for (size_t i = 0; i < ImageExtensions().size(); ++i) extensions[i] = py::str(ImageExtensions()[i]);
    m.attr("IMG_EXTENSIONS") = extensions;
  }
  m.def("scan_image_folder", &ScanFolder, py::arg("root"),
        "(classes, path bytes, path ends, labels) of an image folder in torchvision's order: every path in "
        "one uint8 array (path i is bytes [ends[i-1], ends[i])), int64 ends, int32 labels.");
  m.def("read_file_list", &FileList, py::arg("list_path"),
        "(paths, labels) of a \"<path> <label>\" file list; relative paths against its folder.");
  m.def(
      "parse_tar_header",
      [](py::bytes block) {
        const std::string bytes = block;
        if (bytes.size() != kTarBlock) {
          throw py::value_error(absl::StrCat("a tar header block is ", kTarBlock, " bytes, got ", bytes.size()));
        }
        absl::StatusOr<TarHeader> header = ParseTarHeader(reinterpret_cast<const uint8_t*>(bytes.data()));
        if (!header.ok()) throw py::value_error(std::string(header.status().message()));
        return py::make_tuple(py::bytes(header->name), header->size, header->regular());
      },
      py::arg("block"),
      "(name as bytes, size, regular file) of a 512-byte tar header block; ValueError when it is none "
      "(bad checksum or size field).");
  m.def(
      "split_member_name",
      [](const std::string& name) -> py::object {
        std::string key, ext;
        if (!SplitMemberName(name, &key, &ext)) return py::none();
        return py::make_tuple(key, ext);
      },
      py::arg("name"),
      "(key, lower-case extension) of a tar member as WebDataset shards group them; None for a name "
      "that is no sample's (no extension, hidden, or a top-level __info__-style entry).");
  m.def("scan_webdataset_shard", &ScanShard, py::arg("url"),
        py::arg("image_exts") = std::vector<std::string>{"jpg", "jpeg", "png", "webp"}, py::arg("label_key") = "cls",
        py::arg("json_field") = "label", py::arg("pipe") = false,
        "Index of a WebDataset tar shard: a local path, or with pipe=True a pipe:COMMAND URL whose "
        "command is run: dict of keys, members, offsets, lengths, labels, errors ('' = ok), bytes, error "
        "('' = scanned to its end).");
  py::class_<FetchCancel>(m, "FetchCancel", "Stops the fetch_shards call it is given to, from another thread.")
      .def(py::init<>())
      .def("set", [](FetchCancel& c) { c.flag->store(true); });
  py::class_<PyBackgroundFetch>(m, "BackgroundFetch",
                                "Remote shards downloading into the cache folder on a native thread, in the "
                                "order given; the loader's reads of their entries wait for them to land.")
      .def(py::init([](std::vector<std::string> urls, std::string cache_dir, int64_t cache_limit,
                       const py::dict& settings,
                       std::optional<std::vector<std::pair<int64_t, std::optional<std::string>>>> expected) {
             std::vector<ExpectedCopy> want;
             if (expected) {
               if (expected->size() != urls.size()) {
                 throw py::value_error("BackgroundFetch: expected must have one entry per url");
               }
               for (auto& [size, etag] : *expected) want.push_back(ExpectedCopy{size, etag});
             }
             RemoteOptions options = RemoteOptionsFrom(settings);
             auto out = std::make_unique<PyBackgroundFetch>();
             out->fetch = std::make_unique<BackgroundFetch>(std::move(urls), std::move(want), std::move(cache_dir),
                                                            cache_limit, std::move(options));
             return out;
           }),
           py::arg("urls"), py::arg("cache_dir"), py::arg("cache_limit") = 0, py::arg("settings") = py::dict(),
           py::arg("expected") = py::none())
      .def("wait",
           [](PyBackgroundFetch& f) {
             if (!f.fetch) throw py::value_error("BackgroundFetch is closed");
             if (getpid() != f.pid) {
               throw std::runtime_error("BackgroundFetch: its downloads run in the parent process");
             }
             std::vector<absl::StatusOr<CachedShard>> got;
             {
               py::gil_scoped_release release;
               got = f.fetch->Wait();
             }
             return CachedShardDicts(got);
           },
           "Blocks until every url landed or failed: one dict per url, as fetch_shards.")
      .def("finished", [](const PyBackgroundFetch& f) { return f.fetch ? f.fetch->finished() : 0; },
           "Urls landed or failed so far.")
      .def("close", &PyBackgroundFetch::Close, "Cancels the downloads still running and joins the thread.");
  m.def(
      "shard_cache_entry_path",
      [](const std::string& cache_dir, const std::string& url) {
        return ShardCache(cache_dir, 0, {}).EntryPath(url);
      },
      py::arg("cache_dir"), py::arg("url"),
      "Where url's shard lives in the cache folder (whether it is there or not).");
  m.def(
      "shard_cache_revalidate",
      [](const std::string& url, const std::string& cache_dir, const py::dict& settings,
         std::optional<FetchCancel> cancel) {
        RemoteOptions options = RemoteOptionsFrom(settings);
        absl::StatusOr<bool> removed;
        {
          py::gil_scoped_release release;
          std::shared_ptr<std::atomic<bool>> flag = cancel ? cancel->flag : nullptr;
          removed = ShardCache(cache_dir, 0, std::move(options)).Revalidate(url, flag.get());
        }
        if (!removed.ok()) throw std::runtime_error(std::string(removed.status().message()));
        return *removed;
      },
      py::arg("url"), py::arg("cache_dir"), py::arg("settings"), py::arg("cancel") = py::none(),
      "Asks the server whether url's cache entry is its object (size and ETag); removes it and "
      "returns True when not (a copy cut short, or a changed object).");
  m.def("shard_cache_entry_ready", &CacheEntryReady, py::arg("entry"), py::arg("size"),
        "True when the cache entry is there, of size bytes (-1: any), and verified by this process "
        "and unchanged since (else it goes through the cache again, which checks it); marks it used.");
  py::class_<PyBackgroundRanges>(m, "BackgroundRanges",
                                 "Byte ranges of remote shards fetched into sparse copies on a native thread while "
                                 "the epoch reads; the loader's reads of each copy's cache entry wait for its "
                                 "ranges to land.")
      .def(py::init([](const std::vector<std::tuple<std::string, std::string, int64_t, std::string,
                                                    std::vector<int64_t>, std::vector<int64_t>, std::string>>& wanted,
                       int64_t gap, const py::dict& settings) {
             RemoteOptions options = RemoteOptionsFrom(settings);
             std::vector<RangedCopy> copies;
             for (const auto& [url, path, size, etag, offsets, lengths, entry] : wanted) {
               if (offsets.size() != lengths.size()) {
                 throw py::value_error(absl::StrCat("BackgroundRanges: offsets and lengths of ", url,
                                                    " differ in length"));
               }
               std::vector<std::pair<int64_t, int64_t>> ranges;
               for (size_t i = 0; i < offsets.size(); ++i) ranges.emplace_back(offsets[i], lengths[i]);
               copies.push_back(RangedCopy{url, path, size, etag, MergeRanges(std::move(ranges), gap), entry});
             }
             auto out = std::make_unique<PyBackgroundRanges>();
             py::gil_scoped_release release;
             out->fetch = std::make_unique<BackgroundRanges>(std::move(copies), std::move(options));
             return out;
           }),
           py::arg("copies"), py::arg("gap") = 0, py::arg("settings") = py::dict(),
           "copies: (url, path, size, etag ('' unchecked), offsets, lengths, cache entry ('' none)) in the order "
           "the epoch reads them; ranges closer than gap bytes are fetched as one, max_connections at once.")
      .def("wait",
           [](PyBackgroundRanges& f) {
             if (!f.fetch) throw py::value_error("BackgroundRanges is closed");
             if (getpid() != f.pid) {
               throw std::runtime_error("BackgroundRanges: its transfers run in the parent process");
             }
             std::vector<absl::Status> got;
             {
               py::gil_scoped_release release;
               got = f.fetch->Wait();
             }
             py::list out;
             for (const absl::Status& status : got) {
               py::dict d;
               if (!status.ok()) {
                 d["error"] = std::string(status.message());
                 d["code"] = absl::AsciiStrToLower(absl::StatusCodeToString(status.code()));
               }
               out.append(d);
             }
             return out;
           },
           "Blocks until every copy landed or failed: one dict per copy, {} or {error, code}.")
      .def("finished", [](const PyBackgroundRanges& f) { return f.fetch ? f.fetch->finished() : 0; },
           "Copies whose ranges all ended so far.")
      .def("totals",
           [](const PyBackgroundRanges& f) {
             const RangeFetchResult t = f.fetch ? f.fetch->totals() : RangeFetchResult{};
             return py::make_tuple(t.requests, t.bytes);
           },
           "(requests, bytes) of this fetch so far.")
      .def("close", &PyBackgroundRanges::Close, "Cancels the transfers still running and joins the thread.");
  m.def(
      "choose_range_reads",
      [](const std::string& url, int64_t shard_bytes, std::vector<int64_t> offsets, std::vector<int64_t> lengths,
         int64_t gap, const py::dict& settings, std::optional<std::pair<double, double>> link) {
        if (offsets.size() != lengths.size()) {
          throw py::value_error("choose_range_reads: offsets and lengths differ in length");
        }
        RemoteOptions options = RemoteOptionsFrom(settings);
        std::vector<std::pair<int64_t, int64_t>> ranges;
        int64_t wanted = 0;
        for (size_t i = 0; i < offsets.size(); ++i) {
          ranges.emplace_back(offsets[i], lengths[i]);
          wanted += std::max<int64_t>(0, lengths[i]);
        }
        const int64_t requests = static_cast<int64_t>(MergeRanges(std::move(ranges), gap).size());
        LinkEstimate estimate = MeasuredLink(url, options);
        if (link) std::tie(estimate.latency_s, estimate.bytes_per_s) = *link;
        const RangeReadChoice choice =
            ChooseRangeReads(shard_bytes, wanted, requests, options.max_connections, estimate);
        py::dict d;
        d["by_range"] = choice.by_range;
        d["whole_s"] = choice.whole_s;
        d["ranges_s"] = choice.ranges_s;
        d["requests"] = requests;
        d["wanted_bytes"] = wanted;
        d["link"] = LinkEstimateDict(estimate);
        return d;
      },
      py::arg("url"), py::arg("shard_bytes"), py::arg("offsets"), py::arg("lengths"), py::arg("gap") = 0,
      py::arg("settings") = py::dict(), py::arg("link") = py::none(),
      "Whether the members at offsets/lengths of the remote shard url (shard_bytes long) cost less by "
      "range requests (merged within gap bytes) than a whole download, by this process's estimate of "
      "url's host (or link=(latency_s, bytes_per_s)): {by_range, whole_s, ranges_s, requests, "
      "wanted_bytes, link}.");
  m.def(
      "link_estimate",
      [](const std::string& url, const py::dict& settings) {
        return LinkEstimateDict(MeasuredLink(url, RemoteOptionsFrom(settings)));
      },
      py::arg("url"), py::arg("settings") = py::dict(),
      "This process's estimate of the link to url's host: {host, latency_s, bytes_per_s, latency_samples, "
      "rate_samples} (samples 0: the prior).");
  m.def("downloads_in_flight", [] { return DescribeTransfersInFlight(); },
        "One line naming the process's slowest downloads not landed yet (URL, bytes so far of "
        "the expected, rate now, seconds since the first request), '' when none.");
  m.def("redirect_shard", &RedirectShard, py::arg("entry"), py::arg("copy"),
        "Reads of the cache entry open copy instead ('' lifts the redirect).");
  m.def("fetch_shards", &FetchShards, py::arg("urls"), py::arg("cache_dir"), py::arg("cache_limit") = 0,
        py::arg("settings") = py::dict(), py::arg("cancel") = py::none(),
        "Remote shards (http(s)://, s3://) as complete files in the cache folder, downloaded when missing, "
        "then least recently used entries evicted to cache_limit bytes (0: none): one dict per url, "
        "{path, size, etag, downloaded, attempts} or {error, code}.");
}
