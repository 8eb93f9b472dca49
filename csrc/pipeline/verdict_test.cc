#include "pipeline/verdict.h"

#include <gtest/gtest.h>

#include <string>

namespace ringloader {
namespace {

// Two decode threads and one reader over 2 s, consumer waiting `wait` s: the window the
// Python tests make up as well (tests/python/test_cli.py).
VerdictInput Window(double read, double decode, double wait) {
  VerdictInput in;
  in.seconds = 2;
  in.read_busy = read;
  in.decode_busy = decode;
  in.read_threads = 1;
  in.decode_threads = 2;
  in.consumer_wait = wait;
  in.batches = 10;
  in.hardware_threads = 64;
  return in;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(VerdictTest, ConsumerThatRarelyWaitedIsTheLimit) {
  const LoaderVerdict v = JudgeLoader(Window(0.2, 3.0, 0.1));
  EXPECT_EQ(v.bottleneck, "consumer");
  EXPECT_EQ(v.label, "consumer-bound");
  EXPECT_DOUBLE_EQ(v.wait_fraction, 0.05);
  EXPECT_DOUBLE_EQ(v.decode_share, 0.75);
  EXPECT_DOUBLE_EQ(v.read_share, 0.1);
  EXPECT_EQ(v.evidence,
            "the consumer waited for batches only 5.0% of the run: batches were ready before it "
            "asked (decode threads busy 75% (2 threads), reader threads busy 10% (1 thread))");
}

TEST(VerdictTest, BusierStagePerThreadDecides) {
  LoaderVerdict v = JudgeLoader(Window(0.4, 3.8, 1.0));
  EXPECT_EQ(v.bottleneck, "decode");
  EXPECT_EQ(v.label, "decode-bound");
  EXPECT_EQ(v.evidence,
            "the consumer waited 50% of the run; decode threads busy 95% (2 threads), reader "
            "threads busy 20% (1 thread)");
  // 1.8 s of one reader beats 1.0 s over two decoders.
  v = JudgeLoader(Window(1.8, 1.0, 1.0));
  EXPECT_EQ(v.bottleneck, "io");
  EXPECT_EQ(v.label, "I/O-bound");
  // A tie goes to decode.
  v = JudgeLoader(Window(1.5, 3.0, 1.0));
  EXPECT_EQ(v.bottleneck, "decode");
}

TEST(VerdictTest, NoSaturatedStageAdvisesTheCallersKnobs) {
  VerdictInput in = Window(0.2, 1.0, 1.0);
  LoaderVerdict v = JudgeLoader(in);
  EXPECT_EQ(v.bottleneck, "decode");
  EXPECT_TRUE(Has(v.evidence, "; no stage is saturated: raise --queue_depth, --io_depth or the thread counts"))
      << v.evidence;
  in.knobs = "prefetch_factor or num_workers";
  EXPECT_TRUE(Has(JudgeLoader(in).evidence, "; no stage is saturated: raise prefetch_factor or num_workers"));
  // A consumer-bound run gets no such advice: the loader kept ahead.
  EXPECT_FALSE(Has(JudgeLoader(Window(0.2, 1.0, 0.1)).evidence, "saturated"));
}

TEST(VerdictTest, FailuresAsManyAsDeliveredBatchesAreTheVerdict) {
  VerdictInput in = Window(1.0, 2.0, 1.0);
  in.errors = 10;
  in.last_error = "a/1.jpg: not an image";
  const LoaderVerdict v = JudgeLoader(in);
  EXPECT_EQ(v.bottleneck, "errors");
  EXPECT_EQ(v.label, "error-bound");
  EXPECT_TRUE(Has(v.evidence, "10 of 20 batches failed (last: a/1.jpg: not an image)")) << v.evidence;
  in.errors = 9;
  EXPECT_EQ(JudgeLoader(in).bottleneck, "decode");
}

TEST(VerdictTest, NextEpochBesideAndOversubscriptionAreSaid) {
  VerdictInput in = Window(0.4, 3.8, 1.0);
  in.next_epoch_beside = true;
  in.hardware_threads = 1;
  const LoaderVerdict v = JudgeLoader(in);
  EXPECT_TRUE(Has(v.evidence, "(1 thread) per epoch, the next epoch's threads beside them")) << v.evidence;
  EXPECT_TRUE(Has(v.evidence, "; note: 2 decode threads share 1 hardware threads")) << v.evidence;
  in.hardware_threads = 0;  // unknown: no note
  EXPECT_FALSE(Has(JudgeLoader(in).evidence, "note:"));
}

TEST(VerdictTest, NoThreadsNoWindowStayFinite) {
  VerdictInput in;
  const LoaderVerdict v = JudgeLoader(in);
  EXPECT_EQ(v.read_share, 0);
  EXPECT_EQ(v.decode_share, 0);
  EXPECT_EQ(v.bottleneck, "consumer");
}

}  // namespace
}  // namespace ringloader
