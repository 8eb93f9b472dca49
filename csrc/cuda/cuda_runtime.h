#pragma once
/// The CUDA seam. Every CUDA runtime call lives in this folder; without CUDA at build time the
/// functions below report "unavailable" and the loader uses host memory.

#include <memory>
#include <string>

#include "memory/slot_allocator.h"

namespace ringloader {

/// True when this build has CUDA support and at least one device is visible. Otherwise
/// `*why` (when given) says which of the two is missing.
bool CudaDeviceAvailable(std::string* why);

/// Page-locked host memory from cudaHostAlloc (portable), or nullptr with `*why` set when no
/// device is visible or the build has no CUDA.
std::shared_ptr<SlotAllocator> MakePinnedAllocator(std::string* why);

/// Page-locked host memory whose pages sit on NUMA `node`: mmap + mbind(MPOL_PREFERRED), pages
/// touched so they are placed under that policy, then cudaHostRegister (portable). Pinning
/// after placement makes the node certain; cudaHostAlloc would place pages wherever the
/// driver's allocating thread's policy says. node -1: same as MakePinnedAllocator.
std::shared_ptr<SlotAllocator> MakePinnedAllocatorOnNode(int node, std::string* why);

}  // namespace ringloader
