"""`async def` bodies: weft drives the coroutine on a worker, and `await`
on weft tasks suspends the task without holding a worker (or its GPU
reservation) until they have finished (C's weft_ctx_continue)."""
import asyncio
import threading
import time

import pytest

import weft

pytestmark = pytest.mark.timeout(60)

T_OUT = 30   # seconds: every wait below, so that a hang fails instead of sticking


def sq(x):
    return x * x


def test_async_body_runs_and_returns(rt):
    async def body(x):
        return x + 1

    t = rt.spawn(body, 41)
    assert t.result(timeout=T_OUT) == 42
    assert t.status == "completed"


def test_await_one_task(rt):
    async def body():
        a = weft.spawn(sq, 7)
        return (await a) + 1

    assert rt.spawn(body).result(timeout=T_OUT) == 50


def test_await_gather_list_and_args(rt):
    async def body():
        ts = [weft.spawn(sq, i) for i in range(6)]
        both = await weft.gather(ts[0], ts[1])
        return both, await weft.gather(ts), await weft.gather([])

    assert rt.spawn(body).result(timeout=T_OUT) == ([0, 1], [0, 1, 4, 9, 16, 25], [])


def test_await_slot_spawned_later():
    with weft.Runtime(workers=1) as rt:
        T = weft.TaskSpace("T")

        async def body():
            return await T["late"]

        t = rt.spawn(body)
        deadline = time.monotonic() + T_OUT
        while t.status != "waiting" and time.monotonic() < deadline:
            time.sleep(0.001)
        assert t.status == "waiting"   # suspended: the one worker is free
        assert rt.spawn(sq, 3).result(timeout=T_OUT) == 9
        rt.spawn(sq, 9, task=T["late"])
        assert t.result(timeout=T_OUT) == 81


def test_await_whole_space(rt):
    T = weft.TaskSpace("T")
    gate = threading.Event()

    def slow(i):
        gate.wait(T_OUT)
        return i

    async def body():
        for i in range(4):
            weft.spawn(slow, i, task=T[i])
        T["never"]                       # a slot nobody spawns into: not waited for
        assert await T is None
        return sorted(T[i].result() for i in range(4))

    t = rt.spawn(body)
    gate.set()
    assert t.result(timeout=T_OUT) == [0, 1, 2, 3]


def test_mixing_with_plain_bodies_and_dependents(rt):
    order = []

    async def step():
        order.append("start")
        await weft.spawn(time.sleep, 0.05)
        order.append("end")
        return "coro"

    c = rt.spawn(step, name="coro")
    # A plain body waiting for the coroutine task, and one depending on it:
    # both see its final end, not the end of its first segment.
    waiter = rt.spawn(lambda: (c.result(), list(order)))
    after = rt.spawn(lambda: list(order), deps=[c])
    assert waiter.result(timeout=T_OUT) == ("coro", ["start", "end"])
    assert after.result(timeout=T_OUT) == ["start", "end"]


def test_data_dependents_wait_for_the_final_segment(rt):
    buf = bytearray(1)

    async def writer():
        buf[0] = 1
        await weft.spawn(time.sleep, 0.05)
        buf[0] = 2

    rt.spawn(writer, writes=[buf])
    assert rt.spawn(lambda b: b[0], buf, reads=[buf]).result(timeout=T_OUT) == 2


def test_nested_spawns_and_coroutines(rt):
    async def fib(n):
        if n < 2:
            return n
        a = weft.spawn(fib, n - 1)
        b = weft.spawn(fib, n - 2)
        x, y = await weft.gather(a, b)
        return x + y

    assert rt.spawn(fib, 12).result(timeout=T_OUT) == 144


def test_many_awaits_in_a_loop(rt):
    async def loop(n):
        total = 0
        for i in range(n):
            total += await weft.spawn(sq, i)
        return total

    assert rt.spawn(loop, 300).result(timeout=T_OUT) == sum(i * i for i in range(300))


def test_worker_not_held_during_await():
    # One worker: the awaited task needs it, so it can only run if the
    # coroutine gave it back.
    with weft.Runtime(workers=1) as rt:
        async def body():
            started = threading.Event()
            child = weft.spawn(lambda: (started.set(), "child")[1])
            r = await child
            return r, started.is_set(), threading.get_ident()

        assert rt.spawn(body).result(timeout=T_OUT)[:2] == ("child", True)
        async def chain(k):
            return [await weft.spawn(sq, i) for i in range(k)]

        ts = [rt.spawn(chain, 5) for _ in range(20)]
        assert [t.result(timeout=T_OUT) for t in ts] == [[0, 1, 4, 9, 16]] * 20


def test_failure_of_awaited_task_is_raised_and_catchable(rt):
    def boom():
        raise ValueError("bad")

    async def body():
        b = weft.spawn(boom, name="boom")
        try:
            await b
        except ValueError as e:
            caught = str(e)
        after = weft.spawn(sq, 2, deps=[b], name="after")
        try:
            await after
        except weft.CancelledError as e:
            cancelled = e.cause_name
        return caught, cancelled

    assert rt.spawn(body).result(timeout=T_OUT) == ("bad", "boom")
    rt.wait_all(timeout=T_OUT)   # retrieved inside the coroutine: not raised again


def test_gather_raises_the_first_failure(rt):
    async def body():
        await weft.gather(weft.spawn(sq, 1), weft.spawn(int, "x"))

    with pytest.raises(ValueError):
        rt.spawn(body).result(timeout=T_OUT)


def test_exception_in_coroutine_fails_the_task(rt):
    async def body():
        await weft.spawn(sq, 1)
        raise KeyError("k")

    t = rt.spawn(body, name="coro")
    dep = rt.spawn(sq, 2, deps=[t], name="dep")
    with pytest.raises(KeyError) as ei:
        t.result(timeout=T_OUT)
    assert any("coro" in n for n in getattr(ei.value, "__notes__", []))
    assert t.status == "failed"
    e = dep.exception(timeout=T_OUT)
    assert isinstance(e, weft.CancelledError)
    assert e.cause_name == "coro" and e.cause_id == t.id
    assert isinstance(e.__cause__, KeyError)


def test_unnamed_coroutine_failing_after_an_await_is_named_by_its_function(rt):
    # after a suspension (gather of two tasks suspends) the note names the
    # async function, as before any await, not "<coroutine object ... at 0x...>"
    async def resumed_then_fails():
        await weft.gather(weft.spawn(sq, 1), weft.spawn(sq, 2))
        raise KeyError("k")

    t = rt.spawn(resumed_then_fails)
    with pytest.raises(KeyError) as ei:
        t.result(timeout=T_OUT)
    notes = getattr(ei.value, "__notes__", [])
    assert "raised by a weft task running resumed_then_fails()" in notes, notes


def test_exception_before_any_await(rt):
    async def body():
        raise RuntimeError("early")

    t = rt.spawn(body)
    with pytest.raises(RuntimeError, match="early"):
        t.result(timeout=T_OUT)
    assert t.status == "failed"


def test_failure_recorded_for_wait_all(rt):
    async def body():
        await weft.spawn(sq, 1)
        raise ZeroDivisionError("later")

    rt.spawn(body)
    with pytest.raises(ZeroDivisionError):
        rt.wait_all(timeout=T_OUT)


def test_cancel_suspended_task(rt):
    T = weft.TaskSpace("T")
    reached = threading.Event()
    finished = []

    async def body():
        reached.set()
        try:
            await T["later"]             # nobody has spawned into it yet: suspends
            finished.append("resumed")
        finally:
            finished.append("finally")

    t = rt.spawn(body, name="susp")
    dep = rt.spawn(sq, 2, deps=[t], name="dep")
    assert reached.wait(T_OUT)
    deadline = time.monotonic() + T_OUT
    while t.status != "waiting" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert t.status == "waiting"
    assert t.cancel() is True
    rt.spawn(sq, 1, task=T["later"])
    e = t.exception(timeout=T_OUT)
    assert isinstance(e, weft.CancelledError) and e.cause_id == t.id
    assert t.status == "cancelled"
    d = dep.exception(timeout=T_OUT)
    assert isinstance(d, weft.CancelledError) and d.cause_name == "susp"
    assert "resumed" not in finished
    deadline = time.monotonic() + T_OUT      # (dropped, hence closed, as its continuation ends)
    while "finally" not in finished and time.monotonic() < deadline:
        time.sleep(0.001)
    assert finished == ["finally"]
    rt.wait_all(timeout=T_OUT)   # a cancellation is no failure


def test_misuse_is_refused_with_a_hint(rt):
    t = rt.spawn(sq, 3)
    t.wait(timeout=T_OUT)

    async def via_asyncio():
        return await t

    def plain():
        return asyncio.run(via_asyncio())

    with pytest.raises(RuntimeError, match=r"task\.result\(\)"):
        rt.spawn(plain).result(timeout=T_OUT)
    with pytest.raises(RuntimeError, match="only in an `async def` body that weft runs"):
        asyncio.run(via_asyncio())

    class Foreign:           # what an event loop's futures yield to their loop
        def __await__(self):
            yield "tick"

    async def foreign():
        await Foreign()

    with pytest.raises(TypeError, match="without an event loop"):
        rt.spawn(foreign).result(timeout=T_OUT)

    async def asyncio_sleep():
        await asyncio.sleep(0)  # yields None to its loop

    with pytest.raises(TypeError, match=r"awaited something that yields to an event loop \(asyncio\.sleep\(0\)"):
        rt.spawn(asyncio_sleep).result(timeout=T_OUT)

    async def not_a_task():
        await weft.gather(weft.spawn(sq, 1), 5)

    with pytest.raises(TypeError, match=r"item 1 is not a weft\.Task but int"):
        rt.spawn(not_a_task).result(timeout=T_OUT)

    async def itself():
        await weft.current_task()

    with pytest.raises(RuntimeError, match="awaits itself"):
        rt.spawn(itself).result(timeout=T_OUT)

    async def follows_itself():
        await weft.spawn(sq, 1, deps=[weft.current_task()])

    with pytest.raises(RuntimeError, match="WEFT_EDEADLK"):
        rt.spawn(follows_itself).result(timeout=T_OUT)


def test_async_body_on_a_gpu_gives_its_reservation_back():
    with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
        async def body():
            first = weft.context().devices
            # The child needs the whole GPU, which this task held until it awaited.
            v = await weft.spawn(sq, 5, placement=weft.gpu(0))
            return v, first, weft.context().devices

        v, first, later = rt.spawn(body, placement=weft.gpu(0)).result(timeout=T_OUT)
        assert v == 25 and first == later == (1,)


def test_plain_body_waiting_for_child_on_its_own_gpu():
    # The parent holds the one GPU; its child is placed on that GPU.  The
    # parent lends its reservation while it waits, so the child runs.
    with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
        def parent():
            c = weft.spawn(sq, 6, placement=weft.gpu(0), name="child")
            return c.result(timeout=T_OUT)

        assert rt.spawn(parent, placement=weft.gpu(0), name="parent").result(timeout=T_OUT) == 36
    with weft.Runtime(workers=1, devices="cpu,vgpu:1") as rt:
        def parent2():
            cs = [weft.spawn(sq, i, placement=weft.gpu(0), memory=1 << 20) for i in range(3)]
            return [c.result(timeout=T_OUT) for c in cs]

        assert rt.spawn(parent2, placement=weft.gpu(0), memory=1 << 20).result(timeout=T_OUT) == [0, 1, 4]
        assert rt.devices[1]["memory_used"] == 0


def test_status_while_resumed_and_cancel_too_late(rt):
    T = weft.TaskSpace("T")
    resumed = threading.Event()
    go = threading.Event()

    async def body():
        await T["k"]
        resumed.set()
        go.wait(T_OUT)      # the second segment runs (holding a worker)
        return "done"

    t = rt.spawn(body)
    deadline = time.monotonic() + T_OUT
    while t.status != "waiting" and time.monotonic() < deadline:
        time.sleep(0.001)
    rt.spawn(sq, 1, task=T["k"])
    assert resumed.wait(T_OUT)
    assert t.status == "running"
    assert t.cancel() is False          # it runs again: too late
    go.set()
    assert t.result(timeout=T_OUT) == "done"


def test_device_data_coroutine_suspends_and_keeps_its_data():
    """A coroutine whose data is on its GPU (device_data=True) suspends at
    an await like any other: its worker and its GPU reservation are free
    meanwhile (another task takes the whole GPU, on the one worker), and
    it continues on the same GPU, where its data is: views after the await
    hold what it wrote before, and what it writes through them is the
    task's output."""
    np = pytest.importorskip("numpy")
    for _ in range(5):
        out = np.zeros(4)
        with weft.Runtime(workers=1, devices="cpu,vgpu:2") as r:
            T = weft.TaskSpace("T")
            where = []

            async def body():
                ctx = weft.context()
                where.append(ctx.devices)
                x = ctx.array(out)
                x[:] = 1.0
                v = await weft.gather(T["a"], weft.spawn(lambda: 1))
                ctx = weft.context()
                where.append(ctx.devices)
                y = ctx.array(out)
                y[:] = v[0] + v[1] + y[0]  # 40 + 1 + what it wrote before the await
                return "ok"

            t = r.spawn(body, writes=[out], placement=weft.gpu(1), device_data=True)
            deadline = time.monotonic() + T_OUT
            while t.status != "waiting" and time.monotonic() < deadline:  # suspended at the await
                time.sleep(0.001)
            assert t.status == "waiting"
            # The one worker and the whole of GPU 1 are free for others meanwhile.
            assert r.spawn(lambda: 5, placement=weft.gpu(1), share=1.0).result(timeout=T_OUT) == 5
            r.spawn(lambda: 40, task=T["a"])
            assert t.result(timeout=T_OUT) == "ok"
            assert where[0] == where[1]
            assert r.spawn(lambda: out.tolist(), reads=[out]).result(timeout=T_OUT) == [42.0] * 4


def test_views_after_an_await():
    """A host-data coroutine reaches its data after an await too: the view
    holds what it wrote before, and what it writes is the task's output."""
    np = pytest.importorskip("numpy")
    out = np.zeros(3)
    with weft.Runtime(workers=2) as r:
        T = weft.TaskSpace("T")

        async def host_body():
            weft.context().array(out)[:] = 2.0
            await T["later"]  # suspends: nobody has spawned it yet
            a = weft.context().array(out)
            a += 1.0
            return a.tolist()

        t = r.spawn(host_body, readwrites=[out])
        deadline = time.monotonic() + T_OUT
        while t.status != "waiting" and time.monotonic() < deadline:  # suspended at the await
            time.sleep(0.001)
        r.spawn(sq, 1, task=T["later"])
        assert t.result(timeout=T_OUT) == [3.0] * 3
        assert r.spawn(lambda: out.tolist(), reads=[out]).result(timeout=T_OUT) == [3.0] * 3
