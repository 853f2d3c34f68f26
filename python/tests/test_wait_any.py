"""weft.wait and weft.as_completed: concurrent.futures.wait / as_completed
for weft tasks (FIRST_COMPLETED, FIRST_EXCEPTION, ALL_COMPLETED, timeouts),
from the program's thread and from a body on one worker, and what
concurrent.futures.wait / as_completed say when given weft tasks.

Orderings come from events the test sets, never from sleeps."""
import concurrent.futures as cf
import threading

import pytest

import weft

pytestmark = pytest.mark.timeout(60)


def _boom():
    raise KeyError("boom")


def test_constants_are_concurrent_futures_own():
    assert weft.FIRST_COMPLETED is cf.FIRST_COMPLETED
    assert weft.FIRST_EXCEPTION is cf.FIRST_EXCEPTION
    assert weft.ALL_COMPLETED is cf.ALL_COMPLETED


def test_first_completed_returns_while_the_other_still_runs(rt):
    ev = threading.Event()
    slow = weft.spawn(ev.wait, 30)
    fast = weft.spawn(lambda: 7)
    done, not_done = weft.wait([slow, fast], return_when=weft.FIRST_COMPLETED)
    assert done == {fast} and not_done == {slow}
    assert not slow.done()
    ev.set()
    res = weft.wait([slow, fast], return_when=cf.FIRST_COMPLETED)
    assert fast in res.done and res.done | res.not_done == {slow, fast}


def test_all_completed(rt):
    evs = [threading.Event() for _ in range(3)]
    ts = [weft.spawn(e.wait, 30) for e in evs]
    for e in evs:
        e.set()
    done, not_done = weft.wait(ts)  # ALL_COMPLETED is the default
    assert done == set(ts) and not_done == set()
    assert all(t.result() is True for t in ts)


def test_first_exception_returns_at_the_failure(rt):
    ev = threading.Event()
    slow = weft.spawn(ev.wait, 30)
    bad = weft.spawn(_boom)
    done, not_done = weft.wait([slow, bad], return_when=weft.FIRST_EXCEPTION)
    assert done == {bad} and not_done == {slow}
    with pytest.raises(KeyError):
        bad.result()
    ev.set()
    # Without a failure, FIRST_EXCEPTION waits for all.
    oks = [weft.spawn(lambda i=i: i) for i in range(4)]
    done, not_done = weft.wait(oks, return_when=weft.FIRST_EXCEPTION)
    assert done == set(oks) and not_done == set()


def test_first_exception_ignores_cancelled_tasks(rt):
    ev = threading.Event()
    bad = weft.spawn(_boom)
    dep = weft.spawn(lambda: 1, deps=[bad])  # cancelled when bad fails
    weft.wait([dep])
    assert dep.status == "cancelled"
    other = weft.spawn(ev.wait, 30)
    # The cancelled one is done but is no exception: the wait goes on
    # until its time is up.
    try:
        done, not_done = weft.wait([dep, other], timeout=0.1, return_when=weft.FIRST_EXCEPTION)
        assert done == {dep} and not_done == {other}
    finally:
        ev.set()
    with pytest.raises(KeyError):
        bad.result()


def test_timeout_returns_not_done(rt):
    ev = threading.Event()
    slow = weft.spawn(ev.wait, 30)
    for when in (weft.ALL_COMPLETED, weft.FIRST_COMPLETED, weft.FIRST_EXCEPTION):
        done, not_done = weft.wait([slow], timeout=0.05, return_when=when)
        assert done == set() and not_done == {slow}
    done, not_done = weft.wait([slow], timeout=0)  # polls
    assert not_done == {slow}
    fast = weft.spawn(lambda: 1)
    fast.wait()
    done, not_done = weft.wait([slow, fast], timeout=0.05)
    assert done == {fast} and not_done == {slow}
    ev.set()


def test_as_completed_yields_in_finishing_order():
    evs = [threading.Event() for _ in range(3)]
    with weft.Runtime(workers=3):  # (each task holds a worker until its event)
        try:
            ts = [weft.spawn(e.wait, 30) for e in evs]
            it = weft.as_completed(ts)
            seen = []
            for k in (2, 0, 1):
                evs[k].set()
                ts[k].wait()
                seen.append(next(it))
            assert seen == [ts[2], ts[0], ts[1]]
            with pytest.raises(StopIteration):
                next(it)
        finally:
            for e in evs:
                e.set()


def test_as_completed_finished_ones_first_and_each_once(rt):
    ts = [weft.spawn(lambda i=i: i) for i in range(20)]
    for t in ts:
        t.wait()
    ev = threading.Event()
    late = weft.spawn(ev.wait, 30)
    it = weft.as_completed(ts + [late] + ts)  # duplicates: each once
    first = [next(it) for _ in range(20)]
    assert first == ts  # finished already: in the order given
    ev.set()
    assert list(it) == [late]


def test_as_completed_timeout_raises(rt):
    ev = threading.Event()
    fast = weft.spawn(lambda: 1)
    fast.wait()
    slow = weft.spawn(ev.wait, 30)
    it = weft.as_completed([slow, fast], timeout=0.1)
    assert next(it) is fast
    with pytest.raises(TimeoutError, match=r"1 \(of 2\) tasks unfinished"):
        next(it)
    ev.set()


def test_as_completed_timeout_names_the_unfinished_tasks(rt):
    """As Task.result's TimeoutError names its task and status, so does
    as_completed's for the tasks left (the first five)."""
    ev = threading.Event()
    slow = [weft.spawn(ev.wait, 30, name=f"slow{i}") for i in range(7)]
    try:
        with pytest.raises(TimeoutError, match=r"7 \(of 7\) tasks unfinished when the timeout ran out: "
                           r"<weft.Task 'slow0' \w+>, .*'slow4'.* and 2 more") as e:
            next(weft.as_completed(slow, timeout=0.05))
        assert "slow5" not in str(e.value)
    finally:
        ev.set()


def test_empty_input():
    assert weft.wait([]) == (set(), set())
    assert weft.wait([], return_when=weft.FIRST_COMPLETED) == (set(), set())
    assert list(weft.as_completed([])) == []


def test_duplicates_count_once(rt):
    ev = threading.Event()
    a = weft.spawn(lambda: 1)
    b = weft.spawn(ev.wait, 30)
    done, not_done = weft.wait([a, a, b, b, a], timeout=0.05)
    assert done == {a} and not_done == {b}
    ev.set()
    done, not_done = weft.wait([b, a, b])
    assert done == {a, b} and not_done == set()
    assert list(weft.as_completed([a, a, a])) == [a]


def test_cancelled_tasks_count_as_done(rt):
    ev = threading.Event()
    gate = weft.spawn(ev.wait, 30)
    dep = weft.spawn(lambda: 1, deps=[gate])
    assert dep.cancel()
    other = weft.spawn(ev.wait, 30)
    ev.set()  # (the cancellation takes effect when dep would have become ready)
    done, not_done = weft.wait([dep], return_when=weft.FIRST_COMPLETED)
    assert done == {dep} and dep.status == "cancelled"
    assert list(weft.as_completed([dep])) == [dep]
    other.wait()
    # Cancelled because a task they follow failed: done too.
    bad = weft.spawn(_boom)
    after = weft.spawn(lambda: 1, deps=[bad])
    done, _ = weft.wait([after])
    assert done == {after} and after.status == "cancelled"
    assert list(weft.as_completed([after])) == [after]
    with pytest.raises(KeyError):
        bad.result()


def test_task_space_slot_is_waited_for_until_spawned(rt):
    T = weft.TaskSpace("T")
    done, not_done = weft.wait([T[0]], timeout=0.05)
    assert done == set() and not_done == {T[0]}
    weft.spawn(lambda: 5, task=T[0])
    done, not_done = weft.wait([T[0]], return_when=weft.FIRST_COMPLETED)
    assert done == {T[0]} and T[0].result() == 5


def test_wrong_types():
    f = cf.Future()
    with pytest.raises(TypeError, match=r"weft.as_completed\(\): item 0 is 'Future', not a weft.Task"):
        weft.as_completed([f])  # checked at the call, before any next()
    with pytest.raises(TypeError, match="iterable of weft.Task objects"):
        weft.wait(5)
    with weft.Runtime(workers=1):
        t = weft.spawn(lambda: 1)
        with pytest.raises(TypeError, match=r"item 1 is 'int', not a weft.Task.*weft.spawn\(\)"):
            weft.wait([t, 3])
        with pytest.raises(TypeError, match=r"not one weft.Task: pass \[task\]"):
            weft.wait(t)
        with pytest.raises(ValueError, match="return_when must be"):
            weft.wait([t], return_when="FIRST")
        with pytest.raises(ValueError, match="timeout must be >= 0"):
            weft.wait([t], timeout=-1)
        with pytest.raises(TypeError, match="timeout must be a number"):
            list(weft.as_completed([t], timeout="1"))


class _NotATask:
    pass


def test_wrong_types_first_item_reported():
    with pytest.raises(TypeError, match=r"item 0 is '_NotATask'"):
        weft.wait([_NotATask()])


def test_tasks_of_two_runtimes_are_refused():
    with weft.Runtime(workers=1) as r1, weft.Runtime(workers=1) as r2:
        a = r1.spawn(lambda: 1)
        b = r2.spawn(lambda: 2)
        with pytest.raises(ValueError, match="tasks of different runtimes"):
            weft.wait([a, b])
        with pytest.raises(ValueError, match="tasks of different runtimes"):
            list(weft.as_completed([a, b]))
        assert weft.wait([a]).done == {a}


def test_from_a_body_on_one_worker_does_not_deadlock():
    """The only worker runs the body that waits: the children can only run
    because the wait runs them."""
    def body():
        kids = [weft.spawn(lambda i=i: i * i) for i in range(6)]
        first, rest = weft.wait(kids, return_when=weft.FIRST_COMPLETED)
        assert len(first) >= 1 and first | rest == set(kids)
        done, not_done = weft.wait(kids)
        assert done == set(kids) and not not_done
        more = [weft.spawn(lambda i=i: i) for i in range(5)]
        got = [t.result() for t in weft.as_completed(more)]
        bad = weft.spawn(_boom)
        slow_ok = weft.spawn(lambda: 1, deps=[bad])
        fe, _ = weft.wait([bad, slow_ok], return_when=weft.FIRST_EXCEPTION)
        assert isinstance(bad.exception(), KeyError)
        return sorted(got), bad in fe

    with weft.Runtime(workers=1):
        assert weft.spawn(body).result() == ([0, 1, 2, 3, 4], True)


def test_from_a_body_waiting_for_itself_is_refused():
    def body():
        me = weft.current_task()
        other = weft.spawn(lambda: 1)
        with pytest.raises(RuntimeError, match="calling task"):
            weft.wait([other, me], return_when=weft.FIRST_COMPLETED)
        return other.result()

    with weft.Runtime(workers=1):
        assert weft.spawn(body).result() == 1


def test_concurrent_futures_wait_teaches(rt):
    t = weft.spawn(lambda: 1)
    with pytest.raises(TypeError, match=r"not concurrent.futures.Future objects: use weft.wait\("):
        cf.wait([t])
    with pytest.raises(TypeError, match=r"weft.as_completed\(tasks"):
        next(cf.as_completed([t]))
    with pytest.raises(TypeError, match="weft.wait"):
        cf.wait([t], return_when=cf.FIRST_COMPLETED)
    assert t.result() == 1
    # What the guard adds leaves asyncio and await alone.
    import asyncio

    assert not asyncio.isfuture(t)

    async def body(x):
        return await x + 1

    assert weft.spawn(body, t).result() == 2


def test_concurrent_futures_wait_on_a_mixed_list_leaves_no_future_locked(rt):
    t = weft.spawn(lambda: 1)
    fs = [cf.Future() for _ in range(4)]
    with pytest.raises(TypeError, match="weft.wait"):
        cf.wait(fs + [t])
    with pytest.raises(TypeError, match="weft.as_completed"):
        next(cf.as_completed([t] + fs))
    # Another thread can still complete them (their locks were let go).
    th = threading.Thread(target=lambda: [f.set_result(i) for i, f in enumerate(fs)])
    th.start()
    th.join(10)
    assert not th.is_alive()
    assert [f.result(timeout=10) for f in fs] == [0, 1, 2, 3]


def test_an_iterables_own_type_error_is_not_renamed():
    """A TypeError raised while the iterable is iterated is its own, not a
    claim that the argument is not iterable."""
    def tasks():
        yield 1 + "x"

    for call in (weft.wait, weft.as_completed):
        with pytest.raises(TypeError, match="unsupported operand") as e:
            call(tasks())
        assert "iterable of weft.Task" not in str(e.value)


def test_a_task_space_is_refused_naming_its_slots():
    """Iterating a TaskSpace gives its keys: passing the space itself would
    wait for nothing (an empty space) or name an int as item 0."""
    T = weft.TaskSpace("T")
    with weft.Runtime(workers=1) as rt:
        for call in (weft.wait, weft.as_completed):
            with pytest.raises(TypeError, match=r"not the space: pass its slots, as T\[0:n\]"):
                call(T)  # empty: would have returned (set(), set())
        rt.spawn(lambda: 1, task=T[0])
        for call in (weft.wait, weft.as_completed):
            with pytest.raises(TypeError, match=r"not the space"):
                call(T)
        assert weft.wait(T[0:1]).done == {T[0]}


class _Index:
    """A whole number of seconds that has __index__ and no __float__."""

    def __index__(self):
        return 5


def test_timeouts_as_task_result_takes_them(rt):
    """An int too large for a float waits without limit (as Task.result's
    timeout), a negative one is a ValueError, an __index__ number is taken."""
    t = rt.spawn(lambda: 1)
    t.result(timeout=10**400)
    assert weft.wait([t], timeout=10**400).done == {t}
    assert list(weft.as_completed([t], timeout=10**400)) == [t]
    assert weft.wait([t], timeout=_Index()).done == {t}
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        weft.wait([t], timeout=-10**400)
    with pytest.raises(TypeError, match="timeout must be a number"):
        weft.wait([t], timeout=bytearray(b"1"))


@pytest.mark.parametrize("how", ["wait", "as_completed", "dependent"])
@pytest.mark.parametrize("workers", [1, 2])
def test_a_body_waiting_for_a_slot_nobody_spawns_is_cancelled_at_close(how, workers):
    # The body's untimed wait lets the runtime settle, so the close cancels
    # the slot, which ends the wait (it hung the close for ever, silently).
    T = weft.TaskSpace("T")
    got = []

    def body():
        if how == "wait":
            done, not_done = weft.wait([T[5]])
            got.append((len(done), len(not_done)))
        elif how == "as_completed":
            got.append(list(weft.as_completed([T[5], T[6]])))
        else:
            got.append(weft.wait([weft.spawn(int, deps=[T[5]])]))

    with pytest.warns(weft.TaskWarning, match=r"T\[5\]"):
        with weft.Runtime(workers=workers):
            b = weft.spawn(body)
    assert b.result(timeout=0) is None
    assert len(got) == 1
    if how == "wait":
        assert got[0] == (1, 0)
    elif how == "as_completed":
        assert len(got[0]) == 2
