#include "sampler/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

namespace ringloader {
namespace {

TEST(SamplerTest, SequentialBatches) {
  SamplerOptions o{.dataset_size = 10, .batch_size = 4};
  EpochOrder order = MakeEpochOrder(o, 0);
  EXPECT_EQ(order.num_batches(), 3);
  EXPECT_EQ(order.offsets, (std::vector<int64_t>{0, 4, 8, 10}));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(order.indices[i], i);
  o.drop_last = true;
  order = MakeEpochOrder(o, 0);
  EXPECT_EQ(order.num_batches(), 2);
  EXPECT_EQ(order.indices.size(), 8u);
}

TEST(SamplerTest, ShuffleIsAPermutationDeterministicPerSeedAndEpoch) {
  SamplerOptions o{.dataset_size = 1000, .batch_size = 7, .shuffle = true, .seed = 42};
  auto a = ShardIndices(o, 3), b = ShardIndices(o, 3), c = ShardIndices(o, 4);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  o.seed = 43;
  EXPECT_NE(ShardIndices(o, 3), a);
}

// Like torch's DistributedSampler: equal shard sizes, padding from the head, every index covered.
TEST(SamplerTest, ShardsCoverDatasetWithPadding) {
  for (int world : {2, 3, 4}) {
    for (int64_t n : {1, 10, 11, 97}) {
      std::map<int64_t, int> count;
      size_t shard_size = 0;
      for (int rank = 0; rank < world; ++rank) {
        SamplerOptions o{.dataset_size = n, .batch_size = 4, .shuffle = true, .seed = 7,
                         .rank = rank, .world_size = world};
        auto shard = ShardIndices(o, 1);
        if (rank == 0) shard_size = shard.size();
        EXPECT_EQ(shard.size(), shard_size) << "every rank gets the same count";
        for (int64_t i : shard) ++count[i];
      }
      EXPECT_EQ(static_cast<int64_t>(count.size()), n);
      int total = 0;
      for (auto& [index, c] : count) total += c;
      EXPECT_EQ(total, static_cast<int>(shard_size * world));
      EXPECT_LT(total - n, world) << "padding is less than one sample per rank";
    }
  }
}

TEST(SamplerTest, UnshuffledShardsInterleaveLikeTorch) {
  SamplerOptions o{.dataset_size = 10, .batch_size = 2, .rank = 1, .world_size = 4};
  // torch: indices 0..9 padded with 0,1 to 12, rank 1 takes 1,5,9
  EXPECT_EQ(ShardIndices(o, 0), (std::vector<int64_t>{1, 5, 9}));
  o.rank = 3;
  EXPECT_EQ(ShardIndices(o, 0), (std::vector<int64_t>{3, 7, 1}));
}

}  // namespace
}  // namespace ringloader

namespace ringloader {
namespace {

// The count without the order must agree with the order itself.
TEST(SamplerTest, BatchesPerEpochMatchesTheBuiltOrder) {
  for (int64_t n : {1, 7, 10, 97}) {
    for (int world : {1, 2, 3}) {
      for (bool drop_last : {false, true}) {
        SamplerOptions o{.dataset_size = n, .batch_size = 4, .drop_last = drop_last, .rank = world - 1,
                         .world_size = world};
        EXPECT_EQ(BatchesPerEpoch(o), MakeEpochOrder(o, 0).num_batches())
            << n << " " << world << " " << drop_last;
      }
    }
  }
}

}  // namespace
}  // namespace ringloader
