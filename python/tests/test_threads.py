"""Several Python threads using one runtime at once.  With the GIL these
interleave at bytecode boundaries; on a free-threaded build (scripts/python-ft.sh)
they truly run in parallel, which is what they are for."""
import threading

import pytest

import weft
from threads_helper import run_beside_wait_all


def _fail():
    raise ValueError("planned")


def test_exception_reads_race_wait_all(rt):
    # Threads spawn failing tasks with dependents and read .exception() while
    # another thread loops wait_all(), which drops the runtime's failure
    # records: each exception stays readable, nothing crashes.
    def spawner():
        for _ in range(300):
            t = rt.spawn(_fail)
            d = rt.spawn(int, deps=[t])
            assert isinstance(t.exception(), ValueError)
            assert isinstance(d.exception(), weft.CancelledError)

    run_beside_wait_all(rt, [spawner] * 3, ValueError)


def test_cancel_result_and_wait_all_from_many_threads(rt):
    gate = threading.Event()
    blocker = rt.spawn(gate.wait, 60)
    tasks = [rt.spawn(int, i, deps=[blocker]) for i in range(400)]
    cancelled = set()
    lock = threading.Lock()

    def canceller(k):
        for i in range(k, len(tasks), 4):
            if tasks[i].cancel():
                with lock:
                    cancelled.add(i)

    threads = [threading.Thread(target=canceller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gate.set()
    rt.wait_all()
    for i, t in enumerate(tasks):
        if i in cancelled:
            with pytest.raises(weft.CancelledError):
                t.result()
        else:
            assert t.status in ("completed", "cancelled")
            if t.status == "completed":
                assert t.result() == i


def test_data_handles_from_many_threads(rt):
    bufs = [bytearray(8) for _ in range(8)]

    def writer(k):
        for rep in range(50):
            for j, b in enumerate(bufs):
                rt.spawn(lambda b, v: b.__setitem__(0, v), b, (k + rep + j) % 256, writes=[b])

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rt.wait_all()
    for b in bufs:
        rt.unregister(b)
