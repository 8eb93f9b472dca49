#pragma once
/// ringloader's public C++ API: a Loader that reads, decodes and transforms image samples on
/// native threads and delivers batches in order, in reusable slots.
///
///   auto loader = ringloader::Loader::Create(samples, options).value();
///   loader->StartEpoch(0);
///   while (true) {
///     absl::StatusOr<ringloader::Batch> batch = loader->Next();
///     if (ringloader::IsEndOfEpoch(batch.status())) break;
///     if (ringloader::IsSampleError(batch.status())) { /* names index, path, reason */ continue; }
///     if (!batch.ok()) { /* the loader failed: stop */ }
///     use(batch->images(), batch->labels());          // slot recycled when `batch` dies
///   }

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ringloader/deferred_rows.h"
#include "ringloader/transform_step.h"
#include "ringloader/types.h"

namespace ringloader {

/// Samples that are whole files read from their paths (every other Sample field at its
/// default), as columns the caller keeps: sample i's path is `paths[ends[i-1], ends[i])` (the
/// first starts at 0) and its label `labels[i]`, for i < size. The loader reads the columns in
/// place and never copies them, so they must stay allocated and unchanged while it exists;
/// `owner`, when set, is held that long (and released with the loader).
struct SampleColumns {
  const char* paths = nullptr;
  size_t paths_size = 0;
  const int64_t* ends = nullptr;
  const int64_t* labels = nullptr;
  size_t size = 0;
  std::shared_ptr<const void> owner;
};

/// Reads, decodes and batches samples on native threads. Methods are for one consumer thread;
/// Stats() may be called from any thread.
class Loader {
 public:
  /// Validates options (InvalidArgument naming the option) and probes the I/O backend.
  static absl::StatusOr<std::unique_ptr<Loader>> Create(std::vector<Sample> samples,
                                                        LoaderOptions options);
  /// Create for samples that are whole files, given as columns read in place (SampleColumns):
  /// no Sample is made per sample, so a dataset of millions of files costs the loader no memory
  /// a sample. InvalidArgument when the path ends run backwards or past the arena.
  static absl::StatusOr<std::unique_ptr<Loader>> CreateFromColumns(SampleColumns samples,
                                                                   LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Starts `epoch` with the built-in sampler (shuffle/seed/rank/world_size/drop_last), from
  /// batch `first_batch`. Stops any epoch in progress. Adopts the queued epoch when it is this
  /// one from batch 0 (QueueEpoch), else cancels it.
  absl::Status StartEpoch(int64_t epoch, int64_t first_batch = 0);
  /// Starts an epoch with an explicit order: batch b holds indices[offsets[b]..offsets[b+1]),
  /// from batch `first_batch` (a resumed epoch passes its whole order); adopts or cancels the
  /// queued epoch as the overload above. A row's augmentation is
  /// seeded by (seed, epoch, key of its index and its position in `indices`; the index when the
  /// two are equal): repeated indices draw independently, and so do the same positions of other
  /// ranks' shards.
  absl::Status StartEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                          std::vector<int64_t> offsets, int64_t first_batch = 0);
  /// Queues the next epoch with the built-in sampler, so that the pipeline goes on reading and
  /// decoding it (into free slots, within the same slot and prefetch bounds) as soon as the
  /// current epoch's last batch has been dispatched: the pipeline never drains between epochs.
  /// A later StartEpoch(epoch) with the same epoch (and first_batch 0) adopts that work: batches
  /// decoded ahead are delivered, not redone, and are bit-identical to batches decoded on time.
  /// StartEpoch with anything else, Stop() and CancelQueued() cancel it (nothing of it is
  /// delivered). Errors met while decoding ahead are delivered at their batch after adoption.
  /// Replaces an epoch queued before. Without an epoch in progress, the queued one starts now.
  /// A loader with `pipe:` samples queues nothing (returns OK, HasQueuedEpoch() stays false):
  /// each stream has one running command, which the epoch in progress owns until it ends. Nor
  /// does one whose memory budget made it cut its depth (LoaderStats::read_ahead, slots_note).
  absl::Status QueueEpoch(int64_t epoch);
  /// Queues an epoch with an explicit order (as the StartEpoch overload); adopted by a StartEpoch
  /// with equal epoch, seed, indices and offsets, and first_batch 0.
  absl::Status QueueEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                          std::vector<int64_t> offsets);
  /// Cancels the queued epoch, if any, and joins its threads; its slots return to the free list.
  void CancelQueued();
  /// True while an epoch is queued (not yet adopted or cancelled).
  bool HasQueuedEpoch() const;
  /// Next batch in order. OutOfRange at the end of the epoch (IsEndOfEpoch); a sample's failure
  /// (ErrorPolicy::kRaise) is DataLoss with the sample payloads (IsSampleError); FailedPrecondition before
  /// StartEpoch; a sample's error (message and payloads name index and path) at the batch it
  /// belongs to, after all earlier batches — the following call continues with the next batch;
  /// ResourceExhausted when the consumer holds every slot, or every device buffer (the batch is
  /// not lost: release batches and call again); DeadlineExceeded after `timeout_seconds` > 0
  /// without a batch; IsStaleIndex when a `pipe:` stream no longer holds a tar member where its
  /// sample says (Sample::tar_member; the epoch ends there, whatever the ErrorPolicy).
  absl::StatusOr<Batch> Next(double timeout_seconds = 0);
  /// Stops the epoch in progress (and cancels a queued one) and joins its threads. Delivered
  /// batches stay valid.
  void Stop();

  /// Batches in an epoch of the built-in sampler.
  int64_t BatchesPerEpoch() const;
  /// Batches in the epoch in progress.
  int64_t num_batches() const;
  /// Next batch number Next() will deliver.
  int64_t next_batch() const;
  int64_t dataset_size() const;
  /// The groups of the dataset's SourceKind::kDeferred samples, which a feeder hands over while
  /// epochs run (null when no sample is deferred). Owned by the loader.
  DeferredRows* deferred_rows() const;
  const LoaderOptions& options() const;
  /// One sample's output: 3 x output_height() x output_width() in dtype() and layout() (0 x 0
  /// when it depends on the image: LoaderOptions::variable_size).
  int output_height() const;
  int output_width() const;
  DType dtype() const;
  Layout layout() const;
  /// Bytes of one output image (0 when its size depends on the image).
  size_t sample_bytes() const;
  /// The validated chain, e.g. "RandomResizedCrop(224x224) -> Flip(0.5) -> ToTensor -> Normalize".
  std::string DescribeTransform() const;
  /// Bytes of one sample's row in a slot: sample_bytes(), or all its views side by side
  /// (LoaderOptions::views); Batch::sample_bytes() is this.
  size_t row_bytes() const;
  /// Where each view is in a row (LoaderOptions::views), in order; empty for one rendering a
  /// sample.
  std::vector<ViewLayout> views() const;
  /// The variable-size output whose record (LoaderOptions::View::variable) holds `id`, taken
  /// from its batch: call while the batch is held (its outputs are freed with its slot unless
  /// taken). NotFound when it was taken already or its batch is gone.
  absl::StatusOr<SampleOutput> TakeSampleOutput(uint64_t id) const;
  LoaderStats Stats() const;

  /// Decodes and transforms one sample on the calling thread (no batching), into `dst` of
  /// sample_bytes() bytes, with the augmentation seed of (seed, epoch, index).
  absl::Status DecodeSample(int64_t index, uint64_t seed, int64_t epoch, void* dst) const;

  /// Returns the destination for an output of height x width (dtype(), layout(),
  /// 3 channels), or null to refuse.
  using OutputAllocator = std::function<void*(int height, int width)>;
  /// Decodes one sample of any output size: `allocate` is called once, with the sample's size,
  /// before anything is written. The augmentation seed is that of (seed, epoch, key), where key
  /// defaults to the index when negative.
  absl::Status DecodeSample(int64_t index, uint64_t seed, int64_t epoch, int64_t key,
                            const OutputAllocator& allocate) const;

 private:
  class Impl;  // everything else: slots, placement, epochs (pipeline/loader.cc)
  friend struct LoaderFactory;  // the library's own factory (pipeline/loader_factory.h)
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The threads LoaderOptions::auto_threads chooses for `options` (its placement, cgroup paths,
/// training_threads and a given reader_threads), without creating a loader.
struct AutoThreads {
  int decode_threads = 1;
  int reader_threads = 1;
  int usable_cpus = 1;    ///< CPUs this process may use (affinity ∩ node, capped by the quota).
  int reserved_cpus = 0;  ///< Left to the training loop.
  std::string note;       ///< As LoaderStats::threads_note.
};
absl::StatusOr<AutoThreads> ChooseAutoThreads(const LoaderOptions& options);

/// Lists an image folder exactly as torchvision.datasets.ImageFolder does: class folders sorted,
/// files found recursively (following links) in sorted order, extensions matched
/// case-insensitively against torchvision's list. Labels are class positions.
absl::StatusOr<std::vector<Sample>> ScanImageFolder(const std::string& root,
                                                    std::vector<std::string>* classes = nullptr);

/// A compact sample list: every path in one arena, `ends[i]` the end of path i in it (path i is
/// `paths[ends[i-1], ends[i])`, the first starts at 0), and an int32 label per sample. An
/// ImageNet-sized folder costs its path bytes plus 12 bytes a sample, against a Sample's ~100
/// plus a heap string: this is what the Python datasets keep.
struct SampleTable {
  std::string paths;
  std::vector<uint64_t> ends;
  std::vector<int32_t> labels;
  size_t size() const { return labels.size(); }
  void Add(const std::string& path, int32_t label) {
    paths += path;
    ends.push_back(paths.size());
    labels.push_back(label);
  }
};

/// ScanImageFolder's listing, as a SampleTable (no per-sample allocation).
absl::StatusOr<SampleTable> ScanImageFolderTable(const std::string& root,
                                                 std::vector<std::string>* classes = nullptr);

/// Reads a file list: one sample per line, "<path> <label>" (separated by spaces or a tab; the
/// label is the last field, so paths may contain spaces). Relative paths are resolved against
/// the list's folder; blank lines and lines starting with '#' are skipped. Errors name the list
/// file and the line number.
absl::StatusOr<std::vector<Sample>> ReadFileList(const std::string& list_path);

}  // namespace ringloader
