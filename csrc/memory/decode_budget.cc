#include "memory/decode_budget.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cpu_budget.h"
#include "common/status_util.h"

namespace ringloader {

DecodeBudget::DecodeBudget(uint64_t total, uint64_t allowance)
    : total_(total), allowance_(allowance), owner_pid_(static_cast<int>(getpid())) {}

DecodeBudget::Grant& DecodeBudget::Grant::operator=(Grant&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = other.budget_;
    bytes_ = other.bytes_;
    held_ = other.held_;
    buffer_ = std::move(other.buffer_);
    other.budget_ = nullptr;
  }
  return *this;
}

void DecodeBudget::Grant::Release() {
  if (budget_ == nullptr) {
    buffer_ = OutputPages();
    return;
  }
  budget_->Return(bytes_, held_, std::move(buffer_));
  budget_ = nullptr;
}

absl::StatusOr<DecodeBudget::Grant> DecodeBudget::Acquire(uint64_t bytes, absl::string_view what) {
  if (bytes <= allowance_ || static_cast<int>(getpid()) != owner_pid_) return Grant();
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t ticket = next_ticket_++;
  queue_.push_back(ticket);
  bool waited = false;
  while (true) {
    const uint64_t room = RoomBesideSlots();
    if (bytes > room) {
      // Slots stay allocated while the loader lives: this need can never be met.
      queue_.erase(std::find(queue_.begin(), queue_.end(), ticket));
      ++counts_.refused;
      changed_.notify_all();
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " needs ", bytes, " bytes (", FormatMemorySize(bytes),
          ") of decode buffers, more than the memory budget leaves for decoding: max_memory ",
          FormatMemorySize(total_), ", of which ", FormatMemorySize(counts_.slot_bytes),
          " are batch slots. Raise max_memory= (to at least ", FormatMemorySize(counts_.slot_bytes + bytes),
          "), lower max_image_pixels= to refuse such images before reading them, or shrink the image"));
    }
    // A slot waiting for room goes first.
    if (queue_.front() == ticket && slots_waiting_ == 0 && counts_.decode_bytes + bytes <= room) break;
    waited = true;
    changed_.wait(lock);
  }
  queue_.pop_front();
  counts_.decode_bytes += bytes;
  ++counts_.grants;
  if (waited) ++counts_.waits;
  counts_.peak_decode_bytes = std::max(counts_.peak_decode_bytes, counts_.decode_bytes);
  counts_.peak_total_bytes = std::max(counts_.peak_total_bytes, counts_.decode_bytes + counts_.slot_bytes);
  changed_.notify_all();  // the next in line may fit too
  return Grant(this, bytes);
}

absl::StatusOr<DecodeBudget::Grant> DecodeBudget::AcquireOutput(uint64_t bytes, absl::string_view what,
                                                                const std::atomic<bool>* cancel,
                                                                const std::function<bool()>& due) {
  if (static_cast<int>(getpid()) != owner_pid_) return Grant();
  RL_ASSIGN_OR_RETURN(const uint64_t charged, ChargeOutput(bytes, what, cancel, due, nullptr));
  return Grant(this, charged, true);
}

absl::StatusOr<DecodeBudget::Grant> DecodeBudget::AcquireOutputBuffer(
    uint64_t bytes, absl::string_view what, const std::atomic<bool>* cancel,
    const std::function<bool()>& due) {
  OutputPages buffer;
  Grant grant;
  if (static_cast<int>(getpid()) == owner_pid_) {
    RL_ASSIGN_OR_RETURN(const uint64_t charged, ChargeOutput(bytes, what, cancel, due, &buffer));
    grant = Grant(this, charged, true);
    // A kept buffer of another size, charged for `bytes`: made that size outside the lock.
    if (buffer && buffer.bytes() != charged && !buffer.Resize(charged)) buffer = OutputPages();
  }
  if (!buffer) {
    RL_ASSIGN_OR_RETURN(buffer, OutputPages::New(bytes));
  }
  grant.buffer_ = std::move(buffer);
  return grant;
}

OutputPages& OutputPages::operator=(OutputPages&& other) noexcept {
  if (this != &other) {
    Free();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

namespace {
uint64_t WholePages(uint64_t bytes) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return (std::max<uint64_t>(bytes, 1) + page - 1) / page * page;
}
}  // namespace

absl::StatusOr<OutputPages> OutputPages::New(uint64_t bytes) {
  OutputPages pages;
  if (bytes >= kOutputPagesMapped) {
    const uint64_t length = WholePages(bytes);
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      pages.data_ = static_cast<uint8_t*>(p);
      pages.mapped_ = length;
    }
  } else {
    pages.data_ = new (std::nothrow) uint8_t[std::max<uint64_t>(bytes, 1)];
  }
  if (pages.data_ == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("no memory for its output of ", bytes, " bytes"));
  }
  pages.bytes_ = bytes;
  return pages;
}

bool OutputPages::Resize(uint64_t bytes) {
  if (mapped_ == 0) return false;
  const uint64_t length = WholePages(bytes);
  if (length != mapped_) {
    void* p = mremap(data_, mapped_, length, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) return false;
    data_ = static_cast<uint8_t*>(p);
    mapped_ = length;
  }
  bytes_ = bytes;
  return true;
}

void OutputPages::Free() {
  if (data_ == nullptr) return;
  if (mapped_ != 0) {
    munmap(data_, mapped_);
  } else {
    delete[] data_;
  }
  data_ = nullptr;
  bytes_ = mapped_ = 0;
}

absl::StatusOr<uint64_t> DecodeBudget::ChargeOutput(uint64_t bytes, absl::string_view what,
                                                    const std::atomic<bool>* cancel,
                                                    const std::function<bool()>& due,
                                                    OutputPages* reused) {
  std::vector<OutputPages> freed;  // kept buffers evicted: freed after the lock
  std::unique_lock<std::mutex> lock(mu_);
  bool waited = false;
  uint64_t charged = bytes;
  while (true) {
    const uint64_t room = RoomBesideSlots();
    if (bytes > room) {
      ++counts_.refused;
      return absl::ResourceExhaustedError(absl::StrCat(
          what, " is ", bytes, " bytes (", FormatMemorySize(bytes),
          "), more than the memory budget leaves beside the batch slots: max_memory ",
          FormatMemorySize(total_), ", of which ", FormatMemorySize(counts_.slot_bytes),
          " are batch slots. Raise max_memory= (to at least ",
          FormatMemorySize(counts_.slot_bytes + bytes), ") or make the output smaller"));
    }
    if (reused != nullptr) {
      // A kept buffer is charged already (as kept): taking it as it is, or shrunk, adds nothing
      // to what is held.
      const auto fit = kept_.lower_bound(bytes);
      // Shrunk only for an output that is pages of its own too: a small one would throw away
      // the pages a large output after it would fault in again.
      if (fit != kept_.end() &&
          (fit->first / 2 <= bytes || (fit->second.resizable() && bytes >= kOutputPagesMapped))) {
        charged = fit->first / 2 <= bytes ? fit->first : bytes;
        counts_.kept_bytes -= fit->first;
        *reused = std::move(fit->second);
        kept_.erase(fit);
        ++counts_.outputs_reused;
        break;
      }
    }
    // Else the largest smaller kept buffer, grown: charged as a new output of `bytes` (its own
    // bytes leave the kept ones), so it must fit as one.
    OutputPages grown;
    if (reused != nullptr && bytes >= kOutputPagesMapped && !kept_.empty() &&
        std::prev(kept_.end())->second.resizable()) {
      const auto largest = std::prev(kept_.end());
      counts_.kept_bytes -= largest->first;
      grown = std::move(largest->second);
      kept_.erase(largest);
    }
    EvictKeptFor(bytes, &freed);
    if (queue_.empty() && slots_waiting_ == 0 &&
        counts_.decode_bytes + counts_.output_bytes + counts_.kept_bytes + bytes <= room) {
      if (grown) {
        *reused = std::move(grown);
        ++counts_.outputs_reused;
      }
      break;
    }
    if (grown) {  // waits as kept
      counts_.kept_bytes += grown.bytes();
      kept_.emplace(grown.bytes(), std::move(grown));
    }
    if (due && due()) {  // the batch the consumer takes next: nothing else would free room
      ++counts_.outputs_over_budget;
      break;
    }
    if (cancel != nullptr && cancel->load(std::memory_order_acquire)) {
      return absl::CancelledError("cancelled while waiting for memory for a sample's output");
    }
    waited = true;
    changed_.wait_for(lock, std::chrono::milliseconds(20));
  }
  counts_.output_bytes += charged;
  if (reused != nullptr && !*reused) ++counts_.outputs_new;
  counts_.peak_output_bytes = std::max(counts_.peak_output_bytes, counts_.output_bytes);
  if (waited) ++counts_.output_waits;
  counts_.peak_total_bytes =
      std::max(counts_.peak_total_bytes, counts_.decode_bytes + counts_.output_bytes +
                                             counts_.kept_bytes + counts_.slot_bytes);
  return charged;
}

void DecodeBudget::EvictKeptFor(uint64_t bytes, std::vector<OutputPages>* freed) {
  const uint64_t room = RoomBesideSlots();
  const uint64_t peak = std::max(counts_.peak_output_bytes, counts_.output_bytes + bytes);
  while (!kept_.empty() &&
         (counts_.decode_bytes + counts_.output_bytes + counts_.kept_bytes + bytes > room ||
          counts_.output_bytes + counts_.kept_bytes + bytes > peak)) {
    const auto largest = std::prev(kept_.end());
    counts_.kept_bytes -= largest->first;
    freed->push_back(std::move(largest->second));
    kept_.erase(largest);
  }
}

void DecodeBudget::Return(uint64_t bytes, bool held, OutputPages buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t& from = held ? counts_.output_bytes : counts_.decode_bytes;
  from -= std::min(bytes, from);
  if (buffer) {
    const uint64_t room = RoomBesideSlots();
    const uint64_t kept = counts_.output_bytes + counts_.kept_bytes + bytes;
    if (counts_.decode_bytes + kept <= room && kept <= counts_.peak_output_bytes) {
      kept_.emplace(bytes, std::move(buffer));
      counts_.kept_bytes += bytes;
    }
  }
  changed_.notify_all();
  // A buffer not kept is freed on return, after the lock (a parameter outlives the locals).
}

void DecodeBudget::AddSlotBytes(uint64_t bytes) {
  if (static_cast<int>(getpid()) != owner_pid_) return;
  std::unique_lock<std::mutex> lock(mu_);
  // Slots come first: no grant is given while a slot waits, and the grants in force end with
  // their decodes, which wait on nothing. Slots alone fit (PlanSlots).
  ++slots_waiting_;
  bool waited = false;
  while (counts_.decode_bytes > 0 && counts_.slot_bytes + counts_.decode_bytes + bytes > total_) {
    waited = true;
    changed_.wait(lock);
  }
  --slots_waiting_;
  if (waited) ++counts_.slot_waits;
  counts_.slot_bytes += bytes;
  counts_.peak_total_bytes = std::max(counts_.peak_total_bytes, counts_.decode_bytes + counts_.slot_bytes);
  changed_.notify_all();  // a waiter whose need no longer fits is refused now
}

void DecodeBudget::RemoveSlotBytes(uint64_t bytes) {
  if (static_cast<int>(getpid()) != owner_pid_) return;
  std::lock_guard<std::mutex> lock(mu_);
  counts_.slot_bytes -= std::min(bytes, counts_.slot_bytes);
  changed_.notify_all();
}

DecodeBudget::Counts DecodeBudget::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

namespace {

class BudgetedAllocator final : public SlotAllocator {
 public:
  BudgetedAllocator(std::shared_ptr<SlotAllocator> inner, std::shared_ptr<DecodeBudget> budget)
      : inner_(std::move(inner)), budget_(std::move(budget)) {}
  void* Allocate(size_t bytes) override {
    void* memory = inner_->Allocate(bytes);
    if (memory != nullptr) budget_->AddSlotBytes(bytes);
    return memory;
  }
  void Free(void* ptr, size_t bytes) override {
    inner_->Free(ptr, bytes);
    budget_->RemoveSlotBytes(bytes);
  }
  bool pinned() const override { return inner_->pinned(); }
  std::string name() const override { return inner_->name(); }

 private:
  std::shared_ptr<SlotAllocator> inner_;
  std::shared_ptr<DecodeBudget> budget_;
};

}  // namespace

std::shared_ptr<SlotAllocator> MakeBudgetedAllocator(std::shared_ptr<SlotAllocator> inner,
                                                     std::shared_ptr<DecodeBudget> budget) {
  return std::make_shared<BudgetedAllocator>(std::move(inner), std::move(budget));
}

}  // namespace ringloader
