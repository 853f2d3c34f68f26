#!/usr/bin/env bash
# scripts/gpu-check.sh — build and run everything GPU-related in one go, on a
# machine with a CUDA GPU, and print a short pass/fail table with timings.
#
#   scripts/gpu-check.sh [OUTDIR]
#
# Steps (each one row of the table):
#   env        the GPU, the driver and nvcc
#   build      the release build with the CUDA kind and the tests' CUDA kernels
#   test_cuda  the CUDA kind's own test (it must run, not skip: a GPU is here)
#   ctest      the whole C suite on this machine, the CUDA devices among the
#              defaults
#   asan       test_cuda built with ASan+UBSan (protect_shadow_gap=0, as CUDA
#              needs under ASan)
#   python     the extension built with this machine's python3, and the whole
#              Python suite, the CUDA devices among the defaults
#   py-cuda    a Python runtime on the CUDA devices: rt.devices, and CuPy /
#              PyTorch / Numba (when there) on a placed task's device and
#              stream; a device_data=True coroutine's data across an await
#   py-kernels Numba and CuPy kernels as bodies on CUDA: a venv
#              (build-gpu/venv, the system's packages visible) gets Numba
#              and the CuPy wheel for this machine's CUDA (cupy-cuda11x /
#              12x / 13x after nvcc's major version; from PyPI, or from
#              the wheels in $WEFT_WHEELS when set, for a machine without
#              network) and the package, then python/tests/test_numba.py
#              and test_cupy.py run: every test must run (a skip fails the
#              step: a GPU is here); then CloverLeaf's numba.cuda kernels
#              (--kernels numba on cuda:0): tp1 PASS, and on
#              clover_bm16_short.in the C driver's field summary and
#              kinetic energy, and clover_numba_cuda_vs_c (the C driver's
#              time over theirs)
#   cholesky   apps/cholesky on cpu,cuda (cuBLAS/cuSOLVER variants), PASS
#   data       weft-bench-data on cuda:0: copy_bw_ratio (goal >= 0.95),
#              steady_copy_bytes (0 required)
#   clover     CloverLeaf (apps/cloverleaf) with the CUDA kernels: test
#              problem 1 and clover_bm16_short.in on cuda:0, both PASS, and
#              the same deck by the hand-written CUDA loop (--plain-cuda):
#              the two wall times and their ratio; then with
#              --split-advection (kernels.cu's advection parts): PASS with
#              the same kinetic energy, and its time
#   clover-py  the Python driver on cuda:0 (kernels.cu through
#              libclover_cuda_kernels.so, queued on the tasks' streams):
#              tp1 and clover_bm16_short.in PASS, with the C driver's
#              kinetic energy bit for bit, and its time against the C driver's
# Logs go to OUTDIR (default build-gpu/logs); the table is also written to
# OUTDIR/table.txt.  Exit status: 0 when every row passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-gpu/logs}
mkdir -p "$out"
jobs=$(nproc 2>/dev/null || echo 4)
rows=()
fail=0

row() { # name status seconds note
  rows+=("$(printf '%-10s %-5s %7.1fs  %s' "$1" "$2" "$3" "$4")")
  [ "$2" = PASS ] || fail=1
}

step() { # name note command...
  local name=$1 note=$2
  shift 2
  local t0 t1 rc
  t0=$(date +%s.%N)
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  local s
  s=$(awk "BEGIN { print $t1 - $t0 }")
  if [ $rc -eq 0 ]; then row "$name" PASS "$s" "$note"; else row "$name" FAIL "$s" "$note (rc $rc; $out/$name.log)"; tail -30 "$out/$name.log"; fi
  return $rc
}

env_info() {
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -2
  cmake --version | head -1
  command -v gcc && gcc --version | head -1
  python3 --version
}

build() {
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_WERROR=ON -DWEFT_BUILD_TESTS=ON \
        -DWEFT_BUILD_BENCH=ON "-DCMAKE_CUDA_ARCHITECTURES=${WEFT_CUDA_ARCHS:-90}" >/tmp/weft-gpu-configure.txt || return 1
  cat /tmp/weft-gpu-configure.txt
  grep "CUDA device kind ON" /tmp/weft-gpu-configure.txt || { echo "the CUDA kind is not in this build"; return 1; }
  cmake --build build-gpu -j "$jobs"
}

test_cuda() {
  build-gpu/tests/test_cuda; local rc=$?
  [ $rc -eq 77 ] && echo "test_cuda skipped on a machine that should have a GPU"
  return $rc
}

all_ctest() { (cd build-gpu && WEFT_PERFMODEL=off ctest --output-on-failure -j "$jobs" --timeout 300); }

asan() {
  cmake -S . -B build-gpu-asan -DCMAKE_BUILD_TYPE=Debug -DWEFT_WERROR=ON -DWEFT_SANITIZE=address \
        -DWEFT_BUILD_TESTS=ON -DWEFT_BUILD_BENCH=OFF "-DCMAKE_CUDA_ARCHITECTURES=${WEFT_CUDA_ARCHS:-90}" &&
  cmake --build build-gpu-asan -j "$jobs" --target test_cuda &&
  ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0:abort_on_error=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 WEFT_TEST_SCALE=sanitizer build-gpu-asan/tests/test_cuda
}

python_suite() {
  rm -rf build-gpu/site
  python3 -m pip install -q --no-build-isolation --no-deps --no-cache-dir --target build-gpu/site . &&
  PYTHONPATH=$PWD/build-gpu/site python3 -m pytest -q -p no:cacheprovider python/tests
}

py_cuda() {
  PYTHONPATH=$PWD/build-gpu/site python3 - <<'EOF'
import weft
with weft.Runtime(devices="cpu,cuda") as rt:
    devs = rt.devices
    print(devs)
    assert [d["kind"] for d in devs][:2] == ["cpu", "cuda"], devs
    assert rt.spawn(lambda: 6 * 7).result() == 42
    try:
        import cupy as cp
    except ImportError:
        cp = None
    if cp is not None:
        def body(n):
            c = weft.context()
            assert cp.cuda.get_current_stream().ptr == c.streams[0], "CuPy's current stream is not the task's"
            assert cp.cuda.Device().id == c.ordinals[0]
            x = cp.arange(n, dtype=cp.float64)
            return float((x * 2).sum())
        got = [rt.spawn(body, 1000 + i, placement=weft.gpu, share=0.25) for i in range(8)]
        assert [t.result() for t in got] == [float((1000 + i) * (999 + i)) for i in range(8)]
        print("py-cuda: CuPy on the task's device and stream: ok")
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        def tbody():
            c = weft.context()
            assert torch.cuda.current_stream().cuda_stream == c.streams[0], "PyTorch's current stream is not the task's"
            return float(torch.ones(100, device="cuda").sum())
        assert rt.spawn(tbody, placement=weft.gpu).result() == 100.0
        print("py-cuda: PyTorch on the task's device and stream: ok")
    try:
        from numba import cuda as ncuda
    except ImportError:
        ncuda = None
    if ncuda is not None and ncuda.is_available():
        def nbody():
            c = weft.context()
            assert ncuda.get_current_device().id == c.ordinals[0], "Numba's current device is not the task's"
            s = ncuda.external_stream(c.streams[0])
            x = ncuda.to_device(list(range(10)), stream=s)
            s.synchronize()
            return sum(x.copy_to_host())
        assert rt.spawn(nbody, placement=weft.gpu).result() == 45
        print("py-cuda: Numba on the task's device, with its stream: ok")
    if cp is not None:
        import numpy as np
        out = np.zeros(1000)
        async def coro():
            a = weft.context().array(out)  # the task's copy on its GPU (a CuPy array)
            a[:] = 1.0
            v = await weft.spawn(lambda: 41.0)
            b = weft.context().array(out)  # resumed on the same GPU, the same data
            b += v
            return "ok"
        assert rt.spawn(coro, readwrites=[out], placement=weft.gpu, device_data=True).result() == "ok"
        assert rt.fetch(out).tolist() == [42.0] * 1000
        print("py-cuda: a device_data=True coroutine keeps its data across an await: ok")
print("py-cuda: ok")
EOF
}

# Numba's and CuPy's kernels in bodies on CUDA (python/tests/test_numba.py,
# test_cupy.py), in a venv of their own with the CuPy wheel built for this
# machine's CUDA major version.  Numba finds NVVM and libdevice in the CUDA
# toolkit nvcc belongs to (CUDA_HOME, set from nvcc's folder when unset).
py_kernels() {
  local venv=build-gpu/venv major pip_src=()
  major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -1)
  [ -n "$major" ] || { echo "py-kernels: cannot read the CUDA version from nvcc --version"; return 1; }
  [ -n "${WEFT_WHEELS:-}" ] && pip_src=(--no-index --find-links "$WEFT_WHEELS")
  [ -x "$venv/bin/python" ] || python3 -m venv --system-site-packages "$venv" || return 1
  "$venv/bin/python" -m pip install -q ${pip_src[@]+"${pip_src[@]}"} --only-binary=:all: numba "cupy-cuda${major}x" || {
    echo "py-kernels: numba or cupy-cuda${major}x did not install (no network? put their wheels in a folder and set WEFT_WHEELS)"
    return 1
  }
  "$venv/bin/python" -m pip install -q --no-build-isolation --no-deps --no-cache-dir . || return 1
  export CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$(command -v nvcc)")")}
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -rs python/tests/test_numba.py python/tests/test_cupy.py |
    tee "$out/py-kernels.txt"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || return "$rc"
  if grep -q "SKIPPED" "$out/py-kernels.txt"; then
    echo "py-kernels: tests were skipped on a machine with a GPU"
    return 1
  fi
  clover_numba_cuda "$venv/bin/python"
}

# CloverLeaf's numba.cuda kernels (apps/cloverleaf/kernels_numba_cuda.py,
# --kernels numba on cuda:0, with py_kernels' venv) against the C driver's
# kernels.cu: test problem 1 (PASS; it also compiles the kernels into
# apps/cloverleaf/__pycache__, which the timed run loads), then
# clover_bm16_short.in by both: their field summary rows and kinetic energy
# (16 digits) equal, and the C driver's time over theirs.
clover_numba_cuda() {
  local py=$1 deck=apps/cloverleaf/decks/clover_bm16_short.in exe=build-gpu/apps/cloverleaf/weft-cloverleaf
  local nb=("$py" apps/cloverleaf/cloverleaf.py --kernels numba --devices "cpu,cuda:0")
  "${nb[@]}" apps/cloverleaf/decks/clover_tp1.in > "$out/clover-numba-cuda-tp1.txt" 2>&1
  cat "$out/clover-numba-cuda-tp1.txt"
  grep -q "PASS" "$out/clover-numba-cuda-tp1.txt" || return 1
  "$exe" --devices cpu,cuda:0 "$deck" > "$out/clover-c-cuda.txt" 2>&1
  grep -q "PASS" "$out/clover-c-cuda.txt" || { cat "$out/clover-c-cuda.txt"; return 1; }
  "${nb[@]}" "$deck" > "$out/clover-numba-cuda.txt" 2>&1; cat "$out/clover-numba-cuda.txt"
  grep -q "PASS" "$out/clover-numba-cuda.txt" || return 1
  local kc kn tc tn
  kc=$(sed -n 's/.*kinetic energy \([0-9.e+-]*\) against.*/\1/p' "$out/clover-c-cuda.txt")
  kn=$(sed -n 's/.*kinetic energy \([0-9.e+-]*\) against.*/\1/p' "$out/clover-numba-cuda.txt")
  if [ -n "$kc" ] && [ "$kc" = "$kn" ] &&
    diff <(grep '^ step:' "$out/clover-c-cuda.txt") <(grep '^ step:' "$out/clover-numba-cuda.txt"); then
    echo "clover_bm16_short field summary: the numba.cuda kernels' equals the C driver's (kinetic energy $kn)"
  else
    echo "clover_bm16_short field summary: the numba.cuda kernels' differs (kinetic energy: C driver $kc, numba.cuda $kn)"
    return 1
  fi
  tc=$(sed -n 's/.* steps to time .*: \([0-9.]*\) s,.*/\1/p' "$out/clover-c-cuda.txt" | tail -1)
  tn=$(sed -n 's/.* steps to time .*: \([0-9.]*\) s,.*/\1/p' "$out/clover-numba-cuda.txt" | tail -1)
  echo "clover_bm16_short on cuda:0: C driver $tc s, Python driver with the numba.cuda kernels $tn s"
  echo "clover_numba_cuda_vs_c $(awk -v a="$tc" -v b="$tn" 'BEGIN { printf "%.3f", a / b }')"
}

# Tiled Cholesky with its cuBLAS/cuSOLVER variants beside the CPU's: the
# residual and the factor against LAPACK's (--check), and the table of
# tasks per kernel per device.
cholesky() {
  local exe=build-gpu/apps/cholesky/weft-cholesky
  [ -x "$exe" ] || { echo "weft-cholesky was not built (OpenBLAS/LAPACKE missing?)"; return 1; }
  "$exe" -n 8192 -b 1024 --devices cpu,cuda --check | tee "$out/cholesky.txt" || return 1
  grep -q "PASS" "$out/cholesky.txt"
}

# Data on the GPU: copies through the data layer against raw
# copies of the same sizes (copy_bw_ratio, goal >= 0.95) and the locality
# figure (0 bytes required), on cuda:0 (weft-bench-data).  Its overlap
# figure means nothing here: its kernels are host functions whose modelled
# time only a virtual GPU honours.
data_bw() {
  build-gpu/bench/weft-bench-data --devices cpu,cuda:0 --repeats 5 | tee "$out/data.txt" || return 1
  grep -q "copy_bw_ratio weft" "$out/data.txt" && grep -q "steady_copy_bytes weft 0" "$out/data.txt"
}

# CloverLeaf's benchmark deck on the GPU: the C driver with the CUDA
# kernels (one chunk on cuda:0, and the same deck's test problem 1 on
# cpu,cuda against the C kernels' PASS), then tp1 on the GPU.
clover() {
  local exe=build-gpu/apps/cloverleaf/weft-cloverleaf deck=apps/cloverleaf/decks/clover_bm16_short.in
  "$exe" --devices cpu,cuda:0 apps/cloverleaf/decks/clover_tp1.in | tee /dev/stderr | grep -q "PASS" || return 1
  "$exe" --devices cpu,cuda:0 "$deck" > "$out/clover-weft.txt" 2>&1; cat "$out/clover-weft.txt"
  grep -q "PASS" "$out/clover-weft.txt" || return 1
  # the hand-written loop of the same kernels, one stream, no Weft
  "$exe" --plain-cuda "$deck" > "$out/clover-plain.txt" 2>&1; cat "$out/clover-plain.txt"
  grep -q "PASS" "$out/clover-plain.txt" || return 1
  local tw tp
  tw=$(sed -n 's/.* steps to time .*: \([0-9.]*\) s,.*/\1/p' "$out/clover-weft.txt" | tail -1)
  tp=$(sed -n 's/.* steps to time .*: \([0-9.]*\) s,.*/\1/p' "$out/clover-plain.txt" | tail -1)
  echo "clover_bm16_short: Weft $tw s, plain CUDA $tp s: clover_vs_plain_cuda $(awk -v a="$tp" -v b="$tw" 'BEGIN { printf "%.3f", a / b }') (goal >= 1.0)"
  # the advection kernels split as well (kernels.cu's parts, out of place):
  # the same kinetic energy to the last digit printed, and its time
  "$exe" --devices cpu,cuda:0 --split-advection "$deck" > "$out/clover-splitadv.txt" 2>&1; cat "$out/clover-splitadv.txt"
  grep -q "PASS" "$out/clover-splitadv.txt" || return 1
  local kw ks ts
  kw=$(sed -n 's/.*kinetic energy \([0-9.e+-]*\) against.*/\1/p' "$out/clover-weft.txt")
  ks=$(sed -n 's/.*kinetic energy \([0-9.e+-]*\) against.*/\1/p' "$out/clover-splitadv.txt")
  echo "kinetic energy: $kw, with --split-advection $ks"
  [ -n "$kw" ] && [ "$kw" = "$ks" ] || return 1
  ts=$(sed -n 's/.* steps to time .*: \([0-9.]*\) s,.*/\1/p' "$out/clover-splitadv.txt" | tail -1)
  echo "clover_bm16_short: --split-advection $ts s against $tw s: clover_split_advection_ratio $(awk -v a="$tw" -v b="$ts" 'BEGIN { printf "%.3f", a / b }')"
}

# The Python driver on the GPU: the same deck as clover(), its kinetic
# energy against the C driver's (the same kernels in the same order: equal
# to the last digit printed), and its speed against the C driver's.
clover_py() {
  local deck=apps/cloverleaf/decks/clover_bm16_short.in py=(env PYTHONPATH=$PWD/build-gpu/site python3 apps/cloverleaf/cloverleaf.py)
  "${py[@]}" --devices cpu,cuda:0 apps/cloverleaf/decks/clover_tp1.in | tee /dev/stderr | grep -q "PASS" || return 1
  "${py[@]}" --devices cpu,cuda:0 "$deck" > "$out/clover-py.txt" 2>&1; cat "$out/clover-py.txt"
  grep -q "PASS" "$out/clover-py.txt" || return 1
  local kc kp tc tp
  kc=$(sed -n 's/.*kinetic energy \([0-9.e+-]*\) against.*/\1/p' "$out/clover-weft.txt")
  kp=$(sed -n 's/.*kinetic energy \([0-9.e+-]*\) against.*/\1/p' "$out/clover-py.txt")
  echo "kinetic energy: C driver $kc, Python driver $kp"
  [ -n "$kc" ] && [ "$kc" = "$kp" ] || return 1
  tc=$(sed -n 's/.* steps to time .*: \([0-9.]*\) s,.*/\1/p' "$out/clover-weft.txt" | tail -1)
  tp=$(sed -n 's/.* steps to time .*: \([0-9.]*\) s,.*/\1/p' "$out/clover-py.txt" | tail -1)
  echo "clover_bm16_short on cuda:0: C driver $tc s, Python driver $tp s: clover_py_vs_c_cuda $(awk -v a="$tc" -v b="$tp" 'BEGIN { printf "%.3f", a / b }') (goal >= 0.95)"
}

step env "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" env_info
step build "release build, CUDA kind + kernels" build
step test_cuda "device layer, tasks on the GPU, destroy in flight" test_cuda
step ctest "whole C suite on this machine" all_ctest
step asan "test_cuda under ASan+UBSan" asan
step python "extension + Python suite, system python3" python_suite
step py-cuda "CuPy/PyTorch/Numba on a placed task's device and stream; a device_data coroutine across an await" py_cuda
step py-kernels "Numba and CuPy kernels in GPU task bodies (test_numba.py, test_cupy.py; CloverLeaf's numba.cuda kernels)" py_kernels
step data "copy bandwidth, overlap, locality on cuda:0 (weft-bench-data)" data_bw
step cholesky "tiled Cholesky on cpu,cuda (checked residual, where the work went)" cholesky
step clover "CloverLeaf tp1 and clover_bm16_short.in on cuda:0 (PASS)" clover
step clover-py "CloverLeaf's Python driver on cuda:0 (PASS, the C driver's energy)" clover_py
grep -h "GPU tasks:\|CUDA device 0" "$out/test_cuda.log" 2>/dev/null

{
  echo "gpu-check: $(date -u +%Y-%m-%dT%H:%MZ) $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet 2>/dev/null || echo '+changes')"
  printf '%s\n' "${rows[@]}"
} | tee "$out/table.txt"
exit $fail
