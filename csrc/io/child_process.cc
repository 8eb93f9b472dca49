#include "io/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_util.h"

extern char** environ;

namespace ringloader {

absl::Status CheckPipePath(const std::string& path, const std::string& what) {
  if (!absl::StartsWith(path, kPipePrefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is marked as a pipe: stream but its path \"", path, "\" is not pipe:COMMAND"));
  }
  if (absl::StripAsciiWhitespace(PipeCommand(path)).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": \"", path, "\" has no command after pipe:"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(const std::string& command) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2", absl::StrCat("pipe:", command));
  // A 1 MiB pipe (the default 64 KiB makes every read small); refused above the system's
  // pipe-max-size, which leaves the default: only slower.
  (void)fcntl(fds[0], F_SETPIPE_SZ, 1 << 20);
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);  // dup2 clears O_CLOEXEC
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // Own process group (so Kill reaches the whole pipeline); SIGPIPE at its default even when the
  // parent (e.g. Python) ignores it, so `cmd | head` ends as in a shell; nothing blocked.
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigemptyset(&empty);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  std::string shell = "/bin/sh", dash_c = "-c", cmd = command;
  char* argv[] = {shell.data(), dash_c.data(), cmd.data(), nullptr};
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return ErrnoStatus(rc, "posix_spawn /bin/sh -c", absl::StrCat("pipe:", command));
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(command, pid, fds[0]));
}

ChildProcess::ChildProcess(std::string command, pid_t pid, int fd)
    : command_(std::move(command)), pid_(pid), fd_(fd) {}

ChildProcess::~ChildProcess() {
  if (!reaped_) Kill();
  close(fd_);
  if (!reaped_) (void)Wait();
}

void ChildProcess::Kill() {
  if (reaped_.load(std::memory_order_acquire) || killed_.exchange(true)) return;
  // The group's id is the child's pid (setpgroup 0). The child is not reaped before Wait(), so
  // the id cannot have been reused.
  (void)kill(-pid_, SIGKILL);
}

absl::StatusOr<size_t> ChildProcess::Read(uint8_t* dst, size_t n, const std::atomic<bool>* cancel) {
  while (true) {
    if (cancel != nullptr && cancel->load(std::memory_order_acquire)) {
      return absl::CancelledError(absl::StrCat("reading pipe:", command_, " was cancelled"));
    }
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, cancel != nullptr ? 50 : -1);
    if (ready < 0 && errno != EINTR) return ErrnoStatus(errno, "poll", absl::StrCat("pipe:", command_));
    if (ready <= 0) continue;
    const ssize_t got = read(fd_, dst, n);
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoStatus(errno, "read", absl::StrCat("pipe:", command_));
    }
    bytes_read_ += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }
}

int ChildProcess::Wait() {
  if (reaped_) return exit_code_;
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid_, &status, 0);
  } while (r < 0 && errno == EINTR);
  reaped_.store(true, std::memory_order_release);
  if (r < 0) {
    exit_code_ = -1;
  } else if (WIFEXITED(status)) {
    exit_code_ = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    exit_code_ = 128 + WTERMSIG(status);
  }
  return exit_code_;
}

}  // namespace ringloader
