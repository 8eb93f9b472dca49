#include "memory/slot_allocator.h"

#include <cstdlib>

namespace ringloader {
namespace {

constexpr size_t kPageBytes = 4096;

class HostAllocator final : public SlotAllocator {
 public:
  void* Allocate(size_t bytes) override {
    const size_t rounded = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
    return std::aligned_alloc(kPageBytes, rounded == 0 ? kPageBytes : rounded);
  }
  void Free(void* ptr, size_t /*bytes*/) override { std::free(ptr); }
  bool pinned() const override { return false; }
  std::string name() const override { return "host"; }
};

}  // namespace

std::shared_ptr<SlotAllocator> MakeHostAllocator() { return std::make_shared<HostAllocator>(); }

}  // namespace ringloader
