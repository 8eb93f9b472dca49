#pragma once
/// A bounded multi-producer multi-consumer queue, lock-free on its hot path.
///
/// Cells carry a sequence number (Vyukov's bounded MPMC design): a producer claims a cell by a
/// CAS on `tail_`, writes the value, then publishes it by storing the cell's sequence with
/// release order; a consumer claims by a CAS on `head_` and reads after an acquire load of the
/// same sequence. Threads block only when the queue is empty (Pop) or full (Push), on C++20
/// atomic wait/notify over two event counters; a waiter count keeps notify off the fast path.
///
/// Close() wakes everybody: Push then fails at once, Pop drains what is left and then fails.
/// Any thread may call any method.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <utility>

namespace ringloader {

inline constexpr size_t kCacheLine = 64;

template <typename T>
class BoundedQueue {
 public:
  /// `capacity` is rounded up to a power of two (at least 2).
  explicit BoundedQueue(size_t capacity) {
    size_t cap = 2;
    while (cap < capacity) cap <<= 1;
    mask_ = cap - 1;
    cells_ = std::make_unique<Cell[]>(cap);
    for (size_t i = 0; i < cap; ++i) cells_[i].sequence.store(i, std::memory_order_relaxed);
  }
  BoundedQueue(const BoundedQueue&) = delete;
  BoundedQueue& operator=(const BoundedQueue&) = delete;

  size_t capacity() const { return mask_ + 1; }

  /// Non-blocking push; false when full or closed.
  [[nodiscard]] bool TryPush(T value) {
    if (closed_.load(std::memory_order_acquire)) return false;
    if (!TryPushImpl(value)) return false;
    Signal(not_empty_);
    return true;
  }

  /// Non-blocking pop; nullopt when empty.
  [[nodiscard]] std::optional<T> TryPop() {
    std::optional<T> value = TryPopImpl();
    if (value) Signal(not_full_);
    return value;
  }

  /// Blocks while full. False when the queue was closed (the value is dropped).
  [[nodiscard]] bool Push(T value) {
    while (true) {
      if (closed_.load(std::memory_order_acquire)) return false;
      if (TryPushImpl(value)) {
        Signal(not_empty_);
        return true;
      }
      Wait(not_full_, [&] { return !Full(); });
    }
  }

  /// Blocks while empty. nullopt once the queue is closed and drained.
  [[nodiscard]] std::optional<T> Pop() {
    while (true) {
      if (std::optional<T> value = TryPopImpl()) {
        Signal(not_full_);
        return value;
      }
      if (closed_.load(std::memory_order_acquire)) {
        // A push may have landed between the failed pop and seeing the flag: drain it.
        std::optional<T> last = TryPopImpl();
        if (last) Signal(not_full_);
        return last;
      }
      Wait(not_empty_, [&] { return !Empty(); });
    }
  }

  /// Wakes all waiters; later pushes fail, pops drain then fail.
  /// Values queued now, approximately (for reports: producers and consumers move on meanwhile).
  size_t ApproxSize() const {
    const size_t head = head_.load(std::memory_order_relaxed);
    const size_t tail = tail_.load(std::memory_order_relaxed);
    return tail > head ? tail - head : 0;
  }

  void Close() {
    closed_.store(true, std::memory_order_release);
    Wake(not_empty_);
    Wake(not_full_);
  }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

 private:
  struct alignas(kCacheLine) Cell {
    std::atomic<size_t> sequence{0};
    T value{};
  };
  /// An event counter threads sleep on, with the number of sleepers.
  struct alignas(kCacheLine) Event {
    std::atomic<uint32_t> count{0};
    std::atomic<uint32_t> waiters{0};
  };

  bool TryPushImpl(T& value) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    while (true) {
      Cell& cell = cells_[pos & mask_];
      // acquire: pairs with the consumer's release that freed this cell for lap pos.
      const size_t seq = cell.sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        // relaxed CAS: the cell's sequence (not tail_) publishes the data.
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          cell.value = std::move(value);
          // release: the consumer that acquires seq pos+1 sees the value.
          cell.sequence.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // the cell still holds last lap's value: full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  std::optional<T> TryPopImpl() {
    size_t pos = head_.load(std::memory_order_relaxed);
    while (true) {
      Cell& cell = cells_[pos & mask_];
      // acquire: pairs with the producer's release of seq pos+1.
      const size_t seq = cell.sequence.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos + 1);
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          std::optional<T> value(std::move(cell.value));
          // release: frees the cell for the producer of lap pos+capacity.
          cell.sequence.store(pos + mask_ + 1, std::memory_order_release);
          return value;
        }
      } else if (diff < 0) {
        return std::nullopt;  // not yet written: empty
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  bool Empty() const {
    const size_t pos = head_.load(std::memory_order_acquire);
    return cells_[pos & mask_].sequence.load(std::memory_order_acquire) != pos + 1;
  }
  bool Full() const {
    const size_t pos = tail_.load(std::memory_order_acquire);
    return cells_[pos & mask_].sequence.load(std::memory_order_acquire) != pos;
  }

  // The waiter registers (seq_cst), then re-checks its condition; the signaller changed the
  // queue, then bumps the counter and reads the waiter count (seq_cst). Either the waiter sees
  // the change, or the signaller sees the waiter; and a bump after the waiter's snapshot makes
  // atomic::wait return at once.
  template <typename Ready>
  void Wait(Event& event, Ready ready) {
    const uint32_t seen = event.count.load(std::memory_order_seq_cst);
    event.waiters.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the re-check below reads after it
    if (!ready() && !closed_.load(std::memory_order_seq_cst)) {
      event.count.wait(seen, std::memory_order_seq_cst);
    }
    event.waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
  static void Signal(Event& event) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (event.waiters.load(std::memory_order_seq_cst) != 0) {
      event.count.fetch_add(1, std::memory_order_seq_cst);
      event.count.notify_all();
    }
  }
  static void Wake(Event& event) {
    event.count.fetch_add(1, std::memory_order_seq_cst);
    event.count.notify_all();
  }

  alignas(kCacheLine) std::atomic<size_t> head_{0};
  alignas(kCacheLine) std::atomic<size_t> tail_{0};
  alignas(kCacheLine) std::atomic<bool> closed_{false};
  size_t mask_ = 0;
  std::unique_ptr<Cell[]> cells_;
  Event not_empty_;
  Event not_full_;
};

}  // namespace ringloader
