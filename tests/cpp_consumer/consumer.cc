// Uses the installed C++ API the way an application would: usage: consumer IMAGE_FOLDER
// Exits non-zero with the failing check on stderr.

#include <cstring>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "check.h"
#include <ringloader/range.h>
#include <ringloader/ringloader.h>
#include <ringloader/transforms.h>

namespace {

std::vector<int64_t> EpochOrder(ringloader::Loader& loader, int64_t epoch, int64_t* batches) {
  std::vector<int64_t> order;
  RL_CHECK(loader.StartEpoch(epoch).ok());
  *batches = 0;
  while (true) {
    absl::StatusOr<ringloader::Batch> batch = loader.Next();
    if (absl::IsOutOfRange(batch.status())) break;
    RL_CHECK(batch.ok());
    RL_CHECK(batch->number() == *batches);
    ++*batches;
    for (int i = 0; i < batch->size(); ++i) order.push_back(batch->indices()[i]);
  }
  return order;
}

}  // namespace

int main(int argc, char** argv) {
  RL_CHECK(argc == 2);
  std::vector<std::string> classes;
  absl::StatusOr<std::vector<ringloader::Sample>> samples = ringloader::ScanImageFolder(argv[1], &classes);
  if (!samples.ok()) {
    std::cerr << samples.status() << "\n";
    return 1;
  }
  // Keep the run short whatever the folder holds.
  if (samples->size() > 48) samples->resize(48);
  const size_t n = samples->size();
  RL_CHECK(n >= 8);
  RL_CHECK(!classes.empty());

  ringloader::LoaderOptions options;
  options.batch_size = 8;
  options.num_workers = 2;
  options.shuffle = true;
  options.seed = 1;
  options.transform = ringloader::transforms::ImageNetTrain(64);
  auto loader = ringloader::Loader::Create(*samples, options);
  RL_CHECK(loader.ok());

  int64_t batches = 0;
  const std::vector<int64_t> e0 = EpochOrder(**loader, 0, &batches);
  RL_CHECK(batches == (**loader).BatchesPerEpoch());
  RL_CHECK(e0.size() == n);
  RL_CHECK(std::set<int64_t>(e0.begin(), e0.end()).size() == n);
  const std::vector<int64_t> e1 = EpochOrder(**loader, 1, &batches);
  RL_CHECK(e1 != e0);                                     // a new order each epoch
  RL_CHECK(EpochOrder(**loader, 0, &batches) == e0);      // ... deterministic in (seed, epoch)

  // The range-for form delivers the same epoch.
  std::vector<int64_t> ranged;
  for (ringloader::Batch& batch : ringloader::EpochBatches(**loader, 1)) {
    for (int i = 0; i < batch.size(); ++i) ranged.push_back(batch.indices()[i]);
  }
  RL_CHECK(ranged == e1);

  // A held batch stays valid after its loader is gone.
  ringloader::Batch kept;
  std::vector<unsigned char> copy;
  {
    auto second = ringloader::Loader::Create(*samples, options);
    RL_CHECK(second.ok());
    RL_CHECK((*second)->StartEpoch(0).ok());
    absl::StatusOr<ringloader::Batch> batch = (*second)->Next();
    RL_CHECK(batch.ok());
    kept = *batch;
    RL_CHECK(kept.image_shape() == (std::vector<int64_t>{8, 3, 64, 64}));
    const auto* p = static_cast<const unsigned char*>(kept.images());
    copy.assign(p, p + kept.size() * kept.sample_bytes());
  }
  RL_CHECK(std::memcmp(kept.images(), copy.data(), copy.size()) == 0);

  // Errors are statuses.
  RL_CHECK(absl::IsNotFound(ringloader::ScanImageFolder("/nonexistent/ringloader").status()));
  options.batch_size = 0;
  absl::StatusOr<std::unique_ptr<ringloader::Loader>> bad = ringloader::Loader::Create(*samples, options);
  RL_CHECK(absl::IsInvalidArgument(bad.status()));
  RL_CHECK(bad.status().message().find("batch_size") != absl::string_view::npos);

  std::cout << "consumer: OK (" << n << " samples, " << classes.size() << " classes, io "
            << (*loader)->Stats().io_backend << ")\n";
  return 0;
}
