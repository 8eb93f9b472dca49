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
#include <optional>
#include <unordered_map>
#include <utility>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "memory/slot_allocator.h"
#include "ringloader/types.h"

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

  /// Variable-size outputs (LoaderOptions::View::variable): the pixels of a row that has no
  /// fixed size live in a buffer of their own, registered with the slot of their batch until
  /// the consumer takes them (TakeOutput) or the slot comes back (Recycle, the lease's end),
  /// which frees those not taken. AddOutput returns the id the row's record names (never 0).
  uint64_t AddOutput(int slot, SampleOutput output);
  std::optional<SampleOutput> TakeOutput(uint64_t id);
  size_t outputs_held() const;

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
  void DropOutputs(int slot);

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

  mutable std::mutex outputs_mu_;  // apart from mu_: taken per sample, not per batch
  std::unordered_map<uint64_t, std::pair<int, SampleOutput>> outputs_ ABSL_GUARDED_BY(outputs_mu_);
  uint64_t next_output_ ABSL_GUARDED_BY(outputs_mu_) = 1;
};

/// The fewest slots a pipeline works with: one being filled while the consumer holds the batch
/// it is working on (a `for` loop keeps the previous batch alive while it asks for the next).
inline constexpr int kMinSlots = 2;

/// What PlanSlots sizes: the slots and pipeline depth a loader asks for, and its memory budget.
struct SlotRequest {
  size_t slot_bytes = 0;
  int batch_size = 1;            ///< Named in the refusal.
  uint64_t budget = 0;           ///< Slot-memory budget in bytes ...
  bool budget_given = false;     ///< ... set by the user (max_memory): a hard bound ...
  std::string budget_note;       ///< ... or where the default came from (named in the refusal).
  uint64_t available = 0;        ///< Memory available to the process (0: unknown).
  int prefetch_batches = 1;      ///< Depth asked for (the starting depth with auto_prefetch).
  bool auto_prefetch = false;
  bool device = false;           ///< auto_prefetch never deepens with a device.
  int max_slots = 0;             ///< Slot bound asked for (0: what the budget holds).
};

/// The slots and depth a loader gets.
struct SlotPlan {
  uint64_t budget = 0;           ///< The budget in force (the default may be raised, see below).
  int max_slots = 0;
  int depth = 0;                 ///< Pipeline depth (auto_prefetch: the starting depth) ...
  int prefetch_cap = 0;          ///< ... and how deep auto_prefetch may grow (= depth without).
  bool read_ahead = true;        ///< Whether the next epoch may be read ahead (Loader::QueueEpoch).
  std::string note;              ///< What was cut to fit the budget, and why ("": nothing).
};

/// Sizes slots and depth within the budget: slots = budget / slot_bytes (at most 1024, at most
/// max_slots when asked), depth = prefetch_batches, cut to slots - 1 (one slot is the consumer's)
/// or, with auto_prefetch, to half the slots (at most 64). Nothing exceeds the budget; what was cut
/// is said in `note`. When the budget was cut below what the asked depth wants (depth or the
/// minimum), the epoch read-ahead is turned off: its second set of file buffers is outside the
/// slot budget, and memory is tight.
///
/// Fewer than kMinSlots slots cannot run. A budget the user gave is then refused. The default one
/// (a quarter of `available`) rises to kMinSlots slots when they fit in half of `available`
/// (the other half stays the training loop's), and is refused otherwise. A refusal is
/// InvalidArgument naming the budget, the need (bytes per slot x slots) and what to change.
absl::StatusOr<SlotPlan> PlanSlots(const SlotRequest& request);

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
