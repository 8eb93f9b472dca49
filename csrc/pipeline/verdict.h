#pragma once
/// Which stage of the loader limited it over a measured window: the rule behind the verdict of
/// the native benchmark (`ringloader-bench`, bench/README.md "Verdict") and of Python's
/// `ringloader compare` (`_C.judge_loader`), kept here once. It is plain arithmetic on counters
/// a caller measured (`LoaderStats` deltas over the window), so it needs no loader.

#include <cstdint>
#include <string>

namespace ringloader {

/// What the loader did over the window. Busy seconds are summed over the threads of one epoch
/// (and of the next one while it runs beside it).
struct VerdictInput {
  double seconds = 0;            // the window
  double read_busy = 0;          // reader threads' busy seconds
  double decode_busy = 0;        // decode threads' busy seconds
  int read_threads = 0;          // reader threads per epoch
  int decode_threads = 0;        // decode threads per epoch
  double consumer_wait = 0;      // seconds the consumer waited for batches
  bool next_epoch_beside = false;  // the next epoch's threads ran beside the current one's
  int64_t errors = 0;            // failed batches
  int64_t batches = 0;           // delivered batches
  std::string last_error;        // the last failure's message
  int hardware_threads = 0;      // of the machine; 0: unknown (no note)
  /// What to raise when no stage is saturated: the caller's own names for the knobs.
  std::string knobs = "--queue_depth, --io_depth or the thread counts";
};

struct LoaderVerdict {
  std::string bottleneck;  // "io", "decode", "consumer", "errors"
  std::string label;       // "I/O-bound", "decode-bound", "consumer-bound", "error-bound"
  std::string evidence;    // the numbers behind it, one sentence
  // The numbers the rule compared: busy time per configured thread (per epoch: past 1 while
  // the next epoch runs beside), and the share of the window the consumer waited.
  double read_share = 0;
  double decode_share = 0;
  double wait_fraction = 0;
};

/// Failed batches at least as many as delivered ones: error-bound. Otherwise a consumer that
/// waited less than 10% of the window: consumer-bound (the loader kept ahead). Otherwise the
/// busier of the decode and reader threads per thread decides decode-bound (ties) or
/// I/O-bound, with advice to raise `knobs` when neither is half busy. A note follows when the
/// decode threads outnumber the hardware threads.
LoaderVerdict JudgeLoader(const VerdictInput& in);

}  // namespace ringloader
