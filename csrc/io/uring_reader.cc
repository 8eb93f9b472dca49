#include <liburing.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "io/reader.h"

namespace ringloader {
namespace {

std::atomic<int> g_forced_setup_errno{0};

/// Many reads in flight on one ring; submissions are batched until Flush.
class UringReader final : public Reader {
 public:
  UringReader() = default;
  ~UringReader() override {
    if (initialised_) io_uring_queue_exit(&ring_);
  }

  absl::Status Init(int depth) {
    int forced = g_forced_setup_errno.load(std::memory_order_relaxed);
    // RINGLOADER_URING_REFUSED=1 makes setup fail as Docker's default seccomp profile does, so a
    // whole test suite can run on the fallback path.
    if (forced == 0 && std::getenv("RINGLOADER_URING_REFUSED") != nullptr) forced = EPERM;
    const int rc = forced != 0 ? -forced : io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    if (rc < 0) {
      return absl::ErrnoToStatus(-rc, "io_uring_queue_init");
    }
    initialised_ = true;
    depth_ = depth;
    return absl::OkStatus();
  }

  const char* name() const override { return "io_uring"; }
  int depth() const override { return depth_; }

  absl::Status Submit(ReadOp* op) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      // Submission queue full: push what is queued to the kernel and try once more.
      absl::Status flushed = Flush();
      if (!flushed.ok()) return flushed;
      sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) return absl::ResourceExhaustedError("io_uring submission queue full");
    }
    io_uring_prep_read(sqe, op->fd, op->dst, static_cast<unsigned>(op->length), op->offset);
    io_uring_sqe_set_data(sqe, op);
    ++in_flight_;
    return absl::OkStatus();
  }

  absl::Status Flush() override {
    while (true) {
      const int rc = io_uring_submit(&ring_);
      if (rc >= 0) return absl::OkStatus();
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) continue;
      return absl::ErrnoToStatus(-rc, "io_uring_submit");
    }
  }

  absl::StatusOr<int> Reap(std::vector<ReadOp*>* done, bool wait) override {
    int count = 0;
    io_uring_cqe* cqe = nullptr;
    if (wait && in_flight_ > 0) {
      // Submit anything still queued before sleeping: waiting on reads the kernel never saw
      // would block forever.
      int rc;
      do {
        rc = io_uring_submit_and_wait(&ring_, 1);
      } while (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY);
      if (rc < 0) return absl::ErrnoToStatus(-rc, "io_uring_submit_and_wait");
    }
    unsigned head;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ReadOp* op = static_cast<ReadOp*>(io_uring_cqe_get_data(cqe));
      op->result = cqe->res;
      done->push_back(op);
      ++count;
    }
    io_uring_cq_advance(&ring_, static_cast<unsigned>(count));
    in_flight_ -= count;
    return count;
  }

 private:
  io_uring ring_{};
  bool initialised_ = false;
  int depth_ = 0;
  int in_flight_ = 0;
};

}  // namespace

void SetUringSetupFailureForTesting(int errno_value) {
  g_forced_setup_errno.store(errno_value, std::memory_order_relaxed);
}

absl::StatusOr<std::unique_ptr<Reader>> MakeUringReader(int depth) {
  auto reader = std::make_unique<UringReader>();
  absl::Status status = reader->Init(depth);
  if (!status.ok()) return status;
  return std::unique_ptr<Reader>(std::move(reader));
}

}  // namespace ringloader
