#!/usr/bin/env bash
# Builds the libFuzzer target for the decode + transform stage (fuzz/, clang, ASan+UBSan) in
# build/fuzz, writes the generated seed corpus, and fuzzes for a bounded time.
#
#   scripts/fuzz.sh [SECONDS]        default 60; exits non-zero on any finding (crash, UB, leak,
#                                    timeout, OOM or a broken decoder contract)
#   scripts/fuzz.sh --repro FILE...  replays inputs (e.g. build/fuzz/artifacts/crash-*) once
#   FUZZ_ARGS="-jobs=4 ..."          extra libFuzzer flags (later flags override earlier ones)
#
# The working corpus in build/fuzz/corpus persists between runs (coverage accumulates); findings
# land in build/fuzz/artifacts/. Needs clang with libFuzzer (Debian: clang, libclang-rt-14-dev).
set -euo pipefail
cd "$(dirname "$0")/.."

CXX=${FUZZ_CXX:-clang++}
CC=${FUZZ_CC:-clang}
BUILD=build/fuzz
JOBS=${JOBS:-2}

if ! CXX=$(command -v "$CXX") || ! CC=$(command -v "$CC"); then
  echo "fuzz: clang not found (Debian: apt-get install -y clang libclang-rt-14-dev)" >&2
  exit 2
fi

# A compiler change invalidates the CMake cache; start that build directory over (the cache
# holds the absolute path given below).
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -qx "CMAKE_CXX_COMPILER:[A-Z]*=$CXX" "$BUILD/CMakeCache.txt"; then
  echo "fuzz: compiler changed to $CXX; rebuilding $BUILD"
  rm -rf "$BUILD"
fi
cmake -S fuzz -B "$BUILD" -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="$CC" >/dev/null
cmake --build "$BUILD" -j "$JOBS"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ "${1:-}" = "--repro" ]; then
  shift
  exec "$BUILD/jpeg_decode_fuzzer" -runs=1 "$@"
fi

SECONDS_TO_RUN=${1:-60}
mkdir -p "$BUILD/seeds" "$BUILD/corpus" "$BUILD/artifacts"
"$BUILD/make_seed_corpus" "$BUILD/seeds"

log="$BUILD/last_run.log"
set +e
# -timeout: one input may take at most 10 s (a hang is a finding); -rss_limit_mb: the target's
# pixel limit keeps a legitimate input far below this, so more is a finding too.
# -max_len: the largest seed is ~12 KiB; 64 KiB leaves room for growth without slow inputs.
"$BUILD/jpeg_decode_fuzzer" "$BUILD/corpus" "$BUILD/seeds" \
  -dict=fuzz/jpeg.dict -max_total_time="$SECONDS_TO_RUN" -timeout=10 -rss_limit_mb=2048 \
  -max_len=65536 -artifact_prefix="$BUILD/artifacts/" -print_final_stats=1 ${FUZZ_ARGS:-} 2>&1 \
  | tee "$log" \
  | grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|SUMMARY|contract violated|stat::"
status=${PIPESTATUS[0]}
set -e

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
echo "fuzz: ${execs:-unknown} executions in ${SECONDS_TO_RUN} s, corpus $(ls "$BUILD/corpus" | wc -l) inputs"
if [ "$status" -ne 0 ]; then
  echo "fuzz: FINDING (exit $status); reproducer(s) in $BUILD/artifacts/, full log in $log" >&2
  ls -1 "$BUILD/artifacts/" >&2 || true
  exit 1
fi
