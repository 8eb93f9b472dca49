#include "decode/clean_scans.h"

#include <cstdint>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace ringloader::decode_internal {
namespace {

TEST(CleanScans, RemembersWhatWasAddedAndNothingElse) {
  CleanScans<64> memo;
  EXPECT_FALSE(memo.Contains(5));
  EXPECT_TRUE(memo.Add(5));
  EXPECT_TRUE(memo.Add(5));  // again: no second slot
  EXPECT_TRUE(memo.Contains(5));
  EXPECT_FALSE(memo.Contains(5 + 64));  // same first slot, never added
  EXPECT_TRUE(memo.Add(5 + 64));
  EXPECT_TRUE(memo.Contains(5 + 64));
  EXPECT_TRUE(memo.Contains(5));
}

TEST(CleanScans, AFullProbeRunForgetsInsteadOfEvicting) {
  CleanScans<8> memo;  // probe runs of 8: every slot
  for (uint64_t i = 1; i <= 8; ++i) ASSERT_TRUE(memo.Add(i * 8));  // all start at slot 0
  EXPECT_FALSE(memo.Add(9 * 8));
  EXPECT_FALSE(memo.Contains(9 * 8));
  for (uint64_t i = 1; i <= 8; ++i) EXPECT_TRUE(memo.Contains(i * 8));
}

TEST(CleanScans, ConcurrentAddsAreAllKept) {
  static CleanScans<4096> memo;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (uint64_t i = 1; i <= 500; ++i) memo.Add(i * 4 + t);
    });
  }
  for (std::thread& th : threads) th.join();
  for (uint64_t v = 4; v < 4 * 501; ++v) EXPECT_TRUE(memo.Contains(v)) << v;
}

TEST(CleanScans, FingerprintsFollowTheBytes) {
  std::vector<uint8_t> a(1000, 7);
  const uint64_t fa = ScanFingerprint(a.data(), a.size());
  EXPECT_NE(fa, 0u);
  EXPECT_EQ(fa, ScanFingerprint(a.data(), a.size()));
  a[999] ^= 1;
  EXPECT_NE(fa, ScanFingerprint(a.data(), a.size()));
  EXPECT_NE(ScanFingerprint(a.data(), 999), ScanFingerprint(a.data(), 1000));
  // A file-sized buffer: a one-bit change anywhere changes it (every byte is hashed, none
  // sampled).
  std::vector<uint8_t> big(64 << 10);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const uint64_t fb = ScanFingerprint(big.data(), big.size());
  for (size_t i = 0; i < big.size(); i += 61) {
    big[i] ^= 0x10;
    EXPECT_NE(ScanFingerprint(big.data(), big.size()), fb) << i;
    big[i] ^= 0x10;
  }
}

}  // namespace
}  // namespace ringloader::decode_internal
