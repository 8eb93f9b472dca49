#pragma once
/// The batch slots: fixed-size buffers that batches are assembled in and handed to the consumer.
///
/// A slot is in one of three places: free, in the pipeline (being filled or waiting for the
/// consumer), or held by the consumer through a `SlotLease`. It is rewritten only after it came
/// back to the free list: from the pipeline (an undelivered batch) or from the lease's
/// destructor (the consumer dropped the batch). Slots are allocated lazily up to `base_slots`
/// for the pipeline; while the consumer holds batches, one more per held batch is allocated, up
/// to `max_slots` in all.
/// When every slot is held by the consumer, `Exhausted()` says so, so the consumer gets a clear
/// error instead of waiting forever.
///
/// The pipeline's share (`base_slots`) may grow while the pool lives (adaptive prefetch:
/// GrowBase), never past `max_slots`; `TakeProducerWaits` tells the loader whether the
/// dispatcher had to wait for a slot, i.e. the pipeline was full.
///
/// Acquire/Release happen once per batch, so a mutex and condition variable guard the lists.
/// All methods are thread-safe; leases may be released from any thread, also after the Loader
/// is gone (the pool is shared with the leases).

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "memory/slot_allocator.h"

namespace ringloader {

class SlotPool;

/// The consumer's hold on one delivered slot; destroying it returns the slot to the pool.
class SlotLease {
 public:
  SlotLease(std::shared_ptr<SlotPool> pool, int slot, uint8_t* data)
      : pool_(std::move(pool)), slot_(slot), data_(data) {}
  ~SlotLease();
  SlotLease(const SlotLease&) = delete;
  SlotLease& operator=(const SlotLease&) = delete;
  int slot() const { return slot_; }
  uint8_t* data() const { return data_; }

 private:
  std::shared_ptr<SlotPool> pool_;
  int slot_;
  uint8_t* data_;
};

class SlotPool : public std::enable_shared_from_this<SlotPool> {
 public:
  SlotPool(std::shared_ptr<SlotAllocator> allocator, size_t slot_bytes, int base_slots,
           int max_slots);
  ~SlotPool();
  SlotPool(const SlotPool&) = delete;
  SlotPool& operator=(const SlotPool&) = delete;

  /// Takes a free slot for the pipeline, allocating within the bounds above; blocks otherwise.
  /// Returns Cancelled once `cancel` is set (call Wake after setting it), ResourceExhausted
  /// when memory cannot be allocated.
  absl::StatusOr<int> Acquire(const std::atomic<bool>& cancel);
  /// Wakes Acquire waiters so they re-check their cancel flag.
  void Wake();
  /// Returns a slot that never reached the consumer.
  void Recycle(int slot);
  /// Hands a slot to the consumer.
  std::shared_ptr<SlotLease> Deliver(int slot);
  /// True when all max_slots slots exist and the consumer holds every one of them.
  bool Exhausted() const;

  /// Raises the pipeline's share by one slot when it is below `cap` (and max_slots); true when
  /// it grew. Wakes a dispatcher waiting for a slot.
  bool GrowBase(int cap);
  /// Pipeline's share of slots now.
  int base_slots() const;
  /// Times Acquire had to wait for a slot since the last call (then resets), and in all.
  int64_t TakeProducerWaits();
  int64_t producer_waits() const;

  uint8_t* data(int slot) const { return slots_[slot]; }
  size_t slot_bytes() const { return slot_bytes_; }
  int max_slots() const { return max_slots_; }
  int allocated() const;
  int held_by_consumer() const;
  bool pinned() const { return allocator_->pinned(); }
  const SlotAllocator& allocator() const { return *allocator_; }

 private:
  friend class SlotLease;
  void ReleaseHeld(int slot);

  std::shared_ptr<SlotAllocator> allocator_;
  const size_t slot_bytes_;
  const int max_slots_;
  std::vector<uint8_t*> slots_;  // sized max_slots_ up front; entries set once, under mu_

  mutable std::mutex mu_;
  std::condition_variable freed_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);
  int allocated_ ABSL_GUARDED_BY(mu_) = 0;
  int held_ ABSL_GUARDED_BY(mu_) = 0;
  int base_slots_ ABSL_GUARDED_BY(mu_);
  int64_t waits_ ABSL_GUARDED_BY(mu_) = 0;         // Acquire calls that had to wait
  int64_t waits_taken_ ABSL_GUARDED_BY(mu_) = 0;   // ... as of the last TakeProducerWaits
};

/// Adaptive prefetch's decision (LoaderOptions::auto_prefetch), apart from threads and clocks so
/// it can be tested step by step. At each Next() the loader reports whether the batch asked for
/// was already complete, and whether the pipeline stood idle: every batch it had started was
/// complete and it had no slot to start another (the producer was ahead and stopped). When the
/// pipeline stood idle and later the consumer has to wait, the batches the producer could have
/// made while it stood are the ones now missing: the depth grows by one. A producer that is
/// simply slower than the consumer never stands idle, so it never makes the queue deeper, and
/// a consumer that never waits never does either.
class PrefetchGovernor {
 public:
  /// Call once per Next(), before it waits. True: grow the depth by one.
  bool OnNext(bool batch_ready, bool pipeline_idle) {
    if (pipeline_idle) idle_seen_ = true;
    if (batch_ready) return false;
    const bool grow = idle_seen_;
    idle_seen_ = false;
    return grow;
  }
  /// A new epoch starts empty: nothing seen yet.
  void Reset() { idle_seen_ = false; }

 private:
  bool idle_seen_ = false;
};

}  // namespace ringloader
