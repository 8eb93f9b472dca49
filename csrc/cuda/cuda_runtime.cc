#include "cuda/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"

namespace ringloader {
namespace {

/// The one checker for CUDA calls: names the call and the error.
std::string CudaError(const char* call, cudaError_t error) {
  return absl::StrCat(call, " failed: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
}

class PinnedAllocator final : public SlotAllocator {
 public:
  void* Allocate(size_t bytes) override {
    void* ptr = nullptr;
    if (cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable) != cudaSuccess) return nullptr;
    return ptr;
  }
  void Free(void* ptr, size_t) override {
    // At interpreter exit the runtime may already be unloading; the memory goes with it.
    const cudaError_t error = cudaFreeHost(ptr);
    (void)error;
  }
  bool pinned() const override { return true; }
  std::string name() const override { return "cuda-pinned"; }
};

}  // namespace

bool CudaDeviceAvailable(std::string* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    if (why != nullptr) {
      *why = error != cudaSuccess ? CudaError("cudaGetDeviceCount", error) : "no CUDA device is visible";
    }
    return false;
  }
  return true;
}

std::shared_ptr<SlotAllocator> MakePinnedAllocator(std::string* why) {
  if (!CudaDeviceAvailable(why)) return nullptr;
  return std::make_shared<PinnedAllocator>();
}

}  // namespace ringloader
