"""A smoke run of bench/py/overheads.py (Python's overheads beside the
naive ways): tiny sizes, chains and rounds; checks that every part ran
(overheads.py checks each run's results itself: the hand-offs share memory
or copy, every chain added once per task) and the output's form, not the
timings."""
import importlib.util
import pathlib
import re

import pytest

pytest.importorskip("numpy")

OVERHEADS_PY = pathlib.Path(__file__).resolve().parents[2] / "bench" / "py" / "overheads.py"


def load():
    spec = importlib.util.spec_from_file_location("weft_overheads_bench", OVERHEADS_PY)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(120)
def test_overheads_smoke(capsys):
    if not hasattr(__import__("numpy"), "from_dlpack"):
        pytest.skip("NumPy without from_dlpack (before 1.22): the DLPack hand-off cannot run")
    ov = load()
    lines = ov.main(["--reps", "2", "--sizes", "64,4096", "--chain", "20", "--kernel-us", "5", "--calls", "50",
                     "--no-busy-check"])
    out = capsys.readouterr().out
    want = [f"handoff_{w}_{s}" for s in ("64B", "4KiB") for w in ("buffer", "array_interface", "dlpack")]
    want += ["events_vs_sync", "view_task"]
    assert list(lines) == want
    for name in want:
        assert lines[name] > 0, name
        assert re.search(rf"^overhead_{name} weft [0-9]+\.[0-9]{{3}}$", out, re.M), name
    assert re.search(r"^  ordered by events \(the body only queues\) +[0-9.]+$", out, re.M), out
    assert re.search(r"^  one call in a body: context\(\) [0-9.]+, ctx\.view\(0\) [0-9.]+, ctx\.array\(0\) [0-9.]+$",
                     out, re.M), out


def test_overheads_rejects_bad_sizes(capsys):
    ov = load()
    with pytest.raises(SystemExit):
        ov.main(["--sizes", "4"])
    assert "--sizes at least 8 bytes" in capsys.readouterr().err
