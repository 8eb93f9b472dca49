#include "pipeline/slot_pool.h"

#include "absl/strings/str_cat.h"

namespace ringloader {

SlotLease::~SlotLease() { pool_->ReleaseHeld(slot_); }

SlotPool::SlotPool(std::shared_ptr<SlotAllocator> allocator, size_t slot_bytes, int base_slots,
                   int max_slots)
    : allocator_(std::move(allocator)),
      slot_bytes_(slot_bytes),
      max_slots_(std::max(base_slots, max_slots)),
      slots_(static_cast<size_t>(std::max(base_slots, max_slots)), nullptr),
      base_slots_(base_slots) {}

SlotPool::~SlotPool() {
  for (uint8_t* slot : slots_) {
    if (slot != nullptr) allocator_->Free(slot, slot_bytes_);
  }
}

absl::StatusOr<int> SlotPool::Acquire(const std::atomic<bool>& cancel) {
  std::unique_lock<std::mutex> lock(mu_);
  bool counted = false;
  while (true) {
    if (cancel.load(std::memory_order_acquire)) return absl::CancelledError("loader stopped");
    if (!free_.empty()) {
      const int slot = free_.back();
      free_.pop_back();
      return slot;
    }
    // The pipeline gets base_slots of its own; beyond that the pool grows only to replace slots
    // the consumer holds, and never past max_slots.
    const bool grow = allocated_ < std::min(max_slots_, base_slots_ + held_);
    if (grow) {
      void* memory = allocator_->Allocate(slot_bytes_);
      if (memory == nullptr) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "could not allocate a batch slot of ", slot_bytes_, " bytes with ", allocator_->name()));
      }
      const int slot = allocated_++;
      slots_[slot] = static_cast<uint8_t*>(memory);
      return slot;
    }
    if (!counted) ++waits_;  // the pipeline is full: counted once per Acquire
    counted = true;
    freed_.wait(lock);
  }
}

bool SlotPool::GrowBase(int cap) {
  std::lock_guard<std::mutex> lock(mu_);
  if (base_slots_ >= std::min(cap, max_slots_)) return false;
  ++base_slots_;
  freed_.notify_all();
  return true;
}

int SlotPool::base_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return base_slots_;
}

int64_t SlotPool::TakeProducerWaits() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t fresh = waits_ - waits_taken_;
  waits_taken_ = waits_;
  return fresh;
}

int64_t SlotPool::producer_waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waits_;
}

void SlotPool::Wake() {
  std::lock_guard<std::mutex> lock(mu_);
  freed_.notify_all();
}

void SlotPool::Recycle(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(slot);
  freed_.notify_all();
}

std::shared_ptr<SlotLease> SlotPool::Deliver(int slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++held_;
    // A held slot lets Acquire grow: wake a dispatcher that is waiting for a slot.
    freed_.notify_all();
  }
  return std::make_shared<SlotLease>(shared_from_this(), slot, slots_[slot]);
}

void SlotPool::ReleaseHeld(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  --held_;
  free_.push_back(slot);
  freed_.notify_all();
}

bool SlotPool::Exhausted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_ == max_slots_ && held_ == allocated_;
}

int SlotPool::allocated() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

int SlotPool::held_by_consumer() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_;
}

}  // namespace ringloader
