import os
import subprocess
import sys
import threading
import time
import warnings

import pytest

import weft


def test_forward_reference(rt):
    T = weft.TaskSpace("T")
    out = []
    # T[1] depends on T[0], which is spawned later.
    weft.spawn(out.append, 1, deps=[T[0]], task=T[1])
    assert T[1].status == "waiting"  # in the runtime, behind T[0]'s placeholder
    assert T[0].status == "declared"
    time.sleep(0.01)
    assert out == []
    weft.spawn(out.append, 0, task=T[0])
    T.wait()
    assert out == [0, 1]
    assert T[1].status == "completed"


def test_reverse_order_chain(rt):
    T = weft.TaskSpace("chain")
    n = 500
    out = []
    for i in reversed(range(n)):
        weft.spawn(out.append, i, task=T[i], deps=[T[i - 1]] if i else [])
    weft.wait_all()
    assert out == list(range(n))
    assert len(T) == n and 3 in T and "x" not in T
    assert T[3].name == "chain[3]"


def test_tuple_keys_and_labels(rt):
    T = weft.TaskSpace("G")
    weft.spawn(int, task=T[0, 1])
    assert T[0, 1].name == "G[0, 1]"
    assert T["a"].name == "G['a']"
    assert T[0, 1].result() == 0
    assert T["a"].status == "declared"
    assert set(iter(T)) == {(0, 1), "a"}
    assert len(T.tasks()) == 2
    assert "G" in repr(T)


def test_stencil_with_task_space(rt):
    T = weft.TaskSpace("S")
    W, steps = 3, 50
    grid = {}

    def point(t, i):
        if t:
            for j in (i - 1, i, i + 1):
                if 0 <= j < W:
                    assert (t - 1, j) in grid  # dependencies ran first
        grid[t, i] = True

    # Spawn the steps in reverse: every dependency is a forward reference.
    for t in reversed(range(steps)):
        for i in range(W):
            deps = [T[t - 1, j] for j in (i - 1, i, i + 1) if 0 <= j < W] if t else []
            weft.spawn(point, t, i, deps=deps, task=T[t, i])
    weft.wait_all()
    assert len(grid) == W * steps


def test_spawn_twice_into_slot(rt):
    T = weft.TaskSpace()
    weft.spawn(int, task=T[0])
    with pytest.raises(ValueError, match=r"already spawned \(a key takes one task: .*\.clear\(\)"):
        weft.spawn(int, task=T[0])


def test_cycle_detected(rt):
    T = weft.TaskSpace("C")
    weft.spawn(int, task=T[1], deps=[T[2]])
    with pytest.raises(ValueError, match="cycle"):
        weft.spawn(int, task=T[2], deps=[T[1]])
    with pytest.raises(ValueError, match="depend on itself"):
        weft.spawn(int, task=T[3], deps=[T[3]])
    weft.spawn(int, task=T[2])  # breaking the would-be cycle works
    assert T[1].result() == 0


def test_failure_through_deferred(rt):
    T = weft.TaskSpace("F")
    weft.spawn(int, task=T[1], deps=[T[0]])

    def fail():
        raise OSError("no")

    weft.spawn(fail, task=T[0])
    with pytest.raises(weft.CancelledError, match=r"F\[0\]"):
        T[1].result()
    with pytest.raises(OSError):
        weft.wait_all()


def test_never_spawned_dependency_cancelled_at_close():
    T = weft.TaskSpace("N")
    with pytest.warns(weft.TaskWarning, match=r"nobody spawned: N\[0\]"):
        with weft.Runtime(workers=1):
            t = weft.spawn(int, deps=[T[0]])
            assert t.status == "waiting"
    assert t.status == "cancelled"
    with pytest.raises(weft.CancelledError, match="never spawned"):
        t.result()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("through", ["body", "deps", "await", "two bodies"])
def test_a_body_waiting_for_a_task_that_waits_for_a_slot_never_spawned_is_released_at_close(through, workers):
    # The slot is one task (or two) away from the body that waits: the
    # close cancels the slot, the task waiting for it ends, and so does the
    # body's wait, with that task's outcome.  On one worker the outer body
    # is queued behind the inner one, stuck in its wait.
    T = weft.TaskSpace("I")

    async def awaits():
        return await T["never"]

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with weft.Runtime(workers=workers) as rt:
            if through == "body":
                inner = rt.spawn(lambda: T["never"].result(), name="inner")
            elif through == "deps":
                inner = rt.spawn(lambda: 1, deps=[T["never"]], name="inner")
            elif through == "await":
                inner = rt.spawn(awaits, name="inner")
            else:
                innermost = rt.spawn(lambda: T["never"].result(), name="innermost")
                inner = rt.spawn(lambda: innermost.result(), name="inner")
            outer = rt.spawn(lambda: inner.result(), name="outer")
    assert any("nobody spawned: I['never']" in str(w.message) for w in said), [str(w.message) for w in said]
    with pytest.raises(weft.CancelledError):
        inner.result()
    with pytest.raises(weft.CancelledError):
        outer.result()


def test_a_slot_reported_at_one_close_is_not_reported_again_by_the_next_runtime():
    # The first runtime's close cancelled what depended on N[0] and said
    # so; a second runtime using the space for other keys has nothing
    # waiting for N[0], and says nothing about it.  A task of its own
    # depending on N[0] is reported again.
    T = weft.TaskSpace("N")
    with pytest.warns(weft.TaskWarning, match=r"nobody spawned: N\[0\]"):
        with weft.Runtime(workers=1):
            weft.spawn(int, deps=[T[0]])
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with weft.Runtime(workers=1):
            assert weft.spawn(int, task=T[1]).result() == 0
    assert [str(w.message) for w in said if issubclass(w.category, weft.TaskWarning)] == []
    assert T[0].status == "declared"
    with pytest.warns(weft.TaskWarning, match=r"nobody spawned: N\[0\]"):
        with weft.Runtime(workers=1):
            t = weft.spawn(int, deps=[T[0]])
    assert t.status == "cancelled"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("wait", ["result", "wait"])
def test_body_waiting_for_a_slot_never_spawned_is_cancelled_at_close(wait):
    # A body that waits for a slot nobody spawns into is left only a spawn
    # to end its wait, as a task that depends on the slot is: closing the
    # runtime cancels the slot, the body's wait raises, the close warns.
    import warnings

    T = weft.TaskSpace("B")
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with weft.Runtime(workers=2) as rt:
            t = rt.spawn(lambda: getattr(T[0], wait)(), name="reader")
    assert any("nobody spawned: B[0]" in str(w.message) for w in said), [str(w.message) for w in said]
    if wait == "result":
        with pytest.raises(weft.CancelledError, match=r"'B\[0\]' was cancelled: it was never spawned"):
            t.result()
    else:  # wait() returns the task, whatever its outcome
        assert t.result() is T[0]
    # A slot another body spawns into while the close waits is not cancelled.
    import time

    L = weft.TaskSpace("L")

    def late():
        time.sleep(0.1)
        weft.spawn(lambda: 42, task=L[1])

    with weft.Runtime(workers=2) as rt:
        t = rt.spawn(lambda: L[1].result(), name="reader")
        rt.spawn(late)
    assert t.result() == 42


def test_cancel_deferred(rt):
    T = weft.TaskSpace()
    t = weft.spawn(int, deps=[T[0]])
    after = weft.spawn(int, deps=[t])
    assert t.cancel() is True
    weft.spawn(int, task=T[0])
    with pytest.raises(weft.CancelledError):
        t.result()
    with pytest.raises(weft.CancelledError):
        after.result()


def test_wait_on_deferred_from_another_thread(rt):
    import threading

    T = weft.TaskSpace()
    t = weft.spawn(lambda: "late", deps=[T[0]])
    threading.Timer(0.05, lambda: rt.spawn(int, task=T[0])).start()
    assert t.result(timeout=10) == "late"


def test_deferred_keeps_data_order(rt):
    # A writer waiting for an unspawned slot, then a reader spawned now: the
    # reader must still see the write, because data accesses keep spawn order.
    T = weft.TaskSpace()
    buf = bytearray(1)

    def write(b):
        b[0] = 42

    weft.spawn(write, buf, deps=[T[0]], writes=[buf])
    reader = weft.spawn(lambda b: b[0], buf, reads=[buf])
    time.sleep(0.02)
    assert reader.status == "waiting"
    weft.spawn(int, task=T[0])
    assert reader.result() == 42


def test_cancel_slot_before_anything_is_spawned_into_it(rt):
    T = weft.TaskSpace("K")
    ran = []
    after = weft.spawn(ran.append, "after", deps=[T[0]])
    assert T[0].cancel() is True
    weft.spawn(ran.append, "slot", task=T[0])  # accepted, never runs
    with pytest.raises(weft.CancelledError):
        T[0].result()
    with pytest.raises(weft.CancelledError):
        after.result()
    assert ran == []


def test_close_lets_running_tasks_fill_slots():
    T = weft.TaskSpace("L")
    out = []
    with weft.Runtime(workers=2) as r:
        waiter = r.spawn(out.append, "waiter", deps=[T[1]])

        def fill_later():
            time.sleep(0.05)
            r.spawn(out.append, "slot", task=T[1])

        r.spawn(fill_later)
    # Leaving the block waited for fill_later, which filled T[1] while the
    # runtime closed: both ran, nothing was cancelled.
    assert sorted(out) == ["slot", "waiter"]
    assert waiter.status == "completed"


def test_space_is_bound_to_one_runtime():
    T = weft.TaskSpace("B")
    with weft.Runtime(workers=1) as a, weft.Runtime(workers=1) as b:
        a.spawn(int, task=T[0])
        with pytest.raises(ValueError, match="another weft runtime"):
            b.spawn(int, task=T[1])
        assert T[0].result() == 0


def test_many_threads_spawn_into_one_space(rt):
    import threading

    T = weft.TaskSpace("M")
    n, ok, errors = 300, [], []
    lock = threading.Lock()

    def producer():
        for i in range(n):
            try:
                rt.spawn(int, task=T[i])
                with lock:
                    ok.append(i)
            except ValueError:
                with lock:
                    errors.append(i)

    threads = [threading.Thread(target=producer) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rt.wait_all()
    assert sorted(ok) == list(range(n))  # each slot filled exactly once
    assert len(errors) == 3 * n
    assert all(T[i].result() == 0 for i in range(n))


def test_a_wait_only_a_spawn_can_end_says_so(monkeypatch):
    # A wait for a task behind a slot nobody has spawned into would hang
    # without a word: past WEFT_STALL_WARN_MS it warns, naming the slot, and
    # goes on waiting (here until another thread spawns it).
    monkeypatch.setenv("WEFT_STALL_WARN_MS", "100")
    with weft.Runtime(workers=2) as r:
        T = weft.TaskSpace("W")
        t = weft.spawn(int, deps=[T[1]], task=T[2])
        timer = threading.Timer(1.0, lambda: weft.spawn(int, task=T[1], runtime=r))
        timer.start()
        with pytest.warns(weft.TaskWarning, match=r"nobody has spawned into \(W\[1\]\)"):
            assert t.result(timeout=60) == 0
        timer.join()
        # A body that runs long is no stall: no warning.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert weft.spawn(time.sleep, 0.4).result(timeout=60) is None
        # Nor a slot's own wait once it is spawned.
        T2 = weft.TaskSpace("V")
        timer = threading.Timer(0.4, lambda: weft.spawn(int, task=T2[0], runtime=r))
        timer.start()
        with pytest.warns(weft.TaskWarning, match=r"V\[0\]"):
            assert T2[0].result(timeout=60) == 0
        timer.join()


_DEADLOCK = r"""
import os, sys, threading, warnings
import weft
both = threading.Barrier(2)
box = {}
WAIT = sys.argv[1]
def wait_for(t):
    return t.result() if WAIT == "result" else weft.wait([t])
def a():
    both.wait()
    return wait_for(box["b"])
def b():
    both.wait()
    return wait_for(box["a"])
rt = weft.Runtime(workers=2)
box["a"] = rt.spawn(a, name="A")
box["b"] = rt.spawn(b, name="B")
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    try:
        box["a"].result(timeout=3)
        print("no timeout")
    except TimeoutError:
        pass
    done, _ = weft.wait([box["a"], box["b"]], timeout=1)
    print("waited: %d done" % len(done))
print("\n".join(str(w.message) for w in seen if issubclass(w.category, weft.TaskWarning)))
sys.stdout.flush()
os._exit(0)  # (the bodies never end: nothing can close the runtime)
"""


@pytest.mark.parametrize("body_wait", ["result", "weft.wait"])
def test_a_wait_beside_bodies_waiting_for_each_other_says_they_are_a_deadlock(body_wait):
    # Bodies on two workers each wait for the other (its result, or
    # weft.wait): nothing can end either.  A wait for one of them
    # (Task.result(), weft.wait) warns, naming the tasks waited for, instead
    # of hanging without a word.
    env = dict(os.environ, WEFT_STALL_WARN_MS="200")
    out = subprocess.run([sys.executable, "-c", _DEADLOCK, body_wait], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "no timeout" not in out.stdout
    assert "waited: 0 done" in out.stdout, out.stdout
    assert out.stdout.count("deadlock") == 2, out.stdout + out.stderr  # Task.result(), then weft.wait
    assert "task 'A' (id" in out.stdout and "task 'B' (id" in out.stdout, out.stdout
