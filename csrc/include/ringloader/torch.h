#pragma once
/// LibTorch adaptor (CMake target ringloader::torch): a delivered Batch as torch tensors without
/// copying.
///
///   ringloader::Batch batch = loader->Next().value();
///   auto [images, labels] = ringloader::ToTensors(batch);   // zero-copy views of the slot
///   model->forward(images.to(device));
///
/// The tensors share the Batch's slot: their deleters hold the slot's lease, so the memory stays
/// valid while any of them (or any view of them) is alive — also after the Batch and even the
/// Loader are destroyed — and the slot returns to the loader when the last one goes away.
/// Writing into the tensors writes into the slot. Call `.clone()` to detach from the slot when a
/// tensor must be kept for long: a held slot is one the loader cannot refill.
///
/// Only narrow ATen headers are included, to keep compile times of user code down.

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "ringloader/ringloader.h"

namespace ringloader {

/// The torch scalar type of a ringloader dtype.
inline at::ScalarType ToScalarType(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return at::kByte;
    case DType::kFloat32: return at::kFloat;
    case DType::kFloat16: return at::kHalf;
    case DType::kBFloat16: return at::kBFloat16;
  }
  throw std::invalid_argument("ringloader::ToScalarType: unknown dtype");
}

/// Images and labels of one batch, as CPU tensors.
struct BatchTensors {
  /// [B,3,H,W] (Layout::kCHW) or [B,H,W,3] (kHWC), in the batch's dtype, contiguous.
  at::Tensor images;
  /// [B] int64.
  at::Tensor labels;
};

/// Wraps `batch`'s slot as tensors without copying. Each tensor's deleter keeps a copy of the
/// slot lease, so the tensors stay valid after `batch` and the Loader are gone.
/// Throws std::invalid_argument for an empty (default-constructed) Batch or a device batch.
inline BatchTensors ToTensors(const Batch& batch) {
  if (batch.device() >= 0) {
    throw std::invalid_argument(
        "ringloader::ToTensors: this is a device batch (LoaderOptions::device); wrap "
        "device_images() yourself after device_lease()->WaitOn(stream), or load to the host");
  }
  std::shared_ptr<SlotLease> lease = batch.lease();
  if (!lease || batch.images() == nullptr) {
    throw std::invalid_argument("ringloader::ToTensors: the Batch holds no slot");
  }
  // One lease copy per tensor: the slot is released when the last of them is freed, in any order.
  auto keep_alive = [lease](void*) mutable { lease.reset(); };
  const at::TensorOptions cpu = at::TensorOptions().device(at::kCPU);
  const std::vector<int64_t> shape = batch.image_shape();
  BatchTensors out;
  out.images = at::from_blob(batch.images(), shape, keep_alive, cpu.dtype(ToScalarType(batch.dtype())));
  out.labels = at::from_blob(batch.labels(), {static_cast<int64_t>(batch.size())}, keep_alive,
                             cpu.dtype(at::kLong));
  return out;
}

}  // namespace ringloader
