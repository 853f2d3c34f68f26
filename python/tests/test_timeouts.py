"""Timeouts: None, inf and huge values wait without limit; bad values are ValueErrors."""
import math
import threading

import pytest

import weft

HUGE = (float("inf"), 1e11, 1e300, 2.0**64)


def _release_after_waiting(ev):
    """A thread that sets ev once the main thread has gone into a wait
    (a short timer is enough: a too-early set only makes the test weaker,
    never wrong)."""
    t = threading.Timer(0.2, ev.set)
    t.start()
    return t


@pytest.mark.parametrize("timeout", HUGE)
def test_huge_timeouts_wait_without_limit(rt, timeout):
    for how in ("result", "wait", "exception", "wait_all", "module_wait_all", "space_wait"):
        ev = threading.Event()
        T = weft.TaskSpace()
        t = weft.spawn(ev.wait, 60, task=T[0])
        timer = _release_after_waiting(ev)
        if how == "result":
            assert t.result(timeout=timeout) is True
        elif how == "wait":
            assert t.wait(timeout=timeout) is t
        elif how == "exception":
            assert t.exception(timeout=timeout) is None
        elif how == "wait_all":
            rt.wait_all(timeout=timeout)
        elif how == "module_wait_all":
            weft.wait_all(timeout=timeout)
        else:
            T.wait(timeout=timeout)
        assert t.done() and t.result() is True, how
        timer.join()


def test_huge_timeout_on_a_deferred_task(rt):
    T = weft.TaskSpace()
    t = weft.spawn(lambda: "late", deps=[T[0]])
    threading.Timer(0.2, lambda: rt.spawn(int, task=T[0])).start()
    assert t.result(timeout=math.inf) == "late"


@pytest.mark.parametrize("bad", [-1, -0.5, -math.inf, math.nan])
def test_negative_and_nan_timeouts_are_value_errors(rt, bad):
    T = weft.TaskSpace()
    t = weft.spawn(int, task=T[0])
    for call in (t.result, t.wait, t.exception, rt.wait_all, weft.wait_all, T.wait):
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            call(timeout=bad)
    assert t.result() == 0


def test_zero_and_small_timeouts_still_time_out(rt):
    ev = threading.Event()
    t = weft.spawn(ev.wait, 60)
    try:
        for to in (0, 0.0, 1e-9, 0.01):
            with pytest.raises(TimeoutError):
                t.result(timeout=to)
        with pytest.raises(TimeoutError):
            rt.wait_all(timeout=0.01)
    finally:
        ev.set()
    assert t.result(timeout=60) is True


def test_a_timeout_names_the_task_its_status_and_what_it_waits_for(rt):
    # A bare "timed out" left the user to find out which task, and why.
    ev = threading.Event()
    running = weft.spawn(ev.wait, 60, name="slow")
    T = weft.TaskSpace("T")
    behind = weft.spawn(int, deps=[T[3]])
    try:
        with pytest.raises(TimeoutError, match=r"the weft task 'slow' \(running: its body is running\)"):
            running.result(timeout=0.01)
        with pytest.raises(TimeoutError, match=r"the weft task 'T\[0\]' \(declared: nobody has spawned into its "
                                               r"slot\)"):
            T[0].result(timeout=0.01)
        ev.set()
        assert running.result(timeout=60) is True
        # Settled: only a spawn into T[3] can move the dependent, and the
        # message says so; an unnamed task goes by its function's name.
        with pytest.raises(TimeoutError, match=r"the weft task int \(id \d+\) \(waiting: it waits for tasks it "
                                               r"depends on, and nothing else runs: the runtime waits for "
                                               r"task-space slots nobody has spawned into: .*T\[3\]"):
            behind.result(timeout=0.2)
    finally:
        ev.set()
    rt.spawn(int, task=T[3])
    assert behind.result(timeout=60) == 0
