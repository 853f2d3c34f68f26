#!/usr/bin/env bash
# Run the pytest suite against an extension (and core) built with a
# sanitizer: `address` (ASan+UBSan) or `thread` (TSan).  CPython itself is
# not instrumented, so the sanitizer runtime is preloaded into it; each kind
# gets its own venv (.venv-asan, .venv-tsan) and build folder.
#
#   python-sanitized-test.sh address|thread [ft]
#
# With `ft` the interpreter is the free-threaded CPython 3.13 that
# scripts/python-ft.sh builds (or reuses), run with the GIL disabled
# (PYTHON_GIL=0); venv .venv-<tag>-ft, build folder build-py-<tag>-ft.
# TSan then also sees CPython's own synchronisation, which it cannot
# understand because the interpreter is not instrumented; those reports are
# suppressed by python/tsan-ft.supp, which says why for each entry.  No entry
# may name Weft's code.
#
# Sanitizer reports go to files under build-py-<tag>/san-logs/ (log_path),
# not to stderr: pytest captures stderr, and a sanitizer that ends the
# process in the middle of a test leaves pytest no chance to show it, so the
# log said only "exit 66".  This also catches reports from the Python
# subprocesses some tests start.  If pytest fails or any report file exists,
# every report is printed to stderr and the script fails.
set -euo pipefail
kind=${1:?usage: python-sanitized-test.sh address|thread [ft]}
ft=${2:-}
case $kind in
  address) tag=asan ;;
  thread)  tag=tsan ;;
  *) echo "python-sanitized-test.sh: unknown sanitizer '$kind'" >&2; exit 2 ;;
esac
case $ft in
  "") py=${PYTHON:-python3}; extra_env=() ;;
  ft) tag=$tag-ft
      scripts/python-ft.sh --build
      py=$(scripts/python-ft.sh --print-interpreter)
      extra_env=(PYTHON_GIL=0) ;;
  *) echo "python-sanitized-test.sh: unknown mode '$ft' (only 'ft')" >&2; exit 2 ;;
esac
logdir="$PWD/build-py-$tag/san-logs"
case $kind in
  address) flags="-g -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
           preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
           # CPython keeps interned objects alive at exit: leaks are not ours to judge here.
           san_env=(ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:log_path=$logdir/asan"
                    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logdir/ubsan") ;;
  thread)  flags="-g -fsanitize=thread -fno-omit-frame-pointer"
           preload="$(gcc -print-file-name=libtsan.so)"
           tsan_opts="halt_on_error=1:log_path=$logdir/tsan"
           # history_size=7 (the most): the other side's stack of a race
           # must be restored for tsan-ft.supp to match it (a garbage
           # collection's traversal of a Task, early in a long run, read as
           # "failed to restore the stack" and went unsuppressed)
           [ -n "$ft" ] && tsan_opts="$tsan_opts:history_size=7:suppressions=$PWD/python/tsan-ft.supp"
           san_env=(TSAN_OPTIONS="$tsan_opts") ;;
esac
venv=.venv-$tag
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
# (Not mypy: the type check runs in .venv only, `make python-test`; mypy has
# no wheels for the free-threaded interpreter.)
# (Nor Numba from the list: it installs from a wheel only, and has none for
# the free-threaded interpreter; the tests that need it then skip, saying
# why, through WEFT_NUMBA_UNAVAILABLE.)
"$venv/bin/python" -m pip install -q -r <(grep -v -e '^mypy' -e '^numba' python/requirements-test.txt)
numba_env=()
why=$(scripts/python-numba.sh "$venv/bin/python") || numba_env=(WEFT_NUMBA_UNAVAILABLE="$why")
# mpi4py from source against the system's MPI (scripts/ensure-venv.sh says
# why); on the free-threaded interpreter a failed build is reported to the
# tests, which skip saying so (scripts/python-mpi4py.sh).
mpi4py_env=()
if [ -n "$ft" ]; then
  why=$(scripts/python-mpi4py.sh "$venv/bin/python") || mpi4py_env=(WEFT_MPI4PY_UNAVAILABLE="$why")
elif command -v mpicc >/dev/null 2>&1; then
  "$venv/bin/python" -c 'import mpi4py' 2>/dev/null ||
    "$venv/bin/python" -m pip install -q --no-binary=mpi4py mpi4py
fi
# -g and no stripping: reports name functions and lines.
"$venv/bin/python" -m pip install -q . --config-settings=cmake.args="-DCMAKE_C_FLAGS=$flags" \
  --config-settings=build-dir="build-py-$tag" --config-settings=install.strip=false

rm -rf "$logdir"
mkdir -p "$logdir"
rc=0
env "${san_env[@]}" ${extra_env[@]+"${extra_env[@]}"} ${mpi4py_env[@]+"${mpi4py_env[@]}"} ${numba_env[@]+"${numba_env[@]}"} WEFT_PY_SANITIZER="$kind" LD_PRELOAD="$preload" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests || rc=$?

shopt -s nullglob
reports=("$logdir"/*)
for f in "${reports[@]}"; do
  echo "==== sanitizer report: $f" >&2
  cat "$f" >&2
done
if [ ${#reports[@]} -gt 0 ]; then
  echo "python-sanitized-test.sh ($kind): ${#reports[@]} sanitizer report file(s) above; pytest exited $rc" >&2
  [ "$rc" -ne 0 ] || rc=1
elif [ "$rc" -ne 0 ]; then
  echo "python-sanitized-test.sh ($kind): pytest exited $rc; no sanitizer report was written" >&2
fi
exit "$rc"
