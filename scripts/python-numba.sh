#!/usr/bin/env bash
# Install Numba into the venv whose interpreter is $1, from a wheel only
# (never built from source: it needs LLVM).  Exits 0 if numba imports
# afterwards; otherwise prints one line saying why (the tests that need
# Numba skip with it as their reason, through WEFT_NUMBA_UNAVAILABLE) and
# exits 1.  Free-threaded CPython 3.13 (cp313t) has no Numba wheel.
set -uo pipefail
py=${1:?usage: python-numba.sh VENV_PYTHON}
ver=$("$py" -c 'import sys; print("%d.%d%s" % (sys.version_info[0], sys.version_info[1], sys.abiflags))' 2>/dev/null)
"$py" -c 'import numba' 2>/dev/null && exit 0
log=$(mktemp)
if "$py" -m pip install -q --only-binary=:all: numba >"$log" 2>&1 && "$py" -c 'import numba' 2>>"$log"; then
  rm -f "$log"
  exit 0
fi
last=$(grep -E -i 'error' "$log" | tail -n 1 | tr -s ' \t' ' ' | cut -c1-200)
rm -f "$log"
echo "numba is not installed for Python $ver: no wheel of it for this interpreter (${last:-pip failed})"
exit 1
