// ringloader-bench: the verdict, the printed report and its --json form.
#pragma once

#include <optional>
#include <string>

#include "config.h"
#include "dataset.h"
#include "measure.h"

namespace ringloader::bench {

struct Verdict {
  std::string bottleneck;  // "io", "decode", "consumer", "errors"
  std::string label;       // "I/O-bound", ...
  std::string evidence;
};

/// The stage that limited the run, with its evidence.
Verdict Judge(const Config& cfg, const Measurement& m);

struct Report {
  Config cfg;
  Dataset ds;
  Measurement m;
  Verdict verdict;
  std::optional<DecodeFloor> floor;
};

/// The whole report as JSON (schema ringloader-bench/1, bench/README.md).
std::string RenderJson(const Report& r);

/// The report on stdout.
void PrintReport(const Report& r);

}  // namespace ringloader::bench
