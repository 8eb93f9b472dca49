// Sample tables from the file system: image folders, file lists, tar shards' indexes.

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
                  const std::string& json_field, bool pipe, bool video_members) {
  WebDatasetOptions options;
  options.video_members = video_members;
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

}  // namespace

void BindScans(py::module_& m) {
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
        py::arg("json_field") = "label", py::arg("pipe") = false, py::arg("video_members") = false,
        "Index of a WebDataset tar shard: a local path, or with pipe=True a pipe:COMMAND URL whose "
        "command is run (video_members: image_exts are video extensions, rl.VideoShards' index): dict of keys, members, offsets, lengths, labels, errors ('' = ok), bytes, error "
        "('' = scanned to its end).");
}

}  // namespace ringloader
