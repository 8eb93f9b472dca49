#pragma once
/// Small helpers for absl::Status plumbing inside the core.

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace ringloader {

/// Converts an errno value into a Status whose message names the operation and the file,
/// e.g. "open(/data/a.jpg): No such file or directory".
absl::Status ErrnoStatus(int errno_value, absl::string_view operation, absl::string_view path);

}  // namespace ringloader

/// Returns from the enclosing function when `expr` yields a non-OK status.
#define RL_RETURN_IF_ERROR(expr)                 \
  do {                                           \
    ::absl::Status rl_status_ = (expr);          \
    if (!rl_status_.ok()) return rl_status_;     \
  } while (0)

#define RL_CONCAT_INNER_(a, b) a##b
#define RL_CONCAT_(a, b) RL_CONCAT_INNER_(a, b)
/// `RL_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a StatusOr or returns its error.
#define RL_ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto RL_CONCAT_(rl_statusor_, __LINE__) = (expr);                      \
  if (!RL_CONCAT_(rl_statusor_, __LINE__).ok())                          \
    return RL_CONCAT_(rl_statusor_, __LINE__).status();                  \
  lhs = std::move(RL_CONCAT_(rl_statusor_, __LINE__)).value()
