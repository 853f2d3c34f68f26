"""weft.unordered (StarPU's sequential consistency turned off): accesses
that the data does not order among themselves — shown by events, not by
timing — each still seeing a whole value, followed by the next ordinary
access; failure cancels readers only after a member that wrote."""
import threading
import time

import numpy as np
import pytest

import weft

pytestmark = pytest.mark.timeout(60)


def test_not_ordered_among_themselves():
    gate = threading.Event()
    with weft.Runtime(workers=2) as rt:
        x = np.zeros(1)
        hold = rt.spawn(gate.wait, 30)
        a = rt.spawn(lambda v: v.__setitem__(0, v[0] + 1), x, deps=[hold], readwrites=[weft.unordered(x)])
        b = rt.spawn(lambda v: v.__setitem__(0, v[0] + 10), x, readwrites=weft.unordered(x))
        seen = []
        r = rt.spawn(lambda v: seen.append(float(v[0])), x, reads=[x])
        # b does not wait for a, spawned before it on the same data (a waits
        # for the gate); the plain reader waits for both.
        b.wait(timeout=20)
        assert not a.done() and not r.done()
        gate.set()
        r.wait(timeout=20)
        assert seen == [11.0]


def test_whole_values_under_contention():
    n = 200
    with weft.Runtime(workers=2) as rt:
        x = np.zeros(1)

        def bump(v):
            old = v[0]
            time.sleep(0)  # lets the other worker in, were the tasks not excluded
            v[0] = old + 1

        for i in range(n):
            if i % 5 == 4:
                rt.spawn(lambda v: None, x, reads=[weft.unordered(x)])
            else:
                rt.spawn(bump, x, readwrites=[weft.unordered(x)])
        rt.wait_all()
        assert x[0] == n - n // 5


def test_failure_flows_from_writers_only():
    with weft.Runtime(workers=2) as rt:
        x = np.ones(1)

        def boom(v):
            raise ValueError("member failed")

        f = rt.spawn(boom, x, reads=[weft.unordered(x)])
        r = rt.spawn(lambda v: float(v[0]), x, reads=[x])
        with pytest.raises(ValueError):
            f.result(timeout=20)
        assert r.result(timeout=20) == 1.0

        f = rt.spawn(boom, x, writes=[weft.unordered(x)])
        r = rt.spawn(lambda v: float(v[0]), x, reads=[x])
        with pytest.raises(ValueError):
            f.result(timeout=20)
        with pytest.raises(weft.CancelledError):
            r.result(timeout=20)


def test_refused_with_a_message():
    with weft.Runtime(workers=1) as rt:
        x = np.zeros(4)
        with pytest.raises(TypeError, match="wrap the buffer once"):
            rt.spawn(lambda v: None, x, reads=[weft.unordered(weft.unordered(x))])
        with pytest.raises(TypeError, match="unordered"):  # acquire takes the buffer itself
            rt.acquire(weft.unordered(x), "rw")
