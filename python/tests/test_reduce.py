"""Reductions from Python: spawn(reduces=[(buf, weft.SUM)]) with the element
type taken from the buffer.  Each reducing task folds its contributions
into a private copy (ctx.array(i), identity-filled) and the copies are
combined into the buffer in spawn order: checked bit for bit against NumPy
doing the same in that order, for each operator and type, on the host and
on virtual GPUs; and misuse refused clearly."""
import array
import zlib

import pytest

import weft

np = pytest.importorskip("numpy")
from reduce_helper import identity  # noqa: E402

TYPES = [np.int32, np.int64, np.uint32, np.uint64, np.float32, np.float64]
OPS = {weft.SUM: np.add, weft.MIN: np.minimum, weft.MAX: np.maximum}


def warm_numpy():
    """Every NumPy operation the bodies below run, once on this thread
    first: NumPy fills its ufunc-dispatch cache on first use of a type
    combination under its own lock, which TSan cannot see (NumPy is not
    instrumented), so a body looking an entry up while the main thread
    adds one reads to TSan as a race."""
    for dt in TYPES:
        x = np.ones(2, dtype=dt)
        for fn in OPS.values():
            fn(x, x, out=x)
            fn(x, x)
    x = np.zeros(3, dtype=np.int64)
    x[:] += 1
    np.maximum(x, np.array([1, -1, 0]), out=x)
    y = np.zeros(4)
    y += 1.5
    y[0] += 1.5
    z = np.zeros(2, dtype=np.float32)
    np.minimum(z, np.asarray(np.zeros(2, dtype=np.int32), dtype=np.float32), out=z)
    np.all(z == np.inf)
    w = np.zeros(2, dtype=np.int32)
    w[:] += 1


warm_numpy()


def values(rng, dt, shape):
    if np.dtype(dt).kind == "f":
        return (rng.standard_normal(shape) * 1e3).astype(dt)
    info = np.iinfo(dt)  # the whole range: integer sums wrap around
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def same_bits(x, y):
    x, y = np.asarray(x), np.asarray(y)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def fold_body(terms, fn, device_data, seen):
    """Fold each term into the task's private copy (on its GPU's stream for
    a device replica)."""
    ctx = weft.context()
    v = ctx.view(0)
    seen.append((v.device, v.readonly))

    def fold():
        acc = np.asarray(v)
        for t in terms:
            fn(acc, t, out=acc)

    if v.on_host:
        fold()
    else:
        ctx.queue(fold, reads=[v], writes=[v])


@pytest.mark.parametrize("device_data", [False, True])
@pytest.mark.parametrize("op", list(OPS), ids=["sum", "min", "max"])
@pytest.mark.parametrize("dt", TYPES, ids=lambda t: np.dtype(t).name)
def test_each_operator_and_type_in_spawn_order(dt, op, device_data):
    fn = OPS[op]
    rng = np.random.default_rng(zlib.crc32(f"{np.dtype(dt).name} {op} {device_data}".encode()))
    a = values(rng, dt, 33)
    want = a.copy()
    where = [weft.gpu(0), weft.gpu(1), weft.cpu, None]
    seen = []
    terms = [[values(rng, dt, 33) for _ in range(1 + k % 3)] for k in range(40)]
    for ts in terms:  # the oracle, first (see warm_numpy)
        part = np.full(33, identity(op, dt), dtype=dt)  # the task's copy, then its terms
        for t in ts:
            part = fn(part, t)
        want = fn(want, part)
    with weft.Runtime(workers=2, devices="cpu,vgpu:2", vgpu_memory=1 << 20) as rt:
        for k in range(40):
            rt.spawn(fold_body, terms[k], fn, device_data, seen, reduces=[(a, op)], placement=where[k % 4],
                     device_data=device_data)
        got = rt.spawn(lambda: a.copy(), reads=[a]).result()  # after the group: combined
    assert same_bits(got, want)
    assert same_bits(a, want)
    assert len(seen) == 40 and not any(ro for _, ro in seen)
    assert {d for d, _ in seen} == ({"cpu", "vgpu:0", "vgpu:1"} if device_data else {"cpu"})


def test_float_sums_follow_spawn_order_not_completion_order():
    """Terms of very different magnitudes: the result depends on the order
    of the additions; later tasks finish first here, and the combination is
    still in spawn order."""
    a = np.zeros(4, dtype=np.float64)
    terms = [1e16, 1.0, -1e16, 1.0, 3.5, 1e-3]
    want = np.zeros(4)
    for t in terms:
        want = want + (-0.0 + t)
    with weft.Runtime(workers=2) as rt:
        for k, t in enumerate(terms):
            def body(t=t, delay=(len(terms) - k) * 2000):
                weft.bench.busy(delay)
                acc = weft.context().array(a)
                acc += t

            rt.spawn(body, reduces=(a, weft.SUM))  # one pair, without a list
        rt.wait_all()
    assert same_bits(a, want)


def test_groups_writers_and_readers():
    a = np.array([5, -3, 7], dtype=np.int64)
    log = []
    with weft.Runtime(workers=2) as rt:
        def add(k):
            weft.context().array(0)[:] += k

        def mx(k):
            x = weft.context().array(0)
            np.maximum(x, np.array([k, -k, 0]), out=x)

        for k in range(1, 6):
            rt.spawn(add, k, reduces=[(a, weft.SUM)])
        rt.spawn(lambda: log.append(a.tolist()), reads=[a])  # the sum group, combined
        for k in range(1, 4):
            rt.spawn(mx, 10 * k, reduces=[(a, "max")])
        rt.spawn(lambda: log.append(a.tolist()), reads=[a])
        rt.spawn(lambda: a.__setitem__(slice(None), 1), writes=[a])
        rt.spawn(add, 2, reduces=[(a, weft.SUM)])
        rt.wait_all()
    assert log == [[20, 12, 22], [30, 12, 22]]
    assert a.tolist() == [3, 3, 3]


def test_reduction_views_are_private_copies_filled_with_the_identity():
    a = np.full(6, 9.0, dtype=np.float32)
    b = np.arange(6, dtype=np.int32)
    out = np.zeros(6, dtype=np.float32)
    with weft.Runtime(workers=2) as rt:
        def body():
            ctx = weft.context()
            vb, vo, va = ctx.views  # reads, writes, then reductions
            assert va is not None and ctx.view(a).ptr == va.ptr == weft._weft._ctx_data(2)
            assert va.ptr != a.ctypes.data  # not the buffer: the task's own copy
            assert not va.readonly and va.typestr == "<f4" and va.shape == (6,)
            x = ctx.array(a)
            assert np.all(x == np.inf)  # the identity of min
            np.minimum(x, np.asarray(vb, dtype=np.float32), out=x)
            ctx.array(1)[:] = 1.0

        rt.spawn(body, reads=[b], writes=[out], reduces=[(a, weft.MIN)]).result()
        rt.wait_all()
    assert a.tolist() == [0, 1, 2, 3, 4, 5]


def test_array_module_and_data_handles():
    a = array.array("q", [1, 2, 3])
    with weft.Runtime(workers=2) as rt:
        d = rt.data(a)

        def body():
            x = weft.context().array(0)
            x += 10

        for _ in range(3):
            rt.spawn(body, reduces=[(d, weft.SUM)])
        rt.wait_all()
    assert a.tolist() == [31, 32, 33]


def test_a_failed_reducer_contributes_nothing():
    a = np.zeros(2, dtype=np.int32)
    with weft.Runtime(workers=2) as rt:
        def body(k):
            weft.context().array(0)[:] += k
            if k == 2:
                raise ValueError("no")

        for k in (1, 2, 4):
            rt.spawn(body, k, reduces=[(a, weft.SUM)])
        with pytest.raises(ValueError, match="no"):
            rt.wait_all()
        rt.unregister(a)
    assert a.tolist() == [5, 5]


# ---- misuse ---------------------------------------------------------------


@pytest.mark.parametrize("obj, match", [
    (np.zeros(4, dtype=np.int16), r"'<i2'"),
    (np.zeros(4, dtype=np.float16), r"'<f2'"),
    (np.zeros(4, dtype=np.complex128), r"'<c16'"),
    (np.zeros(4, dtype=">f8"), r"'>f8'"),
    (bytearray(8), r"'\|u1'"),
    (np.zeros(2, dtype=[("x", "i4"), ("y", "f4")]), "struct format"),
])
def test_element_types_without_a_reduction_are_refused(obj, match):
    with weft.Runtime(workers=1) as rt:
        with pytest.raises(TypeError, match=r"reduces\[0\]: a reduction needs elements of type int32, int64, "
                                            r"uint32, uint64, float32 or float64.*" + match):
            rt.spawn(lambda: None, reduces=[(obj, weft.SUM)])


def test_bad_reduce_arguments():
    a = np.zeros(4)
    with weft.Runtime(workers=1) as rt:
        with pytest.raises(ValueError, match="unknown reduction operator 'avg'"):
            rt.spawn(lambda: None, reduces=[(a, "avg")])
        with pytest.raises(ValueError, match="unknown reduction operator 7"):
            rt.spawn(lambda: None, reduces=[(a, 7)])
        with pytest.raises(TypeError, match=r"reduces\[1\]: expected a \(buffer, op\) pair"):
            rt.spawn(lambda: None, reduces=[(a, weft.SUM), a])
        with pytest.raises(TypeError, match="reduces= expects a list"):
            rt.spawn(lambda: None, reduces=5)
        with pytest.raises(TypeError, match="buffer protocol"):
            rt.spawn(lambda: None, reduces=[(object(), weft.SUM)])
        ro = np.zeros(4)
        ro.setflags(write=False)
        with pytest.raises(ValueError, match="read-only"):
            rt.spawn(lambda: None, reduces=[(ro, weft.SUM)])
        with pytest.raises(ValueError, match="reduction"):  # the core: the same data named twice
            rt.spawn(lambda: None, reads=[a], reduces=[(a, weft.SUM)])
        rt.spawn(lambda: None, reduces=[(a, weft.SUM)]).result()  # still usable


def test_reduction_of_memory_with_overlapping_ranges_is_refused():
    a = np.zeros(16)
    with weft.Runtime(workers=1) as rt:
        rt.spawn(lambda: None, reads=[a[4:8]]).result()
        with pytest.raises(ValueError, match="a reduction needs memory registered as one range"):
            rt.spawn(lambda: None, reduces=[(a, weft.SUM)])
        rt.unregister(a[4:8])
        rt.spawn(lambda: weft.context().array(0).__iadd__(1.0), reduces=[(a, weft.SUM)]).result()
        # a view of part of it registered after the reduction reads the combined value
        assert rt.spawn(lambda: a[4:8].tolist(), reads=[a[4:8]]).result() == [1.0] * 4
