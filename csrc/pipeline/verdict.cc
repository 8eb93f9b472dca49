#include "pipeline/verdict.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace ringloader {

LoaderVerdict JudgeLoader(const VerdictInput& in) {
  const double window = std::max(1e-9, in.seconds);
  auto share = [window](double busy, int threads) { return threads > 0 ? busy / (window * threads) : 0.0; };
  LoaderVerdict v;
  v.read_share = share(in.read_busy, in.read_threads);
  v.decode_share = share(in.decode_busy, in.decode_threads);
  v.wait_fraction = in.consumer_wait / window;
  auto set = [&v](const char* bottleneck, const char* label, std::string evidence) {
    v.bottleneck = bottleneck;
    v.label = label;
    v.evidence = std::move(evidence);
  };
  if (in.errors > 0 && in.errors >= in.batches) {
    set("errors", "error-bound",
        absl::StrFormat("%d of %d batches failed (last: %s): the rates mostly measure failing samples, "
                        "not the pipeline; fix or filter the data set first",
                        in.errors, in.errors + in.batches, in.last_error));
    return v;
  }
  auto threads = [](int n) { return absl::StrFormat("%d thread%s", n, n == 1 ? "" : "s"); };
  const std::string busy = absl::StrFormat(
      "decode threads busy %.0f%% (%s), reader threads busy %.0f%% (%s)%s", 100 * v.decode_share,
      threads(in.decode_threads), 100 * v.read_share, threads(in.read_threads),
      in.next_epoch_beside ? " per epoch, the next epoch's threads beside them" : "");
  if (v.wait_fraction < 0.10) {
    set("consumer", "consumer-bound",
        absl::StrFormat("the consumer waited for batches only %.1f%% of the run: batches were "
                        "ready before it asked (%s)", 100 * v.wait_fraction, busy));
  } else if (v.decode_share >= v.read_share) {
    set("decode", "decode-bound",
        absl::StrFormat("the consumer waited %.0f%% of the run; %s", 100 * v.wait_fraction, busy));
  } else {
    set("io", "I/O-bound",
        absl::StrFormat("the consumer waited %.0f%% of the run; %s", 100 * v.wait_fraction, busy));
  }
  if (v.bottleneck != "consumer" && std::max(v.decode_share, v.read_share) < 0.5) {
    v.evidence += absl::StrCat("; no stage is saturated: raise ", in.knobs);
  }
  if (in.hardware_threads > 0 && in.decode_threads > in.hardware_threads) {
    v.evidence += absl::StrFormat("; note: %d decode threads share %d hardware threads",
                                  in.decode_threads, in.hardware_threads);
  }
  return v;
}

}  // namespace ringloader
