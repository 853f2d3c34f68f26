#!/usr/bin/env bash
# The type check of `make python-test`, in the project venv (.venv, made by
# scripts/ensure-venv.sh with the mypy pinned in python/requirements-test.txt):
#  1. mypy --strict (pyproject.toml, [tool.mypy]) over the package's modules
#     and its stub of the C extension (python/weft/_weft.pyi), the examples,
#     python/demo.py and python/tests/typing_usage.py (typed use, and misuse
#     that must be refused);
#  2. mypy's stubtest: the stubs against the installed package at run time,
#     so that a name the extension exports without a stub fails the check
#     (python/tests/stubtest-allowlist.txt: the known differences, why).
# Offline once installed; its cache is build/mypy-cache.
set -euo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
"$py" -m mypy --config-file pyproject.toml
"$py" -m mypy.stubtest weft --mypy-config-file pyproject.toml \
  --allowlist python/tests/stubtest-allowlist.txt --ignore-unused-allowlist
