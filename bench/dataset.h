// ringloader-bench: the images a run reads: --data, --list, the Python sample set, or a
// synthetic set generated once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "config.h"
#include "ringloader/ringloader.h"

namespace ringloader::bench {

struct Dataset {
  std::string root;
  std::string source;  // "data", "sample", "synthetic"
  bool generated_now = false;
  std::vector<Sample> samples;
  std::vector<std::string> classes;
  std::vector<int64_t> file_bytes;  // per sample, for MB/s of what was delivered
  int64_t total_bytes = 0;
};

/// The dataset the flags name (generating the synthetic set when it is used and missing).
absl::StatusOr<Dataset> ResolveDataset(const Config& cfg);

}  // namespace ringloader::bench
