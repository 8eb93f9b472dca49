#!/usr/bin/env bash
# Builds the libFuzzer targets for the decode + transform stage (fuzz/, clang, ASan+UBSan) in
# build/fuzz, writes their generated seed corpora, and fuzzes each for a bounded time:
# jpeg_decode_fuzzer (the JPEG decoder in depth), image_decode_fuzzer (ImageDecoder: every
# format, chosen by signature), recipe_fuzzer (fuzzed transform chains of every step kind on
# fuzzed images) and tar_fuzzer (WebDataset shards: tar headers, label parsers) share the
# budget, a quarter each.
#
#   scripts/fuzz.sh [SECONDS]        default 60 in all; exits non-zero on any finding (crash, UB,
#                                    leak, timeout, OOM or a broken decoder contract)
#   scripts/fuzz.sh --repro FILE...  replays inputs (e.g. build/fuzz/artifacts/crash-*) once
#                                    through every target
#   FUZZ_ARGS="-jobs=4 ..."          extra libFuzzer flags (later flags override earlier ones)
#
# The working corpora in build/fuzz/corpus (JPEG) and build/fuzz/image_corpus persist between
# runs (coverage accumulates); findings land in build/fuzz/artifacts/. Needs clang with
# libFuzzer (Debian: clang, libclang-rt-14-dev).
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
# Fuzzed inputs that decode cleanly stay out of the memo file the machine's processes share.
export RINGLOADER_SCAN_MEMO=${RINGLOADER_SCAN_MEMO:-process}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

if [ "${1:-}" = "--repro" ]; then
  shift
  "$BUILD/jpeg_decode_fuzzer" -runs=1 "$@"
  "$BUILD/image_decode_fuzzer" -runs=1 "$@"
  "$BUILD/tar_fuzzer" -runs=1 "$@"
  exec "$BUILD/recipe_fuzzer" -runs=1 "$@"
fi

SECONDS_TO_RUN=${1:-60}
QUARTER=$(( SECONDS_TO_RUN / 4 > 0 ? SECONDS_TO_RUN / 4 : 1 ))
JPEG_SECONDS=$QUARTER
IMAGE_SECONDS=$QUARTER
TAR_SECONDS=$QUARTER
RECIPE_SECONDS=$(( SECONDS_TO_RUN - 3 * QUARTER > 0 ? SECONDS_TO_RUN - 3 * QUARTER : 1 ))
mkdir -p "$BUILD/seeds" "$BUILD/corpus" "$BUILD/image_seeds" "$BUILD/image_corpus" \
  "$BUILD/recipe_seeds" "$BUILD/recipe_corpus" "$BUILD/tar_seeds" "$BUILD/tar_corpus" "$BUILD/artifacts"
"$BUILD/make_seed_corpus" "$BUILD/seeds"
"$BUILD/make_tar_seed_corpus" "$BUILD/tar_seeds"
"$BUILD/make_image_seed_corpus" "$BUILD/image_seeds"

# fuzz TARGET DICT CORPUS SEEDS SECONDS: one bounded run; returns libFuzzer's exit status
# (DICT "-": none).
# -timeout: one input may take at most 10 s (a hang is a finding); -rss_limit_mb: the target's
# pixel limit keeps a legitimate input far below this, so more is a finding too.
# -max_len: the largest seed is ~12 KiB; 64 KiB leaves room for growth without slow inputs.
fuzz() {
  local target=$1 dict=$2 corpus=$3 seeds=$4 seconds=$5 log="$BUILD/last_run_$1.log"
  set +e
  local dict_flag=()
  [ "$dict" = "-" ] || dict_flag=(-dict="$dict")
  "$BUILD/$target" "$corpus" "$seeds" \
    "${dict_flag[@]}" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$BUILD/artifacts/" -print_final_stats=1 ${FUZZ_ARGS:-} 2>&1 \
    | tee "$log" \
    | grep -E "^#[0-9]+[[:space:]]+(INITED|DONE)|ERROR|SUMMARY|contract violated|stat::"
  local status=${PIPESTATUS[0]}
  set -e
  local execs
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "fuzz: $target: ${execs:-unknown} executions in $seconds s," \
    "corpus $(ls "$corpus" | wc -l) inputs"
  if [ "$status" -ne 0 ]; then
    echo "fuzz: $target: FINDING (exit $status); reproducer(s) in $BUILD/artifacts/," \
      "full log in $log" >&2
    ls -1 "$BUILD/artifacts/" >&2 || true
  fi
  return "$status"
}

status=0
fuzz jpeg_decode_fuzzer fuzz/jpeg.dict "$BUILD/corpus" "$BUILD/seeds" "$JPEG_SECONDS" || status=1
fuzz image_decode_fuzzer fuzz/image.dict "$BUILD/image_corpus" "$BUILD/image_seeds" \
  "$IMAGE_SECONDS" || status=1
fuzz tar_fuzzer - "$BUILD/tar_corpus" "$BUILD/tar_seeds" "$TAR_SECONDS" || status=1
fuzz recipe_fuzzer - "$BUILD/recipe_corpus" "$BUILD/recipe_seeds" "$RECIPE_SECONDS" || status=1
exit "$status"
