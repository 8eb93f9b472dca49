#!/usr/bin/env bash
# Proves that the wheel installs and runs on a clean system:
#   1. the wheel: built for Python 3.11 (the root's python3) by scripts/build_wheels.sh, or the
#      one given as argument; `auditwheel show` must call it manylinux;
#   2. a minimal Debian 12 root made by mmdebstrap with python3 and python3-venv only (no compiler,
#      no -dev package, none of the image or I/O libraries; checked), a venv in it with torch,
#      numpy and Pillow from the package index this machine's pip uses (local index directories
#      are bind-mounted in, so the install is offline where the host's is);
#   3. the wheel installed into that venv, then tests/install/smoke.py there: ldd of the extension
#      and the CLI, a real epoch on generated JPEGs, ringloader-bench/-compare.
# Usage: bash scripts/test_wheel_clean_root.sh [wheel]
# Skips (exit 0, with the reason) without root or without mmdebstrap (installed with apt-get when
# possible), or without a CPython 3.11 to build the wheel with.
# Cached: the root with its venv in ${RINGLOADER_CACHE:-~/.cache/ringloader}/clean-root-bookworm,
# rebuilt only when its recipe below changes; every run installs the wheel afresh.
# Environment: RINGLOADER_CLEAN_ROOT_TORCH (default "torch"): the torch requirement in the root.
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

# ---- 1. the wheel --------------------------------------------------------------------------
WHEEL=${1:-}
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
version=$(basename "$WHEEL" | cut -d- -f2)

# ---- 2. the clean root (cached) ------------------------------------------------------------
CACHE=${RINGLOADER_CACHE:-$HOME/.cache/ringloader}
RFS=$CACHE/clean-root-bookworm
TORCH=${RINGLOADER_CLEAN_ROOT_TORCH:-torch}
recipe="mmdebstrap minbase bookworm python3 python3-venv | venv: $TORCH numpy pillow"

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
pip_env=()
if ((${#local_indexes[@]} + ${#local_links[@]})); then
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
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv bookworm "$RFS.tmp"
  in_root "$RFS.tmp" python3 -m venv /opt/venv
  in_root "$RFS.tmp" pip install -q "$TORCH" numpy pillow
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

# ---- 3. install the wheel and run the smoke test there -------------------------------------
step "installing $(basename "$WHEEL") in the root and running tests/install/smoke.py"
t0=$SECONDS
rm -rf "$RFS/tmp/ringloader-test"
mkdir -p "$RFS/tmp/ringloader-test"
cp "$WHEEL" tests/install/smoke.py "$RFS/tmp/ringloader-test/"
in_root "$RFS" pip install -q --force-reinstall --no-deps "/tmp/ringloader-test/$(basename "$WHEEL")"
in_root "$RFS" python /tmp/ringloader-test/smoke.py "$version"
in_root "$RFS" pip uninstall -q -y ringloader
rm -rf "$RFS/tmp/ringloader-test"
echo "   ($((SECONDS - t0)) s)"
step "OK"
