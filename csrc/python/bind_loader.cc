// `_C.Loader` (the native loader: epochs, batches, views, stats, deferred rows) and `_C.Tensor`.

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
#include "pipeline/loader_factory.h"
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
#include "python/bind_tensor.h"

namespace py = pybind11;

namespace ringloader {
namespace {

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
      internal::HostFiles host;
      LoaderOptions parsed = ParseOptions(options, &host);
      absl::StatusOr<std::unique_ptr<Loader>> loader =
          LoaderFactory::CreateFromColumns(std::move(columns), std::move(parsed), host);
      ThrowIfError(loader.status());
      loader_ = std::move(*loader);
      return;
    }
    std::vector<Sample> samples = SamplesFrom(paths);
    if (labels.ndim() != 1 || static_cast<size_t>(labels.size()) != samples.size()) {
      throw py::value_error("paths and labels differ in length");
    }
    for (size_t i = 0; i < samples.size(); ++i) samples[i].label = labels.data()[i];
    // Each column, when given, has one entry per path; they are taken in this order.
    TakeByteRanges(offsets, lengths, &samples);
    TakeSourceFlags(pipes, tar_members, &samples);
    TakeStreamEnds(stream_ends, &samples);
    TakeErrors(errors, &samples);
    if (py::isinstance<py::tuple>(memory)) {
      TakeMemoryColumns(py::reinterpret_borrow<py::tuple>(memory), &samples);
    } else if (!memory.is_none()) {
      TakeMemory(memory, &samples);
    }
    if (!more_files.is_none()) TakeMoreFiles(more_files, &samples);
    internal::HostFiles host;
    LoaderOptions parsed = ParseOptions(options, &host);
    absl::StatusOr<std::unique_ptr<Loader>> loader = LoaderFactory::Create(std::move(samples), std::move(parsed), host);
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

  // An int64 column of the constructor: one entry per path.
  static std::vector<int64_t> IntColumn(const py::object& values, const char* name, size_t n) {
    auto array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(values);
    if (!array) {
      PyErr_Clear();
      throw py::type_error(absl::StrCat(name, " must be a sequence of integers (int64)"));
    }
    if (array.ndim() != 1 || static_cast<size_t>(array.size()) != n) {
      throw py::value_error(absl::StrCat(name, " has ", array.size(), " entries; expected one per path (",
                                         n, ")"));
    }
    return ToVector(array);
  }

  // A bool column of the constructor: one entry per path.
  static py::array_t<bool, py::array::c_style | py::array::forcecast> BoolColumn(const py::object& values,
                                                                                const char* name, size_t n) {
    auto array = py::array_t<bool, py::array::c_style | py::array::forcecast>::ensure(values);
    if (!array || array.ndim() != 1 || static_cast<size_t>(array.size()) != n) {
      PyErr_Clear();
      throw py::value_error(absl::StrCat(name, " must be a sequence of bool with one entry per path (", n, ")"));
    }
    return array;
  }

  // Byte ranges (members of shards): each sample's offset and length (-1: to the file's end).
  static void TakeByteRanges(const py::object& offsets, const py::object& lengths, std::vector<Sample>* samples) {
    if (!offsets.is_none()) {
      std::vector<int64_t> v = IntColumn(offsets, "offsets", samples->size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < 0) throw py::value_error(absl::StrCat("offsets[", i, "] is negative: ", v[i]));
        (*samples)[i].offset = static_cast<uint64_t>(v[i]);
      }
    }
    if (!lengths.is_none()) {
      std::vector<int64_t> v = IntColumn(lengths, "lengths", samples->size());
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] < -1) throw py::value_error(absl::StrCat("lengths[", i, "] must be >= 0 or -1 (whole file), got ", v[i]));
        (*samples)[i].length = v[i];
      }
    }
  }

  static void TakeSourceFlags(const py::object& pipes, const py::object& tar_members, std::vector<Sample>* samples) {
    if (!pipes.is_none()) {
      // bool per sample: True only for members of a pipe: stream whose command the user wrote. A
      // path is never run because of its spelling.
      auto array = BoolColumn(pipes, "pipes", samples->size());
      for (size_t i = 0; i < samples->size(); ++i) {
        if (array.data()[i]) (*samples)[i].source = SourceKind::kPipe;
      }
    }
    if (!tar_members.is_none()) {
      // bool per sample: True for a member's data in a tar shard (its header is checked where a
      // stream passes it; see Sample::tar_member).
      auto array = BoolColumn(tar_members, "tar_members", samples->size());
      for (size_t i = 0; i < samples->size(); ++i) (*samples)[i].tar_member = array.data()[i];
    }
  }

  static void TakeStreamEnds(const py::object& stream_ends, std::vector<Sample>* samples) {
    if (stream_ends.is_none()) return;
    // int per sample: 0, or a pipe: stream's length when indexed (see Sample::stream_end).
    std::vector<int64_t> v = IntColumn(stream_ends, "stream_ends", samples->size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < 0) throw py::value_error(absl::StrCat("stream_ends[", i, "] is negative: ", v[i]));
      (*samples)[i].stream_end = static_cast<uint64_t>(v[i]);
    }
  }

  static void TakeErrors(const py::object& errors, std::vector<Sample>* samples) {
    if (errors.is_none()) return;
    // str per sample: '' (or None) = ok, anything else is why the sample is bad.
    if (!py::isinstance<py::sequence>(errors) || py::isinstance<py::str>(errors)) {
      throw py::type_error("errors must be a list of str ('' = ok), one per path");
    }
    py::sequence v = errors;
    if (static_cast<size_t>(py::len(v)) != samples->size()) {
      throw py::value_error(absl::StrCat("errors has ", py::len(v), " entries; expected one per path (",
                                         samples->size(), ")"));
    }
    for (size_t i = 0; i < samples->size(); ++i) {
      py::object item = v[i];
      if (item.is_none()) continue;
      if (!py::isinstance<py::str>(item)) {
        throw py::type_error(absl::StrCat("errors[", i, "] must be a str ('' = ok) or None"));
      }
      (*samples)[i].error = item.cast<std::string>();
    }
  }

  // A bytes-like object (or None: read `path`) per sample: encoded images held in memory.
  // Each is held, buffer exported, for the loader's lifetime, so its bytes stay where they are.
  void TakeMemory(const py::object& memory, std::vector<Sample>* samples) {
    py::sequence v = memory;
    if (static_cast<size_t>(py::len(v)) != samples->size()) {
      throw py::value_error(absl::StrCat("memory has ", py::len(v), " entries; expected one per path (",
                                         samples->size(), ")"));
    }
    for (size_t i = 0; i < samples->size(); ++i) {
      py::object item = v[i];
      if (item.is_none()) continue;
      if (!PyObject_CheckBuffer(item.ptr())) {
        throw py::type_error(absl::StrCat("memory[", i, "] must be bytes-like or None"));
      }
      auto view = std::make_unique<py::buffer_info>(py::buffer(item).request());
      Sample& sample = (*samples)[i];
      sample.source = SourceKind::kMemory;
      sample.memory = static_cast<const uint8_t*>(view->ptr);
      sample.length = view->size * view->itemsize;
      memory_.push_back(std::move(view));
    }
  }

  // Per sample, a list of its files after its own (Sample::more_files): a str (a path) or a
  // (description, bytes-like) pair held in memory, exported like `memory` above.
  void TakeMoreFiles(const py::object& more_files, std::vector<Sample>* samples) {
    py::sequence v = more_files;
    if (static_cast<size_t>(py::len(v)) != samples->size()) {
      throw py::value_error(absl::StrCat("more_files has ", py::len(v),
                                         " entries; expected one per path (", samples->size(), ")"));
    }
    for (size_t i = 0; i < samples->size(); ++i) {
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
        (*samples)[i].more_files.push_back(std::move(file));
      }
    }
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

}  // namespace

void BindLoader(py::module_& m) {
  m.attr("GEOMETRY_FIELDS") = py::int_(static_cast<int>(kGeometryFields));
  // The record's field names in order (views.h GeometryField), so Python reads fields by name.
  m.attr("GEOMETRY_LAYOUT") = py::make_tuple(
      "src_w", "src_h", "left", "top", "right", "bottom", "out_w", "out_h", "hflip", "vflip",
      "key_dx", "key_dy", "draw_seed", "angle", "translate_x", "translate_y", "scale", "shear_x",
      "shear_y");
  static_assert(kGeoShearY + 1 == kGeometryFields, "GEOMETRY_LAYOUT names every field");
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
}

}  // namespace ringloader
