#pragma once
/// A memo of the JPEG files whose scan a strict decode has read to its end with a clean verdict,
/// by keyed content fingerprint.
///
/// A strict decode reads the scan past the crop to end-of-image so that a file's verdict never
/// depends on its crop; for a training crop that tail is 5-9% of the sample's decode time, all of
/// it entropy decoding that a crop never shows. The verdict is a function of the file's bytes
/// (and of the libjpeg build) alone, so once the same bytes have been read to the end cleanly,
/// reading their tail again can only repeat that verdict: a later decode of the same bytes stops
/// after its crop. The first decode of every file still reads to the end, and bytes that differ
/// in any way (a rewritten file) have another fingerprint, so nothing is ever accepted on trust.
///
/// The table lives in a file mapped MAP_SHARED (by default
/// `$XDG_CACHE_HOME/ringloader/clean-scans-v1-<libjpeg-turbo version>.bin`), so every process of
/// a node (DDP ranks, workers, the next run) shares what any of them read clean. Fingerprints are
/// SipHash-1-3 under a random 128-bit key made when the file is created and kept in its header:
/// without reading that file nobody can craft damaged bytes whose fingerprint matches a clean
/// file's entry. Anything wrong with the file (missing HOME, read-only file system, a header or
/// size that does not match) falls back to a table of the same shape in this process's memory;
/// `RINGLOADER_SCAN_MEMO=off|process|PATH` chooses explicitly.
///
/// Lock-free (an open-addressed table of 64-bit slots written by compare-and-swap through
/// std::atomic_ref, lock-free and address-free, so valid across processes): decode threads and
/// processes never wait on each other, and a process that forks inherits no held lock. When a
/// probe run is full the file is simply not remembered (it is read to the end each time, as
/// without the memo).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace ringloader::decode_internal {

/// The 128-bit key fingerprints are computed under.
struct ScanKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

/// SipHash-c-d of `data[0, size)` under `key` (the reference algorithm; c compression rounds
/// per 8-byte word, d finalisation rounds).
template <int kCompressionRounds, int kFinalRounds>
uint64_t SipHash(const ScanKey& key, const uint8_t* data, size_t size);

/// Keyed 64-bit content fingerprints, never 0 (the table's empty mark). The bytes go through
/// NH universal hashing (UMAC's: a multiply-add per 8 bytes, two passes with the key shifted, in
/// 1 KiB blocks), and the blocks' digests and the length through SipHash-1-3: SipHash over all
/// of a file's bytes cost 40-50 us of a 1.3 ms train decode, NH a fraction of that. Both keys
/// derive from `key`: without it, two byte strings chosen to collide do so with chance
/// probability (about 2^-62 a block pair for NH, then a pseudo-random function).
class ScanHasher {
 public:
  explicit ScanHasher(const ScanKey& key);

  uint64_t operator()(const uint8_t* data, size_t size) const;

  static constexpr size_t kBlockWords = 256;  // 1 KiB of 32-bit words
  static constexpr size_t kShift = 4;         // the second pass's key starts 4 words on

 private:
  ScanKey final_key_;
  uint32_t nh_key_[kBlockWords + kShift];
};

/// Open addressing over `num_slots` (a power of two) 64-bit slots it does not own: a run of up
/// to 16 slots from fingerprint mod num_slots, 0 marking an empty slot.
class CleanScanTable {
 public:
  /// `entries` counts the slots filled (kept next to the slots, so shared with them).
  CleanScanTable(uint64_t* slots, size_t num_slots, uint64_t* entries, const ScanKey& key)
      : slots_(slots), mask_(num_slots - 1), probes_(num_slots < 16 ? num_slots : 16),
        entries_(entries), hasher_(key) {}
  CleanScanTable(const CleanScanTable&) = delete;
  CleanScanTable& operator=(const CleanScanTable&) = delete;

  /// The fingerprint of `data[0, size)` under this table's key.
  uint64_t Fingerprint(const uint8_t* data, size_t size) const {
    return hasher_(data, size);
  }

  /// Whether `fingerprint` was added.
  bool Contains(uint64_t fingerprint) const {
    for (size_t i = 0; i < probes_; ++i) {
      const uint64_t v = Slot(fingerprint + i).load(std::memory_order_relaxed);
      if (v == fingerprint) return true;
      if (v == 0) return false;
    }
    return false;
  }

  /// Remembers `fingerprint`; false when its probe run is full (then it is not remembered).
  bool Add(uint64_t fingerprint) {
    for (size_t i = 0; i < probes_; ++i) {
      std::atomic_ref<uint64_t> slot = Slot(fingerprint + i);
      uint64_t v = slot.load(std::memory_order_relaxed);
      if (v == 0 && slot.compare_exchange_strong(v, fingerprint, std::memory_order_relaxed)) {
        std::atomic_ref<uint64_t>(*entries_).fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (v == fingerprint) return true;  // already there, or another thread just added it
    }
    return false;
  }

  size_t slots() const { return mask_ + 1; }
  /// Slots filled, by every process sharing the table.
  int64_t entries() const {
    return static_cast<int64_t>(
        std::atomic_ref<uint64_t>(*entries_).load(std::memory_order_relaxed));
  }

 private:
  static_assert(std::atomic_ref<uint64_t>::is_always_lock_free,
                "the shared table needs lock-free (address-free) 64-bit atomics");

  std::atomic_ref<uint64_t> Slot(uint64_t i) const {
    return std::atomic_ref<uint64_t>(slots_[i & mask_]);
  }

  uint64_t* slots_;
  size_t mask_;
  size_t probes_;
  uint64_t* entries_;
  ScanHasher hasher_;
};

/// A table with its own `kSlots` slots (tests); key 0.
template <size_t kSlots>
class CleanScans : public CleanScanTable {
  static_assert(kSlots > 0 && (kSlots & (kSlots - 1)) == 0, "kSlots must be a power of two");

 public:
  CleanScans() : CleanScanTable(storage_, kSlots, &entries_, ScanKey{}) {}

 private:
  alignas(std::atomic_ref<uint64_t>::required_alignment) uint64_t storage_[kSlots] = {};
  alignas(std::atomic_ref<uint64_t>::required_alignment) uint64_t entries_ = 0;
};

/// Slots in a memo this library creates: an ImageNet-sized set (1.28 M files) fills under a
/// third of them, so probe runs stay short. 32 MiB of slots.
inline constexpr size_t kCleanScanSlots = size_t{1} << 22;

/// A table and the memory it lives in: a shared file mapping, or anonymous memory of this
/// process. Unmapped on destruction.
class CleanScanMemo {
 public:
  ~CleanScanMemo();
  CleanScanMemo(const CleanScanMemo&) = delete;
  CleanScanMemo& operator=(const CleanScanMemo&) = delete;

  /// Maps the memo file at `path`, creating it (with `slots_if_created` slots, a power of two,
  /// and a new random key) when it does not exist. Errors name the file and what is wrong.
  static absl::StatusOr<std::unique_ptr<CleanScanMemo>> OpenFile(
      const std::string& path, size_t slots_if_created = kCleanScanSlots);
  /// A table in this process's memory under a random key (pages are touched as they fill).
  static absl::StatusOr<std::unique_ptr<CleanScanMemo>> InProcess(
      size_t slots = kCleanScanSlots);

  CleanScanTable& table() { return *table_; }
  const CleanScanTable& table() const { return *table_; }
  /// The memo file ("" for an in-process table).
  const std::string& path() const { return path_; }

 private:
  CleanScanMemo() = default;

  void* base_ = nullptr;
  size_t bytes_ = 0;
  std::string path_;
  std::unique_ptr<CleanScanTable> table_;
};

/// The memo file used when RINGLOADER_SCAN_MEMO is unset or empty:
/// `$XDG_CACHE_HOME/ringloader/clean-scans-v1-<libjpeg-turbo version>.bin`, or under
/// `$HOME/.cache` when XDG_CACHE_HOME is unset or relative; an error when neither is usable.
absl::StatusOr<std::string> DefaultCleanScanPath();

/// The memo strict decodes use and how it was chosen.
struct CleanScanChoice {
  std::unique_ptr<CleanScanMemo> memo;  ///< null: no memo (every scan read to its end)
  std::string kind;                     ///< "file", "process" or "off"
  std::string note;                     ///< why the file was not used, when it was not
};

/// Chooses from a RINGLOADER_SCAN_MEMO value: "off", "process", a file path, or "" for
/// DefaultCleanScanPath(). A file that cannot be used falls back to an in-process table.
CleanScanChoice ChooseCleanScanMemo(absl::string_view setting,
                                    size_t slots_if_created = kCleanScanSlots);

/// The process-wide memo, chosen from RINGLOADER_SCAN_MEMO on first use (lock-free: racing
/// first users each choose and one result is kept); null when the memo is off.
CleanScanTable* ProcessWideCleanScans();

/// What LoaderStats reports of the process-wide memo ("unused" before the first strict JPEG
/// decode chose it: describing it creates no file).
struct CleanScanInfo {
  std::string memo;  ///< "file PATH", "process", "off" or "unused"
  std::string note;
  int64_t entries = 0;
  int64_t slots = 0;
};
CleanScanInfo DescribeProcessWideCleanScans();

}  // namespace ringloader::decode_internal
