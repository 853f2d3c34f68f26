#!/usr/bin/env bash
# bench/clover.sh — CloverLeaf's figures, from bench/run.sh or by
# itself after `make build` (and `make python-venv` for the Python driver):
#
#   clover_bm_short.in (960² x 87 steps) with the C driver on the CPU (one
#   chunk per core), STREAM triad measured by the same program first:
#     clover_triad_ratio weft <achieved bandwidth / triad>   (goal >= 0.85)
#   and, in the first run, what the kernels allow without Weft (--roofline:
#   each kernel in cache and streaming; roofline.h):
#     clover_kernels_triad_ratio <the kernels alone, streaming / triad>
#     clover_roofline_ratio weft <achieved / the kernels' roofline bound>
#   the Python driver beside the C driver, same deck, same devices, alternated:
#     clover_py_vs_c weft <C time / Python time>              (goal >= 0.95)
#   and on 4 virtual GPUs (beside the C driver's runs with the exchange):
#     clover_py_vs_c_vgpu4 weft <C time / Python time>        (goal >= 0.95)
#   the Python driver with the Python kernels (kernels_numba.py, --kernels
#   numba) beside it with the C kernels, 2 workers on the CPU, alternated:
#     clover_numba_vs_c weft <C kernels' time / Numba kernels' time> (goal >= 0.95)
#   4 virtual GPUs (one chunk each) and 2 MPI ranks, each with and without
#   the halo exchange between chunks (--no-exchange):
#     clover_halo_hidden weft <time with / time without>      (goal <= 1.1)
#   weak scaling, a 960² chunk per device: 1, 2, 4 virtual GPUs on
#   clover_bm_short, clover_bm2_short, clover_bm4_short (1920 x 960, 1920²),
#   and 1 and 2 MPI ranks of one worker on the first two, each with and
#   without the exchange (CLOVER_BENCH_WEAK=0 leaves it out):
#     clover_weak_vgpu<N>_cellstep_ns weft <wall / (cells x steps), ns>
#     clover_weak_halo_hidden_vgpu<N> weft <time with / time without>  (goal <= 1.1)
#     clover_weak_mpi<N>_cellstep_ns weft, clover_weak_halo_hidden_mpi<N> weft
#     clover_weak_efficiency_mpi2 weft <1 rank's time / 2 ranks' time> (ideal 1:
#       each rank has a core of its own; N virtual GPUs share the 2 cores)
# Medians of CLOVER_BENCH_REPEATS runs (default 3).  Every run but the
# --no-exchange ones must PASS the deck's verification.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${WEFT_BENCH_BUILD:-build}
exe=$build/apps/cloverleaf/weft-cloverleaf
deck=apps/cloverleaf/decks/clover_bm_short.in
reps=${CLOVER_BENCH_REPEATS:-3}
out=${WEFT_BENCH_OUT:-$build/bench-results}/clover
mkdir -p "$out"
if [ ! -x "$exe" ]; then
  echo "clover.sh: $exe is not built (make build)" >&2
  exit 1
fi
py=.venv/bin/python
mpi_env=(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1)

# run NAME CMD...: one run, its output kept in $out/NAME.N.txt; prints the
# wall time of the time-step loop.
run() {
  local name=$1 i=$2
  shift 2
  local f="$out/$name.$i.txt"
  local rc=0
  "$@" >"$f" 2>&1 || rc=$?
  # without the exchange the answer is wrong: FAIL (exit 1) is expected there
  if [ $rc -ne 0 ] && ! { [[ $name == *noex* ]] && [ $rc -eq 1 ]; }; then
    echo "clover.sh: $name failed (exit $rc; see $f)" >&2
    tail -5 "$f" >&2
    exit 1
  fi
  if [[ $name != *noex* ]] && ! grep -q "PASS" "$f"; then
    echo "clover.sh: $name did not PASS (see $f)" >&2
    exit 1
  fi
  sed -n 's/.* steps to time .*: \([0-9.]*\) s,.*/\1/p' "$f" | tail -1
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "== CloverLeaf: $deck, $reps runs each, medians"
# the machine may be shared: its load before and after, beside the figures
echo "load (1, 5, 15 min) before: $(cut -d' ' -f1-3 /proc/loadavg)"
c_times=() py_times=() ratios=()
for i in $(seq "$reps"); do
  probe=--triad
  [ "$i" = 1 ] && probe=--roofline
  c_times+=("$(run c_cpu "$i" "$exe" --devices cpu "$probe" "$deck")")
  # achieved / triad, from the same program's own figures
  ratios+=("$(sed -n 's/^ Memory traffic.* \([0-9.]*\)% of triad.*/\1/p' "$out/c_cpu.$i.txt" | awk '{ print $1 / 100 }')")
  if [ -x "$py" ]; then
    py_times+=("$(run py_cpu "$i" "$py" apps/cloverleaf/cloverleaf.py --devices cpu "$deck")")
  fi
done
c_med=$(printf '%s\n' "${c_times[@]}" | median)
echo "C driver on cpu: ${c_times[*]} s (median $c_med s)"
grep -m1 "STREAM triad" "$out/c_cpu.1.txt" || true
grep -m1 "Memory traffic" "$out/c_cpu.1.txt" || true
echo "clover_triad_ratio weft $(printf '%s\n' "${ratios[@]}" | median)"
sed -n '/^ Kernels alone (no Weft)/,/^ Kernels alone:/p' "$out/c_cpu.1.txt" | sed 's/^/# /'
echo "clover_kernels_triad_ratio $(sed -n 's/^ Kernels alone: .* \([0-9.]*\)% of triad;.*/\1/p' "$out/c_cpu.1.txt" | awk '{ print $1 / 100 }')"
echo "clover_roofline_ratio weft $(sed -n "s/^ Memory traffic.* \([0-9.]*\)% of the kernels' roofline bound.*/\1/p" "$out/c_cpu.1.txt" | awk '{ print $1 / 100 }')"
if [ ${#py_times[@]} -gt 0 ]; then
  py_med=$(printf '%s\n' "${py_times[@]}" | median)
  echo "Python driver on cpu: ${py_times[*]} s (median $py_med s)"
  echo "clover_py_vs_c weft $(awk -v c="$c_med" -v p="$py_med" 'BEGIN { printf "%.3f", c / p }')"
else
  echo "# no .venv (make python-venv): no Python driver figure"
fi

# The Python driver with the Python kernels (--kernels numba) beside the
# same driver with the C kernels, 2 workers on the CPU, alternated; one run
# first fills Numba's cache (its compile is not timed).
if [ -x "$py" ] && "$py" -c "import numba" 2>/dev/null; then
  run py_numba_warm 0 "$py" apps/cloverleaf/cloverleaf.py --kernels numba --devices cpu --workers 2 \
    apps/cloverleaf/decks/clover_tp1.in >/dev/null
  nc_times=() nn_times=()
  for i in $(seq "$reps"); do
    nc_times+=("$(run py_kc "$i" "$py" apps/cloverleaf/cloverleaf.py --kernels c --devices cpu --workers 2 "$deck")")
    nn_times+=("$(run py_knumba "$i" "$py" apps/cloverleaf/cloverleaf.py --kernels numba --devices cpu --workers 2 "$deck")")
  done
  nc=$(printf '%s\n' "${nc_times[@]}" | median)
  nn=$(printf '%s\n' "${nn_times[@]}" | median)
  echo "Python driver, 2 workers: C kernels ${nc_times[*]} s (median $nc), Numba kernels ${nn_times[*]} s (median $nn)"
  sed -n '/^ Profile/,/^ *$/p' "$out/py_kc.1.txt" | sed 's/^/# C kernels: /'
  sed -n '/^ Profile/,/^ *$/p' "$out/py_knumba.1.txt" | sed 's/^/# Numba kernels: /'
  echo "clover_numba_vs_c weft $(awk -v c="$nc" -v n="$nn" 'BEGIN { printf "%.3f", c / n }')"
else
  echo "# no Numba in .venv (make python-venv): no Python-kernel figure"
fi

with=() without=() py_vg=()
for i in $(seq "$reps"); do
  with+=("$(run vgpu4 "$i" "$exe" --devices cpu,vgpu:4 "$deck")")
  without+=("$(run vgpu4_noex "$i" "$exe" --devices cpu,vgpu:4 --no-exchange "$deck")")
  if [ -x "$py" ]; then
    py_vg+=("$(run py_vgpu4 "$i" "$py" apps/cloverleaf/cloverleaf.py --devices cpu,vgpu:4 "$deck")")
  fi
done
w=$(printf '%s\n' "${with[@]}" | median)
wo=$(printf '%s\n' "${without[@]}" | median)
echo "cpu,vgpu:4: with exchange ${with[*]} s, without ${without[*]} s"
vg=$(awk -v a="$w" -v b="$wo" 'BEGIN { printf "%.3f", a / b }')
echo "clover_halo_hidden_vgpu4 weft $vg"
if [ ${#py_vg[@]} -gt 0 ]; then
  pv=$(printf '%s\n' "${py_vg[@]}" | median)
  echo "Python driver on cpu,vgpu:4: ${py_vg[*]} s (median $pv s)"
  echo "clover_py_vs_c_vgpu4 weft $(awk -v c="$w" -v p="$pv" 'BEGIN { printf "%.3f", c / p }')"
fi
if command -v mpirun >/dev/null && ldd "$exe" 2>/dev/null | grep -q libmpi; then
  with=() without=()
  for i in $(seq "$reps"); do
    with+=("$(run mpi2 "$i" "${mpi_env[@]}" mpirun -np 2 "$exe" --devices cpu --workers 1 "$deck")")
    without+=("$(run mpi2_noex "$i" "${mpi_env[@]}" mpirun -np 2 "$exe" --devices cpu --workers 1 --no-exchange "$deck")")
  done
  w=$(printf '%s\n' "${with[@]}" | median)
  wo=$(printf '%s\n' "${without[@]}" | median)
  echo "2 MPI ranks (1 worker, 1 chunk each): with exchange ${with[*]} s, without ${without[*]} s"
  echo "clover_halo_hidden_mpi2 weft $(awk -v a="$w" -v b="$wo" 'BEGIN { printf "%.3f", a / b }')"
fi

# weak NAME DECK CMD...: with and without the exchange, alternated, $reps
# times; prints the per-cell-step time and the with / without ratio, and
# leaves the median wall time with the exchange in $weak_t.
weak() {
  local name=$1 wdeck=$2
  shift 2
  local with=() without=() i
  for i in $(seq "$reps"); do
    with+=("$(run "weak_$name" "$i" "$@" "$wdeck")")
    without+=("$(run "weak_${name}_noex" "$i" "$@" --no-exchange "$wdeck")")
  done
  local w wo steps nx ny
  w=$(printf '%s\n' "${with[@]}" | median)
  wo=$(printf '%s\n' "${without[@]}" | median)
  steps=$(sed -n 's/^ \([0-9]*\) steps to time .*/\1/p' "$out/weak_$name.1.txt" | tail -1)
  nx=$(sed -n 's/.*x_cells *= *\([0-9]*\).*/\1/p' "$wdeck")
  ny=$(sed -n 's/.*y_cells *= *\([0-9]*\).*/\1/p' "$wdeck")
  echo "$name ($wdeck): with exchange ${with[*]} s, without ${without[*]} s"
  awk -v w="$w" -v wo="$wo" -v cs="$((nx * ny * steps))" -v n="$name" 'BEGIN {
    printf "clover_weak_%s_cellstep_ns weft %.3f\n", n, w / cs * 1e9
    printf "clover_weak_halo_hidden_%s weft %.3f\n", n, w / wo }'
  weak_t=$w
}
if [ "${CLOVER_BENCH_WEAK:-1}" != 0 ]; then
  echo "== weak scaling: a 960² chunk per device"
  d1=apps/cloverleaf/decks/clover_bm_short.in d2=apps/cloverleaf/decks/clover_bm2_short.in
  d4=apps/cloverleaf/decks/clover_bm4_short.in
  weak vgpu1 "$d1" "$exe" --devices cpu,vgpu:1
  weak vgpu2 "$d2" "$exe" --devices cpu,vgpu:2
  weak vgpu4 "$d4" "$exe" --devices cpu,vgpu:4
  if command -v mpirun >/dev/null && ldd "$exe" 2>/dev/null | grep -q libmpi; then
    weak mpi1 "$d1" "$exe" --devices cpu --workers 1
    t1=$weak_t
    weak mpi2 "$d2" "${mpi_env[@]}" mpirun -np 2 "$exe" --devices cpu --workers 1
    echo "clover_weak_efficiency_mpi2 weft $(awk -v a="$t1" -v b="$weak_t" 'BEGIN { printf "%.3f", a / b }')"
  fi
fi
echo "load (1, 5, 15 min) after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "clover_halo_hidden weft $vg"
