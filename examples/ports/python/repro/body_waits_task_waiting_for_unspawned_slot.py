"""A plain body that waits with `.result()` for a task which itself waits for
a task-space key nobody spawns makes the end of the `with weft.Runtime()`
block hang for ever, with no warning and no error.

Found porting ray_nested_quicksort.py (Ray's `ray.get` inside a remote
function, nested): python/README.md (Task spaces) says that closing the
runtime cancels the tasks waiting for slots nobody spawned into and that "a
body waiting for such a slot (`T[5].result()` in the body) is treated alike",
naming the key in a `weft.TaskWarning`; and (Task) that a wait outside tasks
that only such a spawn can end warns after 5 s.  Both hold when the body
waits for the slot itself ("direct" below: exits at once, cancelled, warned).
They do not when the body waits one task further away: for a body that
waits for the slot, for a task spawned with `deps=[T[k]]`, or for an
`async def` body awaiting it.  The close never returns, the program's
`outer.result(timeout=...)` times out without the 5-s (here 1-s) warning,
and that on one worker as on two.

Runs each form in a child with a 10-s deadline (faulthandler): exits 1 when
a form hangs.
"""
import os
import subprocess
import sys

CHILD = r"""
import sys, faulthandler, warnings, weft
faulthandler.dump_traceback_later(10, exit=True)
warnings.simplefilter("always")
T = weft.TaskSpace("T")
async def awaits():
    return await T["never"]
with weft.Runtime(workers=int(sys.argv[2])) as rt:
    form = sys.argv[1]
    if form == "direct":
        outer = rt.spawn(lambda: T["never"].result(), name="outer")
    else:
        if form == "via-body":
            inner = rt.spawn(lambda: T["never"].result(), name="inner")
        elif form == "via-deps":
            inner = rt.spawn(lambda: 1, deps=[T["never"]], name="inner")
        else:
            inner = rt.spawn(awaits, name="inner")
        outer = rt.spawn(lambda: inner.result(), name="outer")
    try:
        outer.result(timeout=3)
    except TimeoutError:
        pass
print("closed:", type(outer.exception()).__name__, flush=True)
"""


def main():
    bad = False
    for form in ("direct", "via-body", "via-deps", "via-await"):
        for workers in (1, 2):
            r = subprocess.run([sys.executable, "-c", CHILD, form, str(workers)], capture_output=True, text=True,
                               timeout=30, env={**os.environ, "WEFT_STALL_WARN_MS": "1000"})
            warned = r.stderr.count("TaskWarning")
            if "closed:" in r.stdout:
                print(f"{form:10} workers={workers}: {r.stdout.strip()}, {warned} TaskWarning(s)")
            else:
                print(f"{form:10} workers={workers}: HANGS: the with block never ended in 10 s "
                      f"(killed by faulthandler), {warned} TaskWarning(s)")
                bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
