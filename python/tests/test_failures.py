import threading
import time
import traceback

import pytest

import weft


def failing_body(x):
    raise ValueError(f"bad value {x}")


def test_exception_kept_with_traceback(rt):
    t = weft.spawn(failing_body, 3, name="boom")
    with pytest.raises(ValueError, match="bad value 3") as ei:
        t.result()
    tb = "".join(traceback.format_exception(ei.value))
    assert "failing_body" in tb  # the body's frame is in the traceback
    assert "raised by weft task 'boom'" in tb  # a note names the task
    assert t.status == "failed" and t.done()
    assert isinstance(t.exception(), ValueError)
    weft.wait_all()  # a failure the program has seen is not raised again


def test_unobserved_failure_raised_by_wait_all(rt):
    weft.spawn(failing_body, 5)
    weft.spawn(int, 1)
    with pytest.raises(ValueError, match="bad value 5") as ei:
        weft.wait_all()
    assert "failing_body" in "".join(traceback.format_exception(ei.value))
    weft.wait_all()  # reported once


def test_dependents_cancelled_naming_failed_task(rt):
    a = weft.spawn(failing_body, 1, name="A")
    b = weft.spawn(print, "never", deps=[a], name="B")
    c = weft.spawn(print, "never", deps=[b], name="C")
    ok = weft.spawn(int, 4)
    for t in (b, c):
        with pytest.raises(weft.CancelledError) as ei:
            t.result()
        e = ei.value
        assert "'A'" in str(e) and "failed" in str(e)
        assert e.cause_name == "A" and e.cause_id == a.id
        assert isinstance(e.__cause__, ValueError)
        assert t.status == "cancelled"
    assert isinstance(c.exception(), weft.CancelledError)
    assert ok.result() == 4
    with pytest.raises(ValueError):
        weft.wait_all()
    # The runtime keeps working.
    assert weft.spawn(lambda: 5).result() == 5


def test_cancelled_error_is_a_futures_cancelled_error():
    import concurrent.futures

    assert issubclass(weft.CancelledError, concurrent.futures.CancelledError)


def test_cancel_request(rt):
    ev = threading.Event()
    gate = weft.spawn(ev.wait, 60)  # runs until the test lets it finish
    victim = weft.spawn(print, "never", deps=[gate], name="victim")
    after = weft.spawn(print, "never", deps=[victim])
    assert victim.cancel() is True  # the gate has not finished: victim has not started
    ev.set()  # (the cancellation completes when victim would become ready)
    with pytest.raises(weft.CancelledError, match="victim"):
        victim.result()
    with pytest.raises(weft.CancelledError):
        after.result()
    assert gate.result() is True
    assert gate.cancel() is False  # finished tasks cannot be cancelled
    weft.wait_all()  # cancellation by request is not a failure


def _wait_running(t):
    deadline = time.monotonic() + 60
    while t.status != "running" and time.monotonic() < deadline:
        time.sleep(0.001)
    assert t.status == "running"


def test_cancel_pending(rt):
    ev = threading.Event()
    gate = weft.spawn(ev.wait, 60)  # runs until the test lets it finish
    ts = [weft.spawn(int, deps=[gate]) for _ in range(100)]
    _wait_running(gate)
    rt.cancel_pending()
    ev.set()
    rt.wait_all()  # running tasks finish; the rest end cancelled
    assert gate.status == "completed"
    assert all(t.status == "cancelled" for t in ts)
    later = weft.spawn(int, 3)  # tasks spawned afterwards are not affected
    assert later.result() == 3


def test_base_exceptions_are_kept(rt):
    def body():
        raise KeyboardInterrupt("inside a task")

    t = weft.spawn(body)
    with pytest.raises(KeyboardInterrupt, match="inside a task"):
        t.result()
    rt.wait_all()
    weft.spawn(body)
    with pytest.raises(KeyboardInterrupt):
        rt.wait_all()


def test_exit_reraises_first_failure():
    with pytest.raises(ZeroDivisionError):
        with weft.Runtime(workers=2):
            weft.spawn(lambda: 1 / 0)
    assert weft.current_runtime() is None


def test_exception_in_with_block_closes_runtime():
    with pytest.raises(RuntimeError, match="user error"):
        with weft.Runtime(workers=2) as r:
            weft.spawn(time.sleep, 0.01)
            raise RuntimeError("user error")
    assert r.closed


def test_retrieved_failures_are_not_reraised_whatever_their_number(rt):
    # More failures than any bound on what the runtime keeps (it kept 1,024).
    ts = [weft.spawn(failing_body, i) for i in range(1500)]
    for t in ts:
        assert isinstance(t.exception(), ValueError)
    weft.wait_all()  # every failure was retrieved: nothing to raise
    ts = [weft.spawn(failing_body, i) for i in range(1500)]
    for t in ts:
        with pytest.raises(ValueError):
            t.result()
    rt.wait_all()


def test_first_unretrieved_failure_after_many_retrieved_ones(rt):
    ts = [weft.spawn(failing_body, i) for i in range(1500)]
    for t in ts:
        t.wait()
    last = weft.spawn(failing_body, "unseen", deps=[])
    last.wait()
    for t in ts:
        t.exception()
    with pytest.raises(ValueError, match="bad value unseen"):
        weft.wait_all()
    weft.wait_all()  # reported once


class _Payload:
    pass


def _fail_with(payload):
    raise ValueError("failed with a payload")


def test_failed_task_args_freed_once_retrieved_and_dropped(rt):
    import gc
    import weakref

    # .exception() retrieves it.
    p = _Payload()
    ref = weakref.ref(p)
    t = weft.spawn(_fail_with, p)
    assert isinstance(t.exception(), ValueError)
    del p, t
    gc.collect()
    assert ref() is None  # no wait_all needed
    # So does .result() raising.
    p = _Payload()
    ref = weakref.ref(p)
    t = weft.spawn(_fail_with, p)
    try:
        t.result()
    except ValueError:
        pass
    del p, t
    gc.collect()
    assert ref() is None
    # The Task itself keeps its exception (and so the traceback) while it lives.
    p = _Payload()
    ref = weakref.ref(p)
    t = weft.spawn(_fail_with, p)
    t.exception()
    del p
    gc.collect()
    assert ref() is not None
    assert isinstance(t.exception(), ValueError)
    del t
    gc.collect()
    assert ref() is None
    weft.wait_all()  # all retrieved


def test_unretrieved_dropped_failure_still_raised_by_wait_all(rt):
    import gc

    weft.spawn(_fail_with, _Payload())  # the Task is dropped at once
    gc.collect()
    with pytest.raises(ValueError, match="failed with a payload"):
        weft.wait_all()


def test_cancelled_dependent_names_a_retrieved_failure(rt):
    a = weft.spawn(failing_body, 1, name="A")
    b = weft.spawn(print, "never", deps=[a], name="B")
    assert isinstance(a.exception(), ValueError)  # retrieved first
    e = b.exception()
    assert isinstance(e, weft.CancelledError) and e.cause_name == "A"
    assert e.__cause__ is a.exception()
    weft.wait_all()


def test_a_task_argument_taken_for_its_value_gets_a_note():
    # Dask's habit: a Task passed as an argument is not its result; the
    # body's TypeError says what to write instead.
    with weft.Runtime(workers=2) as rt:
        a = rt.spawn(lambda: 1)
        c = rt.spawn(lambda x: x + 1, a)
        with pytest.raises(TypeError) as ei:
            c.result(timeout=30)
        notes = getattr(ei.value, "__notes__", [])
        assert any("argument 0 of this task is a weft.Task" in n and "deps=[t]" in n for n in notes), notes
        # An unrelated failure gets no such note.
        d = rt.spawn(lambda x: 1 / 0, a)
        with pytest.raises(ZeroDivisionError) as ei:
            d.result(timeout=30)
        assert not any("weft.Task" in n for n in getattr(ei.value, "__notes__", []))


def test_a_task_given_to_numpy_is_refused_not_taken_as_an_object():
    # NumPy would make a 0-d object array of a Task: np.vstack([t, t])
    # returned an array of Tasks without a word.  It is a TypeError saying
    # to call .result(), and a body's gets the note on what to write.
    np = pytest.importorskip("numpy")
    with weft.Runtime(workers=2) as rt:
        blk = rt.spawn(np.ones, (2, 2), name="block")
        with pytest.raises(TypeError, match=r"weft.Task 'block' is not an array.*\.result\(\)"):
            np.asarray(blk)
        for fn in (np.linalg.qr, lambda t: np.vstack([t, t]), lambda t: t @ np.eye(2)):
            with pytest.raises(TypeError) as ei:
                rt.spawn(fn, blk, deps=[blk]).result(timeout=30)
            notes = getattr(ei.value, "__notes__", [])
            assert any("argument 0 of this task is a weft.Task" in n for n in notes), notes
        assert np.vstack([blk.result(), blk.result()]).shape == (4, 2)


def test_tasks_in_a_list_or_keyword_argument_get_the_note_too():
    # Dask's delayed(sum)([x, y]) and add(1, y=y): Tasks inside a list or
    # tuple argument, or given as a keyword argument, reach the body as Tasks
    with weft.Runtime(workers=2) as rt:
        a = rt.spawn(lambda: 1)
        b = rt.spawn(lambda: 2)
        cases = [
            (rt.spawn(sum, [a, b]), "argument 0 of this task holds weft.Tasks"),
            (rt.spawn(sum, (1, b)), "argument 0 of this task holds weft.Tasks"),
            (rt.spawn(lambda x, y: x + y, 1, kwargs={"y": b}), "keyword argument 'y' of this task is a weft.Task"),
            (rt.spawn(lambda x, ys: sum(ys), 1, kwargs={"ys": [1, a]}), "keyword argument 'ys' of this task holds"),
        ]
        for t, says in cases:
            with pytest.raises(TypeError) as ei:
                t.result(timeout=30)
            notes = getattr(ei.value, "__notes__", [])
            assert any(says in n and "deps=" in n and ".result()" in n for n in notes), (says, notes)
        # a list without Tasks: no such note
        t = rt.spawn(sum, ["x"])
        with pytest.raises(TypeError) as ei:
            t.result(timeout=30)
        assert not any("weft.Task" in n for n in getattr(ei.value, "__notes__", []))
