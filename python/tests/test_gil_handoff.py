"""The workers' GIL hand-off (python/weft/gil.c): what a worker that needs
the GIL spins on while another worker has it."""
import sys
import sysconfig
import threading

import pytest

import weft
from weft import _weft

GIL = getattr(sys, "_is_gil_enabled", lambda: True)()
# The CPython versions whose GIL layout python/weft/gil_state.c knows.
LAYOUT_KNOWN = (3, 11) <= sys.version_info[:2] <= (3, 13) and not sysconfig.get_config_var("Py_GIL_DISABLED")


def test_spin_signal_follows_the_version():
    with weft.Runtime(workers=2) as rt:
        got = _weft._gil_spin_signal(rt)
    if not GIL:
        assert got == "none"
    elif LAYOUT_KNOWN:
        # Fails where a patch release moved the GIL's fields (the check in
        # gil_state.c refused them) rather than falling back unnoticed.
        assert got == "gil"
    else:
        assert got == "claim"


def test_spin_signal_needs_a_runtime():
    with pytest.raises(TypeError, match="weft.Runtime"):
        _weft._gil_spin_signal(object())


@pytest.mark.timeout(120)
def test_no_spin_against_a_body_that_released_the_gil():
    """A body that waits with the GIL released inside it (here in
    threading.Event.wait, not through Weft) does not keep another worker
    spinning: that worker takes the GIL at once.  gil_spin_ns is far longer
    than the test may run, so a worker spinning against the waiting body
    would let its wait time out (False) before the second body runs."""
    started = threading.Event()
    go = threading.Event()
    ran_on = []

    def waiting():
        started.set()
        return go.wait(30)

    def releasing():
        ran_on.append(threading.get_ident())
        go.set()

    with weft.Runtime(workers=2, gil_spin_ns=10**12) as rt:
        if _weft._gil_spin_signal(rt) != "gil":
            pytest.skip(f"the spin follows {_weft._gil_spin_signal(rt)!r} here, not the GIL's state")
        a = rt.spawn(waiting)
        assert started.wait(30)
        rt.spawn(releasing)
        rt.wait_all()
        assert a.result() is True
    # The second body ran on the other worker, not inline on this thread.
    assert ran_on and ran_on[0] != threading.get_ident()


@pytest.mark.timeout(120)
def test_python_bodies_under_contention_all_run():
    """Two workers hand the GIL to each other for bodies that hold it
    (pure Python) and release it (a C busy-wait): every body runs once."""
    out = []

    def body(i):
        x = 0
        for _ in range(2000):
            x += 1
        weft.bench.busy(20)
        out.append(i)

    with weft.Runtime(workers=2) as rt:
        for i in range(400):
            rt.spawn(body, i)
        rt.wait_all()
    assert sorted(out) == list(range(400))


def _affinities(rt, n):
    """The CPUs each of n tasks may run on, the tasks meeting at a barrier
    (so that each runs on its own worker)."""
    import os

    bar = threading.Barrier(n)

    def where():
        bar.wait(30)
        return frozenset(os.sched_getaffinity(0))

    tasks = [rt.spawn(where) for _ in range(n)]
    rt.wait_all()
    return [t.result() for t in tasks]


@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="no os.sched_getaffinity here")
def test_pin_workers_puts_each_worker_on_its_own_cpu(monkeypatch):
    import os

    monkeypatch.delenv("WEFT_PIN_WORKERS", raising=False)
    mine = frozenset(os.sched_getaffinity(0))
    n = min(len(mine), 4)
    with weft.Runtime(workers=n, pin_workers=True) as rt:
        got = _affinities(rt, n)
    assert all(len(s) == 1 for s in got), got
    assert len(set(got)) == n and frozenset().union(*got) <= mine
    for pin in (None, False, "auto"):  # None: "auto", which starts unpinned
        with weft.Runtime(workers=n, pin_workers=pin) as rt:
            assert _affinities(rt, n) == [mine] * n
            assert rt.stats()["autopins"] == 0  # (one task per worker: too few samples to pin)
    monkeypatch.setenv("WEFT_PIN_WORKERS", "1")
    with weft.Runtime(workers=n) as rt:  # the environment's, when pin_workers is not given
        assert all(len(s) == 1 for s in _affinities(rt, n))
    with weft.Runtime(workers=n, pin_workers=False) as rt:  # the keyword's over it
        assert _affinities(rt, n) == [mine] * n
    with weft.Runtime(workers=n, pin_workers="auto") as rt:  # likewise
        assert _affinities(rt, n) == [mine] * n
    monkeypatch.setenv("WEFT_PIN_WORKERS", "auto")
    with weft.Runtime(workers=n) as rt:
        assert _affinities(rt, n) == [mine] * n


def test_pin_workers_takes_a_bool_or_auto():
    with pytest.raises(TypeError, match=r"pin_workers= expects True, False, 'auto' or None, got 'int'"):
        weft.Runtime(workers=1, pin_workers=1)
    with pytest.raises(ValueError, match=r"pin_workers= must be True, False, 'auto' or None, not 'always'"):
        weft.Runtime(workers=1, pin_workers="always")
    with weft.Runtime(workers=1, pin_workers="auto") as rt:
        assert rt.stats()["autopins"] == 0
