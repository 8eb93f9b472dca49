// The CUDA implementation of the seam: pinned slot allocators and the device stager. Every CUDA
// runtime call of ringloader is in this file, and every one goes through CudaCheck (or, in
// destructors, CudaCheckQuiet), so an error message always names the call.
#include "cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuda/device_stager.h"
#include "numa/topology.h"

namespace ringloader {
namespace {

constexpr size_t kPageBytes = 4096;

/// The one checker for CUDA calls: names the call and the error.
absl::Status CudaCheck(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(call, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
}

#define RL_CUDA_RETURN_IF_ERROR(call)                                     \
  do {                                                                    \
    ::absl::Status rl_cuda_status_ = CudaCheck((call), #call);            \
    if (!rl_cuda_status_.ok()) return rl_cuda_status_;                    \
  } while (0)

/// For destructors and deleters: at interpreter exit the runtime may already be unloading and
/// its memory goes with it, so cudaErrorCudartUnloading (and "no device" after a driver reset)
/// is expected; anything else is reported on stderr, since there is no caller to return it to.
void CudaCheckQuiet(cudaError_t error, const char* call) {
  if (error == cudaSuccess || error == cudaErrorCudartUnloading || error == cudaErrorNoDevice) return;
  const absl::Status status = CudaCheck(error, call);
  std::fprintf(stderr, "ringloader: %s\n", std::string(status.message()).c_str());
}

size_t RoundToPages(size_t bytes) { return std::max(kPageBytes, (bytes + kPageBytes - 1) / kPageBytes * kPageBytes); }

/// Makes `device` current for a scope and restores the caller's device after: the consumer
/// thread belongs to the application (and to torch), whose current device must not change.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device) {
      changed_ = cudaSetDevice(device) == cudaSuccess;
    }
  }
  ~ScopedDevice() {
    if (changed_) CudaCheckQuiet(cudaSetDevice(previous_), "cudaSetDevice");
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

class PinnedAllocator final : public SlotAllocator {
 public:
  void* Allocate(size_t bytes) override {
    void* ptr = nullptr;
    if (!CudaCheck(cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable), "cudaHostAlloc").ok()) return nullptr;
    return ptr;
  }
  void Free(void* ptr, size_t) override { CudaCheckQuiet(cudaFreeHost(ptr), "cudaFreeHost"); }
  bool pinned() const override { return true; }
  std::string name() const override { return "cuda-pinned"; }
};

// Placement first, pinning second: the pages are faulted in under an mbind policy for the node,
// then cudaHostRegister page-locks them where they are. (The alternative, setting the thread's
// memory policy around cudaHostAlloc, relies on the driver faulting the pages in the calling
// thread; this way does not depend on driver internals.)
class NodePinnedAllocator final : public SlotAllocator {
 public:
  explicit NodePinnedAllocator(int node) : node_(node) {}
  void* Allocate(size_t bytes) override {
    const size_t rounded = RoundToPages(bytes);
    void* ptr = AllocateOnNode(rounded, node_);
    if (ptr == nullptr) return nullptr;
    auto* bytes_ptr = static_cast<volatile uint8_t*>(ptr);
    for (size_t offset = 0; offset < rounded; offset += kPageBytes) bytes_ptr[offset] = 0;  // fault in
    if (!CudaCheck(cudaHostRegister(ptr, rounded, cudaHostRegisterPortable), "cudaHostRegister").ok()) {
      FreeOnNode(ptr, rounded);
      return nullptr;
    }
    return ptr;
  }
  void Free(void* ptr, size_t bytes) override {
    CudaCheckQuiet(cudaHostUnregister(ptr), "cudaHostUnregister");
    FreeOnNode(ptr, RoundToPages(bytes));
  }
  bool pinned() const override { return true; }
  std::string name() const override {
    return absl::StrCat("cuda-pinned (NUMA node ", node_, ", ",
                        CanBindMemory() ? "mbind preferred" : "first touch, no libnuma", " + cudaHostRegister)");
  }

 private:
  int node_;
};

// ---- device stager --------------------------------------------------------------------------

cudaStream_t StreamFromDlpack(intptr_t stream) {
  if (stream == 0 || stream == 1) return cudaStreamLegacy;
  if (stream == 2) return cudaStreamPerThread;
  return reinterpret_cast<cudaStream_t>(stream);
}

class CudaStager;

class CudaLease final : public DeviceLease {
 public:
  CudaLease(std::shared_ptr<CudaStager> stager, int index, void* data, cudaEvent_t copied)
      : stager_(std::move(stager)), index_(index), data_(data), copied_(copied) {}
  ~CudaLease() override;
  void* data() const override { return data_; }
  int device() const override;
  absl::Status WaitOn(intptr_t stream) override;
  bool CopyDone() const override;

 private:
  std::shared_ptr<CudaStager> stager_;  // buffers outlive the Loader while tensors exist
  int index_;
  void* data_;
  cudaEvent_t copied_;
  std::atomic<intptr_t> consumer_stream_{-1};
};

class CudaStager final : public DeviceStager, public std::enable_shared_from_this<CudaStager> {
 public:
  CudaStager(int device, size_t buffer_bytes, int max_buffers)
      : device_(device), buffer_bytes_(buffer_bytes), max_buffers_(max_buffers) {}

  absl::Status Init() {
    ScopedDevice guard(device_);
    RL_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    // Non-blocking: the loader's copies never serialise with work on the legacy default stream.
    RL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    buffers_.resize(static_cast<size_t>(max_buffers_));
    waiter_ = std::thread([this] { WaitCopies(); });
    return absl::OkStatus();
  }

  ~CudaStager() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      pending_cv_.notify_all();
    }
    if (waiter_.joinable()) waiter_.join();  // drains: every in-flight copy completes first
    ScopedDevice guard(device_);
    for (Buffer& b : buffers_) {
      if (b.ptr != nullptr) CudaCheckQuiet(cudaFree(b.ptr), "cudaFree");
      if (b.copied != nullptr) CudaCheckQuiet(cudaEventDestroy(b.copied), "cudaEventDestroy");
      if (b.released != nullptr) CudaCheckQuiet(cudaEventDestroy(b.released), "cudaEventDestroy");
    }
    if (stream_ != nullptr) CudaCheckQuiet(cudaStreamDestroy(stream_), "cudaStreamDestroy");
  }

  size_t buffer_bytes() const override { return buffer_bytes_; }
  int device() const override { return device_; }
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
    return !free_.empty() || allocated_ < max_buffers_;
  }

  absl::StatusOr<std::shared_ptr<DeviceLease>> Stage(const void* src, size_t bytes,
                                                     std::shared_ptr<void> host_owner) override {
    if (bytes > buffer_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat("Stage: ", bytes, " bytes exceed the buffer of ", buffer_bytes_));
    }
    ScopedDevice guard(device_);
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
        --allocated_;  // nothing was allocated: the slot in the ring stays unallocated
      } else {
        free_.push_back(index);
      }
      return status;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending_.push_back(Pending{b.copied, std::move(host_owner), bytes, std::chrono::steady_clock::now()});
      pending_cv_.notify_one();
    }
    return std::shared_ptr<DeviceLease>(std::make_shared<CudaLease>(shared_from_this(), index, b.ptr, b.copied));
  }

  // From the lease's destructor (any thread): order the buffer's reuse after the consumer's work.
  void Release(int index, intptr_t consumer_stream) {
    Buffer& b = buffers_[static_cast<size_t>(index)];
    bool recorded = false;
    if (consumer_stream != -1) {
      ScopedDevice guard(device_);
      const cudaError_t error = cudaEventRecord(b.released, StreamFromDlpack(consumer_stream));
      CudaCheckQuiet(error, "cudaEventRecord");
      recorded = error == cudaSuccess;
    }
    std::lock_guard<std::mutex> lock(mu_);
    b.release_recorded = recorded;
    --held_;
    free_.push_back(index);
  }

 private:
  struct Buffer {
    void* ptr = nullptr;
    cudaEvent_t copied = nullptr;    // recorded on stream_ after the copy into this buffer
    cudaEvent_t released = nullptr;  // recorded on the consumer's stream when it let go
    bool release_recorded = false;   // guarded by mu_
  };
  struct Pending {
    cudaEvent_t copied;
    std::shared_ptr<void> host_owner;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point issued;
  };

  absl::Status AllocateBuffer(Buffer& b) {
    // BlockingSync: the waiter thread sleeps in cudaEventSynchronize instead of spinning a core
    // that the decode workers need.
    // A retry after a failed cudaMalloc keeps the events it already made.
    if (b.copied == nullptr) {
      RL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&b.copied, cudaEventDisableTiming | cudaEventBlockingSync));
    }
    if (b.released == nullptr) {
      RL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&b.released, cudaEventDisableTiming));
    }
    RL_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.ptr, buffer_bytes_));
    return absl::OkStatus();
  }

  absl::Status Copy(Buffer& b, const void* src, size_t bytes) {
    bool wait_release;
    {
      std::lock_guard<std::mutex> lock(mu_);
      wait_release = b.release_recorded;
    }
    if (wait_release) RL_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, b.released, 0));
    RL_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.ptr, src, bytes, cudaMemcpyHostToDevice, stream_));
    RL_CUDA_RETURN_IF_ERROR(cudaEventRecord(b.copied, stream_));
    return absl::OkStatus();
  }

  // The stager thread: returns host slots in copy order, as soon as each copy completed.
  void WaitCopies() {
    NameCurrentThread("rl-stage");
    CudaCheckQuiet(cudaSetDevice(device_), "cudaSetDevice");
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
      CudaCheckQuiet(cudaEventSynchronize(next.copied), "cudaEventSynchronize");
      next.host_owner.reset();  // the host slot goes back to the free list
      const auto done = std::chrono::steady_clock::now();
      copy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(done - std::max(next.issued, last_done)).count(),
                         std::memory_order_relaxed);
      bytes_copied_.fetch_add(static_cast<int64_t>(next.bytes), std::memory_order_relaxed);
      last_done = done;
    }
  }

  const int device_;
  const size_t buffer_bytes_;
  const int max_buffers_;
  cudaStream_t stream_ = nullptr;
  std::vector<Buffer> buffers_;  // sized once in Init; entries owned by one user at a time
  mutable std::mutex mu_;
  std::vector<int> free_;
  int allocated_ = 0;
  int held_ = 0;
  std::deque<Pending> pending_;
  std::condition_variable pending_cv_;
  bool stop_ = false;
  std::atomic<int64_t> bytes_copied_{0};
  std::atomic<int64_t> copy_ns_{0};
  std::thread waiter_;
};

CudaLease::~CudaLease() { stager_->Release(index_, consumer_stream_.load(std::memory_order_acquire)); }

int CudaLease::device() const { return stager_->device(); }

absl::Status CudaLease::WaitOn(intptr_t stream) {
  if (stream == -1) return absl::OkStatus();
  ScopedDevice guard(stager_->device());
  RL_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(StreamFromDlpack(stream), copied_, 0));
  consumer_stream_.store(stream, std::memory_order_release);
  return absl::OkStatus();
}

bool CudaLease::CopyDone() const {
  ScopedDevice guard(stager_->device());
  return cudaEventQuery(copied_) == cudaSuccess;
}

}  // namespace

bool CudaDeviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    if (why != nullptr) {
      *why = error != cudaSuccess ? std::string(CudaCheck(error, "cudaGetDeviceCount").message())
                                  : "no CUDA device is visible";
    }
    return false;
  }
  return true;
}

std::shared_ptr<SlotAllocator> MakePinnedAllocator(std::string* why) {
  if (!CudaDeviceAvailable(why)) return nullptr;
  return std::make_shared<PinnedAllocator>();
}

std::shared_ptr<SlotAllocator> MakePinnedAllocatorOnNode(int node, std::string* why) {
  if (node < 0) return MakePinnedAllocator(why);
  if (!CudaDeviceAvailable(why)) return nullptr;
  return std::make_shared<NodePinnedAllocator>(node);
}

std::string CudaPciBusId(int ordinal) {
  char id[32] = {};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), ordinal) != cudaSuccess) return "";
  return id;
}

absl::StatusOr<std::shared_ptr<DeviceStager>> MakeDeviceStager(int ordinal, size_t buffer_bytes, int max_buffers) {
  std::string why;
  if (!CudaDeviceAvailable(&why)) {
    return absl::FailedPreconditionError(absl::StrCat("device='cuda:", ordinal, "' but ", why));
  }
  int count = 0;
  RL_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (ordinal >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("device='cuda:", ordinal, "' but only ", count, " CUDA device(s) are visible"));
  }
  auto stager = std::make_shared<CudaStager>(ordinal, buffer_bytes, std::max(1, max_buffers));
  if (absl::Status status = stager->Init(); !status.ok()) return status;
  return std::shared_ptr<DeviceStager>(std::move(stager));
}

}  // namespace ringloader
