#pragma once
/// `_C.Tensor`: an array exported zero-copy through DLPack (the loader's batches and views).

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "python/dlpack.h"
#include "ringloader/ringloader.h"

namespace ringloader {

namespace py = pybind11;

// ---- DLPack export -------------------------------------------------------------------------

/// An array exported through DLPack; `owner` keeps the memory alive. Host arrays (kDLCPU), or
/// device arrays (kDLCUDA) whose copy may still be running: export makes the consumer's stream
/// wait for it on the GPU.
class Tensor {
 public:
  Tensor(std::shared_ptr<void> owner, void* data, std::vector<int64_t> shape, RlDLDataType dtype,
         bool pinned, int device = -1, std::shared_ptr<DeviceLease> device_lease = nullptr)
      : owner_(std::move(owner)), data_(data), shape_(std::move(shape)), dtype_(dtype), pinned_(pinned),
        device_(device), device_lease_(std::move(device_lease)) {}

  RlDLDevice device() const {
    return device_ >= 0 ? RlDLDevice{kRlDLCUDA, device_} : RlDLDevice{kRlDLCPU, 0};
  }
  py::tuple DlpackDevice() const { return py::make_tuple(device().device_type, device().device_id); }

  py::capsule Dlpack(py::object stream, py::object max_version, py::object dl_device,
                     py::object copy) const {
    if (!dl_device.is_none()) {
      auto wanted = dl_device.cast<std::pair<int, int>>();
      if (wanted.first != device().device_type || wanted.second != device().device_id) {
        throw py::buffer_error(absl::StrCat("this tensor lives on DLPack device (", device().device_type, ", ",
                                            device().device_id, "); copying to another is not supported"));
      }
    }
    if (!copy.is_none() && copy.cast<bool>()) throw py::buffer_error("copy=True is not supported");
    if (!stream.is_none() && !py::isinstance<py::int_>(stream)) throw py::type_error("stream must be an int or None");
    if (device_lease_) {
      // DLPack: for CUDA, None means the legacy default stream; -1 means "do not synchronise".
      const intptr_t consumer = stream.is_none() ? 1 : static_cast<intptr_t>(stream.cast<int64_t>());
      absl::Status waited = device_lease_->WaitOn(consumer);  // GPU-side wait, no host sync
      if (!waited.ok()) throw std::runtime_error(std::string(waited.message()));
    }
    // Host memory: a stream would only order device work; None/-1/any int are accepted.
    bool versioned = false;
    if (!max_version.is_none()) {
      auto version = max_version.cast<std::pair<int, int>>();
      versioned = version.first >= 1;
    }
    auto* ctx = new Context{owner_, shape_, {}};
    ctx->strides.resize(shape_.size());
    int64_t stride = 1;
    for (size_t i = shape_.size(); i-- > 0;) {
      ctx->strides[i] = stride;
      stride *= shape_[i];
    }
    RlDLTensor tensor{};
    tensor.data = data_;
    tensor.device = device();
    tensor.ndim = static_cast<int32_t>(shape_.size());
    tensor.dtype = dtype_;
    tensor.shape = ctx->shape.data();
    tensor.strides = ctx->strides.data();
    tensor.byte_offset = 0;
    if (versioned) {
      auto* managed = new RlDLManagedTensorVersioned{};
      managed->version = RlDLPackVersion{1, 0};
      managed->manager_ctx = ctx;
      managed->deleter = [](RlDLManagedTensorVersioned* self) {
        delete static_cast<Context*>(self->manager_ctx);
        delete self;
      };
      managed->flags = 0;
      managed->dl_tensor = tensor;
      return py::capsule(managed, "dltensor_versioned", [](PyObject* capsule) {
        if (PyCapsule_IsValid(capsule, "dltensor_versioned")) {  // never consumed
          auto* m = static_cast<RlDLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, "dltensor_versioned"));
          if (m != nullptr && m->deleter != nullptr) m->deleter(m);
        }
      });
    }
    auto* managed = new RlDLManagedTensor{};
    managed->dl_tensor = tensor;
    managed->manager_ctx = ctx;
    managed->deleter = [](RlDLManagedTensor* self) {
      delete static_cast<Context*>(self->manager_ctx);
      delete self;
    };
    return py::capsule(managed, "dltensor", [](PyObject* capsule) {
      if (PyCapsule_IsValid(capsule, "dltensor")) {
        auto* m = static_cast<RlDLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
        if (m != nullptr && m->deleter != nullptr) m->deleter(m);
      }
    });
  }

  const std::vector<int64_t>& shape() const { return shape_; }
  bool pinned() const { return pinned_; }
  /// "cpu" or "cuda:N".
  std::string device_name() const { return device_ >= 0 ? absl::StrCat("cuda:", device_) : "cpu"; }
  /// True once a device tensor's copy has completed (always true for host tensors).
  bool ready() const { return !device_lease_ || device_lease_->CopyDone(); }
  std::string dtype_name() const {
    switch (dtype_.code) {
      case kRlDLUInt: return "uint8";
      case kRlDLInt: return "int64";
      case kRlDLBfloat: return "bfloat16";
      default: return dtype_.bits == 16 ? "float16" : "float32";
    }
  }
  /// Address of the first byte, for tests that check zero-copy.
  uintptr_t data_ptr() const { return reinterpret_cast<uintptr_t>(data_); }

 private:
  struct Context {
    std::shared_ptr<void> owner;  // the slot lease (or a heap buffer)
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
  };
  std::shared_ptr<void> owner_;
  void* data_;
  std::vector<int64_t> shape_;
  RlDLDataType dtype_;
  bool pinned_;
  int device_;
  std::shared_ptr<DeviceLease> device_lease_;
};

inline RlDLDataType ToDl(DType dtype) {
  switch (dtype) {
    case DType::kUint8: return {kRlDLUInt, 8, 1};
    case DType::kFloat16: return {kRlDLFloat, 16, 1};
    case DType::kBFloat16: return {kRlDLBfloat, 16, 1};
    case DType::kFloat32: default: return {kRlDLFloat, 32, 1};
  }
}

}  // namespace ringloader
