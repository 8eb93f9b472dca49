// The pipeline behind ringloader::Loader.
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

#include <algorithm>
#include <new>
#include <atomic>
#include <chrono>
#include <climits>
#include <pthread.h>
#include <unistd.h>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/cpu_budget.h"
#include "common/status_util.h"
#include "cuda/cuda_runtime.h"
#include "cuda/device_runtime.h"
#include "cuda/device_stager.h"
#include "decode/image_decoder.h"
#include "io/child_process.h"
#include "io/reader.h"
#include "io/stream_cache.h"
#include "numa/topology.h"
#include "pipeline/bounded_queue.h"
#include "pipeline/slot_pool.h"
#include "pipeline/views.h"
#include "ringloader/ringloader.h"
#include "sampler/sampler.h"
#include "transform/random.h"

namespace ringloader {
namespace {

using Clock = std::chrono::steady_clock;

int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

int64_t NanosSince(Clock::time_point start) {
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

SlotLayout LayoutOf(size_t row_bytes, int batch_size) { return SlotLayout{row_bytes, batch_size}; }

// Every sample failure leaves the loader as DataLoss (see IsSampleError): its cause's code
// (OutOfRange for the pixel limit or a file over max_file_bytes) must never read as the end of
// the epoch. The cause's code and message travel as payloads.
absl::Status AnnotateSampleError(const absl::Status& cause, int64_t index, const std::string& path) {
  absl::Status status(absl::StatusCode::kDataLoss,
                      absl::StrCat("sample ", index, " (", path, "): ", cause.message()));
  status.SetPayload(kSampleIndexPayload, absl::Cord(absl::StrCat(index)));
  status.SetPayload(kSamplePathPayload, absl::Cord(path));
  status.SetPayload(kSampleReasonPayload, absl::Cord(cause.message()));
  status.SetPayload(kSampleCausePayload, absl::Cord(absl::StatusCodeToString(cause.code())));
  return status;
}

// The seed key of the row at `position` of an epoch's order that holds dataset index `index`:
// the index itself when the row sits at its own position (a sequential epoch), otherwise the
// index with the pair's difference in the high bits, so distinct (index, position) pairs get
// distinct keys (below 2^32 samples). The Python package computes the same key (SampleKey).
uint64_t RowKey(int64_t index, int64_t position) {
  const auto i = static_cast<uint64_t>(index);
  return i ^ ((static_cast<uint64_t>(position) ^ i) << 32);
}

// Guards the creation and destruction of reader threads' I/O rings (see Epoch::Read). Process-
// wide, since the rings of different loaders share one address space. fork() takes it first
// (pthread_atfork), so a child never inherits it held by a thread that does not exist there.
std::mutex& RingLifetimeMutex() {
  static std::mutex* const mu = [] {
    auto* m = new std::mutex;  // never destroyed: reader threads may outlive static destructors
    pthread_atfork([] { RingLifetimeMutex().lock(); }, [] { RingLifetimeMutex().unlock(); },
                   [] { RingLifetimeMutex().unlock(); });
    return m;
  }();
  return *mu;
}

// ErrorPolicy::kReplace walks at most this many samples after its random draws failed.
constexpr int64_t kReplaceWalk = 256;

// Reads one sample's bytes synchronously (substitutes, single-sample decode): its byte range,
// or the whole file, or its member of a `pipe:` stream; a known-bad sample fails with its error.
absl::Status ReadSampleBytes(const Sample& sample, size_t max_file_bytes, ByteBuffer* buffer,
                             StreamCache* streams, const std::atomic<bool>* cancel) {
  if (!sample.error.empty()) return absl::DataLossError(sample.error);
  if (sample.source == SourceKind::kMemory) {
    buffer->Resize(static_cast<size_t>(sample.length));
    if (sample.length > 0) std::memcpy(buffer->data(), sample.memory, static_cast<size_t>(sample.length));
    return absl::OkStatus();
  }
  // Substitutes and single samples come out of the epoch's order: they must not move its streams.
  if (sample.source == SourceKind::kPipe) {
    return streams->FetchAside(sample.path, sample.offset, sample.length, buffer, cancel, sample.tar_member);
  }
  FileFetcher fetcher(MakePreadReader(1), max_file_bytes);
  fetcher.Start(sample.path, buffer, 0, sample.offset, sample.length);
  RL_RETURN_IF_ERROR(fetcher.Flush());
  std::vector<FetchedFile> done;
  while (done.empty()) RL_RETURN_IF_ERROR(fetcher.Poll(&done, /*wait=*/true));
  return done.front().status;
}

absl::Status ValidateOptions(const LoaderOptions& o, size_t dataset_size) {
  auto bad = [](absl::string_view name, auto value, absl::string_view rule) {
    return absl::InvalidArgumentError(absl::StrCat(name, " must be ", rule, ", got ", value));
  };
  if (o.batch_size < 1) return bad("batch_size", o.batch_size, ">= 1");
  if (!o.auto_threads && o.num_workers < 1) return bad("num_workers", o.num_workers, ">= 1");
  if (o.auto_threads ? o.reader_threads < 0 : o.reader_threads < 1) {
    return bad("reader_threads", o.reader_threads, o.auto_threads ? ">= 0 (0: chosen)" : ">= 1");
  }
  if (o.io_depth < 1 || o.io_depth > 4096) return bad("io_depth", o.io_depth, "in 1..4096");
  if (o.prefetch_batches < 1) return bad("prefetch_batches", o.prefetch_batches, ">= 1");
  if (o.max_slots < 0) return bad("max_slots", o.max_slots, ">= 0");
  if (o.max_slots != 0 && o.max_slots < o.prefetch_batches) {
    return bad("max_slots", o.max_slots, ">= prefetch_batches (or 0 for the default)");
  }
  if (o.world_size < 1) return bad("world_size", o.world_size, ">= 1");
  if (o.rank < 0 || o.rank >= o.world_size) return bad("rank", o.rank, "in [0, world_size)");
  if (o.max_image_pixels < 1) return bad("max_image_pixels", o.max_image_pixels, ">= 1");
  if (o.max_file_bytes < 1) return bad("max_file_bytes", o.max_file_bytes, ">= 1");
  if (!(o.stall_seconds > 0)) return bad("stall_seconds", o.stall_seconds, "> 0");
  if (dataset_size == 0) return absl::InvalidArgumentError("the dataset is empty");
  if (o.numa.mode == NumaOption::Mode::kNode && o.numa.node < 0) return bad("numa", o.numa.node, "a node number >= 0");
  RL_RETURN_IF_ERROR(ParseDevice(o.device).status());
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> Batch::image_shape() const {
  if (layout_ == Layout::kHWC) return {size_, height_, width_, 3};
  return {size_, 3, height_, width_};
}

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

struct Loader::Counters {
  std::atomic<int64_t> samples{0}, batches{0}, errors{0}, skipped{0}, replaced{0}, bytes_read{0};
  std::atomic<int64_t> read_ns{0}, decode_ns{0}, wait_ns{0};
  std::atomic<int64_t> epochs_queued{0}, epochs_adopted{0};
  std::atomic<int> threads_pinned{0};
  std::atomic<int> prefetch_grown{0};
  std::atomic<int64_t> idle_spells{0};
  std::atomic<int64_t> batches_completed{0};
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
  void Add(const Counters& other) {
    samples.fetch_add(other.samples.load(std::memory_order_relaxed), std::memory_order_relaxed);
    errors.fetch_add(other.errors.load(std::memory_order_relaxed), std::memory_order_relaxed);
    skipped.fetch_add(other.skipped.load(std::memory_order_relaxed), std::memory_order_relaxed);
    replaced.fetch_add(other.replaced.load(std::memory_order_relaxed), std::memory_order_relaxed);
    std::scoped_lock lock(mu, other.mu);
    for (const std::string& e : other.recent_errors) recent_errors.push_back(e);
    while (recent_errors.size() > kRecentErrors) recent_errors.pop_front();
  }
};

// One epoch in flight: its order, its threads and the window of batches between the dispatcher
// and the consumer. Destroying it cancels and joins everything.
struct Loader::Epoch {
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

  Epoch(Loader* owner, int64_t epoch_number, uint64_t epoch_seed, std::vector<int64_t> order,
        std::vector<int64_t> batch_offsets, int64_t first_batch, std::vector<ByteBuffer>* buffer_set,
        bool queued)
      : loader(owner),
        buffers(*buffer_set),
        own_counters(queued ? std::make_unique<Counters>() : nullptr),
        counters(queued ? own_counters.get() : owner->counters_.get()),
        epoch(epoch_number),
        seed(epoch_seed),
        indices(std::move(order)),
        offsets(std::move(batch_offsets)),
        num_batches(static_cast<int64_t>(offsets.size()) - 1),
        next_batch(first_batch),
        window(static_cast<size_t>(owner->pool_->max_slots())),
        requests(static_cast<size_t>(std::max(64, 2 * owner->options_.batch_size))),
        decode_queue(static_cast<size_t>(owner->options_.reader_threads * owner->options_.io_depth +
                                         2 * owner->options_.num_workers)),
        free_buffers(buffer_set->size()) {
    for (int i = 0; i < static_cast<int>(buffer_set->size()); ++i) {
      (void)free_buffers.TryPush(i);
    }
    for (BatchTask& task : window) task.skip.assign(static_cast<size_t>(owner->options_.batch_size), 0);
    dispatched = first_batch;
    taken = first_batch;
  }

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

  // Requires loader->handoff_mu_ (or an epoch nobody else can see yet).
  void StartPipeline() {
    if (pipeline_started) return;
    pipeline_started = true;
    if (loader->has_pipes_) {
      // The members of pipe: streams this epoch will request (from where it starts), so readers
      // keep those they pass on the way to another. (A loader with pipe: samples never queues an
      // epoch, so one epoch at a time owns the streams.)
      std::map<std::string, std::vector<StreamCache::Range>> wanted;
      for (size_t i = static_cast<size_t>(Offset(next_batch)); i < indices.size(); ++i) {
        const Sample& s = loader->samples_[static_cast<size_t>(indices[i])];
        if (s.source == SourceKind::kPipe && s.error.empty()) {
          wanted[s.path].push_back({s.offset, s.length, s.tar_member});
        }
      }
      loader->streams_->StartEpoch(wanted);
    }
    readers_left.store(loader->options_.reader_threads, std::memory_order_relaxed);
    last_progress_ns.store(NowNanos(), std::memory_order_relaxed);
    // Pinning happens first thing in each thread, before it touches a slot or a buffer, so
    // first-touch page placement also lands on the chosen node.
    dispatcher = std::thread([this] {
      loader->EnterPipelineThread("rl-dispatch");
      Dispatch();
    });
    for (int i = 0; i < loader->options_.reader_threads; ++i) {
      readers.emplace_back([this] {
        loader->EnterPipelineThread("rl-read");
        Read();
        // The last reader out ends the epoch's pipe: commands (nothing more will be read).
        if (readers_left.fetch_sub(1, std::memory_order_acq_rel) == 1 && loader->has_pipes_) {
          loader->streams_->Reset();
        }
      });
    }
    for (int i = 0; i < loader->options_.num_workers; ++i) {
      workers.emplace_back([this] {
        loader->EnterPipelineThread("rl-decode");
        Decode();
      });
    }
  }

  void StartStage() {
    if (loader->stager_ && !stage_thread.joinable()) {
      stage_thread = std::thread([this] {
        loader->EnterPipelineThread("rl-stage");
        StageBatches();
      });
    }
  }

  void Cancel() {
    cancel.store(true, std::memory_order_release);
    requests.Close();
    decode_queue.Close();
    free_buffers.Close();
    loader->pool_->Wake();
    if (dispatcher.joinable()) dispatcher.join();
    for (auto& t : readers) t.join();
    for (auto& t : workers) t.join();
    readers.clear();
    workers.clear();
    if (stage_thread.joinable()) stage_thread.join();  // its waits are sliced and see `cancel`
    if (loader->has_pipes_) loader->streams_->Reset();  // kill and reap the epoch's commands
    // Slots of batches that were dispatched but never taken go back to the free list. (Staged
    // device batches that were never delivered release their buffers with `staged`.)
    for (int64_t b = taken; b < dispatched; ++b) {
      BatchTask& task = Task(b);
      if (task.slot >= 0) loader->pool_->Recycle(task.slot);
      task.slot = -1;
    }
    dispatched = taken;
  }

  BatchTask& Task(int64_t batch) { return window[static_cast<size_t>(batch) % window.size()]; }
  int64_t Offset(int64_t batch) const { return offsets[static_cast<size_t>(batch)]; }

  void MarkReady(BatchTask& task) {
    std::lock_guard<std::mutex> lock(ready_mu);
    task.ready = true;
    ++ready_count;
    last_progress_ns.store(NowNanos(), std::memory_order_relaxed);
    loader->counters_->batches_completed.fetch_add(1, std::memory_order_relaxed);
    if (!idle_seen && PipelineIdle()) {
      idle_seen = true;
      loader->counters_->idle_spells.fetch_add(1, std::memory_order_relaxed);
    }
    ready_cv.notify_all();
  }

  // auto_prefetch: every batch the pipeline started is complete and it has no slot to start
  // another (the producer is ahead and stands still). Caller holds ready_mu.
  bool PipelineIdle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(ready_mu) {
    return in_flight > 0 && ready_count == in_flight && in_flight >= loader->pool_->base_slots();
  }

  void Fail(absl::Status status) {
    std::lock_guard<std::mutex> lock(ready_mu);
    if (fatal.ok()) fatal = std::move(status);
    ready_cv.notify_all();
  }

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
  absl::StatusOr<Taken> Take(int64_t b, Clock::time_point start, double timeout_seconds, bool consumer) {
    BatchTask& task = Task(b);
    {
      std::unique_lock<std::mutex> lock(ready_mu);
      while (!(task.ready && task.number == b)) {
        if (!fatal.ok()) return fatal;
        if (cancel.load(std::memory_order_acquire)) return absl::CancelledError("epoch stopped");
        if (consumer && loader->pool_->Exhausted()) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "all ", loader->pool_->max_slots(), " batch slots are held by the consumer; release earlier "
              "batches (drop their tensors) or raise max_slots. Batch ", b, " is not lost: call again"));
        }
        if (timeout_seconds > 0 &&
            std::chrono::duration<double>(Clock::now() - start).count() >= timeout_seconds) {
          return absl::DeadlineExceededError(
              absl::StrCat("no batch arrived within ", timeout_seconds, " s (waiting for batch ", b, ")"));
        }
        // Slices keep the exhaustion, timeout and cancel checks live; a ready batch wakes us at once.
        ready_cv.wait_for(lock, std::chrono::milliseconds(20));
      }
      task.ready = false;
      --ready_count;
      --in_flight;
      idle_seen = false;  // a slot is about to free up: a new idle spell starts from here
    }
    taken = b + 1;
    Taken out;
    {
      std::lock_guard<std::mutex> lock(task.error_mu);
      out.error = task.error;
    }
    out.slot = task.slot;
    out.size = task.size;
    task.slot = -1;
    const SlotLayout layout = LayoutOf(loader->row_bytes(), loader->options_.batch_size);
    if (out.error.ok() && task.skipped.load(std::memory_order_relaxed) > 0) {
      // ErrorPolicy::kSkip: close the gaps so the batch is dense and in sampler order.
      uint8_t* base = loader->pool_->data(out.slot);
      int64_t* labels = layout.labels(base);
      int64_t* row_indices = layout.indices(base);
      int kept = 0;
      for (int r = 0; r < out.size; ++r) {
        if (task.skip[static_cast<size_t>(r)]) continue;
        if (kept != r) {
          std::memmove(base + layout.sample_bytes * kept, base + layout.sample_bytes * r, layout.sample_bytes);
          labels[kept] = labels[r];
          row_indices[kept] = row_indices[r];
        }
        ++kept;
      }
      out.size = kept;
    }
    if (!out.error.ok() || out.size == 0) {
      loader->pool_->Recycle(out.slot);
      out.slot = -1;
    }
    return out;
  }

  // Host path: the consumer takes batches straight from the window.
  absl::StatusOr<Batch> NextHost(Clock::time_point start, double timeout_seconds) {
    const SlotLayout layout = LayoutOf(loader->row_bytes(), loader->options_.batch_size);
    while (true) {  // loops only past batches whose every sample was skipped
      const int64_t b = next_batch;
      if (b >= num_batches) return absl::OutOfRangeError("end of epoch");
      if (loader->options_.auto_prefetch) AdaptPrefetch(b);
      RL_ASSIGN_OR_RETURN(Taken t, Take(b, start, timeout_seconds, /*consumer=*/true));
      next_batch = b + 1;
      if (!t.error.ok()) return t.error;
      if (t.size == 0) continue;
      Batch batch = loader->BatchShell(b, t.size);
      uint8_t* base = loader->pool_->data(t.slot);
      batch.lease_ = loader->pool_->Deliver(t.slot);
      batch.images_ = base;
      batch.labels_ = layout.labels(base);
      batch.indices_ = layout.indices(base);
      batch.pinned_ = loader->pool_->pinned();
      return batch;
    }
  }

  // auto_prefetch, before the consumer waits for batch `b`: tells the governor whether `b` is
  // complete and whether the pipeline stands idle (every started batch complete, no slot to
  // start another), and deepens the pipeline by one slot when it says so.
  void AdaptPrefetch(int64_t b) {
    bool ready = false, idle = false;
    {
      std::lock_guard<std::mutex> lock(ready_mu);
      BatchTask& task = Task(b);
      ready = task.ready && task.number == b;
      // Idle now, or at any moment since the last call (recorded as batches completed).
      idle = idle_seen || PipelineIdle();
      idle_seen = false;
    }
    if (governor.OnNext(ready, idle) && loader->pool_->GrowBase(loader->prefetch_cap_)) {
      loader->counters_->prefetch_grown.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Device path, the stage thread: takes batches in order as they complete and starts their
  // copies, never more than the stager's ring allows; Next() picks them up from `staged`.
  void StageBatches() {
    DeviceStager& stager = *loader->stager_;
    const SlotLayout layout = LayoutOf(loader->row_bytes(), loader->options_.batch_size);
    for (int64_t b = taken; b < num_batches; ++b) {
      // A device buffer first, so a batch is taken out of the window only when it can be staged.
      while (!stager.WaitForFreeBuffer(std::chrono::milliseconds(20))) {
        if (cancel.load(std::memory_order_acquire)) return;
        SetStageWaiting(true);
      }
      SetStageWaiting(false);
      absl::StatusOr<Taken> t = Take(b, Clock::now(), 0, /*consumer=*/false);
      if (!t.ok()) {
        if (!absl::IsCancelled(t.status())) PushStaged(StagedBatch{b, t.status(), Batch()}, /*fatal=*/true);
        return;
      }
      if (!t->error.ok()) {
        PushStaged(StagedBatch{b, std::move(t->error), Batch()});
        continue;
      }
      if (t->size == 0) continue;
      // The whole slot (images, labels, indices) in one copy; the stager keeps the host lease
      // until the copy completed, then the slot returns to the free list. Labels and indices
      // are also kept on the host (small), copied first: once staged, the slot may be reused.
      uint8_t* base = loader->pool_->data(t->slot);
      auto rows = std::make_shared<std::vector<int64_t>>(layout.labels(base), layout.labels(base) + t->size);
      rows->insert(rows->end(), layout.indices(base), layout.indices(base) + t->size);
      absl::StatusOr<std::shared_ptr<DeviceLease>> lease =
          stager.Stage(base, loader->pool_->slot_bytes(), loader->pool_->Deliver(t->slot));
      if (!lease.ok()) {
        PushStaged(StagedBatch{b, absl::Status(lease.status().code(),
                                               absl::StrCat("batch ", b, ": ", lease.status().message())),
                               Batch()});
        continue;
      }
      Batch batch = loader->BatchShell(b, t->size);
      batch.labels_ = rows->data();
      batch.indices_ = rows->data() + t->size;
      batch.host_rows_ = std::move(rows);
      auto* device_base = static_cast<uint8_t*>((*lease)->data());
      batch.device_lease_ = std::move(*lease);
      batch.device_ = stager.device();
      batch.device_images_ = device_base;
      batch.device_labels_ = layout.labels(device_base);
      batch.device_indices_ = layout.indices(device_base);
      batch.pinned_ = loader->pool_->pinned();
      PushStaged(StagedBatch{b, absl::OkStatus(), std::move(batch)});
    }
    std::lock_guard<std::mutex> lock(staged_mu);
    stage_done = true;
    staged_cv.notify_all();
  }

  // Device path, the consumer: the next staged batch (its copy may still be running; the
  // consumer's stream waits for it on the GPU).
  absl::StatusOr<Batch> NextStaged(Clock::time_point start, double timeout_seconds) {
    if (next_batch >= num_batches) return absl::OutOfRangeError("end of epoch");
    std::unique_lock<std::mutex> lock(staged_mu);
    while (staged.empty()) {
      if (!stage_fatal.ok()) return stage_fatal;
      if (stage_done) {
        next_batch = num_batches;  // the rest were batches whose every sample was skipped
        return absl::OutOfRangeError("end of epoch");
      }
      // Nothing staged, the stage thread waits for a buffer, none is free and the consumer holds
      // every one. (A buffer the consumer released is free only once the waiter has also seen
      // its copy complete; until then it is neither free nor held, and this keeps waiting.)
      if (stage_waiting && !loader->stager_->HasFreeBuffer() &&
          loader->stager_->buffers_held() >= loader->stager_->max_buffers()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "all ", loader->stager_->max_buffers(), " device buffers are held by the consumer; free earlier "
            "batches' tensors or raise prefetch_batches (prefetch_factor). Batch ", next_batch,
            " is not lost: call again"));
      }
      if (timeout_seconds > 0 && std::chrono::duration<double>(Clock::now() - start).count() >= timeout_seconds) {
        return absl::DeadlineExceededError(absl::StrCat("no batch arrived within ", timeout_seconds,
                                                        " s (waiting for batch ", next_batch, ")"));
      }
      staged_cv.wait_for(lock, std::chrono::milliseconds(20));
    }
    StagedBatch next = std::move(staged.front());
    staged.pop_front();
    lock.unlock();
    next_batch = next.number + 1;
    if (!next.error.ok()) return next.error;
    return std::move(next.batch);
  }

  // Acquires slots strictly in batch order (so the consumer's next batch is never starved by a
  // later one), writes labels and indices, and queues the batch's reads.
  void Dispatch() {
    const SlotLayout layout = LayoutOf(loader->row_bytes(), loader->options_.batch_size);
    for (int64_t b = dispatched; b < num_batches; ++b) {
      absl::StatusOr<int> slot = [&] {
        GaugeScope waiting(gauges.dispatcher_waiting_slot);
        return loader->pool_->Acquire(cancel);
      }();
      if (!slot.ok()) {
        if (!absl::IsCancelled(slot.status())) Fail(slot.status());
        return;
      }
      BatchTask& task = Task(b);
      const int size = static_cast<int>(Offset(b + 1) - Offset(b));
      task.slot = *slot;
      task.size = size;
      {
        std::lock_guard<std::mutex> lock(task.error_mu);
        task.error_row = INT_MAX;
        task.error = absl::OkStatus();
      }
      uint8_t* base = loader->pool_->data(*slot);
      int64_t* labels = layout.labels(base);
      int64_t* row_indices = layout.indices(base);
      for (int r = 0; r < size; ++r) {
        const int64_t index = indices[static_cast<size_t>(Offset(b) + r)];
        row_indices[r] = index;
        labels[r] = loader->samples_[static_cast<size_t>(index)].label;
      }
      std::fill(task.skip.begin(), task.skip.end(), 0);
      task.skipped.store(0, std::memory_order_relaxed);
      task.remaining.store(size, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lock(ready_mu);
        task.number = b;
        task.ready = false;
        dispatched = b + 1;
        ++in_flight;
      }
      if (size == 0) MarkReady(task);
      for (int r = 0; r < size; ++r) {
        // release (inside Push): the reader and decoder see slot, size and remaining.
        GaugeScope pushing(gauges.dispatcher_pushing);
        if (!requests.Push(ReadRequest{b, r, row_indices[r]})) return;
      }
    }
    requests.Close();  // readers drain what is queued, then finish
    loader->DispatchFinished(this);  // the queued epoch, if any, goes on from here
  }

  // A reader thread's I/O ring is created and destroyed under RingLifetimeMutex(): a new reader
  // (of a queued epoch, or of another loader) may map its io_uring where an exited, not yet
  // joined reader's ring was. The kernel orders the two, but liburing maps rings with raw
  // syscalls that ThreadSanitizer does not see; the mutex makes that order visible to it. Taken
  // twice per reader thread.
  void Read() {
    const LoaderOptions& o = loader->options_;
    std::unique_ptr<FileFetcher> fetcher;
    {
      std::lock_guard<std::mutex> lock(RingLifetimeMutex());
      absl::StatusOr<std::unique_ptr<Reader>> reader = MakeReader(loader->io_backend_, o.io_depth, nullptr);
      if (!reader.ok()) return Fail(reader.status());
      fetcher = std::make_unique<FileFetcher>(std::move(*reader), o.max_file_bytes);
    }
    ReadWith(*fetcher);
    std::lock_guard<std::mutex> lock(RingLifetimeMutex());
    fetcher.reset();  // waits for reads still in flight (cancelled), then unmaps the ring
  }

  // A reader blocks (on the request queue or for a free buffer) only while it holds no buffer of
  // its own: a finished read, successful or not (a missing or empty file fails inside Start),
  // keeps its buffer until Poll hands it to the decoders. Blocking with any of them outstanding
  // could wait for a buffer only this thread can free: with every buffer parked in this
  // reader's finished list, the epoch would stop forever.
  void ReadWith(FileFetcher& fetcher) {
    std::vector<ReadRequest> by_buffer(buffers.size());
    std::vector<FetchedFile> done;
    std::optional<ReadRequest> pending;  // taken from the queue, waiting for a buffer
    bool input_done = false;
    uint64_t bytes_reported = 0;
    while (!cancel.load(std::memory_order_acquire)) {
      const auto busy_start = Clock::now();
      int64_t idle_ns = 0;
      while (!input_done && fetcher.has_room()) {
        const bool may_block = fetcher.outstanding() == 0;
        if (!pending) {
          if (may_block) {
            const auto wait_start = Clock::now();
            GaugeScope waiting(gauges.readers_waiting_request);
            pending = requests.Pop();
            idle_ns += NanosSince(wait_start);
            if (!pending) input_done = true;
          } else {
            pending = requests.TryPop();
          }
          if (!pending) break;
        }
        const ReadRequest request = *pending;
        const Sample& sample = loader->samples_[static_cast<size_t>(request.index)];
        if (!sample.error.empty() || sample.source == SourceKind::kMemory) {
          // Known bad (e.g. a shard member without an image), or in memory: nothing to read, no
          // buffer (the decoder reads a memory sample where it is).
          pending.reset();
          GaugeScope handing(gauges.readers_handing_on);
          absl::Status status = sample.error.empty() ? absl::OkStatus() : absl::DataLossError(sample.error);
          if (!decode_queue.Push(DecodeItem{request, -1, std::move(status)})) return;
          continue;
        }
        std::optional<int> buffer;
        if (may_block) {
          const auto buffer_wait = Clock::now();
          GaugeScope waiting(gauges.readers_waiting_buffer);
          buffer = free_buffers.Pop();  // waiting here means decode is behind
          idle_ns += NanosSince(buffer_wait);
          if (!buffer) return;  // closed: cancelled
        } else {
          buffer = free_buffers.TryPop();
          if (!buffer) break;  // hand this reader's finished reads on first (Poll below)
        }
        pending.reset();
        if (sample.source == SourceKind::kPipe) {
          // A member of a pipe: stream, read here (the stream is sequential, not positional).
          ByteBuffer& bytes = buffers[static_cast<size_t>(*buffer)];
          absl::Status fetched = [&] {
            GaugeScope streaming(gauges.readers_streaming);
            return loader->streams_->Fetch(sample.path, sample.offset, sample.length, &bytes, &cancel,
                                           sample.tar_member);
          }();
          if (absl::IsCancelled(fetched) && cancel.load(std::memory_order_acquire)) return;
          // A shard's index that no longer matches it: its byte ranges and labels are wrong, so
          // the epoch ends here rather than any ErrorPolicy delivering or replacing rows of it.
          if (IsStaleIndex(fetched)) return Fail(std::move(fetched));
          GaugeScope handing(gauges.readers_handing_on);
          if (!decode_queue.Push(DecodeItem{request, *buffer, std::move(fetched)})) return;
          continue;
        }
        by_buffer[static_cast<size_t>(*buffer)] = request;
        fetcher.Start(sample.path, &buffers[static_cast<size_t>(*buffer)],
                      static_cast<uint64_t>(*buffer), sample.offset, sample.length);
      }
      if (absl::Status flushed = fetcher.Flush(); !flushed.ok()) return Fail(flushed);
      if (fetcher.outstanding() == 0 && input_done) break;
      done.clear();
      {
        GaugeScope reading(gauges.readers_reading);
        const int outstanding = fetcher.outstanding();
        gauges.reads_outstanding.fetch_add(outstanding, std::memory_order_relaxed);
        absl::Status polled = fetcher.Poll(&done, /*wait=*/true);
        gauges.reads_outstanding.fetch_sub(outstanding, std::memory_order_relaxed);
        if (!polled.ok()) return Fail(polled);
      }
      loader->counters_->read_ns.fetch_add(NanosSince(busy_start) - idle_ns, std::memory_order_relaxed);
      // Live byte count (the fetcher's is cumulative): readers report as they go.
      const uint64_t read_total = fetcher.bytes_read();
      loader->counters_->bytes_read.fetch_add(static_cast<int64_t>(read_total - bytes_reported),
                                              std::memory_order_relaxed);
      bytes_reported = read_total;
      GaugeScope handing(gauges.readers_handing_on);
      for (FetchedFile& file : done) {
        const int buffer = static_cast<int>(file.tag);
        if (!decode_queue.Push(DecodeItem{by_buffer[static_cast<size_t>(buffer)], buffer,
                                          std::move(file.status)})) {
          return;  // closed: cancelled
        }
      }
    }
    loader->counters_->bytes_read.fetch_add(static_cast<int64_t>(fetcher.bytes_read() - bytes_reported),
                                            std::memory_order_relaxed);
  }

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
  absl::Status Replace(ImageDecoder& decoder, RenderState& render, ByteBuffer& bytes,
                       const ReadRequest& request, uint8_t* dst, absl::Status cause) {
    const int64_t n = loader->dataset_size();
    const uint64_t sample_seed = RowSeed(request);
    // 16 random draws, then a walk onward from the last draw: a dataset with many bad files still
    // finds its good ones, and the bound keeps an all-bad dataset from costing O(N) per sample.
    const uint64_t attempts = 16 + static_cast<uint64_t>(std::min<int64_t>(n, kReplaceWalk));
    const uint64_t walk_from = Mix64(sample_seed + 16);
    for (uint64_t attempt = 0; attempt < attempts; ++attempt) {
      const uint64_t draw = attempt < 16 ? Mix64(sample_seed + attempt + 1) : walk_from + (attempt - 16);
      const int64_t substitute = static_cast<int64_t>(draw % static_cast<uint64_t>(n));
      if (substitute == request.index) continue;
      absl::Status status = ReadSampleBytes(loader->samples_[static_cast<size_t>(substitute)],
                                            loader->options_.max_file_bytes, &bytes, loader->streams_.get(),
                                            &cancel);
      if (IsStaleIndex(status)) {
        // The substitute's shard has a stale index: no substitute of it may stand in, nor may the epoch go on.
        Fail(status);
        return status;
      }
      if (status.ok()) {
        status = loader->DecodeRow(decoder, render, bytes.data(), bytes.size(), sample_seed, dst);
      }
      if (!status.ok()) {
        counters->RecordError(AnnotateSampleError(
            status, substitute, loader->samples_[static_cast<size_t>(substitute)].path));
        continue;
      }
      const SlotLayout layout = LayoutOf(loader->row_bytes(), loader->options_.batch_size);
      uint8_t* base = loader->pool_->data(Task(request.batch).slot);
      layout.labels(base)[request.row] = loader->samples_[static_cast<size_t>(substitute)].label;
      layout.indices(base)[request.row] = substitute;
      counters->replaced.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    return cause;  // no decodable substitute: the original error stands
  }

  void Decode() {
    const LoaderOptions& o = loader->options_;
    const size_t sample_bytes = loader->row_bytes();
    ImageDecoder decoder;
    RenderState render;  // the views' (DecodeRow); one pipeline renders in the decoder
    decoder.set_max_image_pixels(o.max_image_pixels);
    decoder.set_dct_scaling(o.fast_decode);  // region-of-interest decoding is always exact
    decoder.set_strict(o.strict_decode);
    decoder.set_exif_transpose(o.exif_transpose);
    ByteBuffer substitute_bytes;
    while (std::optional<DecodeItem> item = decode_queue.Pop()) {
      if (cancel.load(std::memory_order_acquire)) continue;  // drain quickly
      GaugeScope busy(gauges.decoders_busy);
      BatchTask& task = Task(item->request.batch);
      absl::Status status = std::move(item->status);
      if (status.ok()) {
        const auto start = Clock::now();
        const Sample& sample = loader->samples_[static_cast<size_t>(item->request.index)];
        const bool in_memory = item->buffer < 0;  // an ok item without a buffer: kMemory
        const uint8_t* data = in_memory ? sample.memory : buffers[static_cast<size_t>(item->buffer)].data();
        const size_t size = in_memory ? static_cast<size_t>(sample.length)
                                      : buffers[static_cast<size_t>(item->buffer)].size();
        uint8_t* dst = loader->pool_->data(task.slot) + sample_bytes * item->request.row;
        status = loader->DecodeRow(decoder, render, data, size, RowSeed(item->request), dst);
        loader->counters_->decode_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
      }
      // capacity == buffer count: never full. Known-bad samples hold no buffer (-1).
      if (item->buffer >= 0) (void)free_buffers.TryPush(item->buffer);
      if (!status.ok()) {
        const std::string& path = loader->samples_[static_cast<size_t>(item->request.index)].path;
        status = AnnotateSampleError(status, item->request.index, path);
        counters->RecordError(status);
        if (o.on_error == ErrorPolicy::kSkip) {
          task.skip[static_cast<size_t>(item->request.row)] = 1;
          task.skipped.fetch_add(1, std::memory_order_relaxed);
          counters->skipped.fetch_add(1, std::memory_order_relaxed);
          status = absl::OkStatus();
        } else if (o.on_error == ErrorPolicy::kReplace) {
          uint8_t* dst = loader->pool_->data(task.slot) + sample_bytes * item->request.row;
          status = Replace(decoder, render, substitute_bytes, item->request, dst, std::move(status));
        }
      }
      if (status.ok()) {
        counters->samples.fetch_add(1, std::memory_order_relaxed);
      } else {
        std::lock_guard<std::mutex> lock(task.error_mu);
        if (item->request.row < task.error_row) {
          task.error_row = item->request.row;
          task.error = std::move(status);
        }
      }
      // acq_rel: the last writer of a batch sees every other row's writes before marking it.
      if (task.remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) MarkReady(task);
    }
  }

  // Device path: what the stage thread hands to Next(), in batch order.
  struct StagedBatch {
    int64_t number;
    absl::Status error;  // the batch's error (Next returns it at this batch)
    Batch batch;
  };

  void PushStaged(StagedBatch batch, bool fatal_error = false) {
    std::lock_guard<std::mutex> lock(staged_mu);
    if (fatal_error) {
      stage_fatal = std::move(batch.error);
    } else {
      staged.push_back(std::move(batch));
    }
    staged_cv.notify_all();
  }

  void SetStageWaiting(bool waiting) {
    std::lock_guard<std::mutex> lock(staged_mu);
    if (stage_waiting == waiting) return;
    stage_waiting = waiting;
    staged_cv.notify_all();
  }

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
    return in_flight > ready_count && SecondsSinceProgress() >= loader->options_.stall_seconds;
  }
  std::string DescribeState() {
    int64_t flight, complete, first_taken;
    {
      std::lock_guard<std::mutex> lock(ready_mu);
      flight = in_flight;
      complete = ready_count;
      first_taken = taken;
    }
    auto n = [](const std::atomic<int>& gauge) { return gauge.load(std::memory_order_relaxed); };
    const LoaderOptions& o = loader->options_;
    std::string dispatcher = n(gauges.dispatcher_waiting_slot) > 0 ? "waiting for a free slot"
                             : n(gauges.dispatcher_pushing) > 0   ? "waiting to queue a read request"
                                                                  : "running or done";
    return absl::StrFormat(
        "epoch %d at batch %d of %d, no batch completed for %.1f s; batches in flight %d (%d complete); "
        "dispatcher: %s; read requests queued %d; readers (%d): %d waiting for a request, %d for a free "
        "read buffer, %d reading (%d reads outstanding), %d streaming a pipe: command, %d handing on to "
        "decode; free read buffers %d of %d; decode queue %d; decoders busy %d of %d; slots allocated %d of "
        "%d, held by the consumer %d",
        epoch, first_taken, num_batches, SecondsSinceProgress(), flight, complete, dispatcher,
        requests.ApproxSize(), o.reader_threads, n(gauges.readers_waiting_request),
        n(gauges.readers_waiting_buffer), n(gauges.readers_reading), n(gauges.reads_outstanding),
        n(gauges.readers_streaming), n(gauges.readers_handing_on), free_buffers.ApproxSize(), buffers.size(),
        decode_queue.ApproxSize(), n(gauges.decoders_busy), o.num_workers,
        loader->pool_->allocated(), loader->pool_->max_slots(), loader->pool_->held_by_consumer());
  }

  Loader* loader;
  std::vector<ByteBuffer>& buffers;  // this epoch's set of the loader's two
  // A queued epoch counts its samples, errors, skips and replacements apart (LoaderStats::
  // samples_ahead): they join the loader's counts when it is adopted, and vanish with it when it
  // is cancelled, so counts never include work that is not delivered, nor count it twice.
  // (Read/decode busy time and bytes are the machine's work and count at once.)
  const std::unique_ptr<Counters> own_counters;
  Counters* const counters;
  bool pipeline_started = false;     // guarded by loader->handoff_mu_ once the epoch is queued
  bool dispatch_finished = false;    // guarded by loader->handoff_mu_
  const pid_t owner_pid = getpid();  // threads below exist only in this process
  const int64_t epoch;
  const uint64_t seed;
  const std::vector<int64_t> indices;
  const std::vector<int64_t> offsets;
  const int64_t num_batches;
  int64_t next_batch;  // consumer's cursor (consumer thread only)
  int64_t taken;       // first batch not yet taken out of the window (by its one taker: the
                       // consumer, or the stage thread on the device path)
  std::vector<BatchTask> window;
  PrefetchGovernor governor;  // auto_prefetch (consumer thread only)
  std::atomic<bool> cancel{false};
  std::atomic<int> readers_left{0};
  std::atomic<int64_t> last_progress_ns{0};  // NowNanos() when a batch last completed
  struct {
    std::atomic<int> dispatcher_waiting_slot{0}, dispatcher_pushing{0};
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
  std::thread stage_thread;
};

namespace {

// The CPU budget of a loader placed by `placement` (common/cpu_budget.h), and its threads.
absl::StatusOr<AutoThreads> PlanAutoThreads(const LoaderOptions& options, const NumaPlacement& placement) {
  CpuBudget budget;
  budget.affinity_cpus = static_cast<int>(AllowedCpus().size());
  if (!placement.cpus.empty()) {
    budget.numa_node = placement.node;
    budget.node_cpus = static_cast<int>(placement.cpus.size());
  }
  RL_ASSIGN_OR_RETURN(budget.quota, ReadCpuQuota(options.cgroup_root, options.proc_self_cgroup));
  TrainingThreads training{options.training_threads, options.training_threads_source};
  if (training.count < 1) training = TrainingThreadsFromEnvironment();
  const ThreadPlan plan = PlanThreads(budget, training, std::max(0, options.reader_threads));
  AutoThreads out;
  out.decode_threads = plan.decode;
  out.reader_threads = plan.readers;
  out.usable_cpus = plan.usable;
  out.reserved_cpus = plan.reserved;
  out.note = plan.Describe();
  return out;
}

absl::StatusOr<NumaPlacement> PlaceThreads(const LoaderOptions& options, int ordinal) {
  RL_ASSIGN_OR_RETURN(NumaTopology topology, NumaTopology::Read(options.numa.sysfs_root));
  return ChooseNumaPlacement(topology, options.numa, AllowedCpus(), CurrentCpu(),
                             ordinal >= 0 && !options.device_runtime ? CudaPciBusId(ordinal) : std::string());
}

}  // namespace

absl::StatusOr<AutoThreads> ChooseAutoThreads(const LoaderOptions& options) {
  RL_ASSIGN_OR_RETURN(const int ordinal, ParseDevice(options.device));
  RL_ASSIGN_OR_RETURN(NumaPlacement placement, PlaceThreads(options, ordinal));
  return PlanAutoThreads(options, placement);
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(std::vector<Sample> samples,
                                                       LoaderOptions options) {
  RL_RETURN_IF_ERROR(ValidateOptions(options, samples.size()));
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].source == SourceKind::kMemory &&
        (samples[i].length < 0 || (samples[i].memory == nullptr && samples[i].length > 0))) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", i, " (", samples[i].path, ") is in memory without its bytes"));
    }
    if (samples[i].source != SourceKind::kPipe) continue;
    RL_RETURN_IF_ERROR(CheckPipePath(samples[i].path, absl::StrCat("sample ", i)));
  }
  std::shared_ptr<const ViewSet> views;
  if (!options.views.empty()) {
    if (!options.transform.empty() || options.variable_size) {
      return absl::InvalidArgumentError(
          "views replace transform: pass the chains as views only, each fixing its output size");
    }
    RL_ASSIGN_OR_RETURN(ViewSet set, ViewSet::Create(options.views, options.layout));
    views = std::make_shared<const ViewSet>(std::move(set));
  }
  // With views, the pipeline is view 0's (what describes the loader; rows hold every view).
  RL_ASSIGN_OR_RETURN(TransformPipeline pipeline,
                      views ? TransformPipeline::Create(options.views[0].transform, options.views[0].dtype,
                                                        options.layout, false)
                            : TransformPipeline::Create(options.transform, options.dtype, options.layout,
                                                        options.variable_size));
  const size_t row_bytes = views ? views->row_bytes : pipeline.SampleBytes();
  // Device and placement are decided before any memory is allocated: the slot allocator
  // depends on both.
  RL_ASSIGN_OR_RETURN(const int ordinal, ParseDevice(options.device));
  std::shared_ptr<DeviceRuntime> runtime = options.device_runtime;
  if (!runtime && ordinal >= 0) {
    RL_ASSIGN_OR_RETURN(runtime, MakeCudaRuntime(ordinal));
  }
  std::shared_ptr<DeviceStager> stager;
  if (runtime) {
    const size_t slot_bytes = LayoutOf(row_bytes, options.batch_size).total_bytes();
    // The ring bounds device memory: prefetch_batches staged ahead plus the consumer's batch.
    RL_ASSIGN_OR_RETURN(stager, MakeDeviceStager(std::move(runtime), slot_bytes, options.prefetch_batches + 1));
  }
  RL_ASSIGN_OR_RETURN(NumaPlacement placement, PlaceThreads(options, ordinal));
  // Threads: chosen from the CPU budget (auto_threads), after placement, whose CPUs bound it.
  std::string threads_note;
  if (options.auto_threads) {
    RL_ASSIGN_OR_RETURN(const AutoThreads plan, PlanAutoThreads(options, placement));
    options.num_workers = plan.decode_threads;
    options.reader_threads = plan.reader_threads;
    threads_note = plan.note;
  } else {
    threads_note = absl::StrCat("decode ", options.num_workers, ", readers ", options.reader_threads,
                                ": set explicitly");
  }
  // Slot memory: slots x slot bytes within the budget (max_memory, or the default), refused
  // here when even the minimum does not fit, so nothing is allocated past it later.
  SlotRequest request;
  request.slot_bytes = LayoutOf(row_bytes, options.batch_size).total_bytes();
  request.batch_size = options.batch_size;
  request.prefetch_batches = options.prefetch_batches;
  request.auto_prefetch = options.auto_prefetch;
  request.device = stager != nullptr;
  request.max_slots = options.max_slots;
  std::string budget_note;
  if (options.max_memory > 0) {
    request.budget = options.max_memory;
    request.budget_given = true;
    budget_note = "set (max_memory)";
  } else {
    const AvailableMemory available =
        ReadAvailableMemory(options.meminfo_path, options.cgroup_root, options.proc_self_cgroup);
    request.available = available.bytes;
    request.budget = DefaultMemoryBudget(available, &budget_note);
    request.budget_note = budget_note;
  }
  RL_ASSIGN_OR_RETURN(const SlotPlan plan, PlanSlots(request));
  std::unique_ptr<Loader> loader(new Loader(std::move(samples), std::move(options), std::move(pipeline),
                                            std::move(views), std::move(placement), std::move(stager), plan));
  loader->threads_note_ = std::move(threads_note);
  loader->memory_budget_note_ = std::move(budget_note);
  // Probe the I/O backend once, here, so a refusal is reported at construction, not per epoch.
  std::string note;
  RL_ASSIGN_OR_RETURN(std::unique_ptr<Reader> probe,
                      MakeReader(loader->options_.io, loader->options_.io_depth, &note));
  loader->io_backend_ = std::string_view(probe->name()) == "io_uring" ? IoBackend::kUring : IoBackend::kPread;
  loader->io_note_ = std::move(note);
  return loader;
}

Loader::Loader(std::vector<Sample> samples, LoaderOptions options, TransformPipeline pipeline,
               std::shared_ptr<const ViewSet> views, NumaPlacement placement,
               std::shared_ptr<DeviceStager> stager, const SlotPlan& plan)
    : samples_(std::move(samples)),
      options_(std::move(options)),
      pipeline_(std::move(pipeline)),
      views_(std::move(views)),
      placement_(std::make_unique<NumaPlacement>(std::move(placement))),
      stager_(std::move(stager)),
      counters_(std::make_unique<Counters>()) {
  for (const Sample& s : samples_) has_pipes_ = has_pipes_ || s.source == SourceKind::kPipe;
  streams_ = std::make_unique<StreamCache>(options_.max_file_bytes);
  const int node = placement_->node;
  // Device staging copies from the slots, so it wants them page-locked (asynchronous DMA).
  if (!options_.allocator && (options_.pin_memory || stager_)) {
    options_.allocator = MakePinnedAllocatorOnNode(node, &memory_note_);
  }
  if (!options_.allocator) options_.allocator = node >= 0 ? MakeNodeHostAllocator(node) : MakeHostAllocator();
  const size_t slot_bytes = LayoutOf(row_bytes(), options_.batch_size).total_bytes();
  // Slots (pipeline + batches the consumer keeps) and depth: PlanSlots, in Create.
  memory_budget_ = plan.budget;
  slots_note_ = plan.note;
  read_ahead_ = plan.read_ahead;
  prefetch_cap_ = plan.prefetch_cap;
  pool_ = std::make_shared<SlotPool>(options_.allocator, slot_bytes, plan.depth, plan.max_slots);
  const size_t buffers = static_cast<size_t>(options_.reader_threads * options_.io_depth +
                                             2 * options_.num_workers + 2 * options_.num_workers);
  buffers_[0].resize(buffers);
  buffers_[1].resize(buffers);
}

Loader::~Loader() { Stop(); }

void Loader::EnterPipelineThread(const char* name) const {
  NameCurrentThread(name);
  if (placement_->cpus.empty()) return;
  absl::Status pinned = PinCurrentThread(placement_->cpus);
  std::vector<int> now = AllowedCpus();  // read back: what the kernel actually applied
  std::lock_guard<std::mutex> lock(counters_->mu);
  if (!pinned.ok()) {
    counters_->pin_error = std::string(pinned.message());
    return;
  }
  counters_->threads_pinned.fetch_add(1, std::memory_order_relaxed);
  std::vector<int> merged;
  std::set_union(counters_->thread_cpus.begin(), counters_->thread_cpus.end(), now.begin(), now.end(),
                 std::back_inserter(merged));
  counters_->thread_cpus = std::move(merged);
}

void Loader::Stop() {
  if (ForkedChild()) {
    // We are a fork()ed child: the epochs' threads exist only in the parent, and their mutexes
    // (and handoff_mu_) may have been held at the fork. Joining or locking would hang, so the
    // child abandons them, and the slot pool too: its condition variable still counts the
    // parent's waiting dispatcher, so destroying it would block forever (pthread_cond_destroy
    // waits for waiters).
    (void)epoch_.release();
    (void)queued_.release();
    (void)new std::shared_ptr<SlotPool>(pool_);
    // The pipe: commands are the parent's children: killing them from here would break its
    // epoch, and their mutexes may have been held at the fork. The child gets its own cache, so
    // the loader stays usable here (StartEpoch, Stats, DecodeSample).
    (void)streams_.release();
    streams_ = std::make_unique<StreamCache>(options_.max_file_bytes);
    // A parent thread may have held handoff_mu_ at the fork (it does while starting an epoch's
    // threads or reading Stats); in the child nobody ever will release it: make it anew.
    new (&handoff_mu_) std::mutex();
    return;
  }
  CancelQueued();
  RetireEpoch();
}

void Loader::CancelQueued() {
  std::unique_ptr<Epoch> queued;
  {
    std::lock_guard<std::mutex> lock(handoff_mu_);
    queued = std::move(queued_);
  }
  queued.reset();  // cancels and joins whatever it started; its slots return to the free list
}

bool Loader::HasQueuedEpoch() const {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  return queued_ != nullptr;
}

void Loader::RetireEpoch() {
  if (!epoch_) return;
  epoch_->Cancel();  // joins its threads while Stats() still sees its counts
  std::unique_ptr<Epoch> retired;
  {
    std::lock_guard<std::mutex> lock(handoff_mu_);
    retired = std::move(epoch_);
    if (const Counters* own = retired->own_counters.get()) counters_->Add(*own);
  }
}

void Loader::DispatchFinished(Epoch* epoch) {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  epoch->dispatch_finished = true;
  // Only the epoch in progress has a successor to start; a queued epoch that finishes
  // dispatching before it is adopted just records it.
  if (queued_ && queued_.get() != epoch) queued_->StartPipeline();
}

absl::Status Loader::CheckBatchable() const {
  if (pipeline_.fixed_size()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "the transform's output size depends on the input image, so samples cannot be batched "
      "natively; end the geometric steps with CenterCrop, RandomResizedCrop, RandomCrop or "
      "Resize((h, w)), or decode samples one at a time");
}

absl::Status Loader::CheckOrder(const std::vector<int64_t>& indices,
                                const std::vector<int64_t>& offsets) const {
  if (offsets.empty() || offsets.front() != 0 ||
      offsets.back() != static_cast<int64_t>(indices.size())) {
    return absl::InvalidArgumentError("offsets must start at 0 and end at len(indices)");
  }
  for (size_t b = 1; b < offsets.size(); ++b) {
    const int64_t size = offsets[b] - offsets[b - 1];
    if (size < 0 || size > options_.batch_size) {
      return absl::InvalidArgumentError(absl::StrCat("batch ", b - 1, " has ", size,
                                                     " samples; each batch must hold 0..",
                                                     options_.batch_size));
    }
  }
  for (int64_t index : indices) {
    if (index < 0 || index >= dataset_size()) {
      return absl::OutOfRangeError(absl::StrCat("sampler yielded index ", index,
                                                " outside the dataset of ", dataset_size(), " samples"));
    }
  }
  return absl::OkStatus();
}

bool Loader::ForkedChild() const {
  const pid_t pid = getpid();
  return (epoch_ && epoch_->owner_pid != pid) || (queued_ && queued_->owner_pid != pid);
}

void Loader::StartChecked(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                          std::vector<int64_t> offsets, int64_t first_batch) {
  if (ForkedChild()) Stop();  // abandons the parent's epochs (see Stop)
  std::unique_ptr<Epoch> adopted;
  {
    std::lock_guard<std::mutex> lock(handoff_mu_);
    if (queued_ && first_batch == 0 && queued_->Matches(epoch, seed, indices, offsets)) {
      adopted = std::move(queued_);
    }
  }
  if (!adopted) CancelQueued();  // set_epoch, load_state_dict, another order: nothing of it is kept
  // The epoch in progress stops (its undelivered slots go back) before the next takes over.
  RetireEpoch();
  if (adopted) {
    counters_->epochs_adopted.fetch_add(1, std::memory_order_relaxed);
    // Nobody else can reach it now; its pipeline runs already unless the previous epoch was
    // stopped before it dispatched its last batch.
    std::lock_guard<std::mutex> lock(handoff_mu_);
    adopted->StartPipeline();
    adopted->StartStage();
    epoch_ = std::move(adopted);
    return;
  }
  auto fresh = std::make_unique<Epoch>(this, epoch, seed, std::move(indices), std::move(offsets),
                                       first_batch, &buffers_[0], /*queued=*/false);
  std::lock_guard<std::mutex> lock(handoff_mu_);
  fresh->Start();
  epoch_ = std::move(fresh);
}

void Loader::QueueChecked(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                          std::vector<int64_t> offsets) {
  if (ForkedChild()) Stop();
  CancelQueued();
  std::lock_guard<std::mutex> lock(handoff_mu_);
  // The buffer set the epoch in progress does not use.
  std::vector<ByteBuffer>* set = epoch_ && &epoch_->buffers == &buffers_[0] ? &buffers_[1] : &buffers_[0];
  queued_ = std::make_unique<Epoch>(this, epoch, seed, std::move(indices), std::move(offsets), 0, set,
                                    /*queued=*/true);
  counters_->epochs_queued.fetch_add(1, std::memory_order_relaxed);
  if (!epoch_ || epoch_->dispatch_finished) queued_->StartPipeline();
}

absl::Status Loader::StartEpoch(int64_t epoch, int64_t first_batch) {
  RL_RETURN_IF_ERROR(CheckBatchable());
  EpochOrder order = MakeEpochOrder(BuiltinSampler(), epoch);
  if (first_batch < 0 || first_batch > order.num_batches()) {
    return absl::OutOfRangeError(absl::StrCat("first_batch ", first_batch, " is outside the epoch's ",
                                              order.num_batches(), " batches"));
  }
  StartChecked(epoch, options_.seed, std::move(order.indices), std::move(order.offsets), first_batch);
  return absl::OkStatus();
}

absl::Status Loader::StartEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                                std::vector<int64_t> offsets, int64_t first_batch) {
  RL_RETURN_IF_ERROR(CheckBatchable());
  RL_RETURN_IF_ERROR(CheckOrder(indices, offsets));
  const int64_t num_batches = static_cast<int64_t>(offsets.size()) - 1;
  if (first_batch < 0 || first_batch > num_batches) {
    return absl::OutOfRangeError(absl::StrCat("first_batch ", first_batch, " is outside the epoch's ",
                                              num_batches, " batches"));
  }
  StartChecked(epoch, seed, std::move(indices), std::move(offsets), first_batch);
  return absl::OkStatus();
}

absl::Status Loader::QueueEpoch(int64_t epoch) {
  RL_RETURN_IF_ERROR(CheckBatchable());
  // See the header: pipe: streams are not read ahead, nor anything under a tight budget.
  if (has_pipes_ || !read_ahead_) return absl::OkStatus();
  EpochOrder order = MakeEpochOrder(BuiltinSampler(), epoch);
  QueueChecked(epoch, options_.seed, std::move(order.indices), std::move(order.offsets));
  return absl::OkStatus();
}

absl::Status Loader::QueueEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                                std::vector<int64_t> offsets) {
  RL_RETURN_IF_ERROR(CheckBatchable());
  RL_RETURN_IF_ERROR(CheckOrder(indices, offsets));
  // See the header: pipe: streams are not read ahead, nor anything under a tight budget.
  if (has_pipes_ || !read_ahead_) return absl::OkStatus();
  QueueChecked(epoch, seed, std::move(indices), std::move(offsets));
  return absl::OkStatus();
}

absl::StatusOr<Batch> Loader::Next(double timeout_seconds) {
  if (!epoch_) return absl::FailedPreconditionError("Next() before StartEpoch()");
  const auto start = Clock::now();
  absl::StatusOr<Batch> batch =
      stager_ ? epoch_->NextStaged(start, timeout_seconds) : epoch_->NextHost(start, timeout_seconds);
  if (!IsEndOfEpoch(batch.status())) {
    counters_->wait_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
  }
  if (batch.ok()) counters_->batches.fetch_add(1, std::memory_order_relaxed);
  return batch;
}

size_t Loader::row_bytes() const { return views_ ? views_->row_bytes : pipeline_.SampleBytes(); }

absl::Status Loader::DecodeRow(ImageDecoder& decoder, RenderState& state, const uint8_t* data,
                               size_t size, uint64_t sample_seed, uint8_t* dst) const {
  absl::Status status;
  if (views_) {
    status = DecodeViews(decoder, data, size, *views_, sample_seed, state, dst);
  } else {
    SampleRng rng(sample_seed);
    status = decoder.DecodeInto(data, size, pipeline_, rng, dst);
  }
  if (status.ok()) {
    counters_->decodes.fetch_add(1, std::memory_order_relaxed);
    counters_->views_rendered.fetch_add(views_ ? static_cast<int64_t>(views_->pipelines.size()) : 1,
                                        std::memory_order_relaxed);
  }
  return status;
}

Batch Loader::BatchShell(int64_t number, int size) const {
  Batch batch;
  batch.number_ = number;
  batch.size_ = size;
  batch.height_ = pipeline_.out_h();
  batch.width_ = pipeline_.out_w();
  batch.dtype_ = pipeline_.dtype();
  batch.layout_ = pipeline_.layout();
  batch.sample_bytes_ = row_bytes();
  return batch;
}

int64_t Loader::BatchesPerEpoch() const { return ringloader::BatchesPerEpoch(BuiltinSampler()); }

SamplerOptions Loader::BuiltinSampler() const {
  SamplerOptions sampler;
  sampler.dataset_size = dataset_size();
  sampler.batch_size = options_.batch_size;
  sampler.shuffle = options_.shuffle;
  sampler.drop_last = options_.drop_last;
  sampler.seed = options_.seed;
  sampler.rank = options_.rank;
  sampler.world_size = options_.world_size;
  return sampler;
}

int64_t Loader::num_batches() const { return epoch_ ? epoch_->num_batches : 0; }
int64_t Loader::next_batch() const { return epoch_ ? epoch_->next_batch : 0; }

LoaderStats Loader::Stats() const {
  LoaderStats s;
  // The loader's counts plus those of the adopted epoch in progress (Epoch::own_counters).
  std::lock_guard<std::mutex> handoff(handoff_mu_);
  const Counters* adopted = epoch_ ? epoch_->own_counters.get() : nullptr;
  auto count = [adopted](std::atomic<int64_t> Counters::*field, const Counters& base) {
    return (base.*field).load(std::memory_order_relaxed) +
           (adopted ? (adopted->*field).load(std::memory_order_relaxed) : 0);
  };
  s.samples = count(&Counters::samples, *counters_);
  s.batches = counters_->batches.load(std::memory_order_relaxed);
  s.errors = count(&Counters::errors, *counters_);
  s.skipped = count(&Counters::skipped, *counters_);
  s.replaced = count(&Counters::replaced, *counters_);
  s.decodes = counters_->decodes.load(std::memory_order_relaxed);
  s.views_rendered = counters_->views_rendered.load(std::memory_order_relaxed);
  s.samples_ahead = queued_ ? queued_->counters->samples.load(std::memory_order_relaxed) : 0;
  s.bytes_read = counters_->bytes_read.load(std::memory_order_relaxed) + streams_->bytes_read();
  s.stream_restarts = streams_->restarts();
  s.read_seconds = counters_->read_ns.load(std::memory_order_relaxed) * 1e-9;
  s.decode_seconds = counters_->decode_ns.load(std::memory_order_relaxed) * 1e-9;
  s.wait_seconds = counters_->wait_ns.load(std::memory_order_relaxed) * 1e-9;
  s.epochs_queued = counters_->epochs_queued.load(std::memory_order_relaxed);
  s.epochs_adopted = counters_->epochs_adopted.load(std::memory_order_relaxed);
  s.slots_allocated = pool_->allocated();
  s.slots_held = pool_->held_by_consumer();
  s.io_backend = io_backend_ == IoBackend::kUring ? "io_uring" : "pread";
  s.io_note = io_note_;
  s.memory = pool_->allocator().name();
  s.memory_note = memory_note_;
  s.numa_node = placement_->node;
  s.numa_cpus = FormatCpuList(placement_->cpus);
  s.numa_note = placement_->note;
  s.threads_pinned = counters_->threads_pinned.load(std::memory_order_relaxed);
  s.decode_threads = options_.num_workers;
  s.reader_threads = options_.reader_threads;
  s.threads_note = threads_note_;
  s.prefetch_batches = pool_->base_slots();
  s.prefetch_max = prefetch_cap_;
  s.prefetch_grown = counters_->prefetch_grown.load(std::memory_order_relaxed);
  s.max_slots = pool_->max_slots();
  s.max_memory = static_cast<int64_t>(memory_budget_);
  s.memory_budget_note = memory_budget_note_;
  s.slots_note = slots_note_;
  s.read_ahead = read_ahead_ && !has_pipes_;
  s.read_buffers = static_cast<int>(buffers_[0].size());
  s.slot_bytes = static_cast<int64_t>(pool_->slot_bytes());
  s.producer_waits = pool_->producer_waits();
  s.idle_spells = counters_->idle_spells.load(std::memory_order_relaxed);
  s.batches_completed = counters_->batches_completed.load(std::memory_order_relaxed);
  s.device = stager_ ? stager_->name() : "cpu";
  if (stager_) {
    s.device_buffers = stager_->buffers_allocated();
    s.device_buffers_held = stager_->buffers_held();
    s.device_bytes = stager_->bytes_copied();
    s.device_copy_seconds = stager_->copy_seconds();
  }
  std::lock_guard<std::mutex> lock(counters_->mu);
  s.thread_cpus = FormatCpuList(counters_->thread_cpus);
  if (!counters_->pin_error.empty()) absl::StrAppend(&s.numa_note, "; pinning failed: ", counters_->pin_error);
  s.recent_errors.assign(counters_->recent_errors.begin(), counters_->recent_errors.end());
  if (adopted) {
    std::lock_guard<std::mutex> own(adopted->mu);
    s.recent_errors.insert(s.recent_errors.end(), adopted->recent_errors.begin(), adopted->recent_errors.end());
    if (s.recent_errors.size() > kRecentErrors) {
      s.recent_errors.erase(s.recent_errors.begin(), s.recent_errors.end() - kRecentErrors);
    }
  }
  if (!s.recent_errors.empty()) s.last_error = s.recent_errors.back();
  if (epoch_ && epoch_->pipeline_started && !ForkedChild()) {
    s.seconds_since_progress = epoch_->SecondsSinceProgress();
    s.stalled = epoch_->Stalled();
    s.pipeline_state = epoch_->DescribeState();
  }
  return s;
}

absl::Status Loader::DecodeSample(int64_t index, uint64_t seed, int64_t epoch, void* dst) const {
  if (!pipeline_.fixed_size()) {
    return absl::FailedPreconditionError(
        "this loader's output size depends on the image: decode with an allocator");
  }
  return DecodeSample(index, seed, epoch, -1, [dst](int, int) { return dst; });
}

absl::Status Loader::DecodeSample(int64_t index, uint64_t seed, int64_t epoch, int64_t key,
                                  const OutputAllocator& allocate) const {
  if (views_) {
    return absl::FailedPreconditionError(
        "this loader renders several views a sample: single samples decode one rendering");
  }
  if (index < 0 || index >= dataset_size()) {
    return absl::OutOfRangeError(absl::StrCat("index ", index, " outside the dataset of ",
                                              dataset_size(), " samples"));
  }
  const Sample& sample = samples_[static_cast<size_t>(index)];
  const std::string& path = sample.path;
  ByteBuffer buffer;
  absl::Status status = ReadSampleBytes(sample, options_.max_file_bytes, &buffer, streams_.get(), nullptr);
  if (status.ok()) {
    ImageDecoder decoder;
    decoder.set_max_image_pixels(options_.max_image_pixels);
    decoder.set_dct_scaling(options_.fast_decode);
    decoder.set_strict(options_.strict_decode);
    decoder.set_exif_transpose(options_.exif_transpose);
    SampleRng rng(SampleSeed(seed, static_cast<uint64_t>(epoch),
                             static_cast<uint64_t>(key < 0 ? index : key)));
    // The output size follows from the header and the geometric draws: plan on a copy of the
    // generator (DecodeInto plans again from the same state and gets the same geometry).
    absl::StatusOr<ImageInfo> info = decoder.ReadInfo(buffer.data(), buffer.size());
    status = info.status();
    if (status.ok()) {
      SampleRng planner = rng;
      int h = 0, w = 0;
      pipeline_.OutputSize(pipeline_.Plan(info->width, info->height, planner), &h, &w);
      void* dst = allocate(h, w);
      status = dst == nullptr
                   ? absl::ResourceExhaustedError("no memory for the decoded sample")
                   : decoder.DecodeInto(buffer.data(), buffer.size(), pipeline_, rng, dst);
    }
  }
  if (!status.ok()) return AnnotateSampleError(status, index, path);
  return absl::OkStatus();
}

}  // namespace ringloader
