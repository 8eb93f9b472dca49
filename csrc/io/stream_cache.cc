#include "io/stream_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/status_util.h"
#include "dataset/tar.h"
#include "ringloader/ringloader.h"

namespace ringloader {

StreamCache::~StreamCache() { Reset(); }

void StreamCache::Tail::Advance(const uint8_t* chunk, size_t n) {
  constexpr size_t kSize = sizeof(bytes_);
  if (n >= kSize) {
    std::memcpy(bytes_, chunk + (n - kSize), kSize);
    len_ = kSize;
    return;
  }
  const size_t keep = std::min(len_, kSize - n);
  std::memmove(bytes_, bytes_ + (len_ - keep), keep);
  std::memcpy(bytes_ + keep, chunk, n);
  len_ = keep + n;
}

bool StreamCache::Tail::BlockBefore(uint64_t at, uint64_t c0, const uint8_t* chunk, uint8_t* block) const {
  static_assert(sizeof(bytes_) == kTarBlock);
  if (at < kTarBlock) return false;
  const uint64_t from = at - kTarBlock;
  if (from >= c0) {
    std::memcpy(block, chunk + (from - c0), kTarBlock);
    return true;
  }
  const auto before = static_cast<size_t>(c0 - from);  // bytes of the block before the chunk
  if (before > len_) return false;
  std::memcpy(block, bytes_ + (len_ - before), before);
  std::memcpy(block + before, chunk, kTarBlock - before);
  return true;
}

// Past this a size needs a pax `size` record (or base-256): writers then leave the field 0.
constexpr uint64_t kLargestOctalSize = 077777777777;

absl::Status StreamCache::CheckTarHeader(const std::string& path, uint64_t offset, int64_t length,
                                         const uint8_t* block) {
  std::string why;
  if (block == nullptr) {
    why = "the stream has no tar header before it";
  } else if (absl::StatusOr<TarHeader> header = ParseTarHeader(block); !header.ok()) {
    why = absl::StrCat("the 512 bytes before it are no tar header: ", header.status().message());
  } else if (!header->regular()) {
    why = absl::StrCat("the tar header before it is not a file's ('", header->name, "')");
  } else if (header->size != static_cast<uint64_t>(length) &&
             !(header->size == 0 && static_cast<uint64_t>(length) > kLargestOctalSize)) {
    why = absl::StrCat("the tar header before it is that of '", header->name, "', ", header->size, " bytes");
  } else {
    return absl::OkStatus();
  }
  absl::Status status = absl::FailedPreconditionError(
      absl::StrCat(path, ": the shard's index is out of date: its member at offset ", offset, " (", length,
                   " bytes) is not where the index says (", why, "); the shard changed since it was indexed"));
  status.SetPayload(kStaleIndexPayload, absl::Cord(path));
  return status;
}

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
    for (const Range& r : ranges) {
      Want& want = s->wanted[{r.offset, r.length}];
      ++want.count;
      want.tar_member = want.tar_member || r.tar_member;
      if (r.stream_end != 0) want.stream_end = r.stream_end;
    }
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
    s->tail.Clear();
    s->stale = absl::OkStatus();
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
  s->tail.Clear();
  absl::StatusOr<std::unique_ptr<ChildProcess>> child = ChildProcess::Spawn(s->command);
  if (!child.ok()) return child.status();
  s->child = std::move(*child);
  starts_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status StreamCache::CheckStreamEnd(const std::string& path, Stream* s, uint64_t stream_end,
                                         const std::atomic<bool>* cancel) {
  if (!s->child || !s->ended.empty()) return absl::OkStatus();
  if (!s->chunk) s->chunk.reset(new uint8_t[kReadChunk]);
  uint8_t* chunk = s->chunk.get();
  while (s->pos <= stream_end) {
    absl::StatusOr<size_t> got = s->child->Read(chunk, kReadChunk, cancel);
    if (!got.ok()) {
      if (absl::IsCancelled(got.status())) return got.status();
      return absl::OkStatus();  // a read error, not a change: later members' reads say it
    }
    if (*got == 0) {
      const int code = s->child->Wait();
      s->ended = code != 0 ? absl::StrCat(path, " exited with status ", code)
                           : absl::StrCat(path, ": stream ended at byte ", s->pos);
      if (code != 0 || s->pos == stream_end) return absl::OkStatus();
      break;  // ended before the indexed end: shorter than when indexed
    }
    bytes_read_.fetch_add(static_cast<int64_t>(*got), std::memory_order_relaxed);
    s->tail.Advance(chunk, *got);
    s->pos += *got;
  }
  const std::string what = s->pos > stream_end
                               ? absl::StrCat("goes on past byte ", stream_end, ", where it ended when it was "
                                              "indexed (members were appended)")
                               : absl::StrCat("ends at byte ", s->pos, ", before byte ", stream_end,
                                              ", where it ended when it was indexed");
  absl::Status status = absl::FailedPreconditionError(absl::StrCat(
      path, ": the shard's index is out of date: the stream ", what, "; the shard changed since it was indexed"));
  status.SetPayload(kStaleIndexPayload, absl::Cord(path));
  s->stale = status;
  return status;
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
                                     ByteBuffer* out, const std::atomic<bool>* cancel, bool tar_member) {
  RL_RETURN_IF_ERROR(CheckMember(path, offset, length));
  const auto size = static_cast<size_t>(length);
  out->Resize(size);
  if (length == 0) return absl::OkStatus();
  Stream* s = GetStream(path);
  {
    std::lock_guard<std::mutex> lock(s->mu);
    if (!s->stale.ok()) return s->stale;
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
  Tail tail;
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
    if (tar_member && offset >= pos && offset < pos + *got) {
      uint8_t block[kTarBlock];
      const bool whole = tail.BlockBefore(offset, pos, chunk.get(), block);
      if (absl::Status checked = CheckTarHeader(path, offset, length, whole ? block : nullptr); !checked.ok()) {
        std::lock_guard<std::mutex> lock(s->mu);
        s->stale = checked;  // the epoch's own reads of this stream fail too
        return checked;
      }
    }
    tail.Advance(chunk.get(), *got);
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
                                const std::atomic<bool>* cancel, bool tar_member) {
  RL_RETURN_IF_ERROR(CheckMember(path, offset, length));
  Stream* s = GetStream(path);
  std::lock_guard<std::mutex> lock(s->mu);
  if (!s->stale.ok()) return s->stale;
  const std::pair<uint64_t, int64_t> key{offset, length};
  const auto size = static_cast<size_t>(length);
  out->Resize(size);
  if (length == 0) return absl::OkStatus();
  // One request of the member served: the epoch wants it once less.
  auto served = [&] {
    auto w = s->wanted.find(key);
    if (w != s->wanted.end() && --w->second.count <= 0) s->wanted.erase(w);
  };
  // The index's last member: the stream must end where it ended when indexed (see the header).
  uint64_t stream_end = 0;
  if (auto w = s->wanted.find(key); w != s->wanted.end()) stream_end = w->second.stream_end;
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
      if (stream_end != 0) return CheckStreamEnd(path, s, stream_end, cancel);
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
    // A stale stream: the chunk is passed (so the stream's position stays right) and the error
    // stands for every request of the stream until the next epoch.
    auto stale = [&](absl::Status checked) {
      s->stale = std::move(checked);
      s->tail.Advance(chunk, *got);
      s->pos = c1;
      return s->stale;
    };
    uint8_t block[kTarBlock];
    if (tar_member && filled == 0 && offset >= c0 && offset < c1) {
      const bool whole = s->tail.BlockBefore(offset, c0, chunk, block);
      if (absl::Status checked = CheckTarHeader(path, offset, length, whole ? block : nullptr); !checked.ok()) {
        return stale(std::move(checked));
      }
    }
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
        if (w->second.tar_member) {
          const bool whole = s->tail.BlockBefore(at, c0, chunk, block);
          if (absl::Status checked = CheckTarHeader(path, at, len, whole ? block : nullptr); !checked.ok()) {
            s->kept.erase(k);
            return stale(std::move(checked));
          }
        }
        k->second.length = len;
        k->second.bytes.reset(new uint8_t[static_cast<size_t>(len)]);  // no zero-fill: written next
        kept_bytes_.fetch_add(len, std::memory_order_relaxed);
      }
      if (k->second.filled < static_cast<size_t>(len)) capture(at, len, k->second.bytes.get(), &k->second.filled);
    }
    s->tail.Advance(chunk, *got);
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
  if (stream_end != 0) return CheckStreamEnd(path, s, stream_end, cancel);
  return absl::OkStatus();
}

}  // namespace ringloader
