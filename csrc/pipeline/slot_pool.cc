#include "pipeline/slot_pool.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cpu_budget.h"

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

uint64_t SlotPool::AddOutput(int slot, SampleOutput output) {
  std::lock_guard<std::mutex> lock(outputs_mu_);
  const uint64_t id = next_output_++;
  outputs_.emplace(id, std::make_pair(slot, std::move(output)));
  return id;
}

std::optional<SampleOutput> SlotPool::TakeOutput(uint64_t id) {
  std::lock_guard<std::mutex> lock(outputs_mu_);
  auto it = outputs_.find(id);
  if (it == outputs_.end()) return std::nullopt;
  SampleOutput out = std::move(it->second.second);
  outputs_.erase(it);
  return out;
}

size_t SlotPool::outputs_held() const {
  std::lock_guard<std::mutex> lock(outputs_mu_);
  return outputs_.size();
}

void SlotPool::DropOutputs(int slot) {
  std::vector<SampleOutput> dropped;  // freed outside the lock (their grants take the budget's)
  {
    std::lock_guard<std::mutex> lock(outputs_mu_);
    for (auto it = outputs_.begin(); it != outputs_.end();) {
      if (it->second.first == slot) {
        dropped.push_back(std::move(it->second.second));
        it = outputs_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void SlotPool::Recycle(int slot) {
  DropOutputs(slot);  // before the slot is free: a new batch's outputs are its own
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
  DropOutputs(slot);
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

namespace {

constexpr int kMostSlots = 1024;   // so `list(loader)` works on small data while big batches stay bounded
constexpr int kMostAutoDepth = 64;

std::string Bytes(uint64_t bytes) { return absl::StrCat(bytes, " bytes (", FormatMemorySize(bytes), ")"); }

}  // namespace

absl::StatusOr<SlotPlan> PlanSlots(const SlotRequest& r) {
  const uint64_t slot = std::max<uint64_t>(r.slot_bytes, 1);
  const uint64_t minimum = kMinSlots * slot;
  SlotPlan plan;
  plan.budget = r.budget;
  std::vector<std::string> cuts;
  if (!r.budget_given && r.budget < minimum && r.available > 0 && minimum <= r.available / 2) {
    plan.budget = minimum;
    cuts.push_back(absl::StrCat("the default budget holds fewer than ", kMinSlots, " slots: raised to ",
                                kMinSlots, " x ", FormatMemorySize(slot), " = ", FormatMemorySize(minimum),
                                ", within half of the ", FormatMemorySize(r.available), " available"));
  }
  const uint64_t fits = std::min<uint64_t>(kMostSlots, plan.budget / slot);
  if (fits < static_cast<uint64_t>(kMinSlots)) {
    const size_t rows = static_cast<size_t>(std::max(1, r.batch_size));
    const size_t tail = 2 * sizeof(int64_t) * rows;
    const std::string what = absl::StrCat(
        " holds ", fits, " batch slot", fits == 1 ? "" : "s", " of ", slot, " bytes (", FormatMemorySize(slot), ": batch_size ", r.batch_size,
        " x ", slot > tail ? (slot - tail) / rows : 0, " bytes a sample, + ", tail,
        " bytes of labels and indices); the pipeline needs at least ", kMinSlots,
        " (one being filled, one the training loop holds): ", kMinSlots, " x ", slot, " = ", Bytes(minimum));
    const std::string smaller = "lower batch_size or the output size (a smaller crop or resize, uint8 instead of float32)";
    if (r.budget_given) {
      return absl::InvalidArgumentError(absl::StrCat("max_memory=", r.budget, " bytes", what, ". Raise max_memory to at least ",
                                                     minimum, " bytes, or ", smaller));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "the memory budget (", FormatMemorySize(r.budget), ": ", r.budget_note, ")", what,
        r.available > 0 ? absl::StrCat(", more than half of the ", FormatMemorySize(r.available), " available")
                        : std::string(),
        ". To fit, ", smaller, "; or give max_memory= explicitly (at least ", minimum,
        " bytes) if the process can spare that much"));
  }
  plan.max_slots = static_cast<int>(fits);
  if (r.max_slots > 0 && r.max_slots < plan.max_slots) plan.max_slots = r.max_slots;
  if (r.max_slots > plan.max_slots) {
    cuts.push_back(absl::StrCat("max_slots ", r.max_slots, " -> ", plan.max_slots, " (what the budget holds)"));
  }
  const int asked = std::max(1, r.prefetch_batches);
  if (r.auto_prefetch) {
    // Half the slots for the pipeline, half for batches the consumer keeps. (Host path only:
    // with a device nothing grows, so the cap is the depth.)
    const int half = std::max(1, std::min(kMostAutoDepth, plan.max_slots / 2));
    plan.depth = std::min(asked, half);
    plan.prefetch_cap = r.device ? plan.depth : half;
  } else {
    plan.depth = std::min(asked, std::max(1, plan.max_slots - 1));  // one slot is the consumer's
    plan.prefetch_cap = plan.depth;
  }
  if (plan.depth < asked) {
    cuts.push_back(absl::StrCat("prefetch ", asked, " -> ", plan.depth, " batch", plan.depth == 1 ? "" : "es",
                                " (the budget holds ", plan.max_slots, " slots of ", FormatMemorySize(slot),
                                r.auto_prefetch ? "; auto prefetch takes at most half" : "; one is the training loop's",
                                ")"));
  }
  if (plan.depth < asked || plan.budget != r.budget) {
    plan.read_ahead = false;
    cuts.push_back("epoch read-ahead off (its second set of file buffers is outside the slot budget)");
  }
  plan.note = absl::StrJoin(cuts, "; ");
  return plan;
}

}  // namespace ringloader
