#!/usr/bin/env bash
# bench/compare.sh — before/after: an old revision against the working tree.
#
#   bench/compare.sh [OLD_REV [ROUNDS]]
#
# OLD_REV   default: the merge-base of HEAD and `main` when that is not HEAD
#           itself (the point this branch left main), else HEAD~1.
# ROUNDS    default 5 (or $WEFT_COMPARE_ROUNDS).
#
# Builds both sides, each in its own folder under build-compare/: the old
# revision is checked out in a temporary `git worktree` (build-compare/old-src,
# removed again at exit); the new side is the working tree as it is,
# uncommitted changes included.  For each side: a release build of weft-bench
# through the top-level CMake project (build-compare/<side>-build), and the
# Python extension installed into its own venv (build-compare/<side>-venv).
# Then, for ROUNDS rounds, interleaved old, new, old, new, ...:
#   (a) `weft-bench metg --pattern stencil_1d --systems weft --workers 2
#       --steps 1000 --kernel busy_wait --repeats 7`: its `metg50_us weft`
#       line (what bench/run.sh reports);
#   (b) bench/compare_py.py, the `py_task_us` figure of bench/py/bench.py
#       (empty Python bodies on stencil_1d) — the current tree's harness
#       for both sides, so only the extension differs.
# and prints, per figure, the median of the rounds for each side and new/old:
#   compare metg50_us old <v> new <v> ratio <r>
#   compare py_task_us old <v> new <v> ratio <r>
# Lower is better for both, so a ratio below 1 means the new side is faster.
# A round whose sweep ends without a number (not_reached, failed) is left out
# of the median and counted in a `#` line; a side with no number at all
# prints `n/a`.
#
# About 6-8 minutes on 2 idle cores with the defaults (the first run also
# downloads the Python build requirements).  Measure on a quiet machine:
# weft-bench waits up to WEFT_COMPARE_WAIT_QUIET seconds (default 10) per
# sweep for other processes to leave, and says in its `#` lines when they
# did not.
#
# Environment: PYTHON (default python3), WEFT_COMPARE_ROUNDS,
# WEFT_COMPARE_BUILD_TYPE (default Release), WEFT_COMPARE_WAIT_QUIET,
# WEFT_COMPARE_METG_ARGS (extra weft-bench options), WEFT_COMPARE_PY_REPS
# (runs per py_task_us figure, default 9), WEFT_COMPARE_DIR (default
# build-compare).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

case ${1:-} in
  -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
esac

if [ -n "${1:-}" ]; then
  old_rev=$1
else
  base=$(git merge-base HEAD main 2>/dev/null || true)
  if [ -n "$base" ] && [ "$base" != "$(git rev-parse HEAD)" ]; then
    old_rev=$base
  else
    old_rev=HEAD~1
  fi
fi
old_sha=$(git rev-parse --verify --quiet "$old_rev^{commit}") || {
  echo "compare.sh: '$old_rev' is not a commit" >&2; exit 2; }
rounds=${2:-${WEFT_COMPARE_ROUNDS:-5}}
case $rounds in ''|*[!0-9]*|0) echo "compare.sh: rounds must be a positive number, not '$rounds'" >&2; exit 2 ;; esac
build_type=${WEFT_COMPARE_BUILD_TYPE:-Release}
wait_quiet=${WEFT_COMPARE_WAIT_QUIET:-10}
metg_extra=${WEFT_COMPARE_METG_ARGS:-}
py_reps=${WEFT_COMPARE_PY_REPS:-9}
py=${PYTHON:-python3}
cmp=${WEFT_COMPARE_DIR:-build-compare}
mkdir -p "$cmp"
cmp=$(cd "$cmp" && pwd)
jobs=$(nproc 2>/dev/null || echo 2)
# What the caller's shell may carry that would change either side.
unset LD_PRELOAD WEFT_WORKERS WEFT_TRACE ASAN_OPTIONS TSAN_OPTIONS UBSAN_OPTIONS

new_desc="working tree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD 2>/dev/null || echo ' + local changes')"
echo "# compare: old $(git rev-parse --short "$old_sha") ($(git log -1 --format=%s "$old_sha" | cut -c1-60))"
echo "#          new $new_desc"
echo "# $rounds round(s), $build_type builds, $(nproc) core(s): $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"

# --- the old source: a detached worktree, removed at exit ------------------
old_src=$cmp/old-src
cleanup() {
  if [ -d "$old_src" ]; then
    git -C "$root" worktree remove --force "$old_src" >/dev/null 2>&1 || rm -rf "$old_src"
  fi
}
trap cleanup EXIT
cleanup
# -f: also when an earlier run's folder was deleted by hand but is still registered.
git worktree add -q -f --detach "$old_src" "$old_sha"

# --- builds ----------------------------------------------------------------
build_side() { # side src
  local side=$1 src=$2 log=$cmp/$1-build.log
  echo "# building $side: weft-bench ($build_type) and the Python extension (log: ${log#"$root"/})"
  {
    cmake -S "$src" -B "$cmp/$side-build" -DCMAKE_BUILD_TYPE="$build_type" \
      -DWEFT_BUILD_TESTS=OFF -DWEFT_BUILD_BENCH=ON -DWEFT_WERROR=OFF
    cmake --build "$cmp/$side-build" --target weft-bench -j "$jobs"
    [ -x "$cmp/$side-venv/bin/python" ] || "$py" -m venv "$cmp/$side-venv"
    "$cmp/$side-venv/bin/python" -m pip install -q --upgrade pip
    "$cmp/$side-venv/bin/python" -m pip install -q --force-reinstall --no-deps "$src" \
      --config-settings=build-dir="$cmp/$side-pybuild" \
      --config-settings=cmake.build-type="$build_type"
  } > "$log" 2>&1 || { echo "compare.sh: building $side failed:" >&2; tail -30 "$log" >&2; exit 1; }
  [ -x "$cmp/$side-build/bench/weft-bench" ] || { echo "compare.sh: no $cmp/$side-build/bench/weft-bench" >&2; exit 1; }
}
build_side old "$old_src"
build_side new "$root"

# --- measurements ------------------------------------------------------------
raw=$cmp/rounds.txt
: > "$raw"
metg_one() { # side -> value (number, or a word when the sweep gave none)
  local out v
  # shellcheck disable=SC2086
  out=$("$cmp/$1-build/bench/weft-bench" metg --pattern stencil_1d --systems weft --workers 2 \
          --steps 1000 --kernel busy_wait --repeats 7 --wait-quiet "$wait_quiet" --quiet $metg_extra \
          2>>"$cmp/$1-metg.err") || true
  printf '%s\n' "$out" | grep '^# machine:.*TOO BUSY' | sed "s/^# /#   $1 metg: /" > "$cmp/$1-busy.txt" || true
  v=$(printf '%s\n' "$out" | awk '$1 == "metg50_us" && $2 == "weft" {print $3}' | tail -1)
  echo "${v:-failed}"
}
py_one() { # side -> value
  local v
  v=$(cd "$root" && "$cmp/$1-venv/bin/python" bench/compare_py.py --reps "$py_reps" 2>>"$cmp/$1-py.err" |
        awk '$1 == "py_task_us" {print $3}' | tail -1) || true
  echo "${v:-failed}"
}
rm -f "$cmp"/{old,new}-metg.err "$cmp"/{old,new}-py.err
for r in $(seq 1 "$rounds"); do
  for side in old new; do
    m=$(metg_one "$side")
    p=$(py_one "$side")
    echo "$side metg50_us $m" >> "$raw"
    echo "$side py_task_us $p" >> "$raw"
    echo "# round $r/$rounds $side: metg50_us $m py_task_us $p"
    cat "$cmp/$side-busy.txt"
  done
done

# --- medians ------------------------------------------------------------------
median() { # side figure -> median of the numeric values, or n/a
  awk -v s="$1" -v f="$2" '$1 == s && $2 == f && $3 ~ /^[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/ {print $3}' "$raw" |
    sort -g | awk '{v[NR] = $1} END {
      if (NR == 0) { print "n/a"; exit }
      if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
for fig in metg50_us py_task_us; do
  o=$(median old "$fig"); n=$(median new "$fig")
  for side in old new; do
    bad=$(awk -v s="$side" -v f="$fig" '$1 == s && $2 == f && $3 !~ /^[0-9]/' "$raw" | wc -l)
    [ "$bad" -eq 0 ] || echo "# $fig $side: $bad of $rounds round(s) gave no number (left out of the median)"
  done
  if [ "$o" = n/a ] || [ "$n" = n/a ]; then
    ratio=n/a
  else
    ratio=$(awk -v o="$o" -v n="$n" 'BEGIN { if (o > 0) printf "%.3f", n / o; else print "n/a" }')
  fi
  echo "compare $fig old $o new $n ratio $ratio"
done
