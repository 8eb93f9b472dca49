#!/usr/bin/env bash
# The resampler's NEON kernels (csrc/transform/resample_neon.cc), checked bit for bit against
# its scalar kernels on AArch64 without an arm64 machine: csrc/transform/resample_simd_check.cc
# is cross-compiled, statically linked (so no arm64 root is needed), with resample.cc and
# resample_neon.cc, and run under qemu-user (natively on an aarch64 host).
# Usage: bash scripts/test_neon.sh [--bench | --count [filter]]
#   --bench: also SIMD vs scalar timings (under qemu these say little about real Arm cores:
#            qemu runs many NEON instructions through helper calls);
#   --count: instead of the check, the AArch64 instructions one 500x375 -> 224x224 resample
#            executes with each kernel set, counted from qemu's execution trace (filter: Pillow's
#            number, default 3 = bicubic); a rough proxy for speed on Arm cores.
# Compiler: aarch64-linux-gnu-g++ (Debian's g++-aarch64-linux-gnu, installed by setup.sh), else
# Zig (`zig` on PATH, or the one scripts/wheels/deps.sh installs in build/wheel-zig) for
# aarch64-linux-musl. Skips (exit 0, with the reason) when no compiler or no qemu is found.
# The binary is rebuilt in build/neon only when a source changed.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() { echo "test_neon: SKIPPED: $*"; exit 0; }
OUT=build/neon
mkdir -p "$OUT"

SOURCES=(csrc/transform/resample.cc csrc/transform/resample_neon.cc
         csrc/transform/resample_simd_check.cc)
# Abseil's headers (resample.h reaches absl/status/statusor.h; nothing of Abseil is linked) are
# the same for every architecture: the host's, alone on the include path.
absl=""
for dir in /usr/include build/wheel-deps/aarch64-2.28/prefix/include; do
  [ -d "$dir/absl" ] && { absl=$dir/absl; break; }
done
[ -n "$absl" ] || skip "no Abseil headers (libabsl-dev, installed by scripts/setup.sh)"
mkdir -p "$OUT/include"
ln -sfn "$(realpath "$absl")" "$OUT/include/absl"
FLAGS=(-std=c++20 -O2 -Wall -Wextra -Icsrc -Icsrc/include -isystem "$OUT/include")

host=$(uname -m)
if [ "$host" = aarch64 ]; then
  compiler=(g++) run=()
else
  if command -v aarch64-linux-gnu-g++ >/dev/null 2>&1; then
    compiler=(aarch64-linux-gnu-g++ -static)
  else
    zig=$(command -v zig 2>/dev/null || echo build/wheel-zig/lib/python3*/site-packages/ziglang/zig)
    [ -x "$zig" ] || skip "no AArch64 cross compiler: install g++-aarch64-linux-gnu (scripts/setup.sh does) or Zig"
    # Zig builds libc++ for the target once (minutes), kept in build/neon.
    export ZIG_GLOBAL_CACHE_DIR=$PWD/$OUT/zig-cache ZIG_LOCAL_CACHE_DIR=$PWD/$OUT/zig-cache
    compiler=("$zig" c++ -target aarch64-linux-musl -static)
  fi
  qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)
  [ -n "$qemu" ] || skip "no qemu-aarch64 to run the AArch64 binary: install qemu-user-static"
  run=("$qemu")
fi

bin=$OUT/resample_simd_check
recipe="${compiler[*]} ${FLAGS[*]}"
if [ ! -x "$bin" ] || [ "$(cat "$bin.recipe" 2>/dev/null)" != "$recipe" ] ||
   [ -n "$(find "${SOURCES[@]}" csrc/transform/resample.h csrc/transform/resample_kernels.h \
            csrc/transform/image_transform.h -newer "$bin" 2>/dev/null)" ]; then
  echo "test_neon: compiling for aarch64 with ${compiler[0]##*/}"
  "${compiler[@]}" "${FLAGS[@]}" "${SOURCES[@]}" -o "$bin.tmp"
  mv "$bin.tmp" "$bin"
  echo "$recipe" > "$bin.recipe"
fi
if [ "${1:-}" = --count ]; then
  [ -n "${qemu:-}" ] || skip "--count needs qemu (the instruction trace)"
  # Guest instructions executed: each translation block's size (in_asm) times its executions
  # (exec, unchained so that every execution is logged), minus the set-up alone (`none`).
  count() {
    "$qemu" -d in_asm,exec,nochain -D /dev/stderr "$bin" --once "$1" "${2:-3}" 2>&1 >/dev/null |
      awk '/^IN:/ { cur = "" }
           /^0x[0-9a-f]+:/ { pc = $1; sub(/:$/, "", pc); sub(/^0x0*/, "", pc)
                             if (cur == "") { cur = pc; size[cur] = 0 } size[cur]++ }
           /^Trace/ { split($4, f, "/"); pc = f[2]; sub(/^0*/, "", pc); total += size[pc] }
           END { printf "%.0f\n", total }'
  }
  base=$(count none "${2:-}")
  scalar=$(( $(count scalar "${2:-}") - base ))
  simd=$(( $(count simd "${2:-}") - base ))
  echo "instructions for one 500x375 -> 224x224 resample (filter ${2:-3}): scalar $scalar, NEON $simd" \
       "($(awk -v a="$scalar" -v b="$simd" 'BEGIN { printf "%.2f", a / b }')x fewer)"
  exit 0
fi
"${run[@]}" "$bin" "$@"
