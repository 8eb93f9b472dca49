#!/usr/bin/env bash
# The manylinux_2_28 wheels, built and tested where they will run (scripts/test_wheel_clean_root.sh
# does each test; this only strings them together and times them):
#   0. the Debian 11 root made or checked first: where no root can be made (not root, no
#      mmdebstrap) the chain stops there, skipped, before building anything;
#   1. the cp311 manylinux_2_28_x86_64 wheel (scripts/build_wheels.sh --glibc 2.28);
#   2. it in a Debian 11 root (glibc 2.31, the oldest root that can be made here) with the torch
#      the local index offers, writing the pixels of a seeded epoch over a fixed set of files;
#   3. it in the same kind of root with the pinned torch (requirements-dev.txt) and with the
#      oldest torch we claim ($OLD_TORCH), both from PyPI;
#   4. the cp311 manylinux_2_28_aarch64 wheel (--arch aarch64, cross-built);
#   5. it in an arm64 Debian 12 root under qemu-user-static: ldd, a native epoch, the native CLI
#      and the pixels of the same seeded epoch, which must equal step 2's byte for byte.
# Usage: bash scripts/wheels/test_wheels.sh [--no-aarch64] [--no-old-torch]
# Environment: RINGLOADER_OLD_TORCH (default torch==2.8.0, the oldest torch we claim: more than
# a year older than the pin in requirements-dev.txt).
# First run: the dependencies for each architecture (scripts/wheels/deps.sh) and the roots are
# built and cached; later runs rebuild only what changed (the timings: docs/getting-started.md).
# After a full pass (neither --no- option, no step skipped) it records the inputs it passed on,
# with the date and each step's time, in scripts/wheels/tested-inputs.sha256
# (scripts/wheels/tested_inputs.sh stamp): commit that file. The test command (scripts/test.sh)
# runs this script, on a clean clone too, only when those inputs differ from the record (too slow
# to run every time: over 50 minutes on a clean clone of a 2-core machine).
set -euo pipefail
cd "$(dirname "$0")/../.."
OLD_TORCH=${RINGLOADER_OLD_TORCH:-torch==2.8.0}
AARCH64=1
OLD=1
for arg in "$@"; do
  case $arg in
    --no-aarch64) AARCH64="";;
    --no-old-torch) OLD="";;
    *) echo "test_wheels: unknown argument $arg (--no-aarch64, --no-old-torch)" >&2; exit 2;;
  esac
done
py311=""
for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11.*/bin/python3 python3.11; do
  if command -v "$candidate" >/dev/null 2>&1; then py311=$candidate; break; fi
done
[ -n "$py311" ] || { echo "test_wheels: needs a CPython 3.11 (the roots' python) to build the wheels with" >&2; exit 1; }
timings=()
T0=$SECONDS
timed() {
  local t0=$SECONDS label=$1 log
  echo "== test_wheels: $label"
  shift
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  # A root test that could not run (no root, no mmdebstrap) says so and exits 0; the later ones
  # could not either: stop, with no record.
  if grep -q ': SKIPPED: ' "$log"; then
    rm -f "$log"
    echo "test_wheels: SKIPPED: $label could not run (above); not recorded as passed"
    exit 0
  fi
  rm -f "$log"
  timings+=("$((SECONDS - t0)) s  $label")
}
# A pixel file left by an earlier run must not stand in for one this run did not write.
rm -f build/pixels-x86_64.bin build/pixels-aarch64.bin
newest() { ls -t dist/ringloader-*-cp311-cp311-"$1".whl | head -n 1; }

timed "root: Debian 11 (glibc 2.31)" bash scripts/test_wheel_clean_root.sh --suite bullseye --prepare-only
timed "build: cp311 manylinux_2_28_x86_64" bash scripts/build_wheels.sh --no-sdist --glibc 2.28 "$py311"
x86=$(newest manylinux_2_28_x86_64)
timed "test: $x86 on Debian 11 with the local index's torch (pixels)" \
  bash scripts/test_wheel_clean_root.sh --suite bullseye --pixels build/pixels-x86_64.bin "$x86"
pin=$(grep -E '^torch==' requirements-dev.txt)
timed "test: $x86 on Debian 11 with the pin, $pin" \
  bash scripts/test_wheel_clean_root.sh --suite bullseye --torch "$pin" "$x86"
if [ -n "$OLD" ]; then
  timed "test: $x86 on Debian 11 with $OLD_TORCH" \
    bash scripts/test_wheel_clean_root.sh --suite bullseye --torch "$OLD_TORCH" "$x86"
fi
if [ -n "$AARCH64" ]; then
  timed "build: cp311 manylinux_2_28_aarch64" bash scripts/build_wheels.sh --no-sdist --arch aarch64 "$py311"
  arm=$(newest manylinux_2_28_aarch64)
  timed "test: $arm on arm64 Debian 12 under qemu" \
    bash scripts/test_wheel_clean_root.sh --arch aarch64 --pixels build/pixels-aarch64.bin "$arm"
  if ! cmp build/pixels-x86_64.bin build/pixels-aarch64.bin; then
    echo "test_wheels: the aarch64 wheel's pixels differ from the x86_64 wheel's (same files, same seed)" >&2
    exit 1
  fi
  echo "== test_wheels: aarch64 pixels == x86_64 pixels ($(stat -c %s build/pixels-x86_64.bin) bytes)"
fi
echo "== test_wheels: OK"
timings+=("$((SECONDS - T0)) s  in all")
printf '   %s\n' "${timings[@]}"
if [ -z "$AARCH64" ] || [ -z "$OLD" ]; then
  echo "test_wheels: not recorded as passed: a partial run (--no-aarch64 / --no-old-torch)"
else
  bash scripts/wheels/tested_inputs.sh stamp "${timings[@]}"
fi
