"""A plain body waiting with `.result()` for a task-space slot nobody spawns
into makes the runtime's close hang for ever, silently, and Ctrl-C does not
end it.

Found porting parla_tsqr.py: a t3 body that reads its Q2 through a slot
with a typo in the key (`T3[0].result()` for `T1[0].result()`) never ends.
python/README.md (Task spaces) says that closing the runtime cancels the
tasks waiting for slots nobody spawned into (`CancelledError: ... was never
spawned`) and warns (`weft.TaskWarning`) naming the keys, and that a wait
outside tasks warns after 5 s when only such a spawn can end it.  That holds
for a task that depends on the slot (`deps=[T3[0]]`) and for an `async def`
body that awaits it (`await T3[0]`: cancelled at close, with both
warnings), not for a plain body that waits for it: the body is running
(blocked in the C wait on the slot), so `weft_wait_settled_timed` in
close_locked (python/weft/runtime.c) never sees the runtime settled, the
5-s warning's `weft_runtime_stalled` sees a running body, and Ctrl-C at the
close only cancels tasks that have not started.

Runs each form in a child with a deadline: exits 1 when a form hangs past
it (or when the child's close is not followed by the end of the program).
"""
import os
import subprocess
import sys

CHILD = r"""
import sys, weft
T3 = weft.TaskSpace("T3")
async def awaits():
    return await T3[0]
with weft.Runtime(workers=2) as rt:
    if sys.argv[1] == "deps":
        t = rt.spawn(lambda: 1, deps=[T3[0]], name="reader")
    elif sys.argv[1] == "await":
        t = rt.spawn(awaits, name="reader")
    else:
        t = rt.spawn(lambda: T3[0].result(), name="reader")   # a plain body waits for the slot
print("closed:", type(t.exception()).__name__, flush=True)
"""


def main():
    bad = False
    for form in ("deps", "await", "body .result()"):
        try:
            r = subprocess.run([sys.executable, "-W", "always", "-c", CHILD, form.split()[0]], capture_output=True,
                               text=True, timeout=15, env={**os.environ, "WEFT_STALL_WARN_MS": "1000"})
            warned = "TaskWarning" in r.stderr
            print(f"{form:15} {r.stdout.strip():30} warned: {warned}")
            bad |= r.returncode != 0 or "closed:" not in r.stdout
        except subprocess.TimeoutExpired:
            print(f"{form:15} HANGS: the close never returned in 15 s (no warning, no error)")
            bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
