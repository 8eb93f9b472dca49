#pragma once
/// Byte ranges of `pipe:COMMAND` streams: a SourceKind::kPipe sample, whose path is
/// `pipe:COMMAND`, is the bytes [offset, offset + length) of the stdout of `/bin/sh -c COMMAND`.
/// Every path given here is run: callers pass only the paths of kPipe sources (the Loader checks
/// them with CheckPipePath at Create), never a file's name.
///
/// One running command per pipe path, read sequentially in large reads. A request for a member
/// ahead of the stream reads forward, keeping in memory the members this epoch still wants from
/// that stream (declared by SetWanted at epoch start) until they are requested; a request behind
/// the stream position that was not kept restarts the command (counted in restarts()). The
/// epoch order of shards is roughly sequential per shard with a bounded shuffle, so what is kept
/// stays bounded by that shuffle.
///
/// Tar members (`tar_member`, what a WebDataset index gives): when the stream passes a member's
/// first byte, the 512 bytes before it must be a valid tar header (checksum) of a regular member
/// of exactly its length. Anything else means the index the ranges came from no longer describes
/// what the command streams (the shard was rewritten since): the stream is then stale, and every
/// request of it, this one included, fails with FailedPrecondition carrying kStaleIndexPayload
/// (IsStaleIndex) until the next epoch. A member's name is not compared: names are not handed
/// down, and a GNU long name or pax path sits before the header at an offset no index records.
/// Sizes at every member's offset agreeing with a rewritten shard by chance is not a concern for
/// compressed images; a rewrite that keeps every image member's offset and size but changes only
/// labels is not seen (see docs/datasets.md, "A stale index is never read from").
///
/// Members appended (or removed after the last one) leave every indexed header in place: a range
/// with `stream_end` (the stream's length when it was indexed; the index's last member) is
/// therefore followed, once read, by the rest of the stream, which must end exactly there. A
/// stream that goes on past it, or ends before it, is stale like a moved header.
///
/// Threading: any thread. The stream map takes a mutex; each stream has its own mutex, held while
/// its command is read, so reader threads fetching from different streams run in parallel.
/// Fetch() returns Cancelled soon (within ~50 ms) after `*cancel` is set, so Stop() never waits
/// for a slow command.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "io/child_process.h"
#include "io/reader.h"

namespace ringloader {


class StreamCache {
 public:
  /// Bytes per read from a command.
  static constexpr size_t kReadChunk = size_t{256} << 10;

  explicit StreamCache(size_t max_member_bytes) : max_member_bytes_(max_member_bytes) {}
  ~StreamCache();

  /// One wanted member (counted: an epoch may want a member more than once).
  struct Range {
    uint64_t offset;
    int64_t length;
    bool tar_member = false;  ///< its header is checked as the stream passes it (see above)
    uint64_t stream_end = 0;  ///< not 0: the stream must end at this byte (see above)
  };
  /// Starts a new epoch: kills and reaps every command (so each stream starts from its
  /// beginning) and records the members the epoch will request, per pipe path.
  void StartEpoch(const std::map<std::string, std::vector<Range>>& wanted);
  /// Reads member [offset, offset + length) of `path` (a `pipe:` path) into `out`. DataLoss when
  /// the command ends or fails before the member ("pipe:CMD exited with status N before member at
  /// offset X", or "stream ended ..."); Cancelled when `*cancel` was set; with `tar_member`,
  /// IsStaleIndex when its header (or any wanted member's the stream passed) does not match.
  absl::Status Fetch(const std::string& path, uint64_t offset, int64_t length, ByteBuffer* out,
                     const std::atomic<bool>* cancel, bool tar_member = false);
  /// Kills and reaps every command and drops what was kept (epoch end, Stop, destruction).
  void Reset();

  /// Commands restarted because a member behind the stream position was requested.
  int64_t restarts() const { return restarts_.load(std::memory_order_relaxed); }
  /// One member read at random, not in the epoch's order (a kReplace substitute, DecodeSample):
  /// served from a complete kept copy when there is one (which stays kept for the epoch), else by
  /// a private run of the command from its start, ended once the member is read. The shared
  /// stream, its position and what the epoch still wants are left as they are.
  absl::Status FetchAside(const std::string& path, uint64_t offset, int64_t length, ByteBuffer* out,
                          const std::atomic<bool>* cancel, bool tar_member = false);
  /// Bytes read from commands.
  int64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  /// Commands started.
  int64_t starts() const { return starts_.load(std::memory_order_relaxed); }
  /// Bytes of members kept in memory now (read ahead and not yet requested).
  int64_t kept_bytes() const { return kept_bytes_.load(std::memory_order_relaxed); }

 private:
  // The last kTarBlock bytes a run of a command produced, so that the header right before a
  // member can be checked when the member's first byte arrives (reads can be shorter than a block).
  class Tail {
   public:
    void Clear() { len_ = 0; }
    // Appends what a read produced.
    void Advance(const uint8_t* chunk, size_t n);
    // The kTarBlock stream bytes before `at`, where `chunk` holds bytes [c0, at + ...) and this
    // tail the bytes before c0; false when the stream has fewer than kTarBlock bytes before `at`.
    bool BlockBefore(uint64_t at, uint64_t c0, const uint8_t* chunk, uint8_t* block) const;

   private:
    uint8_t bytes_[512];
    size_t len_ = 0;
  };
  struct Want {
    int count = 0;
    bool tar_member = false;
    uint64_t stream_end = 0;
  };
  struct Kept {
    int64_t length = 0;
    std::unique_ptr<uint8_t[]> bytes;  // `length` bytes, filled as the stream passes
    size_t filled = 0;
  };
  struct Stream {
    std::mutex mu;
    std::string command;                               // immutable
    std::unique_ptr<ChildProcess> child;               // guarded by mu
    uint64_t pos = 0;                                  // guarded by mu: next stream byte
    std::map<std::pair<uint64_t, int64_t>, Want> wanted;  // guarded by mu: ranges -> count still wanted
    std::map<std::pair<uint64_t, int64_t>, Kept> kept;   // guarded by mu: read ahead (complete or filling)
    std::string ended;                                 // guarded by mu: why the current run ended early
    std::unique_ptr<uint8_t[]> chunk;                  // guarded by mu: kReadChunk bytes, one read
    Tail tail;                                         // guarded by mu: the bytes before pos
    absl::Status stale;                                // guarded by mu: a tar member did not match
  };

  Stream* GetStream(const std::string& path);
  // InvalidArgument / OutOfRange for a member Fetch cannot serve (no length, over the limit).
  absl::Status CheckMember(const std::string& path, uint64_t offset, int64_t length) const;
  // OK when `block` (null: the stream has no full block before the member) is the header of a
  // regular tar member of `length` bytes; else the stale-index error for `path`.
  static absl::Status CheckTarHeader(const std::string& path, uint64_t offset, int64_t length, const uint8_t* block);
  // Starts (or restarts) `s`'s command from byte 0.
  absl::Status Restart(Stream* s);
  // Reads `s`'s running command to its end (discarding, `s->mu` held) and checks that it ends at
  // `stream_end`: else `s` is stale (returned). OK when the command failed (its members' reads
  // say so) or was not running.
  absl::Status CheckStreamEnd(const std::string& path, Stream* s, uint64_t stream_end,
                              const std::atomic<bool>* cancel);

  const size_t max_member_bytes_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Stream>> streams_;  // guarded by mu_; entries are never
                                                            // erased (Reset empties them)
  std::atomic<int64_t> restarts_{0}, bytes_read_{0}, starts_{0}, kept_bytes_{0};
};

}  // namespace ringloader
