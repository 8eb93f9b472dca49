// ringloader-bench: measures the native loader on an image folder, without Python, and names the
// stage that limits it. See bench/README.md for the flags, the report and the --json fields.
//
// Presets:
//   train, eval  the full Loader (reader threads -> decode workers -> batches in slots) with the
//                same chains as the Python package: RandomResizedCrop(224) + flip + ToTensor +
//                Normalize, or Resize(256) + CenterCrop(224) + ToTensor + Normalize.
//   decode       reads (FileFetcher) and fully decodes (ImageDecoder::DecodeFull) each file on
//                --decode_threads threads, no transform and no batching: the cost of a plain
//                decode under the loader's I/O.
//   read         reads whole files only (FileFetcher on --reader_threads threads): the storage
//                ceiling.
// The Loader cannot run without a fixed-size transform (its slots hold batches of equal rows),
// so decode/read drive the same I/O and decode components directly instead.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "decode/image_decoder.h"
#include "io/reader.h"
#include "pipeline/loader_stats_fields.h"
#include "pipeline/verdict.h"
#include "ringloader/ringloader.h"
#include "ringloader/transforms.h"
#include "testing/jpeg_fixtures.h"
#include "testing/simulated_device.h"

namespace ringloader::bench {

/// Which work the benchmark measures.
enum class Preset { kTrain, kEval, kTrivial, kDecode, kRead };

/// --preset value.
struct PresetFlag {
  Preset value = Preset::kTrain;
};

/// --io value.
struct IoFlag {
  IoBackend value = IoBackend::kAuto;
};

const char* PresetName(Preset p) {
  switch (p) {
    case Preset::kTrain: return "train";
    case Preset::kEval: return "eval";
    case Preset::kTrivial: return "trivial";
    case Preset::kDecode: return "decode";
    case Preset::kRead: return "read";
  }
  return "?";
}

const char* IoName(IoBackend io) {
  switch (io) {
    case IoBackend::kAuto: return "auto";
    case IoBackend::kUring: return "uring";
    case IoBackend::kPread: return "pread";
  }
  return "?";
}

// Abseil finds these by argument-dependent lookup; a bad value makes ParseCommandLine print
// "Illegal value '...' specified for flag '...'; <error>" and exit non-zero.
bool AbslParseFlag(absl::string_view text, PresetFlag* out, std::string* error) {
  for (Preset p : {Preset::kTrain, Preset::kEval, Preset::kTrivial, Preset::kDecode, Preset::kRead}) {
    if (text == PresetName(p)) {
      out->value = p;
      return true;
    }
  }
  *error = "expected one of train, eval, trivial, decode, read";
  return false;
}
std::string AbslUnparseFlag(PresetFlag p) { return PresetName(p.value); }

bool AbslParseFlag(absl::string_view text, IoFlag* out, std::string* error) {
  for (IoBackend io : {IoBackend::kAuto, IoBackend::kUring, IoBackend::kPread}) {
    if (text == IoName(io)) {
      out->value = io;
      return true;
    }
  }
  *error = "expected one of uring, pread, auto";
  return false;
}
std::string AbslUnparseFlag(IoFlag io) { return IoName(io.value); }

}  // namespace ringloader::bench

ABSL_FLAG(std::string, data, "",
          "Image folder to read (torchvision ImageFolder layout: one sub-folder per class). "
          "Default: the Python package's sample set in $RINGLOADER_CACHE/sample-v1 (default "
          "cache ~/.cache/ringloader) when it has been generated; otherwise a synthetic JPEG set "
          "that this program generates once into $RINGLOADER_CACHE/bench-synthetic-v1-n<N> "
          "and reuses.");
ABSL_FLAG(std::string, list, "",
          "A file list instead of a folder: one \"<path> <label>\" per line, relative paths "
          "resolved against the list's folder (ringloader::ReadFileList). Excludes --data.");
ABSL_FLAG(int, synthetic_images, 1000,
          "Images in the synthetic set generated when neither --data nor the sample set exists.");
ABSL_FLAG(ringloader::bench::PresetFlag, preset, ringloader::bench::PresetFlag{},
          "What to measure: train (RandomResizedCrop(224)+flip+ToTensor+Normalize, the full "
          "loader), eval (Resize(256)+CenterCrop(224)+ToTensor+Normalize), trivial (torchvision's "
          "reference recipe: RandomResizedCrop(176)+flip+TrivialAugmentWide+ToTensor+Normalize+"
          "RandomErasing(0.1)), decode (read + full "
          "decode, no transform, no batching), read (read file bytes only).");
ABSL_FLAG(int, batch_size, 64, "Samples per batch (train/eval; decode/read count warm-up in "
          "units of this many files).");
ABSL_FLAG(int, decode_threads, 0,
          "Decode threads (train/eval/decode). 0: one per hardware thread.");
ABSL_FLAG(int, reader_threads, 1, "I/O threads (train/eval/read).");
ABSL_FLAG(int, io_depth, 32, "Reads in flight per reader thread.");
ABSL_FLAG(int, queue_depth, 4,
          "Batches the loader prepares ahead of the consumer (LoaderOptions::prefetch_batches).");
ABSL_FLAG(ringloader::bench::IoFlag, io, ringloader::bench::IoFlag{},
          "I/O backend: uring (io_uring, fail if unavailable), pread, or auto (io_uring, falling "
          "back to pread with the reason in the report).");
ABSL_FLAG(int, epochs, 1, "Passes over the dataset to measure (ignored with --duration).");
ABSL_FLAG(double, duration, 0,
          "Seconds to measure after the warm-up, cycling epochs as needed; 0: run --epochs.");
ABSL_FLAG(bool, overlap_epochs, true,
          "train/eval: queue the next epoch while the current one is delivered "
          "(Loader::QueueEpoch), so the pipeline does not drain between epochs; false: every "
          "epoch starts with an empty pipeline.");
ABSL_FLAG(bool, timeline, false,
          "train/eval: also print every batch's consumer wait, epoch by epoch (in --json: "
          "epochs[].waits_ms).");
ABSL_FLAG(int, warmup, 2,
          "Batches delivered before measuring starts (first reads, allocation, page cache).");
ABSL_FLAG(bool, shuffle, true, "Shuffle the order each epoch (seeded by --seed and the epoch).");
ABSL_FLAG(uint64_t, seed, 0, "Seed for the shuffle and the random augmentations.");
ABSL_FLAG(double, consumer_ms, 0,
          "Simulated consumer work per batch in milliseconds (a training step); 0: none.");
ABSL_FLAG(std::string, device, "cpu",
          "Where batches go (train/eval): cpu (host slots), cuda / cuda:N (staged to the GPU on "
          "the loader's stream), or simulated: the device path with copies made by a host thread "
          "into host memory. simulated measures the staging pipeline's own cost and the consumer's "
          "wait on this machine; it says nothing about a GPU's copy bandwidth.");
ABSL_FLAG(int, floor_images, 100,
          "Files (in dataset order) for the decode floor: single-thread ImageDecoder::DecodeFull "
          "rate on this machine. 0: skip.");
ABSL_FLAG(std::string, json, "", "Also write the whole report as JSON to this path.");
ABSL_FLAG(bool, tune, false,
          "Short trials over decode threads, reader threads and prefetch depth around what "
          "num_workers='auto' chooses (train/eval/trivial): prints each trial (images/s, stage "
          "busy, waits), the settings it would choose and why, and the DataLoader(...) line to "
          "paste. --consumer_ms simulates the training step.");
ABSL_FLAG(double, tune_seconds, 24,
          "--tune: total seconds of measurement, shared by the trials (at least 0.5 s each).");
ABSL_FLAG(int, tune_min_batches, 20,
          "--tune: batches a trial must measure for its rate to count (20: a 5% step, the margin "
          "the choice uses). A shorter trial is run again for longer, within a second "
          "--tune_seconds in all; one still short is marked and the choice avoids it.");
ABSL_FLAG(bool, progress, true,
          "Live progress on stderr: a refreshing line on a terminal, a plain line every 2 s "
          "otherwise.");

namespace ringloader::bench {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int HardwareThreads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
  std::string data;
  std::string list;
  int synthetic_images = 1000;
  Preset preset = Preset::kTrain;
  int batch_size = 64;
  int decode_threads = 1;
  int reader_threads = 1;
  int io_depth = 32;
  int queue_depth = 4;
  IoBackend io = IoBackend::kAuto;
  int epochs = 1;
  double duration = 0;
  bool overlap_epochs = true;
  bool timeline = false;
  int warmup = 2;
  bool shuffle = true;
  uint64_t seed = 0;
  double consumer_ms = 0;
  std::string device = "cpu";
  int floor_images = 100;
  std::string json;
  bool progress = true;
  bool tune = false;
  double tune_seconds = 24;
  int tune_min_batches = 20;
};

// Range checks the flag parser cannot express. Returns an error naming the flag.
absl::StatusOr<Config> ReadFlags() {
  Config c;
  c.data = absl::GetFlag(FLAGS_data);
  c.list = absl::GetFlag(FLAGS_list);
  if (!c.data.empty() && !c.list.empty()) {
    return absl::InvalidArgumentError("--data and --list are mutually exclusive: give one dataset");
  }
  c.synthetic_images = absl::GetFlag(FLAGS_synthetic_images);
  c.preset = absl::GetFlag(FLAGS_preset).value;
  c.batch_size = absl::GetFlag(FLAGS_batch_size);
  c.decode_threads = absl::GetFlag(FLAGS_decode_threads);
  c.reader_threads = absl::GetFlag(FLAGS_reader_threads);
  c.io_depth = absl::GetFlag(FLAGS_io_depth);
  c.queue_depth = absl::GetFlag(FLAGS_queue_depth);
  c.io = absl::GetFlag(FLAGS_io).value;
  c.epochs = absl::GetFlag(FLAGS_epochs);
  c.duration = absl::GetFlag(FLAGS_duration);
  c.warmup = absl::GetFlag(FLAGS_warmup);
  c.overlap_epochs = absl::GetFlag(FLAGS_overlap_epochs);
  c.timeline = absl::GetFlag(FLAGS_timeline);
  c.shuffle = absl::GetFlag(FLAGS_shuffle);
  c.seed = absl::GetFlag(FLAGS_seed);
  c.consumer_ms = absl::GetFlag(FLAGS_consumer_ms);
  c.device = absl::GetFlag(FLAGS_device);
  c.floor_images = absl::GetFlag(FLAGS_floor_images);
  c.json = absl::GetFlag(FLAGS_json);
  c.progress = absl::GetFlag(FLAGS_progress);
  c.tune = absl::GetFlag(FLAGS_tune);
  c.tune_seconds = absl::GetFlag(FLAGS_tune_seconds);
  c.tune_min_batches = absl::GetFlag(FLAGS_tune_min_batches);
  auto bad = [](absl::string_view flag, auto value, absl::string_view rule) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be ", rule, ", got ", value));
  };
  if (c.synthetic_images < 1) return bad("synthetic_images", c.synthetic_images, ">= 1");
  if (c.batch_size < 1) return bad("batch_size", c.batch_size, ">= 1");
  if (c.decode_threads < 0) return bad("decode_threads", c.decode_threads, ">= 0");
  if (c.decode_threads == 0) c.decode_threads = HardwareThreads();
  if (c.reader_threads < 1) return bad("reader_threads", c.reader_threads, ">= 1");
  if (c.io_depth < 1 || c.io_depth > 4096) return bad("io_depth", c.io_depth, "in 1..4096");
  if (c.queue_depth < 1) return bad("queue_depth", c.queue_depth, ">= 1");
  if (c.epochs < 1) return bad("epochs", c.epochs, ">= 1");
  if (!(c.duration >= 0) || !std::isfinite(c.duration)) return bad("duration", c.duration, ">= 0");
  if (c.warmup < 0) return bad("warmup", c.warmup, ">= 0");
  if (!(c.consumer_ms >= 0) || !std::isfinite(c.consumer_ms)) {
    return bad("consumer_ms", c.consumer_ms, ">= 0");
  }
  if (c.floor_images < 0) return bad("floor_images", c.floor_images, ">= 0");
  if (!(c.tune_seconds > 0) || !std::isfinite(c.tune_seconds)) return bad("tune_seconds", c.tune_seconds, "> 0");
  if (c.tune_min_batches < 1) return bad("tune_min_batches", c.tune_min_batches, ">= 1");
  if (c.tune && c.preset != Preset::kTrain && c.preset != Preset::kEval && c.preset != Preset::kTrivial) {
    return absl::InvalidArgumentError(absl::StrCat("--tune runs the loader: use --preset train, eval or trivial, not ",
                                                   PresetName(c.preset)));
  }
  if (c.device != "cpu" && c.device != "simulated" && c.device != "cuda" && !absl::StartsWith(c.device, "cuda:")) {
    return bad("device", c.device, "cpu, cuda, cuda:N or simulated");
  }
  return c;
}

// ---------------------------------------------------------------------------------------------
// Dataset: --data, the Python sample set, or a synthetic set generated once.

struct Dataset {
  std::string root;
  std::string source;  // "data", "sample", "synthetic"
  bool generated_now = false;
  std::vector<Sample> samples;
  std::vector<std::string> classes;
  std::vector<int64_t> file_bytes;  // per sample, for MB/s of what was delivered
  int64_t total_bytes = 0;
};

std::string CacheDir() {
  if (const char* env = std::getenv("RINGLOADER_CACHE"); env != nullptr && *env != '\0') return env;
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr && *home != '\0' ? home : "/tmp", "/.cache/ringloader");
}

absl::Status WriteBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

constexpr char kSyntheticMarker[] = ".ringloader-bench-synthetic";

// ImageNet-like files: shorter side 300-500 px, aspect 3:4 .. 16:9, quality 85-95, mostly 4:2:0
// with some 4:4:4 / 4:2:2, a few progressive and grayscale ones. Deterministic in `i`.
testing::JpegFlavor SyntheticFlavor(int i) {
  static constexpr double kAspects[] = {4.0 / 3.0, 3.0 / 2.0, 1.0, 16.0 / 9.0, 3.0 / 4.0};
  testing::JpegFlavor f;
  const int shorter = 300 + (i * 37) % 201;
  const double aspect = kAspects[i % 5];
  if (aspect >= 1.0) {
    f.height = shorter;
    f.width = static_cast<int>(std::lround(shorter * aspect));
  } else {
    f.width = shorter;
    f.height = static_cast<int>(std::lround(shorter / aspect));
  }
  f.quality = 85 + (i * 7) % 11;
  if (i % 10 == 7) f.h_samp = f.v_samp = 1;
  if (i % 10 == 8) f.v_samp = 1;
  f.progressive = i % 20 == 3;
  if (i % 33 == 5) f.color = testing::JpegFlavor::Color::kGray;
  f.seed = static_cast<uint64_t>(i) + 1;
  return f;
}

// Generates into a private temporary folder and renames it into place, marker last, so an
// interrupted run is never mistaken for a complete set and concurrent runs do not collide.
absl::Status GenerateSynthetic(const std::string& root, int count) {
  namespace fs = std::filesystem;
  const std::string tmp = absl::StrCat(root, ".tmp-", getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  constexpr int kClasses = 10;
  for (int c = 0; c < kClasses; ++c) {
    fs::create_directories(absl::StrFormat("%s/class_%02d", tmp, c), ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", ec.message()));
  }
  std::fprintf(stderr, "ringloader-bench: generating %d synthetic JPEGs into %s (once)\n", count,
               root.c_str());
  std::atomic<int> next{0};
  std::mutex error_mu;
  absl::Status error;
  std::vector<std::thread> threads;
  for (int t = 0; t < HardwareThreads(); ++t) {
    threads.emplace_back([&] {
      for (int i = next++; i < count; i = next++) {
        const std::string path =
            absl::StrFormat("%s/class_%02d/img_%05d.jpg", tmp, i % kClasses, i);
        absl::Status s = WriteBytes(path, testing::EncodeJpeg(SyntheticFlavor(i)));
        if (!s.ok()) {
          std::lock_guard<std::mutex> lock(error_mu);
          error = s;
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!error.ok()) return error;
  if (absl::Status s = WriteBytes(absl::StrCat(tmp, "/", kSyntheticMarker),
                                  {'v', '1', '\n'});
      !s.ok()) {
    return s;
  }
  fs::rename(tmp, root, ec);
  if (ec) {
    // Another run finished first: use its set.
    fs::remove_all(tmp, ec);
    if (!fs::exists(absl::StrCat(root, "/", kSyntheticMarker))) {
      return absl::InternalError(absl::StrCat("cannot move the synthetic set into ", root));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Dataset> ResolveDataset(const Config& cfg) {
  Dataset ds;
  if (!cfg.data.empty()) {
    ds.root = cfg.data;
    ds.source = "data";
  } else {
    const std::string cache = CacheDir();
    const std::string sample = absl::StrCat(cache, "/sample-v1");
    if (std::filesystem::exists(absl::StrCat(sample, "/.ringloader-sample.json"))) {
      ds.root = sample;
      ds.source = "sample";
    } else {
      ds.root = absl::StrCat(cache, "/bench-synthetic-v1-n", cfg.synthetic_images);
      ds.source = "synthetic";
      if (!std::filesystem::exists(absl::StrCat(ds.root, "/", kSyntheticMarker))) {
        std::error_code ec;
        std::filesystem::create_directories(cache, ec);
        if (absl::Status s = GenerateSynthetic(ds.root, cfg.synthetic_images); !s.ok()) return s;
        ds.generated_now = true;
      }
    }
  }
  absl::StatusOr<std::vector<Sample>> samples;
  if (!cfg.list.empty()) {
    ds.root = cfg.list;
    ds.source = "list";
    samples = ReadFileList(cfg.list);
    if (samples.ok()) {
      int64_t max_label = -1;
      for (const Sample& sample : *samples) max_label = std::max(max_label, sample.label);
      for (int64_t label = 0; label <= max_label; ++label) ds.classes.push_back(absl::StrCat(label));
    }
  } else {
    samples = ScanImageFolder(ds.root, &ds.classes);
  }
  if (!samples.ok()) {
    return absl::Status(samples.status().code(),
                        absl::StrCat("cannot list images in ", ds.root, ": ",
                                     samples.status().message()));
  }
  if (samples->empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no images found in ", ds.root));
  }
  ds.samples = *std::move(samples);
  ds.file_bytes.reserve(ds.samples.size());
  for (const Sample& s : ds.samples) {
    struct stat st;
    ds.file_bytes.push_back(::stat(s.path.c_str(), &st) == 0 ? st.st_size : 0);
    ds.total_bytes += ds.file_bytes.back();
  }
  return ds;
}

// ---------------------------------------------------------------------------------------------
// Live progress

struct ProgressSnapshot {
  int64_t images = 0;
  int64_t bytes = 0;
};

// Prints a refreshing line (terminal) or a plain line every 2 s (pipe, file) from its own thread.
class ProgressDisplay {
 public:
  ProgressDisplay(bool enabled, std::string label, std::function<ProgressSnapshot()> snapshot)
      : label_(std::move(label)), snapshot_(std::move(snapshot)), tty_(isatty(STDERR_FILENO) == 1) {
    if (enabled) thread_ = std::thread([this] { Run(); });
  }
  ~ProgressDisplay() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    const auto start = Clock::now();
    auto last_time = start;
    ProgressSnapshot last;
    const auto period = tty_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(2000);
    bool printed = false;
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
      const auto now = Clock::now();
      const ProgressSnapshot s = snapshot_();
      const double dt = std::max(1e-9, SecondsBetween(last_time, now));
      const std::string line = absl::StrFormat(
          "[%s] %7.1f s  %9.0f img/s  %8.1f MB/s  %lld images", label_,
          SecondsBetween(start, now), (s.images - last.images) / dt,
          (s.bytes - last.bytes) / dt / 1e6, static_cast<long long>(s.images));
      if (tty_) {
        std::fprintf(stderr, "\r\033[2K%s", line.c_str());
      } else {
        std::fprintf(stderr, "%s\n", line.c_str());
      }
      std::fflush(stderr);
      printed = true;
      last = s;
      last_time = now;
    }
    if (tty_ && printed) std::fprintf(stderr, "\r\033[2K");
  }

  std::string label_;
  std::function<ProgressSnapshot()> snapshot_;
  bool tty_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// Measurement

struct Measurement {
  int64_t images = 0;
  int64_t bytes = 0;
  int64_t batches = 0;
  double seconds = 0;
  double read_busy = 0;      // summed over reader threads
  double decode_busy = 0;    // summed over decode threads
  double consumer_wait = 0;  // consumer blocked in Next() (train/eval)
  int read_threads = 0;      // threads per epoch
  int decode_threads = 0;
  // 2 while the next epoch was queued (read ahead): its threads run beside the current epoch's
  // (the loader queues it at the epoch's start), so twice the threads can be busy.
  int epochs_in_flight = 1;
  std::vector<double> latency_ms;  // per batch: time in Loader::Next() (train/eval)
  std::vector<double> interval_ms;  // per batch: time between deliveries (train/eval)
  // Per epoch, every delivered batch's time in Next(), warm-up included (train/eval): the first
  // batch of an epoch shows whether the pipeline drained at the epoch boundary.
  std::vector<std::vector<double>> epoch_waits_ms;
  int64_t epochs_queued = 0, epochs_adopted = 0;
  int64_t errors = 0;
  std::string last_error;
  std::string io_backend;
  std::string io_note;
  std::string transform;
  std::string device = "cpu";   // the loader's LoaderStats::device
  int64_t device_bytes = 0;     // copied to the device while measuring
  double device_copy_busy = 0;  // the copy stream's busy time as the stager observed it
  int64_t idle_spells = 0;      // times the pipeline stood idle, ahead of the consumer (LoaderStats)
};

/// Threads that ran: per epoch, times the epochs in flight.
int ReadRunning(const Measurement& m) { return m.read_threads * m.epochs_in_flight; }
int DecodeRunning(const Measurement& m) { return m.decode_threads * m.epochs_in_flight; }

/// Busy time as a share of the time of the `threads` that ran over `window` (0 without any).
double Share(double busy, double window, int threads) {
  return threads > 0 ? busy / (std::max(1e-9, window) * threads) : 0;
}

/// "2 threads" or, with the next epoch read ahead, "2 threads (1 per epoch, 2 epochs in flight)".
std::string ThreadsRunning(int per_epoch, int epochs) {
  return epochs > 1 ? absl::StrFormat("%d threads (%d per epoch, %d epochs in flight)", per_epoch * epochs,
                                      per_epoch, epochs)
                    : absl::StrFormat("%d threads", per_epoch);
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

absl::Status WarmupTooLong(const Config& cfg) {
  return absl::InvalidArgumentError(absl::StrCat(
      "the warm-up (--warmup=", cfg.warmup, " batches) used up the whole run; lower --warmup or "
      "raise --epochs / --duration"));
}

/// Failures in a row, with nothing delivered yet, after which a run stops: every sample (or every
/// batch) failing would otherwise measure 0 images/s for the whole --duration, or forever.
constexpr int64_t kMaxFailuresBeforeFirstSuccess = 64;

/// The error that stops a run where nothing succeeded: the kind and one failing sample, whose
/// message names its file.
absl::Status NothingSucceeded(int64_t failures, const char* what, const absl::Status& example) {
  // A sample error's own code is always DataLoss: its cause's kind is in the payload.
  const auto cause = example.GetPayload(kSampleCausePayload);
  return absl::FailedPreconditionError(absl::StrCat(
      "stopped: the first ", failures, " ", what, " all failed and none succeeded, so there is "
      "nothing to measure; errors of kind ",
      cause ? std::string(*cause) : absl::StatusCodeToString(example.code()),
      ", for example ", example.message(), "; fix or filter the data set"));
}

absl::StatusOr<Measurement> RunLoader(const Dataset& ds, const Config& cfg) {
  LoaderOptions o;
  o.batch_size = cfg.batch_size;
  o.num_workers = cfg.decode_threads;
  o.reader_threads = cfg.reader_threads;
  o.io_depth = cfg.io_depth;
  o.io = cfg.io;
  o.prefetch_batches = cfg.queue_depth;
  o.shuffle = cfg.shuffle;
  o.seed = cfg.seed;
  o.transform = cfg.preset == Preset::kTrain     ? transforms::ImageNetTrain()
                : cfg.preset == Preset::kTrivial ? transforms::ImageNetTrainTrivialAugment()
                                                 : transforms::ImageNetEval();
  o.dtype = DType::kFloat32;
  o.layout = Layout::kCHW;
  if (cfg.device == "simulated") {
    o.device_runtime = std::make_shared<SimulatedDevice>();
  } else {
    o.device = cfg.device;
  }
  absl::StatusOr<std::unique_ptr<Loader>> created = Loader::Create(ds.samples, o);
  if (!created.ok()) return created.status();
  Loader& loader = **created;

  Measurement m;
  m.read_threads = cfg.reader_threads;
  m.decode_threads = cfg.decode_threads;
  m.transform = loader.DescribeTransform();
  // Bytes are the file sizes of the delivered samples: LoaderStats::bytes_read is only summed
  // when an epoch's reader threads finish, too coarse for a live rate or a mid-epoch window.
  std::atomic<int64_t> images_total{0}, bytes_total{0};
  ProgressDisplay progress(cfg.progress, PresetName(cfg.preset), [&] {
    return ProgressSnapshot{images_total.load(), bytes_total.load()};
  });

  bool measuring = cfg.warmup == 0;
  LoaderStats before = loader.Stats();
  Clock::time_point t0 = Clock::now();
  Clock::time_point previous_delivery = t0;
  int64_t delivered = 0;
  bool done = false;
  const auto consumer_work = std::chrono::duration<double, std::milli>(cfg.consumer_ms);
  for (int64_t epoch = 0; !done && (cfg.duration > 0 || epoch < cfg.epochs); ++epoch) {
    if (absl::Status s = loader.StartEpoch(epoch); !s.ok()) return s;
    // The next epoch is known (epoch + 1 of the built-in order): queue it, so its batches are
    // read and decoded while this epoch's last ones are consumed.
    if (cfg.overlap_epochs && (cfg.duration > 0 || epoch + 1 < cfg.epochs)) {
      if (absl::Status s = loader.QueueEpoch(epoch + 1); !s.ok()) return s;
    }
    m.epoch_waits_ms.emplace_back();
    while (true) {
      const auto asked = Clock::now();
      absl::StatusOr<Batch> batch = loader.Next();
      const auto got = Clock::now();
      if (IsEndOfEpoch(batch.status())) break;
      if (!batch.ok()) {
        // A sample's error is reported at its batch and the epoch goes on; anything else is fatal.
        if (!IsSampleError(batch.status())) return batch.status();
        ++m.errors;
        m.last_error = std::string(batch.status().message());
        const int64_t epoch_batches = loader.BatchesPerEpoch();
        if (delivered == 0 && m.errors >= std::min(kMaxFailuresBeforeFirstSuccess, epoch_batches)) {
          loader.Stop();
          progress.Stop();
          return NothingSucceeded(m.errors, "batches", batch.status());
        }
        continue;
      }
      ++delivered;
      m.epoch_waits_ms.back().push_back(std::chrono::duration<double, std::milli>(got - asked).count());
      int64_t batch_bytes = 0;
      for (int r = 0; r < batch->size(); ++r) {
        batch_bytes += ds.file_bytes[static_cast<size_t>(batch->indices()[r])];
      }
      images_total += batch->size();
      bytes_total += batch_bytes;
      if (measuring) {
        m.images += batch->size();
        m.bytes += batch_bytes;
        ++m.batches;
        m.latency_ms.push_back(std::chrono::duration<double, std::milli>(got - asked).count());
        m.interval_ms.push_back(
            std::chrono::duration<double, std::milli>(got - previous_delivery).count());
      } else if (delivered >= cfg.warmup) {
        measuring = true;
        before = loader.Stats();
        t0 = Clock::now();
      }
      previous_delivery = got;
      if (cfg.consumer_ms > 0) std::this_thread::sleep_for(consumer_work);
      if (measuring && cfg.duration > 0 && SecondsBetween(t0, Clock::now()) >= cfg.duration) {
        done = true;
        break;
      }
    }
  }
  const Clock::time_point t1 = Clock::now();
  const LoaderStats after = loader.Stats();
  loader.Stop();
  progress.Stop();
  if (!measuring || m.batches == 0) return WarmupTooLong(cfg);

  m.seconds = SecondsBetween(t0, t1);
  const LoaderStats window = StatsSince(before, after);
  m.read_busy = window.read_seconds;
  m.decode_busy = window.decode_seconds;
  m.consumer_wait = window.wait_seconds;
  m.device = after.device;
  m.device_bytes = window.device_bytes;
  m.device_copy_busy = window.device_copy_seconds;
  m.idle_spells = window.idle_spells;
  m.io_backend = after.io_backend;
  m.io_note = after.io_note;
  m.epochs_queued = after.epochs_queued;
  m.epochs_adopted = after.epochs_adopted;
  m.epochs_in_flight = after.epochs_queued > 0 ? 2 : 1;
  if (m.last_error.empty()) m.last_error = after.last_error;
  return m;
}

// Hands out dataset indices to worker threads: epoch after epoch, each in its own seeded order.
class WorkList {
 public:
  WorkList(int64_t size, const Config& cfg) : size_(size), cfg_(cfg) {}

  /// Next index to process; false when the run is over.
  bool Next(int64_t* index) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return false;
    const int64_t epoch = position_ / size_;
    if (cfg_.duration <= 0 && epoch >= cfg_.epochs) return false;
    const int64_t i = position_++ % size_;
    *index = cfg_.shuffle ? Order(epoch)[static_cast<size_t>(i)] : i;
    return true;
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }

 private:
  const std::vector<int64_t>& Order(int64_t epoch) {
    if (epoch != order_epoch_) {
      order_.resize(static_cast<size_t>(size_));
      std::iota(order_.begin(), order_.end(), 0);
      std::mt19937_64 rng(cfg_.seed * 1000003u + static_cast<uint64_t>(epoch));
      std::shuffle(order_.begin(), order_.end(), rng);
      order_epoch_ = epoch;
    }
    return order_;
  }

  const int64_t size_;
  const Config& cfg_;
  std::mutex mu_;
  int64_t position_ = 0;
  bool stopped_ = false;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;
};

// read / decode presets: worker threads, each with its own FileFetcher (and ImageDecoder for
// decode) keeping up to --io_depth reads in flight while it decodes what has arrived.
absl::StatusOr<Measurement> RunComponents(const Dataset& ds, const Config& cfg) {
  const bool decode = cfg.preset == Preset::kDecode;
  const int threads = decode ? cfg.decode_threads : cfg.reader_threads;
  const int depth = decode ? std::max(2, cfg.io_depth / threads) : cfg.io_depth;
  const int64_t warmup_files = static_cast<int64_t>(cfg.warmup) * cfg.batch_size;

  // Resolve the backend once, so an unusable --io=uring is an error before threads start.
  std::string io_note;
  {
    absl::StatusOr<std::unique_ptr<Reader>> probe = MakeReader(cfg.io, depth, &io_note);
    if (!probe.ok()) return probe.status();
  }

  WorkList work(static_cast<int64_t>(ds.samples.size()), cfg);
  std::atomic<int64_t> files_total{0}, bytes_total{0};
  std::atomic<bool> measuring{warmup_files == 0};
  std::atomic<int64_t> m_images{0}, m_bytes{0}, m_errors{0}, read_ns{0}, decode_ns{0};
  std::mutex mu;
  Clock::time_point t0 = Clock::now();
  std::string last_error, backend;
  absl::Status fatal;
  const int64_t max_failures =
      std::min(kMaxFailuresBeforeFirstSuccess, static_cast<int64_t>(ds.samples.size()));
  int64_t failures = 0;  // all failures, warm-up included (under mu)

  ProgressDisplay progress(cfg.progress, PresetName(cfg.preset),
                           [&] { return ProgressSnapshot{files_total.load(), bytes_total.load()}; });
  auto worker = [&] {
    std::string note;
    absl::StatusOr<std::unique_ptr<Reader>> reader = MakeReader(cfg.io, depth, &note);
    if (!reader.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      fatal = reader.status();
      work.Stop();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      backend = (*reader)->name();
    }
    FileFetcher fetcher(*std::move(reader), size_t{256} << 20);
    ImageDecoder decoder;
    std::vector<ByteBuffer> buffers(static_cast<size_t>(depth));
    std::vector<int64_t> buffer_sample(static_cast<size_t>(depth));  // the file each one holds
    std::vector<int> free_buffers(static_cast<size_t>(depth));
    std::iota(free_buffers.begin(), free_buffers.end(), 0);
    std::vector<FetchedFile> fetched;
    bool exhausted = false;
    while (true) {
      const auto read_start = Clock::now();
      while (!exhausted && !free_buffers.empty() && fetcher.has_room()) {
        int64_t index = 0;
        if (!work.Next(&index)) {
          exhausted = true;
          break;
        }
        const int b = free_buffers.back();
        free_buffers.pop_back();
        buffer_sample[static_cast<size_t>(b)] = index;
        fetcher.Start(ds.samples[static_cast<size_t>(index)].path, &buffers[static_cast<size_t>(b)],
                      static_cast<uint64_t>(b));
      }
      absl::Status status = fetcher.Flush();
      if (status.ok() && fetcher.outstanding() == 0) break;
      fetched.clear();
      if (status.ok()) status = fetcher.Poll(&fetched, /*wait=*/true);
      if (!status.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        fatal = status;
        work.Stop();
        return;
      }
      const int64_t read_elapsed =
          std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - read_start).count();
      if (measuring.load()) read_ns += read_elapsed;
      for (FetchedFile& f : fetched) {
        absl::Status s = f.status;
        const int64_t size = static_cast<int64_t>(f.buffer->size());
        if (s.ok() && decode) {
          const auto decode_start = Clock::now();
          s = decoder.DecodeFull(f.buffer->data(), f.buffer->size()).status();
          if (measuring.load()) {
            decode_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(
                             Clock::now() - decode_start).count();
          }
        }
        free_buffers.push_back(static_cast<int>(f.tag));
        if (!s.ok()) {
          if (measuring.load()) ++m_errors;
          std::lock_guard<std::mutex> lock(mu);
          last_error = absl::StrCat(ds.samples[static_cast<size_t>(buffer_sample[f.tag])].path,
                                    ": ", s.message());
          if (++failures >= max_failures && files_total.load() == 0 && fatal.ok()) {
            fatal = NothingSucceeded(failures, "files", absl::Status(s.code(), last_error));
            work.Stop();
          }
          continue;
        }
        bytes_total += size;
        const int64_t done = ++files_total;
        if (measuring.load()) {
          ++m_images;
          m_bytes += size;
        } else if (done == warmup_files) {
          std::lock_guard<std::mutex> lock(mu);
          t0 = Clock::now();
          measuring = true;
        }
        if (measuring.load() && cfg.duration > 0) {
          std::lock_guard<std::mutex> lock(mu);
          if (SecondsBetween(t0, Clock::now()) >= cfg.duration) work.Stop();
        }
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  const Clock::time_point t1 = Clock::now();
  progress.Stop();
  if (!fatal.ok()) return fatal;
  if (!measuring.load() || m_images.load() == 0) return WarmupTooLong(cfg);

  Measurement m;
  m.images = m_images.load();
  m.bytes = m_bytes.load();
  m.seconds = SecondsBetween(t0, t1);
  m.read_busy = read_ns.load() * 1e-9;
  m.decode_busy = decode_ns.load() * 1e-9;
  m.read_threads = threads;
  m.decode_threads = decode ? threads : 0;
  m.errors = m_errors.load();
  m.last_error = last_error;
  m.io_backend = backend;
  m.io_note = io_note;
  m.transform = decode ? "DecodeFull (no transform)" : "none (bytes only)";
  return m;
}

// ---------------------------------------------------------------------------------------------
// Decode floor

struct DecodeFloor {
  int images = 0;
  double seconds = 0;
  double images_per_s = 0;
  double megapixels_per_s = 0;
};

absl::StatusOr<DecodeFloor> MeasureDecodeFloor(const Dataset& ds, int count) {
  // Files are read into memory first: the floor is decode cost alone, on one thread.
  std::vector<std::vector<uint8_t>> files;
  for (size_t i = 0; i < ds.samples.size() && static_cast<int>(files.size()) < count; ++i) {
    std::ifstream in(ds.samples[i].path, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) return absl::InternalError(absl::StrCat("cannot read ", ds.samples[i].path));
    files.push_back(std::move(bytes));
  }
  ImageDecoder decoder;
  DecodeFloor floor;
  double pixels = 0;
  const auto start = Clock::now();
  for (const auto& f : files) {
    absl::StatusOr<RgbImage> image = decoder.DecodeFull(f.data(), f.size());
    if (!image.ok()) continue;  // a bad file is the loader's business, not the floor's
    ++floor.images;
    pixels += static_cast<double>(image->width) * image->height;
  }
  floor.seconds = SecondsBetween(start, Clock::now());
  if (floor.images > 0 && floor.seconds > 0) {
    floor.images_per_s = floor.images / floor.seconds;
    floor.megapixels_per_s = pixels / 1e6 / floor.seconds;
  }
  return floor;
}

// ---------------------------------------------------------------------------------------------
// Verdict

struct Verdict {
  std::string bottleneck;  // "io", "decode", "consumer", "errors"
  std::string label;       // "I/O-bound", ...
  std::string evidence;
};

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

// ---------------------------------------------------------------------------------------------
// Report

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

struct Report {
  Config cfg;
  Dataset ds;
  Measurement m;
  Verdict verdict;
  std::optional<DecodeFloor> floor;
};

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

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ringloader-bench: error: %s\n", std::string(status.message()).c_str());
  return 1;
}

// ---------------------------------------------------------------------------------------------
// --tune: short trials around the auto choice.

struct Trial {
  int decode = 1, readers = 1, prefetch = 4;
  Measurement m;
  bool short_run = false;  // fewer than --tune_min_batches measured, even lengthened
  double rate() const { return m.seconds > 0 ? m.images / m.seconds : 0; }
};

std::string TrialStages(const Trial& t) {
  const double w = std::max(1e-9, t.m.seconds);
  return absl::StrFormat("read %3.0f%%  decode %3.0f%%  consumer wait %3.0f%%  pipeline idle %lld x",
                         100 * Share(t.m.read_busy, w, ReadRunning(t.m)),
                         100 * Share(t.m.decode_busy, w, DecodeRunning(t.m)), 100 * t.m.consumer_wait / w,
                         static_cast<long long>(t.m.idle_spells));
}

// Runs the trials and prints the table, the choice and the line to paste.
int RunTune(const Dataset& ds, Config cfg) {
  LoaderOptions probe;
  probe.auto_threads = true;
  probe.reader_threads = 0;
  absl::StatusOr<AutoThreads> automatic = ChooseAutoThreads(probe);
  if (!automatic.ok()) return Fail(automatic.status());
  const int a = automatic->decode_threads;
  const int most = std::max(automatic->usable_cpus, HardwareThreads());
  std::printf("ringloader-bench --tune: %s on %s (%zu images), batch %d%s\n", PresetName(cfg.preset),
              ds.root.c_str(), ds.samples.size(), cfg.batch_size,
              cfg.consumer_ms > 0 ? absl::StrFormat(", step %.1f ms", cfg.consumer_ms).c_str() : "");
  std::printf("  auto          %s\n", automatic->note.c_str());

  // Decode threads around the auto choice, then one more reader, then prefetch depths: at most
  // 9 trials sharing --tune_seconds.
  std::vector<int> decodes = {std::max(1, a / 2), std::max(1, a - 1), a, std::min(most, a + 1), std::min(2 * most, 2 * a)};
  std::sort(decodes.begin(), decodes.end());
  decodes.erase(std::unique(decodes.begin(), decodes.end()), decodes.end());
  const int planned = static_cast<int>(decodes.size()) + 1 + 3;
  cfg.duration = std::max(0.5, cfg.tune_seconds / planned);
  cfg.warmup = std::max(cfg.warmup, 2);
  cfg.progress = false;
  std::printf("  busy          %% of the threads running: with the next epoch read ahead, its threads run "
              "beside the current epoch's, so 2 x decode and 2 x readers\n");
  std::vector<Trial> trials;
  // A trial measuring fewer than --tune_min_batches batches is run again, longer, out of an extra
  // budget of --tune_seconds; one still short is marked, and the choice avoids it.
  double extra_left = cfg.tune_seconds;
  auto run = [&](int decode, int readers, int prefetch) -> absl::Status {
    for (const Trial& t : trials) {
      if (t.decode == decode && t.readers == readers && t.prefetch == prefetch) return absl::OkStatus();
    }
    Config c = cfg;
    c.decode_threads = decode;
    c.reader_threads = readers;
    c.queue_depth = prefetch;
    absl::StatusOr<Measurement> m = RunLoader(ds, c);
    if (!m.ok()) return m.status();
    if (m->batches < cfg.tune_min_batches && extra_left > 0) {
      // Long enough for the batches missing at the rate seen, with a margin; at most 4x.
      const double wanted = c.duration * 1.25 * cfg.tune_min_batches / std::max<int64_t>(1, m->batches);
      c.duration = std::min({wanted, 4 * cfg.duration, extra_left});
      extra_left -= c.duration;
      absl::StatusOr<Measurement> longer = RunLoader(ds, c);
      if (!longer.ok()) return longer.status();
      m = std::move(longer);
    }
    Trial t{decode, readers, prefetch, *std::move(m)};
    t.short_run = t.m.batches < cfg.tune_min_batches;
    std::printf("  trial %2zu      decode %2d  readers %d  prefetch %2d  %7.0f images/s  %s%s\n", trials.size() + 1,
                decode, readers, prefetch, t.rate(), TrialStages(t).c_str(),
                t.short_run ? absl::StrFormat("  SHORT: %lld batches in %.2f s",
                                              static_cast<long long>(t.m.batches), t.m.seconds).c_str()
                            : "");
    std::fflush(stdout);
    trials.push_back(std::move(t));
    return absl::OkStatus();
  };
  // Fewer threads win unless more are clearly (over 5%) faster: every thread left idle is a CPU
  // the training loop can use. Short trials count only when every trial is short.
  auto counts = [&](const Trial& t) {
    return !t.short_run || std::all_of(trials.begin(), trials.end(), [](const Trial& u) { return u.short_run; });
  };
  auto best = [&]() -> const Trial& {
    const Trial* top = nullptr;
    for (const Trial& t : trials) {
      if (counts(t) && (top == nullptr || t.rate() > top->rate())) top = &t;
    }
    const Trial* lean = top;
    for (const Trial& t : trials) {
      if (!counts(t)) continue;
      const int threads = t.decode + t.readers, lean_threads = lean->decode + lean->readers;
      if (t.rate() >= 0.95 * top->rate() &&
          (threads < lean_threads || (threads == lean_threads && t.prefetch < lean->prefetch))) {
        lean = &t;
      }
    }
    return *lean;
  };
  const int readers = automatic->reader_threads;
  for (int d : decodes) {
    if (absl::Status s = run(d, readers, cfg.queue_depth); !s.ok()) return Fail(s);
  }
  Trial chosen = best();
  if (absl::Status s = run(chosen.decode, chosen.readers + 1, chosen.prefetch); !s.ok()) return Fail(s);
  chosen = best();
  for (int p : {2, 8, 16}) {
    if (absl::Status s = run(chosen.decode, chosen.readers, p); !s.ok()) return Fail(s);
  }
  const Trial& pick = best();
  const Trial* top = &pick;
  for (const Trial& t : trials) {
    if (counts(t) && t.rate() > top->rate()) top = &t;
  }
  const double w = std::max(1e-9, pick.m.seconds);
  // Decided on busy time per configured decode thread (over 100% with the next epoch read ahead);
  // shown as a share of the threads running.
  const double decode_busy = Share(pick.m.decode_busy, w, pick.decode);
  const double decode_running = Share(pick.m.decode_busy, w, DecodeRunning(pick.m));
  const double wait = pick.m.consumer_wait / w;
  std::string why = &pick == top
                        ? "the fastest trial"
                        : absl::StrFormat("within 5%% of the fastest (%.0f images/s with decode %d, readers %d, "
                                          "prefetch %d) with fewer threads or a shallower queue",
                                          top->rate(), top->decode, top->readers, top->prefetch);
  if (wait < 0.1) {
    absl::StrAppend(&why, "; the consumer waits ", absl::StrFormat("%.0f%%", 100 * wait),
                    " of the time: the loader keeps up with this step");
  } else if (decode_busy > 0.8) {
    absl::StrAppend(&why, absl::StrFormat("; decode threads %.0f%% busy (of %d running): decode-bound",
                                          100 * decode_running, DecodeRunning(pick.m)),
                    ", more CPUs (or a cheaper transform) would help");
  } else {
    absl::StrAppend(&why, absl::StrFormat("; decode threads %.0f%% busy (of %d running) while the consumer "
                                          "waits %.0f%%: ", 100 * decode_running, DecodeRunning(pick.m), 100 * wait),
                    "reads or the CPU budget limit it");
  }
  const int64_t short_trials = std::count_if(trials.begin(), trials.end(), [](const Trial& t) { return t.short_run; });
  if (short_trials > 0) {
    std::printf("  caution       %lld of %zu trials measured fewer than %d batches even run longer (their rates "
                "are too coarse to compare within 5%%): %s; raise --tune_seconds%s\n",
                static_cast<long long>(short_trials), trials.size(), cfg.tune_min_batches,
                pick.short_run ? "every trial is short, so the choice is UNRELIABLE"
                               : "the choice leaves them out",
                cfg.consumer_ms > 0 ? " or lower --consumer_ms" : "");
  }
  std::printf("  choice        decode %d, readers %d, prefetch %d: %.0f images/s; %s%s\n", pick.decode, pick.readers,
              pick.prefetch, pick.rate(), why.c_str(), pick.short_run ? " (UNRELIABLE: short trials)" : "");
  const int factor = std::max(1, (pick.prefetch + pick.decode - 1) / pick.decode);
  const bool same_as_auto = pick.decode == a && pick.readers == automatic->reader_threads;
  std::printf("  paste         ringloader.DataLoader(dataset, batch_size=%d, num_workers=%s, prefetch_factor=%d%s)\n",
              cfg.batch_size, same_as_auto ? "\"auto\"" : absl::StrCat(pick.decode).c_str(), factor,
              pick.readers != 1 ? absl::StrCat(", reader_threads=", pick.readers).c_str() : "");
  if (same_as_auto) std::printf("                (num_workers=\"auto\" chooses decode %d, readers %d here)\n", a,
                                automatic->reader_threads);
  return 0;
}



int Main(int argc, char** argv) {
  absl::FlagsUsageConfig usage;
  // Only this program's flags in --help, not Abseil's own.
  usage.contains_help_flags = [](absl::string_view file) {
    return absl::EndsWith(file, "ringloader_bench.cc");
  };
  usage.contains_helpshort_flags = usage.contains_help_flags;
  usage.normalize_filename = [](absl::string_view file) {
    const size_t at = file.rfind("bench/");
    return std::string(at == absl::string_view::npos ? file : file.substr(at));
  };
  usage.version_string = [] { return std::string("ringloader-bench " RINGLOADER_VERSION "\n"); };
  absl::SetFlagsUsageConfig(usage);
  absl::SetProgramUsageMessage(
      "Benchmarks the ringloader native data loader (no Python) and names the bottleneck stage.\n"
      "\n"
      "  ringloader-bench [--data DIR] [--preset train|eval|trivial|decode|read] [flags]\n"
      "\n"
      "Reports images/s and MB/s, per-stage busy time, batch latency, a verdict (I/O-, decode- or "
      "consumer-bound) with its evidence, and the single-thread decode floor. --json PATH writes "
      "the same report as JSON.");
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "unexpected argument '", positional[1], "' (flags take the form --name=value; see --help)")));
  }
  absl::StatusOr<Config> cfg = ReadFlags();
  if (!cfg.ok()) return Fail(cfg.status());

  Report report;
  report.cfg = *cfg;
  absl::StatusOr<Dataset> ds = ResolveDataset(*cfg);
  if (!ds.ok()) return Fail(ds.status());
  report.ds = *std::move(ds);
  if (cfg->tune) return RunTune(report.ds, *cfg);

  absl::StatusOr<Measurement> m = (cfg->preset == Preset::kTrain || cfg->preset == Preset::kEval ||
                                    cfg->preset == Preset::kTrivial)
                                      ? RunLoader(report.ds, *cfg)
                                      : RunComponents(report.ds, *cfg);
  if (!m.ok()) return Fail(m.status());
  report.m = *std::move(m);
  report.verdict = Judge(*cfg, report.m);
  if (cfg->floor_images > 0 && cfg->preset != Preset::kRead) {
    absl::StatusOr<DecodeFloor> floor = MeasureDecodeFloor(report.ds, cfg->floor_images);
    if (!floor.ok()) return Fail(floor.status());
    report.floor = *floor;
  }
  PrintReport(report);
  if (!cfg->json.empty()) {
    std::ofstream out(cfg->json, std::ios::trunc);
    out << RenderJson(report);
    out.close();
    if (!out) return Fail(absl::InternalError(absl::StrCat("cannot write --json ", cfg->json)));
  }
  return 0;
}

}  // namespace
}  // namespace ringloader::bench

int main(int argc, char** argv) { return ringloader::bench::Main(argc, argv); }
