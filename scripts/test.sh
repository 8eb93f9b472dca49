#!/usr/bin/env bash
# Runs every test: the C++ suite (GoogleTest via ctest) and the Python suite (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo "== C++ tests"
ctest --test-dir build/py --output-on-failure -j2 --timeout 600
echo "== Python tests"
.venv/bin/python -m pytest tests/python -q "$@"
