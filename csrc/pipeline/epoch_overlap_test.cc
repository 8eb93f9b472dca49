// The pipeline does not drain between epochs: a queued epoch is read and decoded while the
// current one is delivered, adopted by a matching StartEpoch, cancelled by anything else.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cuda/device_runtime.h"
#include "cuda/device_stager.h"
#include "ringloader/ringloader.h"
#include "ringloader/transforms.h"
#include "testing/jpeg_fixtures.h"
#include "testing/simulated_device.h"

namespace ringloader {
namespace {

using namespace std::chrono_literals;

LoaderOptions Options() {
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.prefetch_batches = 3;
  o.io_depth = 4;
  o.transform = {transforms::RandomResizedCrop(32), transforms::RandomHorizontalFlip(), transforms::ToTensor()};
  o.shuffle = true;
  o.seed = 5;
  return o;
}

// Polls `done` for up to 20 s (the pipeline works on other threads).
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 4000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

struct Delivered {
  std::vector<int64_t> numbers, indices, labels;
  std::vector<uint8_t> bytes;
  std::vector<std::string> errors;  // "batch N: message"
  bool operator==(const Delivered& o) const {
    return numbers == o.numbers && indices == o.indices && labels == o.labels && bytes == o.bytes &&
           errors == o.errors;
  }
};

// Delivers the rest of the epoch in progress (host batches), errors included.
Delivered Drain(Loader& loader) {
  Delivered out;
  while (true) {
    absl::StatusOr<Batch> batch = loader.Next(20.0);
    if (absl::IsOutOfRange(batch.status())) break;
    if (!batch.ok()) {
      EXPECT_TRUE(batch.status().GetPayload(kSampleIndexPayload).has_value()) << batch.status();
      if (!batch.status().GetPayload(kSampleIndexPayload).has_value()) break;
      out.errors.push_back(absl::StrCat("batch ", loader.next_batch() - 1, ": ", batch.status().message()));
      continue;
    }
    out.numbers.push_back(batch->number());
    out.indices.insert(out.indices.end(), batch->indices(), batch->indices() + batch->size());
    out.labels.insert(out.labels.end(), batch->labels(), batch->labels() + batch->size());
    auto* p = static_cast<const uint8_t*>(batch->images());
    out.bytes.insert(out.bytes.end(), p, p + batch->size() * batch->sample_bytes());
  }
  return out;
}

// Epoch `epoch` of a loader that never queued anything: the reference.
Delivered Fresh(const std::vector<Sample>& samples, const LoaderOptions& o, int64_t epoch) {
  auto loader = Loader::Create(samples, o).value();
  EXPECT_TRUE(loader->StartEpoch(epoch).ok());
  return Drain(*loader);
}

TEST(EpochOverlapTest, QueuedEpochIsDecodedAheadAdoptedAndBitIdentical) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 18);  // 5 batches, last short
  const LoaderOptions o = Options();
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(loader->QueueEpoch(1).ok());
  EXPECT_TRUE(loader->HasQueuedEpoch());
  const Delivered first = Drain(*loader);
  EXPECT_EQ(first.indices.size(), 18u);
  // With epoch 0 delivered and nothing asked of epoch 1 yet, the pipeline has gone on with it:
  // its first prefetch_batches batches are decoded, and no more until it is adopted (the slot
  // the consumer held stays free).
  ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead >= o.prefetch_batches * o.batch_size; }));
  std::this_thread::sleep_for(50ms);
  // No more slots than during any epoch: prefetch_batches, plus the one the consumer held.
  const LoaderStats ahead = loader->Stats();
  EXPECT_EQ(ahead.slots_held, 0);
  EXPECT_LE(ahead.slots_allocated, o.prefetch_batches + 1);
  EXPECT_EQ(ahead.samples_ahead, o.prefetch_batches * o.batch_size);
  EXPECT_EQ(ahead.samples, 18) << "work ahead is counted apart until adopted";

  ASSERT_TRUE(loader->StartEpoch(1).ok());
  EXPECT_FALSE(loader->HasQueuedEpoch());
  const Delivered second = Drain(*loader);
  EXPECT_EQ(second, Fresh(samples, o, 1)) << "work done ahead equals work done on time";
  const LoaderStats s = loader->Stats();
  EXPECT_EQ(s.samples, 36) << "batches decoded ahead were delivered, not decoded again";
  EXPECT_EQ(s.samples_ahead, 0);
  EXPECT_EQ(s.epochs_queued, 1);
  EXPECT_EQ(s.epochs_adopted, 1);
  EXPECT_EQ(first, Fresh(samples, o, 0));
}

TEST(EpochOverlapTest, ManyEpochsChainedStayWithinTheSlotBound) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 10);
  LoaderOptions o = Options();
  o.batch_size = 3;
  o.prefetch_batches = 2;
  auto loader = Loader::Create(samples, o).value();
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    ASSERT_TRUE(loader->StartEpoch(epoch).ok());
    ASSERT_TRUE(loader->QueueEpoch(epoch + 1).ok());
    EXPECT_EQ(Drain(*loader), Fresh(samples, o, epoch)) << "epoch " << epoch;
  }
  const LoaderStats s = loader->Stats();
  EXPECT_EQ(s.epochs_adopted, 3);
  // The consumer holds one batch at a time: prefetch_batches slots for the pipeline (both
  // epochs together) plus the one it holds.
  EXPECT_LE(s.slots_allocated, o.prefetch_batches + 1);
  loader->Stop();  // with epoch 4 queued and decoding
  EXPECT_FALSE(loader->HasQueuedEpoch());
}

TEST(EpochOverlapTest, AnythingButTheQueuedEpochCancelsIt) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 14);
  const LoaderOptions o = Options();
  auto loader = Loader::Create(samples, o).value();

  // Another epoch (set_epoch).
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(loader->QueueEpoch(1).ok());
  Drain(*loader);
  ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead > 0; }));
  ASSERT_TRUE(loader->StartEpoch(2).ok());
  EXPECT_FALSE(loader->HasQueuedEpoch());
  EXPECT_EQ(Drain(*loader), Fresh(samples, o, 2));
  EXPECT_EQ(loader->Stats().epochs_adopted, 0);
  EXPECT_EQ(loader->Stats().samples, 28) << "cancelled work is not counted";

  // The queued epoch, resumed from a later batch (load_state_dict): delivered from that batch,
  // decoded afresh.
  ASSERT_TRUE(loader->QueueEpoch(3).ok());  // epoch 2 is done: the queued one starts at once
  ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead >= 8; }));
  ASSERT_TRUE(loader->StartEpoch(3, 1).ok());
  Delivered resumed = Drain(*loader);
  EXPECT_EQ(resumed.numbers, (std::vector<int64_t>{1, 2, 3}));
  Delivered whole = Fresh(samples, o, 3);
  const size_t skip_bytes = whole.bytes.size() / 14 * 4;
  EXPECT_TRUE(std::equal(resumed.bytes.begin(), resumed.bytes.end(), whole.bytes.begin() + skip_bytes));
  EXPECT_EQ(loader->Stats().epochs_adopted, 0);

  // An explicit order that differs from the queued one only in its seed.
  std::vector<int64_t> order(14), offsets{0, 4, 8, 12, 14};
  for (int i = 0; i < 14; ++i) order[i] = 13 - i;
  ASSERT_TRUE(loader->QueueEpoch(4, 99, order, offsets).ok());
  ASSERT_TRUE(loader->StartEpoch(4, 100, order, offsets).ok());
  Delivered other_seed = Drain(*loader);
  EXPECT_EQ(loader->Stats().epochs_adopted, 0);
  // ... and the same order and seed is adopted.
  ASSERT_TRUE(loader->QueueEpoch(4, 99, order, offsets).ok());
  ASSERT_TRUE(loader->StartEpoch(4, 99, order, offsets).ok());
  Delivered same_seed = Drain(*loader);
  EXPECT_EQ(loader->Stats().epochs_adopted, 1);
  EXPECT_EQ(same_seed.indices, order);
  EXPECT_EQ(other_seed.indices, order);
  EXPECT_NE(same_seed.bytes, other_seed.bytes) << "the seed shapes the augmentation";

  // CancelQueued, and bad queued orders are refused with the reason.
  ASSERT_TRUE(loader->QueueEpoch(5).ok());
  loader->CancelQueued();
  EXPECT_FALSE(loader->HasQueuedEpoch());
  EXPECT_TRUE(absl::IsOutOfRange(loader->QueueEpoch(6, 0, {0, 99}, {0, 2})));
  EXPECT_TRUE(absl::IsInvalidArgument(loader->QueueEpoch(6, 0, {0, 1}, {0, 1})));
  EXPECT_FALSE(loader->HasQueuedEpoch());
}

TEST(EpochOverlapTest, ErrorsOfTheQueuedEpochArriveAtTheirBatchAfterAdoption) {
  const std::string dir = testing::MakeTempDir();
  std::vector<Sample> samples = testing::WriteJpegDataset(dir, 12);
  samples[6].path = dir + "/missing.jpg";  // batch 1 of a sequential epoch
  LoaderOptions o = Options();
  o.shuffle = false;
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(loader->QueueEpoch(1).ok());
  const Delivered first = Drain(*loader);
  ASSERT_EQ(first.errors.size(), 1u);
  // Batches 0-2 decoded ahead (11 good samples, the bad one met): not counted until adopted.
  ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead >= 11; }));
  EXPECT_EQ(loader->Stats().errors, 1);
  ASSERT_TRUE(loader->StartEpoch(1).ok());
  EXPECT_EQ(loader->Stats().errors, 2);
  const Delivered second = Drain(*loader);
  EXPECT_EQ(second.numbers, (std::vector<int64_t>{0, 2}));
  ASSERT_EQ(second.errors.size(), 1u);
  EXPECT_EQ(second.errors[0].rfind("batch 1: sample 6 (", 0), 0u) << second.errors[0];
  EXPECT_EQ(second, Fresh(samples, o, 1));

  // kSkip and kReplace decide the same way ahead of time as on time.
  for (ErrorPolicy policy : {ErrorPolicy::kSkip, ErrorPolicy::kReplace}) {
    o.on_error = policy;
    auto l = Loader::Create(samples, o).value();
    ASSERT_TRUE(l->StartEpoch(0).ok());
    ASSERT_TRUE(l->QueueEpoch(1).ok());
    Drain(*l);
    ASSERT_TRUE(l->StartEpoch(1).ok());
    EXPECT_EQ(Drain(*l), Fresh(samples, o, 1)) << static_cast<int>(policy);
    EXPECT_EQ(l->Stats().epochs_adopted, 1);
  }
}

TEST(EpochOverlapTest, StopAndDestructionWithQueuedWorkInFlight) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 16);
  const LoaderOptions o = Options();
  for (int round = 0; round < 4; ++round) {
    auto loader = Loader::Create(samples, o).value();
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    ASSERT_TRUE(loader->QueueEpoch(1).ok());
    // Stop at different points: before, around and after the hand-off.
    for (int b = 0; b < round; ++b) ASSERT_TRUE(loader->Next(20.0).ok());
    if (round == 3) {
      Drain(*loader);
      ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead > 0; }));
    }
    if (round % 2 == 0) {
      loader->Stop();
      EXPECT_FALSE(loader->HasQueuedEpoch());
      EXPECT_TRUE(absl::IsFailedPrecondition(loader->Next().status()));
      // A fresh start after a stop is unaffected by the cancelled work.
      ASSERT_TRUE(loader->StartEpoch(1).ok());
      EXPECT_EQ(Drain(*loader), Fresh(samples, o, 1));
    }
    // odd rounds: the loader is destroyed with both epochs running
  }
  // Queued with no epoch in progress: starts at once, and is adopted.
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->QueueEpoch(3).ok());
  ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead >= 12; }));
  ASSERT_TRUE(loader->StartEpoch(3).ok());
  EXPECT_EQ(Drain(*loader), Fresh(samples, o, 3));
  EXPECT_EQ(loader->Stats().epochs_adopted, 1);
}

TEST(EpochOverlapTest, HeldBatchesOfTheCurrentEpochNeverStallIt) {
  // The consumer keeps every batch of epoch 0 (list(loader)); the queued epoch may only use
  // slots the pipeline is entitled to, so epoch 0 completes and epoch 1 is adopted afterwards.
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 20);
  LoaderOptions o = Options();
  o.prefetch_batches = 2;
  o.max_slots = 8;
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(loader->QueueEpoch(1).ok());
  std::vector<Batch> kept;
  for (int b = 0; b < 5; ++b) {
    absl::StatusOr<Batch> batch = loader->Next(20.0);
    ASSERT_TRUE(batch.ok()) << batch.status();
    kept.push_back(*batch);
  }
  EXPECT_TRUE(absl::IsOutOfRange(loader->Next(20.0).status()));
  EXPECT_LE(loader->Stats().slots_allocated, 8);
  kept.clear();
  ASSERT_TRUE(loader->StartEpoch(1).ok());
  EXPECT_EQ(Drain(*loader), Fresh(samples, o, 1));
  EXPECT_EQ(loader->Stats().epochs_adopted, 1);
}

TEST(EpochOverlapTest, QueuedEpochReadsNoFurtherThanItsDepthBeforeAdoption) {
  // The consumer held 5 batches of epoch 0, so 7 or 8 slots exist; once it lets them go, all
  // are free.
  // The queued epoch still reads only its depth (prefetch_batches) before it is adopted: what
  // its caller checked for changed files. A file past the depth rewritten before adoption is
  // delivered as it is then.
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 40);  // 10 batches
  LoaderOptions o = Options();
  o.shuffle = false;  // epoch 1's batch 4 is samples 16-19
  o.prefetch_batches = 2;
  o.max_slots = 8;
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(loader->QueueEpoch(1).ok());
  {
    std::vector<Batch> kept;
    while (true) {
      absl::StatusOr<Batch> batch = loader->Next(20.0);
      if (absl::IsOutOfRange(batch.status())) break;
      ASSERT_TRUE(batch.ok()) << batch.status();
      kept.push_back(*batch);
      if (kept.size() > 5) kept.erase(kept.begin());
    }
    ASSERT_GE(loader->Stats().slots_allocated, 7);
  }
  const int depth_rows = o.prefetch_batches * o.batch_size;
  ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead >= depth_rows; }));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(loader->Stats().samples_ahead, depth_rows) << "read ahead past its depth";

  testing::JpegFlavor other;
  other.width = 150;
  other.height = 130;
  other.seed = 777;
  testing::WriteFile(samples[17].path, testing::EncodeJpeg(other));
  ASSERT_TRUE(loader->StartEpoch(1).ok());
  EXPECT_EQ(Drain(*loader), Fresh(samples, o, 1)) << "batch 4 has the rewritten file's pixels";
  EXPECT_EQ(loader->Stats().epochs_adopted, 1);
  EXPECT_EQ(loader->Stats().samples, 80) << "nothing decoded twice";
}

TEST(EpochOverlapTest, ASubstituteReadAheadWhoseFileChangedIsReadAgain) {
  // kReplace draws a substitute from anywhere in the dataset: a queued epoch may read a file
  // past its depth for it. When that file changes before StartEpoch, the epoch is not adopted.
  const std::string dir = testing::MakeTempDir();
  std::vector<Sample> samples = testing::WriteJpegDataset(dir, 40);
  samples[1].path = dir + "/missing.jpg";  // row 1 of batch 0: replaced
  LoaderOptions o = Options();
  o.shuffle = false;
  o.prefetch_batches = 2;
  o.on_error = ErrorPolicy::kReplace;
  const int64_t substitute = Fresh(samples, o, 1).indices[1];
  ASSERT_GE(substitute, o.prefetch_batches * o.batch_size) << "a substitute past the depth";
  for (bool change : {false, true}) {
    auto loader = Loader::Create(samples, o).value();
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    ASSERT_TRUE(loader->QueueEpoch(1).ok());
    Drain(*loader);
    ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead >= o.prefetch_batches * o.batch_size; }));
    if (change) {
      testing::JpegFlavor other;
      other.seed = 4242;
      testing::WriteFile(samples[static_cast<size_t>(substitute)].path, testing::EncodeJpeg(other));
    }
    ASSERT_TRUE(loader->StartEpoch(1).ok());
    EXPECT_EQ(Drain(*loader), Fresh(samples, o, 1)) << "change " << change;
    EXPECT_EQ(loader->Stats().epochs_adopted, change ? 0 : 1);
  }
}

TEST(EpochOverlapTest, AdoptedBeforeTheCurrentEpochDispatchedEverything) {
  // The consumer leaves epoch 0 early (its dispatcher still waits for slots): the queued epoch
  // never started, and StartEpoch(1) starts and adopts it.
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 40);  // 10 batches
  LoaderOptions o = Options();
  o.prefetch_batches = 2;
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(loader->QueueEpoch(1).ok());
  ASSERT_TRUE(loader->Next(20.0).ok());
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(loader->Stats().samples_ahead, 0) << "epoch 0 has batches left to dispatch";
  ASSERT_TRUE(loader->StartEpoch(1).ok());
  EXPECT_EQ(Drain(*loader), Fresh(samples, o, 1));
  EXPECT_EQ(loader->Stats().epochs_adopted, 1);
}

TEST(EpochOverlapTest, DevicePathStagesTheAdoptedEpochOnlyAfterAdoption) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 14);
  LoaderOptions o = Options();
  auto sim = std::make_shared<SimulatedDevice>();
  o.device_runtime = sim;
  absl::StatusOr<DeviceRuntime::Stream> consumer = sim->CreateStream();
  ASSERT_TRUE(consumer.ok());
  auto read = [&](const Batch& b) {
    const size_t bytes = b.size() * b.sample_bytes();
    std::vector<uint8_t> out(bytes);
    EXPECT_TRUE(b.device_lease()->WaitOn(reinterpret_cast<intptr_t>(*consumer)).ok());
    const void* src = b.device_images();
    sim->Launch(*consumer, [&out, src, bytes] { std::memcpy(out.data(), src, bytes); });
    sim->SynchronizeStream(*consumer);
    return out;
  };
  auto epoch_bytes = [&](Loader& loader) {
    std::vector<uint8_t> all;
    while (true) {
      absl::StatusOr<Batch> b = loader.Next(20.0);
      if (absl::IsOutOfRange(b.status())) break;
      EXPECT_TRUE(b.ok()) << b.status();
      if (!b.ok()) break;
      std::vector<uint8_t> one = read(*b);
      all.insert(all.end(), one.begin(), one.end());
    }
    return all;
  };
  std::vector<uint8_t> reference;
  {
    auto fresh = Loader::Create(samples, o).value();
    ASSERT_TRUE(fresh->StartEpoch(1).ok());
    reference = epoch_bytes(*fresh);
  }
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  ASSERT_TRUE(loader->QueueEpoch(1).ok());
  EXPECT_EQ(epoch_bytes(*loader).size(), reference.size());
  ASSERT_TRUE(Eventually([&] { return loader->Stats().samples_ahead >= 12; }));
  ASSERT_TRUE(loader->StartEpoch(1).ok());
  EXPECT_EQ(epoch_bytes(*loader), reference);
  EXPECT_EQ(loader->Stats().epochs_adopted, 1);
  EXPECT_LE(loader->Stats().device_buffers, o.prefetch_batches + 1);
  loader->Stop();
  sim->DestroyStream(*consumer);
}

}  // namespace
}  // namespace ringloader
