// ringloader-bench: the run's configuration (read from the flags in ringloader_bench.cc) and
// the small helpers every part of the benchmark shares.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "ringloader/ringloader.h"

namespace ringloader::bench {

/// Which work the benchmark measures.
enum class Preset { kTrain, kEval, kTrivial, kDecode, kRead };

/// The --preset and --io names.
const char* PresetName(Preset p);
const char* IoName(IoBackend io);

using Clock = std::chrono::steady_clock;

double SecondsBetween(Clock::time_point a, Clock::time_point b);

int HardwareThreads();

/// Prints "ringloader-bench: error: <message>" on stderr; returns the exit status 1.
int Fail(const absl::Status& status);

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

}  // namespace ringloader::bench
