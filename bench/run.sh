#!/usr/bin/env bash
# bench/run.sh — what `make bench` runs, after make has built the release tree.
# It builds nothing itself.
#
#   bench/run.sh            the suite (every pattern, every system), its
#                           report, then stencil_1d, which ends the output
#                           with one `metg50_us <system> <value>` line per
#                           system; then the Python and free-threaded runs,
#                           and the GPU-task costs on virtual GPUs
#                           (weft-bench-gpu), which end with gpu_task_us,
#                           chain_task_us, independent_task_us,
#                           chain_extra_us and multidev_task_us lines; then
#                           data on virtual GPUs (weft-bench-data),
#                           communication (allreduce_bw_ratio, p2p_extra_us,
#                           halo_overlap_ratio), and CloverLeaf
#                           (bench/clover.sh), and tiled Cholesky
#                           (bench/cholesky.sh: chol_vs_lapack, chol_py_vs_c,
#                           chol_dask, chol_vs_firstfit, chol_bound_ratio);
#                           the GIL contention sweep (bench/py/gil.py),
#                           Python's overheads beside the naive ways
#                           (bench/py/overheads.py: overhead_* lines) and
#                           Numba nogil kernels as bodies
#                           (bench/py/numba_gil.py) after the Python runs
#   bench/run.sh --quick    stencil_1d only (weft, weft_root, openmp, spin)
#   bench/run.sh --docs     as the default, and rewrite the generated part of
#                           docs/performance.md and its plots and data in bench/results
#
# Environment: WEFT_BENCH_BUILD (build tree, default build), WEFT_BENCH_OUT
# (results, default $WEFT_BENCH_BUILD/bench-results), WEFT_BENCH_ARGS (extra
# weft-bench options for every sweep, e.g. "--repeats 9").
set -euo pipefail
cd "$(dirname "$0")/.."

mode=default
for a in "$@"; do
  case $a in
    --quick) mode=quick ;;
    --docs) mode=docs ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $a" >&2; exit 2 ;;
  esac
done

build=${WEFT_BENCH_BUILD:-build}
wb=$build/bench/weft-bench
out=${WEFT_BENCH_OUT:-$build/bench-results}
extra=${WEFT_BENCH_ARGS:-}
if [ ! -x "$wb" ]; then
  echo "run.sh: $wb is not built." >&2
  echo "        (is WEFT_BUILD_BENCH off in $build/CMakeCache.txt? cmake -S . -B $build -DWEFT_BUILD_BENCH=ON)" >&2
  exit 1
fi
mkdir -p "$out"
suite_rc=0
workers=$(nproc)
echo "== weft-bench on $(nproc) core(s): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
"$wb" list
echo

# 2 workers on this machine; width = workers (Task Bench's one-node setup).
common=(--workers "$workers" --steps 1000 --kernel busy_wait)

if [ "$mode" != quick ]; then
  suite_csv=$out/suite.csv
  rm -f "$suite_csv"
  patterns=trivial,no_comm,stencil_1d_periodic,dom,tree,fft,all_to_all,nearest,spread,random_nearest
  echo "== suite (METG(50%) of every pattern on every system): $patterns; then stencil_1d below"
  # shellcheck disable=SC2086
  "$wb" metg --pattern "$patterns" --systems weft,weft_root,openmp,starpu,bsp,spin \
    "${common[@]}" --repeats 5 --csv "$suite_csv" $extra > "$out/suite.out" || suite_rc=$?
  grep -v '^point,\|^metg,\|^record,' "$out/suite.out" || true
  echo
fi

if [ "$mode" != quick ]; then
  overhead_csv=$out/overhead.csv
  rm -f "$overhead_csv"
  echo "== cost of one task (empty kernel), every system"
  # shellcheck disable=SC2086
  "$wb" run --kernel empty --pattern trivial,no_comm,stencil_1d,all_to_all --systems all \
    --workers "$workers" --steps 1000 --repeats 9 --csv "$overhead_csv" $extra --quiet \
    > "$out/overhead.out" || suite_rc=$?
  awk -F, '/^point,/ {printf "  %-10s %-12s %8.3f us per task\n", $2, $3, $14}' "$out/overhead.out"
  grep '^#' "$out/overhead.out" || true
  echo
fi

echo "== stencil_1d: Weft and OpenMP tasks, same graph, same kernel, same run"
stencil_csv=$out/stencil.csv
rm -f "$stencil_csv"
if [ "$mode" = quick ]; then
  systems=weft,weft_root,openmp,spin
else
  systems=weft,weft_root,openmp,starpu,bsp,spin
fi
rc=0
# shellcheck disable=SC2086
"$wb" metg --pattern stencil_1d --systems "$systems" "${common[@]}" --repeats 7 \
  --csv "$stencil_csv" $extra > "$out/stencil.out" || rc=$?
grep -v '^point,\|^metg,\|^record,' "$out/stencil.out" | grep -v '^metg50_us' || true
csvs=(--csv "$stencil_csv")
[ "$mode" != quick ] && csvs=(--csv "$suite_csv" --csv "$stencil_csv" --csv "$overhead_csv")

if [ "$mode" != quick ]; then
  echo
  stamp="commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src include bench 2>/dev/null || echo ' + local changes'), $(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/run.sh${1:+ $1}\`"
  logs=(--log "$out/suite.out" --log "$out/stencil.out")
  if [ "$mode" = docs ]; then
    mkdir -p bench/results/data
    cp "$suite_csv" "$stencil_csv" "$overhead_csv" "$out/suite.out" "$out/stencil.out" bench/results/data/
    "$wb" report "${csvs[@]}" "${logs[@]}" --stamp "$stamp" --out bench/results --doc docs/performance.md || true
  else
    "$wb" report "${csvs[@]}" "${logs[@]}" --stamp "$stamp" --out "$out/report" || true
  fi
  echo "CSV: ${csvs[*]//--csv /}; table and plots: $( [ "$mode" = docs ] && echo bench/results || echo "$out/report")"
fi
echo
grep '^metg50_us' "$out/stencil.out"
[ "$rc" -ne 0 ] && exit "$rc"
[ "$suite_rc" -ne 0 ] && exit "$suite_rc"

# The Python front end beside ThreadPoolExecutor, Dask and Ray, on
# the same stencil_1d graph; ends with py_task_us / py_metg50_us lines.
if [ "$mode" != quick ] && [ -x bench/py/run.sh ]; then
  echo
  echo "== Python tasks: weft beside ThreadPoolExecutor, Dask, Ray"
  bench/py/run.sh --reps 5
fi

# Python tasks under GIL contention: bodies of T us, a fraction f in Python
# and the rest in C with the GIL released, on 1 and 2 workers, on the CPU
# beside ThreadPoolExecutor and Dask (installed by bench/py/run.sh above),
# and placed on virtual GPUs; ends with gil_eff_min_t200, gil_eff_min_t50,
# gil_chain_extra_us, gil_chain_gap_us and gil_default_vs_best lines (weft,
# weft_vgpu).  Then
# the same under the free-threaded interpreter (PYTHON_GIL=0; weft_ft,
# weft_ft_vgpu lines) when scripts/python-ft.sh has built it, a
# heat-map per system (bench/py/gil_plot.py: in docs/ with --docs), and
# the floor under the f = 0.5 points (bench/py/gil_floor.py: the same
# bodies with the least machinery; gil_floor_* lines), and without the
# GIL the floor of plain threads at f = 0, 0.5 and 1 (gil_floor_ft_*).
if [ "$mode" != quick ] && [ -x .venv/bin/python ]; then
  echo
  echo "== Python tasks under GIL contention: weft (default, gil_spin_ns=0) beside ThreadPoolExecutor, Dask"
  gil_json=(--json "$out/gil.json")
  .venv/bin/python bench/py/gil.py --json "$out/gil.json"
  ft_interp=$(scripts/python-ft.sh --print-interpreter)
  if [ -x "$ft_interp" ]; then
    echo
    echo "== the same under free-threaded CPython ($ft_interp, PYTHON_GIL=0)"
    [ -x build-ft/venv/bin/python ] || "$ft_interp" -m venv build-ft/venv
    build-ft/venv/bin/python -m pip install -q . >/dev/null
    PYTHON_GIL=0 build-ft/venv/bin/python bench/py/gil.py --json "$out/gil-ft.json"
    gil_json+=(--json "$out/gil-ft.json")
  else
    echo "# no free-threaded interpreter at $ft_interp (scripts/python-ft.sh --build makes it): no weft_ft figures"
  fi
  .venv/bin/python bench/py/gil_plot.py "${gil_json[@]}" --out "$( [ "$mode" = docs ] && echo docs || echo "$out")" ||
    echo "# gil_plot.py failed: no heat-maps"
  echo
  echo "== the floor under it: the same bodies on plain threads, through CPython's C API, in pure C"
  .venv/bin/python bench/py/gil_floor.py
  if [ -x build-ft/venv/bin/python ]; then
    echo
    echo "== the floor without the GIL: the same bodies on plain threads (PYTHON_GIL=0; gil_floor_ft_* lines)"
    PYTHON_GIL=0 build-ft/venv/bin/python bench/py/gil_floor.py --f 0,0.5,1
  fi
fi

# Python's overheads, each beside the naive way: handing a task's data to
# NumPy without a copy (buffer protocol, __array_interface__, DLPack) or
# with one; a chain of GPU tasks ordered by events or waiting for their
# streams (virtual GPUs); an array directly or through a Weft view; ends
# with overhead_<name> weft <ratio> lines.
if [ "$mode" != quick ] && [ -x .venv/bin/python ]; then
  echo
  echo "== Python's overheads beside the naive ways (zero-copy hand-off, events, views)"
  .venv/bin/python bench/py/overheads.py
fi

# Numba kernels as bodies: independent tasks of one ~200 us
# @numba.njit(nogil=True) kernel on 2 workers over a sequential loop, the
# same with kernels that hold the GIL, and plain threads as the ceiling;
# ends with numba_nogil_speedup and numba_gil_speedup lines (weft, threads).
if [ "$mode" != quick ] && [ -x .venv/bin/python ]; then
  echo
  echo "== Numba kernels as task bodies: nogil kernels on 2 workers over a sequential loop"
  .venv/bin/python bench/py/numba_gil.py
fi

# Free-threaded CPython beside the GIL build (when
# scripts/python-ft.sh has built it); ends with ft_speedup_15us,
# ft_speedup_50us and ft_py_task_us lines.
if [ "$mode" != quick ] && [ -x bench/py/ft.sh ]; then
  echo
  echo "== free-threaded CPython: pure-Python bodies and empty tasks, beside the GIL build"
  bench/py/ft.sh
fi

# The cost of a GPU task on virtual GPUs (2 workers, "cpu,vgpu:4"):
# independent single-GPU tasks, a chain of them, 2-GPU tasks; ends with
# gpu_task_us, chain_task_us, independent_task_us, chain_extra_us and
# multidev_task_us lines.
if [ "$mode" != quick ]; then
  echo
  echo "== GPU tasks on virtual GPUs: zero-cost kernels, 2 workers, cpu,vgpu:4"
  if [ -x "$build/bench/weft-bench-gpu" ]; then
    "$build/bench/weft-bench-gpu"
  else
    echo "# $build/bench/weft-bench-gpu is not built: no GPU-task figures"
  fi
fi

# Data on virtual GPUs: copy bandwidth through the data layer
# against raw copies, copy/compute overlap, bytes copied in a steady state;
# ends with copy_bw_ratio, overlap_ratio, prefetch_speedup and steady_copy_bytes lines.
if [ "$mode" != quick ]; then
  echo
  echo "== Data on virtual GPUs: copies, overlap, locality"
  if [ -x "$build/bench/weft-bench-data" ]; then
    "$build/bench/weft-bench-data"
  else
    echo "# $build/bench/weft-bench-data is not built: no data figures"
  fi
fi

# GPU tasks from Python: placed tasks on virtual GPUs, and 2-GPU tasks beside
# Ray tasks with num_gpus=2 (Ray from PyPI, installed by bench/py/run.sh);
# ends with gpu_task_us weft_py, multidev_task_us weft|ray and
# multidev_ratio lines.
if [ "$mode" != quick ] && [ -x .venv/bin/python ]; then
  echo
  echo "== GPU tasks from Python: virtual GPUs, beside Ray"
  .venv/bin/python bench/py/devices.py
fi

# Communication as tasks.  Collectives on virtual GPUs (all-reduce
# bus bandwidth against the devices' raw peer copies), then across 2 MPI
# ranks (8-byte round trip against raw MPI; a halo exchange beside interior
# work); ends with allreduce_bw_ratio, p2p_extra_us and halo_overlap_ratio
# lines.
if [ "$mode" != quick ]; then
  echo
  echo "== Communication: collectives on virtual GPUs, MPI across 2 ranks"
  if [ -x "$build/bench/weft-bench-comm" ]; then
    "$build/bench/weft-bench-comm"
  else
    echo "# $build/bench/weft-bench-comm is not built: no collective figures"
  fi
  if [ -x "$build/bench/weft-bench-mpi" ] && command -v mpirun >/dev/null; then
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
      mpirun -np 2 "$build/bench/weft-bench-mpi"
  else
    echo "# $build/bench/weft-bench-mpi is not built (no MPI): no figures across ranks"
  fi
fi

# CloverLeaf (bench/clover.sh): bandwidth against STREAM triad,
# the Python driver against the C driver, the halo exchange hidden or not;
# ends with clover_triad_ratio, clover_py_vs_c, clover_numba_vs_c and clover_halo_hidden lines.
if [ "$mode" != quick ]; then
  echo
  bench/clover.sh
fi

# Tiled Cholesky (bench/cholesky.sh): the C driver against LAPACKE_dpotrf,
# the Python driver and Dask's Cholesky against the C driver; ends with
# chol_vs_lapack, chol_py_vs_c and chol_dask lines.
if [ "$mode" != quick ]; then
  echo
  bench/cholesky.sh
fi
