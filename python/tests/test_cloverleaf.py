"""CloverLeaf's Python driver (apps/cloverleaf/cloverleaf.py) against the
sequential oracle (clover_serial_run, C without weft): the same fields bit
for bit and the same summaries, on the CPU and on virtual GPUs (in their
checking mode), and a bad deck's error naming its line and keyword; and
across two MPI ranks under mpirun (the command line, and run(mpi=True)
giving every rank the whole fields), where Open MPI's mpirun is installed.

Skipped only when libclover_kernels.so cannot be found (the driver looks at
$CLOVER_KERNELS, beside the installed weft package, then in build/)."""
import importlib.util
import json
import os
import re
import subprocess
import sys
import time

import pytest

from mpi_helper import MPIRUN, mpirun as run_mpi

np = pytest.importorskip("numpy")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
APP = os.path.join(REPO, "apps", "cloverleaf")
DECKS = os.path.join(APP, "decks")


def _load_driver():
    spec = importlib.util.spec_from_file_location("cloverleaf", os.path.join(APP, "cloverleaf.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def clover():
    if not os.path.isfile(os.path.join(APP, "cloverleaf.py")):
        pytest.skip("apps/cloverleaf/cloverleaf.py is not in this tree")
    mod = _load_driver()
    try:
        mod.kernels()
    except mod.KernelsNotFound as e:
        pytest.skip(f"the CloverLeaf kernels library is not available: {e}")
    return mod


def rel(a, b):
    m = max(abs(a), abs(b))
    return 0.0 if m == 0 else abs(a - b) / m


def same_bits(a, b):
    """Equal bit for bit (NaNs and signed zeros included)."""
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


@pytest.fixture(scope="module")
def tp1(clover):
    deck = clover.load_deck(os.path.join(DECKS, "clover_tp1.in"))
    return deck, clover.serial_run(deck, 1)


@pytest.mark.parametrize("devices,chunks,check,split", [
    ("cpu", 1, False, None),             # split None: the default (on GPUs only)
    ("cpu", 2, False, None),
    ("cpu,vgpu:4", 0, False, None),
    ("cpu,vgpu:4", 0, True, None),       # WEFT_VGPU_CHECK=1: every queued kernel names what it reads and writes
    ("cpu", 2, False, True),             # the split on the CPU too
    ("cpu,vgpu:4", 0, True, False),      # and the halo updates whole on GPUs
])
def test_tp1_matches_oracle(clover, tp1, monkeypatch, devices, chunks, check, split):
    deck, ref = tp1
    if check:
        monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    else:
        monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    res = clover.run(deck, devices=devices, chunks=chunks, workers=2, fields=True, split=split)
    # split: viscosity and accelerate run as an interior and a border job a
    # chunk, the border's unpacking the staged ghosts
    did_split = split if split is not None else "vgpu" in devices
    calls = res.profile["viscosity"][0]
    assert calls == res.steps * res.nchunks * (2 if did_split else 1)
    assert ("halo_unpack" in res.profile) == did_split
    assert res.verified == 1, "test problem 1 must PASS"
    assert res.steps == ref.steps and res.time == ref.time
    assert res.nchunks == (4 if "vgpu" in devices else chunks)
    assert same_bits(res.density, ref.density)
    assert same_bits(res.energy, ref.energy)
    assert rel(res.sums[clover.CS_KE], ref.sums[clover.CS_KE]) <= 1e-12
    # summed over the same chunks in the same order, the summaries are the oracle's exactly
    assert res.sums == clover.serial_run(deck, res.nchunks).sums


def test_bm_short_cut_vgpu_matches_oracle(clover, monkeypatch):
    """clover_bm_short.in at 120 x 120 cells for 3 steps, on 4 virtual GPUs
    (halos through the communicator, reflect tasks, device replicas)."""
    monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    with open(os.path.join(DECKS, "clover_bm_short.in")) as f:
        text = f.read()
    text, n = re.subn(r"\b([xy]_cells)\s*=\s*\d+", r"\1=120", text)
    assert n == 2
    text, n = re.subn(r"\bend_step\s*=\s*\d+", "end_step=3", text)
    assert n == 1
    deck = clover.parse_deck(text, "clover_bm_short_cut.in")
    assert (deck.x_cells, deck.y_cells, deck.end_step) == (120, 120, 3)
    ref = clover.serial_run(deck, 1)
    res = clover.run(deck, devices="cpu,vgpu:4", workers=2, fields=True)
    assert (res.nchunks, res.steps) == (4, 3)
    assert same_bits(res.density, ref.density)
    assert same_bits(res.energy, ref.energy)
    ref4 = clover.serial_run(deck, 4)
    assert res.sums == ref4.sums and res.sums0 is not None
    assert rel(res.sums[clover.CS_KE], ref.sums[clover.CS_KE]) <= 1e-12


def _deck(clover, name, steps):
    """A deck of decks/, or ("bm_cut") clover_bm_short.in at 120 x 120
    cells for `steps` steps."""
    if name != "bm_cut":
        return clover.load_deck(os.path.join(DECKS, name))
    with open(os.path.join(DECKS, "clover_bm_short.in")) as f:
        text = f.read()
    text = re.sub(r"\b([xy]_cells)\s*=\s*\d+", r"\1=120", text)
    text = re.sub(r"\bend_step\s*=\s*\d+", f"end_step={steps}", text)
    return clover.parse_deck(text, "clover_bm_short_cut.in")


@pytest.mark.parametrize("deck_name,devices,chunks,check", [
    ("clover_tp1.in", "cpu", 2, False),
    ("clover_tp1.in", "cpu,vgpu:4", 0, True),      # every queued part names its second arrays
    ("bm_cut", "cpu", 4, False),                    # 2 x 2: corners between the chunks
    ("bm_cut", "cpu,vgpu:4", 0, False),
])
def test_split_advection_matches_oracle(clover, monkeypatch, deck_name, devices, chunks, check):
    """split_advection (run_weft.c's advect_split): the advection kernels
    as interior and border parts out of place over their staged updates,
    the second arrays swapped in after each border; the oracle's fields bit
    for bit."""
    if check:
        monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    else:
        monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    deck = _deck(clover, deck_name, 4)
    ref = clover.serial_run(deck, 1)
    res = clover.run(deck, devices=devices, chunks=chunks, workers=2, fields=True, split=True,
                     split_advection=True)
    n = res.steps * res.nchunks
    assert res.profile["advec_cell"][0] == 4 * n   # two kernels a step, an interior and a border each
    assert res.profile["advec_mom"][0] == 8 * n
    assert res.steps == ref.steps
    assert same_bits(res.density, ref.density)
    assert same_bits(res.energy, ref.energy)
    if deck_name == "clover_tp1.in":
        assert res.verified == 1
    assert res.sums == clover.serial_run(deck, res.nchunks).sums


@pytest.mark.parametrize("devices,cpu_chunks,check", [("cpu,vgpu:2", 2, False), ("cpu,vgpu:1", 2, True)])
def test_cpu_chunks_beside_gpu_chunks_match_oracle(clover, monkeypatch, tmp_path, devices, cpu_chunks, check):
    """Chunks on virtual GPUs and on the CPU in one run (cpu_chunks=; the
    halo updates on the host), clover_bm_short.in at 120 x 120 cells for 3
    steps (2 x 2 and 3 x 1 chunks): the oracle's fields bit for bit, the
    CPU chunks' kernels run on the host (no GPU in their trace)."""
    if check:
        monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    else:
        monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    with open(os.path.join(DECKS, "clover_bm_short.in")) as f:
        text = f.read()
    text = re.sub(r"\b([xy]_cells)\s*=\s*\d+", r"\1=120", text)
    text = re.sub(r"\bend_step\s*=\s*\d+", "end_step=3", text)
    deck = clover.parse_deck(text, "clover_bm_short_cut.in")
    ref = clover.serial_run(deck, 1)
    ngpu = int(devices.split(":")[1])
    trace = tmp_path / "trace.json"
    res = clover.run(deck, devices=devices, workers=2, fields=True, cpu_chunks=cpu_chunks, trace=str(trace))
    assert (res.nchunks, res.steps) == (ngpu + cpu_chunks, 3)
    # where each chunk's kernel tasks ran: chunk c on vgpu:c for c < ngpu, else on the host
    where = {}
    for e in json.loads(trace.read_text())["traceEvents"]:
        if e.get("cat") == "task" and re.fullmatch(r"\w+\.c\d+", e["name"]):
            where.setdefault(int(e["name"].rsplit(".c", 1)[1]), set()).add(e.get("args", {}).get("devices", "host"))
    assert where == {c: {f"vgpu:{c}"} if c < ngpu else {"host"} for c in range(ngpu + cpu_chunks)}, where
    assert same_bits(res.density, ref.density)
    assert same_bits(res.energy, ref.energy)
    assert rel(res.sums[clover.CS_KE], ref.sums[clover.CS_KE]) <= 1e-12


def test_cuda_kernels_load_and_refuse_a_bad_call(clover):
    """libclover_cuda_kernels.so (nvcc's build) loads beside the kernel
    library it links (call_cuda.c's call.c and halo.c), and its call entry
    refuses a call with more accesses than call.h allows before touching
    the device (the run itself needs a GPU: scripts/gpu-check.sh,
    clover-py; the same call on the emulation: the test below)."""
    cu = clover.cuda_kernels()
    if cu is None:
        pytest.skip("built without nvcc: no libclover_cuda_kernels.so")
    b = clover.CloverBound()
    b.n = clover.MAX_ACC + 1
    assert cu.clover_cu_bound_run(bytes(b), None) == -1


@pytest.fixture(scope="module")
def cuda_emu_lib(clover, tmp_path_factory):
    """libclover_cuda_kernels built over the host emulation of CUDA
    (apps/cloverleaf/cuda_emu/: kernels.cu as C++, a launch calling the
    kernel per thread, a reduction's threads as fibers), by the host's C++
    compiler, with call_cuda.c (C) over the kernel library the driver
    loaded, as CMake links it; skipped where there is none."""
    import shutil
    if os.environ.get("WEFT_PY_SANITIZER") == "address":
        # ASan warns once about the fibers' swapcontext, and the sanitized
        # suite counts any report as a failure; the C suite runs the
        # emulation under ASan (test_clover_cuemu, test_clover_cuvgpu)
        pytest.skip("the CUDA emulation's fibers make ASan print a warning")
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.skip("no C++ compiler to build kernels.cu over the CUDA emulation")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build call_cuda.c")
    d = tmp_path_factory.mktemp("cuemu")
    out, call_o = str(d / "libclover_cuda_kernels_emu.so"), str(d / "call_cuda.o")
    kern = clover.kernels()._name   # the kernel library's path: its call.c and halo.c
    p = subprocess.run([cc, "-std=c11", "-O1", "-fPIC", "-c", "-I" + APP, os.path.join(APP, "call_cuda.c"), "-o",
                        call_o], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    cmd = [cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-shared", "-fPIC", "-D_GNU_SOURCE",
           "-I" + os.path.join(APP, "cuda_emu"), "-I" + APP, os.path.join(APP, "kernels_cuemu.cpp"),
           os.path.join(APP, "cuda_emu", "cuda_emu.cpp"), call_o, kern,
           "-Wl,-rpath," + os.path.dirname(os.path.abspath(kern)), "-o", out]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return out


@pytest.mark.parametrize("deck_name,devices,check,split", [
    ("clover_tp1.in", "cpu,vgpu:2", False, None),   # split None: the default on GPUs (viscosity, accelerate)
    ("clover_tp1.in", "cpu,vgpu:4", True, None),    # every queued CUDA call names what it reads and writes
    ("bm_cut", "cpu,vgpu:4", False, None),          # 2 x 2
    ("bm_cut", "cpu,vgpu:4", True, "advection"),    # the advection split too: parts out of place
    ("clover_tp1.in", "cpu,vgpu:4", False, False),  # the halo updates whole
])
def test_cuda_path_on_the_emulation_matches_oracle(clover, cuda_emu_lib, monkeypatch, deck_name, devices, check,
                                                   split):
    """The driver's CUDA path (_cuda_body, the jobs' calls queued with
    kernels.cu's functions, call_cuda.c's unpack and split parts, the
    reductions into device copies) on virtual GPUs standing in for CUDA
    devices, kernels.cu on the host emulation: the oracle's fields bit for
    bit (the run on a real GPU: gpu-check.sh)."""
    if check:
        monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    else:
        monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    monkeypatch.setenv("CLOVER_CUDA_KERNELS", cuda_emu_lib)
    monkeypatch.setattr(clover, "_CU", None)      # load the emulated library, not an installed one
    monkeypatch.setattr(clover, "_CUDA_ON_VGPU", True)
    cu = clover.cuda_kernels()
    assert cu is not None
    import ctypes
    emu = ctypes.CDLL(cuda_emu_lib)               # the same library (loaded once): its own switches
    emu.clover_emu_set_any_memory(1)              # the virtual GPUs' replicas count as device memory
    emu.clover_emu_launches.restype = ctypes.c_ulonglong
    before = emu.clover_emu_launches()
    deck = _deck(clover, deck_name, 3)
    ref = clover.serial_run(deck, 1)
    try:
        res = clover.run(deck, devices=devices, workers=2, fields=True, split=split is not False,
                         split_advection=split == "advection")
    finally:
        emu.clover_emu_set_any_memory(0)
    assert emu.clover_emu_launches() > before, "no chunk took the CUDA path"
    # the border jobs unpacked their staged ghosts on the device (call_cuda.c)
    assert ("halo_unpack" in res.profile) == (split is not False)
    n = res.steps * res.nchunks
    assert res.profile["viscosity"][0] == n * (1 if split is False else 2)
    assert res.profile["advec_cell"][0] == 2 * n * (2 if split == "advection" else 1)
    assert res.steps == ref.steps
    assert same_bits(res.density, ref.density)
    assert same_bits(res.energy, ref.energy)
    if deck_name == "clover_tp1.in":
        assert res.verified == 1
    # kernels.cu's summary adds in a tree of its own: equal to 1e-12, not bit for bit
    for a, b in zip(res.sums, ref.sums):
        assert rel(a, b) <= 1e-12


def test_bad_deck_names_line_and_keyword(clover, tmp_path):
    bad = tmp_path / "clover_bad.in"
    bad.write_text("*clover\n state 1 density=0.2 energy=1.0\n x_cells=ten\n*endclover\n")
    with pytest.raises(clover.DeckError) as ei:
        clover.load_deck(str(bad))
    msg = str(ei.value)
    assert "clover_bad.in:3" in msg and "x_cells" in msg, msg
    with pytest.raises(ValueError, match=r"x_cells"):
        clover.parse_deck(bad.read_text(), "clover_bad.in")


def test_cli_prints_table_verification_and_profile(clover, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    rc = clover.main([os.path.join(DECKS, "clover_tp1.in"), "--devices", "cpu", "--chunks", "2", "--workers", "2",
                      "--trace", str(tmp_path / "trace.json")])
    out = capsys.readouterr().out
    assert rc == 0
    assert re.search(r"^ step:\s+75\s+0\.3000E\+01", out, re.M), out
    assert "Test problem 1: kinetic energy" in out and out.count("PASS") == 1
    assert "Profile (kernel time summed over chunks" in out and "advec_mom" in out
    assert "75 steps to time 3.000000 on 2 chunks (2 x 1)" in out
    assert (tmp_path / "trace.json").stat().st_size > 0
    bad = tmp_path / "clover_bad.in"
    bad.write_text("*clover\n x_cells=ten\n*endclover\n")
    assert clover.main([str(bad)]) == 2
    assert "x_cells" in capsys.readouterr().err


@pytest.mark.parametrize("devices", ["cpu", "cpu,vgpu:4"])
def test_dt_below_dtmin_raises(clover, devices, monkeypatch):
    """A step below dtmin ends the run with an error (the runtime closes cleanly)."""
    monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    deck = clover.load_deck(os.path.join(DECKS, "clover_tp1.in"))
    deck.dtmin = 1.0
    with pytest.raises(RuntimeError, match="dtmin"):
        clover.run(deck, devices=devices, workers=2)


@pytest.mark.parametrize("devices", ["cpu", "cpu,vgpu:4"])
def test_cli_no_exchange_and_traffic(clover, devices, capsys, monkeypatch):
    """--no-exchange: the chunks exchange no halos (the boundary still
    reflects): the run goes on, the results are not the deck's (FAIL, exit
    1), and the output says so; the memory traffic line is main.c's."""
    monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    rc = clover.main([os.path.join(DECKS, "clover_tp1.in"), "--devices", devices, "--chunks", "2", "--workers", "2",
                      "--no-exchange"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "FAIL" in out and "(--no-exchange: the chunks exchanged no halos" in out, out
    if hasattr(clover.kernels(), "clover_traffic_step_bytes"):
        assert re.search(r"^ Memory traffic \(the kernels' model, traffic\.c\): \d+ bytes per cell-step, "
                         r"[0-9.]+ GB/s achieved$", out, re.M), out
    # alone, one chunk has no neighbour: --no-exchange changes nothing
    res = clover.run(clover.load_deck(os.path.join(DECKS, "clover_tp1.in")), devices="cpu", chunks=1, workers=1,
                     no_exchange=True)
    assert res.verified == 1 and res.nranks == 1 and res.rank == 0


# --- across MPI ranks ------------------------------------------------------

needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="mpirun not installed (Open MPI): the MPI tests cannot run")


def mpirun(argv, np_=2, timeout=240):
    """Run `python argv...` on np_ ranks (mpi_helper's settings), from the
    repository; a run past the timeout fails the test with its output."""
    try:
        return run_mpi(argv, np_=np_, timeout=timeout, cwd=REPO, drop=("WEFT_VGPU_CHECK",))
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mpirun -np {np_} timed out after {timeout} s:\n{e.stdout or ''}{e.stderr or ''}")


@needs_mpirun
@pytest.mark.parametrize("devices,chunks", [("cpu", 2), ("cpu,vgpu:2", 4)])
def test_mpi_two_ranks_cli_matches_oracle(clover, tp1, devices, chunks):
    """mpirun -np 2 cloverleaf.py (MPI detected from mpirun's environment):
    each rank holds as many chunks as alone (1 on the CPU with one worker,
    one per virtual GPU), rank 0 alone prints, PASS, and the printed
    kinetic energy is the oracle's to 1e-12 relative."""
    deck, ref = tp1
    p = mpirun([os.path.join(APP, "cloverleaf.py"), "--devices", devices, "--workers", "1",
                os.path.join(DECKS, "clover_tp1.in")])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert p.stdout.count("CloverLeaf on Weft (Python driver)") == 1, out
    assert p.stdout.count("PASS") == 1 and "FAIL" not in p.stdout, out
    assert p.stdout.count("Profile (kernel time summed over chunks") == 1, out
    assert re.search(r"^ step:\s+75\s+0\.3000E\+01", p.stdout, re.M), out
    assert f"75 steps to time 3.000000 on {chunks} chunks ({chunks} x 1) over 2 rank(s)" in p.stdout, out
    if hasattr(clover.kernels(), "clover_traffic_step_bytes"):
        assert p.stdout.count(" Memory traffic (the kernels' model, traffic.c): ") == 1, out
    m = re.search(r"Test problem 1: kinetic energy (\S+) against", p.stdout)
    assert m, out
    ke = float(m.group(1))
    assert rel(ke, ref.sums[clover.CS_KE]) <= 1e-12, (ke, ref.sums[clover.CS_KE])
    assert rel(ke, clover.serial_run(deck, chunks).sums[clover.CS_KE]) <= 1e-12


MPI_SCRIPT = r"""
import importlib.util, os, re
spec = importlib.util.spec_from_file_location("cloverleaf", {app!r})
cl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cl)
with open({bm!r}) as f:
    text = f.read()
text = re.sub(r"\b([xy]_cells)\s*=\s*\d+", r"\1=60", text)
text = re.sub(r"\bend_step\s*=\s*\d+", "end_step=4", text)
deck = cl.parse_deck(text, "clover_bm_short_cut.in")
ref, ref4 = cl.serial_run(deck, 1), cl.serial_run(deck, 4)
png = os.path.join({tmp!r}, "density_%s.png")
for devices, chunks, cpu_chunks in (("cpu", 2, 0), ("cpu,vgpu:2", 0, 0), ("cpu,vgpu:1", 0, 1)):
    res = cl.run(deck, devices=devices, chunks=chunks, workers=1, fields=True, mpi=True, png=png % devices,
                 cpu_chunks=cpu_chunks)
    assert (res.nranks, res.nchunks, res.steps) == (2, 4, ref.steps), (res.nranks, res.nchunks, res.steps)
    assert res.density.tobytes() == ref.density.tobytes(), (res.rank, devices, "density")
    assert res.energy.tobytes() == ref.energy.tobytes(), (res.rank, devices, "energy")
    # the same chunks' sums, folded per rank then across ranks: 1e-12
    for a, b in zip(res.sums, ref4.sums):
        assert abs(a - b) <= 1e-12 * max(abs(a), abs(b)), (res.rank, devices, res.sums, ref4.sums)
    # rank 0 draws the whole mesh: byte for byte the picture of the oracle's density
    if res.rank == 0:
        ref_png = png % "oracle"
        assert cl.kernels().clover_write_png(os.fsencode(ref_png), ref.density.ctypes.data_as(cl.PD), deck.x_cells,
                                             deck.y_cells, deck.x_cells) == 0
        with open(png % devices, "rb") as f, open(ref_png, "rb") as g:
            got, want = f.read(), g.read()
        assert got[:4] == b"\x89PNG" and got == want, (devices, len(got), len(want))
    # one write(2) per line: the two ranks' lines must not interleave
    os.write(1, f"rank {{res.rank}} {{devices}} ok\n".encode())
"""


@needs_mpirun
def test_mpi_two_ranks_run_fields_match_oracle(clover, tmp_path):
    """run(mpi=True) on two ranks, two chunks each (the CPU: halos by the
    host task within a rank and by the ranks' exchange between them; two
    virtual GPUs: their communicator, then the ranks'; a virtual GPU's
    chunk and a CPU chunk, cpu_chunks=1: the host task, then the ranks'
    exchange): every rank gets
    the whole final density and energy, bit for bit the oracle's, and rank
    0's picture (png=) is byte for byte the one of the oracle's density."""
    script = tmp_path / "clover_mpi.py"
    script.write_text(MPI_SCRIPT.format(app=os.path.join(APP, "cloverleaf.py"),
                                        bm=os.path.join(DECKS, "clover_bm_short.in"), tmp=str(tmp_path)))
    p = mpirun([str(script)])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for r in (0, 1):
        for devices in ("cpu", "cpu,vgpu:2", "cpu,vgpu:1"):
            assert f"rank {r} {devices} ok" in p.stdout, out


# ---------------------------------------------------------------------------
# The Python kernels (kernels_numba.py, --kernels numba): each kernel against
# the C kernel on the same fields, and the driver with them against the
# driver with the C kernels and the oracle.  Numba compiles them once
# (cache=True keeps the code in apps/cloverleaf/__pycache__ for later runs).
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def kn(clover):
    pytest.importorskip("numba", reason="Numba does not import here (not installed, or no wheel for this "
                        "interpreter, e.g. free-threaded or sanitizer builds): the Python kernels cannot run")
    return clover.numba_kernels()


def _random_chunk(clover, nx, ny, seed):
    """Every field and the geometry of an nx x ny chunk, random: positive
    where the kernels divide by it, small and of both signs where it is a
    velocity, flux or pressure."""
    rng = np.random.default_rng(seed)
    f = [rng.uniform(0.5, 1.5, (ny + 5, nx + 5)) for _ in range(clover.CF_NFIELDS)]
    for i in (clover.CF_XVEL0, clover.CF_XVEL1, clover.CF_YVEL0, clover.CF_YVEL1, clover.CF_VOL_FLUX_X,
              clover.CF_VOL_FLUX_Y, clover.CF_MASS_FLUX_X, clover.CF_MASS_FLUX_Y, clover.CF_PRESSURE):
        f[i] = rng.uniform(-0.05, 0.05, (ny + 5, nx + 5))
    return f, rng.uniform(0.5, 1.5, clover.kernels().clover_geom_count(nx, ny))


def test_numba_kernels_match_c_kernels_bit_for_bit(clover, kn):
    """Every Python kernel (whole, and over each part of clover_split and
    clover_advec_split, in place and out of place), the reflection of every
    field at every edge and a staged update's unpack, on random fields:
    every field, the geometry and the results equal the C kernel's bit for
    bit, the work arrays' scratch rows included."""
    from ctypes import byref, c_double, c_int, POINTER
    lib = clover.kernels()
    nx, ny = 13, 11
    deck = clover.load_deck(os.path.join(DECKS, "clover_bm_short.in"))
    d = kn.deck_of(deck)
    chunk = clover.CloverChunk(3, 4, nx, ny, 15, -1, -1, -1, -1)
    R = clover.CloverRange

    def cview(f, g):
        v = clover.CloverView(nx, ny, nx + 5)
        for i, a in enumerate(f):
            v.f[i] = a.ctypes.data
        v.geom = g.ctypes.data
        return v

    fields = np.arange(18, dtype=np.int32)
    stage_fields = np.array([clover.CF_PRESSURE, clover.CF_XVEL0, clover.CF_MASS_FLUX_Y], dtype=np.int32)
    inner = clover.CloverChunk(3, 4, nx, ny, 0, 0, 2, 1, 3)     # neighbours on every side
    blocks = np.zeros((len(stage_fields), 9, 3), dtype=np.int64)
    strips = (clover.CloverStrip * 8)()
    for i, fl in enumerate(stage_fields):
        for b in range(lib.clover_halo_recv_blocks(byref(inner), int(fl), 2, strips, None)):
            blocks[i, b] = (strips[b].recv_off, strips[b].rows, strips[b].cols)
    assert blocks[:, :, 1].sum() > 0
    cases = {
        "initialise": (lambda v, o: lib.clover_k_initialise(byref(v), byref(deck), byref(chunk)),
                       lambda v, o: kn.initialise(v, d, 3, 4)),
        "generate": (lambda v, o: lib.clover_k_generate(byref(v), byref(deck)), lambda v, o: kn.generate(v, d)),
        "calc_dt": (lambda v, o: (lambda r: (r.dt, r.control, r.j, r.k))(
                        lib.clover_k_calc_dt(byref(v), byref(deck), byref(chunk))),
                    lambda v, o: kn.calc_dt(v, d, 3, 4)),
        "revert": (lambda v, o: lib.clover_k_revert(byref(v)), lambda v, o: kn.revert(v)),
        "reset_field": (lambda v, o: lib.clover_k_reset_field(byref(v)), lambda v, o: kn.reset_field(v)),
        "viscosity": (lambda v, o: lib.clover_k_viscosity(byref(v)), lambda v, o: kn.viscosity(v)),
        "field_summary": (lambda v, o: (lambda s: (lib.clover_k_field_summary(byref(v), s), list(s))[1])(
                              (c_double * 6)()),
                          lambda v, o: (lambda s: (kn.field_summary(v, s), s.tolist())[1])(np.zeros(6))),
        "halo_unpack": (lambda v, o: lib.clover_halo_unpack(byref(v), byref(o), byref(inner),
                                                           stage_fields.ctypes.data_as(POINTER(c_int)), 3, 2),
                        lambda v, o: kn.halo_unpack(v, o, stage_fields, 3, blocks)),
    }
    for p in (0, 1):
        cases[f"ideal_gas {p}"] = (lambda v, o, p=p: lib.clover_k_ideal_gas(byref(v), p),
                                   lambda v, o, p=p: kn.ideal_gas(v, p))
        cases[f"pdv {p}"] = (lambda v, o, p=p: lib.clover_k_pdv(byref(v), p, 0.013),
                             lambda v, o, p=p: kn.pdv(v, p, 0.013))
    for dt in (0.013, 0.05):
        cases[f"accelerate {dt}"] = (lambda v, o, dt=dt: lib.clover_k_accelerate(byref(v), dt),
                                     lambda v, o, dt=dt: kn.accelerate(v, dt))
        cases[f"flux_calc {dt}"] = (lambda v, o, dt=dt: lib.clover_k_flux_calc(byref(v), dt),
                                    lambda v, o, dt=dt: kn.flux_calc(v, dt))
    for r in kn.split(nx, ny, 1) + kn.split(nx + 1, ny + 1, 1):
        cases[f"viscosity_range {r}"] = (lambda v, o, r=r: lib.clover_k_viscosity_range(byref(v), byref(R(*r))),
                                         lambda v, o, r=r: kn.viscosity_range(v, r))
        cases[f"accelerate_range {r}"] = (
            lambda v, o, r=r: lib.clover_k_accelerate_range(byref(v), 0.013, byref(R(*r))),
            lambda v, o, r=r: kn.accelerate_range(v, 0.013, r))
    for dr in (1, 2):
        for sweep in (1, 2):
            cases[f"advec_cell {dr} {sweep}"] = (
                lambda v, o, dr=dr, sweep=sweep: lib.clover_k_advec_cell(byref(v), dr, sweep),
                lambda v, o, dr=dr, sweep=sweep: kn.advec_cell(v, dr, sweep))
            for r in kn.advec_split(nx, ny, 0, dr):
                cases[f"advec_cell_range {dr} {sweep} {r}"] = (
                    lambda v, o, dr=dr, sweep=sweep, r=r: lib.clover_k_advec_cell_range(byref(v), dr, sweep,
                                                                                       byref(R(*r)), byref(o)),
                    lambda v, o, dr=dr, sweep=sweep, r=r: kn.advec_cell_range(v, dr, sweep, r, o))
            for vel in (clover.CF_XVEL1, clover.CF_YVEL1):
                cases[f"advec_mom {vel} {dr} {sweep}"] = (
                    lambda v, o, vel=vel, dr=dr, sweep=sweep: lib.clover_k_advec_mom(byref(v), vel, dr, sweep),
                    lambda v, o, vel=vel, dr=dr, sweep=sweep: kn.advec_mom(v, vel, dr, sweep))
                for r in kn.advec_split(nx, ny, 1, dr):
                    cases[f"advec_mom_range {vel} {dr} {sweep} {r}"] = (
                        lambda v, o, vel=vel, dr=dr, sweep=sweep, r=r: lib.clover_k_advec_mom_range(
                            byref(v), vel, dr, sweep, byref(R(*r)), byref(o)),
                        lambda v, o, vel=vel, dr=dr, sweep=sweep, r=r: kn.advec_mom_range(v, vel, dr, sweep, r, o))
    for edges in (1, 2, 4, 8, 15):
        for depth in (1, 2):
            cases[f"reflect {edges} {depth}"] = (
                lambda v, o, e=edges, dp=depth: lib.clover_k_reflect(byref(v), fields.ctypes.data_as(POINTER(c_int)),
                                                                    len(fields), dp, e),
                lambda v, o, e=edges, dp=depth: kn.reflect(v, fields, len(fields), dp, e))
    bad = []
    for i, (name, (c_fn, nb_fn)) in enumerate(cases.items()):
        (fa, ga), (oa, _) = _random_chunk(clover, nx, ny, i), _random_chunk(clover, nx, ny, 1000 + i)
        (fb, gb), (ob, _) = _random_chunk(clover, nx, ny, i), _random_chunk(clover, nx, ny, 1000 + i)
        rc = c_fn(cview(fa, ga), cview(oa, ga))
        rn = nb_fn(kn.View(nx, ny, tuple(fb), gb), kn.View(nx, ny, tuple(ob), gb))
        if (tuple(rc) if isinstance(rc, (list, tuple)) else rc) != (tuple(rn) if isinstance(rn, (list, tuple))
                                                                    else rn):
            bad.append(f"{name}: returned {rc} (C) and {rn} (Numba)")
        for what, xs, ys in (("field", fa, fb), ("out", oa, ob)):
            for fi, (x, y) in enumerate(zip(xs, ys)):
                if not same_bits(x, y):
                    bad.append(f"{name}: {what} {clover.FIELD_NAMES[fi]} differs")
        if not same_bits(ga, gb):
            bad.append(f"{name}: the geometry differs")
    assert not bad, "\n".join(bad)


def _numba_case(clover, deck_name, steps=4):
    return _deck(clover, deck_name, steps)


@pytest.mark.parametrize("deck_name,devices,chunks,check,split_adv", [
    ("clover_tp1.in", "cpu", 2, False, False),
    ("clover_tp1.in", "cpu,vgpu:4", 0, True, False),    # checking mode: each queued kernel names its accesses
    ("bm_cut", "cpu", 4, False, False),                 # 2 x 2: corners between the chunks
    ("bm_cut", "cpu,vgpu:4", 0, False, False),
    ("bm_cut", "cpu,vgpu:4", 0, False, True),           # the advection split: parts out of place
])
def test_numba_kernels_driver_matches_c_kernels(clover, kn, monkeypatch, deck_name, devices, chunks, check,
                                                split_adv):
    """--kernels numba: the same task graph (the same calls per kernel),
    test problem 1 PASSes, and the fields and field summaries are the C
    kernels' (and the oracle's) bit for bit."""
    if check:
        monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    else:
        monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    deck = _numba_case(clover, deck_name)
    kw = dict(devices=devices, chunks=chunks, workers=2, fields=True, split=True if split_adv else None,
              split_advection=split_adv)
    c = clover.run(deck, kernels="c", **kw)
    nb = clover.run(deck, kernels="numba", **kw)
    assert {k: n for k, (n, _) in nb.profile.items()} == {k: n for k, (n, _) in c.profile.items()}
    if deck_name == "clover_tp1.in":
        assert nb.verified == 1, "test problem 1 must PASS"
    assert (nb.steps, nb.time, nb.nchunks) == (c.steps, c.time, c.nchunks)
    for a, b in zip(nb.sums, c.sums):
        assert rel(a, b) <= 1e-12, (nb.sums, c.sums)
    assert nb.sums == c.sums and nb.sums0 == c.sums0, "bit for bit"
    assert same_bits(nb.density, c.density) and same_bits(nb.energy, c.energy)
    ref = clover.serial_run(deck, 1)
    assert same_bits(nb.density, ref.density) and same_bits(nb.energy, ref.energy)


def test_numba_kernels_choice_and_refusals(clover, kn, monkeypatch):
    """--kernels numba picks the numba.cuda kernels on CUDA devices and the
    njit ones elsewhere; where the numba.cuda kernels cannot run (virtual
    GPUs without Numba's CUDA simulator, as here: virtual GPUs standing in
    for CUDA devices, as the CUDA tests do; no GPU with numba-cuda; CUDA
    devices without a CUDA driver) the run is refused, saying what to
    write instead; an unknown kernels= names the choices."""
    kc = clover.numba_cuda_kernels()
    if kc.SIMULATING:
        pytest.skip("NUMBA_ENABLE_CUDASIM is set for the whole run: the simulator's rules are the subprocess test's")
    deck = clover.load_deck(os.path.join(DECKS, "clover_tp1.in"))
    assert clover._Sim._python_kernels("numba", ["vgpu"], ["vgpu"]) == (kn, None, [False])
    monkeypatch.setattr(clover, "_CUDA_ON_VGPU", True)
    with pytest.raises(ValueError, match="--kernels numba: the numba.cuda kernels run on virtual GPUs under Numba's "
                                         "CUDA simulator only: set NUMBA_ENABLE_CUDASIM=1"):
        clover.run(deck, devices="cpu,vgpu:1", kernels="numba")
    monkeypatch.setattr(clover, "_CUDA_ON_VGPU", False)
    with pytest.raises(ValueError, match="--kernels numba-cuda: the numba.cuda kernels run on virtual GPUs under"):
        clover.run(deck, devices="cpu,vgpu:2", kernels="numba-cuda")
    with pytest.raises(ValueError, match="this run has no GPU: use --kernels numba on the CPU"):
        clover.run(deck, devices="cpu", kernels="numba-cuda")
    if not kc.cuda.is_available():
        with pytest.raises(ValueError, match="numba.cuda finds no CUDA driver or device.*use --kernels c"):
            clover._Sim._python_kernels("numba", ["cuda"], ["cuda"])
    with pytest.raises(ValueError, match="not one of c, numba, numba-cuda"):
        clover.run(deck, devices="cpu", kernels="fortran")


# ---------------------------------------------------------------------------
# The numba.cuda kernels (kernels_numba_cuda.py: kernels.cu in Python, for
# CUDA GPUs): the driver with them on virtual GPUs under Numba's CUDA
# simulator against the C kernels and kernels.cu (on the host emulation),
# and every kernel compiled to PTX without a fused multiply-add.  The
# simulator runs each CUDA thread as a Python thread: the whole of test
# problem 1 (75 steps) takes 379 s here on two virtual GPUs (PASS), so the
# deck is cut to NBC_STEPS steps (x and y sweeps three times each: about
# 33 s); the kernels' arithmetic is checked one by one on random fields
# besides.  The run on a GPU: scripts/gpu-check.sh, py-kernels.
# ---------------------------------------------------------------------------

NBC_STEPS = 6
NBC_DEVICES = "cpu,vgpu:2"


def _tp1_cut(clover, steps):
    with open(os.path.join(DECKS, "clover_tp1.in")) as f:
        text = f.read()
    return clover.parse_deck(text.replace("*endclover", f" end_step={steps}\n*endclover"), "clover_tp1_cut.in")


NBC_SIM_SCRIPT = r"""
import importlib.util, json, sys, time
import numpy as np
from numba import cuda
spec = importlib.util.spec_from_file_location("cloverleaf", {app!r})
cl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cl)
kc, kn = cl.numba_cuda_kernels(), cl.numba_kernels()
assert kc.SIMULATING, "NUMBA_ENABLE_CUDASIM=1 did not reach numba"
launches = [0]
launch = kc._launch

def counted(*a):
    launches[0] += 1
    launch(*a)

kc._launch = counted
with open({tp1!r}) as f:
    deck = cl.parse_deck(f.read().replace("*endclover", " end_step={steps}\n*endclover"), "clover_tp1_cut.in")
t0 = time.perf_counter()
res = cl.run(deck, devices={devices!r}, workers=2, fields=True, kernels="numba-cuda")
wall = time.perf_counter() - t0
np.savez({npz!r}, density=res.density, energy=res.energy)
# the rule: --kernels numba takes the numba.cuda kernels on CUDA devices
# (a run on a virtual GPU standing in for one, as the CUDA tests do: the
# path a CUDA GPU's run takes), the njit ones on virtual GPUs; under the
# simulator real CUDA devices are refused
with open({tp1!r}) as f:
    deck1 = cl.parse_deck(f.read().replace("*endclover", " end_step=1\n*endclover"), "clover_tp1_cut.in")
before = launches[0]
cl._CUDA_ON_VGPU = True
r1 = cl.run(deck1, devices="cpu,vgpu:1", workers=1, fields=True, kernels="numba")
cl._CUDA_ON_VGPU = False
np.savez({npz1!r}, density=r1.density, energy=r1.energy)
auto_launches = launches[0] - before
assert cl._Sim._python_kernels("numba", ["cuda"], ["vgpu"]) == (kn, kc, [True])
assert cl._Sim._python_kernels("numba", ["vgpu"], ["vgpu"]) == (kn, None, [False])
try:
    cl._Sim._python_kernels("numba", ["cuda"], ["cuda"])
    raise AssertionError("CUDA devices under the simulator were not refused")
except ValueError as e:
    assert "unset NUMBA_ENABLE_CUDASIM" in str(e), e
# the launchers' paths the driver does not take: calc_dt without WORK1 and
# field_summary with it (several runs: 24 x 24 cells), and pdv's flag
nx = ny = 24
rng = np.random.default_rng(7)
f = [rng.uniform(0.5, 1.5, (ny + 5, nx + 5)) for _ in range(kc.CF_NFIELDS)]
for i in (kc.CF_XVEL0, kc.CF_XVEL1, kc.CF_YVEL0, kc.CF_YVEL1, kc.CF_PRESSURE):
    f[i] = rng.uniform(-0.05, 0.05, (ny + 5, nx + 5))
geom = rng.uniform(0.5, 1.5, cl.kernels().clover_geom_count(nx, ny))
d = kn.deck_of(deck)
hv = kn.View(nx, ny, tuple(f), geom)
ref_dt = kn.calc_dt(hv, d, 0, 0)[0]
ref_sums = np.zeros(kc.CS_N)
kn.field_summary(hv, ref_sums)
s = cuda.stream()
dev = [cuda.to_device(a) for a in f]
direct = {{}}
for work in (True, False):
    v = kc.View(nx, ny, tuple(a if work or i != kc.CF_WORK1 else None for i, a in enumerate(dev)),
                cuda.to_device(geom), s)
    dt = cuda.to_device(np.full(1, np.inf))
    kc.calc_dt(v, d, dt)
    sums = cuda.to_device(np.full(kc.CS_N, -0.0))
    kc.field_summary(v, sums)
    direct[work] = (float(dt.copy_to_host()[0]), sums.copy_to_host().tolist())
err = cuda.to_device(np.zeros(1, np.int32))
kc.pdv(kc.View(nx, ny, tuple(dev), None, s), 1, 1e6, err)
# each launcher (whole, and over each part of the split) against the njit
# kernel (the C kernels' bits) on random fields: every field but the work
# arrays (kernels.cu's scratch is its own), the geometry and the result
# equal bit for bit
from ctypes import byref
nx, ny = 13, 11


def rand(seed):
    g = np.random.default_rng(seed)
    f = [g.uniform(0.5, 1.5, (ny + 5, nx + 5)) for _ in range(kc.CF_NFIELDS)]
    for i in (kc.CF_XVEL0, kc.CF_XVEL1, kc.CF_YVEL0, kc.CF_YVEL1, kc.CF_VOL_FLUX_X, kc.CF_VOL_FLUX_Y,
              kc.CF_MASS_FLUX_X, kc.CF_MASS_FLUX_Y, kc.CF_PRESSURE):
        f[i] = g.uniform(-0.05, 0.05, (ny + 5, nx + 5))
    return f, g.uniform(0.5, 1.5, cl.kernels().clover_geom_count(nx, ny))


fields = np.arange(18, dtype=np.int32)
stage_fields = np.array([kc.CF_PRESSURE, kc.CF_XVEL0, kc.CF_MASS_FLUX_Y], dtype=np.int32)
inner = cl.CloverChunk(3, 4, nx, ny, 0, 0, 2, 1, 3)     # neighbours on every side
blocks = np.zeros((len(stage_fields), 9, 3), dtype=np.int64)
strips = (cl.CloverStrip * 8)()
for i, fl in enumerate(stage_fields):
    for b in range(cl.kernels().clover_halo_recv_blocks(byref(inner), int(fl), 2, strips, None)):
        blocks[i, b] = (strips[b].recv_off, strips[b].rows, strips[b].cols)


def dev_dt(v, o):
    r = cuda.to_device(np.full(1, np.inf))
    kc.calc_dt(v, d, r)
    return float(r.copy_to_host()[0])


def dev_pdv(v, p):
    r = cuda.to_device(np.zeros(1, np.int32))
    kc.pdv(v, p, 0.013, r)
    return int(r.copy_to_host()[0])


cases = {{
    "initialise": (lambda v, o: kc.initialise(v, d, 3, 4), lambda v, o: kn.initialise(v, d, 3, 4)),
    "generate": (lambda v, o: kc.generate(v, d), lambda v, o: kn.generate(v, d)),
    "calc_dt": (dev_dt, lambda v, o: kn.calc_dt(v, d, 3, 4)[0]),
    "revert": (lambda v, o: kc.revert(v), lambda v, o: kn.revert(v)),
    "reset_field": (lambda v, o: kc.reset_field(v), lambda v, o: kn.reset_field(v)),
    "viscosity": (lambda v, o: kc.viscosity(v), lambda v, o: kn.viscosity(v)),
    "halo_unpack": (lambda v, o: kc.halo_unpack(v, o, stage_fields, 3, blocks),
                    lambda v, o: kn.halo_unpack(v, o, stage_fields, 3, blocks)),
}}
for p in (0, 1):
    cases[f"ideal_gas {{p}}"] = (lambda v, o, p=p: kc.ideal_gas(v, p), lambda v, o, p=p: kn.ideal_gas(v, p))
    cases[f"pdv {{p}}"] = (lambda v, o, p=p: dev_pdv(v, p), lambda v, o, p=p: kn.pdv(v, p, 0.013))
cases["accelerate"] = (lambda v, o: kc.accelerate(v, 0.013), lambda v, o: kn.accelerate(v, 0.013))
cases["flux_calc"] = (lambda v, o: kc.flux_calc(v, 0.013), lambda v, o: kn.flux_calc(v, 0.013))
for r in kn.split(nx, ny, 1) + kn.split(nx + 1, ny + 1, 1):
    cases[f"viscosity_range {{r}}"] = (lambda v, o, r=r: kc.viscosity_range(v, r),
                                     lambda v, o, r=r: kn.viscosity_range(v, r))
    cases[f"accelerate_range {{r}}"] = (lambda v, o, r=r: kc.accelerate_range(v, 0.013, r),
                                      lambda v, o, r=r: kn.accelerate_range(v, 0.013, r))
for dr in (1, 2):
    for sweep in (1, 2):
        cases[f"advec_cell {{dr}} {{sweep}}"] = (lambda v, o, dr=dr, sweep=sweep: kc.advec_cell(v, dr, sweep),
                                             lambda v, o, dr=dr, sweep=sweep: kn.advec_cell(v, dr, sweep))
        for r in kn.advec_split(nx, ny, 0, dr):
            cases[f"advec_cell_range {{dr}} {{sweep}} {{r}}"] = (
                lambda v, o, dr=dr, sweep=sweep, r=r: kc.advec_cell_range(v, dr, sweep, r, o),
                lambda v, o, dr=dr, sweep=sweep, r=r: kn.advec_cell_range(v, dr, sweep, r, o))
        for vel in (kc.CF_XVEL1, kc.CF_YVEL1):
            cases[f"advec_mom {{vel}} {{dr}} {{sweep}}"] = (
                lambda v, o, vel=vel, dr=dr, sweep=sweep: kc.advec_mom(v, vel, dr, sweep),
                lambda v, o, vel=vel, dr=dr, sweep=sweep: kn.advec_mom(v, vel, dr, sweep))
            for r in kn.advec_split(nx, ny, 1, dr):
                cases[f"advec_mom_range {{vel}} {{dr}} {{sweep}} {{r}}"] = (
                    lambda v, o, vel=vel, dr=dr, sweep=sweep, r=r: kc.advec_mom_range(v, vel, dr, sweep, r, o),
                    lambda v, o, vel=vel, dr=dr, sweep=sweep, r=r: kn.advec_mom_range(v, vel, dr, sweep, r, o))
for edges, depth in ((15, 1), (15, 2), (5, 2), (10, 2)):
    cases[f"reflect {{edges}} {{depth}}"] = (
        lambda v, o, e=edges, dp=depth: kc.reflect(v, fields, len(fields), dp, e),
        lambda v, o, e=edges, dp=depth: kn.reflect(v, fields, len(fields), dp, e))
kernel_bad = []
for i, (name, (fc, fn)) in enumerate(cases.items()):
    (fa, ga), (oa, _) = rand(i), rand(1000 + i)
    (fb, gb), (ob, _) = rand(i), rand(1000 + i)
    da, doa, dga = [cuda.to_device(a) for a in fa], [cuda.to_device(a) for a in oa], cuda.to_device(ga)
    rc = fc(kc.View(nx, ny, tuple(da), dga, s), kc.View(nx, ny, tuple(doa), dga, s))
    rn = fn(kn.View(nx, ny, tuple(fb), gb), kn.View(nx, ny, tuple(ob), gb))
    if rc != rn:
        kernel_bad.append(f"{{name}}: returned {{rc}} (numba.cuda) and {{rn}} (njit)")
    for what, xs, ys in (("field", da, fb), ("out", doa, ob)):
        for fi, (x, y) in enumerate(zip(xs, ys)):
            if fi < kc.CF_WORK1 and x.copy_to_host().tobytes() != y.tobytes():
                kernel_bad.append(f"{{name}}: {{what}} {{kc.FIELD_NAMES[fi]}} differs")
    if dga.copy_to_host().tobytes() != gb.tobytes():
        kernel_bad.append(f"{{name}}: the geometry differs")
print(json.dumps(dict(sums=res.sums, sums0=res.sums0, steps=res.steps, time=res.time, verified=res.verified,
                      calls={{k: n for k, (n, _) in res.profile.items()}}, wall=wall, launches=launches[0],
                      ref_dt=ref_dt, ref_sums=ref_sums.tolist(), dt_work=direct[True][0], dt_one=direct[False][0],
                      sums_work=direct[True][1], sums_one=direct[False][1], pdv_err=int(err.copy_to_host()[0]),
                      pdv_ref=int(kn.pdv(hv, 1, 1e6)), auto_launches=auto_launches, auto_sums=r1.sums,
                      kernel_cases=len(cases), kernel_bad=kernel_bad)))
"""


@pytest.fixture(scope="module")
def nbc_sim(clover, kn, tmp_path_factory):
    """The driver with the numba.cuda kernels on NBC_DEVICES under Numba's
    CUDA simulator, tp1 cut to NBC_STEPS steps, in a subprocess
    (NUMBA_ENABLE_CUDASIM must be set before numba is imported), with the
    launchers' other paths on a random chunk: (its results, its fields,
    the subprocess's seconds)."""
    if os.environ.get("WEFT_PY_SANITIZER"):
        # the simulator starts a thread per CUDA thread, tens of thousands
        # a run, each one intercepted by the sanitizer's runtime; the
        # kernels are Python there, not the extension: make python-test
        # runs it
        pytest.skip("the CUDA simulator's thread per CUDA thread is too slow under a sanitizer")
    d = tmp_path_factory.mktemp("nbc_sim")
    script = d / "nbc_sim.py"
    script.write_text(NBC_SIM_SCRIPT.format(app=os.path.join(APP, "cloverleaf.py"), tp1=os.path.join(DECKS,
                      "clover_tp1.in"), steps=NBC_STEPS, devices=NBC_DEVICES, npz=str(d / "fields.npz"),
                      npz1=str(d / "fields1.npz")))
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "1"}
    env.pop("WEFT_VGPU_CHECK", None)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=840, env=env)
    secs = time.perf_counter() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1]), np.load(d / "fields.npz"), secs, np.load(d / "fields1.npz")


@pytest.mark.timeout(900)
def test_numba_cuda_kernels_on_the_simulator_match_c_kernels(clover, nbc_sim):
    """Under the simulator: every launcher of kernels_numba_cuda (whole,
    and over each part of the split, in place and out of place; the
    reflections, an unpack) on random fields gives the njit kernel's (so
    the C kernel's) fields, geometry and result bit for bit, the work
    arrays aside (kernels.cu's scratch is its own); calc_dt without WORK1
    and field_summary through it give the bits of the paths the driver
    takes, the minimum dt is the njit kernel's, and pdv raises its flag
    where the njit kernel does.  --kernels numba-cuda on two virtual GPUs
    (the split kernels' border jobs unpack and reflect with them): the
    same task graph as the C kernels', the same steps and time, the fields
    the C kernels' (and the oracle's) bit for bit, the field summaries to
    1e-12 (kernels.cu's tree of sums, not the host's compensated sum: the
    next test checks those bits).  And --kernels numba on a virtual GPU
    standing in for a CUDA device (the path of a CUDA GPU's run) takes the
    numba.cuda kernels: one step, the C kernels' fields."""
    res, fields, secs, fields1 = nbc_sim
    print(f"simulated run: {secs:.1f} s for {res['steps']} steps ({res['wall']:.1f} s in the loop)")
    assert res["kernel_cases"] > 60 and not res["kernel_bad"], "\n".join(res["kernel_bad"])
    deck = _tp1_cut(clover, NBC_STEPS)
    c = clover.run(deck, devices=NBC_DEVICES, workers=2, fields=True, kernels="c")
    assert res["launches"] > 0, "no numba.cuda kernel ran"
    assert res["calls"] == {k: n for k, (n, _) in c.profile.items()}
    assert (res["steps"], res["time"]) == (NBC_STEPS, c.time)
    assert same_bits(fields["density"], c.density) and same_bits(fields["energy"], c.energy)
    ref = clover.serial_run(deck, 1)
    assert same_bits(fields["density"], ref.density) and same_bits(fields["energy"], ref.energy)
    for got, want in ((res["sums"], c.sums), (res["sums0"], c.sums0)):
        for a, b in zip(got, want):
            assert rel(a, b) <= 1e-12, (got, want)
    assert res["dt_work"] == res["dt_one"] == res["ref_dt"]
    assert res["sums_work"] == res["sums_one"]
    for a, b in zip(res["sums_work"], res["ref_sums"]):
        assert rel(a, b) <= 1e-12, (res["sums_work"], res["ref_sums"])
    assert res["pdv_err"] == res["pdv_ref"] == 1
    assert res["auto_launches"] > 0, "--kernels numba on a CUDA device did not take the numba.cuda kernels"
    c1 = clover.run(_tp1_cut(clover, 1), devices="cpu,vgpu:1", workers=1, fields=True, kernels="c")
    assert same_bits(fields1["density"], c1.density) and same_bits(fields1["energy"], c1.energy)
    for a, b in zip(res["auto_sums"], c1.sums):
        assert rel(a, b) <= 1e-12, (res["auto_sums"], c1.sums)


@pytest.mark.timeout(900)
def test_numba_cuda_kernels_match_kernels_cu_on_the_emulation(clover, cuda_emu_lib, nbc_sim, monkeypatch):
    """The same run with kernels.cu (the C driver's CUDA path on the host
    emulation, virtual GPUs standing in for CUDA devices): the field
    summaries too are the same bits (the same tree of sums)."""
    res, fields, _, _ = nbc_sim
    monkeypatch.delenv("WEFT_VGPU_CHECK", raising=False)
    monkeypatch.setenv("CLOVER_CUDA_KERNELS", cuda_emu_lib)
    monkeypatch.setattr(clover, "_CU", None)
    monkeypatch.setattr(clover, "_CUDA_ON_VGPU", True)
    import ctypes
    emu = ctypes.CDLL(cuda_emu_lib)
    emu.clover_emu_set_any_memory(1)
    try:
        cu = clover.run(_tp1_cut(clover, NBC_STEPS), devices=NBC_DEVICES, workers=2, fields=True, kernels="c")
    finally:
        emu.clover_emu_set_any_memory(0)
    assert res["sums"] == cu.sums and res["sums0"] == cu.sums0
    assert same_bits(fields["density"], cu.density) and same_bits(fields["energy"], cu.energy)


def _every_launch(clover, kc, monkeypatch):
    """Every launcher of kernels_numba_cuda on a random chunk of NumPy
    arrays (every path: each direction and sweep, whole and over a range,
    with and without WORK1, reflections of 1 to 8 fields, an unpack), with
    kc._launch recording each kernel and its argument types instead of
    launching: {(kernel, signature)}."""
    from numba import typeof
    seen = set()
    monkeypatch.setattr(kc, "_launch", lambda kern, grid, block, stream, args:
                        seen.add((kern, tuple(typeof(a) for a in args))))
    nx, ny = 10, 6
    f, geom = _random_chunk(clover, nx, ny, 3)
    v = kc.View(nx, ny, tuple(f), geom, 0)
    nowork = v._replace(f=tuple(None if i == kc.CF_WORK1 else a for i, a in enumerate(f)))
    d = clover.numba_kernels().deck_of(clover.load_deck(os.path.join(DECKS, "clover_tp1.in")))
    red, err, sums = np.zeros(1), np.zeros(1, np.int32), np.zeros(kc.CS_N)
    kc.initialise(v, d, 0, 0)
    kc.generate(v, d)
    for p in (0, 1):
        kc.ideal_gas(v, p)
        kc.pdv(v, p, 0.01, err)
    kc.viscosity(v)
    kc.viscosity_range(v, (0, 3, 0, 2))
    kc.calc_dt(v, d, red)
    kc.calc_dt(nowork, d, red)
    kc.revert(v)
    kc.accelerate(v, 0.01)
    kc.accelerate_range(v, 0.01, (0, 2, 0, 2))
    kc.flux_calc(v, 0.01)
    for dr in (1, 2):
        for sweep in (1, 2):
            kc.advec_cell(v, dr, sweep)
            kc.advec_cell_range(v, dr, sweep, (0, 3, 0, 3), v)
            for vel in (kc.CF_XVEL1, kc.CF_YVEL1):
                kc.advec_mom(v, vel, dr, sweep)
                kc.advec_mom_range(v, vel, dr, sweep, (0, 3, 0, 3), v)
    kc.reset_field(v)
    kc.field_summary(v, sums)
    kc.field_summary(nowork, sums)
    for n in range(1, 9):
        kc.reflect(v, np.arange(n, dtype=np.int32), n, 2, 15)
    blocks = np.zeros((1, 9, 3), np.int64)
    blocks[0, 0] = (2 * (nx + 5), 3, 2)
    kc.halo_unpack(v, v, np.array([0], np.int32), 1, blocks)
    return seen


@pytest.mark.timeout(600)
def test_numba_cuda_kernels_compile_without_fused_multiply_add(clover, kn, monkeypatch):
    """Every kernel of kernels_numba_cuda, with the argument types its
    launchers give it, compiles to PTX (NVVM, the CUDA toolkit's, without
    a GPU) in which every floating-point product is mul.rn.f64 (never fused
    into an fma, as kernels.cu's -fmad=false), division and square root
    are IEEE's (div.rn, sqrt.rn), and no fma, mad or plain mul is left.
    Skipped where NVVM cannot be loaded."""
    kc = clover.numba_cuda_kernels()
    if kc.SIMULATING:
        pytest.skip("NUMBA_ENABLE_CUDASIM is set: numba.cuda compiles nothing under the simulator")
    from numba import cuda, float64
    try:
        cuda.compile_ptx(lambda a: None, (float64[:],), cc=(9, 0))
    except Exception as e:   # NvvmSupportError, CudaSupportError, OSError: no toolkit
        pytest.skip(f"NVVM (the CUDA toolkit's libnvvm) cannot be loaded here: {e}")
    launches = _every_launch(clover, kc, monkeypatch)
    kernels = {k for k, _ in launches}
    assert kernels == {getattr(kc, n) for n in dir(kc) if n.startswith("k_")}, "a kernel no launcher reaches"
    # Numba asks the current device for its compute capability when it
    # types a call of a device function; there is no GPU here: sm_90's
    import numba.cuda.dispatcher
    monkeypatch.setattr(numba.cuda.dispatcher, "get_current_device",
                        lambda: type("Device", (), {"compute_capability": (9, 0)})())
    bad, ops = [], {}
    for kern, sig in sorted(launches, key=lambda x: (x[0].__name__, str(x[1]))):
        ptx, _ = cuda.compile_ptx(kern.py_func, sig, cc=(9, 0))
        for op in re.findall(r"\b((?:fma|mad|mul|div|sqrt)(?:\.\w+)*\.f(?:32|64))\b", ptx):
            ops[op] = ops.get(op, 0) + 1
            if op not in ("mul.rn.f64", "div.rn.f64", "sqrt.rn.f64"):
                bad.append(f"{kern.__name__}: {op}")
    assert not bad, "\n".join(sorted(set(bad)))
    assert ops.get("mul.rn.f64", 0) > 300 and ops.get("div.rn.f64", 0) > 20 and ops.get("sqrt.rn.f64", 0) > 0, ops


MPI_NUMBA_SCRIPT = r"""
import importlib.util, os, re
spec = importlib.util.spec_from_file_location("cloverleaf", {app!r})
cl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cl)
with open({bm!r}) as f:
    text = f.read()
text = re.sub(r"\b([xy]_cells)\s*=\s*\d+", r"\1=120", text)
text = re.sub(r"\bend_step\s*=\s*\d+", "end_step=4", text)
for deck in (cl.load_deck({tp1!r}), cl.parse_deck(text, "clover_bm_short_cut.in")):
    ref = cl.serial_run(deck, 1)
    c = cl.run(deck, devices="cpu", chunks=1, workers=1, fields=True, mpi=True, kernels="c")
    nb = cl.run(deck, devices="cpu", chunks=1, workers=1, fields=True, mpi=True, kernels="numba")
    assert (nb.nranks, nb.nchunks, nb.steps) == (2, 2, ref.steps)
    assert nb.sums == c.sums, (nb.rank, nb.sums, c.sums)
    assert nb.density.tobytes() == ref.density.tobytes() and nb.energy.tobytes() == ref.energy.tobytes()
    if deck.test_problem == 1:
        assert nb.verified == 1
    os.write(1, f"rank {{nb.rank}} {{deck.x_cells}} ok\n".encode())
"""


@needs_mpirun
def test_mpi_two_ranks_numba_kernels_match_c_kernels(clover, kn, tmp_path):
    """Across 2 MPI ranks with --kernels numba: test problem 1 PASSes, and
    on it and the cut benchmark deck the summaries are the C kernels' bit
    for bit and the fields the oracle's (the Numba cache is warm from the
    tests above: the ranks load it)."""
    script = tmp_path / "clover_numba_mpi.py"
    script.write_text(MPI_NUMBA_SCRIPT.format(app=os.path.join(APP, "cloverleaf.py"),
                                              bm=os.path.join(DECKS, "clover_bm_short.in"),
                                              tp1=os.path.join(DECKS, "clover_tp1.in")))
    p = mpirun([str(script)])
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    for r in (0, 1):
        for n in (10, 120):
            assert f"rank {r} {n} ok" in p.stdout, out
