// ringloader::torch against the installed package: usage: torch_adaptor_test IMAGE_FOLDER

#include <ATen/ops/equal.h>
#include <ATen/ops/from_blob.h>

#include <cstring>
#include <iostream>
#include <vector>

#include "check.h"
#include <ringloader/ringloader.h>
#include <ringloader/torch.h>
#include <ringloader/transforms.h>

int main(int argc, char** argv) {
  RL_CHECK(argc == 2);
  auto samples = ringloader::ScanImageFolder(argv[1]);
  RL_CHECK(samples.ok());
  if (samples->size() > 24) samples->resize(24);

  ringloader::LoaderOptions options;
  options.batch_size = 6;
  options.num_workers = 2;
  options.transform = ringloader::transforms::ImageNetEval(32);
  at::Tensor images, labels;
  std::vector<float> expected_images;
  std::vector<int64_t> expected_labels;
  {
    auto loader = ringloader::Loader::Create(*samples, options);
    RL_CHECK(loader.ok());
    RL_CHECK((*loader)->StartEpoch(0).ok());
    {
      absl::StatusOr<ringloader::Batch> batch = (*loader)->Next();
      RL_CHECK(batch.ok());
      ringloader::BatchTensors t = ringloader::ToTensors(*batch);
      // Zero-copy views with the batch's shape, dtype and values.
      RL_CHECK(t.images.data_ptr() == batch->images());
      RL_CHECK(t.labels.data_ptr() == static_cast<void*>(batch->labels()));
      RL_CHECK(t.images.sizes().vec() == batch->image_shape());
      RL_CHECK(t.images.scalar_type() == at::kFloat);
      RL_CHECK(t.images.is_contiguous());
      RL_CHECK(t.labels.scalar_type() == at::kLong);
      RL_CHECK(t.labels.size(0) == batch->size());
      const auto* p = static_cast<const float*>(batch->images());
      expected_images.assign(p, p + batch->size() * batch->sample_bytes() / sizeof(float));
      expected_labels.assign(batch->labels(), batch->labels() + batch->size());
      for (int i = 0; i < batch->size(); ++i) RL_CHECK(t.labels[i].item<int64_t>() == expected_labels[i]);
      images = t.images;
      labels = t.labels;
      RL_CHECK((*loader)->Stats().slots_held == 1);
    }
    // The Batch is gone; the tensors still hold its slot.
    RL_CHECK((*loader)->Stats().slots_held == 1);
    {
      // Dropping one tensor keeps the slot (the other holds it); a view keeps it too.
      at::Tensor view = labels.slice(0, 0, 2);
      labels = at::Tensor();
      RL_CHECK((*loader)->Stats().slots_held == 1);
      RL_CHECK(view[1].item<int64_t>() == expected_labels[1]);
    }
    RL_CHECK((*loader)->Stats().slots_held == 1);
    at::Tensor released = images;
    images = at::Tensor();
    released = at::Tensor();
    RL_CHECK((*loader)->Stats().slots_held == 0);  // the last tensor released the slot

    // Again, and this time the tensors outlive the loader.
    RL_CHECK((*loader)->StartEpoch(0).ok());
    absl::StatusOr<ringloader::Batch> batch = (*loader)->Next();
    RL_CHECK(batch.ok());
    images = ringloader::ToTensors(*batch).images;
  }
  at::Tensor expected = at::from_blob(expected_images.data(), images.sizes(), at::kFloat);
  RL_CHECK(at::equal(images, expected));  // same (unshuffled, eval) batch 0, memory still valid
  images = at::Tensor();               // releases into the orphaned pool safely

  bool threw = false;
  try {
    ringloader::ToTensors(ringloader::Batch());
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  RL_CHECK(threw);
  std::cout << "torch_adaptor_test: OK\n";
  return 0;
}
