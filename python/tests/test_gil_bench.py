"""A smoke run of bench/py/gil.py (the GIL contention sweep): tiny sizes,
one round; checks that every system ran every body (gil.py checks each
run's results itself) and the output's form, not the timings."""
import importlib.util
import json
import pathlib
import re

import pytest

import weft

GIL_PY = pathlib.Path(__file__).resolve().parents[2] / "bench" / "py" / "gil.py"


def load():
    spec = importlib.util.spec_from_file_location("weft_gil_bench", GIL_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gil_sweep_smoke(capsys, tmp_path):
    gil = load()
    systems = "weft,weft_spin0,weft_pin,weft_hold0,weft_twin,threadpool"
    js = tmp_path / "gil.json"
    rows = gil.main(["--T", "50", "--f", "0,0.5", "--workers", "1,2", "--reps", "1", "--work-ms", "0.4",
                     "--systems", systems, "--no-busy-check", "--json", str(js)])
    out = capsys.readouterr().out
    # every point of the sweep: f values x worker counts x shapes, on the CPU
    # (every system) and on virtual GPUs (Weft's policies), a positive efficiency
    assert len(rows) == 2 * 2 * 2 * 2
    for row in rows:
        want = systems.split(",") if row["where"] == "cpu" else ["weft", "weft_spin0", "weft_pin", "weft_hold0", "weft_twin"]
        assert set(row["eff"]) == set(want)
        assert all(v > 0 for v in row["eff"].values())
        assert row["default_vs_best"] >= 1.0 and row["default_vs_twin"] >= 1.0
    assert {r["where"] for r in rows} == {"cpu", "vgpu"}
    # A chain on the workers is also timed outside its bodies.
    for row in rows:
        assert ("gap_us" in row) == (row["shape"] == "chain" and row["where"] == "cpu")
        if "gap_us" in row:
            assert set(row["gap_us"]) == set(row["eff"])
    assert re.search(r"^# calibration: [0-9.]+ ns per Python loop iteration$", out, re.M)
    ft = "" if gil.gil_enabled() else "_ft"
    for where in ("", "_vgpu"):
        for name in ("gil_eff_min_t200", "gil_eff_min_t50", "gil_chain_extra_us", "gil_chain_gap_us",
                     "gil_default_vs_best", "gil_default_vs_twin"):
            assert re.search(rf"^{name} weft{ft}{where} (n/a|-?[0-9.]+)$", out, re.M), name
        assert re.search(rf"^gil_eff_min_t50 weft{ft}{where} [0-9.]+$", out, re.M)
        assert re.search(rf"^gil_eff_min_t200 weft{ft}{where} n/a$", out, re.M)  # no T >= 200 here
    assert json.loads(js.read_text())["rows"] == json.loads(json.dumps(rows))


def test_gil_default_vs_best_is_paired():
    """The default against each other policy round by round: here each
    other policy is slower than the default in two rounds of three, so the
    default is the best policy (1.0).  Each round's least time of all three
    (the statistic before) read 1.11: the least of noisy times is biased."""
    gil = load()
    walls = {"weft": [1.0, 1.0, 1.0], "weft_spin0": [0.9, 1.1, 1.1], "weft_pin": [1.1, 0.9, 1.1]}
    assert gil.default_vs_best(walls, ["weft_spin0", "weft_pin"]) == 1.0
    walls["weft_pin"] = [0.9, 0.95, 0.95]  # faster every round: the default loses by its median ratio
    assert gil.default_vs_best(walls, ["weft_spin0", "weft_pin"]) == pytest.approx(1 / 0.95)


def test_gil_bounds():
    """The speed-up each point allows: Python parts one at a time under the
    GIL, C parts on the workers or one per virtual GPU, a chain on virtual
    GPUs a 2-stage pipeline."""
    b = load().bound
    assert b("indep", "cpu", 2, 0.0, True) == 2
    assert b("indep", "cpu", 2, 0.5, True) == 2
    assert b("indep", "cpu", 2, 1.0, True) == 1
    assert b("indep", "cpu", 1, 0.25, True) == 1
    assert b("indep", "cpu", 2, 1.0, False) == 2  # free-threaded: Python parts in parallel
    assert b("chain", "cpu", 2, 0.5, True) == 1
    assert b("indep", "vgpu", 1, 0.0, True) == 2  # C parts on both GPUs, whatever the workers
    assert b("chain", "vgpu", 2, 0.5, True) == 2
    assert b("chain", "vgpu", 2, 0.1, True) == pytest.approx(1 / 0.9)


def test_gil_heatmaps(tmp_path):
    pytest.importorskip("matplotlib", reason="gil_plot.py needs matplotlib (bench/requirements.txt)")
    gil = load()
    js = tmp_path / "gil.json"
    gil.main(["--T", "50,200", "--f", "0,1", "--workers", "2", "--reps", "1", "--work-ms", "0.4",
              "--systems", "weft,threadpool", "--no-busy-check", "--json", str(js)])
    spec = importlib.util.spec_from_file_location("weft_gil_plot", GIL_PY.parent / "gil_plot.py")
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)
    assert plot.main(["--json", str(js), "--out", str(tmp_path / "png")]) == 0
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert pngs == ["gil-heatmap-threadpool.png", "gil-heatmap-weft.png"]
    for p in pngs:
        assert (tmp_path / "png" / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gil_spin_adapts_both_ways(c_library):
    """Bodies that spend their time in C with the GIL released, then empty
    bodies: the workers stop spinning for each other's claim, then spin
    again; both kinds of bodies all run (the spin is a policy, never a
    condition for progress)."""
    lib = c_library("gilspin", "#include <unistd.h>\nvoid nap(unsigned us) { usleep(us); }\n")
    lib.nap.argtypes = [__import__("ctypes").c_uint]
    done = []
    with weft.Runtime(workers=2) as r:
        for i in range(200):
            r.spawn(lambda i=i: (lib.nap(200), done.append(i)))
        r.wait_all()
        for i in range(2000):
            r.spawn(done.append, i)
        r.wait_all()
    assert len(done) == 2200


@pytest.mark.timeout(300)
def test_gil_floor_smoke(capsys):
    """bench/py/gil_floor.py (the floor under the GIL sweep): every system
    runs, the output's form; not the timings.  Without the GIL (the
    free-threaded suite) its plain-threads form, and the systems that hand
    off or stand in for the GIL refused."""
    import sys

    has_gil = load().gil_enabled()
    spec = importlib.util.spec_from_file_location("weft_gil_floor", GIL_PY.parent / "gil_floor.py")
    floor = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(GIL_PY.parent))
    try:
        spec.loader.exec_module(floor)
        floor.main(["--T", "50", "--f", "0.5", "--reps", "1", "--work-ms", "0.4"])
        if not has_gil:
            with pytest.raises(SystemExit):
                floor.main(["--T", "50", "--reps", "1", "--systems", "weft,capi_pin"])
    finally:
        sys.path.remove(str(GIL_PY.parent))
    out, err = capsys.readouterr()
    fig = "gil_floor" if has_gil else "gil_floor_ft"
    for kind in ("condvar", "condvar_awake", "spin"):
        assert bool(re.search(rf"^gil_floor_handoff_us {kind} [0-9.]+$", out, re.M)) == has_gil, kind
    for s in (floor.DEFAULT if has_gil else floor.FT_DEFAULT).split(","):
        assert re.search(rf"^{fig}_eff {s} T=50 f=0.5 [0-9.]+$", out, re.M), s
    for w in ("weft", "weft_pin"):
        assert re.search(rf"^{fig}_{w}_vs_best T=50 f=0.5 [0-9.]+$", out, re.M), w
    if not has_gil:
        assert "capi_pin stands in for or hands off the GIL" in err


def test_wait_tail_smoke(capsys):
    spec = importlib.util.spec_from_file_location("weft_wait_tail", GIL_PY.parent / "wait_tail.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(["--links", "20", "--us", "5", "--runs", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^wait_tail_us weft [0-9.]+$", out, re.M)
