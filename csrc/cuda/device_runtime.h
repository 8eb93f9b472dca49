#pragma once
/// The GPU primitives the device stager is built from: device memory, streams and events, with
/// CUDA's ordering rules. The stager (device_stager.cc) holds all of the staging logic and calls
/// only this interface; it has two implementations:
///
///  - CUDA (cuda_runtime.cc, the only file that calls the CUDA runtime);
///  - a simulated device (simulated_device.{h,cc}): host memory, one worker thread per stream that
///    runs its operations in order, events with CUDA's record/wait semantics. It lets the stager's
///    ring, its event ordering and its shutdown run (and run under the sanitizers) on machines
///    without a GPU, and lets tests hold copies back to make races deterministic.
///
/// Semantics every implementation keeps (CUDA's):
///  - operations on one stream run in issue order; streams run concurrently with each other and
///    with the host, and the stager's copy stream never waits implicitly on the default stream;
///  - Record(e, s) captures the work issued to `s` so far; StreamWait(s2, e) makes later work on
///    `s2` wait for that captured work (the latest Record before the StreamWait call);
///    Synchronize(e) blocks the calling host thread the same way; Query(e) is true when it is done
///    (also for an event never recorded).

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringloader {

class DeviceRuntime {
 public:
  using Stream = void*;  ///< Opaque; owned by the runtime that made it.
  using Event = void*;

  virtual ~DeviceRuntime() = default;
  /// The device ordinal every call below works on (the runtime makes it current per call and
  /// restores the caller's current device, which belongs to the application).
  virtual int device() const = 0;
  /// For messages and stats ("cuda:0", "simulated:0").
  virtual std::string name() const = 0;

  virtual absl::StatusOr<void*> Malloc(size_t bytes) = 0;
  /// Quiet (used from destructors): a failure is reported on stderr.
  virtual void Free(void* ptr) = 0;
  /// A stream that does not synchronise with the default stream.
  virtual absl::StatusOr<Stream> CreateStream() = 0;
  /// Returns at once; work already issued to the stream still completes.
  virtual void DestroyStream(Stream stream) = 0;
  /// `blocking_sync`: Synchronize sleeps instead of spinning (the stager's waiter thread must not
  /// take a core from the decode workers).
  virtual absl::StatusOr<Event> CreateEvent(bool blocking_sync) = 0;
  virtual void DestroyEvent(Event event) = 0;

  /// Host (page-locked) to device, asynchronous on `stream`.
  virtual absl::Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes, Stream stream) = 0;
  virtual absl::Status Record(Event event, Stream stream) = 0;
  virtual absl::Status StreamWait(Stream stream, Event event) = 0;
  virtual absl::Status Synchronize(Event event) = 0;
  virtual bool Query(Event event) = 0;

  /// The stream a DLPack `stream` argument names: 0 or 1 = the legacy default stream, 2 = the
  /// per-thread default stream, anything else a stream handle of this runtime. (-1, "do not
  /// synchronise", never reaches the runtime.)
  virtual Stream FromDlpackStream(intptr_t stream) = 0;
};

}  // namespace ringloader
