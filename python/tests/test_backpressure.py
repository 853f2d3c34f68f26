"""Spawning past max_inflight: spawn may block, so it must not hold the GIL."""
import weft


def test_main_thread_producer_bounded():
    out = []
    with weft.Runtime(workers=2, max_inflight=64) as rt:
        for i in range(20000):
            rt.spawn(out.append, i)
        rt.wait_all()
        peak = rt.stats()["inflight_peak"]
    assert len(out) == 20000
    assert peak <= 64 + 8, peak


def test_producer_inside_a_task_bounded():
    out = []

    def producer(n):
        for i in range(n):
            weft.spawn(out.append, i)
        return n

    with weft.Runtime(workers=2, max_inflight=64) as rt:
        assert rt.spawn(producer, 20000).result() == 20000
        rt.wait_all()
    assert sorted(out) == list(range(20000))


def test_one_worker_producer_inside_a_task():
    # The only worker is busy producing: at the bound it must run the
    # queued tasks itself (nested, with the GIL released around spawn).
    def producer(n):
        ts = [weft.spawn(int, i) for i in range(n)]
        return sum(t.result() for t in ts)

    with weft.Runtime(workers=1, max_inflight=32) as rt:
        assert rt.spawn(producer, 3000).result() == sum(range(3000))


def test_chain_with_data_under_backpressure():
    buf = bytearray(8)

    def inc(b):
        b[0] = (b[0] + 1) % 256

    with weft.Runtime(workers=2, max_inflight=16) as rt:
        for _ in range(5000):
            rt.spawn(inc, buf, readwrites=[buf])
        rt.wait_all()
    assert buf[0] == 5000 % 256
