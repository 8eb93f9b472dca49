#pragma once
/// Host-to-device staging of ready batches. The interface has no CUDA types so the pipeline and
/// the binding compile without the toolkit. The stager (device_stager.cc) is written over
/// DeviceRuntime (device_runtime.h): CUDA in cuda_runtime.cc (the only code that calls CUDA; the
/// no-CUDA build's cuda_stub.cc refuses to make one), or the simulated device of the tests.
///
/// Flow per batch (Stage, called by the loader's stage thread as soon as a batch is complete, up
/// to `max_buffers` batches ahead of the consumer):
///   1. take a free device buffer from the ring (bounded: `max_buffers`, allocated lazily);
///   2. cudaMemcpyAsync(host slot -> buffer) on the stager's own non-blocking stream, after a
///      cudaStreamWaitEvent on the buffer's release event (the consumer's last use of it);
///   3. record a "copied" event and hand (event, host slot lease) to the stager thread, which
///      waits for the event and then drops the lease: the host slot goes back to the free list
///      as soon as its copy completed, and no pipeline or consumer thread blocks on the GPU;
///   4. return a DeviceLease. DLPack export calls WaitOn(consumer stream): the consumer's stream
///      waits for the copy on the GPU (cudaStreamWaitEvent), not the host.
///   5. when the last reference to the lease goes (the tensor was freed), a release event is
///      recorded on the consumer's stream and the buffer goes back to the ring; the next copy
///      into it waits for that event, so kernels still reading the old batch are never overrun.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringloader {

class DeviceRuntime;

/// The consumer's hold on one device buffer. Thread-safe.
class DeviceLease {
 public:
  virtual ~DeviceLease() = default;
  /// Device address of the staged bytes.
  virtual void* data() const = 0;
  /// CUDA device ordinal.
  virtual int device() const = 0;
  /// Makes `stream` wait (on the GPU) for this batch's copy, and remembers it as the stream the
  /// consumer uses the buffer on. `stream` follows the DLPack convention: 0 or 1 = legacy default
  /// stream, 2 = per-thread default stream, otherwise a cudaStream_t; -1 = no synchronisation.
  virtual absl::Status WaitOn(intptr_t stream) = 0;
  /// True once the copy has completed (a non-blocking event query; for tests and stats).
  virtual bool CopyDone() const = 0;
};

/// Copies host slots into a bounded ring of device buffers on its own stream.
class DeviceStager {
 public:
  virtual ~DeviceStager() = default;
  /// Bytes that Stage copies at most (the slot size).
  virtual size_t buffer_bytes() const = 0;
  virtual int device() const = 0;
  /// The runtime's name for the device ("cuda:0", "simulated:0").
  virtual std::string name() const = 0;
  /// True when a buffer is free or can still be allocated: then the next Stage will not fail
  /// for lack of buffers. The stage thread checks this before taking a host batch, so a batch
  /// is never consumed and then lost.
  virtual bool HasFreeBuffer() const = 0;
  /// Waits up to `timeout` for HasFreeBuffer() (a lease released on any thread wakes it).
  virtual bool WaitForFreeBuffer(std::chrono::milliseconds timeout) const = 0;
  /// Starts the copy of `bytes` at `src` (the host slot, kept alive by `host_owner` until the
  /// copy completed) and returns the destination. ResourceExhausted when the consumer holds
  /// every buffer; Internal (naming the CUDA call) on a CUDA error.
  virtual absl::StatusOr<std::shared_ptr<DeviceLease>> Stage(const void* src, size_t bytes,
                                                             std::shared_ptr<void> host_owner) = 0;
  virtual int buffers_allocated() const = 0;
  virtual int buffers_held() const = 0;
  virtual int max_buffers() const = 0;
  /// Bytes whose copy has completed.
  virtual int64_t bytes_copied() const = 0;
  /// Seconds the stream spent copying, as the stager thread observes completions: the sum over
  /// copies of (completion - max(issue, previous completion)). Slightly high (wake-up latency).
  virtual double copy_seconds() const = 0;
};

/// Parses "cuda" / "cuda:N" into N (0 for "cuda"); "cpu" -> -1. InvalidArgument otherwise.
absl::StatusOr<int> ParseDevice(const std::string& device);

/// PCI bus id of CUDA device `ordinal` ("0000:3b:00.0"), or "" when unknown / no CUDA.
std::string CudaPciBusId(int ordinal);

/// The CUDA runtime for device `ordinal`. FailedPrecondition (saying why) when the build has no
/// CUDA or the device is not visible.
absl::StatusOr<std::shared_ptr<DeviceRuntime>> MakeCudaRuntime(int ordinal);

/// A stager over `runtime` with up to `max_buffers` (>= 1) buffers of `buffer_bytes`, allocated
/// lazily. Internal (naming the call) when the runtime cannot make the copy stream.
absl::StatusOr<std::shared_ptr<DeviceStager>> MakeDeviceStager(std::shared_ptr<DeviceRuntime> runtime,
                                                               size_t buffer_bytes, int max_buffers);

}  // namespace ringloader
