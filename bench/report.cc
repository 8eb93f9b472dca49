// ringloader-bench: the verdict, the printed report and its --json form.
#include "report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "pipeline/verdict.h"

namespace ringloader::bench {

Verdict Judge(const Config& cfg, const Measurement& m) {
  if (cfg.preset != Preset::kRead && cfg.preset != Preset::kDecode) {
    // The loader presets: the core's rule (pipeline/verdict.h), which `ringloader compare`
    // applies to a Python loader's stats as well.
    VerdictInput in;
    in.seconds = m.seconds;
    in.read_busy = m.read_busy;
    in.decode_busy = m.decode_busy;
    in.read_threads = m.read_threads;
    in.decode_threads = m.decode_threads;
    in.consumer_wait = m.consumer_wait;
    in.next_epoch_beside = m.epochs_in_flight > 1;
    in.errors = m.errors;
    in.batches = m.batches;
    in.last_error = m.last_error;
    in.hardware_threads = HardwareThreads();
    LoaderVerdict lv = JudgeLoader(in);
    return Verdict{std::move(lv.bottleneck), std::move(lv.label), std::move(lv.evidence)};
  }
  // The component presets count one error per failed file, and measure one stage each.
  const double window = std::max(1e-9, m.seconds);
  const double read_util = Share(m.read_busy, window, m.read_threads);
  const double decode_util = Share(m.decode_busy, window, m.decode_threads);
  Verdict v;
  auto set = [&v](const char* bottleneck, const char* label, std::string evidence) {
    v.bottleneck = bottleneck;
    v.label = label;
    v.evidence = std::move(evidence);
  };
  if (m.errors > 0 && m.errors >= m.images) {
    set("errors", "error-bound",
        absl::StrFormat("%d of %d files failed (last: %s): the rates mostly measure failing samples, "
                        "not the pipeline; fix or filter the data set first",
                        m.errors, m.errors + m.images, m.last_error));
    return v;
  }
  if (cfg.preset == Preset::kRead) {
    set("io", "I/O-bound",
        absl::StrFormat("the read preset does nothing but read: %.0f%% of the %d reader threads' "
                        "time was spent opening, submitting and reaping",
                        100 * read_util, m.read_threads));
    return v;
  }
  if (decode_util >= 0.5) {
    set("decode", "decode-bound",
        absl::StrFormat("threads spent %.0f%% of their time decoding and %.0f%% waiting for "
                        "reads", 100 * decode_util, 100 * read_util));
  } else {
    set("io", "I/O-bound",
        absl::StrFormat("threads spent %.0f%% of their time waiting for reads and only %.0f%% "
                        "decoding", 100 * read_util, 100 * decode_util));
  }
  return v;
}

namespace {

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

// Builds one JSON object, fields in insertion order.
class JsonObject {
 public:
  JsonObject& Add(absl::string_view key, const std::string& raw_json) {
    fields_.push_back(absl::StrCat(JsonString(key), ": ", raw_json));
    return *this;
  }
  JsonObject& Str(absl::string_view key, absl::string_view v) { return Add(key, JsonString(v)); }
  JsonObject& Num(absl::string_view key, double v) { return Add(key, JsonNumber(v)); }
  JsonObject& Int(absl::string_view key, int64_t v) { return Add(key, absl::StrCat(v)); }
  JsonObject& Bool(absl::string_view key, bool v) { return Add(key, v ? "true" : "false"); }
  std::string Render(int indent = 0) const {
    const std::string pad(static_cast<size_t>(indent + 2), ' ');
    std::string out = "{\n";
    for (size_t i = 0; i < fields_.size(); ++i) {
      absl::StrAppend(&out, pad, fields_[i], i + 1 < fields_.size() ? ",\n" : "\n");
    }
    return absl::StrCat(out, std::string(static_cast<size_t>(indent), ' '), "}");
  }

 private:
  std::vector<std::string> fields_;
};

}  // namespace

std::string RenderJson(const Report& r) {
  const Config& c = r.cfg;
  const Measurement& m = r.m;
  const double window = std::max(1e-9, m.seconds);
  JsonObject dataset;
  dataset.Str("root", r.ds.root)
      .Str("source", r.ds.source)
      .Int("images", static_cast<int64_t>(r.ds.samples.size()))
      .Int("classes", static_cast<int64_t>(r.ds.classes.size()))
      .Int("bytes", r.ds.total_bytes);
  JsonObject config;
  config.Str("preset", PresetName(c.preset))
      .Str("transform", m.transform)
      .Int("batch_size", c.batch_size)
      .Int("decode_threads", c.decode_threads)
      .Int("reader_threads", c.reader_threads)
      .Int("io_depth", c.io_depth)
      .Int("queue_depth", c.queue_depth)
      .Str("io", IoName(c.io))
      .Int("epochs", c.epochs)
      .Num("duration_s", c.duration)
      .Bool("overlap_epochs", c.overlap_epochs)
      .Bool("timeline", c.timeline)
      .Int("warmup_batches", c.warmup)
      .Bool("shuffle", c.shuffle)
      .Str("seed", absl::StrCat(c.seed))
      .Num("consumer_ms", c.consumer_ms)
      .Str("device", c.device)
      .Int("hardware_threads", HardwareThreads());
  JsonObject io;
  io.Str("backend", m.io_backend).Str("note", m.io_note);
  JsonObject throughput;
  throughput.Int("images", m.images)
      .Int("batches", m.batches)
      .Int("bytes", m.bytes)
      .Num("seconds", m.seconds)
      .Num("images_per_s", m.images / window)
      .Num("mb_per_s", m.bytes / window / 1e6)
      .Int("errors", m.errors)
      .Str("last_error", m.last_error);
  JsonObject stages;
  stages.Num("read_busy_s", m.read_busy)
      .Num("decode_busy_s", m.decode_busy)
      .Num("consumer_wait_s", m.consumer_wait)
      .Num("read_utilization", Share(m.read_busy, window, ReadRunning(m)))
      .Num("decode_utilization", Share(m.decode_busy, window, DecodeRunning(m)))
      .Int("read_threads_running", ReadRunning(m))
      .Int("decode_threads_running", DecodeRunning(m))
      .Num("consumer_wait_fraction", m.consumer_wait / window)
      .Int("device_bytes", m.device_bytes)
      .Num("device_copy_busy_s", m.device_copy_busy);
  std::string latency = "null";
  if (!m.latency_ms.empty()) {
    JsonObject l;
    l.Int("batches", static_cast<int64_t>(m.latency_ms.size()))
        .Num("p50", Percentile(m.latency_ms, 0.50))
        .Num("p99", Percentile(m.latency_ms, 0.99))
        .Num("max", Percentile(m.latency_ms, 1.0))
        .Num("interval_p50", Percentile(m.interval_ms, 0.50))
        .Num("interval_p99", Percentile(m.interval_ms, 0.99));
    latency = l.Render(2);
  }
  std::string epochs = "null";
  if (!m.epoch_waits_ms.empty()) {
    std::vector<std::string> items;
    for (size_t e = 0; e < m.epoch_waits_ms.size(); ++e) {
      const std::vector<double>& w = m.epoch_waits_ms[e];
      JsonObject item;
      item.Int("epoch", static_cast<int64_t>(e))
          .Int("batches", static_cast<int64_t>(w.size()))
          .Add("first_wait_ms", w.empty() ? "null" : JsonNumber(w.front()))
          .Num("median_wait_ms", Percentile(w, 0.50))
          .Num("p95_wait_ms", Percentile(w, 0.95))
          .Num("max_wait_ms", Percentile(w, 1.0));
      if (c.timeline) {
        std::vector<std::string> waits;
        for (double v : w) waits.push_back(JsonNumber(v));
        item.Add("waits_ms", absl::StrCat("[", absl::StrJoin(waits, ", "), "]"));
      }
      items.push_back(absl::StrCat("    ", item.Render(4)));
    }
    epochs = absl::StrCat("[\n", absl::StrJoin(items, ",\n"), "\n  ]");
  }
  JsonObject verdict;
  verdict.Str("bottleneck", r.verdict.bottleneck)
      .Str("label", r.verdict.label)
      .Str("evidence", r.verdict.evidence);
  std::string floor = "null";
  if (r.floor.has_value() && r.floor->images > 0) {
    JsonObject f;
    f.Int("images", r.floor->images)
        .Num("seconds", r.floor->seconds)
        .Num("images_per_s", r.floor->images_per_s)
        .Num("megapixels_per_s", r.floor->megapixels_per_s);
    if (m.decode_threads > 0) {
      const double per_thread = m.images / window / m.decode_threads;
      f.Num("loader_images_per_s_per_thread", per_thread)
          .Num("multiple_per_thread", per_thread / r.floor->images_per_s);
    } else {
      f.Add("loader_images_per_s_per_thread", "null").Add("multiple_per_thread", "null");
    }
    floor = f.Render(2);
  }
  JsonObject root;
  root.Str("schema", "ringloader-bench/1")
      .Add("dataset", dataset.Render(2))
      .Add("config", config.Render(2))
      .Add("io", io.Render(2))
      .Add("throughput", throughput.Render(2))
      .Add("stages", stages.Render(2))
      .Add("batch_latency_ms", latency)
      .Add("epochs", epochs)
      .Add("verdict", verdict.Render(2))
      .Add("decode_floor", floor);
  return root.Render() + "\n";
}

// Per epoch: the first batch's wait against the epoch's median and p95 (a drained pipeline shows
// as a first batch far above them), and with --timeline every batch's wait.
void PrintEpochs(const Report& r) {
  const Measurement& m = r.m;
  if (m.epoch_waits_ms.empty()) return;
  std::printf("  epochs        %s; consumer wait per batch, warm-up included:\n",
              r.cfg.overlap_epochs
                  ? absl::StrCat("next epoch queued ahead (", m.epochs_adopted, " of ", m.epochs_queued,
                                 " adopted)").c_str()
                  : "drained between epochs (--overlap_epochs=false)");
  for (size_t e = 0; e < m.epoch_waits_ms.size(); ++e) {
    const std::vector<double>& w = m.epoch_waits_ms[e];
    if (w.empty()) continue;
    std::printf("    epoch %-3zu   %zu batches, first batch %.2f ms, median %.2f ms, p95 %.2f ms, max %.2f ms\n",
                e, w.size(), w.front(), Percentile(w, 0.5), Percentile(w, 0.95), Percentile(w, 1.0));
    if (r.cfg.timeline) {
      std::string line;
      for (size_t b = 0; b < w.size(); ++b) absl::StrAppend(&line, b ? " " : "", absl::StrFormat("%.2f", w[b]));
      std::printf("      waits ms  %s\n", line.c_str());
    }
  }
}

void PrintReport(const Report& r) {
  const Config& c = r.cfg;
  const Measurement& m = r.m;
  const double window = std::max(1e-9, m.seconds);
  std::printf("ringloader-bench: %s on %s (%zu images, %zu classes, %s)\n", PresetName(c.preset),
              r.ds.root.c_str(), r.ds.samples.size(), r.ds.classes.size(), r.ds.source.c_str());
  std::printf("  transform     %s\n", m.transform.c_str());
  std::printf("  config        batch %d, decode threads %d, reader threads %d, io depth %d, "
              "queue depth %d, io %s -> %s%s\n",
              c.batch_size, c.decode_threads, c.reader_threads, c.io_depth, c.queue_depth,
              IoName(c.io), m.io_backend.c_str(),
              m.io_note.empty() ? "" : absl::StrCat(" (", m.io_note, ")").c_str());
  std::printf("  throughput    %.0f images/s, %.1f MB/s  (%lld images in %.2f s%s)\n",
              m.images / window, m.bytes / window / 1e6, static_cast<long long>(m.images),
              m.seconds, m.errors ? absl::StrCat(", ", m.errors, " errors").c_str() : "");
  std::printf("  stage busy    read %.2f s (%.0f%% of %s), decode %.2f s (%.0f%% of %s), "
              "consumer wait %.2f s (%.0f%% of the run)\n",
              m.read_busy, 100 * Share(m.read_busy, window, ReadRunning(m)),
              ThreadsRunning(m.read_threads, m.epochs_in_flight).c_str(), m.decode_busy,
              100 * Share(m.decode_busy, window, DecodeRunning(m)),
              ThreadsRunning(m.decode_threads, m.epochs_in_flight).c_str(), m.consumer_wait,
              100 * m.consumer_wait / window);
  if (m.device != "cpu") {
    std::printf("  device        %s: %.1f MB copied, copy busy %.2f s (%.0f%% of the run)%s\n", m.device.c_str(),
                m.device_bytes / 1e6, m.device_copy_busy, 100 * m.device_copy_busy / window,
                absl::StartsWith(m.device, "simulated")
                    ? "; simulated: a host thread copies into host memory, not a GPU"
                    : "");
  }
  if (!m.latency_ms.empty()) {
    std::printf("  batch latency p50 %.2f ms, p99 %.2f ms (time in Next()); interval p50 %.2f ms, "
                "p99 %.2f ms\n",
                Percentile(m.latency_ms, 0.5), Percentile(m.latency_ms, 0.99),
                Percentile(m.interval_ms, 0.5), Percentile(m.interval_ms, 0.99));
  } else {
    std::printf("  batch latency n/a (the %s preset makes no batches)\n", PresetName(c.preset));
  }
  PrintEpochs(r);
  if (r.floor.has_value() && r.floor->images > 0) {
    std::printf("  decode floor  %.0f images/s (%.1f MP/s) single-thread DecodeFull on %d files",
                r.floor->images_per_s, r.floor->megapixels_per_s, r.floor->images);
    if (m.decode_threads > 0) {
      const double per_thread = m.images / window / m.decode_threads;
      std::printf("; loader %.0f images/s per decode thread = %.2fx the floor", per_thread,
                  per_thread / r.floor->images_per_s);
    }
    std::printf("\n");
  }
  std::printf("  verdict       %s: %s\n", r.verdict.label.c_str(), r.verdict.evidence.c_str());
  if (!m.last_error.empty()) std::printf("  last error    %s\n", m.last_error.c_str());
}

}  // namespace ringloader::bench
