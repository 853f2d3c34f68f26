#!/usr/bin/env bash
# Run the pytest suite against an extension (and core) built with a
# sanitizer: `address` (ASan+UBSan) or `thread` (TSan).  CPython itself is
# not instrumented, so the sanitizer runtime is preloaded into it; each kind
# gets its own venv (.venv-asan, .venv-tsan) and build folder.
set -euo pipefail
kind=${1:?usage: python-sanitized-test.sh address|thread}
case $kind in
  address) tag=asan flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
           preload="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
           # CPython keeps interned objects alive at exit: leaks are not ours to judge here.
           export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ;;
  thread)  tag=tsan flags="-fsanitize=thread -fno-omit-frame-pointer"
           preload="$(gcc -print-file-name=libtsan.so)"
           export TSAN_OPTIONS=halt_on_error=1 ;;
  *) echo "python-sanitized-test.sh: unknown sanitizer '$kind'" >&2; exit 2 ;;
esac
venv=.venv-$tag
py=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
"$venv/bin/python" -m pip install -q -r python/requirements-test.txt
"$venv/bin/python" -m pip install -q . --config-settings=cmake.args="-DCMAKE_C_FLAGS=$flags" \
  --config-settings=build-dir="build-py-$tag"
LD_PRELOAD="$preload" "$venv/bin/python" -m pytest -q -p no:cacheprovider python/tests
