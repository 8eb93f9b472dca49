#include "decode/clean_scans.h"

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace ringloader::decode_internal {
namespace {

// Constant-initialised (zeroed) by GCC through the constexpr constructor. Not `constinit`:
// clang's constant evaluator gives up on the million-entry table (its step limit), and then
// initialises it at load time instead, which is as correct.
ProcessCleanScans process_clean_scans;

}  // namespace

uint64_t ScanFingerprint(const uint8_t* data, size_t size) {
  const uint64_t h = absl::Hash<absl::string_view>{}(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  return h == 0 ? 1 : h;
}

ProcessCleanScans& ProcessWideCleanScans() { return process_clean_scans; }

}  // namespace ringloader::decode_internal
