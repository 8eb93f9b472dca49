// The pipeline of one epoch (see epoch.h).

#include "pipeline/epoch.h"

#include <pthread.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_util.h"
#include "cuda/device_stager.h"
#include "pipeline/views.h"
#include "transform/render.h"

namespace ringloader {
namespace {

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

}  // namespace

absl::Status AnnotateSampleError(const absl::Status& cause, int64_t index, const std::string& sample_path) {
  // A several-file sample's error is its failing file's (views.h: NameFile).
  const auto file = cause.GetPayload(kSampleFilePayload);
  const std::string path = file.has_value() ? std::string(*file) : sample_path;
  absl::Status status(absl::StatusCode::kDataLoss,
                      absl::StrCat("sample ", index, " (", path, "): ", cause.message()));
  status.SetPayload(kSampleIndexPayload, absl::Cord(absl::StrCat(index)));
  status.SetPayload(kSamplePathPayload, absl::Cord(path));
  status.SetPayload(kSampleReasonPayload, absl::Cord(cause.message()));
  status.SetPayload(kSampleCausePayload, absl::Cord(absl::StatusCodeToString(cause.code())));
  return status;
}

std::unique_ptr<ImageDecoder> MakeDecoder(const LoaderOptions& options) {
  auto decoder = std::make_unique<ImageDecoder>();
  decoder->set_max_image_pixels(options.max_image_pixels);
  // Region-of-interest decoding is always exact.
  decoder->set_fast_decode(!options.fast_decode          ? FastDecode::kOff
                           : options.fast_decode_fastest ? FastDecode::kFastest
                                                         : FastDecode::kScale);
  decoder->set_strict(options.strict_decode);
  decoder->set_exif_transpose(options.exif_transpose);
  return decoder;
}

absl::Status DecodeRow(ImageDecoder& decoder, RenderState& state, const TransformPipeline& pipeline,
                       const ViewSet* views, absl::Span<const EncodedFile> files, uint64_t sample_seed,
                       uint8_t* dst, LoaderCounters* counters, const OutputSink* sink) {
  absl::Status status;
  int decodes = 1;
  if (views != nullptr) {
    decodes = 0;
    status = DecodeViews(decoder, files, *views, sample_seed, state, dst, &decodes, sink);
  } else {
    SampleRng rng(sample_seed);
    status = decoder.DecodeInto(files[0].data, files[0].size, pipeline, rng, dst);
  }
  if (status.ok()) {
    counters->decodes.fetch_add(decodes, std::memory_order_relaxed);
    counters->views_rendered.fetch_add(views != nullptr ? static_cast<int64_t>(views->pipelines.size()) : 1,
                                       std::memory_order_relaxed);
  }
  return status;
}

Batch BatchAccess::Shell(const TransformPipeline& pipeline, size_t row_bytes, int64_t number, int size) {
  Batch batch;
  batch.number_ = number;
  batch.size_ = size;
  batch.height_ = pipeline.out_h();
  batch.width_ = pipeline.out_w();
  batch.dtype_ = pipeline.dtype();
  batch.layout_ = pipeline.layout();
  batch.sample_bytes_ = row_bytes;
  return batch;
}

void BatchAccess::SetHost(Batch& batch, uint8_t* base, const SlotLayout& layout,
                          std::shared_ptr<SlotLease> lease, bool pinned) {
  batch.lease_ = std::move(lease);
  batch.images_ = base;
  batch.labels_ = layout.labels(base);
  batch.indices_ = layout.indices(base);
  batch.pinned_ = pinned;
}

void BatchAccess::SetDevice(Batch& batch, int device, uint8_t* device_base, const SlotLayout& layout,
                            std::shared_ptr<DeviceLease> lease,
                            std::shared_ptr<std::vector<int64_t>> rows, bool pinned) {
  batch.labels_ = rows->data();
  batch.indices_ = rows->data() + batch.size_;
  batch.host_rows_ = std::move(rows);
  batch.device_lease_ = std::move(lease);
  batch.device_ = device;
  batch.device_images_ = device_base;
  batch.device_labels_ = layout.labels(device_base);
  batch.device_indices_ = layout.indices(device_base);
  batch.pinned_ = pinned;
}

Epoch::Epoch(EpochContext context, int64_t epoch_number, uint64_t epoch_seed, std::vector<int64_t> order,
             std::vector<int64_t> batch_offsets, int64_t first_batch, std::vector<ByteBuffer>* buffer_set,
             bool queued)
    : ctx(std::move(context)),
      buffers(*buffer_set),
      more_bytes(buffer_set->size()),
      own_counters(queued ? std::make_unique<LoaderCounters>() : nullptr),
      counters(queued ? own_counters.get() : ctx.counters),
      epoch(epoch_number),
      seed(epoch_seed),
      indices(std::move(order)),
      offsets(std::move(batch_offsets)),
      num_batches(static_cast<int64_t>(offsets.size()) - 1),
      next_batch(first_batch),
      window(static_cast<size_t>(ctx.pool->max_slots())),
      requests(static_cast<size_t>(std::max(64, 2 * ctx.options->batch_size))),
      decode_queue(static_cast<size_t>(ctx.options->reader_threads * ctx.options->io_depth +
                                       2 * ctx.options->num_workers)),
      free_buffers(buffer_set->size()) {
  for (int i = 0; i < static_cast<int>(buffer_set->size()); ++i) {
    (void)free_buffers.TryPush(i);
  }
  for (BatchTask& task : window) task.skip.assign(static_cast<size_t>(ctx.options->batch_size), 0);
  dispatched = first_batch;
  taken = first_batch;
  if (queued) ahead_limit = std::max({1, ctx.prefetch_cap, ctx.pool->base_slots()});
}

void Epoch::Adopted() {
  std::lock_guard<std::mutex> lock(ready_mu);
  ahead_limit = INT64_MAX;
  ready_cv.notify_all();
}

Epoch::FileIdentity Epoch::IdentityOf(const std::string& path) {
  struct stat st;
  FileIdentity id;
  if (::stat(path.c_str(), &st) != 0) return id;
  id.exists = true;
  id.device = static_cast<uint64_t>(st.st_dev);
  id.inode = static_cast<uint64_t>(st.st_ino);
  id.size = static_cast<int64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return id;
}

void Epoch::NoteAheadFiles(const Sample& sample) {
  std::lock_guard<std::mutex> lock(ready_mu);
  if (ahead_limit == INT64_MAX) return;  // not queued, or adopted: read as the files are now
  const std::string* file = sample.error.empty() ? ctx.readers->For(sample).LocalFile(sample) : nullptr;
  if (file != nullptr) ahead_files.emplace_back(*file, IdentityOf(*file));
  for (const Sample::File& file : sample.more_files) {
    if (ReadFromDisk(file)) ahead_files.emplace_back(file.path, IdentityOf(file.path));
  }
}

bool Epoch::AheadFilesUnchanged() {
  std::vector<std::pair<std::string, FileIdentity>> files;
  {
    std::lock_guard<std::mutex> lock(ready_mu);
    files = ahead_files;
  }
  for (const auto& [path, identity] : files) {
    if (!(IdentityOf(path) == identity)) return false;
  }
  return true;
}

bool Epoch::MayDispatch(int64_t b) {
  std::unique_lock<std::mutex> lock(ready_mu);
  if (b >= ahead_limit) {
    GaugeScope waiting(gauges.dispatcher_waiting_adoption);
    while (b >= ahead_limit && !cancel.load(std::memory_order_acquire)) ready_cv.wait(lock);
  }
  return !cancel.load(std::memory_order_acquire);
}

void Epoch::StartPipeline() {
  if (pipeline_started) return;
  pipeline_started = true;
  // What this epoch will read, from where it starts (a `pipe:` stream keeps the members it
  // passes on the way to another; a loader whose readers allow no read-ahead never queues an
  // epoch, so one epoch at a time owns such streams).
  ctx.readers->BeginEpoch(*ctx.samples,
                          absl::MakeConstSpan(indices).subspan(static_cast<size_t>(Offset(next_batch))));
  readers_left.store(ctx.options->reader_threads, std::memory_order_relaxed);
  last_progress_ns.store(NowNanos(), std::memory_order_relaxed);
  // Pinning happens first thing in each thread, before it touches a slot or a buffer, so
  // first-touch page placement also lands on the chosen node.
  dispatcher = std::thread([this] {
    ctx.enter_thread("rl-dispatch");
    Dispatch();
  });
  for (int i = 0; i < ctx.options->reader_threads; ++i) {
    readers.emplace_back([this] {
      ctx.enter_thread("rl-read");
      Read();
      // The last reader out ends the epoch's reads (a `pipe:` stream's command: nothing more
      // will be read).
      if (readers_left.fetch_sub(1, std::memory_order_acq_rel) == 1) ctx.readers->EndEpoch();
    });
  }
  for (int i = 0; i < ctx.options->num_workers; ++i) {
    workers.emplace_back([this] {
      ctx.enter_thread("rl-decode");
      Decode();
    });
  }
}

void Epoch::StartStage() {
  if (ctx.stager && !stage_thread.joinable()) {
    stage_thread = std::thread([this] {
      ctx.enter_thread("rl-stage");
      StageBatches();
    });
  }
}

void Epoch::Cancel() {
  cancel.store(true, std::memory_order_release);
  requests.Close();
  decode_queue.Close();
  free_buffers.Close();
  ctx.pool->Wake();
  {
    std::lock_guard<std::mutex> lock(ready_mu);  // a dispatcher waiting for adoption (MayDispatch)
    ready_cv.notify_all();
  }
  if (dispatcher.joinable()) dispatcher.join();
  for (auto& t : readers) t.join();
  for (auto& t : workers) t.join();
  readers.clear();
  workers.clear();
  if (stage_thread.joinable()) stage_thread.join();  // its waits are sliced and see `cancel`
  ctx.readers->EndEpoch();  // e.g. kill and reap the epoch's `pipe:` commands
  // Slots of batches that were dispatched but never taken go back to the free list. (Staged
  // device batches that were never delivered release their buffers with `staged`.)
  for (int64_t b = taken; b < dispatched; ++b) {
    BatchTask& task = Task(b);
    if (task.slot >= 0) ctx.pool->Recycle(task.slot);
    task.slot = -1;
  }
  dispatched = taken;
}

void Epoch::MarkReady(BatchTask& task) {
  std::lock_guard<std::mutex> lock(ready_mu);
  task.ready = true;
  ++ready_count;
  last_progress_ns.store(NowNanos(), std::memory_order_relaxed);
  ctx.counters->batches_completed.fetch_add(1, std::memory_order_relaxed);
  if (!idle_seen && PipelineIdle()) {
    idle_seen = true;
    ctx.counters->idle_spells.fetch_add(1, std::memory_order_relaxed);
  }
  ready_cv.notify_all();
}

void Epoch::Fail(absl::Status status) {
  std::lock_guard<std::mutex> lock(ready_mu);
  if (fatal.ok()) fatal = std::move(status);
  ready_cv.notify_all();
}

absl::StatusOr<Epoch::Taken> Epoch::Take(int64_t b, Clock::time_point start, double timeout_seconds, bool consumer) {
  BatchTask& task = Task(b);
  {
    std::unique_lock<std::mutex> lock(ready_mu);
    while (!(task.ready && task.number == b)) {
      if (!fatal.ok()) return fatal;
      if (cancel.load(std::memory_order_acquire)) return absl::CancelledError("epoch stopped");
      if (consumer && ctx.pool->Exhausted()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "all ", ctx.pool->max_slots(), " batch slots are held by the consumer; release earlier "
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
  const SlotLayout layout = LayoutOf(ctx.row_bytes, ctx.options->batch_size);
  if (out.error.ok() && task.skipped.load(std::memory_order_relaxed) > 0) {
    // ErrorPolicy::kSkip: close the gaps so the batch is dense and in sampler order.
    uint8_t* base = ctx.pool->data(out.slot);
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
    ctx.pool->Recycle(out.slot);
    out.slot = -1;
  }
  return out;
}

absl::StatusOr<Batch> Epoch::NextHost(Clock::time_point start, double timeout_seconds) {
  const SlotLayout layout = LayoutOf(ctx.row_bytes, ctx.options->batch_size);
  while (true) {  // loops only past batches whose every sample was skipped
    const int64_t b = next_batch;
    if (b >= num_batches) return absl::OutOfRangeError("end of epoch");
    if (ctx.options->auto_prefetch) AdaptPrefetch(b);
    RL_ASSIGN_OR_RETURN(Taken t, Take(b, start, timeout_seconds, /*consumer=*/true));
    next_batch = b + 1;
    if (!t.error.ok()) return t.error;
    if (t.size == 0) continue;
    Batch batch = BatchAccess::Shell(*ctx.pipeline, ctx.row_bytes, b, t.size);
    uint8_t* base = ctx.pool->data(t.slot);
    BatchAccess::SetHost(batch, base, layout, ctx.pool->Deliver(t.slot), ctx.pool->pinned());
    return batch;
  }
}

void Epoch::AdaptPrefetch(int64_t b) {
  bool ready = false, idle = false;
  {
    std::lock_guard<std::mutex> lock(ready_mu);
    BatchTask& task = Task(b);
    ready = task.ready && task.number == b;
    // Idle now, or at any moment since the last call (recorded as batches completed).
    idle = idle_seen || PipelineIdle();
    idle_seen = false;
  }
  if (governor.OnNext(ready, idle) && ctx.pool->GrowBase(ctx.prefetch_cap)) {
    ctx.counters->prefetch_grown.fetch_add(1, std::memory_order_relaxed);
  }
}

void Epoch::StageBatches() {
  DeviceStager& stager = *ctx.stager;
  const SlotLayout layout = LayoutOf(ctx.row_bytes, ctx.options->batch_size);
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
    uint8_t* base = ctx.pool->data(t->slot);
    auto rows = std::make_shared<std::vector<int64_t>>(layout.labels(base), layout.labels(base) + t->size);
    rows->insert(rows->end(), layout.indices(base), layout.indices(base) + t->size);
    absl::StatusOr<std::shared_ptr<DeviceLease>> lease =
        stager.Stage(base, ctx.pool->slot_bytes(), ctx.pool->Deliver(t->slot));
    if (!lease.ok()) {
      PushStaged(StagedBatch{b, absl::Status(lease.status().code(),
                                             absl::StrCat("batch ", b, ": ", lease.status().message())),
                             Batch()});
      continue;
    }
    Batch batch = BatchAccess::Shell(*ctx.pipeline, ctx.row_bytes, b, t->size);
    auto* device_base = static_cast<uint8_t*>((*lease)->data());
    BatchAccess::SetDevice(batch, stager.device(), device_base, layout, std::move(*lease), std::move(rows),
                           ctx.pool->pinned());
    PushStaged(StagedBatch{b, absl::OkStatus(), std::move(batch)});
  }
  std::lock_guard<std::mutex> lock(staged_mu);
  stage_done = true;
  staged_cv.notify_all();
}

absl::StatusOr<Batch> Epoch::NextStaged(Clock::time_point start, double timeout_seconds) {
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
    if (stage_waiting && !ctx.stager->HasFreeBuffer() &&
        ctx.stager->buffers_held() >= ctx.stager->max_buffers()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "all ", ctx.stager->max_buffers(), " device buffers are held by the consumer; free earlier "
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

void Epoch::Dispatch() {
  const SlotLayout layout = LayoutOf(ctx.row_bytes, ctx.options->batch_size);
  for (int64_t b = dispatched; b < num_batches; ++b) {
    if (!MayDispatch(b)) return;  // cancelled while queued
    absl::StatusOr<int> slot = [&] {
      GaugeScope waiting(gauges.dispatcher_waiting_slot);
      return ctx.pool->Acquire(cancel);
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
    uint8_t* base = ctx.pool->data(*slot);
    int64_t* labels = layout.labels(base);
    int64_t* row_indices = layout.indices(base);
    for (int r = 0; r < size; ++r) {
      const int64_t index = indices[static_cast<size_t>(Offset(b) + r)];
      row_indices[r] = index;
      labels[r] = ctx.samples->label(static_cast<size_t>(index));
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
  ctx.dispatch_finished(this);  // the queued epoch, if any, goes on from here
}

void Epoch::Read() {
  const LoaderOptions& o = *ctx.options;
  std::unique_ptr<FileFetcher> fetcher;
  {
    std::lock_guard<std::mutex> lock(RingLifetimeMutex());
    absl::StatusOr<std::unique_ptr<Reader>> reader = MakeReader(ctx.io_backend, o.io_depth, nullptr);
    if (!reader.ok()) return Fail(reader.status());
    fetcher = std::make_unique<FileFetcher>(std::move(*reader), o.max_file_bytes);
    fetcher->set_cancel(&cancel);
  }
  ReadWith(*fetcher);
  std::lock_guard<std::mutex> lock(RingLifetimeMutex());
  fetcher.reset();  // waits for reads still in flight (cancelled), then unmaps the ring
}

void Epoch::ReadWith(FileFetcher& fetcher) {
  std::vector<ReadRequest> by_buffer(buffers.size());
  std::vector<FetchedFile> done;
  std::optional<ReadRequest> pending;  // taken from the queue, waiting for a buffer
  Sample scratch;  // the sample being read, when the loader's samples are columns
  bool input_done = false;
  uint64_t bytes_reported = 0;
  const ReadContext read_context{&fetcher, &cancel, &gauges.readers_streaming};
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
      const Sample& sample = ctx.samples->Get(static_cast<size_t>(request.index), &scratch);
      // A several-file sample reads its other files with a buffer of its own, even when file 0
      // is in memory (unless every file is).
      const bool reads_more =
          std::any_of(sample.more_files.begin(), sample.more_files.end(), ReadFromDisk);
      if (!sample.error.empty()) {
        // Known bad (e.g. a shard member without an image): nothing to read, no buffer.
        pending.reset();
        GaugeScope handing(gauges.readers_handing_on);
        if (!decode_queue.Push(DecodeItem{request, -1, absl::DataLossError(sample.error)})) return;
        continue;
      }
      const SampleReader& reader = ctx.readers->For(sample);
      if (!reader.Ready(sample)) {
        // A deferred row's group not handed over yet, a remote shard still downloading: this
        // reader's reads in flight are handed on before it waits (for a shard, its open in
        // FileFetcher::Start waits).
        if (!may_block) break;
        const auto wait_start = Clock::now();
        absl::Status ready = reader.WaitReady(sample, read_context);
        idle_ns += NanosSince(wait_start);
        if (!ready.ok()) return;  // cancelled
      }
      if (reader.InPlace() && !reads_more) {
        // In memory, or a row handed over with its group: nothing to read, no buffer (the
        // decoder takes the bytes where they lie).
        pending.reset();
        GaugeScope handing(gauges.readers_handing_on);
        if (!decode_queue.Push(DecodeItem{request, -1, absl::OkStatus()})) return;
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
      if (reads_more) {
        // Read here, whole and synchronously (label images and pairs are small next to the
        // reads in flight), into the files paired with this buffer; file 0 goes on as usual.
        std::vector<ByteBuffer>& more = more_bytes[static_cast<size_t>(*buffer)];
        absl::Status status = ReadMoreFiles(*ctx.readers, sample, &more, &cancel);
        if (absl::IsCancelled(status) && cancel.load(std::memory_order_acquire)) return;
        for (size_t k = 0; k < sample.more_files.size() && k < more.size(); ++k) {
          if (ReadFromDisk(sample.more_files[k])) {
            ctx.counters->bytes_read.fetch_add(static_cast<int64_t>(more[k].size()),
                                               std::memory_order_relaxed);
          }
        }
        if (!status.ok() || reader.InPlace()) {
          GaugeScope handing(gauges.readers_handing_on);
          if (!decode_queue.Push(DecodeItem{request, *buffer, std::move(status)})) return;
          continue;
        }
      }
      // Started on the fetcher (files: many reads in flight), or read here (a `pipe:` stream's
      // member: the stream is sequential, not positional).
      by_buffer[static_cast<size_t>(*buffer)] = request;
      std::optional<absl::Status> now = reader.Read(sample, &buffers[static_cast<size_t>(*buffer)],
                                                    static_cast<uint64_t>(*buffer), read_context);
      if (!now) continue;
      if (absl::IsCancelled(*now) && cancel.load(std::memory_order_acquire)) return;
      // A shard's index that no longer matches it: its byte ranges and labels are wrong, so the
      // epoch ends here rather than any ErrorPolicy delivering or replacing rows of it.
      if (IsStaleIndex(*now)) return Fail(*std::move(now));
      GaugeScope handing(gauges.readers_handing_on);
      if (!decode_queue.Push(DecodeItem{request, *buffer, *std::move(now)})) return;
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
    ctx.counters->read_ns.fetch_add(NanosSince(busy_start) - idle_ns, std::memory_order_relaxed);
    // Live byte count (the fetcher's is cumulative): readers report as they go.
    const uint64_t read_total = fetcher.bytes_read();
    ctx.counters->bytes_read.fetch_add(static_cast<int64_t>(read_total - bytes_reported),
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
  ctx.counters->bytes_read.fetch_add(static_cast<int64_t>(fetcher.bytes_read() - bytes_reported),
                                          std::memory_order_relaxed);
}

OutputSink Epoch::SinkFor(int slot, int64_t batch) {
  if (ctx.views == nullptr ||
      std::none_of(ctx.views->variable.begin(), ctx.views->variable.end(), [](bool v) { return v; })) {
    return OutputSink();
  }
  return [this, slot, batch](int h, int w, DType dtype, size_t bytes) -> absl::StatusOr<OutputBuffer> {
    // Destroyed in reverse order: the grant with the pixels (kept by the budget for a later
    // output, or freed), then the budget (the consumer may hold the output after the loader
    // is gone).
    struct Held {
      std::shared_ptr<DecodeBudget> budget;
      DecodeBudget::Grant grant;
      OutputPages data;  // without a budget
    };
    auto held = std::make_shared<Held>();
    held->budget = ctx.budget_owner;
    uint8_t* pixels = nullptr;
    if (held->budget) {
      RL_ASSIGN_OR_RETURN(held->grant,
                          held->budget->AcquireOutputBuffer(
                              bytes, absl::StrCat("its output (", w, " x ", h, " ", DTypeName(dtype), ")"),
                              &cancel, [this, batch] { return batch <= taken.load(std::memory_order_acquire); }));
      pixels = held->grant.data();
    } else {
      RL_ASSIGN_OR_RETURN(held->data, OutputPages::New(bytes));
      pixels = held->data.data();
    }
    SampleOutput out;
    out.data = pixels;
    out.bytes = bytes;
    out.height = h;
    out.width = w;
    out.dtype = dtype;
    out.hold = std::move(held);
    uint8_t* data = out.data;
    return OutputBuffer{ctx.pool->AddOutput(slot, std::move(out)), data};
  };
}

void Epoch::Decode() {
  const LoaderOptions& o = *ctx.options;
  const size_t sample_bytes = ctx.row_bytes;
  const std::unique_ptr<ImageDecoder> decoder = MakeDecoder(o);
  decoder->set_memory_budget(ctx.decode_budget);
  RenderState render;  // the views' (DecodeRow); one pipeline renders in the decoder
  Sample scratch;      // the sample being decoded, when the loader's samples are columns
  ByteBuffer substitute_bytes;
  std::vector<ByteBuffer> substitute_more;
  while (std::optional<DecodeItem> item = decode_queue.Pop()) {
    if (cancel.load(std::memory_order_acquire)) continue;  // drain quickly
    GaugeScope busy(gauges.decoders_busy);
    BatchTask& task = Task(item->request.batch);
    absl::Status status = std::move(item->status);
    // The bytes decoded, from the sample's reader: what it holds (a deferred row: its group's
    // bytes) stays held until the row is decoded or replaced, then is released.
    SampleBytes bytes;
    if (status.ok()) {
      const auto start = Clock::now();
      const Sample& sample = ctx.samples->Get(static_cast<size_t>(item->request.index), &scratch);
      status = ctx.readers->For(sample).Bytes(
          sample, item->buffer >= 0 ? &buffers[static_cast<size_t>(item->buffer)] : nullptr, &bytes);
      if (status.ok()) {
        static const std::vector<ByteBuffer> kNoMore;
        const std::vector<EncodedFile> files =
            FilesOf(sample, bytes.data, bytes.size,
                    item->buffer >= 0 ? more_bytes[static_cast<size_t>(item->buffer)] : kNoMore);
        uint8_t* dst = ctx.pool->data(task.slot) + sample_bytes * item->request.row;
        const OutputSink sink = SinkFor(task.slot, item->request.batch);
        status = DecodeRow(*decoder, render, *ctx.pipeline, ctx.views, files, RowSeed(item->request), dst,
                           ctx.counters, &sink);
      }
      ctx.counters->decode_ns.fetch_add(NanosSince(start), std::memory_order_relaxed);
    }
    // capacity == buffer count: never full. Known-bad samples hold no buffer (-1).
    if (item->buffer >= 0) (void)free_buffers.TryPush(item->buffer);
    if (!status.ok()) {
      const std::string& path = ctx.samples->Get(static_cast<size_t>(item->request.index), &scratch).path;
      status = AnnotateSampleError(status, item->request.index, path);
      counters->RecordError(status);
      if (o.on_error == ErrorPolicy::kSkip) {
        task.skip[static_cast<size_t>(item->request.row)] = 1;
        task.skipped.fetch_add(1, std::memory_order_relaxed);
        counters->skipped.fetch_add(1, std::memory_order_relaxed);
        status = absl::OkStatus();
      } else if (o.on_error == ErrorPolicy::kReplace) {
        uint8_t* dst = ctx.pool->data(task.slot) + sample_bytes * item->request.row;
        status = Replace(*decoder, render, substitute_bytes, substitute_more, item->request, dst,
                         std::move(status));
      }
    }
    if (bytes.hold != nullptr) {
      const Sample& sample = ctx.samples->Get(static_cast<size_t>(item->request.index), &scratch);
      ctx.readers->For(sample).Release(sample, bytes);
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

void Epoch::PushStaged(StagedBatch batch, bool fatal_error) {
  std::lock_guard<std::mutex> lock(staged_mu);
  if (fatal_error) {
    stage_fatal = std::move(batch.error);
  } else {
    staged.push_back(std::move(batch));
  }
  staged_cv.notify_all();
}

void Epoch::SetStageWaiting(bool waiting) {
  std::lock_guard<std::mutex> lock(staged_mu);
  if (stage_waiting == waiting) return;
  stage_waiting = waiting;
  staged_cv.notify_all();
}

std::string Epoch::DescribeState() {
  int64_t flight, complete, first_taken;
  {
    std::lock_guard<std::mutex> lock(ready_mu);
    flight = in_flight;
    complete = ready_count;
    first_taken = taken;
  }
  auto n = [](const std::atomic<int>& gauge) { return gauge.load(std::memory_order_relaxed); };
  const LoaderOptions& o = *ctx.options;
  std::string dispatcher = n(gauges.dispatcher_waiting_slot) > 0     ? "waiting for a free slot"
                           : n(gauges.dispatcher_pushing) > 0       ? "waiting to queue a read request"
                           : n(gauges.dispatcher_waiting_adoption) > 0 ? "read ahead as far as it may, "
                                                                       "waiting for the epoch to begin"
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
      ctx.pool->allocated(), ctx.pool->max_slots(), ctx.pool->held_by_consumer());
}

absl::Status Epoch::Replace(ImageDecoder& decoder, RenderState& render, ByteBuffer& bytes,
                            std::vector<ByteBuffer>& more, const ReadRequest& request, uint8_t* dst,
                            absl::Status cause) {
  const int64_t n = static_cast<int64_t>(ctx.samples->size());
  const uint64_t sample_seed = RowSeed(request);
  // The failed sample's reader says where substitutes may come from (a deferred row: its own
  // group, held while it is being decoded; the dataset's other groups may be nowhere in memory).
  Sample failed_scratch, scratch;  // the failed sample's, a substitute's
  const Sample& failed = ctx.samples->Get(static_cast<size_t>(request.index), &failed_scratch);
  const SampleReader& failed_reader = ctx.readers->For(failed);
  const absl::StatusOr<SampleRun> run = failed_reader.SubstitutesFor(failed, request.index, n);
  if (!run.ok()) return cause;
  const int64_t first = run->first, count = run->count;
  const uint64_t attempts = ReplaceAttempts(count);  // random draws, then a walk (epoch.h)
  for (uint64_t attempt = 0; attempt < attempts; ++attempt) {
    const int64_t substitute = first + ReplaceCandidate(sample_seed, attempt, count);
    if (substitute == request.index) continue;
    const Sample& candidate = ctx.samples->Get(static_cast<size_t>(substitute), &scratch);
    if (!failed_reader.MayStandIn(failed, candidate)) continue;
    NoteAheadFiles(candidate);  // before its bytes are read
    absl::Status status = ctx.readers->ReadAside(candidate, &bytes, &cancel);
    if (IsStaleIndex(status)) {
      // The substitute's shard has a stale index: no substitute of it may stand in, nor may the epoch go on.
      Fail(status);
      return status;
    }
    if (ctx.readers->For(candidate).Gone(status)) continue;  // e.g. a released row: not a failure of it
    if (status.ok()) status = ReadMoreFiles(*ctx.readers, candidate, &more, &cancel);
    if (status.ok()) {
      const std::vector<EncodedFile> files = FilesOf(candidate, bytes.data(), bytes.size(), more);
      const OutputSink sink = SinkFor(Task(request.batch).slot, request.batch);
      status = DecodeRow(decoder, render, *ctx.pipeline, ctx.views, files, sample_seed, dst, ctx.counters,
                         &sink);
    }
    if (!status.ok()) {
      counters->RecordError(AnnotateSampleError(status, substitute, candidate.path));
      continue;
    }
    const SlotLayout layout = LayoutOf(ctx.row_bytes, ctx.options->batch_size);
    uint8_t* base = ctx.pool->data(Task(request.batch).slot);
    layout.labels(base)[request.row] = candidate.label;
    layout.indices(base)[request.row] = substitute;
    counters->replaced.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  return cause;  // no decodable substitute: the original error stands
}
}  // namespace ringloader
