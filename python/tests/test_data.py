import array
import threading
import time

import pytest

import weft


def test_body_receives_the_object(rt):
    buf = bytearray(8)
    d = rt.data(buf)
    assert d.obj is buf and d.nbytes == 8 and d.registered and not d.readonly
    assert rt.data(buf) is d  # one handle per object
    t = weft.spawn(lambda x: x, d, writes=[d])
    assert t.result() is buf
    t = weft.spawn(lambda x: x, buf, reads=[buf])
    assert t.result() is buf
    assert "8 bytes" in repr(d)


def test_a_list_inside_the_accesses_is_refused_with_what_to_write(rt):
    # reads=[blocks] for reads=blocks: the message says to give the list itself.
    blocks = [bytearray(8), bytearray(8)]
    with pytest.raises(TypeError, match=r"reads\[0\]: .*got 'list' \(.*give xs itself or \[\*xs, y\], not \[xs\]"):
        rt.spawn(len, blocks, reads=[blocks])
    assert rt.spawn(len, blocks, reads=blocks).result() == 2


def test_writers_in_spawn_order(rt):
    buf = bytearray(1)
    log = []

    def step(b, i):
        time.sleep(0.001 * ((i * 7) % 3))
        assert b[0] == i
        log.append(i)
        b[0] = i + 1

    for i in range(100):
        weft.spawn(step, buf, i, readwrites=[buf])
    weft.wait_all()
    assert buf[0] == 100 and log == list(range(100))


def test_readers_concurrent_writer_after(rt):
    buf = bytearray(b"\x01")
    # Each reader waits until both are inside: that returns only if the two
    # readers run at the same time (one after the other, it would time out).
    both_inside = threading.Barrier(2)

    def read(b):
        both_inside.wait(timeout=60)
        return b[0]

    readers = [weft.spawn(read, buf, reads=[buf]) for _ in range(2)]

    def write(b):
        b[0] = 2

    w = weft.spawn(write, buf, writes=[buf])
    after = weft.spawn(lambda b: b[0], buf, reads=[buf])
    assert [r.result() for r in readers] == [1, 1]
    assert after.result() == 2 and w.status == "completed"


def test_commuting_updates_exclusive(rt):
    acc = array.array("q", [0])
    inside = []

    def add(a, k):
        inside.append(1)
        assert len(inside) == 1  # never two at once
        time.sleep(0.0005)
        a[0] += k
        inside.pop()

    for k in range(1, 41):
        weft.spawn(add, acc, k, commutes=[acc])
    total = weft.spawn(lambda a: a[0], acc, reads=[acc])
    assert total.result() == sum(range(1, 41))


def test_failure_flows_with_data(rt):
    buf = bytearray(1)

    def bad(b):
        raise RuntimeError("writer failed")

    weft.spawn(bad, buf, readwrites=[buf], name="writer")
    reader = weft.spawn(lambda b: b[0], buf, reads=[buf])
    with pytest.raises(weft.CancelledError, match="writer"):
        reader.result()
    # An overwrite makes the data valid again.
    weft.spawn(lambda b: b.__setitem__(0, 9), buf, writes=[buf])
    assert weft.spawn(lambda b: b[0], buf, reads=[buf]).result() == 9
    with pytest.raises(RuntimeError):
        weft.wait_all()


def test_buffer_pinned_while_registered(rt):
    buf = bytearray(4)
    d = weft.data(buf)
    with pytest.raises(BufferError):
        buf.extend(b"more")  # exported: cannot be resized
    d.unregister()
    assert not d.registered
    buf.extend(b"more")  # released
    with pytest.raises(ValueError, match="unregistered"):
        weft.spawn(print, reads=[d])
    d.unregister()  # idempotent


def test_unregister_waits_for_users(rt):
    buf = bytearray(1)
    with rt.data(buf) as d:
        t = weft.spawn(lambda b: (time.sleep(0.1), b.__setitem__(0, 7)), buf, writes=[d])
    assert t.done() and buf[0] == 7
    with pytest.raises(ValueError, match="not registered"):
        rt.unregister(bytearray(1))


def test_unregister_own_data_from_task(rt):
    buf = bytearray(1)
    d = rt.data(buf)

    def body(b):
        d.unregister()

    with pytest.raises(RuntimeError, match="itself accesses"):
        weft.spawn(body, buf, reads=[d]).result()


def test_zero_length_and_readonly_buffers(rt):
    empty = bytearray()
    assert weft.spawn(len, empty, readwrites=[empty]).result() == 0
    ro = b"read only"
    assert weft.spawn(len, ro, reads=[ro]).result() == 9
    assert rt.data(ro).readonly


def test_close_releases_buffers():
    buf = bytearray(2)
    with weft.Runtime(workers=1) as r:
        d = r.data(buf)
    assert not d.registered
    buf.extend(b"x")


def test_numpy_arrays(rt):
    np = pytest.importorskip("numpy")
    a = np.zeros(1000)

    def fill(x, v):
        x[:] = v

    def total(x):
        return float(x.sum())

    weft.spawn(fill, a, 1.0, writes=[a])
    s1 = weft.spawn(total, a, reads=[a])
    weft.spawn(fill, a, 2.0, writes=[a])
    s2 = weft.spawn(total, a, reads=[a])
    assert (s1.result(), s2.result()) == (1000.0, 2000.0)
    # Non-contiguous views are refused with a clear message.
    with pytest.raises(ValueError, match="contiguous"):
        weft.spawn(total, a[::2], reads=[a[::2]])


def test_wont_use_hint():
    """Data.wont_use(): a hint that never blocks nor changes the value; refused
    once the data is unregistered.  (Which copy a GPU evicts first is tested
    in C, tests/test_replicas.c.)"""
    a = bytearray(b"abcd")
    with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
        d = rt.data(a)
        d.wont_use()
        assert rt.spawn(lambda x: bytes(x), a, reads=[a]).result(timeout=30) == b"abcd"
        d.wont_use()
        d.unregister()
        with pytest.raises(ValueError, match="unregistered"):
            d.wont_use()
