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
//
// This file holds the flags, their range checks (ReadFlags) and main. The rest, by concern:
//   config.h/.cc    the Config the flags fill, preset and I/O names, shared helpers
//   dataset.h/.cc   the images: --data, --list, the sample set or a generated synthetic set
//   measure.h/.cc   the measurement loops (Loader; read/decode components), the decode floor
//   report.h/.cc    the verdict, the printed report and its --json form
//   tune.h/.cc      --tune: short trials around the automatic thread choice

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "config.h"
#include "dataset.h"
#include "measure.h"
#include "report.h"
#include "ringloader/ringloader.h"
#include "tune.h"

namespace ringloader::bench {

/// --preset value.
struct PresetFlag {
  Preset value = Preset::kTrain;
};

/// --io value.
struct IoFlag {
  IoBackend value = IoBackend::kAuto;
};

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
