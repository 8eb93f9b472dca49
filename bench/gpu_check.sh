#!/usr/bin/env bash
# GPU check for device staging: build, GPU tests, H2D benchmark — on a fresh GPU machine that has
# PyTorch (with CUDA), a CUDA toolkit and CMake, but no Debian package registry.
#
#   bench/gpu_check.sh fetch   # on a machine WITH the registry (Debian 12): downloads the .deb
#                              # files and a few wheels into build/gpu-deps (git-ignored)
#   bench/gpu_check.sh         # on the GPU machine, with build/gpu-deps copied along
#   bench/gpu_check.sh build   # steps 1-2 only, no GPU needed: checks the prefix build
#
# The run unpacks the .debs with `dpkg -x` into build/gpu-deps/prefix (never into /), builds the
# C++ tests and the Python extension with plain CMake against that prefix, runs the C++ suite,
# tests/cuda (pytest -m cuda must not skip) and an H2D benchmark. Budget: 5 minutes.
# The .debs are Debian 12 (bookworm) amd64 builds; a GPU machine with an older glibc than 2.36
# cannot load them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/build/gpu-deps"
PREFIX="$DEPS/prefix"
BUILD="$ROOT/build/gpu-check"
SITE="$BUILD/site"
PY="${PYTHON:-python3}"
JOBS="$(nproc)"
DEBS=(liburing2 liburing-dev libjpeg62-turbo libjpeg62-turbo-dev libturbojpeg0 libturbojpeg0-dev libabsl20220623 libabsl-dev
      libnuma1 libnuma-dev libgtest-dev libgmock-dev
      # the image formats besides JPEG (and what libtiff's pkg-config file requires)
      libspng0 libspng-dev libwebp7 libwebpdemux2 libwebpmux3 libwebp-dev libtiff6 libtiffxx6
      libtiff-dev libdeflate0 libdeflate-dev libjbig0 libjbig-dev liblerc4 liblerc-dev liblzma5
      liblzma-dev libzstd1 libzstd-dev zlib1g zlib1g-dev libjpeg-dev)
# Pure-Python (any version) plus numpy/pillow for this machine's Python; used only when missing.
WHEELS=(pybind11 pytest pytest-timeout pluggy iniconfig packaging numpy pillow)

log() { printf '\n== %s (%ss)\n' "$*" "$SECONDS"; }

if [[ "${1:-}" == "fetch" ]]; then
  mkdir -p "$DEPS/debs" "$DEPS/wheels"
  (cd "$DEPS/debs" && apt-get download "${DEBS[@]}")
  "$PY" -m pip download -q --only-binary=:all: -d "$DEPS/wheels" "${WHEELS[@]}"
  du -sh "$DEPS"
  exit 0
fi

# ---- 0. preconditions -----------------------------------------------------------------------
log "preconditions"
if [[ "${1:-}" != "build" ]]; then
  "$PY" -c 'import torch; assert torch.cuda.is_available(), "torch sees no CUDA GPU"; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))'
fi
command -v cmake >/dev/null || { echo "cmake not found"; exit 1; }
NVCC_ROOT="${CUDA_HOME:-/usr/local/cuda}"
[[ -d "$DEPS/debs" ]] || { echo "missing $DEPS/debs: run 'bench/gpu_check.sh fetch' first"; exit 1; }

# ---- 1. unpack dependencies into a prefix ---------------------------------------------------
log "unpack .debs into $PREFIX"
rm -rf "$PREFIX" && mkdir -p "$PREFIX"
for deb in "$DEPS"/debs/*.deb; do dpkg -x "$deb" "$PREFIX"; done
LIBDIR="$PREFIX/usr/lib/x86_64-linux-gnu"
# pkg-config files name prefix=/usr; point them at the unpacked tree. (CMake configs of Abseil,
# GTest and libjpeg-turbo compute their prefix from their own location.)
for pc in "$LIBDIR"/pkgconfig/*.pc; do sed -i "s|=/usr|=$PREFIX/usr|g" "$pc"; done
# Debian's dev symlinks are absolute or relative to /usr; relative ones survive dpkg -x.
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# Python modules the tests need, from local wheels only when missing.
mkdir -p "$SITE/deps"
missing=()
for mod in pybind11:pybind11 pytest:pytest pytest_timeout:pytest-timeout numpy:numpy PIL:pillow; do
  "$PY" -c "import ${mod%%:*}" 2>/dev/null || missing+=("${mod##*:}")
done
if ((${#missing[@]})); then
  log "pip install (local wheels) ${missing[*]}"
  "$PY" -m pip install -q --no-index --find-links "$DEPS/wheels" --target "$SITE/deps" "${missing[@]}"
fi
export PYTHONPATH="$SITE:$SITE/deps${PYTHONPATH:+:$PYTHONPATH}"
PYBIND11_DIR="$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())')"

# ---- 2. build: C++ tests + the extension (plain CMake; SKBUILD=ON adds the _C target) -------------
log "configure"
cmake -S "$ROOT" -B "$BUILD/cmake" -DCMAKE_BUILD_TYPE=Release -DRINGLOADER_CUDA=ON \
  -DCUDAToolkit_ROOT="$NVCC_ROOT" -DSKBUILD=ON -DRINGLOADER_BUILD_BENCH=OFF -DRINGLOADER_TORCH=OFF \
  -DCMAKE_PREFIX_PATH="$PREFIX/usr;$LIBDIR/cmake" -Dpybind11_DIR="$PYBIND11_DIR" \
  -DPython_EXECUTABLE="$(command -v "$PY")" -DCMAKE_BUILD_RPATH="$LIBDIR" >"$BUILD/configure.log" 2>&1 \
  || { tail -40 "$BUILD/configure.log"; exit 1; }
grep -E "ringloader: CUDA stager" "$BUILD/configure.log"
log "build (-j$JOBS)"
cmake --build "$BUILD/cmake" -j"$JOBS" >"$BUILD/build.log" 2>&1 || { grep -E "error" -A3 "$BUILD/build.log" | head -60; exit 1; }
rm -rf "$SITE/ringloader" && cp -r "$ROOT/python/ringloader" "$SITE/ringloader"
# The version module a wheel build writes from pyproject.toml's version.
sed -n 's/^version = "\(.*\)"$/__version__ = "\1"/p' "$ROOT/pyproject.toml" | head -1 \
  > "$SITE/ringloader/_version.py"
cp "$BUILD"/cmake/_C*.so "$SITE/ringloader/"
"$PY" -c "import ringloader, sys; assert ringloader.__file__.startswith('$SITE'), ringloader.__file__; print('ringloader from', ringloader.__file__)"

[[ "${1:-}" == "build" ]] && { log "build only: done"; exit 0; }

# ---- 3. tests ---------------------------------------------------------------------------------
log "C++ tests"
ctest --test-dir "$BUILD/cmake" -j"$JOBS" --output-on-failure --timeout 120 2>&1 | tail -15
log "GPU tests (tests/cuda; a skip here is a failure)"
# pipefail: a failing test fails the script; -rs lists skips, and a skipped GPU test fails it too.
"$PY" -m pytest "$ROOT/tests/cuda" -q -p no:cacheprovider -rs --timeout 180 2>&1 | tee "$BUILD/pytest.log" | tail -20
if grep -q "SKIPPED.*test_cuda_staging" "$BUILD/pytest.log"; then echo "GPU tests were skipped"; exit 1; fi
# Native clip batches need FFmpeg's libraries and CLI, which build/gpu-deps does not carry (their
# closure is ~300 MiB): said, not failed, when this machine has none.
if grep -q "SKIPPED.*test_cuda_clips" "$BUILD/pytest.log"; then
  echo "clip batch GPU tests skipped (no FFmpeg here): $(grep -m1 'SKIPPED.*test_cuda_clips' "$BUILD/pytest.log")"
fi

# ---- 4. H2D benchmark ------------------------------------------------------------------------
log "H2D benchmark"
"$PY" - "$ROOT" "$BUILD/bench-data" <<'EOF'
import os, sys, time
import torch
sys.path.insert(0, os.path.join(sys.argv[1], "tests", "python"))
from imagegen import jpeg_bytes
import ringloader as rl
from ringloader import transforms as T

data = sys.argv[2]
if not os.path.isdir(data):  # 1,000 ImageNet-sized JPEGs, generated (nothing is downloaded)
    for i in range(1000):
        d = os.path.join(data, f"class_{i % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"{i:04d}.jpg"), "wb") as f:
            f.write(jpeg_bytes(500 - (i % 7) * 20, 375 + (i % 5) * 10, seed=i))

def plain_pinned_gbps(nbytes, iters=40):
    src = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(5):
            dst.copy_(src, non_blocking=True)
        s.synchronize()
        t0 = torch.cuda.Event(enable_timing=True); t1 = torch.cuda.Event(enable_timing=True)
        t0.record(s)
        for _ in range(iters):
            dst.copy_(src, non_blocking=True)
        t1.record(s)
    t1.synchronize()
    return nbytes * iters / (t0.elapsed_time(t1) / 1e3) / 1e9

workers = max(1, (os.cpu_count() or 2) - 2)
eval_tf = T.Compose([T.Resize(256), T.CenterCrop(224)])  # uint8: cheap decode, big copies
train_tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                      T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])

def run(tf, batch, epochs, dtype=None):
    kw = dict(dtype=dtype) if dtype else {}
    loader = rl.DataLoader(rl.ImageFolder(data, transform=tf), batch_size=batch, num_workers=workers,
                           shuffle=True, device="cuda", numa="auto", prefetch_factor=2, **kw)
    for x, y in loader:  # warm-up epoch: slots, device buffers, page cache
        x.float().mean()
    torch.cuda.synchronize()
    s0 = loader.stats(); n = 0; t0 = time.perf_counter()
    for _ in range(epochs):
        for x, y in loader:
            x.float().mean()  # consume on the current stream, no host sync
            n += x.shape[0]
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    s1 = loader.stats()
    return loader, n / dt, s1["device_bytes"] - s0["device_bytes"], s1["device_copy_seconds"] - s0["device_copy_seconds"]

loader, ips, nbytes, busy = run(eval_tf, 256, 2, dtype="float32")
slot_bytes = 256 * 3 * 224 * 224 * 4
plain = plain_pinned_gbps(slot_bytes)
slots = nbytes / busy / 1e9 if busy > 0 else float("nan")
print(loader.describe())
print(f"plain pinned cudaMemcpyAsync ({slot_bytes / 2**20:.0f} MiB): {plain:.2f} GB/s")
print(f"copies from slots: {slots:.2f} GB/s over {nbytes / 2**30:.2f} GiB = {slots / plain:.2f} of plain "
      f"(busy time observed by the stager thread; slightly pessimistic)")
_, train_ips, _, _ = run(train_tf, 256, 2)
print(f"train transform (RandomResizedCrop 224 + flip + normalize, float32) to cuda:0: {train_ips:.0f} images/s "
      f"with {workers} decode workers")

# The wait a training step sees in next() when the loader is faster than the step: each step
# queues step_ms of GPU work reading the batch and ends with a host sync (as loss.item() does).
def step_wait(step_ms, batch=64, steps=45):
    loader = rl.DataLoader(rl.ImageFolder(data, transform=train_tf), batch_size=batch, num_workers=workers,
                           shuffle=True, device="cuda", numa="auto", prefetch_factor=2)
    cycles = int(torch.cuda.get_device_properties(0).clock_rate * step_ms)  # clock_rate: kHz
    waits, it, first = [], iter(loader), True
    while len(waits) < steps:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            it, first = iter(loader), True
            continue
        if not first:  # an epoch's first batch includes the epoch's start-up
            waits.append(time.perf_counter() - t0)
        first = False
        torch.cuda._sleep(cycles)
        x.float().mean().item()  # the step reads the batch and syncs
    waits.sort()
    return 1e3 * waits[len(waits) // 2], 1e3 * waits[int(len(waits) * 0.99)], 1e3 * sum(waits) / len(waits)

if hasattr(torch.cuda, "_sleep"):
    for step_ms in (50, 100):
        p50, p99, mean = step_wait(step_ms)
        print(f"step of {step_ms} ms (train transform, batch 64): next() waited p50 {p50:.3f} ms, "
              f"p99 {p99:.3f} ms, mean {mean:.3f} ms")
else:
    print("step wait: torch.cuda._sleep is not available in this torch; not measured")
EOF
log "done"
