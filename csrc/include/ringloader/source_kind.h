#pragma once
/// Where the bytes of a sample or shard come from (see Sample::source).

#include <cstdint>

namespace ringloader {

/// Nothing is ever run because of how a path is spelled: kPipe is set only by a caller that was
/// handed a command (WebDataset, for a `pipe:` URL its user wrote), so a file whose name starts
/// with `pipe:` (matched by a glob, found by a folder scan, listed in a file list) is read as the
/// file it is.
enum class SourceKind : uint8_t {
  kFile = 0,  ///< A local file (or a byte range of one).
  kPipe = 1,  ///< `pipe:COMMAND`: the stdout of `/bin/sh -c COMMAND`.
  kMemory = 2,  ///< Bytes in memory the caller owns (Sample::memory); `path` only names them.
  kDeferred = 3,  ///< Row Sample::offset of group Sample::group, handed over while an epoch runs
                  ///< (DeferredRows); `path` only names it.
};

/// The prefix of a kPipe source's path: `pipe:COMMAND`.
inline constexpr char kPipePrefix[] = "pipe:";

}  // namespace ringloader
