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
