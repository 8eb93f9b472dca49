#include "video/video_decoder.h"
#include "video/clip_batch.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace ringloader::video {
namespace {

namespace fs = std::filesystem;

// The videos are made here by the ffmpeg CLI; without it (or without FFmpeg's libraries) the
// test binary exits 77, which CTest reports as skipped.
class Videos : public ::testing::Environment {
 public:
  void SetUp() override {
    if (std::system("ffmpeg -hide_banner -version >/dev/null 2>&1") != 0) {
      std::fprintf(stderr, "ffmpeg CLI not found: skipped\n");
      std::exit(77);
    }
    if (!VideoAvailable().ok()) {
      std::fprintf(stderr, "%s: skipped\n", std::string(VideoAvailable().message()).c_str());
      std::exit(77);
    }
    char pattern[] = "/tmp/rl_video_test_XXXXXX";
    dir = mkdtemp(pattern);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  static std::string Make(const std::string& name, const std::string& args) {
    std::string path = dir + "/" + name;
    if (!fs::exists(path)) {
      std::string command = "ffmpeg -hide_banner -loglevel error -y " + args + " " + path;
      if (std::system(command.c_str()) != 0) ADD_FAILURE() << "failed: " << command;
    }
    return path;
  }
  // 30 frames at 15 fps, H.264 with B-frames and short GOPs (keyframes every 8 frames).
  static std::string H264() {
    return Make("h264.mp4",
                "-f lavfi -i testsrc2=size=64x48:rate=15:duration=2 -c:v libx264 -preset ultrafast "
                "-bf 2 -g 8 -keyint_min 8 -sc_threshold 0 -pix_fmt yuv420p");
  }
  static std::string dir;
};
std::string Videos::dir;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<uint8_t> Frame(const DecodedFrames& frames, int64_t i) {
  size_t bytes = 3u * frames.height * frames.width;
  return std::vector<uint8_t>(frames.data.begin() + bytes * i, frames.data.begin() + bytes * (i + 1));
}

TEST(VideoDecoderTest, MetadataFromTheFrameTable) {
  auto decoder = VideoDecoder::OpenFile(Videos::H264());
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  const VideoMetadata& meta = (*decoder)->metadata();
  EXPECT_EQ(meta.num_frames, 30);
  EXPECT_EQ(meta.width, 64);
  EXPECT_EQ(meta.height, 48);
  EXPECT_EQ(meta.codec, "h264");
  EXPECT_NEAR(meta.average_fps, 15.0, 1e-9);
  EXPECT_NEAR(meta.duration_seconds, 2.0, 1e-9);
  ASSERT_EQ(meta.pts_seconds.size(), 30u);
  for (size_t i = 1; i < meta.pts_seconds.size(); ++i) EXPECT_LT(meta.pts_seconds[i - 1], meta.pts_seconds[i]);
  EXPECT_EQ(meta.key_frame_indices, (std::vector<int64_t>{0, 8, 16, 24}));
}

// Frame-exact seeking: scattered, unsorted and repeated indices give the frames a decode of the
// whole video from its start gives, and only seek where it pays.
TEST(VideoDecoderTest, ScatteredIndicesEqualSequentialDecode) {
  auto all = VideoDecoder::OpenFile(Videos::H264());
  ASSERT_TRUE(all.ok()) << all.status();
  std::vector<int64_t> every(30);
  for (int i = 0; i < 30; ++i) every[i] = i;
  auto reference = (*all)->DecodeFrames(every);
  ASSERT_TRUE(reference.ok()) << reference.status();
  EXPECT_EQ((*all)->stats().frames_kept, 30);
  EXPECT_EQ((*all)->stats().seeks, 1);  // the first frame's, as torchcodec

  auto decoder = VideoDecoder::OpenFile(Videos::H264());
  ASSERT_TRUE(decoder.ok());
  std::vector<int64_t> wanted{17, 3, 29, 3, 9, -1, 24, 0};
  auto frames = (*decoder)->DecodeFrames(wanted);
  ASSERT_TRUE(frames.ok()) << frames.status();
  ASSERT_EQ(frames->frames, 8);
  for (size_t k = 0; k < wanted.size(); ++k) {
    int64_t index = wanted[k] < 0 ? wanted[k] + 30 : wanted[k];
    EXPECT_EQ(Frame(*frames, k), Frame(*reference, index)) << "frame " << index;
    EXPECT_DOUBLE_EQ(frames->pts_seconds[k], (*decoder)->metadata().pts_seconds[index]);
  }
  // Frames kept: the 6 distinct ones (3 and 29 twice); decoded: fewer than 2 passes' worth.
  EXPECT_EQ((*decoder)->stats().frames_kept, 6);
  EXPECT_LT((*decoder)->stats().frames_decoded, 60);
}

// Frames no call keeps and nothing references (x264's non-reference B-frames) are skipped: the
// frames kept are the same, fewer frames are decoded.
TEST(VideoDecoderTest, SkippingUnwantedFramesKeepsThePixels) {
  VideoDecoderOptions every_frame;
  every_frame.skip_unwanted_frames = false;
  auto full = VideoDecoder::OpenFile(Videos::H264(), every_frame);
  auto skipping = VideoDecoder::OpenFile(Videos::H264());
  ASSERT_TRUE(full.ok() && skipping.ok());
  std::vector<int64_t> wanted{1, 5, 9, 13, 17, 21, 25, 29};
  auto a = (*full)->DecodeFrames(wanted);
  auto b = (*skipping)->DecodeFrames(wanted);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->data, b->data);
  EXPECT_EQ(a->pts_seconds, b->pts_seconds);
  EXPECT_LT((*skipping)->stats().frames_decoded, (*full)->stats().frames_decoded);
}

// One decoder asked for frame k, then for frame k + 1 in a second call: the first call skipped
// the non-reference frames it did not want, some of them past frame k (sent to reach its
// output), so the second call must not take the next frame the codec gives for frame k + 1.
TEST(VideoDecoderTest, ASecondCallGetsFramesTheFirstCallSkipped) {
  VideoDecoderOptions every_frame;
  every_frame.skip_unwanted_frames = false;
  auto full = VideoDecoder::OpenFile(Videos::H264(), every_frame);
  ASSERT_TRUE(full.ok()) << full.status();
  std::vector<int64_t> every(30);
  for (int i = 0; i < 30; ++i) every[i] = i;
  auto reference = (*full)->DecodeFrames(every);
  ASSERT_TRUE(reference.ok()) << reference.status();
  for (int64_t k = 0; k + 1 < 30; ++k) {
    auto decoder = VideoDecoder::OpenFile(Videos::H264());
    ASSERT_TRUE(decoder.ok());
    for (int64_t index : {k, k + 1}) {
      auto frames = (*decoder)->DecodeFrames({index});
      ASSERT_TRUE(frames.ok()) << frames.status();
      EXPECT_EQ(frames->pts_seconds[0], (*decoder)->metadata().pts_seconds[index]) << "frame " << index << " after " << k;
      EXPECT_EQ(Frame(*frames, 0), Frame(*reference, index)) << "frame " << index << " after " << k;
    }
  }
}

TEST(VideoDecoderTest, BytesInMemoryEqualTheFile) {
  std::string path = Videos::H264();
  auto bytes = std::make_shared<std::string>(ReadAll(path));
  auto memory = VideoDecoder::OpenMemory(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size(), bytes,
                                         "member.mp4");
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto file = VideoDecoder::OpenFile(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*memory)->metadata().pts_seconds, (*file)->metadata().pts_seconds);
  std::vector<int64_t> wanted{5, 21, 12};
  auto a = (*memory)->DecodeFrames(wanted);
  auto b = (*file)->DecodeFrames(wanted);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->data, b->data);
}

// A video stored inside a larger file (a tar member) is read as its byte range alone: garbage
// before and after it is never seen, and a range past the file's end is refused by name.
TEST(VideoDecoderTest, AByteRangeOfAFileEqualsTheWholeFile) {
  std::string path = Videos::H264();
  const std::string video = ReadAll(path);
  const std::string padded = Videos::dir + "/padded.bin";
  {
    std::ofstream out(padded, std::ios::binary);
    out << std::string(1000, 'x') << video << std::string(700, 'y');
  }
  const ByteRange range{1000, static_cast<int64_t>(video.size())};
  auto member = VideoDecoder::OpenFile(padded, {}, range, "shard.tar:h264.mp4");
  ASSERT_TRUE(member.ok()) << member.status();
  EXPECT_EQ((*member)->name(), "shard.tar:h264.mp4");
  auto file = VideoDecoder::OpenFile(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*member)->metadata().pts_seconds, (*file)->metadata().pts_seconds);
  std::vector<int64_t> wanted{29, 3, 17};
  auto a = (*member)->DecodeFrames(wanted);
  auto b = (*file)->DecodeFrames(wanted);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->data, b->data);
  auto past = VideoDecoder::OpenFile(padded, {}, ByteRange{1000, static_cast<int64_t>(video.size()) + 701}, "late.mp4");
  ASSERT_FALSE(past.ok());
  EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(past.status().message().find("late.mp4: bytes 1000.."), std::string::npos) << past.status();
}

TEST(VideoDecoderTest, FramesPlayedAtFollowTheHalfOpenRule) {
  auto decoder = VideoDecoder::OpenFile(Videos::H264());
  ASSERT_TRUE(decoder.ok());
  const std::vector<double>& pts = (*decoder)->metadata().pts_seconds;
  auto indices = (*decoder)->IndicesPlayedAt({pts[4], pts[4] + 0.5 / 15, pts[5] - 1e-9, pts[29], 1.999});
  ASSERT_TRUE(indices.ok()) << indices.status();
  EXPECT_EQ(*indices, (std::vector<int64_t>{4, 4, 4, 29, 29}));
  auto beyond = (*decoder)->IndicesPlayedAt({2.0});
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(beyond.status().message().find("[0, 2)"), std::string::npos) << beyond.status();
  auto frames = (*decoder)->DecodeFramesPlayedAt({pts[7] + 0.01});
  ASSERT_TRUE(frames.ok());
  EXPECT_DOUBLE_EQ(frames->pts_seconds[0], pts[7]);
}

TEST(VideoDecoderTest, OddSizeGoesThroughTheFilterGraph) {
  std::string path = Videos::Make("odd.mkv",
                                  "-f lavfi -i testsrc2=size=96x60:rate=10:duration=1 -vf scale=97:61 "
                                  "-c:v libx264 -preset ultrafast -pix_fmt yuv444p");
  auto decoder = VideoDecoder::OpenFile(path);
  ASSERT_TRUE(decoder.ok()) << decoder.status();
  auto frames = (*decoder)->DecodeFrames({0, 9});
  ASSERT_TRUE(frames.ok()) << frames.status();
  EXPECT_EQ(frames->width, 97);
  EXPECT_EQ(frames->height, 61);
  EXPECT_NE(Frame(*frames, 0), Frame(*frames, 1));
}

TEST(VideoDecoderTest, ErrorsNameTheFile) {
  std::string junk = Videos::dir + "/junk.mp4";
  std::ofstream(junk) << "this is not a video at all";
  auto bad = VideoDecoder::OpenFile(junk);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(junk), std::string::npos) << bad.status();

  auto missing = VideoDecoder::OpenFile(Videos::dir + "/missing.mp4");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);

  std::string whole = ReadAll(Videos::H264());
  std::string cut = Videos::dir + "/cut.mp4";
  std::ofstream(cut, std::ios::binary) << whole.substr(0, whole.size() / 2);
  auto truncated = VideoDecoder::OpenFile(cut);
  ASSERT_FALSE(truncated.ok());  // the moov box is at the end: nothing to index
  EXPECT_NE(truncated.status().message().find(cut), std::string::npos) << truncated.status();

  auto decoder = VideoDecoder::OpenFile(Videos::H264());
  ASSERT_TRUE(decoder.ok());
  auto out_of_range = (*decoder)->DecodeFrames({3, 30});
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(out_of_range.status().message().find("0..29"), std::string::npos) << out_of_range.status();
}

TEST(VideoDecoderTest, LimitsGuardFrameSizeAndClipBytes) {
  VideoDecoderOptions small;
  small.max_frame_pixels = 64 * 48 - 1;
  auto refused = VideoDecoder::OpenFile(Videos::H264(), small);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("max_frame_pixels"), std::string::npos) << refused.status();

  VideoDecoderOptions clip;
  clip.max_clip_bytes = 3 * 64 * 48 * 4;
  auto decoder = VideoDecoder::OpenFile(Videos::H264(), clip);
  ASSERT_TRUE(decoder.ok());
  EXPECT_TRUE((*decoder)->DecodeFrames({0, 1, 2, 3}).ok());
  auto over = (*decoder)->DecodeFrames({0, 1, 2, 3, 4});
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(over.status().message().find("max_clip_bytes"), std::string::npos) << over.status();
}

// One decoder per thread: decoders share nothing but the loaded library table.
TEST(VideoDecoderTest, DecodersOnSeveralThreadsAgree) {
  std::string path = Videos::H264();
  std::vector<std::vector<uint8_t>> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto decoder = VideoDecoder::OpenFile(path);
      if (!decoder.ok()) return;
      auto frames = (*decoder)->DecodeFrames({2, 11, 27, 19});
      if (frames.ok()) results[t] = frames->data;
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_FALSE(results[0].empty());
  for (int t = 1; t < 4; ++t) EXPECT_EQ(results[t], results[0]);
}

// One decoder called from several threads at once (the binding releases the GIL while it
// decodes): the calls take turns, each gets its own frames.
TEST(VideoDecoderTest, OneDecoderCalledFromSeveralThreadsTakesTurns) {
  auto full = VideoDecoder::OpenFile(Videos::H264());
  ASSERT_TRUE(full.ok()) << full.status();
  std::vector<int64_t> every(30);
  for (int i = 0; i < 30; ++i) every[i] = i;
  auto reference = (*full)->DecodeFrames(every);
  ASSERT_TRUE(reference.ok()) << reference.status();
  auto shared = VideoDecoder::OpenFile(Videos::H264());
  ASSERT_TRUE(shared.ok());
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 25; ++round) {
        const std::vector<int64_t> wanted{(t * 7 + round * 3) % 30, (t * 11 + round * 5 + 13) % 30};
        auto frames = (*shared)->DecodeFrames(wanted);
        if (!frames.ok() || Frame(*frames, 0) != Frame(*reference, wanted[0]) ||
            Frame(*frames, 1) != Frame(*reference, wanted[1])) {
          ++wrong[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

// A pool keeps each thread's decoders open per path; a file renamed over or rewritten in place
// since it was opened is opened again, so its frame table is the file's as it is now.
TEST(ClipPoolTest, AFileReplacedSinceItWasOpenedIsOpenedAgain) {
  const std::string shorter = Videos::Make(
      "short.mp4", "-f lavfi -i testsrc2=size=64x48:rate=15:duration=1 -c:v libx264 -preset ultrafast -pix_fmt yuv420p");
  const std::string longer = Videos::H264();  // 30 frames
  const std::string path = Videos::dir + "/replaced.mp4", fresh = Videos::dir + "/fresh.mp4";
  fs::copy_file(shorter, path, fs::copy_options::overwrite_existing);
  ClipPool pool(1, VideoDecoderOptions{});
  ClipJob job;
  job.path = path;
  auto frames_now = [&] {
    std::vector<absl::StatusOr<VideoMetadata>> meta = pool.Probe({job});
    EXPECT_TRUE(meta[0].ok()) << meta[0].status();
    return meta[0].ok() ? meta[0]->num_frames : -1;
  };
  EXPECT_EQ(frames_now(), 15);
  EXPECT_EQ(frames_now(), 15);  // unchanged: the open decoder serves
  fs::copy_file(longer, fresh, fs::copy_options::overwrite_existing);
  fs::rename(fresh, path);  // another inode under the same name
  EXPECT_EQ(frames_now(), 30);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);  // the same inode, new bytes
    out << ReadAll(shorter);
  }
  EXPECT_EQ(frames_now(), 15);
}

// Every step's operations, for v2's box kernels: the same draws as the compact plan, which
// leaves out the ones that change nothing (a full-frame crop, a same-size resize, a flip not drawn).
TEST(PlanClipTest, EveryStepKeepsTheDrawsOfTheCompactPlan) {
  VideoChain chain;
  VideoStep resize{VideoStep::Kind::kResize, 24, 0};
  VideoStep center{VideoStep::Kind::kCenterCrop, 24, 32};  // the whole frame after the resize
  VideoStep rrc{VideoStep::Kind::kRandomResizedCrop, 16, 16};
  VideoStep flip{VideoStep::Kind::kHorizontalFlip};
  chain.steps = {resize, center, rrc, flip};
  for (uint64_t seed = 0; seed < 64; ++seed) {
    absl::StatusOr<std::vector<PlannedOp>> compact = PlanClip(chain, 32, 24, seed);
    absl::StatusOr<std::vector<PlannedOp>> every = PlanClip(chain, 32, 24, seed, /*every_step=*/true);
    ASSERT_TRUE(compact.ok() && every.ok());
    ASSERT_EQ(every->size(), 5u);  // resize, crop, the RandomResizedCrop's crop and resize, flip
    EXPECT_EQ((*every)[0].kind, PlannedOp::Kind::kResize);
    EXPECT_EQ((*every)[1].kind, PlannedOp::Kind::kCrop);
    EXPECT_EQ((*every)[1].height, 24);
    std::vector<PlannedOp> applied;  // the compact plan is every step's that changes something
    for (size_t i = 0; i < every->size(); ++i) {
      const PlannedOp& op = (*every)[i];
      const bool same_size = op.kind == PlannedOp::Kind::kResize && i == 0;  // 32 x 24 stays
      const bool whole = op.kind == PlannedOp::Kind::kCrop && op.height == 24 && op.width == 32;
      const bool resize_to_crop = i == 3 && (*every)[2].height == 16 && (*every)[2].width == 16;
      if (op.applied && !same_size && !whole && !resize_to_crop) applied.push_back(op);
    }
    ASSERT_EQ(applied.size(), compact->size()) << "seed " << seed;
    for (size_t i = 0; i < applied.size(); ++i) {
      EXPECT_EQ(applied[i].kind, (*compact)[i].kind);
      EXPECT_EQ(applied[i].top, (*compact)[i].top);
      EXPECT_EQ(applied[i].left, (*compact)[i].left);
      EXPECT_EQ(applied[i].height, (*compact)[i].height);
      EXPECT_EQ(applied[i].width, (*compact)[i].width);
    }
  }
}

}  // namespace
}  // namespace ringloader::video

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new ringloader::video::Videos);
  return RUN_ALL_TESTS();
}
