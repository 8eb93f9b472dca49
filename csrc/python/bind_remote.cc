// Remote shards: the node-local cache, background downloads, range reads, link estimates.

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

/// Whole shards downloaded into the cache: fetch_shards, its background form and cancel, and
/// the downloads in flight.
void BindShardDownloads(py::module_& m) {
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
  m.def("downloads_in_flight", [] { return DescribeTransfersInFlight(); },
        "One line naming the process's slowest downloads not landed yet (URL, bytes so far of "
        "the expected, rate now, seconds since the first request), '' when none.");
  m.def("fetch_shards", &FetchShards, py::arg("urls"), py::arg("cache_dir"), py::arg("cache_limit") = 0,
        py::arg("settings") = py::dict(), py::arg("cancel") = py::none(),
        "Remote shards (http(s)://, s3://) as complete files in the cache folder, downloaded when missing, "
        "then least recently used entries evicted to cache_limit bytes (0: none): one dict per url, "
        "{path, size, etag, downloaded, attempts} or {error, code}.");
}

/// The shard cache's entries: where one lives, whether it is ready, revalidation, redirects.
void BindShardCache(py::module_& m) {
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
  m.def("redirect_shard", &RedirectShard, py::arg("entry"), py::arg("copy"),
        "Reads of the cache entry open copy instead ('' lifts the redirect).");
}

/// Members read by byte range into sparse copies, the choice between ranges and a whole
/// download, and the per-host link estimate that choice uses.
void BindRangeReads(py::module_& m) {
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
}

}  // namespace

void BindRemote(py::module_& m) {
  BindShardDownloads(m);
  BindShardCache(m);
  BindRangeReads(m);
}

}  // namespace ringloader
