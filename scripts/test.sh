#!/usr/bin/env bash
# Runs every test: the C++ suite (GoogleTest via ctest) and the Python suite (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
# The suite compiles the C++ core several times with the same flags (the extension, the C++
# package, the wheel; the ASan tests and the ASan extension): ccache (installed by setup.sh)
# serves the repeats. Only builds configured from here on use it; the compile lines name the
# checkout's files by absolute path, the same from every build folder (the folder itself is left
# out of the hash: CCACHE_NOHASHDIR).
export RINGLOADER_CCACHE=1
export CCACHE_NOHASHDIR=1 CCACHE_DIR="${CCACHE_DIR:-${HOME:-/tmp}/.cache/ringloader-ccache}"
# ccache also hashes the compiler's name, and the builds would use two for one compiler: CMake's
# default is c++ (the asan preset, the C++ package), scikit-build-core's is Python's sysconfig
# CXX, g++ (build/py, the wheel, the ASan extension). Naming one for all lets the ASan extension
# reuse the asan preset's objects and the C++ package build/py's (both had missed every one).
export CC="${CC:-gcc}" CXX="${CXX:-g++}"
T0=$SECONDS
# Each stage's time since the start, so that the log shows where the half hour goes.
trap 'echo "== test.sh: $((SECONDS - T0)) s in all"; command -v ccache >/dev/null && ccache -s | head -8 || true' EXIT
echo "== setup"
bash scripts/setup.sh
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
echo "== C++ tests (at $((SECONDS - T0)) s)"
ctest --test-dir build/py --output-on-failure -j2 --timeout 600
echo "== NEON resampler kernels vs the scalar ones: cross-compiled for aarch64, run under qemu (at $((SECONDS - T0)) s)"
bash scripts/test_neon.sh
echo "== C++ package, LibTorch adaptor and example (at $((SECONDS - T0)) s)"
RINGLOADER_REQUIRE_TORCH=1 bash scripts/test_cpp_package.sh
echo "== The wheel on a clean Debian root (skipped with the reason where that cannot be made) (at $((SECONDS - T0)) s)"
bash scripts/test_wheel_clean_root.sh
echo "== The manylinux_2_28 wheels (x86_64 in Debian 11 with three torch releases, aarch64 under qemu), only when their inputs changed since the chain last passed (at $((SECONDS - T0)) s)"
# Over 50 minutes on a clean clone: run when scripts/wheels/tested-inputs.sha256, the committed
# record of its last pass, no longer matches (scripts/wheels/tested_inputs.sh says which inputs).
bash scripts/wheels/tested_inputs.sh check || bash scripts/wheels/test_wheels.sh
echo "== Python tests (at $((SECONDS - T0)) s)"
.venv/bin/python -m pytest tests/python tests/cuda -q --durations=15 "$@"
echo "== Python pipeline tests again with io_uring refused (as under Docker's seccomp): pread fallback (at $((SECONDS - T0)) s)"
RINGLOADER_URING_REFUSED=1 .venv/bin/python -m pytest tests/python/test_pipeline.py tests/python/test_bad_input.py \
  tests/python/test_io_fallback.py -q
echo "== Sanitizers: ASan+UBSan and TSan on the C++ suite, ASan on a Python stress run (at $((SECONDS - T0)) s)"
bash scripts/sanitize.sh
echo "== Fuzzing the decode + transform entry point (60 s) (at $((SECONDS - T0)) s)"
bash scripts/fuzz.sh 60
