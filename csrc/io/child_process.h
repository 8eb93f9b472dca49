#pragma once
/// A `/bin/sh -c COMMAND` child whose stdout is read through a pipe (WebDataset's `pipe:` URLs).
///
/// The child runs in its own process group with SIGPIPE at its default and stdin on /dev/null,
/// so the whole pipeline it starts can be killed at once. Destroying a ChildProcess kills the
/// group (if it still runs) and reaps the child: no zombies.
///
/// Threading: Read/Wait/destruction from one thread at a time; Kill() may be called from any
/// thread (it only signals), which is how a reader blocked in Read() is woken up.

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "ringloader/source_kind.h"

namespace ringloader {

/// OK when `path` can be a kPipe source: `pipe:` followed by a non-blank command;
/// InvalidArgument naming `what` otherwise.
absl::Status CheckPipePath(const std::string& path, const std::string& what);
/// The COMMAND of the `pipe:COMMAND` path of a kPipe source (checked by CheckPipePath).
inline std::string PipeCommand(const std::string& path) { return path.substr(sizeof(kPipePrefix) - 1); }

class ChildProcess {
 public:
  /// Starts `/bin/sh -c command`.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::string& command);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// Reads up to `n` bytes of the child's stdout: how many; 0 at its end. Waits in slices and
  /// returns Cancelled once `*cancel` is set (when given).
  absl::StatusOr<size_t> Read(uint8_t* dst, size_t n, const std::atomic<bool>* cancel = nullptr);
  /// Waits for the child to exit and reaps it: its exit code (128 + N when killed by signal N).
  int Wait();
  /// Sends SIGKILL to the child's process group (safe from any thread, idempotent).
  void Kill();
  /// Bytes read so far.
  uint64_t bytes_read() const { return bytes_read_; }
  const std::string& command() const { return command_; }
  /// The child's pid (also its process group id).
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(std::string command, pid_t pid, int fd);
  std::string command_;
  pid_t pid_;
  int fd_;
  std::atomic<bool> reaped_{false};
  int exit_code_ = 0;
  std::atomic<bool> killed_{false};
  uint64_t bytes_read_ = 0;
};

}  // namespace ringloader
