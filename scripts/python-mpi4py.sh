#!/usr/bin/env bash
# Install mpi4py into the venv whose interpreter is $1, built from source
# against the system's MPI (Open MPI from Debian, libopenmpi-dev).  For
# interpreters where it may not build (the free-threaded 3.13t): exits 0
# if mpi4py imports afterwards; otherwise prints one line saying why (the
# tests that need mpi4py skip with it as their reason) and exits 1.
set -uo pipefail
py=${1:?usage: python-mpi4py.sh VENV_PYTHON}
ver=$("$py" -c 'import sys; print("%d.%d%s" % (sys.version_info[0], sys.version_info[1], sys.abiflags))' 2>/dev/null)
"$py" -c 'import mpi4py' 2>/dev/null && exit 0
if ! command -v mpicc >/dev/null 2>&1; then
  echo "mpi4py is not installed for Python $ver: no MPI compiler (mpicc) to build it against"
  exit 1
fi
log=$(mktemp)
if "$py" -m pip install -q --no-binary=mpi4py mpi4py >"$log" 2>&1 && "$py" -c 'import mpi4py' 2>>"$log"; then
  rm -f "$log"
  exit 0
fi
last=$(grep -E -i 'error' "$log" | tail -n 1 | tr -s ' \t' ' ' | cut -c1-200)
rm -f "$log"
echo "mpi4py did not build from source for Python $ver against the system MPI (${last:-pip failed})"
exit 1
