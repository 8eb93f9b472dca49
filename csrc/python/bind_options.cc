// Loader options, transform steps and views from the dicts the Python package builds
// (bind_options.h).

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
#include "python/bind_options.h"

namespace py = pybind11;

namespace ringloader {
namespace {

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
  py::object kind_value = Pop(step, "kind");
  if (!kind_value) throw py::value_error("transform step without a 'kind'");
  const std::string kind = kind_value.cast<std::string>();
  const StepKindInfo* info = KindFromKey(kind);
  if (info == nullptr) throw py::value_error(absl::StrCat("unknown transform step '", kind, "'"));
  TransformStep s(info->kind);
  for (const auto& item : step) {
    const std::string name = py::str(item.first).cast<std::string>();
    if (!info->Takes(name)) {
      // A key of another kind, or a misspelt one, would otherwise be dropped without a word.
      throw py::type_error(absl::StrCat("transform step '", kind, "' (", info->name, ") has no parameter '",
                                        name, "'; its parameters: ", info->ParamList()));
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

}  // namespace

std::vector<TransformStep> ParseSteps(py::handle steps) {
  std::vector<TransformStep> out;
  for (py::handle step : steps) out.push_back(ParseStep(py::reinterpret_borrow<py::dict>(step)));
  return out;
}

namespace {

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

}  // namespace

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

namespace {

// Every option that is a plain value, declared once: its key in the dict the package builds and
// the LoaderOptions field it sets (the options with a parse of their own follow in ParseOptions).
template <auto Field>
void TakeField(py::dict& d, const char* key, LoaderOptions& o) {
  Take(d, key, &(o.*Field));
}
template <auto Field>
void TakeNuma(py::dict& d, const char* key, LoaderOptions& o) {
  Take(d, key, &(o.numa.*Field));
}
struct PlainOption {
  const char* key;
  void (*take)(py::dict&, const char*, LoaderOptions&);
};
constexpr PlainOption kPlainOptions[] = {
    {"batch_size", &TakeField<&LoaderOptions::batch_size>},
    {"num_workers", &TakeField<&LoaderOptions::num_workers>},
    {"reader_threads", &TakeField<&LoaderOptions::reader_threads>},
    {"io_depth", &TakeField<&LoaderOptions::io_depth>},
    {"prefetch_batches", &TakeField<&LoaderOptions::prefetch_batches>},
    {"max_slots", &TakeField<&LoaderOptions::max_slots>},
    {"auto_threads", &TakeField<&LoaderOptions::auto_threads>},
    {"training_threads", &TakeField<&LoaderOptions::training_threads>},
    {"training_threads_source", &TakeField<&LoaderOptions::training_threads_source>},
    {"auto_prefetch", &TakeField<&LoaderOptions::auto_prefetch>},
    {"max_memory", &TakeField<&LoaderOptions::max_memory>},
    {"drop_last", &TakeField<&LoaderOptions::drop_last>},
    {"shuffle", &TakeField<&LoaderOptions::shuffle>},
    {"seed", &TakeField<&LoaderOptions::seed>},
    {"variable_size", &TakeField<&LoaderOptions::variable_size>},
    {"rank", &TakeField<&LoaderOptions::rank>},
    {"world_size", &TakeField<&LoaderOptions::world_size>},
    {"max_image_pixels", &TakeField<&LoaderOptions::max_image_pixels>},
    {"max_file_bytes", &TakeField<&LoaderOptions::max_file_bytes>},
    {"stall_seconds", &TakeField<&LoaderOptions::stall_seconds>},
    {"strict_decode", &TakeField<&LoaderOptions::strict_decode>},
    {"exif_transpose", &TakeField<&LoaderOptions::exif_transpose>},
    {"pin_memory", &TakeField<&LoaderOptions::pin_memory>},
    {"device", &TakeField<&LoaderOptions::device>},
    {"numa_gpu_bus_id", &TakeNuma<&NumaOption::gpu_bus_id>},  // the rank's own GPU (_node.rank_gpu)
    {"numa_share_index", &TakeNuma<&NumaOption::share_index>},  // the rank's disjoint CPU share
    {"numa_share_count", &TakeNuma<&NumaOption::share_count>},
};

}  // namespace

LoaderOptions ParseOptions(py::dict d, internal::HostFiles* host) {
  // A real copy (py::dict(d) would alias a dict argument): keys are removed as they are read.
  d = py::reinterpret_steal<py::dict>(PyDict_Copy(d.ptr()));
  LoaderOptions o;
  for (const PlainOption& option : kPlainOptions) option.take(d, option.key, o);
  // Tests point the machine's files at fake trees (common/host_files.h); a key not given keeps
  // the real file.
  *host = internal::HostFiles();
  for (auto [key, field] : {std::pair{"numa_sysfs_root", &internal::HostFiles::sysfs_root},
                            std::pair{"cgroup_root", &internal::HostFiles::cgroup_root},
                            std::pair{"proc_self_cgroup", &internal::HostFiles::proc_self_cgroup},
                            std::pair{"meminfo_path", &internal::HostFiles::meminfo_path}}) {
    Take(d, key, &(host->*field));
  }
  if (d.contains("fast_decode")) {
    const FastDecode level = FastDecodeArg(d["fast_decode"]);
    o.fast_decode = level != FastDecode::kOff;
    o.fast_decode_fastest = level == FastDecode::kFastest;
    PyDict_DelItemString(d.ptr(), "fast_decode");
  }
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

}  // namespace ringloader
