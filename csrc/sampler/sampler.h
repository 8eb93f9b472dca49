#pragma once
/// The built-in sampler: epoch order, seeded shuffle, rank/world sharding and batching.
/// Knows nothing of files or threads.

#include <cstdint>
#include <vector>

namespace ringloader {

/// An epoch's order for one rank: batch b holds indices[offsets[b] .. offsets[b+1]).
struct EpochOrder {
  std::vector<int64_t> indices;
  std::vector<int64_t> offsets;  ///< num_batches + 1 entries, offsets[0] == 0
  int64_t num_batches() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

/// How to sample.
struct SamplerOptions {
  int64_t dataset_size = 0;
  int batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;  ///< drop a short last batch
  uint64_t seed = 0;
  int rank = 0;
  int world_size = 1;
};

/// The indices this rank sees in `epoch`, as torch's DistributedSampler lays them out: the
/// (optionally shuffled) order padded by repeating its head to a multiple of world_size, then
/// every world_size-th element starting at rank. With world_size 1 this is the plain order.
std::vector<int64_t> ShardIndices(const SamplerOptions& options, int64_t epoch);

/// Samples each rank sees per epoch: ceil(dataset_size / world_size) (DistributedSampler padding).
int64_t ShardSize(const SamplerOptions& options);

/// Batches per epoch for one rank, without building the order.
int64_t BatchesPerEpoch(const SamplerOptions& options);

/// Cuts `indices` into batches of batch_size (the last one short unless drop_last).
EpochOrder MakeBatches(std::vector<int64_t> indices, int batch_size, bool drop_last);

/// ShardIndices + MakeBatches.
EpochOrder MakeEpochOrder(const SamplerOptions& options, int64_t epoch);

}  // namespace ringloader
