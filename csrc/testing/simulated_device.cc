#include "testing/simulated_device.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace ringloader {

// One in-order queue and the thread that runs it.
struct SimulatedDevice::SimStream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> ops;
  int64_t issued = 0;
  int64_t done = 0;
  bool stop = false;
  std::thread worker;

  SimStream() {
    worker = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu);
      while (true) {
        cv.wait(lock, [&] { return stop || !ops.empty(); });
        if (ops.empty()) return;  // stopped and drained
        std::function<void()> op = std::move(ops.front());
        ops.pop_front();
        lock.unlock();
        op();
        lock.lock();
        ++done;
        cv.notify_all();
      }
    });
  }
  ~SimStream() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      cv.notify_all();
    }
    worker.join();
  }
  void Push(std::function<void()> op) {
    std::lock_guard<std::mutex> lock(mu);
    ops.push_back(std::move(op));
    ++issued;
    cv.notify_all();
  }
  void Drain() {
    std::unique_lock<std::mutex> lock(mu);
    const int64_t target = issued;
    cv.wait(lock, [&] { return done >= target; });
  }
};

// recorded counts Record calls; completed is the highest record whose stream position was reached.
struct SimulatedDevice::SimEvent {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;
  uint64_t completed = 0;

  uint64_t Target() {
    std::lock_guard<std::mutex> lock(mu);
    return recorded;
  }
  void WaitFor(uint64_t target) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return completed >= target; });
  }
};

SimulatedDevice::SimulatedDevice(int device) : device_(device) {
  auto stream = std::make_unique<SimStream>();
  default_stream_ = stream.get();
  streams_.emplace(default_stream_, std::move(stream));
}

SimulatedDevice::~SimulatedDevice() {
  ReleaseCopies();
  std::map<SimStream*, std::unique_ptr<SimStream>> streams;
  {
    std::lock_guard<std::mutex> lock(mu_);
    streams.swap(streams_);
  }
  streams.clear();  // joins the workers; they may still signal events, so those go after
  std::lock_guard<std::mutex> lock(mu_);
  events_.clear();
  retired_events_.clear();
  for (const auto& [ptr, bytes] : allocations_) std::free(reinterpret_cast<void*>(ptr));
}

std::string SimulatedDevice::name() const { return absl::StrCat("simulated:", device_); }

absl::Status SimulatedDevice::Injected(const char* call) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = fail_next_.find(call);
  if (it == fail_next_.end()) return absl::OkStatus();
  fail_next_.erase(it);
  return absl::InternalError(absl::StrCat(call, " failed: injected error (simulated device)"));
}

absl::StatusOr<void*> SimulatedDevice::Malloc(size_t bytes) {
  if (absl::Status s = Injected("Malloc"); !s.ok()) return s;
  void* ptr = std::malloc(std::max<size_t>(bytes, 1));
  if (ptr == nullptr) return absl::ResourceExhaustedError(absl::StrCat("Malloc(", bytes, ") failed"));
  std::memset(ptr, 0xA5, bytes);  // "uninitialised device memory": never mistaken for a batch
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
  live_bytes_ += static_cast<int64_t>(bytes);
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return ptr;
}

void SimulatedDevice::Free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == allocations_.end()) {
    std::fprintf(stderr, "SimulatedDevice: Free of %p, which is not a live allocation\n", ptr);
    std::abort();
  }
  live_bytes_ -= static_cast<int64_t>(it->second);
  allocations_.erase(it);
  std::free(ptr);
}

absl::StatusOr<DeviceRuntime::Stream> SimulatedDevice::CreateStream() {
  if (absl::Status s = Injected("CreateStream"); !s.ok()) return s;
  auto stream = std::make_unique<SimStream>();
  SimStream* handle = stream.get();
  std::lock_guard<std::mutex> lock(mu_);
  streams_.emplace(handle, std::move(stream));
  return static_cast<Stream>(handle);
}

void SimulatedDevice::DestroyStream(Stream stream) {
  std::unique_ptr<SimStream> owned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find(static_cast<SimStream*>(stream));
    if (it == streams_.end() || it->first == default_stream_) return;
    owned = std::move(it->second);
    streams_.erase(it);
  }
  owned.reset();  // its issued work completes first, as with CUDA
}

absl::StatusOr<DeviceRuntime::Event> SimulatedDevice::CreateEvent(bool /*blocking_sync*/) {
  if (absl::Status s = Injected("CreateEvent"); !s.ok()) return s;
  auto event = std::make_unique<SimEvent>();
  SimEvent* handle = event.get();
  std::lock_guard<std::mutex> lock(mu_);
  events_.emplace(handle, std::move(event));
  return static_cast<Event>(handle);
}

void SimulatedDevice::DestroyEvent(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(static_cast<SimEvent*>(event));
  if (it == events_.end()) return;
  retired_events_.push_back(std::move(it->second));
  events_.erase(it);
}

void SimulatedDevice::Enqueue(Stream stream, std::function<void()> op) {
  static_cast<SimStream*>(stream)->Push(std::move(op));
}

absl::Status SimulatedDevice::CopyToDeviceAsync(void* dst, const void* src, size_t bytes, Stream stream) {
  if (absl::Status s = Injected("CopyToDeviceAsync"); !s.ok()) return s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto d = reinterpret_cast<uintptr_t>(dst);
    auto it = allocations_.upper_bound(d);
    if (it == allocations_.begin() || d + bytes > std::prev(it)->first + std::prev(it)->second) {
      return absl::InvalidArgumentError("CopyToDeviceAsync: the destination is not device memory");
    }
  }
  Enqueue(stream, [this, dst, src, bytes] {
    std::chrono::microseconds delay;
    {
      std::unique_lock<std::mutex> lock(gate_mu_);
      gate_cv_.wait(lock, [&] { return !copies_held_; });
      delay = copy_delay_;
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::memcpy(dst, src, bytes);
    copies_done_.fetch_add(1, std::memory_order_relaxed);
  });
  return absl::OkStatus();
}

absl::Status SimulatedDevice::Record(Event event, Stream stream) {
  if (absl::Status s = Injected("Record"); !s.ok()) return s;
  auto* e = static_cast<SimEvent*>(event);
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    target = ++e->recorded;
  }
  Enqueue(stream, [e, target] {
    std::lock_guard<std::mutex> lock(e->mu);
    e->completed = std::max(e->completed, target);
    e->cv.notify_all();
  });
  return absl::OkStatus();
}

absl::Status SimulatedDevice::StreamWait(Stream stream, Event event) {
  if (absl::Status s = Injected("StreamWait"); !s.ok()) return s;
  auto* e = static_cast<SimEvent*>(event);
  const uint64_t target = e->Target();
  Enqueue(stream, [e, target] { e->WaitFor(target); });
  return absl::OkStatus();
}

absl::Status SimulatedDevice::Synchronize(Event event) {
  auto* e = static_cast<SimEvent*>(event);
  e->WaitFor(e->Target());
  return absl::OkStatus();
}

bool SimulatedDevice::Query(Event event) {
  auto* e = static_cast<SimEvent*>(event);
  std::lock_guard<std::mutex> lock(e->mu);
  return e->completed >= e->recorded;
}

DeviceRuntime::Stream SimulatedDevice::FromDlpackStream(intptr_t stream) {
  if (stream == 0 || stream == 1 || stream == 2) return default_stream_;
  return reinterpret_cast<Stream>(stream);
}

void SimulatedDevice::HoldCopies() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  copies_held_ = true;
}

void SimulatedDevice::ReleaseCopies() {
  std::lock_guard<std::mutex> lock(gate_mu_);
  copies_held_ = false;
  gate_cv_.notify_all();
}

void SimulatedDevice::set_copy_delay(std::chrono::microseconds delay) {
  std::lock_guard<std::mutex> lock(gate_mu_);
  copy_delay_ = delay;
}

void SimulatedDevice::Launch(Stream stream, std::function<void()> kernel) { Enqueue(stream, std::move(kernel)); }

void SimulatedDevice::SynchronizeStream(Stream stream) { static_cast<SimStream*>(stream)->Drain(); }

void SimulatedDevice::FailNext(const std::string& call) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_next_.insert(call);
}

DeviceRuntime::Stream SimulatedDevice::default_stream() const { return default_stream_; }

int64_t SimulatedDevice::live_allocations() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(allocations_.size());
}
int64_t SimulatedDevice::live_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_bytes_;
}
int64_t SimulatedDevice::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_bytes_;
}
int SimulatedDevice::live_streams() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(streams_.size()) - 1;  // the default stream is not counted
}
int SimulatedDevice::live_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(events_.size());
}
int64_t SimulatedDevice::copies_done() const { return copies_done_.load(std::memory_order_relaxed); }

}  // namespace ringloader
