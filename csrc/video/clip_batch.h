#pragma once
/// Batches of video clips decoded in native threads: `ClipPool` runs a batch's clips on its
/// threads, each thread with its own VideoDecoder per open file (a few kept open, most recently
/// used first; one whose file was replaced or changed since, by inode, size or times, is opened
/// again), and writes each clip's frames, after the clip's video chain, straight into its
/// row of the caller's batch buffer. No Python, no GIL: the binding releases it for the call.
///
/// A video chain is torchvision v2's geometric video transforms (Resize, CenterCrop,
/// RandomCrop, RandomResizedCrop, RandomHorizontalFlip) applied to every frame of a clip with
/// one draw per clip, from the clip's SampleRng (the loader's per-sample key), followed by the
/// output levels: uint8 as decoded, or float32 through a per-channel table of each level's
/// value (ToDtype/Normalize, computed by the caller with torch itself). Resizes are torch's
/// antialiased bilinear on uint8 (transform/tensor_resize.h), the kernel v2 runs on a uint8 video.

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "video/video_decoder.h"

namespace ringloader::video {

/// One geometric step of a video chain.
struct VideoStep {
  enum class Kind { kResize, kCenterCrop, kRandomCrop, kRandomResizedCrop, kHorizontalFlip };
  Kind kind = Kind::kResize;
  /// Resize: (h, w), or the shorter side h when w == 0 (then max_size bounds the longer side,
  /// 0: none); the crops: their output size.
  int height = 0, width = 0, max_size = 0;
  double scale_min = 0.08, scale_max = 1.0, ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  double p = 0.5;  // the flip's probability
};

struct VideoChain {
  std::vector<VideoStep> steps;
  /// Empty: uint8 output. Else 3 x 256 float32 values (channel-major): the output's value of
  /// each level, and the output is float32.
  std::vector<float> levels;
  /// The size of frames of `src_w` x `src_h` after the chain (v2's size rules; no draw changes
  /// a size). InvalidArgument when a crop is larger than its input (v2 would pad: not native).
  absl::Status OutputSize(int src_w, int src_h, int* out_w, int* out_h) const;
};

/// One operation of a clip's chain with its draws made: a crop (top, left, height, width) of
/// the frames as they are at that point, a resize to (height, width), or a horizontal flip.
struct PlannedOp {
  enum class Kind { kCrop, kResize, kFlip };
  Kind kind = Kind::kCrop;
  int top = 0, left = 0, height = 0, width = 0;
  /// False for an operation of `every_step` that changes nothing (a flip not drawn).
  bool applied = true;
};

/// The operations a clip of `src_w` x `src_h` frames gets from `chain` with the draws of `seed`
/// (what ClipPool::Decode applies to each of its frames): one draw per clip. Those that change
/// nothing (a full-frame crop, a resize to the same size, a flip not drawn) are left out, unless
/// `every_step`: then each step gives its operations whatever they change (a resize, a crop, a
/// RandomResizedCrop a crop and a resize, a flip with `applied` its draw), as v2 makes its
/// calls on boxes (a full-frame crop still clamps them).
absl::StatusOr<std::vector<PlannedOp>> PlanClip(const VideoChain& chain, int src_w, int src_h, uint64_t seed,
                                                bool every_step = false);

/// One clip to decode: a file (its `range` of bytes: a tar shard's member), or bytes in memory
/// when `data` is set, its frame indices (`clips` clips of equal length, one after the other)
/// and the seed of its draws. Errors name `name`, else `path`.
struct ClipJob {
  std::string path;
  std::string name;
  ByteRange range;
  const uint8_t* data = nullptr;
  size_t size = 0;
  /// Bytes in memory with a key (the caller's digest of them): the thread's decoder keeps a copy
  /// of the bytes open under it, as a file's is kept, and finds it again for the same key.
  /// Without one the bytes are read in place for this call only.
  std::string key;
  std::vector<int64_t> indices;
  uint64_t seed = 0;
};

/// What one clip cost: frames the codec decoded and frames kept (converted and written).
struct ClipOutcome {
  absl::Status status;
  int64_t frames_decoded = 0;
  int64_t frames_kept = 0;
};

/// What errors call a job: its name, else its path.
inline const std::string& JobName(const ClipJob& job) { return job.name.empty() ? job.path : job.name; }

class ClipPool {
 public:
  /// `threads` decode threads (at least 1), each keeping up to `open_per_thread` decoders open.
  /// A pool destroyed in a forked child (which has none of its threads) releases nothing: its
  /// threads, decoders and locks are the parent's.
  ClipPool(int threads, VideoDecoderOptions options, int open_per_thread = 4);
  ~ClipPool();
  ClipPool(const ClipPool&) = delete;
  ClipPool& operator=(const ClipPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }

  /// Each job's video metadata (opened on the pool's threads, which keep the decoders open).
  std::vector<absl::StatusOr<VideoMetadata>> Probe(const std::vector<ClipJob>& jobs);

  /// Decodes every job into row j of `out` (row_bytes each: indices x 3 x out_h x out_w
  /// elements, uint8 or float32 as the chain says). A failing job leaves its row unspecified
  /// and returns its error (naming the file, and the frame when one failed to decode).
  std::vector<ClipOutcome> Decode(const std::vector<ClipJob>& jobs, const VideoChain& chain, int out_h,
                                  int out_w, uint8_t* out, size_t row_bytes);

  struct Worker;

 private:
  void Run(size_t count, const std::function<void(Worker&, size_t)>& fn);
  void Loop(Worker* worker);

  VideoDecoderOptions options_;
  int open_per_thread_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  // Held apart so that a forked child (which has none of the threads) can leave them alone:
  // its copy of a condition variable may still count the parent's waiters.
  struct Sync {
    std::mutex mu;
    std::condition_variable wake, done;
    std::mutex run;  // one batch at a time: callers on several threads (the GIL released) take turns
  };
  std::unique_ptr<Sync> sync_ = std::make_unique<Sync>();
  int owner_pid_ = 0;
  const std::function<void(Worker&, size_t)>* task_ = nullptr;
  size_t count_ = 0, next_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace ringloader::video
