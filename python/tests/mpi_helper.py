"""Running Python under `mpirun` from the tests (test_comm.py,
test_cloverleaf.py): as root where CI is, oversubscribing 2 cores, and
under the sanitized suites with the sanitizer passed to the ranks, not to
mpirun itself (it is not instrumented) — under TSan also with suppressions
for Open MPI's own frames (tests/tsan-mpi.supp), beside the suite's own."""
import os
import shutil
import subprocess
import sys
import tempfile

MPIRUN = shutil.which("mpirun")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

# Environment variables the ranks get from the test's environment.
PASSED = ("ASAN_OPTIONS", "UBSAN_OPTIONS", "PYTHON_GIL", "WEFT_PY_SANITIZER", "CLOVER_KERNELS")


def mpirun(argv, np_=2, timeout=120, cwd=None, drop=()):
    """Run `python argv...` on np_ ranks; the CompletedProcess (output
    captured as text).  drop: environment variables the ranks must not
    inherit.  Raises subprocess.TimeoutExpired past timeout seconds."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    for var in drop:
        env.pop(var, None)
    args = [MPIRUN, "-np", str(np_)]
    preload = env.pop("LD_PRELOAD", None)
    if preload:
        args += ["-x", "LD_PRELOAD=" + preload]
    for var in PASSED:
        if var in env:
            args += ["-x", var]
    tsan = env.get("TSAN_OPTIONS")
    if tsan is not None:
        opts, supps = [], [os.path.join(REPO, "tests", "tsan-mpi.supp")]
        for o in tsan.split(":"):
            if o.startswith("suppressions="):
                supps.append(o.split("=", 1)[1])
            elif o:
                opts.append(o)
        merged = os.path.join(tempfile.mkdtemp(prefix="weft-tsan-"), "supp")
        with open(merged, "w") as f:
            for s in supps:
                with open(s) as g:
                    f.write(g.read() + "\n")
        env["TSAN_OPTIONS"] = ":".join(opts + ["suppressions=" + merged])
        args += ["-x", "TSAN_OPTIONS"]
    return subprocess.run(args + [sys.executable] + list(argv), env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)
