// ringloader-bench: the names of the presets and I/O backends, and the shared helpers.
#include "config.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>

namespace ringloader::bench {

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

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int HardwareThreads() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "ringloader-bench: error: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace ringloader::bench
