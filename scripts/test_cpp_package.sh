#!/usr/bin/env bash
# Tests the installable C++ package the way an outside project uses it:
#   1. configures, builds and installs ringloader (library, headers, CMake config, bench CLI)
#      into a scratch prefix (build/pkg/prefix), with the LibTorch adaptor when torch is found;
#   2. checks that the installed headers are the API only (include/ringloader/*.h, which include
#      nothing but each other, Abseil and the standard library: no decode/, io/, transform/,
#      pipeline/ or testing/ header is shipped);
#   3. builds tests/cpp_consumer against that prefix only and runs it (the API; the umbrella
#      header alone; and the LibTorch adaptor test when the torch component is available);
#   4. compiles the C++ blocks of the README and the manual (docs/) (scripts/doc_cpp_blocks.py) against that prefix;
#   5. builds the LibTorch training example (examples/cpp) the same way and runs a few steps
#      on CPU.
# Data: the Python sample set when it has been generated ($RINGLOADER_CACHE/sample-v1), else a
# small synthetic set that the installed ringloader-bench generates once into build/pkg.
# Incremental and idempotent: build/pkg keeps its builds; the prefix is reinstalled each run.
# Environment: PYTHON (default .venv/bin/python) locates torch; RINGLOADER_REQUIRE_TORCH=1 fails
# instead of skipping the LibTorch parts when torch is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=$ROOT/build/pkg
PREFIX=$OUT/prefix
JOBS=${JOBS:-2}
PYTHON=${PYTHON:-$ROOT/.venv/bin/python}

GENERATOR=()
if command -v ninja >/dev/null 2>&1; then GENERATOR=(-G Ninja); fi
# A build dir configured with another generator cannot be reused: start it over.
for dir in "$OUT/core" "$OUT/consumer" "$OUT/example"; do
  if [ -f "$dir/CMakeCache.txt" ] && ! grep -q "CMAKE_GENERATOR:INTERNAL=${GENERATOR[1]:-Unix Makefiles}$" "$dir/CMakeCache.txt"; then
    rm -rf "$dir"
  fi
done

TORCH_PREFIX=""
if [ -x "$PYTHON" ]; then
  TORCH_PREFIX=$("$PYTHON" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)
fi
if [ -z "$TORCH_PREFIX" ]; then
  if [ "${RINGLOADER_REQUIRE_TORCH:-0}" = 1 ]; then
    echo "test_cpp_package: torch not importable by $PYTHON" >&2
    exit 1
  fi
  echo "test_cpp_package: torch not found ($PYTHON): skipping the LibTorch adaptor and example"
fi

step() { echo "== test_cpp_package: $*"; }
timed() { local t0=$SECONDS; "$@"; echo "   ($((SECONDS - t0)) s)"; }

step "build + install ringloader into $PREFIX"
timed cmake -S . -B "$OUT/core" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DRINGLOADER_BUILD_TESTS=OFF -DRINGLOADER_BUILD_BENCH=ON \
  -DRINGLOADER_TORCH="$([ -n "$TORCH_PREFIX" ] && echo ON || echo OFF)" \
  -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DCMAKE_INSTALL_PREFIX="$PREFIX" >/dev/null
timed cmake --build "$OUT/core" -j "$JOBS"
rm -rf "$PREFIX"
cmake --install "$OUT/core" >/dev/null
test -f "$PREFIX/include/ringloader/ringloader.h"
test -f "$PREFIX/lib/cmake/ringloader/ringloaderConfig.cmake"

step "installed headers are the API only"
# Nothing beside include/ringloader/NAME.h: an internal folder (decode/, io/, transform/,
# pipeline/, testing/...) or any other file there fails.
extra=$(cd "$PREFIX/include" && find . -mindepth 1 ! -path ./ringloader ! -regex '\./ringloader/[a-z_]+\.h' -print)
if [ -n "$extra" ]; then
  echo "test_cpp_package: installed besides the API headers:" $extra >&2
  exit 1
fi
# And those include only each other (installed), Abseil and the standard library (torch.h: ATen).
for header in "$PREFIX"/include/ringloader/*.h; do
  while read -r included; do
    case "$included" in
      absl/*) ;;
      ringloader/*) test -f "$PREFIX/include/$included" || {
        echo "test_cpp_package: $header includes $included, which is not installed" >&2; exit 1; } ;;
      *) echo "test_cpp_package: $header includes \"$included\", not part of the API" >&2; exit 1 ;;
    esac
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$header")
done
# No locks in the API: a class that waits keeps its mutex and condition variables in its .cc.
if grep -nE 'std::(mutex|condition_variable)|#include <(mutex|condition_variable)>' "$PREFIX"/include/ringloader/*.h; then
  echo "test_cpp_package: an installed header exposes a lock (above): keep it behind the class's .cc" >&2; exit 1
fi
# No test hooks in the API: nothing installed names the library's internal namespace (where
# tests point the loader at fake machine files: pipeline/loader_factory.h).
if grep -nE '\binternal::|namespace internal\b' "$PREFIX"/include/ringloader/*.h; then
  echo "test_cpp_package: an installed header names ringloader::internal (above): keep it in csrc/, not the API" >&2; exit 1
fi
echo "   $(ls "$PREFIX/include/ringloader" | tr '\n' ' ')"

DATA=${RINGLOADER_CACHE:-$HOME/.cache/ringloader}/sample-v1
if [ ! -f "$DATA/.ringloader-sample.json" ]; then
  step "generating a small synthetic image folder"
  RINGLOADER_CACHE=$OUT/cache "$PREFIX/bin/ringloader-bench" --synthetic_images=96 --preset=read \
    --warmup=0 --progress=false >/dev/null
  DATA=$OUT/cache/bench-synthetic-v1-n96
fi
echo "   data: $DATA"

step "consumer project against the installed package"
timed cmake -S tests/cpp_consumer -B "$OUT/consumer" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX;$TORCH_PREFIX" >/dev/null
timed cmake --build "$OUT/consumer" -j "$JOBS"
"$OUT/consumer/consumer" "$DATA"
"$OUT/consumer/api_only" "$DATA"
if [ -n "$TORCH_PREFIX" ]; then
  "$OUT/consumer/torch_adaptor_test" "$DATA"
fi

step "the docs' C++ blocks compile against the installed package"
rm -rf "$OUT/doc_blocks/src"
"$PYTHON" scripts/doc_cpp_blocks.py "$OUT/doc_blocks/src" README.md docs
timed cmake -S "$OUT/doc_blocks/src" -B "$OUT/doc_blocks/build" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$PREFIX;$TORCH_PREFIX" >/dev/null
timed cmake --build "$OUT/doc_blocks/build" -j "$JOBS"

if [ -n "$TORCH_PREFIX" ]; then
  step "LibTorch example (examples/cpp) against the installed package"
  timed cmake -S examples/cpp -B "$OUT/example" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$PREFIX;$TORCH_PREFIX" >/dev/null
  timed cmake --build "$OUT/example" -j "$JOBS"
  "$OUT/example/train_tiny_cnn" "$DATA" 8 32
fi
step "OK"
