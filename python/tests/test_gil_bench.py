"""A smoke run of bench/py/gil.py (the GIL contention sweep): tiny sizes,
one round; checks that every system ran every body (gil.py checks each
run's results itself) and the output's form, not the timings."""
import importlib.util
import pathlib
import re

import weft

GIL_PY = pathlib.Path(__file__).resolve().parents[2] / "bench" / "py" / "gil.py"


def load():
    spec = importlib.util.spec_from_file_location("weft_gil_bench", GIL_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_gil_sweep_smoke(capsys):
    gil = load()
    systems = "weft,weft_spin0,threadpool"
    rows = gil.main(["--T", "50", "--f", "0,0.5", "--workers", "1,2", "--reps", "1", "--work-ms", "0.4",
                     "--systems", systems, "--no-busy-check"])
    out = capsys.readouterr().out
    # every point of the sweep, every system, a positive efficiency
    assert len(rows) == 2 * 2 * 2  # f values x worker counts x shapes
    for row in rows:
        assert set(row["eff"]) == set(systems.split(","))
        assert all(v > 0 for v in row["eff"].values())
        assert row["default_vs_best"] >= 1.0
    assert re.search(r"^# calibration: [0-9.]+ ns per Python loop iteration$", out, re.M)
    for name in ("gil_eff_min_t200", "gil_eff_min_t50", "gil_chain_extra_us", "gil_default_vs_best"):
        assert re.search(rf"^{name} weft (n/a|-?[0-9.]+)$", out, re.M), name
    assert re.search(r"^gil_eff_min_t50 weft [0-9.]+$", out, re.M)
    assert re.search(r"^gil_eff_min_t200 weft n/a$", out, re.M)  # no T >= 200 in this sweep


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
