// ringloader-bench: the measurement loops (the Loader for train/eval/trivial, the I/O and decode
// components for read/decode) and the single-thread decode floor.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config.h"
#include "dataset.h"

namespace ringloader::bench {

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
int ReadRunning(const Measurement& m);
int DecodeRunning(const Measurement& m);

/// Busy time as a share of the time of the `threads` that ran over `window` (0 without any).
double Share(double busy, double window, int threads);

/// "2 threads" or, with the next epoch read ahead, "2 threads (1 per epoch, 2 epochs in flight)".
std::string ThreadsRunning(int per_epoch, int epochs);

/// The q-quantile (0..1) of `v` by nearest rank; 0 when empty.
double Percentile(std::vector<double> v, double q);

/// train / eval / trivial presets: the full Loader, batches consumed as a training loop would.
absl::StatusOr<Measurement> RunLoader(const Dataset& ds, const Config& cfg);

// read / decode presets: worker threads, each with its own FileFetcher (and ImageDecoder for
// decode) keeping up to --io_depth reads in flight while it decodes what has arrived.
absl::StatusOr<Measurement> RunComponents(const Dataset& ds, const Config& cfg);

struct DecodeFloor {
  int images = 0;
  double seconds = 0;
  double images_per_s = 0;
  double megapixels_per_s = 0;
};

/// The single-thread ImageDecoder::DecodeFull rate over the first `count` files, read beforehand.
absl::StatusOr<DecodeFloor> MeasureDecodeFloor(const Dataset& ds, int count);

}  // namespace ringloader::bench
