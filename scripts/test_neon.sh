#!/usr/bin/env bash
# The NEON code, checked bit for bit against the scalar code on AArch64 without an arm64 machine;
# each check is cross-compiled, statically linked (so no arm64 root is needed), and run under
# qemu-user (natively on an aarch64 host):
#   - the resampler's NEON kernels (csrc/transform/resample_neon.cc) against its scalar kernels:
#     csrc/transform/resample_simd_check.cc with resample.cc, resample_neon.cc and tensor_resize.cc;
#   - the PNG unfilter's NEON form against its byte-by-byte reference:
#     csrc/decode/png_unfilter_check.cc with png_unfilter.cc (asked to find NEON there, so a
#     build that lost it fails). Not in --bench or --count mode;
#   - every other source under csrc/ with architecture-specific code (found by its macros and
#     intrinsics headers, so a new one needs no listing here: the x86 kernels, empty on AArch64)
#     compiles for AArch64 (-fsyntax-only). Not covered: the rest of csrc/, plain C++ with no
#     such code, which builds alike on both with the same compiler; the Zig builds of the
#     wheels (scripts/wheels/test_wheels.sh) build all of it.
# Usage: bash scripts/test_neon.sh [--bench | --count [filter]]
#   --bench: also SIMD vs scalar timings (under qemu these say little about real Arm cores:
#            qemu runs many NEON instructions through helper calls);
#   --count: instead of the check, the AArch64 instructions one 500x375 -> 224x224 resample
#            executes with each kernel set, counted from qemu's execution trace (filter: Pillow's
#            number, default 3 = bicubic); a rough proxy for speed on Arm cores.
# Compiler: aarch64-linux-gnu-g++ (Debian's g++-aarch64-linux-gnu, installed by setup.sh), else
# Zig (`zig` on PATH, or the one scripts/wheels/deps.sh installs in build/wheel-zig) for
# aarch64-linux-musl. Skips (exit 0, with the reason) when no compiler or no qemu is found.
# Each binary is rebuilt in build/neon only when a source or header it uses changed.
set -euo pipefail
cd "$(dirname "$0")/.."
skip() { echo "test_neon: SKIPPED: $*"; exit 0; }
OUT=build/neon
mkdir -p "$OUT"

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

recipe="${compiler[*]} ${FLAGS[*]}"
LINKED=""   # the sources built into a check binary (and run) so far
# build NAME SOURCE... -- HEADER...: $OUT/NAME from the sources, unless it is newer than all of
# them and the headers and was made with the same compiler and flags.
build() {
  local name=$1 sources=() headers=()
  shift
  while (($#)) && [ "$1" != -- ]; do sources+=("$1"); shift; done
  (($#)) && shift
  headers=("$@")
  local bin=$OUT/$name
  LINKED+=" ${sources[*]}"
  if [ ! -x "$bin" ] || [ "$(cat "$bin.recipe" 2>/dev/null)" != "$recipe" ] ||
     [ -n "$(find "${sources[@]}" "${headers[@]}" -newer "$bin" 2>/dev/null)" ]; then
    echo "test_neon: compiling $name for aarch64 with ${compiler[0]##*/}"
    "${compiler[@]}" "${FLAGS[@]}" "${sources[@]}" -o "$bin.tmp"
    mv "$bin.tmp" "$bin"
    echo "$recipe" > "$bin.recipe"
  fi
}
build resample_simd_check csrc/transform/resample.cc csrc/transform/resample_neon.cc \
  csrc/transform/tensor_resize.cc csrc/transform/resample_simd_check.cc -- \
  csrc/transform/resample.h csrc/transform/resample_kernels.h csrc/transform/image_transform.h \
  csrc/transform/tensor_resize.h
bin=$OUT/resample_simd_check
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
if [ -z "${1:-}" ]; then
  build png_unfilter_check csrc/decode/png_unfilter.cc csrc/decode/png_unfilter_check.cc -- \
    csrc/decode/png_unfilter.h
  "${run[@]}" "$OUT/png_unfilter_check" --expect NEON
  arch_specific=()
  while read -r f; do
    case " $LINKED " in *" $f "*) ;; *) arch_specific+=("$f");; esac
  done < <(grep -rlE '__x86_64__|__SSE|__AVX|__ARM_NEON|__aarch64__|[a-z]+intrin\.h|arm_neon\.h|__builtin_ia32' \
             csrc --include='*.cc' | grep -v '_test\.cc$' | LC_ALL=C sort)
  ok=$OUT/arch_specific.ok
  if ((${#arch_specific[@]})) &&
     { [ "$(cat "$ok" 2>/dev/null)" != "$recipe ${arch_specific[*]}" ] ||
       [ -n "$(find "${arch_specific[@]}" -newer "$ok" 2>/dev/null)" ]; }; then
    for f in "${arch_specific[@]}"; do
      "${compiler[@]}" "${FLAGS[@]}" -fsyntax-only "$f"
    done
    echo "$recipe ${arch_specific[*]}" > "$ok"
  fi
  echo "test_neon: compiles for aarch64: ${arch_specific[*]:-(none besides the checks)}"
fi
