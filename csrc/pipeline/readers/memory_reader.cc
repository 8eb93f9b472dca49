// kMemory: bytes the caller owns (Sample::memory, length), e.g. a Python ImageBytes or a row of
// an Arrow column. Nothing is read and nothing copied: the decoder reads them where they are.
// Only substitutes and single-sample decodes copy them (ReadAside).

#include <atomic>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/readers/sample_reader.h"

namespace ringloader {
namespace {

class MemoryReader final : public SampleReader {
 public:
  const char* name() const override { return "memory"; }

  bool InPlace() const override { return true; }

  absl::Status Bytes(const Sample& sample, const ByteBuffer* read, SampleBytes* out) const override {
    out->data = sample.memory;
    out->size = static_cast<size_t>(sample.length);
    return absl::OkStatus();
  }

  absl::Status ReadAside(const Sample& sample, ByteBuffer* buffer, const std::atomic<bool>* cancel) const override {
    buffer->Resize(static_cast<size_t>(sample.length));
    if (sample.length > 0) std::memcpy(buffer->data(), sample.memory, static_cast<size_t>(sample.length));
    return absl::OkStatus();
  }
};

}  // namespace

std::unique_ptr<SampleReader> MakeMemoryReader() { return std::make_unique<MemoryReader>(); }

absl::Status CheckMemorySample(const Sample& s, size_t index) {
  if (s.source == SourceKind::kMemory && (s.length < 0 || (s.memory == nullptr && s.length > 0))) {
    return absl::InvalidArgumentError(absl::StrCat("sample ", index, " (", s.path, ") is in memory without its bytes"));
  }
  return absl::OkStatus();
}

}  // namespace ringloader
