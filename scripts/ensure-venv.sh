#!/usr/bin/env bash
# Create the project venv (.venv) and install the Python package and its
# test requirements into it.  Reinstalls the package when its sources changed.
set -euo pipefail
py=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$py" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
if [ -f python/requirements-test.txt ]; then
  .venv/bin/python -m pip install -q -r python/requirements-test.txt
fi
# mpi4py, built from source against the system's MPI (Open MPI from Debian,
# libopenmpi-dev: scripts/ensure-deps.sh), for the tests that hand weft an
# mpi4py communicator.  Without an MPI compiler there is nothing to build
# against (and weft is built without MPI).
if command -v mpicc >/dev/null 2>&1; then
  .venv/bin/python -c 'import mpi4py' 2>/dev/null ||
    .venv/bin/python -m pip install -q --no-binary=mpi4py mpi4py
fi
if [ -f pyproject.toml ]; then
  .venv/bin/python -m pip install -q .
fi
