// Built when CUDA is absent at build time: the same seam, always "unavailable".
#include "absl/strings/str_cat.h"
#include "cuda/cuda_runtime.h"
#include "cuda/device_stager.h"

namespace ringloader {

bool CudaDeviceAvailable(std::string* why) {
  if (why != nullptr) *why = "this build of ringloader has no CUDA support";
  return false;
}

std::shared_ptr<SlotAllocator> MakePinnedAllocator(std::string* why) {
  CudaDeviceAvailable(why);
  return nullptr;
}

std::shared_ptr<SlotAllocator> MakePinnedAllocatorOnNode(int /*node*/, std::string* why) {
  return MakePinnedAllocator(why);
}

std::string CudaPciBusId(int /*ordinal*/) { return ""; }

absl::StatusOr<std::shared_ptr<DeviceRuntime>> MakeCudaRuntime(int ordinal) {
  std::string why;
  CudaDeviceAvailable(&why);
  return absl::FailedPreconditionError(absl::StrCat("device='cuda:", ordinal, "' but ", why));
}

}  // namespace ringloader
