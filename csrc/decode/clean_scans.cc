#include "decode/clean_scans.h"

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace ringloader::decode_internal {
namespace {

// Zero-initialised at load time (constexpr constructor): no construction guard, nothing run.
constinit ProcessCleanScans process_clean_scans;

}  // namespace

uint64_t ScanFingerprint(const uint8_t* data, size_t size) {
  const uint64_t h = absl::Hash<absl::string_view>{}(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  return h == 0 ? 1 : h;
}

ProcessCleanScans& ProcessWideCleanScans() { return process_clean_scans; }

}  // namespace ringloader::decode_internal
