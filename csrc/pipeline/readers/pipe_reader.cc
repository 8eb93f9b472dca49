// kPipe: a member of a `pipe:COMMAND` stream (io/stream_cache.h). A command's output can only be
// read forward, so its members are read here, on the reader thread, in the stream's order
// (synchronously: the stream is sequential, not positional); at an epoch's start the stream
// cache is told which members the epoch will request, so those passed on the way are kept. One
// epoch at a time owns the streams: no epoch is read ahead beside it, and its end (or cancel)
// kills and reaps the commands.

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "io/child_process.h"
#include "io/stream_cache.h"
#include "pipeline/readers/sample_reader.h"

namespace ringloader {
namespace {

class PipeReader final : public SampleReader {
 public:
  explicit PipeReader(size_t max_member_bytes)
      : max_member_bytes_(max_member_bytes), streams_(std::make_unique<StreamCache>(max_member_bytes)) {}

  const char* name() const override { return "pipe"; }

  std::optional<absl::Status> Read(const Sample& sample, ByteBuffer* buffer, uint64_t tag,
                                   const ReadContext& ctx) const override {
    if (ctx.waiting != nullptr) ctx.waiting->fetch_add(1, std::memory_order_relaxed);
    absl::Status fetched =
        streams_->Fetch(sample.path, sample.offset, sample.length, buffer, ctx.cancel, sample.tar_member);
    if (ctx.waiting != nullptr) ctx.waiting->fetch_sub(1, std::memory_order_relaxed);
    return fetched;
  }

  // Substitutes and single samples come out of the epoch's order: they must not move its streams.
  absl::Status ReadAside(const Sample& sample, ByteBuffer* buffer, const std::atomic<bool>* cancel) const override {
    return streams_->FetchAside(sample.path, sample.offset, sample.length, buffer, cancel, sample.tar_member);
  }

  absl::Status CheckMoreFiles(const Sample& sample, size_t index) const override {
    return absl::InvalidArgumentError(absl::StrCat(
        "sample ", index, " (", sample.path, ") is a member of a pipe: stream and has several files; a "
        "several-file sample reads files or memory"));
  }

  bool AllowsReadAhead() const override { return false; }

  // The members of pipe: streams this epoch will request (from where it starts), so readers keep
  // those they pass on the way to another.
  void BeginEpoch(const SampleStore& samples, absl::Span<const int64_t> order) override {
    std::map<std::string, std::vector<StreamCache::Range>> wanted;
    Sample scratch;
    for (const int64_t index : order) {
      const Sample& s = samples.Get(static_cast<size_t>(index), &scratch);
      if (s.source == SourceKind::kPipe && s.error.empty()) {
        wanted[s.path].push_back({s.offset, s.length, s.tar_member, s.stream_end});
      }
    }
    streams_->StartEpoch(wanted);
  }

  void EndEpoch() override { streams_->Reset(); }

  void AddStats(LoaderStats* stats) const override {
    stats->bytes_read += streams_->bytes_read();
    stats->stream_restarts = streams_->restarts();
  }

  // The commands are the parent's children: killing them from here would break its epoch, and
  // their mutexes may have been held at the fork. The child gets its own cache, so the loader
  // stays usable there (StartEpoch, Stats, DecodeSample).
  void AfterFork() override {
    (void)streams_.release();
    streams_ = std::make_unique<StreamCache>(max_member_bytes_);
  }

 private:
  const size_t max_member_bytes_;
  std::unique_ptr<StreamCache> streams_;
};

}  // namespace

std::unique_ptr<SampleReader> MakePipeReader(size_t max_member_bytes) {
  return std::make_unique<PipeReader>(max_member_bytes);
}

absl::Status CheckPipeSample(const Sample& sample, size_t index) {
  if (sample.source != SourceKind::kPipe) return absl::OkStatus();
  return CheckPipePath(sample.path, absl::StrCat("sample ", index));
}

}  // namespace ringloader
