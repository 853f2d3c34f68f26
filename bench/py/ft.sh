#!/usr/bin/env bash
# Free-threaded CPython beside the GIL build, same run: pure-Python
# bodies on 1 and 2 workers (bench/py/ft.py), and the empty-task cost and
# METG(50%) of bench/py/bench.py, each under the project venv's interpreter
# (GIL) and under the free-threaded one that scripts/python-ft.sh builds
# (build-ft/venv, run with PYTHON_GIL=0).  Ends with the lines
#   ft_speedup_15us weft <v>   ft_speedup_50us weft <v>   ft_py_task_us weft <v>
# (and gil_* beside them).  Without the free-threaded interpreter it says so
# and prints no ft_* line.  Extra arguments go to ft.py.
set -euo pipefail
cd "$(dirname "$0")/../.."
ft_py=build-ft/venv/bin/python
if [ ! -x "$ft_py" ]; then
  echo "# no free-threaded interpreter here (scripts/python-ft.sh or make test builds it): no ft_* figures"
  exit 0
fi
scripts/ensure-venv.sh
"$ft_py" -m pip install -q . >/dev/null
out=$(mktemp -d "${TMPDIR:-/tmp}/weft-ft-bench.XXXXXX")
trap 'rm -rf "$out"' EXIT
run() {  # tag python args...
  local tag=$1 py=$2
  shift 2
  if [ "$tag" = ft ]; then PYTHON_GIL=0 "$py" "$@"; else env -u PYTHON_GIL "$py" "$@"; fi
}
for tag in gil ft; do
  py=.venv/bin/python
  [ "$tag" = ft ] && py=$ft_py
  echo "== $tag: pure-Python bodies, 1 vs 2 workers"
  run "$tag" "$py" bench/py/ft.py "$@" | tee "$out/$tag-speedup"
  echo "== $tag: empty tasks and METG(50%) on stencil_1d (bench/py/bench.py, weft only)"
  run "$tag" "$py" bench/py/bench.py --systems weft --reps 5 | tee "$out/$tag-bench"
done
echo
for tag in gil ft; do
  grep -h '^speedup_\|^py_task_us\|^py_metg50_us' "$out/$tag-speedup" "$out/$tag-bench" | sed "s/^/${tag}_/"
done
