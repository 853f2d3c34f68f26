"""WEFT_GIL_HOLD_NS and WEFT_GIL_SPIN_NS take any string, silently.

python/README.md (weft.Runtime) gives `WEFT_GIL_HOLD_NS` / `WEFT_GIL_SPIN_NS`
as the environment forms of `gil_hold_ns=` / `gil_spin_ns=`, which refuse a
bad value (`gil_hold_ns=-1`: ValueError, `gil_hold_ns=1.5`: TypeError).  The
variables are read with strtoull and no check (python/weft/runtime.c), so:

  WEFT_GIL_HOLD_NS=abc   -> 0: the GIL is never kept (gil_kept 0), no word
  WEFT_GIL_HOLD_NS=1ms   -> 1 ns, no word
  WEFT_GIL_HOLD_NS=-5    -> 2**64 - 5 ns: kept without limit, no word

include/weft.h says of weft_config_init's variables that "malformed
environment values are ignored" (themselves silently); these two are not
even ignored: "abc" turns the feature off.  Also `gil_hold_ns=10**20` raises
a bare `OverflowError: int too big to convert` that does not name the
argument.

Runs a child per value (300 pure-Python bodies on 2 workers) and prints
`rt.stats()["gil_kept"]` and the last line written on stderr; exits 1 when
a malformed value is taken without a message naming the variable, or a bad
argument without one naming the argument.
"""
import os
import subprocess
import sys

CHILD = r"""
import weft
def spin():
    s = 0
    for i in range(20000):
        s += i
with weft.Runtime(workers=2) as rt:
    for _ in range(300):
        rt.spawn(spin)
    rt.wait_all()
    print(rt.stats()["gil_kept"])
"""

bad = False
for value in ("", "0", "abc", "1ms", "-5"):
    r = subprocess.run([sys.executable, "-W", "always", "-c", CHILD], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "WEFT_GIL_HOLD_NS": value})
    said = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    kept = r.stdout.split()[-1] if r.returncode == 0 and r.stdout.split() else "-"
    print(f"WEFT_GIL_HOLD_NS={value!r:6}: exit {r.returncode}, gil_kept {kept:>4}   stderr: {said or '(nothing)'}")
    malformed = value not in ("", "0")
    if malformed and (r.returncode == 0 or "WEFT_GIL_HOLD_NS" not in said):
        bad = True  # taken without a word
    if not malformed and r.returncode != 0:
        bad = True
import weft  # noqa: E402

for arg in (10**20, True):
    try:
        weft.Runtime(workers=1, gil_hold_ns=arg).close()
        print(f"gil_hold_ns={arg!r}: accepted")
        bad = True
    except (OverflowError, ValueError, TypeError) as e:
        print(f"gil_hold_ns={arg!r}: {type(e).__name__}: {e}")
        bad |= "gil_hold_ns" not in str(e)
sys.exit(1 if bad else 0)
