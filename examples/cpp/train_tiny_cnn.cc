// A few steps of training a tiny CNN on CPU, fed by ringloader's native loader through the
// zero-copy LibTorch adaptor.
//
//   train_tiny_cnn IMAGE_FOLDER [STEPS=20] [BATCH=32]
//
// Only the torch headers this file uses are included (not <torch/torch.h>), which keeps the
// compile short.

#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include <ringloader/ringloader.h>
#include <ringloader/torch.h>
#include <ringloader/transforms.h>

namespace {

/// conv(3->16, stride 2) -> relu -> conv(16->32, stride 2) -> relu -> global average -> linear.
struct TinyCnnImpl : torch::nn::Module {
  explicit TinyCnnImpl(int64_t classes)
      : conv1(register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 16, 3).stride(2).padding(1)))),
        conv2(register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).stride(2).padding(1)))),
        fc(register_module("fc", torch::nn::Linear(32, classes))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = conv1->forward(x).relu();
    x = conv2->forward(x).relu();
    x = torch::nn::functional::adaptive_avg_pool2d(
        x, torch::nn::functional::AdaptiveAvgPool2dFuncOptions({1, 1}));
    return fc->forward(x.flatten(1));
  }

  torch::nn::Conv2d conv1;
  torch::nn::Conv2d conv2;
  torch::nn::Linear fc;
};
TORCH_MODULE(TinyCnn);

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " IMAGE_FOLDER [STEPS=20] [BATCH=32]\n";
    return 2;
  }
  const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int batch_size = argc > 3 ? std::atoi(argv[3]) : 32;
  std::vector<std::string> classes;
  absl::StatusOr<std::vector<ringloader::Sample>> samples = ringloader::ScanImageFolder(argv[1], &classes);
  if (!samples.ok()) {
    std::cerr << "cannot list " << argv[1] << ": " << samples.status() << "\n";
    return 1;
  }

  ringloader::LoaderOptions options;
  options.batch_size = batch_size;
  options.num_workers = 2;
  options.shuffle = true;
  options.seed = 0;
  options.drop_last = true;
  // The reference ImageNet training chain, at 64x64 so a CPU step takes milliseconds.
  options.transform = ringloader::transforms::ImageNetTrain(64);
  absl::StatusOr<std::unique_ptr<ringloader::Loader>> loader = ringloader::Loader::Create(*samples, options);
  if (!loader.ok()) {
    std::cerr << loader.status() << "\n";
    return 1;
  }

  torch::manual_seed(0);
  TinyCnn model(static_cast<int64_t>(classes.size()));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto start = std::chrono::steady_clock::now();
  int step = 0;
  double first_loss = 0, last_loss = 0;
  for (int64_t epoch = 0; step < steps; ++epoch) {
    if (absl::Status s = (*loader)->StartEpoch(epoch); !s.ok()) {
      std::cerr << s << "\n";
      return 1;
    }
    while (step < steps) {
      absl::StatusOr<ringloader::Batch> batch = (*loader)->Next();
      if (ringloader::IsEndOfEpoch(batch.status())) break;
      if (ringloader::IsSampleError(batch.status())) {  // a bad sample: skip its batch
        std::cerr << "skipping a batch: " << batch.status() << "\n";
        continue;
      }
      if (!batch.ok()) {
        std::cerr << batch.status() << "\n";
        return 1;
      }
      // Zero-copy: the tensors read the loader's slot; it is recycled once they are freed.
      ringloader::BatchTensors t = ringloader::ToTensors(*batch);
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(t.images), t.labels);
      loss.backward();
      optimizer.step();
      last_loss = loss.item<double>();
      if (step == 0) first_loss = last_loss;
      if (!std::isfinite(last_loss)) {
        std::cerr << "step " << step << ": loss is not finite\n";
        return 1;
      }
      std::cout << "epoch " << epoch << " step " << step << " loss " << last_loss << "\n";
      ++step;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ringloader::LoaderStats stats = (*loader)->Stats();
  std::cout << "trained " << step << " steps of " << batch_size << " images in " << seconds
            << " s; loss " << first_loss << " -> " << last_loss << "; io " << stats.io_backend
            << ", decode busy " << stats.decode_seconds << " s, waited " << stats.wait_seconds
            << " s\n";
  return step == steps ? 0 : 1;
}
