#pragma once
/// The value types of ringloader's C++ API: a dataset's samples, the options that shape a
/// Loader, a delivered Batch, the loader's statistics, and the status predicates for its errors.
/// Everything here is plain data; the Loader itself is in ringloader/ringloader.h.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "ringloader/source_kind.h"
#include "ringloader/transform_step.h"

namespace ringloader {

// Seams the loader can be given (slot memory, a device runtime) and what batches hand out to
// keep their memory alive. Their definitions are the library's own; users pass them on.
class SlotAllocator;
class SlotLease;
class DeviceLease;
class DeviceRuntime;

/// Which file reader the loader uses: io_uring (many reads in flight), pread, or io_uring when
/// the kernel allows it (kAuto: LoaderStats::io_note says why not).
enum class IoBackend : uint8_t { kAuto = 0, kUring = 1, kPread = 2 };

/// Pillow's decompression-bomb error threshold (2 x MAX_IMAGE_PIXELS).
inline constexpr uint64_t kDefaultMaxImagePixels = 178956970;

/// One item of a dataset: a file (or a byte range of one, e.g. a member of a tar shard) and its
/// class label. With `source` SourceKind::kPipe, `path` is `pipe:COMMAND` and names the stdout of
/// `/bin/sh -c COMMAND`; such a sample must give its byte range (see StreamCache in
/// csrc/io/stream_cache.h). Any other sample is a file, whatever its name looks like.
struct Sample {
  Sample() = default;
  Sample(std::string path_, int64_t label_, uint64_t offset_ = 0, int64_t length_ = -1, std::string error_ = {})
      : path(std::move(path_)), label(label_), offset(offset_), length(length_), error(std::move(error_)) {}
  std::string path;
  int64_t label = 0;
  uint64_t offset = 0;  ///< First byte of the sample's data within `path`.
  int64_t length = -1;  ///< Bytes from `offset`; -1 = the whole file.
  /// Non-empty: the sample is known bad (e.g. a shard member without an image); it fails with
  /// DataLoss(error) at its batch, like any sample error, and ErrorPolicy handles it.
  std::string error;
  /// kPipe only when whoever built the sample was given a command (never from a path's spelling).
  SourceKind source = SourceKind::kFile;
  /// The byte range is a member's data in a tar archive (a WebDataset shard). A kPipe stream then
  /// checks, as it passes, that the 512 bytes before `offset` are the header of a regular member
  /// of `length` bytes: anything else means the index the range came from is out of date, and the
  /// epoch fails with IsStaleIndex.
  bool tar_member = false;
  /// kPipe, not 0: the stream's length when its index was made, on the index's last member. Once
  /// the stream has passed this member it is read to its end, which must be exactly here: members
  /// appended since (every indexed header still in place) make the epoch fail with IsStaleIndex.
  uint64_t stream_end = 0;
  /// kDeferred: the group whose row `offset` this sample is (see DeferredRows). The rows of a
  /// group are consecutive samples, row 0 first.
  int32_t group = -1;
  /// kMemory: the encoded image is `memory[0, length)`, owned by the caller and unchanged while
  /// the loader exists; nothing is read (the decoders work on it directly).
  const uint8_t* memory = nullptr;
  /// A sample of several files (an image and its mask, a stereo pair): files 1, 2, ... after the
  /// sample's own (file 0, above), each read whole from `path` or, with `memory`, held in memory
  /// as `memory[0, length)` (then `path` only describes it). LoaderOptions::View::file says
  /// which file a view renders. Files and memory only (never a `pipe:` stream).
  struct File {
    std::string path;
    const uint8_t* memory = nullptr;
    int64_t length = -1;
  };
  std::vector<File> more_files;
};

/// Status payload keys carried by per-sample errors (values: decimal index, path, the reason
/// without the "sample N (path): " prefix, and the code of the underlying failure, e.g.
/// "NOT_FOUND" for a missing file, "OUT_OF_RANGE" for the pixel limit).
inline constexpr char kSampleIndexPayload[] = "ringloader.sample_index";
inline constexpr char kSamplePathPayload[] = "ringloader.sample_path";
inline constexpr char kSampleReasonPayload[] = "ringloader.sample_reason";
inline constexpr char kSampleCausePayload[] = "ringloader.sample_cause";

/// Set on the error that ends an epoch because a shard's index no longer matches the shard (see
/// Sample::tar_member); the value is the shard's path.
inline constexpr char kStaleIndexPayload[] = "ringloader.stale_index";

/// A shard's index is out of date (FailedPrecondition with kStaleIndexPayload): not one bad sample
/// but wrong byte ranges and labels, so no ErrorPolicy hides it.
inline bool IsStaleIndex(const absl::Status& status) {
  return absl::IsFailedPrecondition(status) && status.GetPayload(kStaleIndexPayload).has_value();
}

/// One sample could not be read or decoded. Such a status always has code DataLoss, whatever
/// the cause (kSampleCausePayload has that), so no cause can be taken for another outcome: an
/// image over the pixel limit is not the end of the epoch.
inline bool IsSampleError(const absl::Status& status) {
  return absl::IsDataLoss(status) && status.GetPayload(kSampleIndexPayload).has_value();
}

/// Loader::Next() reached the end of the epoch (OutOfRange, never a sample's error).
inline bool IsEndOfEpoch(const absl::Status& status) {
  return absl::IsOutOfRange(status) && !status.GetPayload(kSampleIndexPayload).has_value();
}

/// What happens to a sample that cannot be read or decoded.
enum class ErrorPolicy : uint8_t {
  kRaise = 0,    ///< Next() returns the error at the sample's batch (after all earlier batches).
  kSkip = 1,     ///< The sample is left out: its batch is delivered shorter (an all-bad batch is
                 ///< skipped entirely). Counted in LoaderStats::skipped.
  kReplace = 2,  ///< The row is filled with a substitute sample drawn deterministically from
                 ///< (seed, epoch, index and position, attempt); batches keep their size. Counted in
                 ///< LoaderStats::replaced. After 16 failed random draws it walks on through
                 ///< up to 256 samples; if none decodes, the error is raised.
};

/// Where the loader's reader/decode threads run and its slot memory lives.
struct NumaOption {
  enum class Mode : uint8_t {
    kOff = 0,   ///< No pinning, no memory binding (the default).
    kAuto = 1,  ///< The staging GPU's node; without a device, the node of the CPU the
                ///< constructing thread runs on; nothing when that is unknown.
    kNode = 2,  ///< `node`; InvalidArgument at Create when it does not exist.
  };
  Mode mode = Mode::kOff;
  int node = -1;                    ///< kNode only.
  /// kAuto without a staging device: the PCI bus id of this process's GPU (a rank that copies
  /// batches to its GPU itself), placed as a staging device's would be. "": none.
  std::string gpu_bus_id;
  /// Ranks sharing the machine: this process's threads take part `share_index` of
  /// `share_count` equal, contiguous parts of the CPUs they would be placed on (the node's
  /// allowed CPUs, or all allowed CPUs when not placed), so the ranks' threads run on disjoint
  /// CPUs. share_count <= 1: no division.
  int share_index = 0;
  int share_count = 1;
};

/// Everything that shapes a Loader. Validated by Loader::Create.
struct LoaderOptions {
  int batch_size = 64;           ///< Samples per batch (>= 1).
  int num_workers = 2;           ///< Decode threads (>= 1).
  int reader_threads = 1;        ///< I/O threads (>= 1).
  int io_depth = 32;             ///< Reads in flight per reader thread.
  IoBackend io = IoBackend::kAuto;
  int prefetch_batches = 4;      ///< Batches in the pipeline ahead of the consumer (>= 1); with
                                 ///< auto_prefetch, the starting depth.
  int max_slots = 0;             ///< Slot bound incl. batches the consumer holds (0: as many as
                                 ///< fit in max_memory, at most 1024); never more than fit.
  /// Size num_workers and reader_threads from the CPUs this process may use (affinity mask, the
  /// NUMA node's CPUs when `numa` places threads, the cgroup CPU quota), leaving room for the
  /// training loop's own threads: the rule is in common/cpu_budget.h and the README. num_workers
  /// is then ignored; reader_threads 0 is chosen too, > 0 is kept. LoaderStats::threads_note says
  /// what was chosen and from which limits.
  bool auto_threads = false;
  /// Compute threads of the training loop when set explicitly (torch.set_num_threads); -1: not
  /// known, then OMP_NUM_THREADS is read from the environment. Only used by auto_threads.
  int training_threads = -1;
  std::string training_threads_source = "training_threads";  ///< Named in the threads note.
  /// Adaptive prefetch: start at prefetch_batches and grow by one batch each time the consumer
  /// has to wait in Next() after the pipeline stood idle with every slot complete (see
  /// PrefetchGovernor), up to half the slots max_memory allows (at most 64): the other half is
  /// for batches the consumer keeps. Host path only: with a device nothing grows (the ring keeps
  /// prefetch_batches + 1 buffers) and LoaderStats::prefetch_max is prefetch_batches.
  bool auto_prefetch = false;
  /// Bytes of slot memory (batch slots x slot bytes, batches the consumer keeps included) the
  /// loader may use. 0: a quarter of the available memory (MemAvailable, capped by the cgroup
  /// memory limit less its usage), at most 2 GiB. Slots and depth are cut to fit it (PlanSlots in
  /// pipeline/slot_pool.h): prefetch_batches to slots - 1, max_slots to what fits, and then the
  /// epoch read-ahead is off; LoaderStats::slots_note says what was cut. Below 2 slots Create
  /// fails (InvalidArgument naming the budget, the bytes needed and what to change), except that
  /// the default rises to 2 slots when they fit in half of the available memory. Not covered:
  /// file read buffers (reader_threads x io_depth + 4 x num_workers per epoch, each as large as
  /// the largest file it read; a second set while the next epoch is read ahead) and device
  /// buffers.
  size_t max_memory = 0;
  bool drop_last = false;        ///< Built-in sampler: drop a short last batch.
  bool shuffle = false;          ///< Built-in sampler: shuffle each epoch by (seed, epoch).
  uint64_t seed = 0;             ///< Shuffle and augmentation seed.
  int rank = 0;                  ///< Built-in sampler: this process's shard ...
  int world_size = 1;            ///< ... of this many.
  uint64_t max_image_pixels = kDefaultMaxImagePixels;  ///< Decompression-bomb limit.
  size_t max_file_bytes = size_t{256} << 20;           ///< Larger files are refused.
  /// When no batch has completed for this long while batches are in flight, Stats() reports the
  /// epoch as stalled (LoaderStats::stalled) with what each stage holds. A report only: nothing
  /// is cancelled (a huge image may legitimately take long; `Next(timeout)` bounds a wait).
  double stall_seconds = 60;
  bool fast_decode = true;       ///< Allow DCT-scaled decoding (not pixel-exact vs Pillow);
                                 ///< region-of-interest decoding is exact and always on.
  /// With fast_decode: the "fastest" level (a DCT scale covering 3/4 of the output, which the
  /// resampler enlarges, and the fast integer IDCT) instead of "scale" (a DCT scale covering
  /// the whole output, the accurate IDCT).
  bool fast_decode_fastest = false;
  /// Refuse JPEG data libjpeg only warns about (extraneous bytes before a marker, premature end
  /// of a data segment, bad Huffman codes...: it decodes past them into wrong pixels) as
  /// DataLoss. False accepts them, as Pillow and torchvision do.
  bool strict_decode = true;
  /// Turn images upright by their EXIF orientation before the transform, as Pillow's
  /// ImageOps.exif_transpose does (torchvision does not: default false).
  bool exif_transpose = false;
  ErrorPolicy on_error = ErrorPolicy::kRaise;
  std::vector<TransformStep> transform;  ///< torchvision-style chain; must fix the output size
                                         ///< (unless variable_size).
  /// Accept a chain whose output size depends on the image (no fixed-size geometric step, or
  /// padding after a size-keeping resize). Such a loader decodes single samples only
  /// (DecodeSample with an allocator); StartEpoch refuses.
  bool variable_size = false;
  DType dtype = DType::kFloat32;
  Layout layout = Layout::kCHW;
  /// One rendering of each sample (see `views`).
  struct View {
    std::vector<TransformStep> transform;  ///< must fix the output size
    DType dtype = DType::kFloat32;
    /// Render Pillow's convert("L") of the image (ITU-R 601-2 luma, Pillow's integer
    /// rounding), replicated into the 3 output channels: the caller keeps one.
    bool luma = false;
    /// Render the file as a label image (ImageDecoder::DecodeLabels: palette indices or gray
    /// values as stored), replicated into the 3 output channels: the caller keeps one. Its
    /// chain must resample with nearest only (the caller checks: the values are labels).
    bool mask = false;
    /// Which of the sample's files the view renders: 0 its own, k its Sample::more_files[k-1].
    /// Each file is decoded once however many views render it.
    int file = 0;
    /// Record, after the view's image in each row, the geometry its chain applied
    /// (kGeometryFields float64, pipeline/views.h): what a caller needs to move boxes and
    /// keypoints with the pixels. The chain's image stage must not move pixels (colour only),
    /// except a RandomRotation or RandomAffine as its first step, whose draws are recorded.
    bool geometry = false;
    /// Draw the geometric steps exactly as view 0 does (the same crop and flips of the same
    /// image: a label image's view beside its photo's). The chain's geometric steps must be
    /// view 0's (their interpolation may differ) and it holds no image-stage or random output
    /// step: colour draws are view 0's own, never applied here.
    bool share_geometry = false;
    /// Resize with nearest as torch's interpolate(mode="nearest") does on a tensor (source
    /// index floor(i * in / out), in float): what torchvision v2 does to a tv_tensors.Mask,
    /// where Pillow's NEAREST (which the image's view follows) picks from pixel centres. Only
    /// with `mask`.
    bool tensor_nearest = false;
    /// The chain's output size may depend on the image (a Resize(200), no resize at all): each
    /// sample's rendering goes to a buffer of its own, charged to max_memory while it is held,
    /// and the row holds its record (kOutputRecordFields int64: id, height, width, bytes; id 0:
    /// none), which Loader::TakeSampleOutput(id) turns into the output. A fixed-size chain
    /// renders into the row as without it.
    bool variable = false;
  };
  /// Several renderings of each sample (multi-crop): when not empty, each sample's image is
  /// decoded once and rendered by every view's chain (in `layout`), with its own draws, into
  /// one row of the slot holding the views one after another (Loader::views() says where);
  /// `transform` and `dtype` must be left empty and default. Batch::images() is then row
  /// memory, Loader::row_bytes() a row.
  std::vector<View> views;
  /// Page-locked (cudaHostAlloc) slots when a GPU is visible; otherwise host memory, and
  /// LoaderStats::memory_note says why.
  bool pin_memory = false;
  /// Slot memory; null = chosen by pin_memory (and numa).
  std::shared_ptr<SlotAllocator> allocator;
  /// Thread and memory placement (see NumaOption).
  NumaOption numa;
  /// "cpu" (batches stay in host slots) or "cuda" / "cuda:N": as soon as a batch is complete, a
  /// stage thread copies it on the loader's own stream into a ring of `prefetch_batches + 1`
  /// device buffers (up to `prefetch_batches` staged ahead of the consumer, plus the one it is
  /// using), and the host slot is recycled once the copy completed. Without a visible GPU (or a
  /// CUDA build), Create fails with FailedPrecondition. Implies pinned slots unless `allocator`
  /// is given.
  std::string device = "cpu";
  /// Stages through this runtime instead of CUDA (and regardless of `device`): the tests'
  /// simulated device, or another backend. Null: CUDA when `device` names one.
  std::shared_ptr<DeviceRuntime> device_runtime;
};

/// A delivered batch. Its memory stays valid while any copy of the Batch (or a lease taken
/// from it) is alive; then the slot returns to the loader.
/// Where one view (LoaderOptions::views) is in a sample's row: `offset` bytes in, a 3 x height x
/// width image in `dtype` and the loader's layout (`luma`: the 3 channels are equal).
struct ViewLayout {
  size_t offset = 0;
  int height = 0;
  int width = 0;
  DType dtype = DType::kFloat32;
  bool luma = false;
  bool mask = false;  ///< a label image: the 3 channels are equal
  /// LoaderOptions::View::geometry: the record's byte offset in a row, else -1.
  int64_t geometry_offset = -1;
  /// LoaderOptions::View::variable with a chain whose size depends on the image: the row holds
  /// the output's record at `offset`, not its pixels.
  bool variable = false;
};

/// Fields (int64) of a variable-size view's record in a row: the output's id, its height, width
/// and bytes (LoaderOptions::View::variable).
inline constexpr int kOutputRecordFields = 4;

/// One variable-size output taken from its batch (Loader::TakeSampleOutput): 3 channels of
/// `dtype` in the loader's layout, kept alive (and charged to max_memory) by `hold`.
struct SampleOutput {
  std::shared_ptr<void> hold;
  uint8_t* data = nullptr;
  size_t bytes = 0;
  int height = 0;
  int width = 0;
  DType dtype = DType::kUint8;
};

class Batch {
 public:
  Batch() = default;
  /// Batch number within the epoch (0-based).
  int64_t number() const { return number_; }
  /// Rows in this batch (the last one may be short).
  int size() const { return size_; }
  int channels() const { return 3; }
  int height() const { return height_; }
  int width() const { return width_; }
  DType dtype() const { return dtype_; }
  Layout layout() const { return layout_; }
  /// Image tensor shape: [B,3,H,W] (kCHW) or [B,H,W,3] (kHWC).
  std::vector<int64_t> image_shape() const;
  /// Image bytes: size() * sample_bytes().
  void* images() const { return images_; }
  size_t sample_bytes() const { return sample_bytes_; }
  /// Labels, size() of them, in host memory (for a device batch: a small host copy).
  int64_t* labels() const { return labels_; }
  /// Dataset indices of the rows, size() of them, in host memory (as labels()).
  int64_t* indices() const { return indices_; }
  /// True when the slot is page-locked host memory.
  bool pinned() const { return pinned_; }
  /// The slot's lease: keep a copy to keep the memory alive (e.g. in a tensor deleter).
  std::shared_ptr<SlotLease> lease() const { return lease_; }
  /// CUDA device the batch was staged to, or -1 for a host batch (LoaderOptions::device).
  int device() const { return device_; }
  /// A device batch's buffer (the whole slot: images, then labels, then indices). Null for host
  /// batches. For a device batch images() is null (the host slot is recycled once its copy
  /// completed); labels() and indices() point to host copies, so bookkeeping never needs the
  /// device. The copy may still be running when Next() returns: order work after it with
  /// DeviceLease::WaitOn(stream) (DLPack export does).
  std::shared_ptr<DeviceLease> device_lease() const { return device_lease_; }
  /// Device addresses of a device batch's images, labels and indices (null for host batches).
  void* device_images() const { return device_images_; }
  int64_t* device_labels() const { return device_labels_; }
  int64_t* device_indices() const { return device_indices_; }

 private:
  friend struct BatchAccess;  // the loader fills batches in
  std::shared_ptr<SlotLease> lease_;
  std::shared_ptr<DeviceLease> device_lease_;
  std::shared_ptr<const std::vector<int64_t>> host_rows_;  // device batch: labels, then indices
  int device_ = -1;
  void* device_images_ = nullptr;
  int64_t* device_labels_ = nullptr;
  int64_t* device_indices_ = nullptr;
  int64_t number_ = 0;
  int size_ = 0;
  int height_ = 0, width_ = 0;
  DType dtype_ = DType::kFloat32;
  Layout layout_ = Layout::kCHW;
  void* images_ = nullptr;
  size_t sample_bytes_ = 0;
  int64_t* labels_ = nullptr;
  int64_t* indices_ = nullptr;
  bool pinned_ = false;
};

/// Counters since the loader was created.
struct LoaderStats {
  int64_t samples = 0;           ///< Samples decoded into slots.
  int64_t batches = 0;           ///< Batches delivered.
  int64_t batches_completed = 0;  ///< Batches complete in their slots (marked ready for Next()).
  int64_t errors = 0;            ///< Samples that failed (whatever the policy did next).
  int64_t skipped = 0;           ///< Failed samples left out (ErrorPolicy::kSkip).
  int64_t replaced = 0;          ///< Failed samples replaced by a substitute (kReplace).
  int64_t decodes = 0;           ///< Images decoded (read-ahead work included): one a sample,
                                 ///< whatever its number of views.
  int64_t views_rendered = 0;    ///< Outputs rendered from them (samples x views).
  int64_t bytes_read = 0;        ///< Includes bytes read from `pipe:` commands.
  int64_t stream_restarts = 0;   ///< `pipe:` commands restarted for a member behind the stream.
  /// HTTP range requests (retries included) and their bytes, for remote shards of which an epoch
  /// wanted a few members (io/range_reads.h); totals of the process, not of this loader.
  int64_t range_requests = 0;
  int64_t range_bytes = 0;
  /// Deferred rows (DeferredRows): groups handed over (and their bytes), bytes held now and at
  /// most, times a reader waited for a group and for how long, groups let in over the budget,
  /// groups whose last rows were moved to a smaller block (DeferredRows::Group::row_uses).
  int64_t row_groups_read = 0;
  int64_t row_group_bytes_read = 0;
  int64_t row_group_bytes_held = 0;
  int64_t row_group_bytes_peak = 0;
  int64_t row_group_waits = 0;
  double row_group_wait_seconds = 0;
  int64_t row_groups_over_budget = 0;
  int64_t row_group_compactions = 0;  ///< rows left to decode moved out of a mostly done group
  double read_seconds = 0;       ///< Reader threads busy (opening, submitting, reaping).
  double decode_seconds = 0;     ///< Decode threads busy (decode + transform + write).
  double wait_seconds = 0;       ///< Consumer blocked in Next().
  int slots_allocated = 0;
  int slots_held = 0;
  std::string io_backend;        ///< "io_uring" or "pread".
  std::string io_note;           ///< Why io_uring was not used, when it was not.
  std::string memory;            ///< Slot allocator name.
  std::string memory_note;       ///< Why pinned memory was not used, when it was asked for.
  int numa_node = -1;            ///< Node threads and slot memory were placed on; -1: none.
  std::string numa_cpus;         ///< CPUs the pipeline threads are pinned to ("": not pinned).
  std::string numa_note;         ///< How the placement was chosen, or why nothing was placed.
  int threads_pinned = 0;        ///< Pipeline threads started with the pinning applied.
  int decode_threads = 0;        ///< Decode threads per epoch (chosen, with auto_threads).
  int reader_threads = 0;        ///< Reader threads per epoch.
  /// How the thread counts were chosen: "decode 3, readers 1: 4 usable CPUs (affinity 8, cgroup
  /// quota 4.0 from ...), 1 reserved for the training loop (...)", or "set explicitly".
  std::string threads_note;
  int prefetch_batches = 0;      ///< Pipeline depth now (grows with auto_prefetch).
  int prefetch_max = 0;          ///< Depth auto_prefetch may grow to (= prefetch_batches without).
  int prefetch_grown = 0;        ///< Times auto_prefetch deepened the pipeline.
  int max_slots = 0;             ///< Slot bound (max_memory / slot bytes, or max_slots).
  int64_t max_memory = 0;        ///< The slot-memory budget in force (given, or the default) ...
  std::string memory_budget_note;  ///< ... and where it came from.
  std::string slots_note;        ///< What was cut to fit the budget (prefetch, max_slots, the
                                 ///< read-ahead), and why; "" when nothing was.
  bool read_ahead = true;        ///< QueueEpoch reads the next epoch ahead (false: pipe: samples,
                                 ///< or a budget too tight for it).
  int read_buffers = 0;          ///< File buffers per epoch (outside the budget: each grows to
                                 ///< the largest file it read; a second set for a queued epoch).
  int64_t slot_bytes = 0;        ///< Bytes per slot.
  int64_t producer_waits = 0;    ///< Times the dispatcher waited for a free slot (every slot
                                 ///< in use: being filled, or complete and not yet taken).
  int64_t outputs_new = 0;       ///< Variable-size outputs (an image whose size depends on it)
                                 ///< rendered into a new buffer, its pages faulted in afresh.
  int64_t outputs_reused = 0;    ///< ... into a buffer a dropped output left (kept, up to the
                                 ///< most the outputs in use ever held, within max_memory).
  int64_t output_bytes_kept = 0; ///< Bytes of such buffers kept for reuse now.
  int64_t idle_spells = 0;       ///< Times the pipeline stood idle: every batch it had started
                                 ///< complete and no slot to start another (it was ahead of the
                                 ///< consumer). What auto_prefetch grows on.
  std::string thread_cpus;       ///< Union of the CPUs those threads read back with
                                 ///< sched_getaffinity after pinning ("" before any epoch).
  std::string device;            ///< "cpu" or "cuda:N".
  int device_buffers = 0;        ///< Device buffers allocated (bounded by prefetch_batches).
  int device_buffers_held = 0;   ///< ... of which hold a batch (staged ahead or held by the consumer).
  int64_t device_bytes = 0;      ///< Bytes copied to the device (completed copies).
  double device_copy_seconds = 0;  ///< Copy-engine busy time as the stager observed it.
  int64_t samples_ahead = 0;     ///< Samples decoded for the queued epoch (Loader::QueueEpoch),
                                 ///< not yet in `samples`: they join it (with their errors,
                                 ///< skips and replacements) when the epoch is adopted.
  int64_t epochs_queued = 0;     ///< Epochs queued by QueueEpoch.
  int64_t epochs_adopted = 0;    ///< ... of which StartEpoch adopted (their work done ahead kept).
  /// Seconds since the epoch in progress last completed a batch (or started); 0 between epochs.
  double seconds_since_progress = 0;
  /// Batches are in flight and none has completed for LoaderOptions::stall_seconds.
  bool stalled = false;
  /// What each stage of the epoch in progress holds now ("" between epochs): batches in
  /// flight, complete and taken; the dispatcher; readers waiting for requests or buffers, reading
  /// or streaming; reads outstanding; free read buffers; the decode queue; busy decoders.
  std::string pipeline_state;
  /// The memo of JPEG scans read clean to their end (RINGLOADER_SCAN_MEMO): "file PATH" (shared
  /// by the processes of the machine and kept across runs), "process" or "off"; totals of the
  /// memo, not of this loader.
  std::string scan_memo;
  std::string scan_memo_note;    ///< Why the memo file is not used, when it is not.
  int64_t scan_memo_entries = 0;  ///< Files remembered (by every process sharing the memo) ...
  int64_t scan_memo_slots = 0;    ///< ... of this many slots.
  /// Files whose resume points this process keeps (a later decode of one starts its entropy
  /// decoding above its crop; RINGLOADER_SCAN_INDEX_MB), and the bytes they take.
  int64_t scan_index_scans = 0;
  int64_t scan_index_bytes = 0;
  std::string last_error;
  std::vector<std::string> recent_errors;  ///< The last kRecentErrors errors, oldest first.
};

/// How many recent error messages LoaderStats keeps.
inline constexpr int kRecentErrors = 16;

}  // namespace ringloader
