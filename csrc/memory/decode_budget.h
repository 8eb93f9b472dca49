#pragma once
/// The loader's memory budget (`max_memory`) as one ledger shared by the batch slots and the
/// decoders' buffers (the decoded image, the resampler's intermediates, a progressive JPEG's
/// coefficients), so that a few very large images decoded at once cannot take the process past
/// its budget (or its cgroup's limit) where the slots alone never would.
///
/// Rules:
///  * Slots are charged when the pool allocates them (MakeBudgetedAllocator) and are never
///    refused: PlanSlots already sized them to fit the budget. A slot that does not fit beside
///    the grants in force waits for those decodes to end (no new grant is given meanwhile).
///  * A decode that needs at most `allowance` bytes is not charged: every decode thread may use
///    that much beside the budget (small images, streamed JPEG rows), so the common case costs
///    nothing. Each decoder also trims what it keeps between images to the allowance.
///  * A larger decode takes a grant for its whole need before it allocates, and gives it back
///    when it is done. Grants are served in arrival order; a request waits while the grants
///    ahead of it and those in force leave too little room beside the slots. A grant is held
///    only for one decode, which waits on nothing while it holds it, so every wait ends: one
///    image within the budget always fits once the decodes before it finished.
///  * A need larger than what the slots leave of the budget can never be met (slots stay
///    allocated for the loader's lifetime): ResourceExhausted at once, saying how many bytes
///    were needed and what to change. The caller names the sample.
///  * A variable-size output's buffer (AcquireOutputBuffer) comes back when the consumer drops
///    it and is kept for a later output (rendering into memory already mapped, instead of a
///    fresh buffer's page faults), charged as an output while it is kept: outputs in use and
///    kept together never exceed the most the outputs in use ever held at once, nor what
///    `total` leaves beside the slots and the decodes in force; kept buffers are freed (largest
///    first) when a new output needs their room. A later output takes the smallest kept buffer
///    of up to twice its size as it is; else, when it is 1 MiB or more, a larger one shrunk to
///    its size, or else the largest smaller one grown (OutputPages::Resize: only the added
///    pages are new).
///
/// So slots + charged decodes stay within `total`, and the loader's slot and decode memory
/// within `total + threads x allowance`. A fork()ed child counts nothing (the lock may have been
/// held at the fork; its loader is a new one).

#include <cstdint>
#include <functional>
#include <map>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "memory/slot_allocator.h"

namespace ringloader {

/// Bytes a decode thread may use without a grant (see above). Large enough for every streamed
/// JPEG row buffer and for whole images of a few megapixels.
inline constexpr uint64_t kDecodeAllowanceBytes = uint64_t{16} << 20;

/// A variable-size output's buffer. One of at least kOutputPagesMapped bytes is pages of its
/// own (mmap), so that a kept one serves an output of any size (Resize: shrunk in place, or
/// grown with mremap, which moves the pages already faulted in and faults in only the rest);
/// a smaller one is plain heap memory and cannot be resized. Move-only.
class OutputPages {
 public:
  OutputPages() = default;
  OutputPages(OutputPages&& other) noexcept { *this = std::move(other); }
  OutputPages& operator=(OutputPages&& other) noexcept;
  ~OutputPages() { Free(); }
  /// A buffer of `bytes` (at least 1), or ResourceExhausted naming its size.
  static absl::StatusOr<OutputPages> New(uint64_t bytes);
  /// Makes the buffer `bytes` long, its first min(old, new) bytes kept; false (unchanged) when
  /// it is not mapped or the system refuses.
  bool Resize(uint64_t bytes);
  uint8_t* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  bool resizable() const { return mapped_ != 0; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  void Free();
  uint8_t* data_ = nullptr;
  uint64_t bytes_ = 0;   // asked for
  uint64_t mapped_ = 0;  // length of the mapping (whole pages); 0: heap memory
};

/// From this size an output's buffer is mapped pages (resizable); below it, heap memory.
inline constexpr uint64_t kOutputPagesMapped = uint64_t{1} << 20;

class DecodeBudget {
 public:
  /// `total`: the loader's budget (max_memory) in bytes; `allowance`: what a decode may use
  /// uncharged.
  explicit DecodeBudget(uint64_t total, uint64_t allowance = kDecodeAllowanceBytes);
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  /// Bytes held for one decode; returned to the budget when destroyed (or Release()d). An
  /// output's grant from AcquireOutputBuffer also holds its buffer (data()), which goes back
  /// with it.
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& other) noexcept
        : budget_(other.budget_), bytes_(other.bytes_), held_(other.held_),
          buffer_(std::move(other.buffer_)) {
      other.budget_ = nullptr;
    }
    Grant& operator=(Grant&& other) noexcept;
    ~Grant() { Release(); }
    void Release();
    uint64_t bytes() const { return budget_ != nullptr ? bytes_ : 0; }
    /// AcquireOutputBuffer's buffer (null otherwise, and after Release()).
    uint8_t* data() const { return buffer_.data(); }

   private:
    friend class DecodeBudget;
    Grant(DecodeBudget* budget, uint64_t bytes, bool held = false,
          OutputPages buffer = OutputPages())
        : budget_(budget), bytes_(bytes), held_(held), buffer_(std::move(buffer)) {}
    DecodeBudget* budget_ = nullptr;
    uint64_t bytes_ = 0;
    bool held_ = false;  // an output's (AcquireOutput), not a decode's
    OutputPages buffer_;  // an output's buffer (AcquireOutputBuffer)
  };

  /// A grant for `bytes` (an empty one when bytes <= allowance), waiting for room as described
  /// above. ResourceExhausted when `bytes` can never fit; its message starts with `what` (the
  /// image: "PNG image 13000 x 13000").
  absl::StatusOr<Grant> Acquire(uint64_t bytes, absl::string_view what);

  /// A grant for a variable-size sample's output (LoaderOptions::View::variable): held until
  /// the consumer drops the sample, so always charged (no allowance), beside the slots and the
  /// decodes in force. Waits (checking `cancel` every few milliseconds: Cancelled once it is
  /// set) while the outputs the consumer still holds leave too little room, as the pipeline waits
  /// for a slot the consumer holds; ResourceExhausted at once when `bytes` can never fit beside
  /// the slots, its message starting with `what`. Slots never wait for outputs (their rows are
  /// the outputs' small records), nor do decodes (their grants would then wait on the consumer):
  /// outputs + decodes in force stay within what the slots leave, but a decode may take its grant
  /// while the consumer's outputs fill the budget, so the bound there is total + that decode.
  /// An output for which `due` says true (the batch the consumer takes next) never waits: the
  /// outputs of later batches, decoded ahead, may hold the room it needs and are freed only after
  /// it is delivered, so waiting there would wait forever. The budget then bounds what is decoded
  /// ahead; beyond it go the batch due and what the consumer keeps (as torch's would).
  absl::StatusOr<Grant> AcquireOutput(uint64_t bytes, absl::string_view what,
                                      const std::atomic<bool>* cancel,
                                      const std::function<bool()>& due = nullptr);

  /// AcquireOutput's grant with a buffer of at least `bytes` (data()), charged for the buffer's
  /// whole size: a kept one when one serves (see the rules above; it holds an earlier output's
  /// pixels), else a new one. Released, the buffer is kept for a later output or freed.
  absl::StatusOr<Grant> AcquireOutputBuffer(uint64_t bytes, absl::string_view what,
                                            const std::atomic<bool>* cancel,
                                            const std::function<bool()>& due = nullptr);

  /// The slot pool's allocations (waits while grants in force leave no room) and frees
  /// (MakeBudgetedAllocator).
  void AddSlotBytes(uint64_t bytes);
  void RemoveSlotBytes(uint64_t bytes);

  uint64_t total() const { return total_; }
  uint64_t allowance() const { return allowance_; }

  struct Counts {
    uint64_t slot_bytes = 0;      ///< held by batch slots now
    uint64_t decode_bytes = 0;    ///< held by decode grants now
    uint64_t peak_decode_bytes = 0;
    uint64_t peak_total_bytes = 0;  ///< slots + grants, at most
    int64_t grants = 0;           ///< charged decodes
    int64_t waits = 0;            ///< ... that had to wait for room
    int64_t refused = 0;          ///< needs that could not fit
    int64_t slot_waits = 0;       ///< slot allocations that waited for large decodes to end
    uint64_t output_bytes = 0;    ///< held by variable-size outputs now (AcquireOutput)
    uint64_t outputs_over_budget = 0;  ///< outputs of the batch due let in beyond the budget
    int64_t output_waits = 0;     ///< outputs that waited for room
    uint64_t peak_output_bytes = 0;  ///< the most output_bytes ever held at once
    uint64_t kept_bytes = 0;      ///< output buffers kept for reuse now
    int64_t outputs_reused = 0;   ///< outputs given a kept buffer
    int64_t outputs_new = 0;      ///< outputs given a new buffer (its pages faulted in afresh)
  };
  Counts counts() const;

 private:
  void Return(uint64_t bytes, bool held, OutputPages buffer);
  // What `total` leaves beside the slots (under mu_).
  uint64_t RoomBesideSlots() const { return total_ > counts_.slot_bytes ? total_ - counts_.slot_bytes : 0; }
  // AcquireOutput's loop; with `reuse`, a kept buffer that fits is taken into *reused (charged
  // for its size). Returns the bytes charged.
  absl::StatusOr<uint64_t> ChargeOutput(uint64_t bytes, absl::string_view what,
                                        const std::atomic<bool>* cancel,
                                        const std::function<bool()>& due,
                                        OutputPages* reused);
  // Frees kept buffers (largest first, into *freed, released by the caller outside the lock)
  // until `bytes` more fit beside what is held: max_memory's room and the peak of the outputs.
  void EvictKeptFor(uint64_t bytes, std::vector<OutputPages>* freed);

  const uint64_t total_;
  const uint64_t allowance_;
  const int owner_pid_;  // a fork()ed child's decodes are not counted: its lock may be the parent's
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::deque<uint64_t> queue_;  // tickets waiting, oldest first
  uint64_t next_ticket_ = 0;
  int slots_waiting_ = 0;
  Counts counts_;
  std::multimap<uint64_t, OutputPages> kept_;  // output buffers by size
};

/// `inner` with every allocation charged to `budget` as slot bytes (never refused).
std::shared_ptr<SlotAllocator> MakeBudgetedAllocator(std::shared_ptr<SlotAllocator> inner,
                                                     std::shared_ptr<DecodeBudget> budget);

}  // namespace ringloader
