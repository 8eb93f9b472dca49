#include "video/clip_batch.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "transform/image_transform.h"  // RandomResizedCropParams: the images' draw
#include "transform/random.h"
#include "transform/tensor_resize.h"

namespace ringloader::video {

namespace {

using Op = PlannedOp;

// v2's _compute_resized_output_size for a Resize step on frames of w x h.
void ResizedSize(const VideoStep& s, int w, int h, int* out_w, int* out_h) {
  if (s.width > 0) {
    *out_w = s.width, *out_h = s.height;
    return;
  }
  const int short_side = std::min(w, h), long_side = std::max(w, h);
  int new_short = s.height;
  int new_long = static_cast<int>(static_cast<double>(s.height) * long_side / short_side);
  if (short_side == s.height) new_long = long_side;
  if (s.max_size > 0 && new_long > s.max_size) {
    new_short = static_cast<int>(static_cast<double>(s.max_size) * new_short / new_long);
    new_long = s.max_size;
  }
  if (w <= h) {
    *out_w = new_short, *out_h = new_long;
  } else {
    *out_w = new_long, *out_h = new_short;
  }
}

// The clip's operations on frames of w x h, drawing from `rng` (one draw per clip).
absl::Status PlanClip(const VideoChain& chain, int w, int h, SampleRng* rng, std::vector<Op>* ops,
                      bool every_step = false) {
  ops->clear();
  for (const VideoStep& s : chain.steps) {
    switch (s.kind) {
      case VideoStep::Kind::kResize: {
        int ow, oh;
        ResizedSize(s, w, h, &ow, &oh);
        if (every_step || ow != w || oh != h) ops->push_back({Op::Kind::kResize, 0, 0, oh, ow});
        w = ow, h = oh;
        break;
      }
      case VideoStep::Kind::kCenterCrop:
      case VideoStep::Kind::kRandomCrop: {
        if (s.height > h || s.width > w) {
          return absl::InvalidArgumentError(absl::StrCat(
              s.kind == VideoStep::Kind::kCenterCrop ? "CenterCrop" : "RandomCrop", "(", s.height, ", ",
              s.width, ") is larger than the frames it gets (", h, " x ", w,
              "): torchvision would pad them, which the native video path does not; crop smaller or "
              "resize first"));
        }
        Op op{Op::Kind::kCrop, 0, 0, s.height, s.width};
        if (s.kind == VideoStep::Kind::kCenterCrop) {  // Python's round: half to even
          op.top = static_cast<int>(std::nearbyint((h - s.height) / 2.0));
          op.left = static_cast<int>(std::nearbyint((w - s.width) / 2.0));
        } else {
          op.top = static_cast<int>(rng->RandInt(0, h - s.height + 1));
          op.left = static_cast<int>(rng->RandInt(0, w - s.width + 1));
        }
        if (every_step || op.height != h || op.width != w) ops->push_back(op);
        w = s.width, h = s.height;
        break;
      }
      case VideoStep::Kind::kRandomResizedCrop: {
        CropBox box = RandomResizedCropBox(w, h, s.scale_min, s.scale_max, s.ratio_min, s.ratio_max, *rng);
        if (every_step || box.height != h || box.width != w) {
          ops->push_back({Op::Kind::kCrop, box.top, box.left, box.height, box.width});
        }
        if (every_step || box.height != s.height || box.width != s.width) {
          ops->push_back({Op::Kind::kResize, 0, 0, s.height, s.width});
        }
        w = s.width, h = s.height;
        break;
      }
      case VideoStep::Kind::kHorizontalFlip: {
        const bool drawn = rng->Uniform() < s.p;
        if (every_step || drawn) ops->push_back({Op::Kind::kFlip, 0, 0, 0, 0, drawn});
        break;
      }
    }
  }
  return absl::OkStatus();
}

// A frame as the chain holds it between operations: planes of h x w bytes, mirrored or not.
struct View {
  const uint8_t* data;
  int w, h;
  ptrdiff_t row, plane;
  bool flipped;
};

}  // namespace

absl::StatusOr<std::vector<PlannedOp>> PlanClip(const VideoChain& chain, int src_w, int src_h, uint64_t seed,
                                                bool every_step) {
  SampleRng rng(seed);
  std::vector<PlannedOp> ops;
  if (absl::Status status = PlanClip(chain, src_w, src_h, &rng, &ops, every_step); !status.ok()) return status;
  return ops;
}

absl::Status VideoChain::OutputSize(int src_w, int src_h, int* out_w, int* out_h) const {
  SampleRng rng(0);
  std::vector<Op> ops;
  // Sizes never depend on draws; a plan with any draws gives them.
  if (absl::Status status = PlanClip(*this, src_w, src_h, &rng, &ops); !status.ok()) return status;
  int w = src_w, h = src_h;
  for (const Op& op : ops) {
    if (op.kind != Op::Kind::kFlip) w = op.width, h = op.height;
  }
  *out_w = w, *out_h = h;
  return absl::OkStatus();
}

namespace {

// What says a file is still the one a decoder opened: a file replaced (another inode), rewritten
// or touched (size, times) between batches is opened again, never read with the old frame table.
struct FileStamp {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  int64_t size = 0, mtime_ns = 0, ctime_ns = 0;
  bool operator==(const FileStamp& o) const {
    return exists == o.exists && dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns &&
           ctime_ns == o.ctime_ns;
  }
};

FileStamp StampOf(const std::string& path) {
  struct stat st{};
  FileStamp stamp;
  if (::stat(path.c_str(), &st) != 0) return stamp;
  stamp.exists = true;
  stamp.dev = st.st_dev, stamp.ino = st.st_ino, stamp.size = static_cast<int64_t>(st.st_size);
  stamp.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  stamp.ctime_ns = int64_t{st.st_ctim.tv_sec} * 1000000000 + st.st_ctim.tv_nsec;
  return stamp;
}

struct OpenVideo {
  std::string path;  // what finds it again: a file's path and range, or "memory:" and the bytes' key
  FileStamp stamp;  // the file as it was when opened (taken just before the open)
  std::unique_ptr<VideoDecoder> decoder;
};

}  // namespace

struct ClipPool::Worker {
  std::vector<OpenVideo> open;  // most recent first
  TensorResizeScratch resize;
  std::vector<uint8_t> buffers[2];
  std::vector<uint8_t> mirrored;
  std::vector<Op> ops;

  VideoDecoder* Keep(std::string key, FileStamp stamp, std::unique_ptr<VideoDecoder> decoder, int keep) {
    if (static_cast<int>(open.size()) >= keep) open.pop_back();
    open.insert(open.begin(), OpenVideo{std::move(key), stamp, std::move(decoder)});
    return open.front().decoder.get();
  }

  absl::StatusOr<VideoDecoder*> Decoder(const ClipJob& job, const VideoDecoderOptions& options, int keep,
                                        std::unique_ptr<VideoDecoder>* unowned) {
    const std::string& name = JobName(job);
    if (job.data != nullptr && job.key.empty()) {  // bytes the caller holds for this call only: never kept
      absl::StatusOr<std::unique_ptr<VideoDecoder>> decoder =
          VideoDecoder::OpenMemory(job.data, job.size, nullptr, name, options);
      if (!decoder.ok()) return decoder.status();
      *unowned = std::move(*decoder);
      return unowned->get();
    }
    // A file (or a range of it) is known by its path and range, and checked against its stamp;
    // bytes in memory by the caller's key (a digest of them: the same key, the same bytes).
    const bool memory = job.data != nullptr;
    const std::string key = memory ? absl::StrCat("memory:", job.key)
                                   : absl::StrCat(job.path, "@", job.range.offset, "+", job.range.length);
    const FileStamp stamp = memory ? FileStamp{} : StampOf(job.path);
    for (size_t i = 0; i < open.size(); ++i) {
      if (open[i].path != key) continue;
      if (!(open[i].stamp == stamp)) {  // replaced or changed since it was opened: open it again
        open.erase(open.begin() + static_cast<ptrdiff_t>(i));
        break;
      }
      std::rotate(open.begin(), open.begin() + static_cast<ptrdiff_t>(i), open.begin() + static_cast<ptrdiff_t>(i) + 1);
      return open.front().decoder.get();
    }
    absl::StatusOr<std::unique_ptr<VideoDecoder>> decoder;
    if (memory) {  // kept beyond this call: on a copy of the bytes the decoder owns
      auto copy = std::make_shared<const std::string>(reinterpret_cast<const char*>(job.data), job.size);
      const auto* bytes = reinterpret_cast<const uint8_t*>(copy->data());
      decoder = VideoDecoder::OpenMemory(bytes, copy->size(), copy, name, options);
    } else {
      decoder = VideoDecoder::OpenFile(job.path, options, job.range, name);
    }
    if (!decoder.ok()) return decoder.status();
    return Keep(key, stamp, std::move(*decoder), keep);
  }
};

ClipPool::ClipPool(int threads, VideoDecoderOptions options, int open_per_thread)
    : options_(options), open_per_thread_(std::max(open_per_thread, 1)) {
  threads = std::max(threads, 1);
  owner_pid_ = getpid();
  for (int i = 0; i < threads; ++i) workers_.push_back(std::make_unique<Worker>());
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this, i] { Loop(workers_[i].get()); });
}

ClipPool::~ClipPool() {
  if (getpid() != owner_pid_) {  // a forked child: none of this is ours to stop or free
    for (std::thread& t : threads_) new std::thread(std::move(t));  // NOLINT: leaked on purpose
    for (auto& worker : workers_) worker.release();
    sync_.release();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(sync_->mu);
    stop_ = true;
  }
  sync_->wake.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ClipPool::Loop(Worker* worker) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(sync_->mu);
  for (;;) {
    sync_->wake.wait(lock, [&] { return stop_ || (generation_ != seen && next_ < count_); });
    if (stop_) return;
    const size_t job = next_++;
    if (next_ >= count_) seen = generation_;
    const auto* task = task_;
    lock.unlock();
    (*task)(*worker, job);
    lock.lock();
    if (++finished_ == count_) sync_->done.notify_all();
  }
}

void ClipPool::Run(size_t count, const std::function<void(Worker&, size_t)>& fn) {
  if (count == 0) return;
  std::lock_guard<std::mutex> turn(sync_->run);
  std::unique_lock<std::mutex> lock(sync_->mu);
  task_ = &fn;
  count_ = count, next_ = 0, finished_ = 0;
  ++generation_;
  sync_->wake.notify_all();
  sync_->done.wait(lock, [&] { return finished_ == count_; });
  task_ = nullptr;
}

std::vector<absl::StatusOr<VideoMetadata>> ClipPool::Probe(const std::vector<ClipJob>& jobs) {
  std::vector<absl::StatusOr<VideoMetadata>> out(jobs.size(), absl::UnknownError("not probed"));
  Run(jobs.size(), [&](Worker& worker, size_t j) {
    std::unique_ptr<VideoDecoder> unowned;
    absl::StatusOr<VideoDecoder*> decoder = worker.Decoder(jobs[j], options_, open_per_thread_, &unowned);
    if (!decoder.ok()) {
      out[j] = decoder.status();
    } else {
      out[j] = (*decoder)->metadata();
    }
  });
  return out;
}

std::vector<ClipOutcome> ClipPool::Decode(const std::vector<ClipJob>& jobs, const VideoChain& chain, int out_h,
                                          int out_w, uint8_t* out, size_t row_bytes) {
  std::vector<ClipOutcome> outcomes(jobs.size());
  const bool to_float = !chain.levels.empty();
  const size_t frame_elems = static_cast<size_t>(3) * out_h * out_w;
  Run(jobs.size(), [&](Worker& worker, size_t j) {
    const ClipJob& job = jobs[j];
    ClipOutcome& outcome = outcomes[j];
    std::unique_ptr<VideoDecoder> unowned;
    absl::StatusOr<VideoDecoder*> opened = worker.Decoder(job, options_, open_per_thread_, &unowned);
    if (!opened.ok()) {
      outcome.status = opened.status();
      return;
    }
    VideoDecoder* decoder = *opened;
    const VideoDecodeStats before = decoder->stats();
    absl::StatusOr<DecodedFrames> frames = decoder->DecodeFrames(job.indices);
    const VideoDecodeStats after = decoder->stats();
    outcome.frames_decoded = after.frames_decoded - before.frames_decoded;
    if (!frames.ok()) {
      outcome.status = frames.status();
      return;
    }
    SampleRng rng(job.seed);
    if (absl::Status status = PlanClip(chain, frames->width, frames->height, &rng, &worker.ops); !status.ok()) {
      outcome.status = absl::InvalidArgumentError(absl::StrCat(JobName(job), ": ", status.message()));
      return;
    }
    const size_t elem = to_float ? sizeof(float) : 1;
    if (static_cast<size_t>(frames->frames) * frame_elems * elem != row_bytes) {
      outcome.status = absl::InvalidArgumentError(absl::StrCat(
          JobName(job), ": its clip (", frames->frames, " frames) does not fill its batch row; clips of one batch "
          "must have the same number of frames"));
      return;
    }
    const size_t src_frame = static_cast<size_t>(3) * frames->height * frames->width;
    uint8_t* row = out + j * row_bytes;
    for (int64_t f = 0; f < frames->frames; ++f) {
      View v{frames->data.data() + f * src_frame, frames->width, frames->height, frames->width,
             static_cast<ptrdiff_t>(frames->width) * frames->height, false};
      int buffer = 0;
      for (const Op& op : worker.ops) {
        if (op.kind == Op::Kind::kFlip) {
          v.flipped = !v.flipped;
        } else if (op.kind == Op::Kind::kCrop) {
          const int left = v.flipped ? v.w - op.left - op.width : op.left;
          v.data += op.top * v.row + left;
          v.w = op.width, v.h = op.height;
        } else {  // resize the image as it is now: a mirrored one is mirrored first
          if (v.flipped) {
            worker.mirrored.resize(static_cast<size_t>(3) * v.w * v.h);
            for (int c = 0; c < 3; ++c) {
              for (int y = 0; y < v.h; ++y) {
                const uint8_t* s = v.data + c * v.plane + y * v.row;
                uint8_t* d = worker.mirrored.data() + (static_cast<size_t>(c) * v.h + y) * v.w;
                for (int x = 0; x < v.w; ++x) d[x] = s[v.w - 1 - x];
              }
            }
            v = View{worker.mirrored.data(), v.w, v.h, v.w, static_cast<ptrdiff_t>(v.w) * v.h, false};
          }
          std::vector<uint8_t>& dst = worker.buffers[buffer];
          buffer ^= 1;
          dst.resize(static_cast<size_t>(3) * op.width * op.height);
          TensorResize(v.data, 3, v.h, v.w, v.row, v.plane, op.height, op.width, dst.data(), worker.resize);
          v = View{dst.data(), op.width, op.height, op.width, static_cast<ptrdiff_t>(op.width) * op.height, false};
        }
      }
      if (v.w != out_w || v.h != out_h) {
        outcome.status = absl::InvalidArgumentError(absl::StrCat(
            JobName(job), ": its frames are ", v.h, " x ", v.w, " after the transform, the batch's are ", out_h, " x ",
            out_w, "; clips of one batch must have one size (end the transform in a crop or a Resize to (h, w))"));
        return;
      }
      uint8_t* frame_out = row + static_cast<size_t>(f) * frame_elems * elem;
      for (int c = 0; c < 3; ++c) {
        const float* levels = to_float ? chain.levels.data() + c * 256 : nullptr;
        for (int y = 0; y < v.h; ++y) {
          const uint8_t* s = v.data + c * v.plane + y * v.row;
          const size_t at = (static_cast<size_t>(c) * out_h + y) * out_w;
          if (to_float) {
            float* d = reinterpret_cast<float*>(frame_out) + at;
            if (v.flipped) {
              for (int x = 0; x < v.w; ++x) d[x] = levels[s[v.w - 1 - x]];
            } else {
              for (int x = 0; x < v.w; ++x) d[x] = levels[s[x]];
            }
          } else if (v.flipped) {
            for (int x = 0; x < v.w; ++x) frame_out[at + x] = s[v.w - 1 - x];
          } else {
            std::memcpy(frame_out + at, s, static_cast<size_t>(v.w));
          }
        }
      }
    }
    outcome.frames_kept = frames->frames;
  });
  return outcomes;
}

}  // namespace ringloader::video
