#!/usr/bin/env bash
# Builds the wheel's C/C++ dependencies from their Debian (bookworm) source packages with Zig's
# clang for an old glibc, as static, position-independent archives with hidden symbols:
#   zlib, libdeflate, libjpeg-turbo, liburing, libspng, libwebp, libtiff, mbedtls, libcurl
#   (HTTP(S) only, TLS by mbedtls), libnuma and Abseil.
# Usage: bash scripts/wheels/deps.sh <arch> [glibc]     arch: x86_64 | aarch64; glibc: 2.28
# Prints the toolchain file to give CMake (CMAKE_TOOLCHAIN_FILE) on its last line.
#
# Everything lives under build/ (ignored): build/wheel-deps/src (the sources, `apt-get source`
# with a private apt state, so the host's apt configuration is untouched), build/wheel-zig (Zig
# from PyPI, the version pinned below), build/wheel-deps/<arch>-<glibc>/ (compiler wrappers,
# toolchain file, install prefix). Incremental: each library is rebuilt only when its source
# version or its recipe line here changes (a stamp per library).
# Needs: apt-get + dpkg-source (Debian sources), nasm (libjpeg-turbo's x86 SIMD), cmake, make.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
ARCH=${1:?usage: deps.sh <x86_64|aarch64> [glibc]}
GLIBC=${2:-2.28}
case $ARCH in x86_64|aarch64) ;; *) echo "deps.sh: unknown arch '$ARCH' (x86_64 or aarch64)" >&2; exit 2;; esac
ZIG_VERSION=0.17.1
JOBS=${JOBS:-2}
step() { echo "== wheels/deps ($ARCH, glibc $GLIBC): $*" >&2; }

# ---- Zig ------------------------------------------------------------------------------------
ZIGENV=$ROOT/build/wheel-zig
if [ "$(cat "$ZIGENV/.version" 2>/dev/null)" != "$ZIG_VERSION" ]; then
  step "installing ziglang==$ZIG_VERSION into $ZIGENV"
  rm -rf "$ZIGENV"
  python3 -m venv "$ZIGENV"
  "$ZIGENV/bin/python" -m pip install -q "ziglang==$ZIG_VERSION"
  echo "$ZIG_VERSION" > "$ZIGENV/.version"
fi
ZIG=$(echo "$ZIGENV"/lib/python3*/site-packages/ziglang/zig)
[ -x "$ZIG" ] || { echo "deps.sh: no zig binary at $ZIG" >&2; exit 1; }
export ZIG_GLOBAL_CACHE_DIR=$ZIGENV/cache ZIG_LOCAL_CACHE_DIR=$ZIGENV/cache

# ---- compiler wrappers and CMake toolchain file -----------------------------------------------
OUT=$ROOT/build/wheel-deps/$ARCH-$GLIBC
BIN=$OUT/bin
PREFIX=$OUT/prefix
mkdir -p "$BIN" "$PREFIX/lib/pkgconfig" "$PREFIX/include"
TARGET=$ARCH-linux-gnu.$GLIBC
# Each generated file is replaced only when its text changes (CMake and ninja go by mtimes).
put() { if ! cmp -s "$1.new" "$1"; then mv "$1.new" "$1"; else rm -f "$1.new"; fi; }
for tool in cc c++; do
  cat > "$BIN/$tool.new" <<EOF
#!/bin/sh
# $tool for $TARGET (Zig's clang; libc++ linked statically, glibc symbols at $GLIBC at most).
# Zig's linker has no --exclude-libs: the archives here are all compiled -fvisibility=hidden, so
# what that option would hide is hidden already, and it is dropped.
skip=0
for arg do
  shift
  if [ \$skip -gt 0 ]; then skip=\$((skip - 1)); continue; fi
  case \$arg in
    -Wl,--exclude-libs,*) continue;;
    -Xlinker) if [ "\${1:-}" = --exclude-libs ]; then skip=3; continue; fi;;  # -Xlinker --exclude-libs -Xlinker X
    # Nor --push-state/--pop-state, which CMake puts around an --as-needed library (libatomic).
    -Wl,--push-state,--as-needed) arg=-Wl,--as-needed;;
    -Wl,--pop-state) arg=-Wl,--no-as-needed;;
  esac
  set -- "\$@" "\$arg"
done
ZIG_GLOBAL_CACHE_DIR="$ZIGENV/cache" ZIG_LOCAL_CACHE_DIR="$ZIGENV/cache" exec "$ZIG" $tool -target $TARGET "\$@"
EOF
  chmod +x "$BIN/$tool.new"; put "$BIN/$tool"
done
for tool in ar ranlib; do
  printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$ZIG" "$tool" > "$BIN/$tool.new"
  chmod +x "$BIN/$tool.new"; put "$BIN/$tool"
done
cat > "$OUT/toolchain.cmake.new" <<EOF
# Zig toolchain for $TARGET with the dependencies in $PREFIX (written by scripts/wheels/deps.sh).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR $ARCH)
set(CMAKE_C_COMPILER "$BIN/cc")
set(CMAKE_CXX_COMPILER "$BIN/c++")
set(CMAKE_AR "$BIN/ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "$BIN/ranlib" CACHE FILEPATH "")
set(CMAKE_ASM_NASM_COMPILER nasm)
list(PREPEND CMAKE_PREFIX_PATH "$PREFIX")
# Never the build machine's own libraries or CMake packages (its -dev packages, its glibc).
set(CMAKE_IGNORE_PREFIX_PATH /usr /usr/local /)
set(CMAKE_SYSTEM_IGNORE_PREFIX_PATH /usr /usr/local /)
set(CMAKE_FIND_USE_PACKAGE_REGISTRY OFF)
set(ENV{PKG_CONFIG_LIBDIR} "$PREFIX/lib/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
set(PKG_CONFIG_EXECUTABLE "$(command -v pkg-config)" CACHE FILEPATH "")
EOF
# The CUDA toolkit (for the static CUDA runtime) is the build machine's, where it has one for
# this architecture: it is a C library built for old glibc versions itself.
cuda=$(readlink -f "${CUDA_HOME:-/usr/local/cuda}" 2>/dev/null || true)
if [ -n "$cuda" ] && [ -d "$cuda/targets/$ARCH-linux" ]; then
  echo "set(CUDAToolkit_ROOT \"$cuda\")" >> "$OUT/toolchain.cmake.new"
else
  echo 'set(RINGLOADER_CUDA OFF CACHE STRING "")  # no CUDA toolkit for this architecture here' >> "$OUT/toolchain.cmake.new"
fi
put "$OUT/toolchain.cmake"
export PKG_CONFIG_LIBDIR=$PREFIX/lib/pkgconfig PKG_CONFIG_PATH=
export CC=$BIN/cc CXX=$BIN/c++ AR=$BIN/ar RANLIB=$BIN/ranlib
DEPFLAGS="-O2 -fPIC -fvisibility=hidden"
export CFLAGS="$DEPFLAGS" CXXFLAGS="$DEPFLAGS"
CMAKE_COMMON=(-G Ninja -DCMAKE_TOOLCHAIN_FILE="$OUT/toolchain.cmake" -DCMAKE_BUILD_TYPE=Release
              -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_INSTALL_LIBDIR=lib
              -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DBUILD_SHARED_LIBS=OFF -DCMAKE_POLICY_VERSION_MINIMUM=3.5
              -DCMAKE_C_VISIBILITY_PRESET=hidden -DCMAKE_CXX_VISIBILITY_PRESET=hidden
              -DCMAKE_C_FLAGS="$DEPFLAGS" -DCMAKE_CXX_FLAGS="$DEPFLAGS")

# ---- the sources -------------------------------------------------------------------------------
SRC=$ROOT/build/wheel-deps/src
PACKAGES=(zlib/bookworm libdeflate libjpeg-turbo liburing libspng libwebp tiff mbedtls curl numactl abseil)
srcdir() {  # srcdir <Debian source name>: the unpacked tree (one per package)
  local d
  d=$(find "$SRC" -maxdepth 1 -type d -name "$1-[0-9]*" | sort | tail -n 1)
  [ -n "$d" ] || { echo "deps.sh: no source tree for $1 in $SRC" >&2; exit 1; }
  echo "$d"
}
for pkg in "${PACKAGES[@]}"; do
  if [ -z "$(find "$SRC" -maxdepth 1 -type d -name "${pkg%%/*}-[0-9]*" 2>/dev/null)" ]; then
    step "fetching the Debian sources (apt-get source)"
    bash "$ROOT/scripts/wheels/debian_source.sh" "${PACKAGES[@]}"
    break
  fi
done

# build <name> <recipe...>: runs the recipe (a function) in a fresh copy of the source tree unless
# the stamp says this source version was built with this recipe already.
build() {
  local name=$1 fn=$2 src stamp want
  src=$(srcdir "$name")
  stamp=$OUT/stamps/$name
  want="$(basename "$src") $(declare -f "$fn" | sha1sum | cut -c1-12) $DEPFLAGS"
  [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return 0
  step "$(basename "$src")"
  local t0=$SECONDS work=$OUT/work/$name
  rm -rf "$work"; mkdir -p "$work" "$OUT/stamps"
  cp -a "$src/." "$work/"
  local rc=0
  set +e
  (set -e; cd "$work"; "$fn") > "$OUT/work/$name.log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then tail -n 40 "$OUT/work/$name.log" >&2; echo "deps.sh: $name failed (log: $OUT/work/$name.log)" >&2; exit 1; fi
  echo "$want" > "$stamp"
  rm -rf "$work"
  echo "   ($((SECONDS - t0)) s)" >&2
}

r_zlib() {
  CHOST=$ARCH-linux-gnu ./configure --static --prefix="$PREFIX" --libdir="$PREFIX/lib"
  make -j"$JOBS" libz.a && make install
}
r_libdeflate() {
  make -j"$JOBS" libdeflate.a PREFIX="$PREFIX" DISABLE_SHARED=1
  make install PREFIX="$PREFIX" LIBDIR="$PREFIX/lib" DISABLE_SHARED=1
}
r_jpeg() {
  # An absolute libdir: its own GNUInstallDirs takes a relative one as relative to the build.
  cmake -S . -B b "${CMAKE_COMMON[@]}" -DCMAKE_INSTALL_LIBDIR="$PREFIX/lib" -DENABLE_SHARED=OFF -DENABLE_STATIC=ON -DWITH_TURBOJPEG=OFF \
    -DWITH_JPEG8=OFF -DWITH_SIMD=ON -DREQUIRE_SIMD=ON
  cmake --build b -j"$JOBS" && cmake --install b
  rm -f "$PREFIX"/bin/{cjpeg,djpeg,jpegtran,rdjpgcom,wrjpgcom}
}
r_uring() {
  ./configure --prefix="$PREFIX" --libdir="$PREFIX/lib" --cc="$CC" --cxx="$CXX"
  make -C src -j"$JOBS" liburing.a CFLAGS="$CFLAGS"
  make -C src install ENABLE_SHARED=0 CFLAGS="$CFLAGS"
  rm -f "$PREFIX"/lib/liburing.so*
  printf 'prefix=%s\nName: liburing\nDescription: io_uring library\nVersion: 2.3\nCflags: -I${prefix}/include\nLibs: -L${prefix}/lib -luring\n' \
    "$PREFIX" > "$PREFIX/lib/pkgconfig/liburing.pc"
}
r_spng() {
  # One C file (its CMake build cannot make only the static library).
  "$CC" $CFLAGS -DSPNG_STATIC -I"$PREFIX/include" -c spng/spng.c -o spng.o
  "$AR" rcs "$PREFIX/lib/libspng_static.a" spng.o
  cp spng/spng.h "$PREFIX/include/"
  cat > "$PREFIX/lib/pkgconfig/spng.pc" <<EOF
prefix=$PREFIX
Name: spng
Description: PNG decoding and encoding library
Version: 0.7.3
Requires.private: zlib
Cflags: -I\${prefix}/include -DSPNG_STATIC
Libs: -L\${prefix}/lib -lspng_static
EOF
}
r_webp() {
  cmake -S . -B b "${CMAKE_COMMON[@]}" -DWEBP_BUILD_ANIM_UTILS=OFF -DWEBP_BUILD_CWEBP=OFF \
    -DWEBP_BUILD_DWEBP=OFF -DWEBP_BUILD_GIF2WEBP=OFF -DWEBP_BUILD_IMG2WEBP=OFF -DWEBP_BUILD_VWEBP=OFF \
    -DWEBP_BUILD_WEBPINFO=OFF -DWEBP_BUILD_WEBPMUX=OFF -DWEBP_BUILD_EXTRAS=OFF -DWEBP_BUILD_LIBWEBPMUX=ON
  cmake --build b -j"$JOBS" && cmake --install b
}
r_tiff() {
  cmake -S . -B b "${CMAKE_COMMON[@]}" -Dtiff-tools=OFF -Dtiff-tests=OFF -Dtiff-contrib=OFF -Dtiff-docs=OFF \
    -Dzlib=ON -Dlibdeflate=ON -Djpeg=ON -Dold-jpeg=OFF -Djbig=OFF -Dlerc=OFF -Dlzma=OFF -Dzstd=OFF -Dwebp=OFF \
    -Dcxx=OFF
  cmake --build b -j"$JOBS" && cmake --install b
}
r_mbedtls() {
  cmake -S . -B b "${CMAKE_COMMON[@]}" -DENABLE_PROGRAMS=OFF -DENABLE_TESTING=OFF -DUSE_STATIC_MBEDTLS_LIBRARY=ON \
    -DUSE_SHARED_MBEDTLS_LIBRARY=OFF -DMBEDTLS_FATAL_WARNINGS=OFF
  cmake --build b -j"$JOBS" && cmake --install b
}
r_curl() {
  # CA certificates: the bundle where Debian/Ubuntu keep it, and the directory every distribution
  # has (/etc/ssl/certs; mbedtls reads every file in it, so RHEL's ca-bundle.crt there works).
  cmake -S . -B b "${CMAKE_COMMON[@]}" -DBUILD_CURL_EXE=OFF -DBUILD_TESTING=OFF -DHTTP_ONLY=ON \
    -DCURL_USE_MBEDTLS=ON -DCURL_USE_OPENSSL=OFF -DCURL_USE_LIBSSH2=OFF -DCURL_USE_LIBSSH=OFF \
    -DUSE_NGHTTP2=OFF -DCURL_USE_GSSAPI=OFF -DUSE_LIBIDN2=OFF -DCURL_USE_LIBPSL=OFF -DCURL_BROTLI=OFF \
    -DCURL_ZSTD=OFF -DENABLE_ARES=OFF -DENABLE_THREADED_RESOLVER=ON -DCURL_DISABLE_LDAP=ON \
    -DCURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt -DCURL_CA_PATH=/etc/ssl/certs \
    -DCURL_CA_FALLBACK=OFF
  cmake --build b -j"$JOBS" && cmake --install b
}
r_numa() {
  # libnuma only (the numactl tools are not needed): its few C files, as the upstream Makefile.am.
  # Its symbol versions (libnuma_1.1/1.2, .symver) need a version script, which a static archive
  # inside our extension cannot have: the current (@@) names become hidden aliases instead, and
  # the old (@) ones go.
  : > config.h
  sed -i -e 's/^SYMVER("\([a-z_0-9]*\)", "\([a-z_0-9]*\)@@libnuma_[0-9.]*")/__asm__(".globl \2\\n.hidden \2\\n.set \2, \1");/' \
         -e 's/^SYMVER("[a-z_0-9]*", "[a-z_0-9]*@libnuma_[0-9.]*")//' libnuma.c syscall.c
  local f objs=()
  for f in libnuma.c syscall.c distance.c affinity.c sysfs.c rtnetlink.c; do
    "$CC" $CFLAGS -D_GNU_SOURCE -DTLS=__thread -I. -c "$f" -o "${f%.c}.o"; objs+=("${f%.c}.o")
  done
  "$AR" rcs "$PREFIX/lib/libnuma.a" "${objs[@]}"
  cp numa.h numaif.h numacompat1.h "$PREFIX/include/"
  printf 'prefix=%s\nName: numa\nDescription: NUMA policy library\nVersion: 2.0.16\nCflags: -I${prefix}/include\nLibs: -L${prefix}/lib -lnuma\n' \
    "$PREFIX" > "$PREFIX/lib/pkgconfig/numa.pc"
}
r_absl() {
  # Its AES-accelerated random engine asks GCC/clang for -march=armv8-a+crypto, which Zig's
  # driver does not take; the same in its words (the engine checks the CPU at run time).
  sed -i 's/-march=armv8-a+crypto/-mcpu=generic+aes/' absl/copts/GENERATED_AbseilCopts.cmake
  cmake -S . -B b "${CMAKE_COMMON[@]}" -DCMAKE_CXX_STANDARD=20 -DABSL_PROPAGATE_CXX_STD=ON \
    -DABSL_BUILD_TESTING=OFF -DBUILD_TESTING=OFF -DABSL_ENABLE_INSTALL=ON
  cmake --build b -j"$JOBS" && cmake --install b
}

build zlib r_zlib
build libdeflate r_libdeflate
build libjpeg-turbo r_jpeg
build liburing r_uring
build libspng r_spng
build libwebp r_webp
build tiff r_tiff
build mbedtls r_mbedtls
build curl r_curl
# Its CMake build writes the archives it was linked with into libcurl.pc as paths (Zig's own
# libc_nonshared.a and compiler_rt among them), which pkg-config's static list does not carry:
# the plain -l form instead.
cat > "$PREFIX/lib/pkgconfig/libcurl.pc.new" <<EOF
prefix=$PREFIX
Name: libcurl
Description: Library to transfer files with ftp, http, etc. (HTTP and HTTPS, mbedTLS)
Version: $(sed -n 's/^Version: //p' "$PREFIX/lib/pkgconfig/libcurl.pc")
Libs: -L\${prefix}/lib -lcurl
Libs.private: -lmbedtls -lmbedx509 -lmbedcrypto -lz -lpthread
Cflags: -I\${prefix}/include -DCURL_STATICLIB
EOF
put "$PREFIX/lib/pkgconfig/libcurl.pc"
build numactl r_numa
build abseil r_absl
echo "$OUT/toolchain.cmake"
