// ringloader-bench --tune: short trials around the automatic thread choice.
#include "tune.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "measure.h"
#include "ringloader/ringloader.h"

namespace ringloader::bench {
namespace {

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

}  // namespace

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

}  // namespace ringloader::bench
