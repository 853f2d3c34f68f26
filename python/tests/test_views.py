"""Views of one array: dependencies follow the memory a buffer
covers, not the Python object it comes from.

Every test uses a NumPy array when NumPy is importable, else a memoryview of
a bytearray (slicing either gives a new view object each time).  No test
asserts on timing: races are made likely with short sleeps, and concurrency
is shown with a barrier that only two tasks running at once can pass.
"""
import random
import threading
import time

import pytest

import weft

try:
    import numpy as np
except ImportError:  # pragma: no cover - the memoryview path
    np = None


def make(n):
    """An array of n small non-negative ints, zeroed."""
    if np is not None:
        return np.zeros(n, dtype=np.int64)
    return memoryview(bytearray(n))


def values(x):
    return [int(v) for v in x]


def fill(x, v):
    for i in range(len(x)):
        x[i] = v


def slow_fill(x, v):
    time.sleep(0.02)  # a reader that is not ordered after us would see the old values
    fill(x, v)


def test_reader_of_a_new_view_follows_the_writer(rt):
    big = make(8)
    rt.spawn(slow_fill, big[:4], 5, writes=[big[:4]])
    # Another big[:4]: a different object over the same memory.
    assert rt.spawn(values, big[:4], reads=[big[:4]]).result() == [5] * 4


def test_overlapping_reader_follows_the_writer(rt):
    big = make(8)
    rt.spawn(slow_fill, big[:4], 5, writes=[big[:4]])
    assert rt.spawn(values, big[2:6], reads=[big[2:6]]).result() == [5, 5, 0, 0]


def test_overlapping_writer_follows_the_reader(rt):
    big = make(8)
    fill(big, 1)

    def slow_read(x):
        time.sleep(0.02)
        return values(x)

    r = rt.spawn(slow_read, big[2:6], reads=[big[2:6]])
    rt.spawn(fill, big[:4], 9, writes=[big[:4]])
    w = rt.spawn(fill, big, 7, writes=[big])
    assert r.result() == [1, 1, 1, 1]
    w.result()
    assert values(big) == [7] * 8


@pytest.mark.parametrize("whole", ["before", "after", "never"])
def test_disjoint_views_are_independent_tiles(rt, whole):
    big = make(8)
    if whole == "before":
        rt.spawn(fill, big, 1, writes=[big])  # the whole array, used before the tiles
    inside = threading.Barrier(2, timeout=5)

    def tile(x):
        inside.wait()  # passes only if both tiles run at the same time
        for i in range(len(x)):
            x[i] += 1

    tiles = [rt.spawn(tile, big[i:i + 4], readwrites=[big[i:i + 4]]) for i in (0, 4)]
    if whole == "after":
        # Registered after the tiles: it is ordered after both of them.
        assert rt.spawn(values, big, reads=[big]).result() == [1] * 8
    for t in tiles:
        t.result()
    base = 2 if whole == "before" else 1
    assert rt.spawn(values, big, reads=[big]).result() == [base] * 8
    # Tiles again, once the whole array is registered in every case.
    rt.spawn(fill, big, 0, writes=[big])
    inside.reset()
    tiles = [rt.spawn(tile, big[i:i + 4], readwrites=[big[i:i + 4]]) for i in (0, 4)]
    for t in tiles:
        t.result()
    assert rt.spawn(values, big, reads=[big]).result() == [1] * 8


def test_same_memory_is_one_data(rt):
    big = make(8)
    first = big[:4]
    d = rt.data(first)
    assert rt.data(big[:4]) is d and d.obj is first
    assert rt.data(memoryview(big)[:4]) is d
    whole = rt.data(big)
    assert whole is not d and rt.data(memoryview(big)) is whole
    if np is not None:
        assert rt.data(big.reshape(2, 4)) is whole
    # Ordered through either object.
    rt.spawn(slow_fill, big, 3, writes=[memoryview(big)])
    assert rt.spawn(values, big, reads=[whole]).result() == [3] * 8


def test_read_only_view_of_writable_memory(rt):
    buf = bytearray(4)
    ro = memoryview(buf).toreadonly()
    d = rt.data(ro)
    assert d.readonly
    # The writer names the writable object: same memory, same Data, allowed.
    rt.spawn(slow_fill, buf, 4, writes=[buf])
    assert rt.data(buf) is d
    assert rt.spawn(values, ro, reads=[ro]).result() == [4] * 4
    with pytest.raises(ValueError, match="read-only"):
        rt.spawn(print, writes=[memoryview(buf).toreadonly()])
    with pytest.raises(ValueError, match="read-only"):
        rt.spawn(print, writes=[d])


def run_random_ops(rt, seed, nops=150, size=8):
    """Random reads and writes of overlapping ranges, checked against the
    same operations run one after another in spawn order."""
    rng = random.Random(seed)
    ranges = [(0, 4), (2, 6), (0, 8), (4, 8), (6, 8), (3, 5), (0, 2), (1, 7)]
    big = make(size)
    model = [0] * size
    keep = {}  # some ranges always named through the same object
    checks = []

    def read(x):
        time.sleep(0.0005)
        return values(x)

    def inc(x):
        v = values(x)
        time.sleep(0.0005)
        for i, e in enumerate(v):
            x[i] = e + 1

    def put(x, k):
        time.sleep(0.0005)
        fill(x, k)

    for op in range(nops):
        a, b = rng.choice(ranges)
        if rng.random() < 0.3:
            view = keep.setdefault((a, b), big[a:b])
        else:
            view = big[a:b]
        kind = rng.choice(["r", "r", "rw", "w", "c"])
        if kind == "r":
            checks.append((rt.spawn(read, view, reads=[view]), model[a:b]))
        elif kind == "w":
            k = op % 100 + 1
            rt.spawn(put, view, k, writes=[view])
            model[a:b] = [k] * (b - a)
        else:
            kw = {"readwrites": [view]} if kind == "rw" else {"commutes": [view]}
            rt.spawn(inc, view, **kw)
            model[a:b] = [v + 1 for v in model[a:b]]
    for t, want in checks:
        assert t.result() == want
    assert rt.spawn(read, big, reads=[big]).result() == model


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_overlapping_accesses_keep_spawn_order(rt, seed):
    run_random_ops(rt, seed)


def test_failure_flows_through_overlapping_views(rt):
    big = make(8)
    rt.data(big[:4])  # registered first: tasks on the whole array name it too

    def bad(x):
        raise RuntimeError("writer failed")

    rt.spawn(bad, big, readwrites=[big], name="bad-writer")
    r1 = rt.spawn(values, big[:4], reads=[big[:4]])
    r2 = rt.spawn(values, big[2:6], reads=[big[2:6]])  # registered after the failure
    for r in (r1, r2):
        with pytest.raises(weft.CancelledError, match="bad-writer"):
            r.result()
    # Overwriting a part makes that part valid again.
    rt.spawn(fill, big[4:8], 3, writes=[big[4:8]])
    assert rt.spawn(values, big[4:8], reads=[big[4:8]]).result() == [3] * 4
    with pytest.raises(RuntimeError, match="writer failed"):
        rt.wait_all()


def test_unregister_a_view_waits_for_overlapping_users(rt):
    big = make(8)
    with rt.data(big[:4]) as d:
        w = rt.spawn(slow_fill, big[:4], 7, writes=[big[:4]])
        u = rt.spawn(values, big, reads=[big])  # names the part too
    # Leaving the block unregistered the part: it waited for both.
    assert w.done() and u.done() and not d.registered
    assert u.result() == [7] * 4 + [0] * 4
    # The whole array lives on; the part registers again, ordered as before.
    rt.spawn(slow_fill, big[:4], 8, writes=[big[:4]])
    assert rt.spawn(values, big, reads=[big]).result() == [8] * 4 + [0] * 4
    rt.unregister(big[:8])  # a new view of the whole array's memory
    with pytest.raises(ValueError, match="not registered"):
        rt.unregister(big[:8])
    rt.unregister(big[:4])


def test_unregister_the_whole_array_keeps_its_parts(rt):
    big = make(8)
    rt.spawn(slow_fill, big, 7, writes=[big])
    r = rt.spawn(values, big[:4], reads=[big[:4]])
    rt.unregister(big)
    assert r.done() and r.result() == [7] * 4
    rt.spawn(slow_fill, big[:4], 2, writes=[big[:4]])
    assert rt.spawn(values, big[2:6], reads=[big[2:6]]).result() == [2, 2, 7, 7]


def test_memory_being_unregistered_is_refused(rt):
    big = make(8)
    go = threading.Event()
    d = rt.data(big[:4])
    user = rt.spawn(lambda x: go.wait(30), big[:4], reads=[d])
    th = threading.Thread(target=d.unregister)
    th.start()
    try:
        deadline = time.monotonic() + 30
        while "being unregistered" not in repr(d):
            assert time.monotonic() < deadline, repr(d)
            time.sleep(0.001)
        with pytest.raises(ValueError, match="being unregistered"):
            rt.spawn(print, reads=[big[:4]])
        # Memory overlapping it may be registered: the core orders its
        # tasks after the closing range's (the unregister's own no-op
        # writer, which waits for `user`), so it runs once `go` is set.
        over = rt.spawn(values, big[2:6], reads=[big[2:6]])
        # Memory that does not overlap it is fine.
        assert rt.spawn(values, big[4:8], reads=[big[4:8]]).result() == [0] * 4
    finally:
        go.set()
        th.join()
    assert user.result() is True and not d.registered
    assert over.result() == [0] * 4
    assert rt.spawn(values, big[2:6], reads=[big[2:6]]).result() == [0] * 4


def test_unregister_from_a_task_using_overlapping_memory(rt):
    big = make(8)
    part = rt.data(big[:4])

    def body(x):
        part.unregister()  # the task reads the whole array, so the part too

    with pytest.raises(RuntimeError, match="itself accesses"):
        rt.spawn(body, big, reads=[big]).result()
    assert part.registered
    rt.spawn(fill, big[:4], 1, writes=[part])
    assert rt.spawn(values, big, reads=[big]).result() == [1] * 4 + [0] * 4


def test_threads_spawning_on_overlapping_views_while_ranges_come_and_go():
    # A small max_inflight makes spawns from threads block (letting the other
    # threads register and unregister ranges meanwhile).
    size, nthreads, nops = 16, 3, 60
    with weft.Runtime(workers=2, max_inflight=8) as rt:
        big = make(size)
        stop = threading.Event()
        errors = []

        def inc(x):
            v = values(x)
            time.sleep(0)
            for i, e in enumerate(v):
                x[i] = e + 1

        def incrementer(seed):
            rng = random.Random(seed)
            try:
                for _ in range(nops):
                    a = rng.randrange(size)
                    b = rng.randrange(a + 1, min(size, a + 8) + 1)
                    while True:
                        try:
                            rt.spawn(inc, big[a:b], readwrites=[big[a:b]])
                            break
                        except ValueError as e:  # the range, or one it overlaps, was being unregistered
                            assert "being unregistered" in str(e), e
                            time.sleep(0.001)
                    with lock:
                        for i in range(a, b):
                            counts[i] += 1
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        def churner():
            rng = random.Random(99)
            try:
                while not stop.is_set():
                    a = rng.randrange(size)
                    b = rng.randrange(a + 1, min(size, a + 8) + 1)
                    try:
                        d = rt.data(big[a:b])
                    except ValueError as e:
                        assert "being unregistered" in str(e), e
                        continue
                    d.unregister()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        counts = [0] * size
        lock = threading.Lock()
        workers = [threading.Thread(target=incrementer, args=(s,)) for s in range(nthreads)]
        ch = threading.Thread(target=churner)
        ch.start()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        stop.set()
        ch.join()
        assert not errors, errors
        rt.wait_all()
        assert values(big) == counts


def test_threads_registering_the_same_memory_get_one_data():
    # Threads that register the same ranges at the same time (each through
    # objects of its own) all get one Data per range: entering a range is
    # atomic with every other look-up of the registry (no look-up reads the
    # ranges half-way through another thread's entry, which the free-threaded
    # TSan build would report).
    size, nthreads = 32, 4
    ranges = [(a, b) for a in range(0, size, 4) for b in (a + 2, a + 4, min(size, a + 12))]
    ranges += [(0, size), (1, size - 1)]
    with weft.Runtime(workers=2) as rt:
        big = make(size)
        start = threading.Barrier(nthreads, timeout=30)
        got = [dict() for _ in range(nthreads)]
        errors = []

        def register(k):
            order = ranges[:]
            random.Random(k).shuffle(order)
            try:
                start.wait()
                for i, (a, b) in enumerate(order):
                    if i % 3 == 0:
                        rt.spawn(values, big[a:b], reads=[big[a:b]])
                    got[k][a, b] = rt.data(big[a:b])
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=register, args=(k,)) for k in range(nthreads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for r in ranges:
            ds = {id(g[r]) for g in got}
            assert len(ds) == 1, (r, ds)
            assert rt.data(big[r[0]:r[1]]) is got[0][r]
        # Still ordered as one registry: a writer of the whole, then readers.
        rt.spawn(slow_fill, big, 2, writes=[big])
        readers = [(rt.spawn(values, big[a:b], reads=[big[a:b]]), b - a) for a, b in ranges]
        for t, n in readers:
            assert t.result() == [2] * n
