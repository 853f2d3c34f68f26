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
