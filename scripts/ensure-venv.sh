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
if [ -f pyproject.toml ]; then
  .venv/bin/python -m pip install -q .
fi
