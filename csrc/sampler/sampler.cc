#include "sampler/sampler.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "transform/random.h"

namespace ringloader {

int64_t ShardSize(const SamplerOptions& options) {
  const int64_t world = std::max(options.world_size, 1);
  return (options.dataset_size + world - 1) / world;
}

int64_t BatchesPerEpoch(const SamplerOptions& options) {
  const int64_t per_rank = ShardSize(options);
  return per_rank / options.batch_size +
         ((!options.drop_last && per_rank % options.batch_size != 0) ? 1 : 0);
}

std::vector<int64_t> ShardIndices(const SamplerOptions& options, int64_t epoch) {
  const int64_t n = options.dataset_size;
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (options.shuffle && n > 1) {
    // Fisher-Yates from a generator of (seed, epoch): every rank draws the same permutation.
    SampleRng rng(Mix64(Mix64(options.seed) ^ static_cast<uint64_t>(epoch)));
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = rng.RandInt(0, i + 1);
      std::swap(order[i], order[j]);
    }
  }
  const int64_t world = options.world_size;
  if (world <= 1 || n == 0) return order;
  const int64_t per_rank = ShardSize(options);
  const int64_t total = per_rank * world;
  for (int64_t i = n; i < total; ++i) order.push_back(order[i - n]);  // pad from the head
  std::vector<int64_t> shard;
  shard.reserve(static_cast<size_t>(per_rank));
  for (int64_t i = options.rank; i < total; i += world) shard.push_back(order[i]);
  return shard;
}

EpochOrder MakeBatches(std::vector<int64_t> indices, int batch_size, bool drop_last) {
  EpochOrder order;
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t full = n / batch_size;
  const int64_t batches = full + ((!drop_last && n % batch_size != 0) ? 1 : 0);
  order.offsets.reserve(static_cast<size_t>(batches + 1));
  for (int64_t b = 0; b <= batches; ++b) order.offsets.push_back(std::min(n, b * batch_size));
  indices.resize(static_cast<size_t>(order.offsets.back()));
  order.indices = std::move(indices);
  return order;
}

EpochOrder MakeEpochOrder(const SamplerOptions& options, int64_t epoch) {
  return MakeBatches(ShardIndices(options, epoch), options.batch_size, options.drop_last);
}

}  // namespace ringloader
