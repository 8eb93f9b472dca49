#!/usr/bin/env bash
# Sanitizer runs, idempotent and incremental (build dirs are kept between runs):
#   asan  CMake preset "asan" (ASan+UBSan) in build/asan: build, then the GoogleTest suite
#   tsan  CMake preset "tsan" (ThreadSanitizer) in build/tsan: build, then the suite 3 times
#         (the tests whose code starts no thread are left out: RINGLOADER_THREADED_TESTS_ONLY)
#   py    the Python extension built with ASan+UBSan (build/asan-py, installed with
#         pip --target into $ASAN_SITE, never into .venv) running tests/stress/loader_stress.py
#
#   scripts/sanitize.sh [asan] [tsan] [py]     (no argument: all three)
#
# Needs what scripts/setup.sh installs (Debian packages and .venv); GCC's sanitizer runtimes
# come with g++. Exits non-zero on the first failing stage.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
ASAN_SITE=${ASAN_SITE:-${TMPDIR:-/tmp}/ringloader_asan_site}
STRESS_ROUNDS=${STRESS_ROUNDS:-10}
stages=("$@")
((${#stages[@]})) || stages=(asan tsan py)

# One compiler name for the presets' builds and the extension's (scikit-build-core would take
# Python's sysconfig CXX, CMake c++): ccache hashes the name, and with one name the py stage's
# build of the core is served by the asan stage's objects (same flags, same files) when ccache
# is on (scripts/test.sh), so it compiles only what that stage does not: the bindings and bench.
export CC="${CC:-gcc}" CXX="${CXX:-g++}"

elapsed() { echo "$((SECONDS - $1)) s"; }

run_asan() {
  local t0=$SECONDS
  echo "== asan: configure + build (build/asan)"
  cmake --preset asan >/dev/null
  cmake --build --preset asan
  echo "== asan: ctest"
  ctest --preset asan
  echo "== asan: passed in $(elapsed "$t0")"
}

run_tsan() {
  local t0=$SECONDS
  echo "== tsan: configure + build (build/tsan)"
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan
  # -Wno-tsan (preset): GCC warns that TSan ignores standalone fences; BoundedQueue uses them
  # only for its wake-up handshake (liveness), while its data is published by release/acquire
  # on cell sequences, which TSan does model. A lost wake-up would show as a ctest timeout.
  # TSan's fixed shadow layout fails ("unexpected memory mapping") when the kernel randomises
  # mmap with more bits than this GCC's TSan expects (vm.mmap_rnd_bits = 32 on some newer
  # kernels). Turning ASLR off for the test processes avoids it; where personality() is not
  # allowed (some containers) run without and let a failure name the cause.
  local -a norandom=()
  if setarch "$(uname -m)" -R true 2>/dev/null; then
    norandom=(setarch "$(uname -m)" -R)
  else
    local bits
    bits=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo '?')
    echo "tsan: setarch -R unavailable; running with ASLR on (vm.mmap_rnd_bits=$bits)"
  fi
  echo "== tsan: ctest (3 passes: interleavings differ from run to run)"
  "${norandom[@]}" ctest --preset tsan --repeat until-fail:3
  echo "== tsan: passed in $(elapsed "$t0")"
}

run_py() {
  local t0=$SECONDS
  local san="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"
  echo "== py: build the extension with ASan+UBSan (build/asan-py -> $ASAN_SITE)"
  "$PYTHON" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
    --upgrade --target "$ASAN_SITE" \
    -C build-dir=build/asan-py -C cmake.build-type=RelWithDebInfo \
    -C "cmake.define.CMAKE_C_FLAGS=$san" -C "cmake.define.CMAKE_CXX_FLAGS=$san" \
    -C "cmake.define.CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined" \
    -C "cmake.define.CMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined" \
    -C cmake.define.RINGLOADER_CUDA=OFF -C build.tool-args=-j2 .
  echo "== py: tests/stress/loader_stress.py under ASan (rounds=$STRESS_ROUNDS)"
  # The interpreter is not instrumented, so the runtime is preloaded; libstdc++ too, because
  # ASan resolves __cxa_throw when it starts and python itself does not link libstdc++
  # (without it the first C++ exception aborts in ASan's interceptor). Python leaks by design
  # (interned objects, caches), so leak checking is off here; the C++ suite checks leaks.
  local libasan libstdcxx
  libasan=$(gcc -print-file-name=libasan.so)
  libstdcxx=$(readlink -f "$(gcc -print-file-name=libstdc++.so)")
  LD_PRELOAD="$libasan $libstdcxx" \
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  PYTHONPATH="$ASAN_SITE" \
    "$PYTHON" tests/stress/loader_stress.py --rounds "$STRESS_ROUNDS"
  echo "== py: passed in $(elapsed "$t0")"
}

total=$SECONDS
for stage in "${stages[@]}"; do
  case "$stage" in
    asan) run_asan ;;
    tsan) run_tsan ;;
    py) run_py ;;
    *) echo "sanitize: unknown stage '$stage' (asan, tsan, py)" >&2; exit 2 ;;
  esac
done
echo "sanitize: all stages passed in $(elapsed "$total")"
