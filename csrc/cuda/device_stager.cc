// The device stager: a bounded ring of device buffers filled on one copy stream. All of its
// logic is here, over DeviceRuntime, so it runs the same on CUDA and on the simulated device
// the tests use. The flow is described in device_stager.h.
#include "cuda/device_stager.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "cuda/device_runtime.h"
#include "numa/topology.h"

namespace ringloader {
namespace {

class RingStager;

class RingLease final : public DeviceLease {
 public:
  RingLease(std::shared_ptr<RingStager> stager, int index, void* data, DeviceRuntime::Event copied)
      : stager_(std::move(stager)), index_(index), data_(data), copied_(copied) {}
  ~RingLease() override;
  void* data() const override { return data_; }
  int device() const override;
  absl::Status WaitOn(intptr_t stream) override;
  bool CopyDone() const override;

 private:
  std::shared_ptr<RingStager> stager_;  // buffers outlive the Loader while tensors exist
  int index_;
  void* data_;
  DeviceRuntime::Event copied_;
  std::atomic<intptr_t> consumer_stream_{-1};
};

class RingStager final : public DeviceStager, public std::enable_shared_from_this<RingStager> {
 public:
  RingStager(std::shared_ptr<DeviceRuntime> runtime, size_t buffer_bytes, int max_buffers)
      : runtime_(std::move(runtime)), buffer_bytes_(buffer_bytes), max_buffers_(max_buffers),
        buffers_(static_cast<size_t>(max_buffers)) {}

  absl::Status Init() {
    RL_ASSIGN_OR_RETURN(stream_, runtime_->CreateStream());
    waiter_ = std::thread([this] { WaitCopies(); });
    return absl::OkStatus();
  }

  ~RingStager() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      pending_cv_.notify_all();
    }
    if (waiter_.joinable()) waiter_.join();  // drains: every in-flight copy completes first
    for (Buffer& b : buffers_) {
      if (b.ptr != nullptr) runtime_->Free(b.ptr);
      if (b.copied != nullptr) runtime_->DestroyEvent(b.copied);
      if (b.released != nullptr) runtime_->DestroyEvent(b.released);
    }
    if (stream_ != nullptr) runtime_->DestroyStream(stream_);
  }

  DeviceRuntime& runtime() const { return *runtime_; }
  size_t buffer_bytes() const override { return buffer_bytes_; }
  int device() const override { return runtime_->device(); }
  std::string name() const override { return runtime_->name(); }
  int max_buffers() const override { return max_buffers_; }
  int buffers_allocated() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return allocated_;
  }
  int buffers_held() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return held_;
  }
  int64_t bytes_copied() const override { return bytes_copied_.load(std::memory_order_relaxed); }
  double copy_seconds() const override { return copy_ns_.load(std::memory_order_relaxed) * 1e-9; }
  bool HasFreeBuffer() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return HasFreeBufferLocked();
  }
  bool WaitForFreeBuffer(std::chrono::milliseconds timeout) const override {
    std::unique_lock<std::mutex> lock(mu_);
    return freed_cv_.wait_for(lock, timeout, [&] { return HasFreeBufferLocked(); });
  }

  absl::StatusOr<std::shared_ptr<DeviceLease>> Stage(const void* src, size_t bytes,
                                                     std::shared_ptr<void> host_owner) override {
    if (bytes > buffer_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat("Stage: ", bytes, " bytes exceed the buffer of ", buffer_bytes_));
    }
    int index = -1;
    bool fresh = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!free_.empty()) {
        index = free_.back();
        free_.pop_back();
      } else if (allocated_ < max_buffers_) {
        index = allocated_++;
        fresh = true;
      } else {
        return absl::ResourceExhaustedError(absl::StrCat(
            "all ", max_buffers_, " device buffers are held by the consumer; free earlier batches' "
            "tensors or raise prefetch_factor"));
      }
      ++held_;
    }
    Buffer& b = buffers_[static_cast<size_t>(index)];
    absl::Status status = fresh ? AllocateBuffer(b) : absl::OkStatus();
    if (status.ok()) status = Copy(b, src, bytes);
    if (!status.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      --held_;
      if (fresh && b.ptr == nullptr) {
        --allocated_;  // nothing was allocated: the ring entry stays unallocated
      } else {
        free_.push_back(index);
      }
      freed_cv_.notify_all();
      return status;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      b.held = true;
      b.copying = true;
      pending_.push_back(Pending{index, b.copied, std::move(host_owner), bytes, std::chrono::steady_clock::now()});
      pending_cv_.notify_one();
    }
    return std::shared_ptr<DeviceLease>(std::make_shared<RingLease>(shared_from_this(), index, b.ptr, b.copied));
  }

  // From the lease's destructor (any thread): the buffer's next copy is ordered after the
  // consumer's work on it by the release event.
  void Release(int index, intptr_t consumer_stream) {
    Buffer& b = buffers_[static_cast<size_t>(index)];
    bool recorded = false;
    if (consumer_stream != -1) {
      const absl::Status status = runtime_->Record(b.released, runtime_->FromDlpackStream(consumer_stream));
      if (!status.ok()) std::fprintf(stderr, "ringloader: %s\n", std::string(status.message()).c_str());
      recorded = status.ok();
    }
    std::lock_guard<std::mutex> lock(mu_);
    b.release_recorded = recorded;
    b.held = false;
    --held_;
    if (!b.copying) {
      free_.push_back(index);
      freed_cv_.notify_all();
    }
  }

 private:
  struct Buffer {
    void* ptr = nullptr;
    DeviceRuntime::Event copied = nullptr;    // recorded on stream_ after the copy into this buffer
    DeviceRuntime::Event released = nullptr;  // recorded on the consumer's stream when it let go
    bool release_recorded = false;            // guarded by mu_
    // A buffer is free again when the consumer let go of it (held) and the waiter saw its copy
    // complete (copying), so the stager never holds more host slots than it has buffers.
    bool held = false;                        // guarded by mu_
    bool copying = false;                     // guarded by mu_
  };
  struct Pending {
    int index;
    DeviceRuntime::Event copied;
    std::shared_ptr<void> host_owner;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point issued;
  };

  bool HasFreeBufferLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !free_.empty() || allocated_ < max_buffers_;
  }

  absl::Status AllocateBuffer(Buffer& b) {
    // A retry after a failed Malloc keeps the events it already made.
    if (b.copied == nullptr) {
      RL_ASSIGN_OR_RETURN(b.copied, runtime_->CreateEvent(/*blocking_sync=*/true));
    }
    if (b.released == nullptr) {
      RL_ASSIGN_OR_RETURN(b.released, runtime_->CreateEvent(/*blocking_sync=*/false));
    }
    RL_ASSIGN_OR_RETURN(b.ptr, runtime_->Malloc(buffer_bytes_));
    return absl::OkStatus();
  }

  absl::Status Copy(Buffer& b, const void* src, size_t bytes) {
    bool wait_release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wait_release = b.release_recorded;
    }
    if (wait_release) RL_RETURN_IF_ERROR(runtime_->StreamWait(stream_, b.released));
    RL_RETURN_IF_ERROR(runtime_->CopyToDeviceAsync(b.ptr, src, bytes, stream_));
    RL_RETURN_IF_ERROR(runtime_->Record(b.copied, stream_));
    return absl::OkStatus();
  }

  // The waiter thread: returns host slots in copy order, as soon as each copy completed.
  void WaitCopies() {
    NameCurrentThread("rl-h2d-wait");
    std::chrono::steady_clock::time_point last_done{};
    while (true) {
      Pending next;
      {
        std::unique_lock<std::mutex> lock(mu_);
        pending_cv_.wait(lock, [&] { return stop_ || !pending_.empty(); });
        if (pending_.empty()) return;  // stop_ and drained
        next = std::move(pending_.front());
        pending_.pop_front();
      }
      // A later re-record of the same event only makes this wait longer, never shorter.
      if (absl::Status status = runtime_->Synchronize(next.copied); !status.ok()) {
        std::fprintf(stderr, "ringloader: %s\n", std::string(status.message()).c_str());
      }
      next.host_owner.reset();  // the host slot goes back to the free list
      {
        std::lock_guard<std::mutex> lock(mu_);
        Buffer& b = buffers_[static_cast<size_t>(next.index)];
        b.copying = false;
        if (!b.held) {
          free_.push_back(next.index);
          freed_cv_.notify_all();
        }
      }
      const auto done = std::chrono::steady_clock::now();
      copy_ns_.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(done - std::max(next.issued, last_done)).count(),
          std::memory_order_relaxed);
      bytes_copied_.fetch_add(static_cast<int64_t>(next.bytes), std::memory_order_relaxed);
      last_done = done;
    }
  }

  const std::shared_ptr<DeviceRuntime> runtime_;
  const size_t buffer_bytes_;
  const int max_buffers_;
  DeviceRuntime::Stream stream_ = nullptr;
  std::vector<Buffer> buffers_;  // sized once; an entry is used by one owner at a time
  mutable std::mutex mu_;
  mutable std::condition_variable freed_cv_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
  int allocated_ ABSL_GUARDED_BY(mu_) = 0;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::condition_variable pending_cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> bytes_copied_{0};
  std::atomic<int64_t> copy_ns_{0};
  std::thread waiter_;
};

RingLease::~RingLease() { stager_->Release(index_, consumer_stream_.load(std::memory_order_acquire)); }

int RingLease::device() const { return stager_->device(); }

absl::Status RingLease::WaitOn(intptr_t stream) {
  if (stream == -1) return absl::OkStatus();
  DeviceRuntime& runtime = stager_->runtime();
  RL_RETURN_IF_ERROR(runtime.StreamWait(runtime.FromDlpackStream(stream), copied_));
  consumer_stream_.store(stream, std::memory_order_release);
  return absl::OkStatus();
}

bool RingLease::CopyDone() const { return stager_->runtime().Query(copied_); }

}  // namespace

absl::StatusOr<std::shared_ptr<DeviceStager>> MakeDeviceStager(std::shared_ptr<DeviceRuntime> runtime,
                                                               size_t buffer_bytes, int max_buffers) {
  if (!runtime) return absl::InvalidArgumentError("MakeDeviceStager: no device runtime");
  auto stager = std::make_shared<RingStager>(std::move(runtime), buffer_bytes, std::max(1, max_buffers));
  RL_RETURN_IF_ERROR(stager->Init());
  return std::shared_ptr<DeviceStager>(std::move(stager));
}

}  // namespace ringloader
