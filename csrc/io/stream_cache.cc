#include "io/stream_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_util.h"

namespace ringloader {

StreamCache::~StreamCache() { Reset(); }

StreamCache::Stream* StreamCache::GetStream(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Stream>& s = streams_[path];
  if (!s) {
    s = std::make_unique<Stream>();
    s->command = PipeCommand(path);
  }
  return s.get();
}

void StreamCache::StartEpoch(const std::map<std::string, std::vector<Range>>& wanted) {
  Reset();
  for (const auto& [path, ranges] : wanted) {
    Stream* s = GetStream(path);
    std::lock_guard<std::mutex> lock(s->mu);
    for (const Range& r : ranges) ++s->wanted[{r.offset, r.length}];
  }
}

void StreamCache::Reset() {
  std::vector<Stream*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [path, s] : streams_) all.push_back(s.get());
  }
  for (Stream* s : all) {
    std::lock_guard<std::mutex> lock(s->mu);
    s->child.reset();  // kills the process group and reaps it
    s->pos = 0;
    s->ended.clear();
    int64_t dropped = 0;
    for (auto& [range, kept] : s->kept) dropped += kept.length;
    kept_bytes_.fetch_sub(dropped, std::memory_order_relaxed);
    s->kept.clear();
    s->wanted.clear();
  }
}

absl::Status StreamCache::Restart(Stream* s) {
  if (s->child) restarts_.fetch_add(1, std::memory_order_relaxed);
  s->child.reset();
  s->pos = 0;
  s->ended.clear();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(s->command);
  if (!child.ok()) return child.status();
  s->child = std::move(*child);
  starts_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status StreamCache::CheckMember(const std::string& path, uint64_t offset, int64_t length) const {
  if (length < 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a pipe: sample needs a length (member at offset ",
                                                   offset, ")"));
  }
  if (static_cast<uint64_t>(length) > max_member_bytes_) {
    return absl::OutOfRangeError(absl::StrCat(path, " member at offset ", offset, " is ", length,
                                              " bytes, over the limit of ", max_member_bytes_, " bytes per file"));
  }
  return absl::OkStatus();
}

absl::Status StreamCache::FetchAside(const std::string& path, uint64_t offset, int64_t length,
                                     ByteBuffer* out, const std::atomic<bool>* cancel) {
  RL_RETURN_IF_ERROR(CheckMember(path, offset, length));
  const auto size = static_cast<size_t>(length);
  out->Resize(size);
  if (length == 0) return absl::OkStatus();
  {
    Stream* s = GetStream(path);
    std::lock_guard<std::mutex> lock(s->mu);
    if (auto k = s->kept.find({offset, length}); k != s->kept.end() && k->second.filled == size) {
      std::memcpy(out->data(), k->second.bytes.get(), size);
      return absl::OkStatus();
    }
  }
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(PipeCommand(path));
  if (!child.ok()) return child.status();
  starts_.fetch_add(1, std::memory_order_relaxed);
  std::unique_ptr<uint8_t[]> chunk(new uint8_t[kReadChunk]);
  const uint64_t end = offset + static_cast<uint64_t>(length);
  uint64_t pos = 0;
  size_t filled = 0;
  while (filled < size) {  // the child is killed and reaped when `child` goes
    absl::StatusOr<size_t> got = (*child)->Read(chunk.get(), kReadChunk, cancel);
    if (!got.ok()) {
      if (absl::IsCancelled(got.status())) return got.status();
      return absl::DataLossError(absl::StrCat(path, ": ", got.status().message()));
    }
    if (*got == 0) {
      const int code = (*child)->Wait();
      return absl::DataLossError(
          code != 0 ? absl::StrCat(path, " exited with status ", code, " before member at offset ", offset)
                    : absl::StrCat(path, ": stream ended at byte ", pos, " before member at offset ", offset,
                                   " (", length, " bytes)"));
    }
    bytes_read_.fetch_add(static_cast<int64_t>(*got), std::memory_order_relaxed);
    const uint64_t from = std::max(pos, offset), to = std::min(pos + *got, end);
    if (from < to) {
      std::memcpy(out->data() + (from - offset), chunk.get() + (from - pos), static_cast<size_t>(to - from));
      filled += static_cast<size_t>(to - from);
    }
    pos += *got;
  }
  return absl::OkStatus();
}

absl::Status StreamCache::Fetch(const std::string& path, uint64_t offset, int64_t length, ByteBuffer* out,
                                const std::atomic<bool>* cancel) {
  RL_RETURN_IF_ERROR(CheckMember(path, offset, length));
  Stream* s = GetStream(path);
  std::lock_guard<std::mutex> lock(s->mu);
  const std::pair<uint64_t, int64_t> key{offset, length};
  const auto size = static_cast<size_t>(length);
  out->Resize(size);
  if (length == 0) return absl::OkStatus();
  // One request of the member served: the epoch wants it once less.
  auto served = [&] {
    auto w = s->wanted.find(key);
    if (w != s->wanted.end() && --w->second <= 0) s->wanted.erase(w);
  };
  size_t filled = 0;  // bytes of the member already in `out`
  if (auto k = s->kept.find(key); k != s->kept.end()) {
    std::memcpy(out->data(), k->second.bytes.get(), k->second.filled);
    if (k->second.filled == size) {
      // Kept from an earlier pass.
      served();
      if (s->wanted.find(key) == s->wanted.end()) {
        kept_bytes_.fetch_sub(length, std::memory_order_relaxed);
        s->kept.erase(k);
      }
      return absl::OkStatus();
    }
    // Being filled: the stream stands inside it; carry on from there.
    filled = k->second.filled;
    kept_bytes_.fetch_sub(length, std::memory_order_relaxed);
    s->kept.erase(k);
  }
  if (filled == 0 && (!s->child || offset < s->pos)) {
    // Not started yet, or the member is behind the stream and was not kept: from the start.
    absl::Status restarted = Restart(s);
    if (!restarted.ok()) return restarted;
  } else if (!s->ended.empty()) {
    return absl::DataLossError(absl::StrCat(s->ended, " before member at offset ", offset));
  }
  if (!s->chunk) s->chunk.reset(new uint8_t[kReadChunk]);
  uint8_t* chunk = s->chunk.get();
  const uint64_t end = offset + static_cast<uint64_t>(length);
  while (filled < size) {
    absl::StatusOr<size_t> got = s->child->Read(chunk, kReadChunk, cancel);
    if (!got.ok()) {
      if (absl::IsCancelled(got.status())) return got.status();
      return absl::DataLossError(absl::StrCat(path, ": ", got.status().message()));
    }
    if (*got == 0) {
      const int code = s->child->Wait();
      s->ended = code != 0 ? absl::StrCat(path, " exited with status ", code)
                           : absl::StrCat(path, ": stream ended at byte ", s->pos);
      return absl::DataLossError(absl::StrCat(s->ended, " before member at offset ", offset,
                                              code != 0 ? "" : absl::StrCat(" (", length, " bytes)")));
    }
    bytes_read_.fetch_add(static_cast<int64_t>(*got), std::memory_order_relaxed);
    const uint64_t c0 = s->pos, c1 = s->pos + *got;
    // Copies the part of [c0, c1) that continues the member at `at` (of `len` bytes, `*done`
    // of them in `dst`) into it.
    auto capture = [&](uint64_t at, int64_t len, uint8_t* dst, size_t* done) {
      const uint64_t from = std::max(c0, at + *done);
      const uint64_t to = std::min(c1, at + static_cast<uint64_t>(len));
      if (from >= to || from != at + *done) return;
      std::memcpy(dst + *done, chunk + (from - c0), static_cast<size_t>(to - from));
      *done += static_cast<size_t>(to - from);
    };
    if (offset < c1 && end > c0) capture(offset, length, out->data(), &filled);
    // Members the epoch still wants that begin in (or run through) this chunk are kept.
    // Members do not overlap, so only the last one starting at or before c0 can run into the
    // chunk from before it.
    auto w = s->wanted.lower_bound({c0, INT64_MIN});
    if (w != s->wanted.begin()) --w;
    for (; w != s->wanted.end(); ++w) {
      const uint64_t at = w->first.first;
      if (at >= c1) break;
      const int64_t len = w->first.second;
      if (len <= 0 || at + static_cast<uint64_t>(len) <= c0 || w->first == key) continue;
      auto [k, inserted] = s->kept.try_emplace(w->first);
      if (inserted) {
        if (at < c0) {  // began before this run passed it and was not kept: cannot be whole
          s->kept.erase(k);
          continue;
        }
        k->second.length = len;
        k->second.bytes.reset(new uint8_t[static_cast<size_t>(len)]);  // no zero-fill: written next
        kept_bytes_.fetch_add(len, std::memory_order_relaxed);
      }
      if (k->second.filled < static_cast<size_t>(len)) capture(at, len, k->second.bytes.get(), &k->second.filled);
    }
    s->pos = c1;
  }
  served();
  // Another copy of this member still wanted later in the epoch: keep it.
  if (s->wanted.count(key) > 0 && s->kept.find(key) == s->kept.end()) {
    Kept copy;
    copy.length = length;
    copy.bytes.reset(new uint8_t[size]);
    std::memcpy(copy.bytes.get(), out->data(), size);
    copy.filled = size;
    kept_bytes_.fetch_add(length, std::memory_order_relaxed);
    s->kept.emplace(key, std::move(copy));
  }
  return absl::OkStatus();
}

}  // namespace ringloader
