#pragma once
/// Loader options, transform steps and views from the dicts the Python package builds: one
/// parser for the Loader binding and the rules the package asks for (bind_options.cc).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "common/host_files.h"
#include "ringloader/ringloader.h"

namespace ringloader {

/// A list of step dicts (transforms.py's native form) as TransformSteps; ValueError names a bad one.
std::vector<TransformStep> ParseSteps(pybind11::handle steps);
/// `fast_decode=`: None/False (off), True or "scale", "fastest".
FastDecode FastDecodeArg(const pybind11::handle& v);
/// The loader's options dict (every key consumed; an unknown one is a TypeError). `host` gets
/// where the machine is read: the real files, or the fake trees tests name with the keys
/// numa_sysfs_root, cgroup_root, proc_self_cgroup and meminfo_path (pipeline/loader_factory.h).
LoaderOptions ParseOptions(pybind11::dict d, internal::HostFiles* host);
/// An int64 array as a vector (a copy).
std::vector<int64_t> ToVector(pybind11::array_t<int64_t, pybind11::array::c_style | pybind11::array::forcecast> a);

}  // namespace ringloader
