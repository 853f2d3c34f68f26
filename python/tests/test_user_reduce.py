"""User-defined reductions from Python: weft.Reduction names a C combine
(compiled here with the machine's C compiler, reached through ctypes) and
an identity or a C init; spawn(reduces=[(buf, red)]) reduces with it, the
combine called from C with no Python.  Checked: argmin over a structured
(value, index) dtype with ties to the lowest index, a complex128 sum, and a
non-commuting 2x2 matrix product, from Python and native bodies, on the CPU
and on virtual GPUs, equal bit for bit to the sequential fold in spawn
order; a failed member; misuse refused with messages."""
import ctypes
import struct

import pytest

import weft

np = pytest.importorskip("numpy")

C_SOURCE = r"""
#include <math.h>
#include <stddef.h>
#include <stdint.h>

struct pair { double v; int64_t i; };
void argmin(void *inout, const void *in, size_t n, void *arg)
{
    (void)arg;
    struct pair *a = inout;
    const struct pair *b = in;
    for (size_t k = 0; k < n; k++)
        if (b[k].v < a[k].v || (b[k].v == a[k].v && b[k].i < a[k].i)) a[k] = b[k];
}

void csum(void *inout, const void *in, size_t n, void *arg)
{
    (void)arg;
    double *a = inout;
    const double *b = in;
    for (size_t k = 0; k < 2 * n; k++) a[k] += b[k];
}

/* 2x2 matrices of uint64, products wrap around; arg: a counter of calls */
struct mat { uint64_t a, b, c, d; };
void matmul(void *inout, const void *in, size_t n, void *arg)
{
    struct mat *x = inout;
    const struct mat *y = in;
    for (size_t k = 0; k < n; k++) {
        struct mat m = {x[k].a * y[k].a + x[k].b * y[k].c, x[k].a * y[k].b + x[k].b * y[k].d,
                        x[k].c * y[k].a + x[k].d * y[k].c, x[k].c * y[k].b + x[k].d * y[k].d};
        x[k] = m;
    }
    if (arg) *(int64_t *)arg += 1;
}
void matinit(void *out, size_t n, void *arg)
{
    (void)arg;
    struct mat *x = out;
    for (size_t k = 0; k < n; k++) { struct mat one = {1, 0, 0, 1}; x[k] = one; }
}

/* A native body: arg (first, count) then the access: argmin over
 * x = (first + j) * 7919 % 1009 for j < count, into the private copy */
struct chunk { int64_t first, count; };
int scan(void *p)
{
    const struct chunk *c = p;
    struct pair *best = *(void **)((char *)p + sizeof *c);
    for (int64_t j = 0; j < c->count; j++) {
        int64_t i = c->first + j;
        struct pair here = {(double)((i * 7919) % 1009), i};
        argmin(best, &here, 1, NULL);
    }
    return 0;
}
"""

PAIR = np.dtype([("v", "<f8"), ("i", "<i8")])
MAT = np.dtype([("a", "<u8"), ("b", "<u8"), ("c", "<u8"), ("d", "<u8")])
IMAX = np.iinfo(np.int64).max


@pytest.fixture(scope="module")
def lib(c_library):
    return c_library("userreduce", C_SOURCE)


def argmin_red(lib):
    return weft.Reduction(lib.argmin, dtype=PAIR, identity=(np.inf, IMAX), name="argmin")


def fold_argmin(acc, terms):
    for t in terms:
        better = (t["v"] < acc["v"]) | ((t["v"] == acc["v"]) & (t["i"] < acc["i"]))
        acc[better] = t[better]


def mat_mul(x, y):
    with np.errstate(over="ignore"):
        return (x["a"] * y["a"] + x["b"] * y["c"], x["a"] * y["b"] + x["b"] * y["d"],
                x["c"] * y["a"] + x["d"] * y["c"], x["c"] * y["b"] + x["d"] * y["d"])


def terms_of(k, n):
    """Task k's contribution: a pair per element, values with many ties."""
    rng = np.random.default_rng(k)
    t = np.zeros(n, dtype=PAIR)
    t["v"] = rng.integers(0, 5, n)
    t["i"] = rng.integers(0, 1 << 40, n)
    return t


@pytest.mark.parametrize("devices", ["cpu", "cpu,vgpu:2"])
def test_argmin_many_members(lib, devices):
    red = argmin_red(lib)
    n, ntasks = 32, 60
    results = []
    for _ in range(2):  # the same bits on every run
        best = np.zeros(n, dtype=PAIR)
        best["v"], best["i"] = 7.0, 10**15
        want = best.copy()
        with weft.Runtime(workers=3, devices=devices) as rt:
            def body(k):
                mine = np.asarray(weft.context().array(best)).view(PAIR)  # the private copy, identity-filled
                assert np.all(mine["v"] == np.inf) and np.all(mine["i"] == IMAX)
                fold_argmin(mine, [terms_of(k, n)])
            places = ["cpu", "gpu"] if "vgpu" in devices else ["cpu"]
            for k in range(ntasks):
                rt.spawn(body, k, reduces=[(best, red)], placement=places[k % len(places)])
                tmp = np.zeros(n, dtype=PAIR)
                tmp["v"], tmp["i"] = np.inf, IMAX
                fold_argmin(tmp, [terms_of(k, n)])
                fold_argmin(want, [tmp])
            got = rt.spawn(lambda: best.copy(), reads=[best]).result()
        assert got.tobytes() == want.tobytes()
        results.append(got.tobytes())
    assert results[0] == results[1]


def test_complex_sum_in_spawn_order(lib):
    red = weft.Reduction(lib.csum, dtype=np.complex128, identity=complex(-0.0, -0.0), name="csum")
    z = np.zeros(16, dtype=np.complex128)
    want = z.copy()
    with weft.Runtime(workers=3, devices="cpu,vgpu:2") as rt:
        def body(k):
            c = weft.context().array(z)
            c += np.arange(16) * (k + 0.1) + 1j / (k + 3)
        for k in range(40):
            rt.spawn(body, k, reduces=(z, red), placement="cpu" if k % 2 else "gpu")
            tmp = np.full(16, complex(-0.0, -0.0))
            tmp += np.arange(16) * (k + 0.1) + 1j / (k + 3)
            want += tmp
        rt.wait_all()
    assert z.tobytes() == want.tobytes()


def test_non_commuting_combine_and_init(lib):
    """A matrix product (it does not commute): only the spawn order gives
    the sequential result; init fills the identity; arg reaches combine."""
    calls = ctypes.c_int64(0)
    red = weft.Reduction(lib.matmul, dtype=MAT, init=lib.matinit, arg=calls, name="matmul")
    m = np.zeros(8, dtype=MAT)
    m["a"], m["d"] = 3, 5
    want = m.copy()
    with weft.Runtime(workers=4, devices="cpu,vgpu:2") as rt:
        def body(k):
            c = np.asarray(weft.context().array(m)).view(MAT)
            assert np.all(c["a"] == 1) and np.all(c["b"] == 0)
            c["b"] = k + 1
            c["c"] = 2 * k + 1
        for k in range(30):
            rt.spawn(body, k, reduces=[(m, red)], placement=["cpu", "gpu"][k % 2])
            t = np.zeros(8, dtype=MAT)
            t["a"], t["b"], t["c"], t["d"] = 1, k + 1, 2 * k + 1, 1
            want["a"], want["b"], want["c"], want["d"] = mat_mul(want, t)
        rt.wait_all()
    assert m.tobytes() == want.tobytes()
    assert calls.value > 0


def test_native_body_reduces(lib):
    """A native body folds into the private copy: no Python anywhere."""
    red = argmin_red(lib)
    best = np.zeros(1, dtype=PAIR)
    best["v"], best["i"] = np.inf, IMAX
    k = weft.native(lib.scan)
    with weft.Runtime(workers=2) as rt:
        for c in range(20):
            rt.spawn(k, struct.pack("=qq", c * 500, 500), reduces=[(best, red)])
        rt.wait_all()
    x = (np.arange(10000) * 7919) % 1009
    assert best["v"][0] == x.min() and best["i"][0] == int(np.argmin(x))


def test_failed_member(lib):
    red = argmin_red(lib)
    best = np.zeros(4, dtype=PAIR)
    best["v"], best["i"] = np.inf, IMAX
    with weft.Runtime(workers=2) as rt:
        def body(k):
            mine = np.asarray(weft.context().array(best)).view(PAIR)
            mine["v"], mine["i"] = -k, k
            if k == 3:
                raise ValueError("member 3 fails")
        for k in range(5):
            rt.spawn(body, k, reduces=[(best, red)])
        reader = rt.spawn(lambda: best.copy(), reads=[best])
        with pytest.raises(weft.CancelledError):
            reader.result()
        with pytest.raises(ValueError):
            rt.wait_all()
    assert list(best["v"]) == [-4.0] * 4 and list(best["i"]) == [4] * 4  # member 3's -3 is not there


def test_misuse(lib):
    with pytest.raises(TypeError, match="not a Python callable"):
        weft.Reduction(lambda a, b, n, arg: None, itemsize=16, identity=bytes(16))
    with pytest.raises(ValueError, match="identity= .* or init="):
        weft.Reduction(lib.argmin, dtype=PAIR)
    with pytest.raises(ValueError, match="one of them"):
        weft.Reduction(lib.matmul, dtype=MAT, identity=(1, 0, 0, 1), init=lib.matinit)
    with pytest.raises(ValueError, match="identity has 8 bytes; an element has 16"):
        weft.Reduction(lib.argmin, itemsize=16, identity=bytes(8))
    with pytest.raises(ValueError, match="give dtype= .* or itemsize="):
        weft.Reduction(lib.argmin, identity=bytes(16))
    red = argmin_red(lib)
    with weft.Runtime(workers=1) as rt:
        with pytest.raises(TypeError, match=r"reduction 'argmin'.* combines 16-byte elements, but this buffer's "
                                            r"are 8 bytes"):
            rt.spawn(lambda: None, reduces=[(np.zeros(4), red)])
        with pytest.raises(ValueError, match=r"16-byte elements \(user reduction \"argmin\"\), but its data's "
                                             r"24 bytes"):
            rt.spawn(lambda: None, reduces=[(bytearray(24), red)])
        with pytest.raises(ValueError, match="or a weft.Reduction"):
            rt.spawn(lambda: None, reduces=[(np.zeros(2, dtype=PAIR), "argmin")])
