import pytest

import weft


def test_no_runtime():
    with pytest.raises(RuntimeError, match="no active weft runtime"):
        weft.spawn(print)
    with pytest.raises(RuntimeError, match="no active weft runtime"):
        weft.wait_all()


def test_non_callable(rt):
    with pytest.raises(TypeError, match="must be callable.*int"):
        weft.spawn(42)
    deco = weft.spawn()  # the decorator form, with empty parentheses
    with pytest.raises(TypeError, match="must be callable.*int"):
        deco(42)
    assert weft.spawn(int, 3).result() == 3  # still usable


def test_bad_deps(rt):
    with pytest.raises(TypeError, match=r"deps\[1\] is not a weft.Task but 'str'"):
        weft.spawn(print, deps=[weft.spawn(int), "nope"])
    with pytest.raises(TypeError, match="deps= expects a list of weft.Task"):
        weft.spawn(print, deps=3)
    other = weft.Runtime(workers=1)
    try:
        t = other.spawn(int)
        with pytest.raises(ValueError, match="another weft runtime"):
            weft.spawn(print, deps=[t])
    finally:
        other.close()


def test_bad_data(rt):
    with pytest.raises(TypeError, match=r"reads\[0\].*buffer protocol.*'int'"):
        weft.spawn(print, reads=[5])
    with pytest.raises(TypeError, match="buffer protocol.*'list'"):
        weft.spawn(print, writes=[[1, 2]])
    with pytest.raises(ValueError, match="read-only"):
        weft.spawn(print, writes=[b"immutable bytes"])
    with pytest.raises(TypeError, match="buffer protocol"):
        rt.data("a str is not a buffer")
    mv = memoryview(bytearray(16))[::2]
    with pytest.raises(ValueError, match="contiguous"):
        rt.data(mv)
    assert weft.spawn(int, 1).result() == 1


def test_bad_keywords(rt):
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        weft.spawn(print, bogus=1)
    with pytest.raises(TypeError, match="priority= expects an int"):
        weft.spawn(print, priority="high")
    with pytest.raises(TypeError, match="name= expects a str"):
        weft.spawn(print, name=3)
    with pytest.raises(TypeError, match="kwargs= expects a dict"):
        weft.spawn(print, kwargs=[1])
    with pytest.raises(TypeError, match="task= expects a task-space slot"):
        weft.spawn(print, task="T[1]")
    with pytest.raises(TypeError, match="runtime= expects a weft.Runtime"):
        weft.spawn(print, runtime=1)
    t = weft.spawn(int)
    with pytest.raises(TypeError, match="timeout must be a number"):
        t.wait(timeout="soon")
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        t.result(timeout=-1)


def test_bad_runtime_args():
    with pytest.raises(TypeError, match="workers= expects an int"):
        weft.Runtime(workers="two")
    with pytest.raises(ValueError, match="workers= must be >= 0"):
        weft.Runtime(workers=-1)
    with pytest.raises(TypeError):
        weft.Task()
    with pytest.raises(TypeError):
        weft.Data()


def test_closed_runtime():
    r = weft.Runtime(workers=1)
    t = r.spawn(int, 7)
    r.close()
    with pytest.raises(RuntimeError, match="closed"):
        r.spawn(print)
    with pytest.raises(RuntimeError, match="closed"):
        weft.spawn(print, runtime=r)
    with pytest.raises(RuntimeError, match="closed"):
        r.wait_all()
    with pytest.raises(RuntimeError, match="closed"):
        r.data(bytearray(1))
    with pytest.raises(RuntimeError, match="closed"):
        r.stats()
    # Tasks of a closed runtime keep their outcome.
    assert t.result() == 7 and t.done() and t.status == "completed"
    assert "closed" in repr(r)


def test_wait_all_inside_task_is_an_error(rt):
    def body():
        weft.wait_all()

    with pytest.raises(RuntimeError, match="inside a task"):
        weft.spawn(body).result()
    weft.wait_all()  # seen already: not raised again


def test_task_waiting_for_itself(rt):
    def body():
        return weft.current_task().result()

    with pytest.raises(RuntimeError, match="cannot wait for itself"):
        weft.spawn(body).result()


def test_close_from_inside_task(rt):
    with pytest.raises(RuntimeError, match="cannot be closed from one of its tasks"):
        weft.spawn(rt.close).result()
    rt.wait_all()
    assert weft.spawn(int, 5).result() == 5


def test_runtime_block_inside_a_task_waits_for_its_own_tasks(rt):
    # Waiting on another runtime from a task is fine: only waiting on the
    # runtime that runs the calling task could wait for itself.
    def body(n):
        done = []
        with weft.Runtime(workers=1) as inner:
            ts = [inner.spawn(lambda i=i: (done.append(i), i * i)[1]) for i in range(n)]
        # Leaving the block waited for every inner task.
        assert sorted(done) == list(range(n))
        return sum(t.result() for t in ts)

    assert weft.spawn(body, 10).result() == sum(i * i for i in range(10))


def test_wait_all_on_another_runtime_from_a_task(rt):
    import threading

    other = weft.Runtime(workers=1)
    try:
        ev = threading.Event()
        late = other.spawn(ev.wait, 60)

        def body():
            threading.Timer(0.2, ev.set).start()
            other.wait_all()  # blocks until `late` finished
            assert late.done()
            return late.result()

        assert weft.spawn(body).result() is True
        # Failures of the other runtime are raised to the task that waits.
        other.spawn(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            weft.spawn(other.wait_all).result()
        # The task's own runtime is still refused, whichever way it is named.
        with pytest.raises(RuntimeError, match="inside a task"):
            weft.spawn(rt.wait_all).result()
        with pytest.raises(RuntimeError, match="inside a task"):
            weft.spawn(weft.wait_all).result()
    finally:
        other.close()


def test_runtime_block_inside_a_task_is_local_to_that_task(rt):
    # Inside the block, weft.spawn / current_runtime / wait_all mean the
    # inner runtime; outside it (and for every other thread) nothing changes.
    import threading

    entered, checked = threading.Event(), threading.Event()

    def body():
        outer = weft.current_runtime()
        with weft.Runtime(workers=1) as inner:
            assert weft.current_runtime() is inner
            t = weft.spawn(weft.current_runtime)
            entered.set()
            checked.wait(60)
            weft.wait_all()
            assert t.done()
        assert weft.current_runtime() is outer
        return t.result() is inner, outer is rt

    t = weft.spawn(body)
    assert entered.wait(60)
    seen = weft.current_runtime()  # the main thread's runtime, not the task's inner one
    checked.set()
    assert seen is rt
    assert t.result() == (True, True)


def test_parent_waiting_for_a_child_that_depends_on_it_is_refused(rt):
    def parent():
        child = weft.spawn(int, deps=[weft.current_task()])
        with pytest.raises(RuntimeError, match="WEFT_EDEADLK"):
            child.result(timeout=30)
        return "refused"

    assert rt.spawn(parent).result(timeout=60) == "refused"


@pytest.mark.parametrize(
    "var,value,says",
    [
        ("WEFT_WORKERS", "lots", "a whole number from 0 to 4096"),
        ("WEFT_VGPU_CHECK", "maybe", "1 or 0"),
        ("WEFT_PIN_WORKERS", "sometimes", "one of: auto, 1, on, yes, true, 0, off, no, false"),
        ("WEFT_VGPU_PEER_GBPS", "fast", "a positive number"),
    ],
)
def test_malformed_environment_is_refused(monkeypatch, var, value, says):
    # The core's variables are checked at Runtime(), keywords or not: a typo
    # is named, never read as the default.
    monkeypatch.setenv(var, value)
    for kw in ({}, {"workers": 1}):
        with pytest.raises(ValueError, match=rf'{var}="{value}", which is not {says} .* or unset it'):
            weft.Runtime(**kw)
    monkeypatch.delenv(var)
    with weft.Runtime(workers=1) as rt:  # the module stays usable
        assert rt.spawn(int, 7).result() == 7


def test_keywords_win_over_their_environment_variables(monkeypatch):
    # A variable stands in for a keyword left None; a keyword given wins.
    monkeypatch.setenv("WEFT_WORKERS", "1")
    with weft.Runtime() as rt:
        assert rt.workers == 1
    with weft.Runtime(workers=2) as rt:
        assert rt.workers == 2
    monkeypatch.setenv("WEFT_WORKERS", "0")  # as workers=0: one per core
    with weft.Runtime() as rt, weft.Runtime(workers=0) as per_core:
        assert rt.workers == per_core.workers >= 1
    monkeypatch.setenv("WEFT_PIN_WORKERS", "off")  # a flag's words, as WEFT_VGPU_CHECK takes
    with weft.Runtime(workers=1) as rt:
        assert rt.spawn(int, 3).result() == 3
