// Built when CUDA is absent at build time: the same seam, always "unavailable".
#include "cuda/cuda_runtime.h"

namespace ringloader {

bool CudaDeviceAvailable(std::string* why) {
  if (why != nullptr) *why = "this build of ringloader has no CUDA support";
  return false;
}

std::shared_ptr<SlotAllocator> MakePinnedAllocator(std::string* why) {
  CudaDeviceAvailable(why);
  return nullptr;
}

}  // namespace ringloader
