#pragma once
/// A memo of the JPEG files whose scan a strict decode has read to its end with a clean verdict,
/// by content fingerprint.
///
/// A strict decode reads the scan past the crop to end-of-image so that a file's verdict never
/// depends on its crop; for a training crop that tail is 7-9% of the sample's decode time, all of
/// it entropy decoding that a crop never shows. The verdict is a function of the file's bytes
/// alone, so once the same bytes have been read to the end cleanly, reading their tail again
/// can only repeat that verdict: a later decode of the same bytes stops after its crop. The
/// first decode of every file still reads to the end, and bytes that differ in any way (a
/// rewritten file) have another fingerprint, so nothing is ever accepted on trust.
///
/// Lock-free (an open-addressed table of atomics): decode threads never wait on each other, and
/// a process that forks while a thread is inside it inherits no held lock. Constant-initialised,
/// so the process-wide table costs address space only until entries land in it. When a probe
/// run is full the file is simply not remembered (it is read to the end each time, as without
/// the memo).

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace ringloader::decode_internal {

/// 64-bit content fingerprint of `data[0, size)`: never 0 (the table's empty mark).
uint64_t ScanFingerprint(const uint8_t* data, size_t size);

template <size_t kSlots>
class CleanScans {
  static_assert(kSlots > 0 && (kSlots & (kSlots - 1)) == 0, "kSlots must be a power of two");

 public:
  constexpr CleanScans() = default;
  CleanScans(const CleanScans&) = delete;
  CleanScans& operator=(const CleanScans&) = delete;

  /// Whether `fingerprint` was added.
  bool Contains(uint64_t fingerprint) const {
    for (size_t i = 0; i < kProbes; ++i) {
      const uint64_t v = slots_[(fingerprint + i) & (kSlots - 1)].load(std::memory_order_relaxed);
      if (v == fingerprint) return true;
      if (v == 0) return false;
    }
    return false;
  }

  /// Remembers `fingerprint`; false when its probe run is full (then it is not remembered).
  bool Add(uint64_t fingerprint) {
    for (size_t i = 0; i < kProbes; ++i) {
      std::atomic<uint64_t>& slot = slots_[(fingerprint + i) & (kSlots - 1)];
      uint64_t v = slot.load(std::memory_order_relaxed);
      if (v == 0 && slot.compare_exchange_strong(v, fingerprint, std::memory_order_relaxed)) {
        return true;
      }
      if (v == fingerprint) return true;  // already there, or another thread just added it
    }
    return false;
  }

 private:
  static constexpr size_t kProbes = kSlots < 16 ? kSlots : 16;
  std::atomic<uint64_t> slots_[kSlots] = {};
};

/// The process-wide memo the JPEG decoder consults in strict mode: 2^20 fingerprints (8 MiB of
/// address space; an ImageNet-sized set of 1.28 M files fills most of it, and the files that do
/// not fit are read to the end as before).
using ProcessCleanScans = CleanScans<size_t{1} << 20>;
ProcessCleanScans& ProcessWideCleanScans();

}  // namespace ringloader::decode_internal
