// kFile: a whole file, or a byte range of one (a tar shard's member), read on the reader
// thread's FileFetcher (io_uring, or the pread fallback), many reads in flight. A remote shard
// lands in the node-local cache as a file: while it is still downloading (io/pending_downloads.h)
// the sample is not Ready, and FileFetcher::Start waits for it; a shard read by ranges
// (io/range_reads.h) is opened through its sparse copy by the fetcher, so nothing here knows.

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status_util.h"
#include "io/pending_downloads.h"
#include "io/reader.h"
#include "pipeline/readers/sample_reader.h"

namespace ringloader {
namespace {

class FileReader final : public SampleReader {
 public:
  explicit FileReader(size_t max_file_bytes) : max_file_bytes_(max_file_bytes) {}

  const char* name() const override { return "file"; }

  bool Ready(const Sample& sample) const override { return !IsPendingDownload(sample.path); }

  std::optional<absl::Status> Read(const Sample& sample, ByteBuffer* buffer, uint64_t tag,
                                   const ReadContext& ctx) const override {
    ctx.fetcher->Start(sample.path, buffer, tag, sample.offset, sample.length);
    return std::nullopt;
  }

  absl::Status ReadAside(const Sample& sample, ByteBuffer* buffer, const std::atomic<bool>* cancel) const override {
    FileFetcher fetcher(MakePreadReader(1), max_file_bytes_);
    fetcher.Start(sample.path, buffer, 0, sample.offset, sample.length);
    RL_RETURN_IF_ERROR(fetcher.Flush());
    std::vector<FetchedFile> done;
    while (done.empty()) RL_RETURN_IF_ERROR(fetcher.Poll(&done, /*wait=*/true));
    return done.front().status;
  }

  const std::string* LocalFile(const Sample& sample) const override { return &sample.path; }

 private:
  const size_t max_file_bytes_;
};

}  // namespace

std::unique_ptr<SampleReader> MakeFileReader(size_t max_file_bytes) {
  return std::make_unique<FileReader>(max_file_bytes);
}

}  // namespace ringloader
