// What the process measured of the link to each host (MeasuredLink): every successful response
// of DownloadAll feeds its time to first byte and, for long enough bodies, its bytes per second
// into a moving average per host.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/base/thread_annotations.h"
#include "io/remote.h"

namespace ringloader {
namespace {

// The link estimates' smoothing: each response moves the estimate this far towards what it
// measured (the first replaces the prior), so a few responses outweigh an old one.
constexpr double kLinkSmoothing = 0.25;
// A body shorter than this is not timed for throughput: its time is mostly latency and timer
// resolution.
constexpr int64_t kTimedBodyBytes = 64 * 1024;

struct Links {
  std::mutex mu;
  std::map<std::string, LinkEstimate> by_host ABSL_GUARDED_BY(mu);
  std::string last ABSL_GUARDED_BY(mu);
};

Links& TheLinks() {
  static auto* links = new Links;  // never destroyed: download threads may run at exit
  return *links;
}

}  // namespace

void NoteLinkSample(const std::string& host, double first_byte_s, int64_t body_bytes, double body_s) {
  Links& links = TheLinks();
  std::lock_guard<std::mutex> lock(links.mu);
  LinkEstimate& e = links.by_host[host];
  e.host = host;
  links.last = host;
  auto smooth = [](double was, double now, int64_t* samples) {
    const double out = *samples == 0 ? now : was + kLinkSmoothing * (now - was);
    ++*samples;
    return out;
  };
  if (first_byte_s >= 0) e.latency_s = smooth(e.latency_s, first_byte_s, &e.latency_samples);
  if (body_bytes >= kTimedBodyBytes && body_s > 0) {
    e.bytes_per_s = smooth(e.bytes_per_s, static_cast<double>(body_bytes) / body_s, &e.rate_samples);
  }
}

LinkEstimate MeasuredLink(const std::string& url, const RemoteOptions& options) {
  absl::StatusOr<std::string> http = HttpUrlOf(url, options);
  if (!http.ok()) return LinkEstimate{};
  const std::string host = HostOf(*http);
  Links& links = TheLinks();
  std::lock_guard<std::mutex> lock(links.mu);
  auto it = links.by_host.find(host);
  if (it != links.by_host.end()) return it->second;
  LinkEstimate prior;
  prior.host = host;
  return prior;
}

LinkEstimate LastMeasuredLink() {
  Links& links = TheLinks();
  std::lock_guard<std::mutex> lock(links.mu);
  auto it = links.by_host.find(links.last);
  return it == links.by_host.end() ? LinkEstimate{} : it->second;
}

}  // namespace ringloader
