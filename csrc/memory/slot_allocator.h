#pragma once
/// Memory for batch slots. The host allocator gives page-aligned memory (optionally bound to a
/// NUMA node); a pinned allocator (CUDA `cudaHostAlloc`) plugs in behind the same interface.

#include <cstddef>
#include <memory>
#include <string>

namespace ringloader {

/// Allocates and frees slot memory. Implementations must be thread-safe.
class SlotAllocator {
 public:
  virtual ~SlotAllocator() = default;
  /// Returns `bytes` of memory aligned to at least 4096, or nullptr on failure.
  virtual void* Allocate(size_t bytes) = 0;
  /// Frees memory from Allocate.
  virtual void Free(void* ptr, size_t bytes) = 0;
  /// True when memory is page-locked (pinned) for fast device copies.
  virtual bool pinned() const = 0;
  /// "host", "host (NUMA node 1)", "cuda-pinned", ...
  virtual std::string name() const = 0;
};

/// Page-aligned pageable host memory.
std::shared_ptr<SlotAllocator> MakeHostAllocator();

}  // namespace ringloader
