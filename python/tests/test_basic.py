import threading
import time

import pytest

import weft


def test_spawn_result_status(rt):
    a = weft.spawn(sum, [1, 2, 3], name="a")
    b = weft.spawn(lambda x, y=0: x * 2 + y, 10, deps=[a], kwargs={"y": 1})
    assert a.result() == 6
    assert b.result() == 21
    assert a.status == "completed" and a.done()
    assert a.name == "a" and b.name is None
    assert isinstance(a.id, int) and b.id > a.id
    assert a.exception() is None
    assert "completed" in repr(a)


def test_runtime_spawn_method_and_wait_returns_self(rt):
    t = rt.spawn(pow, 2, 10)
    assert t.wait() is t
    assert t.result() == 1024


def test_decorator_form(rt):
    T = weft.TaskSpace("T")

    @weft.spawn(task=T[0])
    def first():
        return "one"

    @rt.spawn(deps=[T[0]], name="second")
    def second():
        return T[0].result() + "+two"

    assert first is T[0]
    assert isinstance(second, weft.Task)
    assert second.result() == "one+two"


def test_decorator_binds_free_variables_at_spawn(rt):
    # The loop variable each body sees is the one it had when the decorator
    # spawned it, although the bodies run after the loop (they wait for gate).
    import threading

    ev = threading.Event()
    gate = weft.spawn(ev.wait, 60)
    out, tasks = [], []
    for i in range(5):
        @weft.spawn(name="t", deps=[gate])
        def t():
            out.append(i)
            return i

        tasks.append(t)
    for i in range(5, 8):
        @rt.spawn(deps=[gate])
        def u():
            return i * 10

        tasks.append(u)
    ev.set()
    assert [t.result() for t in tasks] == [0, 1, 2, 3, 4, 50, 60, 70]
    assert sorted(out) == [0, 1, 2, 3, 4]


def test_decorator_snapshot_keeps_shared_objects_and_empty_cells(rt):
    import threading

    ev = threading.Event()
    gate = weft.spawn(ev.wait, 60)
    shared = []  # a mutable object the cell refers to is shared, not copied
    x = "at spawn"

    @weft.spawn(deps=[gate])
    def t():
        shared.append(x)
        return later  # assigned only after the spawn: unbound in the copy

    x = "later"
    later = 1
    ev.set()
    with pytest.raises(NameError):
        t.result()
    assert shared == ["at spawn"]


def test_plain_spawn_unchanged(rt):
    # spawn(fn, ...) passes its arguments and runs fn itself: its free
    # variables are read when the body runs, as for any Python call.
    import threading

    ev = threading.Event()
    gate = weft.spawn(ev.wait, 60)
    x = 1
    late = weft.spawn(lambda: x, deps=[gate])
    args = [weft.spawn(lambda a, b=0: (a, b), i, kwargs={"b": -i}, deps=[gate]) for i in range(3)]
    x = 2
    ev.set()
    assert late.result() == 2
    assert [t.result() for t in args] == [(0, 0), (1, -1), (2, -2)]


def test_decorator_with_empty_parentheses(rt):
    @weft.spawn()
    def a():
        return "a"

    @rt.spawn()
    def b():
        return "b"

    @weft.spawn
    def c():
        return "c"

    assert isinstance(a, weft.Task) and isinstance(b, weft.Task) and isinstance(c, weft.Task)
    assert (a.result(), b.result(), c.result()) == ("a", "b", "c")
    deco = weft.spawn()
    with pytest.raises(TypeError, match="must be callable.*int"):
        deco(42)
    assert weft.spawn(int, 3).result() == 3


def test_deps_order_chain(rt):
    out = []
    prev = None
    for i in range(200):
        prev = weft.spawn(out.append, i, deps=[prev] if prev else [])
    weft.wait_all()
    assert out == list(range(200))


def test_single_task_as_deps(rt):
    out = []
    a = weft.spawn(out.append, 1)
    b = weft.spawn(out.append, 2, deps=a)
    b.wait()
    assert out == [1, 2]


def test_wait_all_module_and_runtime(rt):
    n = []
    for i in range(1000):
        weft.spawn(n.append, i)
    weft.wait_all()
    assert sorted(n) == list(range(1000))
    rt.wait_all(timeout=5)


def test_nested_spawn_and_wait():
    def fib(n):
        if n < 2:
            return n
        a = weft.spawn(fib, n - 1)
        b = weft.spawn(fib, n - 2)
        return a.result() + b.result()

    # One worker: nested waits must run other tasks instead of deadlocking.
    for workers in (1, 2):
        with weft.Runtime(workers=workers):
            assert weft.spawn(fib, 20).result() == 6765


def test_current_task_and_runtime(rt):
    assert weft.current_task() is None
    assert weft.current_runtime() is rt
    t = weft.spawn(lambda: weft.current_task())
    assert t.result() is t
    assert weft.spawn(weft.current_runtime).result() is rt


def test_priority_accepted(rt):
    ts = [weft.spawn(int, i, priority=i % 3) for i in range(50)]
    assert [t.result() for t in ts] == list(range(50))


def test_result_timeout(rt):
    ev = threading.Event()
    t = weft.spawn(ev.wait, 60)  # runs until the test lets it finish
    with pytest.raises(TimeoutError):
        t.result(timeout=0.01)
    ev.set()
    assert t.result(timeout=60) is True


def test_spawn_from_many_threads(rt):
    results = []

    def producer(k):
        ts = [rt.spawn(lambda i=i: i * k) for i in range(500)]
        results.append(sum(t.result() for t in ts))

    th = [threading.Thread(target=producer, args=(k,)) for k in range(4)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    assert sorted(results) == sorted(k * sum(range(500)) for k in range(4))


def test_context_exit_waits_and_closes():
    out = []
    with weft.Runtime(workers=2) as r:
        for i in range(100):
            weft.spawn(lambda i=i: (time.sleep(0.0001), out.append(i)))
    assert len(out) == 100
    assert r.closed
    assert weft.current_runtime() is None
    r.close()  # idempotent


def test_stats(rt):
    for _ in range(10):
        weft.spawn(int)
    weft.wait_all()
    s = rt.stats()
    assert s["workers"] == 2 and s["tasks_run"] >= 10
    assert rt.workers == 2


def test_gil_released_bodies_run_in_parallel(rt):
    # One body counts in Python while the other sits in a single call of a
    # GIL-releasing function (weft.bench.busy, time.sleep).  With a huge
    # switch interval CPython hands the GIL over only when its holder
    # releases it, so a count that moves during that one call shows that the
    # call released the GIL and that the two bodies ran at the same time, on
    # two workers.  No clock is involved: only the order of events.
    import sys

    ticks = [0]
    stop = threading.Event()

    def counter(op, arg):
        while not stop.is_set():
            ticks[0] += 1
            op(arg)  # releases the GIL, so the other body can get it back

    def caller(op, arg):
        for _ in range(500):
            before = ticks[0]
            op(arg)
            if ticks[0] != before:
                return True
        return False

    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        for op, short, long in ((weft.bench.busy, 100, 20000), (time.sleep, 0.0001, 0.02)):
            stop.clear()
            c = weft.spawn(counter, op, short)
            try:
                assert weft.spawn(caller, op, long).result(timeout=60), op
            finally:
                stop.set()
            c.result(timeout=60)
    finally:
        sys.setswitchinterval(old)


def test_busy_validates():
    with pytest.raises(TypeError):
        weft.bench.busy("x")
    with pytest.raises(ValueError):
        weft.bench.busy(-1)
    t0 = time.perf_counter()
    weft.bench.busy(2000)
    assert time.perf_counter() - t0 >= 0.0019


def test_tasks_spawn_children_while_the_runtime_closes():
    out = []

    def parent():
        time.sleep(0.05)
        weft.spawn(out.append, "child")

    with weft.Runtime(workers=2) as r:
        r.spawn(parent)
    assert out == ["child"]
    r2 = weft.Runtime(workers=1)
    r2.spawn(parent)
    r2.close()
    assert out == ["child", "child"]


def test_trace_written_at_close(tmp_path):
    import json

    path = tmp_path / "trace.json"
    with weft.Runtime(workers=2, trace=str(path)):
        for i in range(20):
            weft.spawn(int, i, name=f"task{i}")
    data = json.loads(path.read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    names = {e.get("name") for e in events}
    assert {"task0", "task19"} <= names


def test_default_worker_count():
    import os

    with weft.Runtime() as r:
        assert r.workers >= 1
        if "WEFT_WORKERS" not in os.environ:
            assert r.workers == (os.cpu_count() or r.workers)


def test_module_level_data(rt):
    buf = bytearray(3)
    d = weft.data(buf)
    assert d is rt.data(buf) and d.registered


def test_gil_handoff_only_with_a_gil():
    import sys

    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    with weft.Runtime(workers=2) as r:
        # Without a GIL (free-threaded build, GIL disabled) workers skip the
        # hand-off claim and spin altogether.
        assert r.gil_handoff is gil
