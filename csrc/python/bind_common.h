#pragma once
/// What every part of the binding (the bind_*.cc files, one per concern) shares: absl::Status ->
/// the Python exception the package documents (SampleError with its index/path, StaleIndexError,
/// SlotsExhaustedError, LoaderTimeoutError, ValueError, FileNotFoundError, IndexError).

#include <pybind11/pybind11.h>

#include "absl/status/status.h"

namespace ringloader {

/// Raises `status` as its Python exception (never returns).
[[noreturn]] void Raise(const absl::Status& status);
/// Raises `status` unless it is OK.
void ThrowIfError(const absl::Status& status);

/// Each concern's part of `_C` (bind_errors.cc, bind_loader.cc, bind_rules.cc, bind_scans.cc,
/// bind_remote.cc; bind_video.h for the video decoder).
void BindErrors(pybind11::module_& m);
void BindLoader(pybind11::module_& m);
void BindRules(pybind11::module_& m);
void BindScans(pybind11::module_& m);
void BindRemote(pybind11::module_& m);

}  // namespace ringloader
