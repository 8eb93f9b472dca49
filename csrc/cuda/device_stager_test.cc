// The device stager and the loader's device path, on the simulated device: the same staging
// code that runs on CUDA, with copies that can be held back so every ordering is deterministic.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

#include "cuda/device_runtime.h"
#include "cuda/device_stager.h"
#include "ringloader/ringloader.h"
#include "ringloader/transforms.h"
#include "testing/jpeg_fixtures.h"
#include "testing/simulated_device.h"

namespace ringloader {
namespace {

using namespace std::chrono_literals;

// Polls `done` for up to 10 s (copies complete on other threads).
template <typename F>
bool Eventually(F done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return done();
}

// A consumer's view of a staged buffer, the way a CUDA consumer gets it: its stream waits for the
// copy (no host sync), then a "kernel" on that stream reads the bytes.
std::vector<uint8_t> ReadOnStream(SimulatedDevice& sim, DeviceRuntime::Stream stream, DeviceLease& lease,
                                  size_t bytes) {
  std::vector<uint8_t> out(bytes);
  EXPECT_TRUE(lease.WaitOn(reinterpret_cast<intptr_t>(stream)).ok());
  const void* src = lease.data();
  sim.Launch(stream, [&out, src, bytes] { std::memcpy(out.data(), src, bytes); });
  sim.SynchronizeStream(stream);
  return out;
}

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7);
  return v;
}

// A host owner that records when the stager lets go of it (the host slot's return).
std::shared_ptr<void> Owner(std::atomic<int>* released) {
  return std::shared_ptr<void>(nullptr, [released](void*) { released->fetch_add(1); });
}

struct Fixture {
  std::shared_ptr<SimulatedDevice> sim = std::make_shared<SimulatedDevice>();
  DeviceRuntime::Stream consumer = sim->CreateStream().value();
};

// ---- the stager -------------------------------------------------------------------------------

TEST(DeviceStagerTest, HostSlotReturnsOnlyAfterItsCopyCompleted) {
  Fixture f;
  auto stager = MakeDeviceStager(f.sim, 4096, 2).value();
  const std::vector<uint8_t> src = Pattern(4096, 1);
  std::atomic<int> released{0};
  f.sim->HoldCopies();
  std::shared_ptr<DeviceLease> lease = stager->Stage(src.data(), src.size(), Owner(&released)).value();
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(lease->CopyDone());
  EXPECT_EQ(released.load(), 0) << "the host slot was released while its copy was still pending";
  EXPECT_EQ(stager->bytes_copied(), 0);
  f.sim->ReleaseCopies();
  ASSERT_TRUE(Eventually([&] { return released.load() == 1; }));
  EXPECT_TRUE(lease->CopyDone());
  EXPECT_EQ(stager->bytes_copied(), 4096);
  EXPECT_EQ(ReadOnStream(*f.sim, f.consumer, *lease, src.size()), src);
}

TEST(DeviceStagerTest, ConsumerStreamWaitsForTheCopyOnTheDeviceNotTheHost) {
  Fixture f;
  auto stager = MakeDeviceStager(f.sim, 1024, 2).value();
  const std::vector<uint8_t> src = Pattern(1024, 3);
  std::atomic<int> released{0};
  f.sim->HoldCopies();
  std::shared_ptr<DeviceLease> lease = stager->Stage(src.data(), src.size(), Owner(&released)).value();

  // WaitOn returns at once (the host is not blocked); the kernel queued after it waits.
  ASSERT_TRUE(lease->WaitOn(reinterpret_cast<intptr_t>(f.consumer)).ok());
  std::vector<uint8_t> seen(src.size());
  std::atomic<bool> ran{false};
  const void* dev = lease->data();
  f.sim->Launch(f.consumer, [&] {
    std::memcpy(seen.data(), dev, seen.size());
    ran = true;
  });
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(ran.load()) << "a kernel after WaitOn ran before the copy";
  f.sim->ReleaseCopies();
  f.sim->SynchronizeStream(f.consumer);
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(seen, src);
}

TEST(DeviceStagerTest, WithoutWaitOnAKernelSeesAnIncompleteBuffer) {
  // The control for the test above: the simulated device does reorder unsynchronised work.
  Fixture f;
  auto stager = MakeDeviceStager(f.sim, 256, 1).value();
  const std::vector<uint8_t> src = Pattern(256, 5);
  std::atomic<int> released{0};
  f.sim->HoldCopies();
  std::shared_ptr<DeviceLease> lease = stager->Stage(src.data(), src.size(), Owner(&released)).value();
  std::vector<uint8_t> seen(src.size());
  const void* dev = lease->data();
  f.sim->Launch(f.consumer, [&] { std::memcpy(seen.data(), dev, seen.size()); });
  f.sim->SynchronizeStream(f.consumer);
  EXPECT_NE(seen, src);
  f.sim->ReleaseCopies();
  ASSERT_TRUE(Eventually([&] { return released.load() == 1; }));  // `src` must outlive the copy
}

TEST(DeviceStagerTest, ReusedBufferIsNotOverwrittenWhileTheConsumerStillReadsIt) {
  Fixture f;
  auto stager = MakeDeviceStager(f.sim, 512, 1).value();  // one buffer: every copy reuses it
  const std::vector<uint8_t> a = Pattern(512, 10), b = Pattern(512, 20);
  std::atomic<int> released{0};
  std::shared_ptr<DeviceLease> first = stager->Stage(a.data(), a.size(), Owner(&released)).value();
  ASSERT_TRUE(first->WaitOn(reinterpret_cast<intptr_t>(f.consumer)).ok());

  // A slow consumer kernel: it reads the buffer only when the test opens the gate.
  std::promise<void> gate;
  std::shared_future<void> opened = gate.get_future().share();
  std::vector<uint8_t> seen(a.size());
  const void* dev = first->data();
  f.sim->Launch(f.consumer, [&, opened] {
    opened.wait();
    std::memcpy(seen.data(), dev, seen.size());
  });
  first.reset();  // the tensor is freed while its kernel is still queued
  ASSERT_TRUE(stager->WaitForFreeBuffer(5s));  // free once its copy is seen complete
  std::shared_ptr<DeviceLease> second = stager->Stage(b.data(), b.size(), Owner(&released)).value();
  EXPECT_EQ(second->data(), dev);
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(second->CopyDone()) << "the copy overtook the consumer's release";
  gate.set_value();
  f.sim->SynchronizeStream(f.consumer);
  EXPECT_EQ(seen, a) << "the consumer's kernel saw the next batch";
  EXPECT_EQ(ReadOnStream(*f.sim, f.consumer, *second, b.size()), b);
}

TEST(DeviceStagerTest, RingIsBoundedAndAFreedBufferWakesTheWaiter) {
  Fixture f;
  auto stager = MakeDeviceStager(f.sim, 128, 2).value();
  const std::vector<uint8_t> src = Pattern(128, 1);
  std::atomic<int> released{0};
  auto one = stager->Stage(src.data(), src.size(), Owner(&released)).value();
  auto two = stager->Stage(src.data(), src.size(), Owner(&released)).value();
  EXPECT_EQ(stager->buffers_held(), 2);
  EXPECT_FALSE(stager->HasFreeBuffer());
  EXPECT_FALSE(stager->WaitForFreeBuffer(10ms));
  absl::StatusOr<std::shared_ptr<DeviceLease>> three = stager->Stage(src.data(), src.size(), Owner(&released));
  ASSERT_TRUE(absl::IsResourceExhausted(three.status())) << three.status();
  EXPECT_NE(three.status().message().find("prefetch_factor"), std::string::npos);
  std::thread drop([&] {
    std::this_thread::sleep_for(30ms);
    one.reset();
  });
  EXPECT_TRUE(stager->WaitForFreeBuffer(5s));
  drop.join();
  EXPECT_EQ(stager->buffers_allocated(), 2);
  EXPECT_EQ(f.sim->live_allocations(), 2);
  ASSERT_TRUE(Eventually([&] { return released.load() == 3; }));  // the refused one too
}

TEST(DeviceStagerTest, DeviceErrorsNameTheCallAndLeakNothing) {
  Fixture f;
  auto stager = MakeDeviceStager(f.sim, 64, 1).value();
  const std::vector<uint8_t> src = Pattern(64, 9);
  std::atomic<int> released{0};

  f.sim->FailNext("Malloc");
  absl::StatusOr<std::shared_ptr<DeviceLease>> failed = stager->Stage(src.data(), src.size(), Owner(&released));
  ASSERT_TRUE(absl::IsInternal(failed.status())) << failed.status();
  EXPECT_NE(failed.status().message().find("Malloc"), std::string::npos);
  EXPECT_EQ(stager->buffers_allocated(), 0);
  EXPECT_EQ(stager->buffers_held(), 0);
  EXPECT_EQ(released.load(), 1);  // the host slot is not kept by a failed stage

  f.sim->FailNext("CopyToDeviceAsync");
  failed = stager->Stage(src.data(), src.size(), Owner(&released));
  ASSERT_TRUE(absl::IsInternal(failed.status())) << failed.status();
  EXPECT_NE(failed.status().message().find("CopyToDeviceAsync"), std::string::npos);
  EXPECT_EQ(stager->buffers_held(), 0);
  EXPECT_TRUE(stager->HasFreeBuffer());

  auto ok = stager->Stage(src.data(), src.size(), Owner(&released)).value();  // and it recovers
  EXPECT_EQ(ReadOnStream(*f.sim, f.consumer, *ok, src.size()), src);

  EXPECT_TRUE(absl::IsInvalidArgument(stager->Stage(src.data(), 65, Owner(&released)).status()));
  f.sim->FailNext("CreateStream");
  EXPECT_TRUE(absl::IsInternal(MakeDeviceStager(f.sim, 64, 1).status()));
}

TEST(DeviceStagerTest, DroppingEverythingWithCopiesInFlightDrainsAndFreesAll) {
  auto sim = std::make_shared<SimulatedDevice>();
  sim->set_copy_delay(5ms);
  std::atomic<int> released{0};
  std::vector<std::vector<uint8_t>> sources;
  for (int i = 0; i < 4; ++i) sources.push_back(Pattern(2048, static_cast<uint8_t>(i)));
  {
    auto stager = MakeDeviceStager(sim, 2048, 4).value();
    std::vector<std::shared_ptr<DeviceLease>> leases;
    for (const auto& src : sources) leases.push_back(stager->Stage(src.data(), src.size(), Owner(&released)).value());
    EXPECT_LT(sim->copies_done(), 4);  // still copying when everything is dropped
  }
  EXPECT_EQ(released.load(), 4);  // every host slot came back, after its copy
  EXPECT_EQ(sim->copies_done(), 4);
  EXPECT_EQ(sim->live_allocations(), 0);
  EXPECT_EQ(sim->live_events(), 0);
  EXPECT_EQ(sim->live_streams(), 0);
}

// ---- the loader's device path -------------------------------------------------------------------

LoaderOptions SmallOptions() {
  LoaderOptions o;
  o.batch_size = 4;
  o.num_workers = 2;
  o.prefetch_batches = 2;
  o.io_depth = 4;
  o.transform = {transforms::RandomResizedCrop(32), transforms::RandomHorizontalFlip(), transforms::ToTensor()};
  o.shuffle = true;
  o.seed = 17;
  return o;
}

struct HostBatch {
  int64_t number;
  std::vector<uint8_t> images;
  std::vector<int64_t> labels, indices;
};

std::vector<HostBatch> HostEpoch(const std::vector<Sample>& samples, LoaderOptions o) {
  auto loader = Loader::Create(samples, o).value();
  EXPECT_TRUE(loader->StartEpoch(0).ok());
  std::vector<HostBatch> out;
  while (true) {
    absl::StatusOr<Batch> b = loader->Next();
    if (absl::IsOutOfRange(b.status())) break;
    EXPECT_TRUE(b.ok()) << b.status();
    if (!b.ok()) break;
    auto* img = static_cast<const uint8_t*>(b->images());
    out.push_back(HostBatch{b->number(), {img, img + b->size() * b->sample_bytes()},
                            {b->labels(), b->labels() + b->size()},
                            {b->indices(), b->indices() + b->size()}});
  }
  return out;
}

// Reads a device batch back through a consumer stream, as HostBatch.
HostBatch ReadBatch(SimulatedDevice& sim, DeviceRuntime::Stream stream, const Batch& b) {
  const size_t image_bytes = b.size() * b.sample_bytes();
  const auto* base = static_cast<const uint8_t*>(b.device_images());
  const size_t labels_offset = reinterpret_cast<const uint8_t*>(b.device_labels()) - base;
  const size_t indices_offset = reinterpret_cast<const uint8_t*>(b.device_indices()) - base;
  std::vector<uint8_t> all = ReadOnStream(sim, stream, *b.device_lease(), indices_offset + b.size() * 8);
  HostBatch out{b.number(), {all.begin(), all.begin() + image_bytes}, {}, {}};
  out.labels.resize(b.size());
  out.indices.resize(b.size());
  std::memcpy(out.labels.data(), all.data() + labels_offset, b.size() * 8);
  std::memcpy(out.indices.data(), all.data() + indices_offset, b.size() * 8);
  return out;
}

TEST(DevicePathTest, DeviceBatchesEqualHostBatchesBitForBit) {
  const std::string dir = testing::MakeTempDir();
  std::vector<Sample> samples = testing::WriteJpegDataset(dir, 22);
  // Two unreadable samples: with kSkip the batch is compacted before its copy.
  samples[5].path = dir + "/missing.jpg";
  samples[13].path = dir + "/missing_too.jpg";
  LoaderOptions o = SmallOptions();
  o.on_error = ErrorPolicy::kSkip;
  const std::vector<HostBatch> host = HostEpoch(samples, o);

  Fixture f;
  o.device_runtime = f.sim;
  auto loader = Loader::Create(samples, o).value();
  EXPECT_EQ(loader->Stats().device, "simulated:0");
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  std::vector<HostBatch> device;
  while (true) {
    absl::StatusOr<Batch> b = loader->Next();
    if (absl::IsOutOfRange(b.status())) break;
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->device(), 0);
    EXPECT_EQ(b->images(), nullptr);  // the host slot is recycled: no host view
    device.push_back(ReadBatch(*f.sim, f.consumer, *b));
    // Labels and indices are also on the host, equal to the device's.
    EXPECT_EQ(std::vector<int64_t>(b->labels(), b->labels() + b->size()), device.back().labels);
    EXPECT_EQ(std::vector<int64_t>(b->indices(), b->indices() + b->size()), device.back().indices);
  }
  ASSERT_EQ(device.size(), host.size());
  int64_t samples_seen = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    EXPECT_EQ(device[i].number, host[i].number);
    EXPECT_EQ(device[i].indices, host[i].indices) << "batch " << i;
    EXPECT_EQ(device[i].labels, host[i].labels) << "batch " << i;
    EXPECT_TRUE(device[i].images == host[i].images) << "batch " << i;
    samples_seen += static_cast<int64_t>(host[i].indices.size());
  }
  EXPECT_EQ(samples_seen, 20);
  EXPECT_EQ(loader->Stats().skipped, 2);
}

TEST(DevicePathTest, BatchErrorsArriveInOrderAndTheEpochContinues) {
  const std::string dir = testing::MakeTempDir();
  std::vector<Sample> samples = testing::WriteJpegDataset(dir, 12);
  samples[6].path = dir + "/gone.jpg";
  LoaderOptions o = SmallOptions();
  o.shuffle = false;
  Fixture f;
  o.device_runtime = f.sim;
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  EXPECT_EQ(loader->Next().value().number(), 0);
  absl::StatusOr<Batch> bad = loader->Next();
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gone.jpg"), std::string::npos) << bad.status();
  EXPECT_EQ(loader->next_batch(), 2);
  EXPECT_EQ(loader->Next().value().number(), 2);
  EXPECT_TRUE(absl::IsOutOfRange(loader->Next().status()));
}

TEST(DevicePathTest, CopiesRunAheadOfASlowConsumer) {
  // The training step is slower than the loader: each batch must already be on the device when
  // the step asks for it, so next() returns a batch whose copy is complete.
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 24);
  LoaderOptions o = SmallOptions();
  Fixture f;
  o.device_runtime = f.sim;
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  int ready_at_next = 0, batches = 0;
  while (true) {
    absl::StatusOr<Batch> b = loader->Next();
    if (absl::IsOutOfRange(b.status())) break;
    ASSERT_TRUE(b.ok()) << b.status();
    if (batches++ > 0 && b->device_lease()->CopyDone()) ++ready_at_next;
    std::this_thread::sleep_for(150ms);  // the step
  }
  EXPECT_EQ(batches, 6);
  EXPECT_EQ(ready_at_next, batches - 1);
  const LoaderStats s = loader->Stats();
  EXPECT_LE(s.device_buffers, o.prefetch_batches + 1);
  EXPECT_EQ(s.device_bytes, static_cast<int64_t>(batches) * static_cast<int64_t>(f.sim->peak_bytes() / s.device_buffers));
}

TEST(DevicePathTest, MemoryStaysBoundedOver1000Batches) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 16);
  LoaderOptions o = SmallOptions();
  o.batch_size = 2;
  Fixture f;
  o.device_runtime = f.sim;
  auto loader = Loader::Create(samples, o).value();
  int64_t batches = 0;
  for (int64_t epoch = 0; batches < 1000; ++epoch) {
    const absl::Status started = loader->StartEpoch(epoch);
    ASSERT_TRUE(started.ok()) << started;
    while (true) {
      absl::StatusOr<Batch> b = loader->Next();
      if (absl::IsOutOfRange(b.status())) break;
      ASSERT_TRUE(b.ok()) << b.status();
      ++batches;
    }
  }
  // Device memory: the ring, never more. Host slots: the pipeline's own (prefetch_batches) plus
  // one per buffer whose copy is in flight.
  const LoaderStats s = loader->Stats();
  EXPECT_GE(s.batches, 1000);
  const int64_t buffer_bytes = f.sim->peak_bytes() / std::max(1, s.device_buffers);
  EXPECT_LE(s.device_buffers, o.prefetch_batches + 1);
  EXPECT_EQ(f.sim->live_allocations(), s.device_buffers);
  EXPECT_EQ(f.sim->peak_bytes(), s.device_buffers * buffer_bytes);
  EXPECT_EQ(f.sim->live_bytes(), f.sim->peak_bytes());
  EXPECT_LE(s.slots_allocated, 2 * o.prefetch_batches + 1);
}

TEST(DevicePathTest, HoldingEveryDeviceBufferIsAnErrorNotAHangAndLosesNothing) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 20);
  LoaderOptions o = SmallOptions();
  o.prefetch_batches = 1;  // two device buffers
  Fixture f;
  o.device_runtime = f.sim;
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  std::vector<Batch> held;
  held.push_back(loader->Next().value());
  held.push_back(loader->Next().value());
  absl::StatusOr<Batch> refused = loader->Next(/*timeout_seconds=*/30);
  ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("device buffers"), std::string::npos);
  EXPECT_EQ(loader->next_batch(), 2);
  held.erase(held.begin());  // free one batch's tensors
  std::vector<int64_t> numbers;
  while (true) {
    absl::StatusOr<Batch> b = loader->Next();
    if (absl::IsOutOfRange(b.status())) break;
    ASSERT_TRUE(b.ok()) << b.status();
    numbers.push_back(b->number());
    held.clear();
    held.push_back(*std::move(b));  // like `for x in loader`: one batch held at a time
  }
  EXPECT_EQ(numbers, (std::vector<int64_t>{2, 3, 4}));
}

TEST(DevicePathTest, StoppingWithCopiesInFlightIsClean) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 20);
  LoaderOptions o = SmallOptions();
  const std::vector<HostBatch> host = HostEpoch(samples, o);
  auto sim = std::make_shared<SimulatedDevice>();
  DeviceRuntime::Stream consumer = sim->CreateStream().value();
  o.device_runtime = sim;
  std::vector<Batch> kept;
  {
    auto loader = Loader::Create(samples, o).value();
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    kept.push_back(loader->Next().value());
    sim->HoldCopies();
    kept.push_back(loader->Next().value());  // may or may not have been copied yet
    ASSERT_TRUE(loader->StartEpoch(1).ok());  // restart mid-epoch with copies held
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(loader->StartEpoch(0).ok());
    // ...and destroy the loader with the copies still held.
  }
  sim->ReleaseCopies();
  // Batches taken before the loader went are intact and correct.
  for (size_t i = 0; i < kept.size(); ++i) {
    const HostBatch got = ReadBatch(*sim, consumer, kept[i]);
    EXPECT_EQ(got.indices, host[i].indices);
    EXPECT_TRUE(got.images == host[i].images) << "batch " << i;
  }
  kept.clear();  // the last lease goes: the stager drains and frees its buffers
  EXPECT_EQ(sim->live_allocations(), 0);
  EXPECT_EQ(sim->live_streams(), 1);  // only the test's consumer stream
  sim->DestroyStream(consumer);
}

TEST(DevicePathTest, ACopyErrorFailsItsBatchAndTheNextOneContinues) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 12);
  LoaderOptions o = SmallOptions();
  o.prefetch_batches = 1;
  Fixture f;
  o.device_runtime = f.sim;
  auto loader = Loader::Create(samples, o).value();
  f.sim->FailNext("CopyToDeviceAsync");  // the first batch's copy
  ASSERT_TRUE(loader->StartEpoch(0).ok());
  absl::StatusOr<Batch> failed = loader->Next();
  ASSERT_TRUE(absl::IsInternal(failed.status())) << failed.status();
  EXPECT_NE(failed.status().message().find("batch 0"), std::string::npos);
  EXPECT_NE(failed.status().message().find("CopyToDeviceAsync"), std::string::npos);
  EXPECT_EQ(loader->Next().value().number(), 1);
  EXPECT_EQ(loader->Next().value().number(), 2);
  EXPECT_TRUE(absl::IsOutOfRange(loader->Next().status()));
}

TEST(DevicePathTest, ResumeMidEpochOnTheDevicePath) {
  const std::string dir = testing::MakeTempDir();
  const std::vector<Sample> samples = testing::WriteJpegDataset(dir, 20);
  LoaderOptions o = SmallOptions();
  const std::vector<HostBatch> host = HostEpoch(samples, o);
  Fixture f;
  o.device_runtime = f.sim;
  auto loader = Loader::Create(samples, o).value();
  ASSERT_TRUE(loader->StartEpoch(0, /*first_batch=*/3).ok());
  std::vector<int64_t> numbers;
  while (true) {
    absl::StatusOr<Batch> b = loader->Next();
    if (absl::IsOutOfRange(b.status())) break;
    ASSERT_TRUE(b.ok()) << b.status();
    const HostBatch got = ReadBatch(*f.sim, f.consumer, *b);
    EXPECT_EQ(got.indices, host[static_cast<size_t>(b->number())].indices);
    EXPECT_TRUE(got.images == host[static_cast<size_t>(b->number())].images);
    numbers.push_back(b->number());
  }
  EXPECT_EQ(numbers, (std::vector<int64_t>{3, 4}));
}

}  // namespace
}  // namespace ringloader
