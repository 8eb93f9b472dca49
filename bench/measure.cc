// ringloader-bench: the measurement loops and the decode floor, with the live progress line.
#include "measure.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "decode/image_decoder.h"
#include "io/reader.h"
#include "pipeline/loader_stats_fields.h"
#include "ringloader/ringloader.h"
#include "ringloader/transforms.h"
#include "testing/simulated_device.h"

namespace ringloader::bench {

int ReadRunning(const Measurement& m) { return m.read_threads * m.epochs_in_flight; }
int DecodeRunning(const Measurement& m) { return m.decode_threads * m.epochs_in_flight; }

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace ringloader::bench
