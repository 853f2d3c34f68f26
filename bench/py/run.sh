#!/usr/bin/env bash
# The Python benchmark (bench/py/bench.py): Weft's Python front end beside
# ThreadPoolExecutor, Dask's threaded scheduler and Ray on stencil_1d.
# Creates/updates the project venv, installs the peers into it with pip
# (Ray only if it installs), then runs the benchmark.  Extra arguments go to
# bench.py, e.g.  bench/py/run.sh --steps 2000 --systems weft,threadpool
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/ensure-venv.sh
py=.venv/bin/python
"$py" -m pip install -q "dask>=2023" >/dev/null 2>&1 || echo "# dask: pip install failed (reported as missing)"
if ! "$py" -c "import ray" >/dev/null 2>&1; then
  timeout 600 "$py" -m pip install -q ray >/dev/null 2>&1 || echo "# ray: pip install failed (reported as missing)"
fi
exec "$py" bench/py/bench.py "$@"
