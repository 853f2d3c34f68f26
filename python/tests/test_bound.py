"""Runtime.bound(): the lower bound of the makespan over the task graph the
runtime records with Runtime(bound=True) or WEFT_BOUND=1 (weft_runtime_bound).
No check depends on the machine's speed: relations the bound holds by
construction, and observed times at least the sleeps that made them."""
import time

import pytest

import weft


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv("WEFT_BOUND", raising=False)
    monkeypatch.setenv("WEFT_PERFMODEL", "off")


KEYS = {"tasks", "pending", "no_model", "makespan", "path", "area", "bound", "cpu_slots", "gpus"}


def check(b):
    assert set(b) == KEYS
    assert b["bound"] == max(b["path"], b["area"])
    assert 0 < b["bound"] <= b["makespan"]


def test_chain_of_one_kind():
    """A chain of one function on the CPU: its path is the sum of its
    predictions, its area that sum over the two workers."""
    def link(i):
        time.sleep(0.001)
        return i

    with weft.Runtime(workers=2, devices="cpu", policy="dmda", bound=True) as rt:
        t = None
        for i in range(6):
            t = rt.spawn(link, i, placement=weft.cpu, deps=[t] if t else [])
        assert t.result() == 5
        b = rt.bound()
    check(b)
    assert (b["tasks"], b["pending"], b["no_model"], b["cpu_slots"], b["gpus"]) == (6, 0, 0, 2, 0)
    assert b["path"] == pytest.approx(2 * b["area"], rel=1e-9)
    assert b["path"] >= 6 * 0.001  # (each prediction is the mean of times of at least the sleep)


def test_no_model_uses_observed_time():
    """Tasks without a placement have no model: their observed times stand in."""
    def nap():
        time.sleep(0.005)

    with weft.Runtime(workers=2, devices="cpu", policy="dmda", bound=True) as rt:
        a = rt.spawn(nap)
        rt.spawn(nap, deps=[a]).result()
        b = rt.bound()
    check(b)
    assert b["tasks"] == 2 and b["no_model"] == 2
    assert b["path"] >= 0.010


def test_off_is_an_error():
    with weft.Runtime(workers=1, devices="cpu") as rt:
        rt.spawn(int, "1").result()
        # said in Python's terms (the keyword to pass), not weft_config's
        with pytest.raises(ValueError, match=r"weft\.Runtime\(\.\.\., bound=True\).*WEFT_BOUND=1") as e:
            rt.bound()
        assert "weft_config" not in str(e.value)
    with pytest.raises(RuntimeError, match="closed"):
        rt.bound()
    with pytest.raises(TypeError, match="bound="):
        weft.Runtime(workers=1, bound=1)  # type: ignore[arg-type]


def test_env_prints_at_close(monkeypatch, capfd):
    monkeypatch.setenv("WEFT_BOUND", "1")

    def f():
        return 1

    with weft.Runtime(workers=2, devices="cpu", policy="dmda") as rt:
        assert rt.spawn(f, placement=weft.cpu).result() == 1
        check(rt.bound())
    err = capfd.readouterr().err
    assert "weft: WEFT_BOUND: makespan " in err and "(1 task, 0 without a model)" in err, err
    # bound=False overrides the environment
    with weft.Runtime(workers=1, devices="cpu", bound=False) as rt:
        with pytest.raises(ValueError):
            rt.bound()
    assert "WEFT_BOUND" not in capfd.readouterr().err
