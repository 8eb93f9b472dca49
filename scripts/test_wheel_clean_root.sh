#!/usr/bin/env bash
# Proves that the wheel installs and runs on a clean system:
#   1. the wheel: built for Python 3.11 (the root's python) by scripts/build_wheels.sh, or the
#      one given as argument; `auditwheel show` must call it manylinux, and every ELF file in it
#      must need no newer glibc/libstdc++/libgcc symbol versions than its tag allows
#      (scripts/wheels/check_symbols.py);
#   2. a minimal Debian root made by mmdebstrap with python and venv only (no compiler, no -dev
#      package, none of the image or I/O libraries; checked), a venv in it with torch, numpy and
#      Pillow from the package index this machine's pip uses (local index directories are
#      bind-mounted in, so the install is offline where the host's is);
#   3. the wheel installed into that venv, then tests/install/smoke.py there: ldd of the extension
#      and the CLI, a real epoch on generated JPEGs, ringloader-bench/-compare.
# Usage: bash scripts/test_wheel_clean_root.sh [--suite bookworm|bullseye] [--arch x86_64|aarch64]
#                                              [--torch REQUIREMENT] [--pixels FILE] [wheel]
#   --suite bookworm (default): Debian 12, glibc 2.36, its python3 (3.11).
#   --suite bullseye: Debian 11, glibc 2.31 (the oldest Debian root reachable here; its python3
#       is 3.9, too old for current torch, so CPython 3.11 is compiled in the root from the
#       Debian source of bookworm's python3.11 and the compiler removed again before the test).
#   --arch aarch64: an arm64 root, run under qemu-user-static through binfmt_misc (registered
#       here when missing); the wheel must be given. No torch in that root (the smoke test runs
#       the epoch through numpy then).
#   --torch: the torch requirement in the root (default $RINGLOADER_CLEAN_ROOT_TORCH or "torch":
#       the newest the index and the constraints allow, i.e. the pin).
#   --prepare-only: makes (or checks) the root and stops; no wheel.
#   --pixels FILE: also writes the uint8 pixels of a seeded epoch over a fixed set of files
#       (made by the host, the same for every root) to FILE, to compare across architectures.
# Skips (exit 0, with the reason) without root or without mmdebstrap (installed with apt-get when
# possible), or without a CPython 3.11 to build the wheel with.
# Cached: each root with its venv in ${RINGLOADER_CACHE:-~/.cache/ringloader}/clean-root-<suite>
# [-<arch>][-torch<version>], rebuilt only when its recipe below changes; every run installs the
# wheel afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
skip() { echo "test_wheel_clean_root: SKIPPED: $*"; exit 0; }
step() { echo "== test_wheel_clean_root: $*"; }

[ "$(id -u)" -eq 0 ] || skip "needs root (mmdebstrap into a directory, chroot, bind mounts)"
if ! command -v mmdebstrap >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 || skip "mmdebstrap is not installed and there is no apt-get"
  step "installing mmdebstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi
# Every mount below lives in a private mount namespace: nothing leaks if the script fails.
if [ -z "${RINGLOADER_IN_MOUNT_NS:-}" ]; then
  exec env RINGLOADER_IN_MOUNT_NS=1 unshare --mount --propagation private bash "$0" "$@"
fi

SUITE=bookworm
ARCH=x86_64
TORCH=${RINGLOADER_CLEAN_ROOT_TORCH:-torch}
PIXELS=""
WHEEL=""
PREPARE_ONLY=""
while (($#)); do
  case $1 in
    --suite) SUITE=$2; shift 2;;
    --arch) ARCH=$2; shift 2;;
    --torch) TORCH=$2; shift 2;;
    --pixels) PIXELS=$2; shift 2;;
    --prepare-only) PREPARE_ONLY=1; shift;;
    -*) echo "test_wheel_clean_root: unknown option $1" >&2; exit 2;;
    *) WHEEL=$1; shift;;
  esac
done
case $SUITE in bookworm|bullseye) ;; *) echo "test_wheel_clean_root: --suite bookworm or bullseye" >&2; exit 2;; esac
case $ARCH in
  x86_64) DEBARCH=amd64;;
  aarch64) DEBARCH=arm64; [ -n "$WHEEL$PREPARE_ONLY" ] || { echo "test_wheel_clean_root: --arch aarch64 needs the wheel" >&2; exit 2; };;
  *) echo "test_wheel_clean_root: --arch x86_64 or aarch64" >&2; exit 2;;
esac

# ---- 1. the wheel --------------------------------------------------------------------------
if [ -z "$PREPARE_ONLY" ]; then
if [ -z "$WHEEL" ]; then
  py311=""
  for candidate in .venv/bin/python python3.11 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.11.*/bin/python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       [ "$("$candidate" -c 'import sys; print(sys.version_info[:2] == (3, 11))')" = True ]; then
      py311=$candidate; break
    fi
  done
  [ -n "$py311" ] || skip "no CPython 3.11 here to build the wheel for the root's python3 (3.11)"
  step "building the cp311 wheel"
  if ! bash scripts/build_wheels.sh "$py311" > build/build_wheels-cp311.log 2>&1; then
    cat build/build_wheels-cp311.log >&2
    exit 1
  fi
  WHEEL=$(ls -t dist/ringloader-*-cp311-cp311-manylinux*.whl | head -n 1)
fi
WHEEL=$(realpath "$WHEEL")
echo "   wheel: $WHEEL"
AUDITWHEEL=build/wheel-tools/bin/auditwheel
[ -x "$AUDITWHEEL" ] || AUDITWHEEL=.venv/bin/auditwheel
show=$("$AUDITWHEEL" show "$WHEEL" 2>&1 | tr -s ' \n' ' ')
if ! grep -q 'is consistent with the following platform tag: "manylinux_' <<<"$show"; then
  echo "auditwheel show: not a manylinux wheel: $show" >&2
  exit 1
fi
echo "   auditwheel show: $(grep -o 'platform tag: "[^"]*"' <<<"$show")"
python3 scripts/wheels/check_symbols.py "$WHEEL"
version=$(basename "$WHEEL" | cut -d- -f2)
fi

# ---- 2. the clean root (cached) ------------------------------------------------------------
CACHE=${RINGLOADER_CACHE:-$HOME/.cache/ringloader}
RFS=$CACHE/clean-root-$SUITE
[ "$ARCH" = x86_64 ] || RFS=$RFS-$ARCH
[ "$TORCH" = torch ] || RFS=$RFS-${TORCH//[^A-Za-z0-9.]/_}
venv_packages="$TORCH numpy pillow"
[ "$ARCH" = x86_64 ] || venv_packages="numpy pillow"
# bullseye: CPython 3.11 from the orig tarball of bookworm's python3.11 source package (fetched
# with the other wheel sources by scripts/wheels/deps.sh's apt-get source set-up).
PYSRC_NAME=python3.11_3.11.2.orig.tar.gz
case $SUITE in
  bookworm) include=python3,python3-venv; pyexe=python3;;
  bullseye) include=build-essential,libssl-dev,zlib1g-dev,libffi-dev,libbz2-dev,liblzma-dev,ca-certificates
            pyexe=/opt/python3.11/bin/python3.11;;
esac
arch_word=""
[ "$DEBARCH" = amd64 ] || arch_word=" $DEBARCH"
recipe="mmdebstrap minbase $SUITE$arch_word ${include//,/ } | venv: $venv_packages"
[ "$SUITE" = bookworm ] || recipe="$recipe | $PYSRC_NAME in /opt/python3.11, compiler purged"

# The package index: the host pip's own settings. Where they include local indexes (simple
# index directories, find-links directories), only those are used, bind-mounted at the same
# paths (a .../simple directory with its parent, where its files are): the install is offline.
# Otherwise the host's settings go in as they are, with its CA bundle.
host_python=.venv/bin/python
[ -x "$host_python" ] || host_python=python3
declare -A pip_conf=()
while IFS= read -r line; do
  key=${line%%=*}; key=${key##*.}; value=${line#*=}; value=${value#\'}; value=${value%\'}
  # pip lists environment variables first, and they win over its files.
  [ -n "${pip_conf[$key]:-}" ] || pip_conf[$key]=$value
done < <("$host_python" -m pip config list 2>/dev/null || true)
local_path() {  # prints the local path of an index/find-links entry, if it is one that exists
  local path=${1#file://}
  if [ "${path:0:1}" = / ] && [ -e "$path" ]; then echo "$path"; fi
}
pip_mounts=()
local_indexes=()
local_links=()
for item in ${pip_conf[index-url]:-} ${pip_conf[extra-index-url]:-}; do
  path=$(local_path "$item")
  [ -n "$path" ] || continue
  local_indexes+=("file://$path")
  pip_mounts+=("$([ "$(basename "$path")" = simple ] && dirname "$path" || echo "$path")")
done
for item in ${pip_conf[find-links]:-}; do
  path=$(local_path "$item")
  [ -n "$path" ] || continue
  local_links+=("$path")
  pip_mounts+=("$path")
done
# Online (the host's settings as they are, local indexes still mounted) where the local ones
# cannot have what the root needs: another architecture's wheels, a torch other than the pin.
ONLINE=""
[ "$ARCH" = x86_64 ] && [ "$TORCH" = torch ] || ONLINE=1
pip_env=()
if ((${#local_indexes[@]} + ${#local_links[@]})) && [ -z "$ONLINE" ]; then
  if ((${#local_indexes[@]} == 0)); then
    pip_env+=(PIP_NO_INDEX=1)
  else
    pip_env+=("PIP_INDEX_URL=${local_indexes[0]}")
    ((${#local_indexes[@]} == 1)) || pip_env+=("PIP_EXTRA_INDEX_URL=${local_indexes[*]:1}")
  fi
  ((${#local_links[@]} == 0)) || pip_env+=("PIP_FIND_LINKS=${local_links[*]}")
else
  for key in index-url extra-index-url find-links cert; do
    [ -n "${pip_conf[$key]:-}" ] || continue
    var=PIP_${key^^}; pip_env+=("${var//-/_}=${pip_conf[$key]}")
  done
  [ -z "${pip_conf[cert]:-}" ] || pip_mounts+=("${pip_conf[cert]}")
fi
if [ "$ARCH" != x86_64 ]; then
  # The root's programs run under qemu-user-static, through binfmt_misc (F: the interpreter is
  # opened now, so it works inside the chroot). Registered here when missing.
  if [ ! -x "/usr/bin/qemu-$ARCH-static" ] || ! command -v arch-test >/dev/null 2>&1; then
    step "installing qemu-user-static and arch-test (mmdebstrap's check of a foreign architecture)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static arch-test >/dev/null
  fi
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  if [ ! -e "/proc/sys/fs/binfmt_misc/qemu-$ARCH" ]; then
    grep -v '^#' "/usr/lib/binfmt.d/qemu-$ARCH.conf" > /proc/sys/fs/binfmt_misc/register
  fi
fi
if [ -n "${pip_conf[constraint]:-}" ]; then
  pip_env+=("PIP_CONSTRAINT=${pip_conf[constraint]}")
  pip_mounts+=("${pip_conf[constraint]}")
fi

# in_root <root> <command...>: runs the command in the root with /proc, /sys, /dev, the host's
# resolv.conf and the local package indexes mounted, unmounting them after.
in_root() {
  local rfs=$1 path
  shift
  local mounted=(proc sys dev)
  mount -t proc proc "$rfs/proc"
  mount --rbind /sys "$rfs/sys"
  mount --rbind /dev "$rfs/dev"
  if [ -f /etc/resolv.conf ]; then cp -L /etc/resolv.conf "$rfs/etc/resolv.conf"; fi
  for path in "${pip_mounts[@]}"; do
    if [ -d "$path" ]; then mkdir -p "$rfs$path"; else mkdir -p "$(dirname "$rfs$path")"; touch "$rfs$path"; fi
    mount --bind -o ro "$path" "$rfs$path"
    mounted+=("${path#/}")
  done
  local rc=0
  chroot "$rfs" /usr/bin/env -i PATH=/opt/venv/bin:/usr/bin:/bin HOME=/root LC_ALL=C.UTF-8 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 "${pip_env[@]}" "$@" || rc=$?
  for path in "${mounted[@]}"; do umount -R "$rfs/$path"; done
  return $rc
}

if [ "$(cat "$RFS/.recipe" 2>/dev/null)" != "$recipe" ]; then
  step "building the clean root in $RFS (first run: a few minutes)"
  t0=$SECONDS
  rm -rf "$RFS" "$RFS.tmp"
  mkdir -p "$CACHE"
  base=$CACHE/clean-root-$SUITE
  [ "$ARCH" = x86_64 ] || base=$base-$ARCH
  if [ "$RFS" != "$base" ] && [ "$(cut -d'|' -f1 "$base/.recipe" 2>/dev/null)" = "$(cut -d'|' -f1 <<<"$recipe")" ]; then
    # Another torch: a copy of the same root with the default torch (its python built already).
    cp -a "$base" "$RFS.tmp"
  else
    mmdebstrap --quiet --variant=minbase --architectures="$DEBARCH" --include="$include" "$SUITE" "$RFS.tmp"
  fi
  if [ -f "$RFS.tmp/opt/venv/pyvenv.cfg" ]; then
    :
  elif [ "$SUITE" = bullseye ]; then
    pysrc=build/wheel-deps/src/$PYSRC_NAME
    if [ ! -f "$pysrc" ]; then
      bash scripts/wheels/debian_source.sh python3.11
      [ -f "$pysrc" ] || { echo "test_wheel_clean_root: could not fetch $PYSRC_NAME (apt-get source python3.11)" >&2; exit 1; }
    fi
    cp "$pysrc" "$RFS.tmp/tmp/python.tar.gz"
    in_root "$RFS.tmp" sh -ec 'cd /tmp && tar xzf python.tar.gz && cd Python-3.11.* &&
      ./configure -q --prefix=/opt/python3.11 >/dev/null && make -s -j"$(nproc)" >/dev/null 2>&1 &&
      make -s install >/dev/null 2>&1 && cd / && rm -rf /tmp/Python-3.11.* /tmp/python.tar.gz
      /opt/python3.11/bin/python3.11 -c "import ssl, zlib, ctypes, bz2, lzma"
      apt-mark manual -qq libssl1.1 libffi7 zlib1g libbz2-1.0 liblzma5 ca-certificates >/dev/null
      apt-get purge -qq -y build-essential gcc g++ cpp make dpkg-dev "*-dev" >/dev/null
      apt-get autoremove --purge -qq -y >/dev/null'
  fi
  [ -f "$RFS.tmp/opt/venv/pyvenv.cfg" ] || in_root "$RFS.tmp" "$pyexe" -m venv /opt/venv
  # shellcheck disable=SC2086  # one requirement per word
  in_root "$RFS.tmp" pip install -q $venv_packages
  echo "$recipe" > "$RFS.tmp/.recipe"
  mv "$RFS.tmp" "$RFS"
  echo "   ($((SECONDS - t0)) s)"
fi

# Clean means clean: no compiler and none of the libraries ringloader builds against.
leaked=$(chroot "$RFS" dpkg-query -W -f='${Package}\n' |
         grep -E '^(gcc|g\+\+|clang|cpp)(-[0-9]+)?$|-dev$|^lib(jpeg|turbojpeg|uring|numa|absl|spng|deflate|webp|png|tiff|curl)' || true)
if [ -n "$leaked" ]; then
  echo "the clean root has packages it must not have: $leaked" >&2
  exit 1
fi

[ -z "$PREPARE_ONLY" ] || { step "root ready: $RFS"; exit 0; }

# ---- 3. install the wheel and run the smoke test there -------------------------------------
step "installing $(basename "$WHEEL") in the root and running tests/install/smoke.py"
t0=$SECONDS
rm -rf "$RFS/tmp/ringloader-test"
mkdir -p "$RFS/tmp/ringloader-test"
cp "$WHEEL" tests/install/smoke.py "$RFS/tmp/ringloader-test/"
in_root "$RFS" pip install -q --force-reinstall --no-deps "/tmp/ringloader-test/$(basename "$WHEEL")"
smoke_args=("$version")
if [ -n "$PIXELS" ]; then
  # The same files in every root: made here, by the host's Python (numpy + Pillow from .venv).
  rm -rf build/pixel-images
  .venv/bin/python tests/install/smoke.py --make-images build/pixel-images >/dev/null
  cp -a build/pixel-images "$RFS/tmp/ringloader-test/pixel-images"
  smoke_args+=(--pixels /tmp/ringloader-test/pixels.bin --pixel-images /tmp/ringloader-test/pixel-images)
fi
in_root "$RFS" python /tmp/ringloader-test/smoke.py "${smoke_args[@]}"
if [ -n "$PIXELS" ]; then cp "$RFS/tmp/ringloader-test/pixels.bin" "$PIXELS"; echo "   pixels: $PIXELS"; fi
in_root "$RFS" pip uninstall -q -y ringloader
rm -rf "$RFS/tmp/ringloader-test"
echo "   ($((SECONDS - t0)) s)"
step "OK"
