"""rt.stats()["tasks_spawned"] and ["tasks_run"] count an `async def` body's
resumption after an `await` that suspended as one more task.

Found porting dask_word_count.py: the same graph of 1987 spawns reported
tasks_spawned 1987 on some runs and 1988 on others, depending on whether the
`summary` coroutine's awaits found their tasks finished.  python/README.md
(`rt.stats()`) and include/weft.h (`tasks_spawned`: "tasks accepted by
weft_spawn") do not say that a resumption counts, so a user checking the
counters against the spawns they wrote sees an off-by-some that changes from
run to run.  docs/python-guide.md (async bodies: cost and mechanism) does
say that an `await` that suspends spawns a continuation task
(`weft_ctx_continue`); the counters' documentation does not point there.

Prints the counters for two spawns, with the await finding its task finished
and with it suspending.  The documents now say that a continuation counts
(python/README.md, `rt.stats()`; include/weft.h, `tasks_spawned`): exits 1
when the counters differ from the 2 spawns written plus the one
continuation of the await that suspended.
"""
import sys
import time

import weft


async def waiter(t):
    return await t


bad = False
for sleep in (0.0, 0.05):
    with weft.Runtime(workers=2) as rt:
        t = rt.spawn(time.sleep, sleep)
        if sleep == 0.0:
            t.result()                      # finished before the await: no suspension
        rt.spawn(waiter, t).result()        # 2 spawns written
        st = rt.stats()
    print(f"sleep {sleep}: 2 spawns written, tasks_spawned {st['tasks_spawned']}, tasks_run {st['tasks_run']}")
    want = 2 if sleep == 0.0 else 3  # (the suspended await's continuation counts)
    bad |= st["tasks_spawned"] != want or st["tasks_run"] != want
sys.exit(1 if bad else 0)
