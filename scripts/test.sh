#!/usr/bin/env bash
# Runs every test: the C++ suite (GoogleTest via ctest) and the Python suite (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== C++ tests"
ctest --test-dir build/py --output-on-failure -j2 --timeout 600
echo "== C++ package, LibTorch adaptor and example"
RINGLOADER_REQUIRE_TORCH=1 bash scripts/test_cpp_package.sh
echo "== The wheel on a clean Debian root (skipped with the reason where that cannot be made)"
bash scripts/test_wheel_clean_root.sh
echo "== Python tests"
.venv/bin/python -m pytest tests/python tests/cuda -q "$@"
echo "== Python pipeline tests again with io_uring refused (as under Docker's seccomp): pread fallback"
RINGLOADER_URING_REFUSED=1 .venv/bin/python -m pytest tests/python/test_pipeline.py tests/python/test_bad_input.py \
  tests/python/test_io_fallback.py -q
echo "== Sanitizers: ASan+UBSan and TSan on the C++ suite, ASan on a Python stress run"
bash scripts/sanitize.sh
echo "== Fuzzing the decode + transform entry point (60 s)"
bash scripts/fuzz.sh 60
