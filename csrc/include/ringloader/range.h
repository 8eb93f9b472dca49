#pragma once
/// Range-for over one epoch, for code that prefers exceptions to absl::StatusOr:
///
///   for (ringloader::Batch& batch : ringloader::EpochBatches(*loader, epoch)) {
///     train_step(batch);             // the slot is recycled when `batch` goes out of scope
///   }
///
/// Errors are thrown as ringloader::LoaderError, which carries the absl::Status Next() returned
/// (for a bad sample, IsSampleError: a message naming index and path, and the sample payloads). After catching one, the loader is still usable: iterating the
/// same range again continues with the batch after the failed one, exactly as Next() would.

#include <cstddef>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "ringloader/ringloader.h"

namespace ringloader {

/// Thrown by EpochBatches: a failed StartEpoch or Next() (anything but the end of the epoch).
class LoaderError : public std::runtime_error {
 public:
  explicit LoaderError(absl::Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  /// The status Next() (or StartEpoch) returned.
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

/// A single-pass input range over the batches of an epoch; see EpochBatches.
class EpochRange {
 public:
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;

    Iterator() = default;
    Batch& operator*() const { return *range_->current_; }
    Batch* operator->() const { return &*range_->current_; }
    /// Releases the current batch first, then fetches the next (throws LoaderError).
    Iterator& operator++() {
      range_->Advance();
      return *this;
    }
    void operator++(int) { ++*this; }
    bool operator==(std::default_sentinel_t) const { return range_ == nullptr || !range_->current_; }

   private:
    friend class EpochRange;
    explicit Iterator(EpochRange* range) : range_(range) {}
    EpochRange* range_ = nullptr;
  };

  explicit EpochRange(Loader& loader) : loader_(&loader) {}
  EpochRange(const EpochRange&) = delete;
  EpochRange& operator=(const EpochRange&) = delete;

  /// Fetches the first (or, after a LoaderError, the next) batch.
  Iterator begin() {
    Advance();
    return Iterator(this);
  }
  std::default_sentinel_t end() const { return {}; }

 private:
  void Advance() {
    current_.reset();  // release the slot before asking for the next one
    absl::StatusOr<Batch> next = loader_->Next();
    if (IsEndOfEpoch(next.status())) return;
    if (!next.ok()) throw LoaderError(next.status());
    current_ = *std::move(next);
  }

  Loader* loader_;
  std::optional<Batch> current_;
};

/// Starts `epoch` with the loader's built-in sampler and returns its batches as a range.
/// Throws LoaderError when the epoch cannot start.
inline EpochRange EpochBatches(Loader& loader, int64_t epoch) {
  if (absl::Status s = loader.StartEpoch(epoch); !s.ok()) throw LoaderError(std::move(s));
  return EpochRange(loader);
}

}  // namespace ringloader
