#include <unistd.h>

#include <cerrno>
#include <vector>

#include "io/reader.h"

namespace ringloader {
namespace {

/// Synchronous reads: each Submit calls pread(2) once (a short read is reported as such and the
/// FileFetcher asks for the rest, exactly as with io_uring).
class PreadReader final : public Reader {
 public:
  explicit PreadReader(int depth) : depth_(depth) { completed_.reserve(depth); }
  const char* name() const override { return "pread"; }
  int depth() const override { return depth_; }

  absl::Status Submit(ReadOp* op) override {
    const ssize_t n = pread(op->fd, op->dst, op->length, static_cast<off_t>(op->offset));
    op->result = n < 0 ? -errno : n;
    completed_.push_back(op);
    return absl::OkStatus();
  }
  absl::Status Flush() override { return absl::OkStatus(); }
  absl::StatusOr<int> Reap(std::vector<ReadOp*>* done, bool /*wait*/) override {
    const int n = static_cast<int>(completed_.size());
    done->insert(done->end(), completed_.begin(), completed_.end());
    completed_.clear();
    return n;
  }

 private:
  int depth_;
  std::vector<ReadOp*> completed_;
};

}  // namespace

std::unique_ptr<Reader> MakePreadReader(int depth) { return std::make_unique<PreadReader>(depth); }

}  // namespace ringloader
