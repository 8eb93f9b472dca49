#pragma once
// One epoch of the pipeline behind ringloader::Loader: its order, its threads (dispatcher,
// readers, decoders and, with a device, the stage thread) and the window of batches between
// the dispatcher and the consumer.
//
//   dispatcher ──ReadRequest──▶ reader threads ──DecodeItem──▶ decode workers ──▶ slot rows
//       │ (acquires slots in batch order)      (FileFetcher)          │ (countdown per batch)
//       ▼                                                             ▼
//   BatchTask window ◀──────────────── ready (mutex/condvar, once per batch) ── Next()
//
// Per-sample hand-offs go through lock-free BoundedQueues; per-batch events (slot acquired,
// batch complete, batch consumed) take a mutex, which costs nothing at batch granularity.
//
// With a device, a stage thread sits between the window and Next(): it takes each batch as soon
// as it is complete, starts its copy into a device buffer (DeviceStager), and queues the device
// batch for Next(), so a batch is on its way to the GPU before the training step asks for it.
//
// An epoch sees its loader only through EpochContext: what the loader owns and lends it for the
// epoch's life (samples, options, slots, sample readers, counters) and the two calls back into it
// (thread placement, and the hand-off to a queued epoch once everything is dispatched). How a
// sample's bytes are got is its SampleReader's business (pipeline/readers/sample_reader.h):
// the epoch asks it, and never looks at the sample's kind.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "decode/image_decoder.h"
#include "io/reader.h"
#include "pipeline/bounded_queue.h"
#include "pipeline/readers/sample_reader.h"
#include "pipeline/sample_store.h"
#include "pipeline/slot_pool.h"
#include "pipeline/views.h"
#include "ringloader/types.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace ringloader {

class DeviceLease;
class DeviceStager;
struct LoaderCounters;
struct RenderState;

using Clock = std::chrono::steady_clock;

inline int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

inline int64_t NanosSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

struct ReadRequest {
  int64_t batch = 0;
  int32_t row = 0;
  int64_t index = 0;
};

struct DecodeItem {
  ReadRequest request;
  int buffer = -1;
  absl::Status status;  // the read's outcome
};

// Where things are in a slot: batch_size images, then batch_size labels, then batch_size
// dataset indices (int64 each). One definition for the dispatcher, the workers and Next().
struct SlotLayout {
  size_t sample_bytes;
  int batch_size;

  size_t image_bytes() const { return sample_bytes * static_cast<size_t>(batch_size); }
  size_t total_bytes() const { return image_bytes() + 2 * sizeof(int64_t) * static_cast<size_t>(batch_size); }
  int64_t* labels(uint8_t* base) const { return reinterpret_cast<int64_t*>(base + image_bytes()); }
  int64_t* indices(uint8_t* base) const { return labels(base) + batch_size; }
};

// `row_bytes`: one sample's row (its image, or all its views: EpochContext::row_bytes).
inline SlotLayout LayoutOf(size_t row_bytes, int batch_size) { return SlotLayout{row_bytes, batch_size}; }

// Every sample failure leaves the loader as DataLoss (see IsSampleError): its cause's code
// (OutOfRange for the pixel limit or a file over max_file_bytes) must never read as the end of
// the epoch. The cause's code and message travel as payloads.
absl::Status AnnotateSampleError(const absl::Status& cause, int64_t index, const std::string& path);

// ErrorPolicy::kReplace walks at most this many samples after its random draws failed.
inline constexpr int64_t kReplaceWalk = 256;

// ErrorPolicy::kReplace's substitutes for a failed row whose seed is `sample_seed`, among `count`
// candidates: attempts 0..15 are random draws, the rest a walk onward from the last draw (a
// dataset with many bad files still finds its good ones; the bound keeps an all-bad one from
// costing O(N) per sample). ReplaceCandidate is the offset of attempt `attempt` in the run.
inline uint64_t ReplaceAttempts(int64_t count) {
  return 16 + static_cast<uint64_t>(std::min<int64_t>(count, kReplaceWalk));
}
inline int64_t ReplaceCandidate(uint64_t sample_seed, uint64_t attempt, int64_t count) {
  const uint64_t draw = attempt < 16 ? Mix64(sample_seed + attempt + 1) : Mix64(sample_seed + 16) + (attempt - 16);
  return static_cast<int64_t>(draw % static_cast<uint64_t>(count));
}

// The decoder a decode worker (or a single-sample decode) uses, set up from the loader's
// options: the one place LoaderOptions reach the decoder, so every path decodes alike.
std::unique_ptr<ImageDecoder> MakeDecoder(const LoaderOptions& options);

// Decodes one sample's files into its row at `dst` with the draws of `sample_seed`: every view
// of `views` (pipeline/views.h), each file decoded once, or, without views, file 0 with
// `pipeline`. Counts the decodes and the renderings in `counters`. A variable-size view's
// output goes to the buffer `sink` gives (Epoch::SinkFor), its record into the row.
absl::Status DecodeRow(ImageDecoder& decoder, RenderState& state, const TransformPipeline& pipeline,
                       const ViewSet* views, absl::Span<const EncodedFile> files, uint64_t sample_seed,
                       uint8_t* dst, LoaderCounters* counters, const OutputSink* sink = nullptr);

// Counts a thread in a state (waiting for a slot, a request, a buffer...) for as long as it
// lives. Relaxed: the gauges are a snapshot for the stall report, never a synchronisation.
class GaugeScope {
 public:
  explicit GaugeScope(std::atomic<int>& gauge) : gauge_(gauge) { gauge_.fetch_add(1, std::memory_order_relaxed); }
  ~GaugeScope() { gauge_.fetch_sub(1, std::memory_order_relaxed); }
  GaugeScope(const GaugeScope&) = delete;
  GaugeScope& operator=(const GaugeScope&) = delete;

 private:
  std::atomic<int>& gauge_;
};

// A loader's counts (LoaderStats), written by its epochs' threads.
struct LoaderCounters {
  std::atomic<int64_t> samples{0}, batches{0}, errors{0}, skipped{0}, replaced{0}, bytes_read{0};
  std::atomic<int64_t> read_ns{0}, decode_ns{0}, wait_ns{0};
  std::atomic<int64_t> epochs_queued{0}, epochs_adopted{0};
  std::atomic<int> threads_pinned{0};
  std::atomic<int> prefetch_grown{0};
  std::atomic<int64_t> idle_spells{0};
  std::atomic<int64_t> batches_completed{0};
  // Machine work, counted at once like decode_ns (read-ahead included): images decoded, and
  // what was rendered from them (one a sample, or its views).
  std::atomic<int64_t> decodes{0}, views_rendered{0};
  mutable std::mutex mu;
  std::deque<std::string> recent_errors ABSL_GUARDED_BY(mu);
  std::vector<int> thread_cpus ABSL_GUARDED_BY(mu);  // union of what pinned threads read back
  std::string pin_error ABSL_GUARDED_BY(mu);

  void RecordError(const absl::Status& status) {
    errors.fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(mu);
    recent_errors.emplace_back(status.message());
    if (recent_errors.size() > kRecentErrors) recent_errors.pop_front();
  }

  // Adds the sample counts and errors of an adopted epoch's own counters (see Epoch).
  void Add(const LoaderCounters& other) {
    samples.fetch_add(other.samples.load(std::memory_order_relaxed), std::memory_order_relaxed);
    errors.fetch_add(other.errors.load(std::memory_order_relaxed), std::memory_order_relaxed);
    skipped.fetch_add(other.skipped.load(std::memory_order_relaxed), std::memory_order_relaxed);
    replaced.fetch_add(other.replaced.load(std::memory_order_relaxed), std::memory_order_relaxed);
    std::scoped_lock lock(mu, other.mu);
    for (const std::string& e : other.recent_errors) recent_errors.push_back(e);
    while (recent_errors.size() > kRecentErrors) recent_errors.pop_front();
  }
};

// Fills in a Batch (Batch befriends it; its fields are read-only to users).
struct BatchAccess {
  // A Batch's shape fields for batch `number` of `size` samples (memory set by the caller).
  // `row_bytes` is a sample's row (EpochContext::row_bytes).
  static Batch Shell(const TransformPipeline& pipeline, size_t row_bytes, int64_t number, int size);
  // A host batch in slot memory at `base`, kept alive by `lease`.
  static void SetHost(Batch& batch, uint8_t* base, const SlotLayout& layout,
                      std::shared_ptr<SlotLease> lease, bool pinned);
  // A device batch: the device buffer at `device_base` (kept by `lease`), and host copies of
  // its labels, then indices (`rows`).
  static void SetDevice(Batch& batch, int device, uint8_t* device_base, const SlotLayout& layout,
                        std::shared_ptr<DeviceLease> lease,
                        std::shared_ptr<std::vector<int64_t>> rows, bool pinned);
};

class Epoch;

// What an epoch needs from its loader. The loader owns everything pointed to, and outlives its
// epochs (it cancels and joins them before it changes or frees any of it).
struct EpochContext {
  const SampleStore* samples = nullptr;
  const LoaderOptions* options = nullptr;
  const TransformPipeline* pipeline = nullptr;  // with views: view 0's (it describes the loader)
  const ViewSet* views = nullptr;               // null: one rendering a sample (pipeline)
  size_t row_bytes = 0;                         // a sample's row: its image, or all its views
  IoBackend io_backend = IoBackend::kPread;  // resolved by the loader's probe
  SlotPool* pool = nullptr;
  DeviceStager* stager = nullptr;     // null: host path (Next takes from the window)
  SampleReaders* readers = nullptr;   // how each kind of sample's bytes are got
  int prefetch_cap = 0;               // depth auto_prefetch may grow to
  LoaderCounters* counters = nullptr;  // the loader's (an epoch's own are Epoch::own_counters)
  DecodeBudget* decode_budget = nullptr;  // max_memory's ledger: decoders charge large images to it
  // The same ledger, shared: a variable-size output (ViewSet::variable) holds its grant, and so
  // the ledger, for as long as the consumer keeps it.
  std::shared_ptr<DecodeBudget> budget_owner;
  // Names and pins a pipeline thread, first thing in it.
  std::function<void(const char* name)> enter_thread;
  // Called by the dispatcher once it dispatched its last batch: starts the queued epoch.
  std::function<void(Epoch* epoch)> dispatch_finished;
};

// One epoch in flight. Destroying it cancels and joins everything. The loader's consumer thread
// calls NextHost (host path) or NextStaged (device path); the loader also reads the epoch's
// order, cursors and counts, and sets pipeline_started / dispatch_finished under its hand-off
// mutex (loader.cc). The members are public for that loader; nothing outside pipeline/ includes
// this header.
class Epoch {
 public:
  struct BatchTask {
    int64_t number = -1;            // guarded by ready_mu
    bool ready = false;             // guarded by ready_mu
    int slot = -1;                  // set by the dispatcher before any request is queued
    int size = 0;
    std::atomic<int> remaining{0};  // rows not yet written; the last writer marks it ready
    std::vector<uint8_t> skip;      // per row: left out by ErrorPolicy::kSkip (row's worker writes)
    std::atomic<int> skipped{0};
    std::mutex error_mu;
    int error_row ABSL_GUARDED_BY(error_mu) = INT_MAX;
    absl::Status error ABSL_GUARDED_BY(error_mu);
  };

  // `buffer_set` is this epoch's set of the loader's two; `queued` epochs count apart (see
  // own_counters).
  Epoch(EpochContext context, int64_t epoch_number, uint64_t epoch_seed, std::vector<int64_t> order,
        std::vector<int64_t> batch_offsets, int64_t first_batch, std::vector<ByteBuffer>* buffer_set,
        bool queued);
  ~Epoch() { Cancel(); }

  // An epoch started by StartEpoch starts everything at once. A queued epoch starts its
  // pipeline (dispatcher, readers, decoders) when the epoch before it has dispatched its last
  // batch, and its stage thread only once adopted: the device ring then belongs to the epoch
  // before it until that one is done, so a queued epoch never takes a buffer the consumer's
  // current epoch needs.
  void Start() {
    StartPipeline();
    StartStage();
  }

  // Requires the loader's hand-off mutex (or an epoch nobody else can see yet).
  void StartPipeline();

  // A queued epoch dispatches (so reads and decodes) at most `ahead_limit` batches, the depth
  // the pipeline may grow to (EpochContext::prefetch_cap), until StartEpoch adopts it: however
  // many slots are free (the consumer may have held more while the epoch before it ran), the
  // work done before adoption stays within the rows the caller checks for files changed since
  // it queued the epoch (python/ringloader/loader/_planning.py: _file_states). Adopted() lifts it.
  void Adopted();

  // The device path's stage thread (nothing on the host path).
  void StartStage();

  // Stops every thread and joins it; slots of batches not taken go back to the pool.
  void Cancel();

  BatchTask& Task(int64_t batch) { return window[static_cast<size_t>(batch) % window.size()]; }
  int64_t Offset(int64_t batch) const { return offsets[static_cast<size_t>(batch)]; }

  void MarkReady(BatchTask& task);

  // auto_prefetch: every batch the pipeline started is complete and it has no slot to start
  // another (the producer is ahead and stands still). Caller holds ready_mu.
  bool PipelineIdle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(ready_mu) {
    return in_flight > 0 && ready_count == in_flight && in_flight >= ctx.pool->base_slots();
  }

  void Fail(absl::Status status);

  // A complete batch taken out of the window: its slot, with rows skipped by ErrorPolicy::kSkip
  // closed up. A batch with an error, or with every row skipped, has no slot (it was recycled).
  struct Taken {
    int slot = -1;
    int size = 0;
    absl::Status error;
  };

  // Waits until batch `b` (== taken) is complete and takes it. Not OK when it was not taken: a
  // fatal pipeline error, DeadlineExceeded after `timeout_seconds` > 0, Cancelled, or, for the
  // consumer (`consumer`), ResourceExhausted when it holds every slot. The stage thread instead
  // waits out exhaustion: its slots come back as their copies complete.
  absl::StatusOr<Taken> Take(int64_t b, Clock::time_point start, double timeout_seconds, bool consumer);

  // Host path: the consumer takes batches straight from the window.
  absl::StatusOr<Batch> NextHost(Clock::time_point start, double timeout_seconds);

  // auto_prefetch, before the consumer waits for batch `b`: tells the governor whether `b` is
  // complete and whether the pipeline stands idle (every started batch complete, no slot to
  // start another), and deepens the pipeline by one slot when it says so.
  void AdaptPrefetch(int64_t b);

  // Device path, the stage thread: takes batches in order as they complete and starts their
  // copies, never more than the stager's ring allows; Next() picks them up from `staged`.
  void StageBatches();

  // Device path, the consumer: the next staged batch (its copy may still be running; the
  // consumer's stream waits for it on the GPU).
  absl::StatusOr<Batch> NextStaged(Clock::time_point start, double timeout_seconds);

  // Acquires slots strictly in batch order (so the consumer's next batch is never starved by a
  // later one), writes labels and indices, and queues the batch's reads. A queued epoch first
  // waits for adoption at batch ahead_limit (see Adopted).
  void Dispatch();

  // The dispatcher, before batch `b`: waits while `b` is at or past ahead_limit. False once
  // the epoch is cancelled.
  bool MayDispatch(int64_t b);

  // ErrorPolicy::kReplace draws a failed row's substitute from anywhere in the dataset, so a
  // queued epoch may read files past the rows its caller checks. Before reading one it records
  // the file's identity (NoteAheadFiles); StartEpoch adopts the epoch only when every file so
  // recorded is still the one read (AheadFilesUnchanged), and starts afresh otherwise.
  struct FileIdentity {
    bool exists = false;
    uint64_t device = 0, inode = 0;
    int64_t size = 0, mtime_ns = 0, ctime_ns = 0;
    bool operator==(const FileIdentity& o) const {
      return exists == o.exists && device == o.device && inode == o.inode && size == o.size &&
             mtime_ns == o.mtime_ns && ctime_ns == o.ctime_ns;
    }
  };
  static FileIdentity IdentityOf(const std::string& path);
  void NoteAheadFiles(const Sample& sample);
  bool AheadFilesUnchanged();

  // A reader thread's I/O ring is created and destroyed under RingLifetimeMutex(): a new reader
  // (of a queued epoch, or of another loader) may map its io_uring where an exited, not yet
  // joined reader's ring was. The kernel orders the two, but liburing maps rings with raw
  // syscalls that ThreadSanitizer does not see; the mutex makes that order visible to it. Taken
  // twice per reader thread.
  void Read();

  // A reader blocks (on the request queue or for a free buffer) only while it holds no buffer of
  // its own: a finished read, successful or not (a missing or empty file fails inside Start),
  // keeps its buffer until Poll hands it to the decoders. Blocking with any of them outstanding
  // could wait for a buffer only this thread can free: with every buffer parked in this
  // reader's finished list, the epoch would stop forever.
  void ReadWith(FileFetcher& fetcher);

  // The augmentation seed of a row: (seed, epoch, RowKey(index, position in the epoch's order)).
  // The position, so that copies of one index in an epoch (sampling with replacement) draw
  // independent augmentations; the index too, so that the same position on another rank (same
  // seed, a different shard) does not repeat this row's draws. Positions are absolute (a resumed
  // epoch starts at first_batch of the same order): no dependence on workers or resuming.
  uint64_t RowSeed(const ReadRequest& request) const {
    const int64_t position = Offset(request.batch) + request.row;
    return SampleSeed(seed, static_cast<uint64_t>(epoch), RowKey(request.index, position));
  }

  // ErrorPolicy::kReplace: decode a substitute drawn from (seed, epoch, position, attempt) into
  // the failed row, with the failed row's own augmentation seed, and relabel the row.
  // `bytes` and `more` are the worker's own buffers for a substitute's files.
  // Where the variable-size views of a row of `slot` render (an empty sink without any): a
  // buffer charged to max_memory (DecodeBudget::AcquireOutput), registered with the slot.
  // Batch `batch`'s outputs never wait for room once it is the batch the consumer takes next
  // (`taken`): later batches' outputs may hold the room until it is delivered.
  OutputSink SinkFor(int slot, int64_t batch);

  absl::Status Replace(ImageDecoder& decoder, RenderState& render, ByteBuffer& bytes,
                       std::vector<ByteBuffer>& more, const ReadRequest& request, uint8_t* dst,
                       absl::Status cause);

  void Decode();

  // Device path: what the stage thread hands to Next(), in batch order.
  struct StagedBatch {
    int64_t number;
    absl::Status error;  // the batch's error (Next returns it at this batch)
    Batch batch;
  };

  void PushStaged(StagedBatch batch, bool fatal_error = false);

  void SetStageWaiting(bool waiting);

  bool Matches(int64_t e, uint64_t s, const std::vector<int64_t>& order,
               const std::vector<int64_t>& batch_offsets) const {
    return epoch == e && seed == s && indices == order && offsets == batch_offsets;
  }

  // For the stall report (LoaderStats::pipeline_state): seconds since the last batch completed,
  // and what each stage is doing now. Caller holds no lock of the epoch's.
  double SecondsSinceProgress() const {
    return (NowNanos() - last_progress_ns.load(std::memory_order_relaxed)) * 1e-9;
  }
  bool Stalled() {
    std::lock_guard<std::mutex> lock(ready_mu);
    return in_flight > ready_count && SecondsSinceProgress() >= ctx.options->stall_seconds;
  }
  std::string DescribeState();

  const EpochContext ctx;
  std::vector<ByteBuffer>& buffers;  // this epoch's set of the loader's two
  // Several-file samples (Sample::more_files): the files after file 0, read by the reader that
  // takes buffer b into more_bytes[b], so they live and are freed with it.
  std::vector<std::vector<ByteBuffer>> more_bytes;
  // A queued epoch counts its samples, errors, skips and replacements apart (LoaderStats::
  // samples_ahead): they join the loader's counts when it is adopted, and vanish with it when it
  // is cancelled, so counts never include work that is not delivered, nor count it twice.
  // (Read/decode busy time and bytes are the machine's work and count at once.)
  const std::unique_ptr<LoaderCounters> own_counters;
  LoaderCounters* const counters;
  bool pipeline_started = false;     // guarded by the loader's hand-off mutex once queued
  bool dispatch_finished = false;    // guarded by the loader's hand-off mutex
  const pid_t owner_pid = getpid();  // threads below exist only in this process
  const int64_t epoch;
  const uint64_t seed;
  const std::vector<int64_t> indices;
  const std::vector<int64_t> offsets;
  const int64_t num_batches;
  int64_t next_batch;  // consumer's cursor (consumer thread only)
  // First batch not yet taken out of the window: written by its one taker (the consumer, or the
  // stage thread on the device path), read by the decoders (SinkFor) and describe().
  std::atomic<int64_t> taken{0};
  std::vector<BatchTask> window;
  PrefetchGovernor governor;  // auto_prefetch (consumer thread only)
  std::atomic<bool> cancel{false};
  std::atomic<int> readers_left{0};
  std::atomic<int64_t> last_progress_ns{0};  // NowNanos() when a batch last completed
  struct {
    std::atomic<int> dispatcher_waiting_slot{0}, dispatcher_pushing{0}, dispatcher_waiting_adoption{0};
    std::atomic<int> readers_waiting_request{0}, readers_waiting_buffer{0}, readers_reading{0};
    std::atomic<int> readers_streaming{0}, readers_handing_on{0}, reads_outstanding{0};
    std::atomic<int> decoders_busy{0};
  } gauges;  // see GaugeScope
  BoundedQueue<ReadRequest> requests;
  BoundedQueue<DecodeItem> decode_queue;
  BoundedQueue<int> free_buffers;
  std::mutex ready_mu;
  std::condition_variable ready_cv;
  int64_t dispatched ABSL_GUARDED_BY(ready_mu);  // batches that own a slot (or finished)
  // Batches a queued epoch may dispatch before it is adopted (INT64_MAX: no bound; see Adopted).
  int64_t ahead_limit ABSL_GUARDED_BY(ready_mu) = INT64_MAX;
  // The files of substitutes read before adoption, each with its identity then (NoteAheadFiles).
  std::vector<std::pair<std::string, FileIdentity>> ahead_files ABSL_GUARDED_BY(ready_mu);
  int64_t in_flight ABSL_GUARDED_BY(ready_mu) = 0;    // dispatched, not yet taken
  int64_t ready_count ABSL_GUARDED_BY(ready_mu) = 0;  // ... of which complete
  bool idle_seen ABSL_GUARDED_BY(ready_mu) = false;   // PipelineIdle() since the consumer last looked
  absl::Status fatal ABSL_GUARDED_BY(ready_mu);
  std::mutex staged_mu;
  std::condition_variable staged_cv;
  std::deque<StagedBatch> staged ABSL_GUARDED_BY(staged_mu);
  absl::Status stage_fatal ABSL_GUARDED_BY(staged_mu);
  bool stage_waiting ABSL_GUARDED_BY(staged_mu) = false;  // for a free device buffer
  bool stage_done ABSL_GUARDED_BY(staged_mu) = false;
  std::thread dispatcher;
  std::vector<std::thread> readers;
  std::vector<std::thread> workers;
  std::thread stage_thread;};

}  // namespace ringloader
