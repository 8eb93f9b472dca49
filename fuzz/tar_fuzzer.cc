/// libFuzzer target for the shard side of WebDataset: the tar reader (fuzzed archives handed
/// out in fuzzed read sizes, members read or skipped), and the label parsers run on each
/// member's data (JSON field scan, decimal label, member-name split).
///
/// Contract checked on every input (a violation aborts, which libFuzzer records):
///  * every member returned lies inside the input after the previous one, and its data read
///    through ReadData equals the input's bytes at [offset, offset + size);
///  * a failure is DataLoss (or OutOfRange from ReadData's limit) with a message, never
///    anything else, and nothing is returned after it;
///  * the parsers fail only with NotFound / InvalidArgument.

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "dataset/tar.h"
#include "dataset/webdataset.h"
#include "fuzz_common.h"

namespace ringloader {
namespace {

constexpr char kTarget[] = "tar_fuzzer";

class BytesSource final : public ByteSource {
 public:
  BytesSource(const uint8_t* data, size_t size, size_t step) : data_(data), size_(size), step_(step) {}
  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n) override {
    const size_t take = std::min({n, step_, size_ - pos_});
    std::memcpy(dst, data_ + pos_, take);
    pos_ += take;
    return take;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t step_;
  size_t pos_ = 0;
};

void CheckParsers(const std::string& text) {
  for (absl::Status s : {JsonIntegerField(text, "label").status(), ParseDecimalLabel(text).status()}) {
    if (!s.ok() && !absl::IsNotFound(s) && !absl::IsInvalidArgument(s)) fuzz::Finding(kTarget, "parser status", s);
  }
}

}  // namespace
}  // namespace ringloader

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringloader;
  if (size < 1) return 0;
  // First byte: read size (1..256 blocks of 7 bytes, or 1 MiB) and whether data is read.
  const size_t step = data[0] == 0 ? (size_t{1} << 20) : static_cast<size_t>(data[0]) * 7;
  const bool read_data = (data[0] & 1) != 0;
  data += 1;
  size -= 1;
  BytesSource source(data, size, step);
  TarReader reader(&source);
  TarMember m;
  uint64_t last_end = 0;
  bool failed = false;
  for (int n = 0; n < 10000; ++n) {
    absl::StatusOr<bool> next = reader.Next(&m);
    if (!next.ok()) {
      if (!absl::IsDataLoss(next.status()) || next.status().message().empty()) {
        fuzz::Finding(kTarget, "Next status", next.status());
      }
      failed = true;
      break;
    }
    if (!*next) break;
    if (m.offset < last_end || m.offset % 512 != 0) fuzz::Finding(kTarget, "member offset out of order");
    last_end = m.offset;
    std::string key, ext;
    (void)SplitMemberName(m.name, &key, &ext);
    if (!read_data) continue;
    std::string bytes;
    absl::Status read = reader.ReadData(1 << 16, &bytes);
    if (absl::IsOutOfRange(read)) continue;
    if (!read.ok()) {
      if (!absl::IsDataLoss(read) || !reader.last_member_truncated()) fuzz::Finding(kTarget, "ReadData status", read);
      break;
    }
    if (m.offset + m.size > size || std::memcmp(bytes.data(), data + m.offset, m.size) != 0) {
      fuzz::Finding(kTarget, "member data differs from the input");
    }
    CheckParsers(bytes);
  }
  if (failed) {
    absl::StatusOr<bool> after = reader.Next(&m);
    if (!after.ok() || *after) fuzz::Finding(kTarget, "a member or an error after a failure", after.status());
  }
  CheckParsers(std::string(reinterpret_cast<const char*>(data), std::min<size_t>(size, 4096)));
  return 0;
}
