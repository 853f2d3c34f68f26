#!/usr/bin/env bash
# bench/cholesky.sh — tiled Cholesky's figures (apps/cholesky), from
# bench/run.sh or by itself after `make build` (and `make python-venv` for
# the Python driver).  On the CPU alone, with 2 workers (one OpenBLAS
# thread per task):
#   Weft's C driver against LAPACKE_dpotrf on 2 OpenBLAS threads, the same
#   matrix, alternated in one process (weft-cholesky --vs-lapack):
#     chol_vs_lapack weft <LAPACK's time / Weft's>          (goal >= 1.2)
#   heterogeneous and modelled (weft-cholesky --model-only --vs-firstfit):
#     chol_vs_firstfit weft <first fit's time / dmda's>     (goal >= 1.5)
#     chol_bound_ratio weft <dmda's makespan / its bound>   (goal <= 1.15)
#   the Python driver (SciPy's BLAS/LAPACK kernels) against the C driver,
#   and Dask's Cholesky (bench/py/cholesky_dask.py: dask.array.linalg.cholesky,
#   B x B chunks, threaded scheduler, 2 threads), alternated:
#     chol_py_vs_c weft <C time / Python time>              (goal >= 0.95)
#     chol_dask weft <Dask's time / the C driver's>
# Medians of CHOL_BENCH_REPEATS runs each (default 3).  The times are the
# factorisation's alone (spawning the graph until the matrix holds L; for
# Dask, building its graph until every chunk of L is computed).  Dask needs
# N a multiple of B, and Dask installed (bench/requirements.txt).
#
#   bench/cholesky.sh            N=8192, B=512
#   bench/cholesky.sh --quick    N=2048, B=256
#   bench/cholesky.sh -n N -b B  other sizes
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WEFT_BENCH_BUILD:-build}
exe=$build/apps/cholesky/weft-cholesky
py=.venv/bin/python
reps=${CHOL_BENCH_REPEATS:-3}
n=8192
b=512
while [ $# -gt 0 ]; do
  case $1 in
    --quick) n=2048; b=256 ;;
    -n) n=$2; shift ;;
    -b) b=$2; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "cholesky.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
if [ ! -x "$exe" ]; then
  echo "cholesky.sh: $exe is not built (make build; it needs libopenblas-dev and liblapacke-dev)" >&2
  exit 1
fi
common=(-n "$n" -b "$b" --devices cpu --workers 2)
echo "== tiled Cholesky, N=$n B=$b, 2 workers, $reps runs each (medians)"

out=$("$exe" "${common[@]}" --vs-lapack "$reps" --lapack-threads 2)
grep -v '^chol_vs_lapack ' <<<"$out"
grep '^chol_vs_lapack ' <<<"$out"

# Heterogeneous, modelled: cpu,vgpu:4, GPU kernels modelled ten times a core
# (--model-only: nothing computed), N=16384, B=1024 (8192 when N < 8192), the
# "dmda" policy against first fit ("load") alternated, with models learned
# from nothing in a directory of the run's own (the first "dmda" run
# calibrates and is not counted).  The virtual GPUs' copies take their
# modelled time and move nothing (WEFT_VGPU_COPIES=timing: nothing is
# computed either), and each has 16 GiB, as a large GPU would: the
# matrix (2 GiB) then stays on them.
hn=16384
[ "$n" -lt 8192 ] && hn=8192
models=$(mktemp -d)
echo "== heterogeneous (modelled), N=$hn B=1024, cpu,vgpu:4, 2 workers, $reps runs each"
out=$(WEFT_PERFMODEL_DIR=$models WEFT_VGPU_COPIES=timing WEFT_VGPU_MEMORY=$((16 << 30)) \
      "$exe" -n "$hn" -b 1024 --devices cpu,vgpu:4 --workers 2 --model-only --vs-firstfit "$reps" 2>&1)
rm -rf "$models"
grep -v '^chol_vs_firstfit \|^chol_bound_ratio ' <<<"$out"
grep '^chol_vs_firstfit \|^chol_bound_ratio ' <<<"$out"

if [ ! -x "$py" ]; then
  echo "# $py is missing (make python-venv): no chol_py_vs_c"
  exit 0
fi
# time_of OUTPUT: the "time <s> s" of a driver's output.
time_of() { sed -n 's/^time \([0-9.]*\) s.*/\1/p' <<<"$1"; }
dask=1
if ! "$py" -c 'import dask.array' >/dev/null 2>&1; then
  dask=0; echo "# Dask is not installed in $py (pip install -r bench/requirements.txt): no chol_dask"
elif (( n % b )); then
  dask=0; echo "# N=$n is not a multiple of B=$b (Dask's Cholesky takes equal square chunks): no chol_dask"
fi
"$py" -c "import importlib.util as u, sys; s = u.spec_from_file_location('c', 'apps/cholesky/cholesky.py'); \
m = u.module_from_spec(s); s.loader.exec_module(m); print('# Python kernels:', m.KERNEL_IMPL)"
tc=() tp=() td=()
for ((i = 0; i < reps; i++)); do
  tc+=("$(time_of "$("$exe" "${common[@]}")")")
  tp+=("$(time_of "$(OPENBLAS_NUM_THREADS=1 "$py" apps/cholesky/cholesky.py "${common[@]}")")")
  if ((dask)); then
    td+=("$(time_of "$(OPENBLAS_NUM_THREADS=1 "$py" bench/py/cholesky_dask.py -n "$n" -b "$b" --workers 2)")")
  fi
  echo "run $i: C ${tc[-1]} s, Python ${tp[-1]} s$( ((dask)) && echo ", Dask ${td[-1]} s")"
done
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
mc=$(median "${tc[@]}")
mp=$(median "${tp[@]}")
echo "median: C $mc s, Python $mp s"
awk -v c="$mc" -v p="$mp" 'BEGIN { printf "chol_py_vs_c weft %.3f\n", c / p }'
if ((dask)); then
  md=$(median "${td[@]}")
  echo "median: Dask $md s"
  awk -v c="$mc" -v d="$md" 'BEGIN { printf "chol_dask weft %.3f\n", d / c }'
fi
