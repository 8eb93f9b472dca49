// The installed API through its one umbrella header: usage: api_only IMAGE_FOLDER
// Includes <ringloader/ringloader.h> and nothing else of ringloader's, so it fails to compile if
// that header needs anything that is not installed, or if a type the API hands out (options,
// transform steps, batches, stats) is reachable only through another header.

#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "check.h"
#include <ringloader/ringloader.h>

int main(int argc, char** argv) {
  RL_CHECK(argc == 2);
  absl::StatusOr<std::vector<ringloader::Sample>> samples = ringloader::ScanImageFolder(argv[1]);
  if (!samples.ok()) {
    std::cerr << samples.status() << "\n";
    return 1;
  }
  if (samples->size() > 24) samples->resize(24);
  RL_CHECK(samples->size() >= 8);

  // A chain written with the public step types alone (ringloader/transforms.h not included).
  ringloader::ResizeParams resize;
  resize.size_h = 40;
  resize.size_w = 32;
  resize.interpolation = ringloader::Interpolation::kBicubic;
  ringloader::LoaderOptions options;
  options.batch_size = 8;
  options.num_workers = 1;
  options.io = ringloader::IoBackend::kPread;
  options.dtype = ringloader::DType::kUint8;
  options.layout = ringloader::Layout::kHWC;
  options.transform = {resize};
  absl::StatusOr<std::unique_ptr<ringloader::Loader>> loader = ringloader::Loader::Create(*samples, options);
  if (!loader.ok()) {
    std::cerr << loader.status() << "\n";
    return 1;
  }
  ringloader::Loader& l = **loader;
  RL_CHECK(l.output_height() == 40 && l.output_width() == 32);
  RL_CHECK(l.dtype() == ringloader::DType::kUint8 && l.layout() == ringloader::Layout::kHWC);
  RL_CHECK(l.sample_bytes() == size_t{40} * 32 * 3);
  RL_CHECK(l.DescribeTransform().find("Resize") != std::string::npos);

  RL_CHECK(l.StartEpoch(0).ok());
  int64_t rows = 0;
  while (true) {
    absl::StatusOr<ringloader::Batch> batch = l.Next();
    if (ringloader::IsEndOfEpoch(batch.status())) break;
    RL_CHECK(batch.ok());
    RL_CHECK((batch->image_shape() == std::vector<int64_t>{batch->size(), 40, 32, 3}));
    RL_CHECK(batch->sample_bytes() == l.sample_bytes());
    // The batch equals the same samples decoded one at a time.
    std::vector<uint8_t> one(l.sample_bytes());
    RL_CHECK(l.DecodeSample(batch->indices()[0], l.options().seed, 0, one.data()).ok());
    RL_CHECK(std::memcmp(one.data(), batch->images(), one.size()) == 0);
    rows += batch->size();
  }
  RL_CHECK(rows == l.dataset_size());
  const ringloader::LoaderStats stats = l.Stats();
  RL_CHECK(stats.samples == rows);
  RL_CHECK(stats.io_backend == "pread");
  std::cout << "api_only: " << rows << " samples through <ringloader/ringloader.h> alone\n";
  return 0;
}
