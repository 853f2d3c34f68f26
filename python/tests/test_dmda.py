"""The "dmda" policy (the default on a runtime with GPUs) from Python: each
function is a kind of task with models of its own, named by its qualified
name, which persist in the model file when the runtime closes."""
import socket

import pytest

import weft


@pytest.fixture
def model_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("WEFT_PERFMODEL_DIR", str(tmp_path))
    monkeypatch.delenv("WEFT_PERFMODEL", raising=False)
    return tmp_path


def models(model_dir):
    """The model file's lines, as (kind, arch, count) triples."""
    path = model_dir / f"{socket.gethostname()}.models"
    rows = []
    for line in path.read_text().splitlines()[1:]:
        kind, arch, _size, count, _mean, _m2 = line.split("\t")
        rows.append((kind, arch, int(count)))
    return rows


def test_functions_are_kinds(model_dir):
    def square(x):
        return x * x

    def cube(x):
        return x * x * x

    @weft.variants
    def both(x):
        return ("cpu", x)

    @both.variant(weft.gpu)
    def both_gpu(x):
        return ("gpu", x)

    with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
        for i in range(6):
            assert rt.spawn(square, i, placement=[weft.gpu, weft.cpu]).result() == i * i
            assert rt.spawn(cube, i, placement=weft.gpu).result() == i ** 3
            assert rt.spawn(both, i).result()[1] == i
    rows = models(model_dir)
    kinds = {k for k, _, _ in rows}
    prefix = "test_functions_are_kinds.<locals>."
    assert {prefix + "square", prefix + "cube", prefix + "both"} <= kinds, kinds
    # every task observed once, on the kind of device it ran on
    assert sum(c for k, _, c in rows if k == prefix + "cube") == 6
    assert {a for k, a, _ in rows if k == prefix + "cube"} == {"vgpu"}
    assert sum(c for k, _, c in rows if k == prefix + "square") == 6


def test_off_keeps_no_file(model_dir, monkeypatch):
    monkeypatch.setenv("WEFT_PERFMODEL", "off")

    def f():
        return 1

    with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
        assert rt.spawn(f, placement=weft.gpu).result() == 1
    assert not list(model_dir.iterdir())


def test_cost(model_dir):
    """cost= is the task's work: a number at least 0, refused otherwise;
    a function never seen, with a cost, is predicted from the rate other
    tasks with a cost showed, and its tasks are observed too."""
    def rated():
        return 1

    def fresh():
        return 2

    with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
        for _ in range(8):
            assert rt.spawn(rated, placement=[weft.gpu, weft.cpu], cost=1e6).result() == 1
        assert rt.spawn(fresh, placement=[weft.gpu, weft.cpu], cost=2e6).result() == 2
        with pytest.raises(ValueError, match="cost= takes a finite number of at least 0"):
            rt.spawn(fresh, cost=-1.0)
        with pytest.raises(ValueError, match="cost= takes a finite number"):
            rt.spawn(fresh, cost=float("nan"))
        with pytest.raises(TypeError, match="cost= expects a number"):
            rt.spawn(fresh, cost="big")
    kinds = {k for k, _, _ in models(model_dir)}
    assert "(time per unit of cost)" in kinds
    assert "test_cost.<locals>.fresh" in kinds


def test_long_qualified_names_stay_apart(model_dir):
    """Two functions whose qualified names differ only past the models'
    63 bytes are two kinds: the names keep their start and a hash."""
    class AClassWhoseNameIsLongEnoughToPushQualifiedNamesPastTheLimit:
        @staticmethod
        def first_kernel_of_the_class(x):
            return x

        @staticmethod
        def second_kernel_of_the_class(x):
            return x

    c = AClassWhoseNameIsLongEnoughToPushQualifiedNamesPastTheLimit
    with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
        for i in range(4):
            assert rt.spawn(c.first_kernel_of_the_class, i, placement=weft.gpu).result() == i
            assert rt.spawn(c.second_kernel_of_the_class, i, placement=weft.gpu).result() == i
    long_kinds = [(k, n) for k, _, n in models(model_dir) if k.startswith("test_long_qualified") and "~" in k]
    assert len(long_kinds) == 2, long_kinds
    assert all(len(k.encode()) <= 63 and n == 4 for k, n in long_kinds), long_kinds


def test_cost_on_another_policy_is_told_once(model_dir, capfd):
    def f(x):
        return x

    with weft.Runtime(workers=2, devices="cpu,vgpu:1", policy="load") as rt:
        for i in range(3):  # a kind of its own (the function) alone is not a hint
            rt.spawn(f, i, placement=[weft.cpu, weft.gpu]).result()
    assert "warning" not in capfd.readouterr().err
    with weft.Runtime(workers=2, devices="cpu,vgpu:1", policy="load") as rt:
        for i in range(3):
            rt.spawn(f, i, placement=[weft.cpu, weft.gpu], cost=1e6).result()
    err = capfd.readouterr().err
    assert err.count("weft: warning: tasks carry a kind or a cost") == 1, err
    assert 'policy is "load"' in err and 'policy="dmda"' in err


def test_policy_is_the_one_in_use(monkeypatch):
    monkeypatch.delenv("WEFT_POLICY", raising=False)
    for devices, policy, want in [("cpu", None, "load"), ("cpu,vgpu:1", None, "dmda"),
                                  ("cpu,vgpu:1", "load", "load")]:
        with weft.Runtime(workers=1, devices=devices, policy=policy) as rt:
            assert rt.policy == want, (devices, policy, rt.policy)


def test_kind_keeps_bodies_of_one_qualified_name_apart(model_dir):
    """kind= names a task's kind of work: two lambdas (one qualified name,
    '<lambda>') given two kinds are two models, not one."""
    with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
        for _ in range(3):
            rt.spawn(lambda: 1, placement=[weft.cpu, weft.gpu], kind="short").result()
            rt.spawn(lambda: 2, placement=[weft.cpu, weft.gpu], kind="long").result()

        @rt.spawn(placement=weft.gpu, kind="decorated")
        def t():
            return 3

        assert t.result() == 3
    counts = {}
    for k, _, n in models(model_dir):
        counts[k] = counts.get(k, 0) + n
    assert counts.get("short") == 3 and counts.get("long") == 3 and counts.get("decorated") == 1, counts
    assert "<lambda>" not in counts, counts


def test_kind_is_checked_at_the_spawn(model_dir):
    def f():
        return 1

    with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
        for bad, what in [("", '"": name the kind of work'),
                          ("k" * 64, "is 64 bytes in UTF-8, more than the 63"),
                          ("é" * 32, "is 64 bytes in UTF-8"),
                          ("a\tb", r"control character \(U\+0009\) at index 1"),
                          ("(time per unit of cost)", "rate per unit of cost")]:
            with pytest.raises(ValueError, match=r"spawn\(\): kind=.*" + what):
                rt.spawn(f, placement=weft.gpu, kind=bad)
        with pytest.raises(TypeError, match=r"kind= expects a str"):
            rt.spawn(f, placement=weft.gpu, kind=b"gemm")
        with pytest.raises(ValueError, match="kind="):
            weft.spawn(f, runtime=rt, kind="")
        # 63 bytes, and None (the function's own), are kinds
        assert rt.spawn(f, placement=weft.gpu, kind="k" * 63).result() == 1
        assert rt.spawn(f, placement=weft.gpu, kind=None).result() == 1
    kinds = {k for k, _, _ in models(model_dir)}
    assert "k" * 63 in kinds and "test_kind_is_checked_at_the_spawn.<locals>.f" in kinds


def _kind_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, weft.TaskWarning)]


def test_one_kind_different_code(model_dir):
    """Two bodies of one qualified name and different code share the kind
    their name gives: a weft.TaskWarning says so, once, naming both and
    kind=.  Closures made by one def, methods of one class on two objects,
    functools.partial of one function run one code: no warning."""
    import functools
    import warnings

    def make(i):
        def task():
            return i
        return task

    class Tile:
        def __init__(self, v):
            self.v = v

        def get(self):
            return self.v

    def add(a, b):
        return a + b

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with weft.Runtime(workers=2, devices="cpu,vgpu:2") as rt:
            for i in range(3):
                assert rt.spawn(make(i), placement=[weft.cpu, weft.gpu]).result() == i
                assert rt.spawn(Tile(i).get, placement=weft.gpu).result() == i
                assert rt.spawn(functools.partial(add, i), 1, placement=weft.gpu).result() == i + 1
            assert _kind_warnings(record) == []
            first = lambda: 1  # noqa: E731
            second = lambda: 2  # noqa: E731
            for _ in range(3):
                assert rt.spawn(first, placement=[weft.cpu, weft.gpu]).result() == 1
                assert rt.spawn(second, placement=[weft.cpu, weft.gpu]).result() == 2
            # given kinds are the program's word: no warning
            rt.spawn(first, placement=weft.gpu, kind="mine").result()
            rt.spawn(second, placement=weft.gpu, kind="mine").result()
    told = _kind_warnings(record)
    assert len(told) == 1, told
    line = first.__code__.co_firstlineno
    assert "tasks of kind 'test_one_kind_different_code.<locals>.<lambda>'" in told[0]
    assert f"test_dmda.py:{line})" in told[0] and f"test_dmda.py:{line + 1})" in told[0], told[0]
    assert 'pass kind="..."' in told[0]
    w = next(w for w in record if issubclass(w.category, weft.TaskWarning))
    assert w.filename == __file__  # (at the spawn that ran different code)
    # On a policy that keeps no models, kinds are unused: nothing to tell.
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with weft.Runtime(workers=2, devices="cpu,vgpu:1", policy="load") as rt:
            rt.spawn(first, placement=weft.gpu).result()
            rt.spawn(second, placement=weft.gpu).result()
    assert _kind_warnings(record) == []


def test_partials_and_callables(model_dir):
    """A functools.partial is its function's kind, a callable object its
    class's; two partials of different functions of one qualified name are
    told apart as functions are."""
    import functools
    import warnings

    class Scale:
        def __call__(self, x):
            return 2 * x

    def make(k):
        if k:
            def f(x):
                return x + 1
        else:
            def f(x):
                return x - 1
        return f

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with weft.Runtime(workers=2, devices="cpu,vgpu:1") as rt:
            assert rt.spawn(Scale(), 2, placement=weft.gpu).result() == 4
            assert rt.spawn(Scale(), 3, placement=weft.gpu).result() == 6
            assert rt.spawn(functools.partial(make(1), 1), placement=weft.gpu).result() == 2
            assert rt.spawn(functools.partial(make(0), 1), placement=weft.gpu).result() == 0
    told = _kind_warnings(record)
    assert len(told) == 1 and "make.<locals>.f" in told[0], told
    kinds = {k for k, _, _ in models(model_dir)}
    prefix = "test_partials_and_callables.<locals>."
    assert {prefix + "Scale", prefix + "make.<locals>.f"} <= kinds, kinds


def test_resumed_kind(model_dir):
    """An `async def` body that suspends at an await (placed on a GPU, an
    await of an unfinished task does) runs in parts; the core observes only
    the last (the first continued).  That part goes into "<kind> (resumed)",
    never into the body's own model, nor into one every async body shares
    (the C function that runs them all)."""
    import threading
    import time

    go = threading.Event()

    def leaf():
        assert go.wait(60)
        return 1

    async def body(started):
        t = weft.spawn(leaf)
        started.set()
        return await t + 1   # (leaf waits for go: the body suspends)

    def suspended(rt, spawned):
        # (its continuation is spawned when it suspends: the third task,
        # after the body's own and leaf)
        deadline = time.monotonic() + 60
        while rt.stats()["tasks_spawned"] < spawned + 3:
            assert time.monotonic() < deadline
            time.sleep(0.001)

    with weft.Runtime(workers=3, devices="cpu,vgpu:2") as rt:
        for _ in range(3):
            go.clear()
            started = [threading.Event(), threading.Event()]
            n = rt.stats()["tasks_spawned"]
            a = rt.spawn(body, started[0], placement=weft.gpu)
            assert started[0].wait(60)
            suspended(rt, n)
            n = rt.stats()["tasks_spawned"]
            b = rt.spawn(body, started[1], placement=weft.gpu, kind="given")
            assert started[1].wait(60)
            suspended(rt, n)
            go.set()
            assert a.result(timeout=60) == 2 and b.result(timeout=60) == 2
    counts = {}
    for k, _, n in models(model_dir):
        counts[k] = counts.get(k, 0) + n
    kind = "test_resumed_kind.<locals>.body"
    assert counts == {kind + " (resumed)": 3, "given (resumed)": 3}, counts
