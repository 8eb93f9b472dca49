#pragma once
/// Per-sample random numbers. Every random augmentation draw comes from a generator seeded by
/// (seed, epoch, key), never from a shared one, so results do not depend on thread count. The
/// loader's key combines the sample's index and its position in the epoch (RowKey).

#include <cmath>
#include <cstdint>

namespace ringloader {

/// splitmix64 finaliser: a bijective 64-bit mix with good avalanche.
inline uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// The seed key of the row at `position` of an epoch's order that holds dataset index `index`:
/// the index itself when the row sits at its own position (a sequential epoch), otherwise the
/// index with the pair's difference in the high bits, so distinct (index, position) pairs get
/// distinct keys (below 2^32 samples). The Python package asks the extension for it.
inline uint64_t RowKey(int64_t index, int64_t position) {
  const auto i = static_cast<uint64_t>(index);
  return i ^ ((static_cast<uint64_t>(position) ^ i) << 32);
}

/// Seed of the sample with key `index` (an index, or RowKey(index, position)) in `epoch` for a
/// loader seeded with `seed`.
inline uint64_t SampleSeed(uint64_t seed, uint64_t epoch, uint64_t index) {
  return Mix64(Mix64(Mix64(seed) ^ epoch) ^ index);
}

/// xoshiro256** seeded through splitmix64. Small, fast, good enough for augmentation.
class SampleRng {
 public:
  explicit SampleRng(uint64_t seed) {
    uint64_t s = seed;
    for (auto& word : state_) {
      s += 0x9e3779b97f4a7c15ULL;
      word = Mix64(s);
    }
  }
  /// Next 64 random bits.
  uint64_t Next() {
    const uint64_t result = Rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = Rotl(state_[3], 45);
    return result;
  }
  /// Uniform double in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  /// Uniform double in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  /// Standard normal draw (Box-Muller), as torch's normal_() / random.gauss in distribution.
  double Normal() {
    const double u1 = 1.0 - Uniform();  // (0, 1]: log is finite
    const double u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  /// Uniform integer in [lo, hi) (hi > lo), as torch.randint(lo, hi).
  int64_t RandInt(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo);
    return lo + static_cast<int64_t>(Next() % span);  // span is tiny: bias ~ span / 2^64
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

}  // namespace ringloader
