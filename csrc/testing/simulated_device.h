#pragma once
/// A DeviceRuntime with no GPU: "device memory" is host memory, each stream is a worker thread
/// that runs its operations in issue order, and events follow CUDA's record/wait rules (see
/// cuda/device_runtime.h). The device stager and the loader's device path run on it unchanged,
/// so their ordering, bounds and shutdown are tested (also under the sanitizers) on machines
/// without a GPU. What it cannot show is anything about CUDA itself: the CUDA runtime is a thin
/// translation (cuda/cuda_runtime.cc) checked by tests/cuda on a GPU.
///
/// Test controls make races deterministic: HoldCopies() stops copies from running until
/// ReleaseCopies(); Launch() runs a "kernel" (any function) in a stream's order, e.g. one that
/// reads a staged buffer right after a StreamWait; FailNext() injects an error into one call.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "cuda/device_runtime.h"

namespace ringloader {

class SimulatedDevice final : public DeviceRuntime {
 public:
  explicit SimulatedDevice(int device = 0);
  ~SimulatedDevice() override;
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

  // ---- DeviceRuntime ----
  int device() const override { return device_; }
  std::string name() const override;
  absl::StatusOr<void*> Malloc(size_t bytes) override;
  void Free(void* ptr) override;
  absl::StatusOr<Stream> CreateStream() override;
  void DestroyStream(Stream stream) override;
  absl::StatusOr<Event> CreateEvent(bool blocking_sync) override;
  void DestroyEvent(Event event) override;
  /// InvalidArgument when [dst, dst + bytes) is not inside one live allocation.
  absl::Status CopyToDeviceAsync(void* dst, const void* src, size_t bytes, Stream stream) override;
  absl::Status Record(Event event, Stream stream) override;
  absl::Status StreamWait(Stream stream, Event event) override;
  absl::Status Synchronize(Event event) override;
  bool Query(Event event) override;
  /// 0/1/2 name the default stream; anything else must be a Stream of this device, as an integer.
  Stream FromDlpackStream(intptr_t stream) override;

  // ---- test controls and counters ----
  /// Copies wait (on their stream, in order) until ReleaseCopies(); other work is not held.
  void HoldCopies();
  void ReleaseCopies();
  /// Each copy takes at least this long (a slow bus).
  void set_copy_delay(std::chrono::microseconds delay);
  /// Runs `kernel` on `stream` after the work issued to it so far, before later work.
  void Launch(Stream stream, std::function<void()> kernel);
  /// Blocks until everything issued to `stream` so far has run.
  void SynchronizeStream(Stream stream);
  /// The next call of the DeviceRuntime method named `call` ("Malloc", "CopyToDeviceAsync",
  /// "CreateStream", ...) fails with Internal.
  void FailNext(const std::string& call);
  Stream default_stream() const;

  int64_t live_allocations() const;
  int64_t live_bytes() const;
  int64_t peak_bytes() const;
  int live_streams() const;
  int live_events() const;
  int64_t copies_done() const;

 private:
  struct SimStream;
  struct SimEvent;
  absl::Status Injected(const char* call);
  void Enqueue(Stream stream, std::function<void()> op);

  const int device_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> allocations_;  // guarded by mu_
  int64_t live_bytes_ = 0, peak_bytes_ = 0;  // guarded by mu_
  std::map<SimStream*, std::unique_ptr<SimStream>> streams_;  // guarded by mu_
  std::map<SimEvent*, std::unique_ptr<SimEvent>> events_;     // guarded by mu_
  // Destroyed events whose recorded work may still be queued (CUDA frees them once it ran).
  std::vector<std::unique_ptr<SimEvent>> retired_events_;     // guarded by mu_
  std::multiset<std::string> fail_next_;                      // guarded by mu_
  SimStream* default_stream_ = nullptr;

  std::mutex gate_mu_;
  std::condition_variable gate_cv_;
  bool copies_held_ = false;                   // guarded by gate_mu_
  std::chrono::microseconds copy_delay_{0};    // guarded by gate_mu_
  std::atomic<int64_t> copies_done_{0};
};

}  // namespace ringloader
