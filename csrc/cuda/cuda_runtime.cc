// The CUDA implementation of the seam: pinned slot allocators and the DeviceRuntime the device
// stager (device_stager.cc) runs on. Every CUDA runtime call of ringloader is in this file, and
// every one goes through CudaCheck (or, in destructors, CudaCheckQuiet), so an error message
// always names the call.
#include "cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cuda/device_runtime.h"
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

// ---- the CUDA DeviceRuntime ----------------------------------------------------------------
// A thin translation: the staging logic is in device_stager.cc. Every call makes the runtime's
// device current for its duration (ScopedDevice), since it runs on threads the application owns.

class CudaRuntime final : public DeviceRuntime {
 public:
  explicit CudaRuntime(int device) : device_(device) {}
  int device() const override { return device_; }
  std::string name() const override { return absl::StrCat("cuda:", device_); }

  absl::StatusOr<void*> Malloc(size_t bytes) override {
    ScopedDevice guard(device_);
    void* ptr = nullptr;
    RL_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, bytes));
    return ptr;
  }
  void Free(void* ptr) override {
    ScopedDevice guard(device_);
    CudaCheckQuiet(cudaFree(ptr), "cudaFree");
  }
  absl::StatusOr<Stream> CreateStream() override {
    ScopedDevice guard(device_);
    cudaStream_t stream = nullptr;
    // Non-blocking: the loader's copies never serialise with work on the legacy default stream.
    RL_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return static_cast<Stream>(stream);
  }
  void DestroyStream(Stream stream) override {
    ScopedDevice guard(device_);
    CudaCheckQuiet(cudaStreamDestroy(static_cast<cudaStream_t>(stream)), "cudaStreamDestroy");
  }
  absl::StatusOr<Event> CreateEvent(bool blocking_sync) override {
    ScopedDevice guard(device_);
    cudaEvent_t event = nullptr;
    const unsigned flags = cudaEventDisableTiming | (blocking_sync ? cudaEventBlockingSync : 0u);
    RL_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event, flags));
    return static_cast<Event>(event);
  }
  void DestroyEvent(Event event) override {
    ScopedDevice guard(device_);
    CudaCheckQuiet(cudaEventDestroy(static_cast<cudaEvent_t>(event)), "cudaEventDestroy");
  }
  absl::Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes, Stream stream) override {
    ScopedDevice guard(device_);
    RL_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(stream)));
    return absl::OkStatus();
  }
  absl::Status Record(Event event, Stream stream) override {
    ScopedDevice guard(device_);
    RL_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
    return absl::OkStatus();
  }
  absl::Status StreamWait(Stream stream, Event event) override {
    ScopedDevice guard(device_);
    RL_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
    return absl::OkStatus();
  }
  absl::Status Synchronize(Event event) override {
    ScopedDevice guard(device_);
    const cudaError_t error = cudaEventSynchronize(static_cast<cudaEvent_t>(event));
    // At interpreter exit the runtime may be unloading; the copy is moot then.
    if (error == cudaErrorCudartUnloading) return absl::OkStatus();
    RL_CUDA_RETURN_IF_ERROR(error);
    return absl::OkStatus();
  }
  bool Query(Event event) override {
    ScopedDevice guard(device_);
    return cudaEventQuery(static_cast<cudaEvent_t>(event)) == cudaSuccess;
  }
  Stream FromDlpackStream(intptr_t stream) override {
    if (stream == 0 || stream == 1) return static_cast<Stream>(cudaStreamLegacy);
    if (stream == 2) return static_cast<Stream>(cudaStreamPerThread);
    return reinterpret_cast<Stream>(stream);
  }

 private:
  const int device_;
};

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

absl::StatusOr<std::shared_ptr<DeviceRuntime>> MakeCudaRuntime(int ordinal) {
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
  return std::shared_ptr<DeviceRuntime>(std::make_shared<CudaRuntime>(ordinal));
}

}  // namespace ringloader
