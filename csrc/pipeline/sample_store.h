#pragma once
// The loader's samples (Loader::Impl, EpochContext): a Sample each (Loader::Create from a vector),
// or the columns of whole files a caller keeps (SampleColumns), read in place. A Sample costs
// ~150 bytes plus its path's heap block; the columns cost the loader nothing a sample (a
// Python ImageFolder's path arena, shared), which is what keeps an ImageNet-sized loader small.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "ringloader/ringloader.h"
#include "ringloader/types.h"

namespace ringloader {

class SampleStore {
 public:
  explicit SampleStore(std::vector<Sample> samples)
      : samples_(std::move(samples)), size_(samples_.size()) {}
  // The columns must have been checked (Loader::CreateFromColumns): ends non-decreasing, within the arena.
  explicit SampleStore(SampleColumns columns)
      : columns_(std::move(columns)), size_(columns_.size), by_columns_(true) {}

  size_t size() const { return size_; }
  // True when the samples are columns: every sample a whole file (kFile), no other field set.
  bool by_columns() const { return by_columns_; }
  // The Samples (empty when by_columns()).
  const std::vector<Sample>& samples() const { return samples_; }

  int64_t label(size_t i) const { return by_columns_ ? columns_.labels[i] : samples_[i].label; }

  // Sample i: a reference into the Samples, or `*scratch` filled from the columns (its path and
  // label; `scratch` must otherwise be a default Sample). Valid while `scratch` is unchanged.
  const Sample& Get(size_t i, Sample* scratch) const {
    if (!by_columns_) return samples_[i];
    const int64_t start = i == 0 ? 0 : columns_.ends[i - 1];
    scratch->path.assign(columns_.paths + start, static_cast<size_t>(columns_.ends[i] - start));
    scratch->label = columns_.labels[i];
    return *scratch;
  }

 private:
  std::vector<Sample> samples_;
  SampleColumns columns_;
  size_t size_ = 0;
  bool by_columns_ = false;
};

}  // namespace ringloader
