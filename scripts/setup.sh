#!/usr/bin/env bash
# Installs everything ringloader needs on a fresh Debian machine and builds it, idempotently:
# Debian packages (only the missing ones), a virtual environment in .venv with the pinned
# requirements, and the package itself (C++ core, extension, tests and bench in build/py).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(g++ pkg-config liburing-dev libturbojpeg0-dev libjpeg62-turbo-dev libabsl-dev
              libspng-dev libdeflate-dev libwebp-dev libtiff-dev   # PNG, WebP, TIFF decoders
              libcurl4-openssl-dev   # http(s):// and s3:// shards
              libavformat-dev libavcodec-dev libavutil-dev libswscale-dev   # video clips (headers;
              ffmpeg                 # FFmpeg itself is loaded at run time); ffmpeg: the tests' videos
              nginx-light openssl    # the remote-shard tests' HTTP(S) server
              libnuma-dev libgtest-dev libgmock-dev
              clang libclang-rt-14-dev)   # clang + its runtimes: the libFuzzer target
# The NEON kernels' test (test_neon.sh): cross-compiled and run under qemu on an x86_64 host
# (an aarch64 host runs it natively with its own g++).
[ "$(uname -m)" = x86_64 ] && APT_PACKAGES+=(g++-aarch64-linux-gnu qemu-user-static)
# The test command (scripts/test.sh) compiles the core several times: ccache serves repeats.
[ "${RINGLOADER_CCACHE:-0}" = 1 ] && APT_PACKAGES+=(ccache)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.requirements.sha
want=$(sha256sum requirements-dev.txt | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing Python requirements (torch is large; first run takes a few minutes)"
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
  echo "$want" > "$stamp"
fi

if [ "${RINGLOADER_CCACHE:-0}" = 1 ] && command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
# Incremental: build/py keeps the CMake build between runs.
echo "setup: building ringloader"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  -C build-dir=build/py -C cmake.define.RINGLOADER_BUILD_TESTS=ON -C cmake.define.RINGLOADER_BUILD_BENCH=ON .
