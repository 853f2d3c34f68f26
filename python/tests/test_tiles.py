"""Tiles from Python (Data.partition / Runtime.partition): an array split
into a grid of tiles with halos, each a weft.Data named in spawns.  Their
geometry; their views (a window into the array on the host, the packed
replica on a virtual GPU); Jacobi sweeps over tiles, host-only and with
device_data=True on cpu,vgpu:4, equal bit for bit to NumPy's sequential
run, with whole-array phases in between; reductions of tiles (a packed
private copy of the interior, combined in spawn order); and misuse refused
clearly."""
import ctypes

import pytest

import weft

np = pytest.importorskip("numpy")
from reduce_helper import identity as red_identity  # noqa: E402


def vgpus(n=4, **kw):
    return weft.Runtime(workers=2, devices=f"cpu,vgpu:{n}", vgpu_memory=16 << 20, **kw)


# ---- geometry -------------------------------------------------------------


def test_geometry_2d():
    a = np.zeros((10, 12))
    with weft.Runtime(workers=1) as rt:
        d = rt.data(a)
        assert d.tiles is None and d.grid is None and d.parent is None and d.span is None
        tiles = d.partition((2, 3), halo=1)
        assert [len(row) for row in tiles] == [3, 3]
        assert d.grid == (2, 3) and d.tiles == tuple(tiles[0] + tiles[1])
        t0, t4 = tiles[0][0], tiles[1][1]  # as tests/test_tiles.c's geometry
        assert t0.span == (0, 0, 6, 5) and t0.interior == (0, 0, 5, 4) and t0.index == (0, 0)
        assert t4.span == (4, 3, 6, 6) and t4.interior == (5, 4, 5, 4) and t4.index == (1, 1)
        assert t4.window == (slice(4, 10), slice(3, 9)) and t4.inner == (slice(1, 6), slice(1, 5))
        assert t4.halo == 1 and t4.grid == (2, 3) and t4.parent is d and t4.tiles is None
        assert isinstance(t4, weft.Data) and t4.obj is a and t4.registered
        assert t4.nbytes == 6 * 6 * 8
        assert "tile 4" in repr(t4) and "rows 4-9, cols 3-8" in repr(t4)
        # the interiors cover the array once
        cover = np.zeros(a.shape, dtype=int)
        for t in d.tiles:
            r0, c0, nr, nc = t.interior
            cover[r0:r0 + nr, c0:c0 + nc] += 1
        assert (cover == 1).all()


def test_geometry_1d_and_padded():
    x = np.zeros(100, dtype=np.int32)
    p = np.zeros((6, 10), dtype=np.float32)
    with weft.Runtime(workers=1) as rt:
        tiles = rt.partition(x, 4, halo=2)  # an int grid: a flat list
        assert len(tiles) == 4 and all(isinstance(t, weft.Data) for t in tiles)
        assert tiles[1].span == (0, 23, 1, 29) and tiles[1].interior == (0, 25, 1, 25)
        assert tiles[1].window == (slice(23, 52),) and tiles[1].inner == (slice(2, 27),)
        assert tiles[0].index == (0, 0) and tiles[3].index == (0, 3)
        tp = rt.data(p).partition((3, 1), cols=7)  # the last 3 columns of each row are padding
        assert [row[0].span for row in tp] == [(0, 0, 2, 7), (2, 0, 2, 7), (4, 0, 2, 7)]


# ---- views ----------------------------------------------------------------


def test_host_views_are_windows_into_the_array():
    a = np.arange(10 * 16, dtype=np.float64).reshape(10, 16)
    with weft.Runtime(workers=2) as rt:
        tiles = rt.data(a).partition((2, 2), halo=2, cols=14)  # padded: 2 columns never tiled
        t = tiles[1][0]

        def body(t, w):
            ctx = weft.context()
            v, vw = ctx.view(t), ctx.view(w)
            assert ctx.view(0).ptr == v.ptr and ctx.view(1).ptr == vw.ptr  # by object or index
            x, y = ctx.array(t), ctx.array(w)
            r0, c0, nr, nc = t.span
            assert v.on_host and v.readonly and not vw.readonly
            assert v.shape == (nr, nc) and v.strides == (16 * 8, 8) and v.typestr == "<f8"
            assert v.ptr == weft._weft._ctx_data(0) == a.ctypes.data + r0 * 16 * 8 + c0 * 8
            assert x.ctypes.data == v.ptr and x.strides == (128, 8) and not x.flags.writeable
            assert np.array_equal(x, a[t.window])
            wr0, wc0, _, _ = w.span
            assert y.ctypes.data == a.ctypes.data + wr0 * 128 + wc0 * 8 and y.shape == tuple(w.span[2:])
            y[w.inner] = -1.0  # a writer writes its interior, through the window
            return v.shape

        assert rt.spawn(body, t, tiles[0][1], reads=[t], writes=[tiles[0][1]]).result() == (7, 9)  # rows 3-9, cols 0-8
        rt.wait_all()
    r0, c0, nr, nc = tiles[0][1].interior
    assert (a[r0:r0 + nr, c0:c0 + nc] == -1).all()
    assert (a == -1).sum() == nr * nc


def test_views_on_a_vgpu_are_the_packed_replica():
    a = np.arange(12 * 10, dtype=np.int64).reshape(12, 10)
    seen = []
    with vgpus(2) as rt:
        tiles = rt.data(a).partition((2, 2), halo=1)
        t = tiles[1][1]

        def body(t):
            ctx = weft.context()
            v = ctx.view(t)
            r0, c0, nr, nc = t.span
            assert not v.on_host and v.device.startswith("vgpu")
            assert v.ptr == weft._weft._ctx_data(0)  # the replica's, as C gives it
            assert not (a.ctypes.data <= v.ptr < a.ctypes.data + a.nbytes)
            assert v.shape == (nr, nc) and v.strides == (nc * 8, 8)  # packed: its own width
            cai = v.__cuda_array_interface__
            assert cai["shape"] == (nr, nc) and cai["strides"] is None and cai["typestr"] == "<i8"
            ctx.queue(lambda: seen.append(np.asarray(v).copy()), reads=[v])

        rt.spawn(body, t, reads=[t], placement=weft.gpu, device_data=True).result()
        rt.wait_all()
    assert len(seen) == 1 and np.array_equal(seen[0], a[t.window])


# ---- Jacobi sweeps over tiles ----------------------------------------------


def relax(s):
    """One Jacobi sweep of s (1-D or 2-D): every cell with all its
    neighbours in s becomes their mean; the others keep their value."""
    j = s.copy()
    if s.ndim == 1:
        j[1:-1] = (s[:-2] + s[2:]) * 0.5
    else:
        j[1:-1, 1:-1] = (((s[:-2, 1:-1] + s[2:, 1:-1]) + s[1:-1, :-2]) + s[1:-1, 2:]) * 0.25
    return j


def tile_step(src_span, dst_span, t):
    """A tile's share of the sweep: its interior, from its span (halo
    included: the interior's neighbours are there, or are the array's edge,
    where relax keeps the value as the whole-array sweep does)."""
    dst_span[t.inner] = relax(src_span)[t.inner]


def step_body(ts, td, devices):
    ctx = weft.context()
    vs, vd = ctx.view(ts), ctx.view(td)
    devices.append(vs.device)
    if vs.on_host:  # the host's copy: the window itself
        tile_step(ctx.array(ts), ctx.array(td), ts)
    else:  # a virtual GPU's replica: valid in the order of the task's stream
        ctx.queue(lambda: tile_step(np.asarray(vs), np.asarray(vd), ts), reads=[vs], writes=[vd])


def warm_numpy():
    """The NumPy operations of the bodies, once on this thread first (see
    test_reduce.warm_numpy: NumPy's dispatch cache is filled under a lock
    TSan cannot see)."""
    for shape in ((4,), (4, 4)):
        x = np.ones(shape)
        relax(x)
        x[...] = relax(x)
        np.multiply(x, 1.5, out=x)
        x * 1.5
        np.array_equal(x, x)
    np.zeros((2, 2), dtype=np.int64) == np.zeros((2, 2), dtype=np.int64)


warm_numpy()

SHAPES = [
    # (shape, grid, halo, padding columns)
    ((24, 20), (2, 2), 1, 0),
    ((30, 17), (3, 2), 2, 3),
    ((9, 40), (1, 4), 1, 0),
    ((200,), 5, 1, 0),
    ((64,), 4, 3, 0),
]


@pytest.mark.parametrize("device_data", [False, True])
@pytest.mark.parametrize("shape, grid, halo, pad", SHAPES)
def test_jacobi_over_tiles_equals_numpy(shape, grid, halo, pad, device_data):
    rng = np.random.default_rng(abs(hash((shape, halo, pad))) % 2**32)
    full = shape if len(shape) == 1 else (shape[0], shape[1] + pad)
    bufs = [np.full(full, -7.0) for _ in range(2)]
    cols = shape[-1]
    sub = (lambda b: b) if len(shape) == 1 else (lambda b: b[:, :cols])
    sub(bufs[0])[...] = rng.standard_normal(shape)
    sub(bufs[1])[...] = 0.0
    refs = [sub(bufs[0]).copy()]  # the sequential run, first (see warm_numpy)
    for phase in range(3):
        for _ in range(4):
            refs.append(relax(refs[-1]))
        refs[-1] = refs[-1] * 1.5
    ref = refs[-1]
    where = [weft.gpu(0), weft.gpu(1), weft.gpu(2), weft.gpu(3), weft.cpu, None]
    with vgpus(4) as rt:
        tiles = [rt.data(b).partition(grid, halo=halo, cols=cols) for b in bufs]
        flat = [[t for row in ts for t in row] if isinstance(ts[0], list) else ts for ts in tiles]
        cur, k, devices = 0, 0, []
        for phase in range(3):
            for _ in range(4):
                for ts, td in zip(flat[cur], flat[1 - cur]):
                    rt.spawn(step_body, ts, td, devices, reads=[ts], writes=[td], placement=where[k % len(where)],
                             device_data=device_data)
                    k += 1
                cur = 1 - cur
            # a whole-array phase: the parent, reassembled from the tiles, then tiled again
            b = bufs[cur]
            rt.spawn(lambda b=b: np.multiply(sub(b), 1.5, out=sub(b)), readwrites=[b])
        got = rt.spawn(lambda b: sub(b).copy(), bufs[cur], reads=[bufs[cur]]).result()
        rt.wait_all()
    assert np.array_equal(got, ref)
    assert np.array_equal(sub(bufs[cur]), ref)
    on_gpus = {d for d in devices if d != "cpu"}
    assert on_gpus == ({"vgpu:0", "vgpu:1", "vgpu:2", "vgpu:3"} if device_data else set())
    if pad:  # the padding was never touched
        assert (bufs[0][:, cols:] == -7.0).all() and (bufs[1][:, cols:] == -7.0).all()


def test_writers_of_different_tiles_run_at_once():
    """Disjoint tiles are independent: two writers of different tiles of one
    array are not ordered (each waits for the other to have started)."""
    import threading

    a = np.zeros((8, 8))
    started = [threading.Event(), threading.Event()]
    with weft.Runtime(workers=2) as rt:
        tiles = rt.data(a).partition((1, 2))

        def body(i):
            started[i].set()
            return started[1 - i].wait(10)

        t0 = rt.spawn(body, 0, writes=[tiles[0][0]])
        t1 = rt.spawn(body, 1, writes=[tiles[0][1]])
        assert t0.result() and t1.result()


# ---- misuse ---------------------------------------------------------------


@pytest.mark.parametrize("grid, halo, why", [
    ((0, 2), 0, "grid of 0 x 2"),
    ((9, 1), 0, "grid of 9 x 1"),
    ((4, 4), 3, "halo 3 is wider"),
    ((100, 100), 0, "at most 4096"),
])
def test_bad_tilings_give_the_core_s_reason(grid, halo, why):
    a = np.zeros((8, 8), dtype=np.uint32)
    with weft.Runtime(workers=1) as rt:
        d = rt.data(a)
        with pytest.raises(ValueError, match=why):
            d.partition(grid, halo=halo)
        assert d.tiles is None
        assert len(sum(d.partition((2, 2), halo=1), [])) == 4  # nothing changed: it still partitions


def test_bad_arrays_and_arguments():
    with weft.Runtime(workers=1) as rt:
        with pytest.raises(TypeError, match="buffer protocol"):
            rt.partition(object(), (1, 1))
        with pytest.raises(ValueError, match="3 dimensions"):
            rt.partition(np.zeros((2, 2, 2)), (1, 1))
        with pytest.raises(ValueError, match="C-contiguous"):
            rt.partition(np.asfortranarray(np.zeros((4, 6))), (2, 2))
        with pytest.raises(ValueError, match="is a pair"):
            rt.partition(np.zeros((4, 4)), 2)
        with pytest.raises(TypeError, match="grid="):
            rt.partition(np.zeros(8), "2")
        with pytest.raises(ValueError, match="cols=9: each row has 8"):
            rt.partition(np.zeros((2, 8)), (1, 2), cols=9)
        with pytest.raises(ValueError, match="halo=-1"):
            rt.partition(np.zeros(8), 2, halo=-1)
        with pytest.raises(TypeError, match="struct format"):
            rt.partition(np.zeros(4, dtype=[("x", "i4"), ("y", "f8")]), 2)
        with pytest.raises(ValueError, match="empty"):
            rt.partition(bytearray(0), 1)


def test_twice_a_tile_and_unregistering():
    a = np.zeros((8, 8))
    with weft.Runtime(workers=2) as rt:
        d = rt.data(a)
        tiles = d.partition((2, 2), halo=1)
        with pytest.raises(ValueError, match="partitioned already"):
            d.partition((2, 2))
        t = tiles[0][1]
        with pytest.raises(ValueError, match="is a tile"):
            t.partition((1, 1))
        with pytest.raises(ValueError, match="tiles are unregistered with the data they were partitioned from"):
            t.unregister()
        with pytest.raises(ValueError, match="is a tile"):
            rt.unregister(t)
        rt.spawn(lambda: None, writes=[t]).result()  # still usable
        d.unregister()
        assert not t.registered and not d.registered
        with pytest.raises(ValueError, match="unregistered"):
            rt.spawn(lambda: None, reads=[t])


def test_overlapping_ranges_and_tiles_are_refused_both_ways():
    a = np.zeros(64)
    b = np.zeros(64)
    with weft.Runtime(workers=2) as rt:
        rt.spawn(lambda: None, reads=[a[8:16]]).result()  # a view of part of a registered first
        with pytest.raises(ValueError, match="only memory registered as one range can be partitioned"):
            rt.partition(a, 4)
        rt.unregister(a[8:16])
        assert len(rt.partition(a, 4)) == 4  # alone now: fine
        rt.partition(b, 2)
        with pytest.raises(ValueError, match="which is partitioned into tiles"):
            rt.spawn(lambda: None, reads=[b[3:9]])
        # the whole array itself (the same range) is the parent: fine
        rt.spawn(lambda x: x.sum(), b, reads=[b]).result()


def test_partition_waits_for_tasks_already_spawned():
    a = np.zeros(16)
    with weft.Runtime(workers=2) as rt:
        def slow():
            weft.bench.busy(20000)
            a[:] = 3.0

        rt.spawn(slow, writes=[a])
        tiles = rt.partition(a, 2)  # waits for `slow`
        got = rt.spawn(lambda: weft.context().array(0).tolist(), reads=[tiles[1]]).result()
    assert got == [3.0] * 8


def test_partition_from_a_task_that_uses_the_data_is_refused():
    a = np.zeros(16)
    with weft.Runtime(workers=2) as rt:
        def body():
            with pytest.raises(RuntimeError, match="calling task itself"):
                rt.partition(a, 2)
            return True

        assert rt.spawn(body, readwrites=[a]).result()


def test_tiles_of_a_closed_runtime():
    a = np.zeros(8)
    rt = weft.Runtime(workers=1)
    tiles = rt.partition(a, 2)
    rt.close()
    assert not tiles[0].registered
    with pytest.raises(RuntimeError, match="closed"):
        rt.spawn(lambda: None, reads=[tiles[0]])


def test_tiles_are_collected_with_their_parent():
    import gc

    def refers_to(o, a):
        try:
            return isinstance(o, weft.Data) and o.obj is a
        except ReferenceError:  # (a dead weakref.proxy among gc's objects: another test's)
            return False

    def alive(a):
        return [o for o in gc.get_objects() if refers_to(o, a)]

    with weft.Runtime(workers=1) as rt:
        a = np.zeros(8)
        d = rt.data(a)
        tiles = d.partition(2)
        assert len(alive(a)) == 3
        rt.unregister(a)
        del d, tiles
        gc.collect()
        assert alive(a) == []  # the parent <-> tiles cycle is collected


def test_ctypes_array_partition():
    """Any buffer with a format and a shape: a ctypes 2-D array."""
    arr = ((ctypes.c_double * 6) * 4)()
    with weft.Runtime(workers=1) as rt:
        tiles = rt.partition(arr, (2, 3))

        def body(t):
            v = weft.context().view(t)
            return v.shape, v.strides, v.typestr

        assert rt.spawn(body, tiles[1][2], reads=[tiles[1][2]]).result() == ((2, 2), (48, 8), "<f8")



# ---- reductions of tiles ----------------------------------------------------
#
# A task reducing a tile (reduces=[(t, op)]) gets a private copy of the
# tile's interior, rows packed, filled with the operator's identity; the
# copies are combined into the interior in spawn order.  The sequential run
# the tests compare with, bit for bit: every reducer, in spawn order, folds
# its terms into an identity-filled temporary, which is then folded into the
# tile's interior (float sums included: tests/test_tiles.c's
# test_tile_reductions and docs/design.md, Reductions).

RED_OPS = {weft.SUM: np.add, weft.MIN: np.minimum, weft.MAX: np.maximum}


def red_values(rng, dt, shape):
    if np.dtype(dt).kind == "f":  # magnitudes far apart: a float sum's result depends on its order
        return rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 12, size=shape)
    info = np.iinfo(dt)  # the whole range: int32 sums wrap around
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


def interior_slices(t):
    r0, c0, nr, nc = t.interior
    return (slice(c0, c0 + nc),) if len(t.window) == 1 else (slice(r0, r0 + nr), slice(c0, c0 + nc))


def interior_shape(t):
    _, _, nr, nc = t.interior
    return (nc,) if len(t.window) == 1 else (nr, nc)


def warm_reductions():
    """The NumPy operations of the reduction bodies and their oracle, once on
    this thread first (see warm_numpy)."""
    for dt in (np.float64, np.int32):
        for shape in ((3,), (2, 3)):
            x = np.ones(shape, dtype=dt)
            for op, fn in RED_OPS.items():
                fn(x, x, out=x)
                fn(x, x)
                (np.full(shape, red_identity(op, dt), dtype=dt) == red_identity(op, dt)).all()
            (x == x).all()
            x.copy()
            x[...] += dt(3)
            x[...] += 5  # a Python scalar: another dispatch-cache entry
            np.array_equal(x, x)
    y = np.zeros(2, dtype=np.int64)
    y[...] += 4
    z = np.zeros(2)
    z += 1.0


warm_reductions()


def red_body(t, terms, fn, ident, rec):
    """A reducer of tile t (the body gets the tile itself): records what its
    view is, then checks that it is the packed, identity-filled private copy
    and folds its terms into it (on its GPU's stream for a copy there)."""
    ctx = weft.context()
    v = ctx.view(t)
    assert ctx.view(0).ptr == v.ptr  # by the tile or by index
    rec.update(arg=t, device=v.device, on_host=v.on_host, ptr=v.ptr, nbytes=v.nbytes,
               ctx_ptr=weft._weft._ctx_data(0), shape=v.shape, strides=v.strides, readonly=v.readonly,
               typestr=v.typestr, dlpack_device=v.__dlpack_device__(),
               dlpack=repr(v.__dlpack__(max_version=(1, 0))),
               ai=v.__array_interface__ if v.on_host else v.__cuda_array_interface__)
    shape = v.shape

    def fold():
        x = np.asarray(v)
        assert x.shape == shape and x.flags.c_contiguous and x.flags.writeable and x.ctypes.data == v.ptr
        if not (x == ident).all():
            raise AssertionError(f"tile {t.index}: the private copy is not filled with the identity {ident!r}")
        for term in terms:
            fn(x, term, out=x)

    if v.on_host:
        fold()
    else:
        ctx.queue(fold, reads=[v], writes=[v])


def read_body(t, rec):
    """A plain read of tile t (its span, halo included): where its view
    points, and its values, copied where the view is valid."""
    ctx = weft.context()
    v = ctx.view(t)
    rec.update(device=v.device, ptr=v.ptr, nbytes=v.nbytes)
    if v.on_host:
        rec["values"] = np.asarray(v).copy()
    else:
        ctx.queue(lambda: rec.__setitem__("values", np.asarray(v).copy()), reads=[v])


def whole_body(a, sub, c):
    """The whole array (the parent), updated in place: its tiled part + c."""
    ctx = weft.context()
    v = ctx.view(a)

    def add():
        x = sub(np.asarray(v))
        x[...] += x.dtype.type(c)

    if v.on_host:
        add()
    else:
        ctx.queue(add, reads=[v], writes=[v])


def overlaps(p0, n0, p1, n1):
    return p0 < p1 + n1 and p1 < p0 + n0


RED_CONFIGS = [
    # (devices, device_data)
    ("cpu", False),
    ("cpu,vgpu:4", False),  # reducers on GPUs, their copies in host memory (WEFT_HOST)
    ("cpu,vgpu:4", True),  # the copies on the GPUs, filled and folded on their streams
]
RED_SHAPES = [
    # (shape, grid, halo, padding columns)
    ((12, 14), (2, 2), 0, 0),
    ((13, 17), (2, 3), 1, 3),
    ((11, 16), (3, 2), 2, 2),
    ((120,), 4, 2, 0),
]
# Each array's phases: a reduction group per tile and phase.
RED_PROGRAMS = {np.float64: (weft.SUM, weft.MIN, weft.SUM, weft.MAX, weft.SUM),
                np.int32: (weft.SUM, weft.MAX, weft.MIN, weft.SUM)}


@pytest.mark.parametrize("devices, device_data", RED_CONFIGS, ids=["cpu", "vgpu-host", "vgpu-device"])
@pytest.mark.parametrize("shape, grid, halo, pad", RED_SHAPES, ids=["2x2", "2x3-halo1-pad", "3x2-halo2-pad", "1d"])
def test_tile_reductions_equal_numpy_in_spawn_order(monkeypatch, devices, device_data, shape, grid, halo, pad):
    """Several reducers per tile and phase (sum, min, max; float64 and int32),
    with a plain read of each tile before its group, a read of a tile never
    reduced (its halo covers its reduced neighbours) after each phase and a
    whole-array update between phases, on the host and on virtual GPUs in
    checking mode: every reader, and the array at the end, equal the
    sequential NumPy run bit for bit — so the never-reduced tile's cells
    (the others' halos) and the padding are untouched; each reducer's view
    is the packed private copy, not the tile's replica the read saw."""
    import zlib

    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    rng = np.random.default_rng(zlib.crc32(f"{devices} {device_data} {shape} {grid} {halo} {pad}".encode()))
    cols = shape[-1]
    full = shape if len(shape) == 1 else (shape[0], shape[1] + pad)
    sub = (lambda b: b) if len(shape) == 1 else (lambda b: b[..., :cols])
    on_gpus = devices != "cpu"
    where = [weft.gpu(0), weft.gpu(1), weft.cpu, weft.gpu(2), None, weft.gpu(3)] if on_gpus else [None, weft.cpu]
    arrays, reds, reads = {}, [], []
    for dt in RED_PROGRAMS:
        a = np.full(full, -7 if dt == np.int32 else -7.25, dtype=dt)
        sub(a)[...] = red_values(rng, dt, shape)
        arrays[dt] = a
    k = 0
    with weft.Runtime(workers=2, devices=devices, vgpu_memory=16 << 20) as rt:
        assert rt.devices[-1]["kind"] == ("vgpu" if on_gpus else "cpu")
        for dt, program in RED_PROGRAMS.items():
            a = arrays[dt]
            ref = a.copy()  # the sequential run, beside the spawns
            tiles = rt.partition(a, grid, halo=halo, cols=cols if len(shape) == 2 else None)
            flat = [t for row in tiles for t in row] if isinstance(tiles[0], list) else list(tiles)
            last = flat[-1]  # never reduced
            for phase, op in enumerate(program):
                fn, ident = RED_OPS[op], red_identity(op, dt)
                for t in flat[:-1]:
                    # a plain read first (the group follows it): the tile's replica where it runs
                    read = dict(tile=t, want=ref[t.window].copy())
                    reads.append(read)
                    rt.spawn(read_body, t, read, reads=[t], placement=where[k % len(where)], device_data=device_data)
                    for _ in range(1 + (k + phase) % 3):  # the group: 1 to 3 reducers of this tile
                        terms = [red_values(rng, dt, interior_shape(t)) for _ in range(1 + k % 3)]
                        tmp = np.full(interior_shape(t), ident, dtype=dt)
                        for term in terms:
                            tmp = fn(tmp, term)
                        ref[interior_slices(t)] = fn(ref[interior_slices(t)], tmp)
                        rec = dict(tile=t, read=read, array=(a.ctypes.data, a.nbytes), itemsize=a.itemsize)
                        reds.append(rec)
                        rt.spawn(red_body, t, terms, fn, ident, rec, reduces=[(t, op)],
                                 placement=where[k % len(where)], device_data=device_data)
                        k += 1
                # the never-reduced tile: its halo (if any) holds its neighbours' combined values
                read = dict(tile=last, want=ref[last.window].copy())
                reads.append(read)
                rt.spawn(read_body, last, read, reads=[last], placement=where[k % len(where)], device_data=device_data)
                k += 1
                if phase == 1:  # a whole-array phase: the parent, reassembled from the tiles, tiled again
                    c = 3 if dt == np.int32 else 0.5
                    sub(ref)[...] += dt(c)
                    rt.spawn(whole_body, a, sub, c, readwrites=[a], placement=where[0], device_data=device_data)
            got = rt.spawn(lambda a=a: a.copy(), reads=[a]).result()
            assert got.tobytes() == ref.tobytes()
            if pad:
                assert (a[:, cols:] == -7).all() if dt == np.int32 else (a[:, cols:] == -7.25).all()
            arrays[dt] = (a, ref)
        rt.wait_all()
    for a, ref in arrays.values():
        assert a.tobytes() == ref.tobytes()
    for r in reads:
        assert r["values"].tobytes() == r["want"].tobytes(), f"a read of tile {r['tile'].index} saw other values"
    devs = set()
    for r in reds:
        t, isz = r["tile"], r["itemsize"]
        shape_in = interior_shape(t)
        assert r["arg"] is t  # the body gets the tile itself, not its copy
        assert r["shape"] == shape_in and r["nbytes"] == int(np.prod(shape_in)) * isz
        assert r["strides"] == ((isz,) if len(shape_in) == 1 else (shape_in[1] * isz, isz))  # packed rows
        assert not r["readonly"] and r["typestr"] == ("<f8" if isz == 8 else "<i4")
        assert r["ptr"] == r["ctx_ptr"]  # weft_ctx_data's
        # the private copy: neither the host array (the tile's host replica is a window into it) nor the
        # replica the plain read just before the group saw where it ran
        assert not overlaps(r["ptr"], r["nbytes"], *r["array"])
        if r["read"]["device"] == r["device"]:
            assert not overlaps(r["ptr"], r["nbytes"], r["read"]["ptr"], r["read"]["nbytes"])
        ai = r["ai"]
        assert ai["data"] == (r["ptr"], False) and ai["shape"] == shape_in and ai["strides"] is None
        assert ai["version"] == 3 and ("stream" in ai) == (not r["on_host"])
        assert r["dlpack_device"] == (1, 0)  # host memory, a virtual GPU's included
        assert '"dltensor_versioned"' in r["dlpack"]  # writable: DLPack 1.0 on request
        assert r["on_host"] == (r["device"] == "cpu")
        devs.add(r["device"])
    assert devs == ({"cpu", "vgpu:0", "vgpu:1", "vgpu:2", "vgpu:3"} if device_data else {"cpu"})


@pytest.mark.parametrize("device_data", [False, True])
def test_a_tile_reduction_view_ends_with_its_task(monkeypatch, device_data):
    """The view of a tile's private copy is closed when its task ends, as
    other views are (on the host, and on a virtual GPU once the work queued
    on its stream finished)."""
    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    a = np.zeros((6, 8), dtype=np.int32)
    kept = []
    with vgpus(2) as rt:
        tiles = rt.partition(a, (2, 2), halo=1)
        t = tiles[1][0]

        def body(t):
            ctx = weft.context()
            v = ctx.view(t)
            kept.append(v)
            assert v.valid and v.on_host != device_data

            def add():
                assert v.valid  # the body returned; the task has not ended
                np.asarray(v)[...] += 5

            if v.on_host:
                add()
            else:
                ctx.queue(add, reads=[v], writes=[v])

        for _ in range(2):
            rt.spawn(body, t, reduces=[(t, weft.SUM)], placement=weft.gpu, device_data=device_data).result()
        rt.wait_all()
        for v in kept:
            assert not v.valid and "its task ended" in repr(v)
            with pytest.raises(RuntimeError, match="used after its task ended"):
                v.shape
            with pytest.raises(RuntimeError, match="used after its task ended"):
                np.asarray(v)
            with pytest.raises(RuntimeError, match="used after its task ended"):
                v.__dlpack__()
        got = rt.spawn(lambda: a.copy(), reads=[a]).result()
    want = np.zeros((6, 8), dtype=np.int32)
    want[interior_slices(t)] = 10
    assert np.array_equal(got, want) and np.array_equal(a, want)


def test_tile_reductions_refused_beside_their_parent_or_a_halo_read():
    """What the C core refuses (a task reducing a tile must not also name
    the tile's parent, nor read a tile whose halo covers it: its order-only
    accesses would merge with the reduction) is a ValueError naming the
    spawn's own arguments; the runtime stays usable, and accesses that do not
    meet the reduced tile are fine."""
    a = np.zeros((8, 12))
    b = np.zeros((8, 12))
    with weft.Runtime(workers=2) as rt:
        d = rt.data(a)
        tiles = d.partition((2, 3), halo=1)
        flat = tiles[0] + tiles[1]
        t = tiles[0][1]
        nop = lambda: None  # noqa: E731
        for kw, named in [(dict(reads=[a]), r"reads\[0\]"), (dict(readwrites=[d]), r"readwrites\[0\]"),
                          (dict(writes=[b, a]), r"writes\[1\]")]:
            with pytest.raises(ValueError, match=r"spawn\(\): reduces\[0\] reduces tile \(0, 1\), and " + named +
                               " names the array it was partitioned from"):
                rt.spawn(nop, reduces=[(t, weft.SUM)], **kw)
        # every tile around (0, 1), corners included, has it in its halo
        for n in (tiles[0][0], tiles[0][2], tiles[1][0], tiles[1][1], tiles[1][2]):
            for mode in ("reads", "readwrites", "commutes"):
                with pytest.raises(ValueError, match=rf"reduces\[0\] reduces tile \(0, 1\), and {mode}\[1\] reads "
                                   rf"tile \({n.index[0]}, {n.index[1]}\), whose halo covers part of it"):
                    rt.spawn(nop, reduces=[(t, weft.MAX)], **{mode: [b, n]})
        with pytest.raises(ValueError, match="reduces data that access 0 names too"):  # the core's own
            rt.spawn(nop, reads=[t], reduces=[(t, weft.SUM)])
        with pytest.raises(ValueError, match="partitioned into tiles: reduce its tiles"):  # the core's own
            rt.spawn(nop, reduces=[(a, weft.SUM)])
        # fine: writing a neighbour (a writer reads nothing), another array, a tile whose halo misses it
        far = rt.partition(b, (1, 3), halo=1)[0]
        rt.spawn(lambda: weft.context().array(1).__iadd__(1.0), writes=[tiles[1][1]],
                 reduces=[(t, weft.SUM)]).result()
        rt.spawn(nop, reads=[far[0]], reduces=[(tiles[1][2], weft.MIN)]).result()
        rt.spawn(nop, reads=[flat[0]], reduces=[(tiles[1][2], weft.MIN)]).result()  # (0, 0) is not beside (1, 2)
        assert rt.spawn(lambda: a.sum(), reads=[a]).result() == t.interior[2] * t.interior[3]


def test_tiles_without_a_halo_reduce_beside_their_neighbours_reads():
    a = np.arange(16, dtype=np.int32).reshape(4, 4)
    with weft.Runtime(workers=2) as rt:
        tiles = rt.partition(a, (2, 2))

        def body(left, right):
            ctx = weft.context()
            ctx.array(right)[...] += ctx.array(left)  # the neighbour's interior into the private copy

        l, r = tiles[0]
        rt.spawn(body, l, r, reads=[l], reduces=[(r, weft.SUM)])
        rt.spawn(body, l, r, reads=[l], reduces=[(r, weft.SUM)])
        rt.wait_all()
    want = np.arange(16, dtype=np.int32).reshape(4, 4)
    want[:2, 2:] += 2 * want[:2, :2]
    assert np.array_equal(a, want)


def test_a_failed_tile_reducer_contributes_nothing():
    a = np.zeros(40, dtype=np.int64)
    with weft.Runtime(workers=2) as rt:
        t0, t1 = rt.partition(a, 2, halo=2)

        def body(k):
            weft.context().array(0)[...] += k
            if k == 2:
                raise ValueError("reducer 2 fails")

        for k in (1, 2, 4):
            rt.spawn(body, k, reduces=[(t0, weft.SUM)])
        neighbour = rt.spawn(lambda: None, reads=[t1])  # its halo covers t0: it reads the failed group
        with pytest.raises(ValueError, match="reducer 2 fails"):
            rt.wait_all()
        assert isinstance(neighbour.exception(), weft.CancelledError)
        rt.unregister(a)
    assert a.tolist() == [5] * 20 + [0] * 20
