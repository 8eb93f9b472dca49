#pragma once
/// The DLPack ABI (v1.0 structures), declared here so the extension needs no extra header.
/// Layouts follow the DLPack specification exactly; do not reorder fields.

#include <cstdint>

extern "C" {

enum RlDLDeviceType : int32_t { kRlDLCPU = 1, kRlDLCUDA = 2, kRlDLCUDAHost = 3 };
enum RlDLDataTypeCode : uint8_t { kRlDLInt = 0, kRlDLUInt = 1, kRlDLFloat = 2, kRlDLBfloat = 4 };

struct RlDLDevice {
  int32_t device_type;
  int32_t device_id;
};

struct RlDLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct RlDLTensor {
  void* data;
  RlDLDevice device;
  int32_t ndim;
  RlDLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};

/// Unversioned managed tensor (capsule name "dltensor").
struct RlDLManagedTensor {
  RlDLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(RlDLManagedTensor* self);
};

struct RlDLPackVersion {
  uint32_t major;
  uint32_t minor;
};

/// Versioned managed tensor (capsule name "dltensor_versioned").
struct RlDLManagedTensorVersioned {
  RlDLPackVersion version;
  void* manager_ctx;
  void (*deleter)(RlDLManagedTensorVersioned* self);
  uint64_t flags;
  RlDLTensor dl_tensor;
};

}  // extern "C"
