// ringloader::Loader: options, slots, placement and the hand-off between the epoch in progress
// and a queued one. The epochs themselves (threads, window, delivery) are in epoch.{h,cc}; the
// loader lends them what they need through EpochContext.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cpu_budget.h"
#include "common/status_util.h"
#include "cuda/cuda_runtime.h"
#include "cuda/device_runtime.h"
#include "cuda/device_stager.h"
#include "decode/clean_scans.h"
#include "decode/jpeg_entropy.h"
#include "decode/image_decoder.h"
#include "ringloader/deferred_rows.h"
#include "io/range_reads.h"
#include "io/reader.h"
#include "memory/decode_budget.h"
#include "numa/topology.h"
#include "pipeline/epoch.h"
#include "pipeline/loader_factory.h"
#include "pipeline/readers/sample_reader.h"
#include "pipeline/sample_store.h"
#include "pipeline/slot_pool.h"
#include "pipeline/views.h"
#include "ringloader/ringloader.h"
#include "sampler/sampler.h"
#include "transform/image_transform.h"
#include "transform/random.h"

namespace ringloader {
namespace {

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

// Everything behind the public Loader (which forwards to it).
class Loader::Impl {
 public:
  Impl(SampleStore samples, LoaderOptions options, TransformPipeline pipeline,
       std::shared_ptr<const ViewSet> views, NumaPlacement placement,
       std::shared_ptr<DeviceStager> stager, const SlotPlan& plan, std::unique_ptr<SampleReaders> readers);
  // LoaderFactory::Create once the samples themselves are checked: views, pipeline, placement,
  // slots, with the machine (NUMA topology, CPU quota, available memory) read from `host`.
  static absl::StatusOr<std::unique_ptr<Impl>> Make(SampleStore samples, LoaderOptions options,
                                                    const internal::HostFiles& host);
  ~Impl() {
    if (DeferredRows* rows = readers_->deferred_rows()) rows->Close();  // a feeder waiting for room returns
    Stop();
  }

  absl::Status StartEpoch(int64_t epoch, int64_t first_batch);
  absl::Status StartEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                          std::vector<int64_t> offsets, int64_t first_batch);
  absl::Status QueueEpoch(int64_t epoch);
  absl::Status QueueEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                          std::vector<int64_t> offsets);
  void CancelQueued();
  bool HasQueuedEpoch() const;
  absl::StatusOr<Batch> Next(double timeout_seconds);
  void Stop();
  int64_t BatchesPerEpoch() const;
  int64_t num_batches() const { return epoch_ ? epoch_->num_batches : 0; }
  int64_t next_batch() const { return epoch_ ? epoch_->next_batch : 0; }
  int64_t dataset_size() const { return static_cast<int64_t>(samples_.size()); }
  const LoaderOptions& options() const { return options_; }
  const TransformPipeline& pipeline() const { return pipeline_; }
  const ViewSet* views() const { return views_.get(); }
  SlotPool* pool() const { return pool_.get(); }
  DeferredRows* deferred_rows() const { return readers_->deferred_rows(); }
  size_t row_bytes() const { return views_ ? views_->row_bytes : pipeline_.SampleBytes(); }
  LoaderStats Stats() const;
  absl::Status DecodeSample(int64_t index, uint64_t seed, int64_t epoch, int64_t key,
                            const OutputAllocator& allocate) const;

 private:
  // What an epoch started now sees of this loader (its readers let go of the parent's streams
  // in a fork()ed child).
  EpochContext Context();
  // FailedPrecondition when the output size is not fixed (variable_size).
  absl::Status CheckBatchable() const;
  // The built-in sampler's settings, from options_.
  SamplerOptions BuiltinSampler() const;
  // Checks an explicit order against the dataset and batch size (StartEpoch, QueueEpoch).
  absl::Status CheckOrder(const std::vector<int64_t>& indices, const std::vector<int64_t>& offsets) const;
  // Starts an epoch whose order is checked: adopts the queued epoch when it is this one, else
  // cancels it and starts afresh.
  void StartChecked(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                    std::vector<int64_t> offsets, int64_t first_batch);
  // Queues an epoch whose order is checked.
  void QueueChecked(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                    std::vector<int64_t> offsets);
  // Called by an epoch's dispatcher once it dispatched its last batch: starts the queued epoch.
  void DispatchFinished(Epoch* epoch);
  // True in a fork()ed child of the process that started the epochs (their threads are not here).
  bool ForkedChild() const;
  // Stops the epoch in progress (undelivered slots go back) and keeps its counts.
  void RetireEpoch();
  // Pins and names a pipeline thread and records where it ended up (LoaderStats).
  void EnterPipelineThread(const char* name) const;

  SampleStore samples_;
  LoaderOptions options_;
  TransformPipeline pipeline_;
  std::shared_ptr<const ViewSet> views_;  // null: one rendering a sample
  IoBackend io_backend_ = IoBackend::kPread;  // resolved by the probe in Create
  std::string io_note_;
  std::string memory_note_;
  std::string threads_note_;  // how num_workers / reader_threads were chosen (LoaderStats)
  int prefetch_cap_ = 0;      // depth auto_prefetch may grow to
  uint64_t memory_budget_ = 0;       // max_memory, or the default
  std::string memory_budget_note_;
  std::string slots_note_;           // what the budget cut (SlotPlan::note)
  bool read_ahead_ = true;           // QueueEpoch reads ahead (SlotPlan::read_ahead)
  std::unique_ptr<NumaPlacement> placement_;
  std::shared_ptr<DeviceStager> stager_;
  std::shared_ptr<SlotPool> pool_;
  // max_memory as one ledger of slots and decode buffers (memory/decode_budget.h).
  std::shared_ptr<DecodeBudget> decode_budget_;
  // File bytes between reader and decoder, reused across epochs: two sets, so the epoch in
  // progress and the queued one never share a buffer.
  std::vector<ByteBuffer> buffers_[2];
  // One reader per kind of sample the loader has (and the kDeferred groups).
  std::unique_ptr<SampleReaders> readers_;
  std::unique_ptr<LoaderCounters> counters_;
  std::unique_ptr<Epoch> epoch_;   // written by the consumer thread only, under handoff_mu_
  // The hand-off between the epoch in progress and the queued one: queued_, and each epoch's
  // "dispatched everything" and "started" flags. The dispatcher of the epoch in progress starts
  // the queued epoch's threads when it finishes.
  mutable std::mutex handoff_mu_;
  std::unique_ptr<Epoch> queued_;
};

EpochContext Loader::Impl::Context() {
  EpochContext ctx;
  ctx.samples = &samples_;
  ctx.options = &options_;
  ctx.pipeline = &pipeline_;
  ctx.views = views_.get();
  ctx.row_bytes = row_bytes();
  ctx.io_backend = io_backend_;
  ctx.pool = pool_.get();
  ctx.stager = stager_.get();
  ctx.readers = readers_.get();
  ctx.prefetch_cap = prefetch_cap_;
  ctx.counters = counters_.get();
  ctx.decode_budget = decode_budget_.get();
  ctx.budget_owner = decode_budget_;
  ctx.enter_thread = [this](const char* name) { EnterPipelineThread(name); };
  ctx.dispatch_finished = [this](Epoch* epoch) { DispatchFinished(epoch); };
  return ctx;
}


namespace {

// The CPU budget of a loader placed by `placement` (common/cpu_budget.h), and its threads.
absl::StatusOr<AutoThreads> PlanAutoThreads(const LoaderOptions& options, const NumaPlacement& placement,
                                            const internal::HostFiles& host) {
  CpuBudget budget;
  budget.affinity_cpus = static_cast<int>(AllowedCpus().size());
  if (!placement.cpus.empty()) {
    budget.numa_node = placement.node;
    budget.node_cpus = static_cast<int>(placement.cpus.size());
  }
  RL_ASSIGN_OR_RETURN(budget.quota, ReadCpuQuota(host.cgroup_root, host.proc_self_cgroup));
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

absl::StatusOr<NumaPlacement> PlaceThreads(const LoaderOptions& options, int ordinal,
                                           const internal::HostFiles& host) {
  RL_ASSIGN_OR_RETURN(NumaTopology topology, NumaTopology::Read(host.sysfs_root));
  return ChooseNumaPlacement(topology, options.numa, AllowedCpus(), CurrentCpu(),
                             ordinal >= 0 && !options.device_runtime ? CudaPciBusId(ordinal) : std::string());
}

}  // namespace

absl::StatusOr<AutoThreads> internal::ChooseAutoThreads(const LoaderOptions& options, const HostFiles& host) {
  RL_ASSIGN_OR_RETURN(const int ordinal, ParseDevice(options.device));
  RL_ASSIGN_OR_RETURN(NumaPlacement placement, PlaceThreads(options, ordinal, host));
  return PlanAutoThreads(options, placement, host);
}

absl::StatusOr<AutoThreads> ChooseAutoThreads(const LoaderOptions& options) {
  return internal::ChooseAutoThreads(options, internal::HostFiles());
}

namespace {

// SampleColumns: each path's end at or after the previous one's, within the arena.
absl::Status CheckColumns(const SampleColumns& c) {
  if (c.size > 0 && (c.ends == nullptr || c.labels == nullptr || (c.paths == nullptr && c.paths_size > 0))) {
    return absl::InvalidArgumentError("sample columns: ends and labels are required (null given)");
  }
  int64_t start = 0;
  for (size_t i = 0; i < c.size; ++i) {
    if (c.ends[i] < start || static_cast<uint64_t>(c.ends[i]) > c.paths_size) {
      return absl::InvalidArgumentError(absl::StrCat("path arena: end ", c.ends[i], " of path ", i,
                                                     " is outside [", start, ", ", c.paths_size, "]"));
    }
    start = c.ends[i];
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Loader>> LoaderFactory::CreateFromColumns(SampleColumns samples,
                                                                         LoaderOptions options,
                                                                         const internal::HostFiles& host) {
  RL_RETURN_IF_ERROR(ValidateOptions(options, samples.size));
  RL_RETURN_IF_ERROR(CheckColumns(samples));
  RL_ASSIGN_OR_RETURN(std::unique_ptr<Loader::Impl> impl,
                      Loader::Impl::Make(SampleStore(std::move(samples)), std::move(options), host));
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Loader>> LoaderFactory::Create(std::vector<Sample> samples, LoaderOptions options,
                                                              const internal::HostFiles& host) {
  RL_RETURN_IF_ERROR(ValidateOptions(options, samples.size()));
  RL_RETURN_IF_ERROR(SampleReaders::Check(samples));
  RL_ASSIGN_OR_RETURN(std::unique_ptr<Loader::Impl> impl,
                      Loader::Impl::Make(SampleStore(std::move(samples)), std::move(options), host));
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::CreateFromColumns(SampleColumns samples,
                                                                  LoaderOptions options) {
  return LoaderFactory::CreateFromColumns(std::move(samples), std::move(options), internal::HostFiles());
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(std::vector<Sample> samples,
                                                       LoaderOptions options) {
  return LoaderFactory::Create(std::move(samples), std::move(options), internal::HostFiles());
}

absl::StatusOr<std::unique_ptr<Loader::Impl>> Loader::Impl::Make(SampleStore store, LoaderOptions options,
                                                                 const internal::HostFiles& host) {
  std::shared_ptr<const ViewSet> views;
  if (!options.views.empty()) {
    if (!options.transform.empty() || options.variable_size) {
      return absl::InvalidArgumentError(
          "views replace transform: pass the chains as views only, each fixing its output size");
    }
    RL_ASSIGN_OR_RETURN(ViewSet set, ViewSet::Create(options.views, options.layout));
    const bool variable = std::any_of(set.variable.begin(), set.variable.end(), [](bool v) { return v; });
    if (variable && !options.device.empty() && options.device != "cpu") {
      return absl::InvalidArgumentError(absl::StrCat(
          "device=", options.device, ": a view whose output size depends on the image is delivered "
          "on the host, a tensor per sample; move the samples to the device in the training loop"));
    }
    views = std::make_shared<const ViewSet>(std::move(set));
  }
  const size_t files = views ? static_cast<size_t>(views->files) : 1;
  if (store.by_columns() && files > 1) {
    Sample scratch;
    return absl::InvalidArgumentError(absl::StrCat("sample 0 (", store.Get(0, &scratch).path,
                                                   ") has 1 file(s); the views render ", files,
                                                   " (LoaderOptions::View::file)"));
  }
  // How each kind of sample's bytes are got, chosen here once (pipeline/readers/sample_reader.h).
  std::unique_ptr<SampleReaders> readers = SampleReaders::Create(store, options.max_file_bytes);
  const std::vector<Sample>& samples = store.samples();
  for (size_t i = 0; i < samples.size(); ++i) {
    const Sample& s = samples[i];
    if (s.more_files.empty() && files == 1) continue;
    if (1 + s.more_files.size() < files) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sample ", i, " (", s.path, ") has ", 1 + s.more_files.size(), " file(s); the views render ",
          files, " (LoaderOptions::View::file)"));
    }
    RL_RETURN_IF_ERROR(readers->For(s).CheckMoreFiles(s, i));
    for (const Sample::File& f : s.more_files) {
      if (f.length < -1 || (f.memory == nullptr && f.length > 0) ||
          (f.memory != nullptr && f.length < 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("sample ", i, ": file ", f.path, " is in memory without its bytes"));
      }
    }
  }
  // With views, the pipeline is view 0's (what describes the loader; rows hold every view).
  RL_ASSIGN_OR_RETURN(TransformPipeline pipeline,
                      views ? TransformPipeline::Create(options.views[0].transform, options.views[0].dtype,
                                                        options.layout, options.views[0].variable)
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
  RL_ASSIGN_OR_RETURN(NumaPlacement placement, PlaceThreads(options, ordinal, host));
  // Threads: chosen from the CPU budget (auto_threads), after placement, whose CPUs bound it.
  std::string threads_note;
  if (options.auto_threads) {
    RL_ASSIGN_OR_RETURN(const AutoThreads plan, PlanAutoThreads(options, placement, host));
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
    const AvailableMemory available = ReadAvailableMemory(host.meminfo_path, host.cgroup_root, host.proc_self_cgroup);
    request.available = available.bytes;
    request.budget = DefaultMemoryBudget(available, &budget_note);
    request.budget_note = budget_note;
  }
  RL_ASSIGN_OR_RETURN(const SlotPlan plan, PlanSlots(request));
  auto impl = std::make_unique<Impl>(std::move(store), std::move(options), std::move(pipeline),
                                     std::move(views), std::move(placement), std::move(stager), plan,
                                     std::move(readers));
  impl->threads_note_ = std::move(threads_note);
  impl->memory_budget_note_ = std::move(budget_note);
  // Probe the I/O backend once, here, so a refusal is reported at construction, not per epoch.
  std::string note;
  RL_ASSIGN_OR_RETURN(std::unique_ptr<Reader> probe,
                      MakeReader(impl->options_.io, impl->options_.io_depth, &note));
  impl->io_backend_ = std::string_view(probe->name()) == "io_uring" ? IoBackend::kUring : IoBackend::kPread;
  impl->io_note_ = std::move(note);
  return impl;
}

Loader::Impl::Impl(SampleStore samples, LoaderOptions options, TransformPipeline pipeline,
                   std::shared_ptr<const ViewSet> views, NumaPlacement placement,
                   std::shared_ptr<DeviceStager> stager, const SlotPlan& plan,
                   std::unique_ptr<SampleReaders> readers)
    : samples_(std::move(samples)),
      options_(std::move(options)),
      pipeline_(std::move(pipeline)),
      views_(std::move(views)),
      placement_(std::make_unique<NumaPlacement>(std::move(placement))),
      stager_(std::move(stager)),
      readers_(std::move(readers)),
      counters_(std::make_unique<LoaderCounters>()) {
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
  // The slots are charged to the budget the decoders draw on for large images (the options keep
  // the allocator they were given).
  decode_budget_ = std::make_shared<DecodeBudget>(plan.budget);
  pool_ = std::make_shared<SlotPool>(MakeBudgetedAllocator(options_.allocator, decode_budget_), slot_bytes,
                                     plan.depth, plan.max_slots);
  const size_t buffers = static_cast<size_t>(options_.reader_threads * options_.io_depth +
                                             2 * options_.num_workers + 2 * options_.num_workers);
  buffers_[0].resize(buffers);
  buffers_[1].resize(buffers);
}

void Loader::Impl::EnterPipelineThread(const char* name) const {
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

void Loader::Impl::Stop() {
  if (ForkedChild()) {
    // We are a fork()ed child: the epochs' threads exist only in the parent, and their mutexes
    // (and handoff_mu_) may have been held at the fork. Joining or locking would hang, so the
    // child abandons them, and the slot pool too: its condition variable still counts the
    // parent's waiting dispatcher, so destroying it would block forever (pthread_cond_destroy
    // waits for waiters).
    (void)epoch_.release();
    (void)queued_.release();
    (void)new std::shared_ptr<SlotPool>(pool_);
    // What the readers hold of the parent's (a pipe: stream's commands) stays the parent's; the
    // loader stays usable here (StartEpoch, Stats, DecodeSample).
    readers_->AfterFork();
    // A parent thread may have held handoff_mu_ at the fork (it does while starting an epoch's
    // threads or reading Stats); in the child nobody ever will release it: make it anew.
    new (&handoff_mu_) std::mutex();
    return;
  }
  CancelQueued();
  RetireEpoch();
}

void Loader::Impl::CancelQueued() {
  std::unique_ptr<Epoch> queued;
  {
    std::lock_guard<std::mutex> lock(handoff_mu_);
    queued = std::move(queued_);
  }
  queued.reset();  // cancels and joins whatever it started; its slots return to the free list
}

bool Loader::Impl::HasQueuedEpoch() const {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  return queued_ != nullptr;
}

void Loader::Impl::RetireEpoch() {
  if (!epoch_) return;
  epoch_->Cancel();  // joins its threads while Stats() still sees its counts
  std::unique_ptr<Epoch> retired;
  {
    std::lock_guard<std::mutex> lock(handoff_mu_);
    retired = std::move(epoch_);
    if (const LoaderCounters* own = retired->own_counters.get()) counters_->Add(*own);
  }
}

void Loader::Impl::DispatchFinished(Epoch* epoch) {
  std::lock_guard<std::mutex> lock(handoff_mu_);
  epoch->dispatch_finished = true;
  // Only the epoch in progress has a successor to start; a queued epoch that finishes
  // dispatching before it is adopted just records it.
  if (queued_ && queued_.get() != epoch) queued_->StartPipeline();
}

absl::Status Loader::Impl::CheckBatchable() const {
  // Rows of variable-size views hold their outputs' records (ViewSet::variable).
  if (pipeline_.fixed_size() || views_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "the transform's output size depends on the input image, so samples cannot be batched "
      "natively; end the geometric steps with CenterCrop, RandomResizedCrop, RandomCrop or "
      "Resize((h, w)), or decode samples one at a time");
}

absl::Status Loader::Impl::CheckOrder(const std::vector<int64_t>& indices,
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

bool Loader::Impl::ForkedChild() const {
  const pid_t pid = getpid();
  return (epoch_ && epoch_->owner_pid != pid) || (queued_ && queued_->owner_pid != pid);
}

void Loader::Impl::StartChecked(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                          std::vector<int64_t> offsets, int64_t first_batch) {
  if (ForkedChild()) Stop();  // abandons the parent's epochs (see Stop)
  std::unique_ptr<Epoch> adopted;
  {
    std::lock_guard<std::mutex> lock(handoff_mu_);
    if (queued_ && first_batch == 0 && queued_->Matches(epoch, seed, indices, offsets) &&
        queued_->AheadFilesUnchanged()) {  // substitutes read ahead (Epoch::NoteAheadFiles)
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
    adopted->Adopted();  // it read ahead no further than its depth (Epoch::Adopted): now on
    adopted->StartPipeline();
    adopted->StartStage();
    epoch_ = std::move(adopted);
    return;
  }
  auto fresh = std::make_unique<Epoch>(Context(), epoch, seed, std::move(indices), std::move(offsets),
                                       first_batch, &buffers_[0], /*queued=*/false);
  std::lock_guard<std::mutex> lock(handoff_mu_);
  fresh->Start();
  epoch_ = std::move(fresh);
}

void Loader::Impl::QueueChecked(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                          std::vector<int64_t> offsets) {
  if (ForkedChild()) Stop();
  CancelQueued();
  std::lock_guard<std::mutex> lock(handoff_mu_);
  // The buffer set the epoch in progress does not use.
  std::vector<ByteBuffer>* set = epoch_ && &epoch_->buffers == &buffers_[0] ? &buffers_[1] : &buffers_[0];
  queued_ = std::make_unique<Epoch>(Context(), epoch, seed, std::move(indices), std::move(offsets), 0, set,
                                    /*queued=*/true);
  counters_->epochs_queued.fetch_add(1, std::memory_order_relaxed);
  if (!epoch_ || epoch_->dispatch_finished) queued_->StartPipeline();
}

absl::Status Loader::Impl::StartEpoch(int64_t epoch, int64_t first_batch) {
  RL_RETURN_IF_ERROR(CheckBatchable());
  EpochOrder order = MakeEpochOrder(BuiltinSampler(), epoch);
  if (first_batch < 0 || first_batch > order.num_batches()) {
    return absl::OutOfRangeError(absl::StrCat("first_batch ", first_batch, " is outside the epoch's ",
                                              order.num_batches(), " batches"));
  }
  StartChecked(epoch, options_.seed, std::move(order.indices), std::move(order.offsets), first_batch);
  return absl::OkStatus();
}

absl::Status Loader::Impl::StartEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
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

absl::Status Loader::Impl::QueueEpoch(int64_t epoch) {
  RL_RETURN_IF_ERROR(CheckBatchable());
  // See the header: pipe: streams are not read ahead, nor anything under a tight budget.
  if (!readers_->AllowsReadAhead() || !read_ahead_) return absl::OkStatus();
  EpochOrder order = MakeEpochOrder(BuiltinSampler(), epoch);
  QueueChecked(epoch, options_.seed, std::move(order.indices), std::move(order.offsets));
  return absl::OkStatus();
}

absl::Status Loader::Impl::QueueEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                                std::vector<int64_t> offsets) {
  RL_RETURN_IF_ERROR(CheckBatchable());
  RL_RETURN_IF_ERROR(CheckOrder(indices, offsets));
  // See the header: pipe: streams are not read ahead, nor anything under a tight budget.
  if (!readers_->AllowsReadAhead() || !read_ahead_) return absl::OkStatus();
  QueueChecked(epoch, seed, std::move(indices), std::move(offsets));
  return absl::OkStatus();
}

absl::StatusOr<Batch> Loader::Impl::Next(double timeout_seconds) {
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

int64_t Loader::Impl::BatchesPerEpoch() const { return ringloader::BatchesPerEpoch(BuiltinSampler()); }

SamplerOptions Loader::Impl::BuiltinSampler() const {
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

LoaderStats Loader::Impl::Stats() const {
  LoaderStats s;
  // The loader's counts plus those of the adopted epoch in progress (Epoch::own_counters).
  std::lock_guard<std::mutex> handoff(handoff_mu_);
  const LoaderCounters* adopted = epoch_ ? epoch_->own_counters.get() : nullptr;
  auto count = [adopted](std::atomic<int64_t> LoaderCounters::*field, const LoaderCounters& base) {
    return (base.*field).load(std::memory_order_relaxed) +
           (adopted ? (adopted->*field).load(std::memory_order_relaxed) : 0);
  };
  s.samples = count(&LoaderCounters::samples, *counters_);
  s.batches = counters_->batches.load(std::memory_order_relaxed);
  s.errors = count(&LoaderCounters::errors, *counters_);
  s.skipped = count(&LoaderCounters::skipped, *counters_);
  s.replaced = count(&LoaderCounters::replaced, *counters_);
  s.decodes = counters_->decodes.load(std::memory_order_relaxed);
  s.views_rendered = counters_->views_rendered.load(std::memory_order_relaxed);
  s.samples_ahead = queued_ ? queued_->counters->samples.load(std::memory_order_relaxed) : 0;
  s.bytes_read = counters_->bytes_read.load(std::memory_order_relaxed);
  const RangeFetchResult ranges = RangeReadTotals();
  s.range_requests = ranges.requests;
  s.range_bytes = ranges.bytes;
  readers_->AddStats(&s);  // a pipe: stream's bytes and restarts, deferred row groups
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
  s.read_ahead = read_ahead_ && readers_->AllowsReadAhead();
  s.read_buffers = static_cast<int>(buffers_[0].size());
  s.slot_bytes = static_cast<int64_t>(pool_->slot_bytes());
  s.producer_waits = pool_->producer_waits();
  if (decode_budget_) {
    const DecodeBudget::Counts budget = decode_budget_->counts();
    s.outputs_new = budget.outputs_new;
    s.outputs_reused = budget.outputs_reused;
    s.output_bytes_kept = static_cast<int64_t>(budget.kept_bytes);
  }
  s.idle_spells = counters_->idle_spells.load(std::memory_order_relaxed);
  s.batches_completed = counters_->batches_completed.load(std::memory_order_relaxed);
  s.device = stager_ ? stager_->name() : "cpu";
  if (stager_) {
    s.device_buffers = stager_->buffers_allocated();
    s.device_buffers_held = stager_->buffers_held();
    s.device_bytes = stager_->bytes_copied();
    s.device_copy_seconds = stager_->copy_seconds();
  }
  const decode_internal::CleanScanInfo memo = decode_internal::DescribeProcessWideCleanScans();
  s.scan_memo = memo.memo;
  s.scan_memo_note = memo.note;
  s.scan_memo_entries = memo.entries;
  s.scan_memo_slots = memo.slots;
  const decode_internal::ScanIndex& index = decode_internal::ScanIndex::ProcessWide();
  s.scan_index_scans = static_cast<int64_t>(index.scans());
  s.scan_index_bytes = static_cast<int64_t>(index.bytes());
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

absl::Status Loader::Impl::DecodeSample(int64_t index, uint64_t seed, int64_t epoch, int64_t key,
                                  const OutputAllocator& allocate) const {
  if (views_) {
    return absl::FailedPreconditionError(
        "this loader renders several views a sample: single samples decode one rendering");
  }
  if (index < 0 || index >= dataset_size()) {
    return absl::OutOfRangeError(absl::StrCat("index ", index, " outside the dataset of ",
                                              dataset_size(), " samples"));
  }
  Sample scratch;
  const Sample& sample = samples_.Get(static_cast<size_t>(index), &scratch);
  const std::string& path = sample.path;
  ByteBuffer buffer;
  absl::Status status = readers_->ReadAside(sample, &buffer, nullptr);
  if (status.ok()) {
    const std::unique_ptr<ImageDecoder> decoder = MakeDecoder(options_);
    decoder->set_memory_budget(decode_budget_.get());
    SampleRng rng(SampleSeed(seed, static_cast<uint64_t>(epoch),
                             static_cast<uint64_t>(key < 0 ? index : key)));
    // The output size follows from the header and the geometric draws: plan on a copy of the
    // generator (DecodeInto plans again from the same state and gets the same geometry).
    absl::StatusOr<ImageInfo> info = decoder->ReadInfo(buffer.data(), buffer.size());
    status = info.status();
    if (status.ok()) {
      SampleRng planner = rng;
      int h = 0, w = 0;
      pipeline_.OutputSize(pipeline_.Plan(info->width, info->height, planner), &h, &w);
      void* dst = allocate(h, w);
      status = dst == nullptr
                   ? absl::ResourceExhaustedError("no memory for the decoded sample")
                   : decoder->DecodeInto(buffer.data(), buffer.size(), pipeline_, rng, dst);
    }
  }
  if (!status.ok()) return AnnotateSampleError(status, index, path);
  return absl::OkStatus();
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;

absl::Status Loader::StartEpoch(int64_t epoch, int64_t first_batch) {
  return impl_->StartEpoch(epoch, first_batch);
}
absl::Status Loader::StartEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                                std::vector<int64_t> offsets, int64_t first_batch) {
  return impl_->StartEpoch(epoch, seed, std::move(indices), std::move(offsets), first_batch);
}
absl::Status Loader::QueueEpoch(int64_t epoch) { return impl_->QueueEpoch(epoch); }
absl::Status Loader::QueueEpoch(int64_t epoch, uint64_t seed, std::vector<int64_t> indices,
                                std::vector<int64_t> offsets) {
  return impl_->QueueEpoch(epoch, seed, std::move(indices), std::move(offsets));
}
void Loader::CancelQueued() { impl_->CancelQueued(); }
bool Loader::HasQueuedEpoch() const { return impl_->HasQueuedEpoch(); }
absl::StatusOr<Batch> Loader::Next(double timeout_seconds) { return impl_->Next(timeout_seconds); }
void Loader::Stop() { impl_->Stop(); }
int64_t Loader::BatchesPerEpoch() const { return impl_->BatchesPerEpoch(); }
int64_t Loader::num_batches() const { return impl_->num_batches(); }
int64_t Loader::next_batch() const { return impl_->next_batch(); }
int64_t Loader::dataset_size() const { return impl_->dataset_size(); }
const LoaderOptions& Loader::options() const { return impl_->options(); }
DeferredRows* Loader::deferred_rows() const { return impl_->deferred_rows(); }
int Loader::output_height() const { return impl_->pipeline().out_h(); }
int Loader::output_width() const { return impl_->pipeline().out_w(); }
DType Loader::dtype() const { return impl_->pipeline().dtype(); }
Layout Loader::layout() const { return impl_->pipeline().layout(); }
size_t Loader::sample_bytes() const { return impl_->pipeline().SampleBytes(); }
size_t Loader::row_bytes() const { return impl_->row_bytes(); }
std::vector<ViewLayout> Loader::views() const {
  std::vector<ViewLayout> out;
  const ViewSet* set = impl_->views();
  if (set == nullptr) return out;
  for (size_t v = 0; v < set->pipelines.size(); ++v) {
    const TransformPipeline& p = set->pipelines[v];
    out.push_back(ViewLayout{set->offsets[v], p.out_h(), p.out_w(), p.dtype(), set->luma[v],
                             set->mask[v], set->geometry_offsets[v], set->variable[v]});
  }
  return out;
}
absl::StatusOr<SampleOutput> Loader::TakeSampleOutput(uint64_t id) const {
  std::optional<SampleOutput> out = impl_->pool()->TakeOutput(id);
  if (!out) {
    return absl::NotFoundError(absl::StrCat("no output ", id, ": taken already, or its batch was freed"));
  }
  return *std::move(out);
}
std::string Loader::DescribeTransform() const { return impl_->pipeline().Describe(); }
LoaderStats Loader::Stats() const { return impl_->Stats(); }

absl::Status Loader::DecodeSample(int64_t index, uint64_t seed, int64_t epoch, void* dst) const {
  if (!impl_->pipeline().fixed_size()) {
    return absl::FailedPreconditionError(
        "this loader's output size depends on the image: decode with an allocator");
  }
  return DecodeSample(index, seed, epoch, -1, [dst](int, int) { return dst; });
}

absl::Status Loader::DecodeSample(int64_t index, uint64_t seed, int64_t epoch, int64_t key,
                                  const OutputAllocator& allocate) const {
  return impl_->DecodeSample(index, seed, epoch, key, allocate);
}

}  // namespace ringloader
