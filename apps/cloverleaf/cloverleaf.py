"""CloverLeaf's Python driver over weft: the time-step loop of run_weft.c
(the C driver) written against weft's Python API, calling the same compiled
C kernels (libclover_kernels.so, as weft.native task bodies: no Python on
the workers) on the CPU and on virtual GPUs, and on CUDA GPUs the same CUDA kernels as the C driver
(libclover_cuda_kernels.so, built where nvcc is found), queued on each
task's stream (weft.context().streams) with the task's device replicas.

    python apps/cloverleaf/cloverleaf.py DECK [--devices LIST] [--chunks N]
                                              [--cpu-chunks N] [--workers N] [--trace FILE] [--png FILE]
                                              [--mpi] [--triad] [--no-exchange] [--split | --no-split]
                                              [--split-advection] [--kernels c|numba|numba-cuda]

--kernels: which kernels the kernel tasks run (the same task graph and the
same fields bit for bit, whichever):

  c           the compiled C kernels (default), and kernels.cu's on CUDA GPUs;
  numba       Python task bodies calling the Numba kernels: on the CPU and
              on virtual GPUs kernels_numba.py's (@numba.njit, GIL
              released), on CUDA GPUs kernels_numba_cuda.py's
              (@numba.cuda.jit, launched on the task's stream over its
              device replicas: ctx.numba_stream(), ctx.numba_array());
  numba-cuda  kernels_numba_cuda.py's on every GPU's chunks, CUDA GPUs and
              virtual GPUs alike, and kernels_numba.py's on the CPU's.  On
              virtual GPUs they run under Numba's CUDA simulator only
              (NUMBA_ENABLE_CUDASIM=1 set before numba is imported: the
              tests run them so); elsewhere the run is refused, saying so.

A run whose numba.cuda kernels cannot run where asked is refused with a
message naming what to write instead (numba-cuda with no GPU, or on
virtual GPUs without the simulator; CUDA devices under the simulator, or
without a CUDA driver numba.cuda can use); nothing falls back to other
kernels.

prints what build/apps/cloverleaf/weft-cloverleaf prints: the field summary
table, the verification line (a deck with a test_problem), the kernel
profile and the memory traffic achieved.  Exit status 0 (PASS, or no test
problem), 1 (FAIL), 2 (an error).

Across MPI ranks (--mpi, or started by mpirun: OMPI_COMM_WORLD_SIZE or
PMI_SIZE above 1, as main.c decides):

    mpirun -np 2 python apps/cloverleaf/cloverleaf.py --devices cpu --workers 1 DECK

each rank holds as many chunks as it would alone (rank r the chunks
r * nloc .. (r + 1) * nloc - 1 of the mesh decomposed into nranks * nloc),
and rank 0 prints.

As a module:

    import cloverleaf
    deck = cloverleaf.load_deck("apps/cloverleaf/decks/clover_tp1.in")
    res = cloverleaf.run(deck, devices="cpu", chunks=2)      # a Result
    ref = cloverleaf.serial_run(deck)                        # the oracle (C, no weft)
    assert (res.density == ref.density).all()

How it maps onto weft (the same structure as run_weft.c, read that file
beside this one):

  * The mesh is split into chunks (clover_decompose): one per GPU when the
    runtime has GPUs, else --chunks (default: one per worker) on the CPU.
  * Every field of every chunk is a NumPy array of shape (ny + 5, nx + 5)
    (two ghost layers around the chunk's cells; clover.h's layout), plus one
    geometry array per chunk, each registered once with rt.data.
  * Each kernel on each chunk is a task naming the fields it reads
    (reads=) and updates (readwrites=) exactly as run_weft.c's k_* functions
    do, so weft orders the kernels of the chunks by their data.  On the CPU
    and on virtual GPUs the body is native, call.h's clover_call_bound_run
    (weft.native): the worker calls it on the host arrays, or for a task
    placed on its chunk's GPU with device_data=True queues it on the task's
    stream over the device replicas, without Python.  On a CUDA GPU the
    Python body launches kernels.cu's kernel on the task's stream.  With
    --kernels numba the bodies call the Numba kernels instead (_nb_body;
    _nbc_body for the numba.cuda kernels, on the task's stream over its
    replicas as Numba device arrays).
  * Halo updates: the chunks on the mesh boundary reflect first, then
    every block a chunk takes from the chunks around it moves in one
    phase, across its faces and its corners (from the diagonal chunk, or
    on the mesh boundary from the face neighbour's reflected ghosts;
    clover_halo_block, run_weft.c's source).  Chunks on the CPU get one
    host task reflecting and copying every block; chunks on GPUs get a
    reflect task per boundary chunk, then one weft.Communicator exchange
    of the same blocks.
  * Split kernels (run_weft.c's "staged halo updates"; by default where
    the chunks are on GPUs; --split, --no-split): the updates before
    viscosity and accelerate move the blocks from other chunks (faces, corners from the diagonal chunk) into
    staging arrays beside the fields, reading the senders' fields only;
    each of the two kernels is then an interior job a chunk (reads the
    fields: runs while the exchange is in flight) and a border job, which
    copies the staged ghosts in (clover_halo_unpack), reflects on the
    mesh's boundary and computes the border ring (clover_split's strips,
    the kernels' _range versions).  On the CPU the staged update is one
    gather task per receiving chunk instead of one host task for all.
    --split-advection (off by default): the advection kernels split as well
    (run_weft.c's advect_split), their parts out of place into second
    arrays that swap with the fields after each border (_Sim.swapped: jobs
    and halo plans are made per swap state, which is none again at the end
    of every step).
  * The chunks' smallest dt (MIN), the PdV check (MAX) and the field
    summary (SUM) are weft reductions (reduces=), read and reset by one
    small host task at a time.
  * Across MPI ranks (run(mpi=True)): a weft.Communicator.mpi over the
    ranks (one member each, buffers in host memory).  Each halo update
    first reflects and moves the blocks between this rank's chunks (the
    host task, or the reflect tasks and the communicator of this rank's
    GPUs), then the blocks between ranks as one exchange on the ranks'
    communicator (every rank posts the whole group, None for the buffers
    of other ranks; a GPU's data is brought to the host for it by weft's
    data layer).  (run_weft.c's GPU chunks use one communicator of the
    ranks x GPUs instead; weft.Communicator.mpi has no gpus= yet, so here
    it is the two communicators in turn: the same blocks.)  Before the host reads them, the dt (MIN), the PdV flag (MAX)
    and the summary (SUM) are all-reduced across the ranks, folded in rank
    order.
"""
import argparse
import ctypes
import os
import struct
import sys
import threading
import time
from ctypes import POINTER, byref, c_char_p, c_double, c_int, c_size_t, c_uint, c_void_p

import numpy as np

import weft

__all__ = ["DeckError", "KernelsNotFound", "Result", "SerialResult", "kernels", "load_deck", "parse_deck", "run",
           "serial_run", "main"]

# ---------------------------------------------------------------------------
# The C side: constants and structures of clover.h / serial.h, mirrored
# member for member (ctypes lays them out with the C compiler's alignment).
# ---------------------------------------------------------------------------

CLOVER_MAX_STATES = 64
CS_VOL, CS_MASS, CS_IE, CS_KE, CS_PRESS, CS_N = range(6)
CLOVER_LEFT, CLOVER_RIGHT, CLOVER_BOTTOM, CLOVER_TOP = 1, 2, 4, 8

FIELD_NAMES = ("density0", "density1", "energy0", "energy1", "pressure", "viscosity", "soundspeed",
               "xvel0", "xvel1", "yvel0", "yvel1", "vol_flux_x", "vol_flux_y", "mass_flux_x", "mass_flux_y",
               "volume", "xarea", "yarea", "work1", "work2", "work3", "work4", "work5", "work6", "work7")
(CF_DENSITY0, CF_DENSITY1, CF_ENERGY0, CF_ENERGY1, CF_PRESSURE, CF_VISCOSITY, CF_SOUNDSPEED,
 CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y,
 CF_VOLUME, CF_XAREA, CF_YAREA, CF_WORK1, CF_WORK2, CF_WORK3, CF_WORK4, CF_WORK5, CF_WORK6,
 CF_WORK7) = range(len(FIELD_NAMES))
CF_NFIELDS = len(FIELD_NAMES)
WORK = tuple(range(CF_WORK1, CF_WORK7 + 1))


class CloverState(ctypes.Structure):
    _fields_ = [("defined", c_int), ("density", c_double), ("energy", c_double), ("xvel", c_double),
                ("yvel", c_double), ("geometry", c_int), ("xmin", c_double), ("xmax", c_double),
                ("ymin", c_double), ("ymax", c_double), ("radius", c_double)]


class CloverDeck(ctypes.Structure):
    _fields_ = [("nstates", c_int), ("state", CloverState * CLOVER_MAX_STATES),
                ("x_cells", c_int), ("y_cells", c_int),
                ("xmin", c_double), ("ymin", c_double), ("xmax", c_double), ("ymax", c_double),
                ("dtinit", c_double), ("dtmax", c_double), ("dtmin", c_double), ("dtrise", c_double),
                ("dtc_safe", c_double), ("dtu_safe", c_double), ("dtv_safe", c_double), ("dtdiv_safe", c_double),
                ("end_time", c_double), ("end_step", c_int), ("test_problem", c_int),
                ("summary_frequency", c_int), ("visit_frequency", c_int), ("profiler_on", c_int)]


class CloverChunk(ctypes.Structure):
    _fields_ = [("x0", c_int), ("y0", c_int), ("nx", c_int), ("ny", c_int), ("edges", c_uint),
                ("left", c_int), ("right", c_int), ("bottom", c_int), ("top", c_int)]


class CloverView(ctypes.Structure):
    _fields_ = [("nx", c_int), ("ny", c_int), ("pitch", c_size_t), ("f", c_void_p * CF_NFIELDS),
                ("geom", c_void_p)]


class CloverDt(ctypes.Structure):
    _fields_ = [("dt", c_double), ("control", c_int), ("j", c_int), ("k", c_int)]


class CloverStrip(ctypes.Structure):
    _fields_ = [("send_off", c_size_t), ("recv_off", c_size_t), ("rows", c_size_t), ("cols", c_size_t)]


class CloverRange(ctypes.Structure):
    _fields_ = [("j0", c_int), ("j1", c_int), ("k0", c_int), ("k1", c_int)]


class CloverClock(ctypes.Structure):
    _fields_ = [("step", c_int), ("time", c_double), ("dt", c_double), ("dtold", c_double)]


class CloverSerialOut(ctypes.Structure):
    _fields_ = [("density", POINTER(c_double)), ("energy", POINTER(c_double)), ("steps", c_int),
                ("time", c_double), ("chunks_x", c_int), ("chunks_y", c_int)]


# The sizes C gives them (x86-64 / aarch64 Linux); checked when the library loads.
_C_SIZES = {CloverState: 88, CloverDeck: 5776, CloverChunk: 36, CloverView: 224, CloverDt: 24, CloverStrip: 32,
            CloverClock: 32, CloverSerialOut: 40, CloverRange: 16}

PV = POINTER(CloverView)
PD = POINTER(c_double)


class KernelsNotFound(FileNotFoundError):
    """libclover_kernels.so is nowhere the driver looks."""


class DeckError(ValueError):
    """A deck that cannot be read or parsed; the message names the file, the
    line and the keyword (clover_deck_parse's message)."""


def _kernel_paths():
    """Where libclover_kernels.so may be, in order: $CLOVER_KERNELS, beside
    the installed weft package (the wheel installs it there), the
    repository's build folder."""
    paths = []
    env = os.environ.get("CLOVER_KERNELS")
    if env:
        paths.append(env)
    paths.append(os.path.join(os.path.dirname(weft.__file__), "libclover_kernels.so"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths.append(os.path.join(repo, "build", "apps", "cloverleaf", "libclover_kernels.so"))
    return paths


_LIB = None


def kernels():
    """The loaded kernel library (a ctypes.CDLL with every function's
    argtypes and restype set), loaded once.  Raises KernelsNotFound."""
    global _LIB
    if _LIB is not None:
        return _LIB
    tried = _kernel_paths()
    path = next((p for p in tried if os.path.isfile(p)), None)
    if path is None:
        raise KernelsNotFound("libclover_kernels.so not found; looked at " + ", ".join(tried) +
                              " (set CLOVER_KERNELS, or build it: cd build && make clover_kernels)")
    for cls, size in _C_SIZES.items():
        if ctypes.sizeof(cls) != size:
            raise RuntimeError(f"cloverleaf: ctypes lays out {cls.__name__} in {ctypes.sizeof(cls)} bytes, "
                               f"C in {size}: clover.h and this file disagree")
    lib = ctypes.CDLL(path)  # CDLL (not PyDLL): each call releases the GIL
    if not hasattr(lib, "clover_call_run"):
        raise RuntimeError(f"cloverleaf: {path} is older than this driver (it has no clover_call_run): rebuild it "
                           "(cd build && make clover_kernels, or pip install . again)")
    for cls, size_fn in ((CloverCall, lib.clover_call_sizeof), (CloverBound, lib.clover_bound_sizeof),
                         (CloverProf, lib.clover_prof_sizeof)):
        size_fn.restype = c_size_t
        if size_fn() != ctypes.sizeof(cls):
            raise RuntimeError(f"cloverleaf: ctypes lays out {cls.__name__} in {ctypes.sizeof(cls)} bytes, "
                               f"C in {size_fn()}: call.h and this file disagree")
    sig = {
        "clover_deck_parse": (c_int, [c_char_p, c_char_p, POINTER(CloverDeck), c_char_p, c_size_t]),
        "clover_deck_load": (c_int, [c_char_p, POINTER(CloverDeck), c_char_p, c_size_t]),
        "clover_decompose": (c_int, [POINTER(CloverDeck), c_int, POINTER(CloverChunk), POINTER(c_int),
                                     POINTER(c_int), c_char_p, c_size_t]),
        "clover_geom_count": (c_size_t, [c_int, c_int]),
        "clover_k_initialise": (None, [PV, POINTER(CloverDeck), POINTER(CloverChunk)]),
        "clover_k_generate": (None, [PV, POINTER(CloverDeck)]),
        "clover_k_ideal_gas": (None, [PV, c_int]),
        "clover_k_viscosity": (None, [PV]),
        "clover_k_viscosity_range": (None, [PV, POINTER(CloverRange)]),
        "clover_split": (None, [c_int, c_int, c_int, POINTER(CloverRange)]),
        "clover_k_calc_dt": (CloverDt, [PV, POINTER(CloverDeck), POINTER(CloverChunk)]),
        "clover_k_pdv": (c_int, [PV, c_int, c_double]),
        "clover_k_revert": (None, [PV]),
        "clover_k_accelerate": (None, [PV, c_double]),
        "clover_k_accelerate_range": (None, [PV, c_double, POINTER(CloverRange)]),
        "clover_k_flux_calc": (None, [PV, c_double]),
        "clover_k_advec_cell": (None, [PV, c_int, c_int]),
        "clover_k_advec_mom": (None, [PV, c_int, c_int, c_int]),
        "clover_k_advec_cell_range": (None, [PV, c_int, c_int, POINTER(CloverRange), PV]),
        "clover_k_advec_mom_range": (None, [PV, c_int, c_int, c_int, POINTER(CloverRange), PV]),
        "clover_advec_split": (None, [c_int, c_int, c_int, c_int, POINTER(CloverRange)]),
        "clover_k_reset_field": (None, [PV]),
        "clover_k_field_summary": (None, [PV, PD]),
        "clover_k_reflect": (None, [PV, POINTER(c_int), c_int, c_int, c_uint]),
        "clover_halo_strip": (None, [POINTER(CloverChunk), c_int, c_int, c_uint, POINTER(CloverStrip)]),
        "clover_halo_block": (None, [POINTER(CloverChunk), c_int, c_int, c_uint, POINTER(CloverStrip)]),
        "clover_halo_block_ghost": (None, [POINTER(CloverChunk), c_int, c_int, c_uint, c_uint, POINTER(CloverStrip)]),
        "clover_halo_unpack": (None, [PV, PV, POINTER(CloverChunk), POINTER(c_int), c_int, c_int]),
        "clover_halo_recv_blocks": (c_int, [POINTER(CloverChunk), c_int, c_int, POINTER(CloverStrip), POINTER(c_uint)]),
        "clover_next_dt": (c_int, [POINTER(CloverDeck), POINTER(CloverClock), c_double]),
        "clover_format_summary_header": (c_int, [c_char_p, c_size_t]),
        "clover_format_summary": (c_int, [c_char_p, c_size_t, c_int, c_double, PD]),
        "clover_format_verify": (c_int, [c_char_p, c_size_t, POINTER(CloverDeck), c_double]),
        "clover_reference_ke": (c_double, [c_int]),
        "clover_write_png": (c_int, [c_char_p, PD, c_int, c_int, c_size_t]),
        "clover_call_run": (c_int, [c_void_p]),
        "clover_call_bound_run": (c_int, [c_char_p]),
        "clover_call_sizeof": (c_size_t, []),
        "clover_bound_sizeof": (c_size_t, []),
        "clover_prof_sizeof": (c_size_t, []),
        "clover_serial_run": (c_int, [POINTER(CloverDeck), c_int, c_void_p, PD, POINTER(CloverSerialOut)]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    # Optional (a library built before they existed lacks them): STREAM
    # triad and the memory-traffic model (stream.c, traffic.c).
    for name, (res, args) in {"clover_triad_bw": (c_double, [c_size_t, c_int, c_int]),
                              "clover_traffic_step_bytes": (c_double, []),
                              "clover_traffic_summary_bytes": (c_double, [])}.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype, fn.argtypes = res, args
    _LIB = lib
    return lib


_kernel_lib = kernels   # run() takes a `kernels` argument (which kernels the tasks run)

_CU = None

# Tests only: virtual GPUs stand in for CUDA devices (their chunks take the
# CUDA path: kernels.cu's functions from libclover_cuda_kernels, which the
# test builds over the host emulation of CUDA, apps/cloverleaf/cuda_emu/),
# each chunk's CUDA call queued on the virtual GPU's stream, because the
# emulation runs a launch when it is made (run_weft.c's
# CLOVER_CUDA_ON_VGPU, test_clover_cuvgpu).
_CUDA_ON_VGPU = False


def cuda_kernels():
    """The CUDA kernels (libclover_cuda_kernels.so: kernels.cu and
    call_cuda.c, built where nvcc is found, beside libclover_kernels.so),
    loaded once with the signatures the driver calls set (clover_cu_bound_run,
    clover_cu_use_device); None when there is no such library.
    clover_cu_bound_run queues a bound call on the stream it is given and
    returns 0 or a cudaError_t value (call_cuda.h)."""
    global _CU
    if _CU is not None:
        return _CU or None
    paths = [os.path.join(os.path.dirname(p), "libclover_cuda_kernels.so") for p in _kernel_paths()]
    env = os.environ.get("CLOVER_CUDA_KERNELS")
    if env:
        paths.insert(0, env)
    path = next((p for p in paths if os.path.isfile(p)), None)
    if path is None:
        _CU = False
        return None
    lib = ctypes.CDLL(path)
    if not hasattr(lib, "clover_cu_bound_run"):
        raise RuntimeError(f"cloverleaf: {path} is older than this driver (it has no clover_cu_bound_run): "
                           "rebuild it (cd build && make clover_cuda_kernels, or pip install . again)")
    lib.clover_cu_bound_run.restype, lib.clover_cu_bound_run.argtypes = c_int, [c_char_p, c_void_p]
    lib.clover_cu_use_device.restype, lib.clover_cu_use_device.argtypes = c_int, [c_int]
    _CU = lib
    return lib


_NB = None


def _load_beside(name):
    """The module `name`.py beside this file, imported once (as `name`).
    Raises RuntimeError naming what is missing when Numba does not import."""
    try:
        import numba  # noqa: F401  (the kernels' compiler)
    except ImportError as e:
        raise RuntimeError(f"cloverleaf: --kernels numba needs Numba, which does not import here ({e}); "
                           "install it (pip install numba) or use --kernels c") from e
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    mod = sys.modules.get(name)
    if mod is None or getattr(mod, "__file__", None) != path:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def numba_kernels():
    """The Python kernels (kernels_numba.py beside this file, compiled by
    Numba), imported once.  Raises RuntimeError naming what is missing
    when Numba does not import."""
    global _NB
    if _NB is None:
        _NB = _load_beside("kernels_numba")
    return _NB


_NBC = None


def numba_cuda_kernels():
    """The Python kernels for CUDA GPUs (kernels_numba_cuda.py beside this
    file, compiled by numba.cuda on first launch; run by Numba's CUDA
    simulator where NUMBA_ENABLE_CUDASIM=1 was set before numba was
    imported), imported once.  Raises RuntimeError as numba_kernels()."""
    global _NBC
    if _NBC is None:
        _NBC = _load_beside("kernels_numba_cuda")
    return _NBC


# --kernels: c (the compiled C kernels, and kernels.cu's on CUDA GPUs);
# numba (kernels_numba.py's on the CPU and on virtual GPUs,
# kernels_numba_cuda.py's on CUDA GPUs); numba-cuda (kernels_numba_cuda.py's
# on every GPU: CUDA GPUs, and virtual GPUs under Numba's CUDA simulator;
# kernels_numba.py's on the CPU's chunks).
KERNEL_CHOICES = ("c", "numba", "numba-cuda")

# Numba's CUDA simulator runs one kernel at a time in a process: under it
# each kernel task's launches (run when made, in the body) hold this lock.
_SIM_LOCK = threading.Lock()


# ---------------------------------------------------------------------------
# Deck, oracle and text
# ---------------------------------------------------------------------------

def parse_deck(text, name="deck"):
    """Parse a deck's text; DeckError naming the line and keyword if bad."""
    lib = kernels()
    d, err = CloverDeck(), ctypes.create_string_buffer(512)
    data = text.encode() if isinstance(text, str) else bytes(text)
    if lib.clover_deck_parse(data, os.fsencode(name), byref(d), err, len(err)) != 0:
        raise DeckError(err.value.decode(errors="replace"))
    return d


def load_deck(path):
    """Read and parse a deck file; DeckError naming the line and keyword if bad."""
    lib = kernels()
    d, err = CloverDeck(), ctypes.create_string_buffer(512)
    if lib.clover_deck_load(os.fsencode(path), byref(d), err, len(err)) != 0:
        raise DeckError(err.value.decode(errors="replace"))
    return d


def summary_header():
    """The field summary table's header (a blank line, the titles), as C prints it."""
    buf = ctypes.create_string_buffer(256)
    kernels().clover_format_summary_header(buf, len(buf))
    return buf.value.decode()


def summary_row(step, t, sums):
    """One row of the table (Fortran's E16.4 columns), as C prints it."""
    buf = ctypes.create_string_buffer(640)
    kernels().clover_format_summary(buf, len(buf), step, t, (c_double * CS_N)(*sums))
    return buf.value.decode()


def verify(deck, ke):
    """(clover_verify's result: 1 PASS, 0 FAIL, -1 no reference; its line, maybe empty)."""
    buf = ctypes.create_string_buffer(512)
    v = kernels().clover_format_verify(buf, len(buf), byref(deck), ke)
    return v, buf.value.decode()


class SerialResult:
    """What the sequential oracle gives: sums (the last field summary),
    density and energy (the final density0 and energy0, arrays of shape
    (y_cells, x_cells), row 0 at the bottom), steps, time, chunks_x, chunks_y."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def serial_run(deck, nchunks=1):
    """Run the deck with the sequential oracle (clover_serial_run: C, no weft)."""
    lib = kernels()
    shape = (deck.y_cells, deck.x_cells)
    dens, ener = np.zeros(shape), np.zeros(shape)
    sums = (c_double * CS_N)()
    so = CloverSerialOut(dens.ctypes.data_as(PD), ener.ctypes.data_as(PD))
    if lib.clover_serial_run(byref(deck), nchunks, None, sums, byref(so)) != 0:
        raise RuntimeError("cloverleaf: the sequential oracle failed (its message is on stderr)")
    return SerialResult(sums=list(sums), density=dens, energy=ener, steps=so.steps, time=so.time,
                        chunks_x=so.chunks_x, chunks_y=so.chunks_y)


# ---------------------------------------------------------------------------
# The Weft driver
# ---------------------------------------------------------------------------

# Kernels as the profile names them (run_weft.c's kern_name, same order).
(K_INIT, K_GENERATE, K_IDEAL_GAS, K_VISCOSITY, K_CALC_DT, K_PDV, K_REVERT, K_ACCELERATE, K_FLUX_CALC,
 K_ADVEC_CELL, K_ADVEC_MOM, K_RESET, K_SUMMARY, K_REFLECT, K_HALO, K_UNPACK) = range(16)
KERN_NAMES = ("initialise", "generate", "ideal_gas", "viscosity", "calc_dt", "pdv", "revert", "accelerate",
              "flux_calc", "advec_cell", "advec_mom", "reset_field", "field_summary", "halo_reflect",
              "halo_exchange", "halo_unpack")

K_N = len(KERN_NAMES)
MAX_HALO_FIELDS = 10


class CloverProf(ctypes.Structure):
    _fields_ = [("ns", ctypes.c_uint64 * K_N), ("calls", ctypes.c_uint64 * K_N)]


class CloverCall(ctypes.Structure):
    """call.h's clover_call: one kernel call on one chunk, as both drivers
    run it (clover_call_run); its size is checked against the library's."""
    _fields_ = [("kern", c_int), ("part", c_int), ("a", c_int), ("b", c_int), ("c", c_int), ("dt", c_double),
                ("fields", c_int * MAX_HALO_FIELDS), ("nfields", c_int), ("depth", c_int), ("unpack", c_int),
                ("v", CloverView), ("out", CloverView), ("stage", CloverView), ("red", c_void_p),
                ("d", c_void_p), ("chunk", c_void_p), ("prof", c_void_p)]


MAX_ACC = 24   # call.h's CLOVER_CALL_MAX_ACC


class CloverBound(ctypes.Structure):
    """call.h's clover_bound without its pointers (they follow it): a call
    and what each of its task's accesses is to it, bound where it runs."""
    _fields_ = [("c", CloverCall), ("n", ctypes.c_int32), ("what", ctypes.c_byte * MAX_ACC), ("dt", c_double)]


_DT_KERNELS = (K_PDV, K_ACCELERATE, K_FLUX_CALC)   # their last argument is the step's dt

GEOM = -1       # an access to the chunk's geometry array (in a job's access list)
RED = -2        # the access to the reduction buffer
STAGE = -3      # STAGE - f: the access to field f's staging array (a split kernel's border)
OUT = STAGE - CF_NFIELDS   # OUT - f: the access to field f's second array (a split advection part)

# The parts of a split kernel (run_weft.c's PART_*): whole, its interior
# alone, or its border ring (after the staged halo update's unpack).
PART_WHOLE, PART_INTERIOR, PART_BORDER = range(3)
PART_SUFFIX = ("", ".interior", ".border")

# The fields whose halo updates are staged when split (run_weft.c's
# staged_fields), and the two staged updates: before viscosity and before
# accelerate (depth 1).
STAGED_FIELDS = (CF_PRESSURE, CF_ENERGY0, CF_DENSITY0, CF_XVEL0, CF_YVEL0, CF_VISCOSITY)
UPD_VISC = (CF_PRESSURE, CF_ENERGY0, CF_DENSITY0, CF_XVEL0, CF_YVEL0)
UPD_ACCEL = (CF_PRESSURE, CF_VISCOSITY)
# The advection split (run_weft.c's advect_split, --split-advection): its
# three staged updates (before the first advec_cell; after each advec_cell,
# that sweep's own mass flux only), the fields they stage, and the fields
# whose parts write second arrays, in the groups that swap together (after
# an advec_cell's border part density1 and energy1; after an advec_mom's,
# its velocity).
UPD_ADV_CELL = (CF_ENERGY1, CF_DENSITY1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y)
UPD_ADV_MOM = {1: (CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X),
               2: (CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_Y)}
STAGED_ADV = (CF_ENERGY1, CF_DENSITY1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X,
              CF_MASS_FLUX_Y)
SWAP_CELL, SWAP_XVEL, SWAP_YVEL = 1, 2, 4     # bits of _Sim.swapped
SWAP_FIELDS = {SWAP_CELL: (CF_DENSITY1, CF_ENERGY1), SWAP_XVEL: (CF_XVEL1,), SWAP_YVEL: (CF_YVEL1,)}
GPU_SHARE = 1.0 - 1.0 / 1024   # a kernel task's share of its GPU (a communication task takes 1/1024)

# What a reducing kernel does with its private copy of the reduction buffer.
RED_NONE, RED_DT_MIN, RED_ERR_MAX, RED_SUM = range(4)

_now = time.perf_counter_ns


class Result:
    """What run() gives: sums0 (the step-0 field summary), sums (the last),
    steps, summaries (field summaries within the timed loop), time
    (simulated), wall_s (the time-step loop's wall time), nchunks (of the
    whole mesh), chunks_x, chunks_y, rank, nranks (0 and 1 without MPI),
    verified (1 PASS, 0 FAIL, -1 no reference), density and energy (the
    final density0 and energy0, shape (y_cells, x_cells), row 0 at the
    bottom, every rank's chunks on every rank; None unless asked for),
    profile (kernel name -> (calls, seconds), this rank's kernels)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


class _Chunk:
    """One chunk: its place in the mesh, its arrays and their weft.Data."""

    def __init__(self, rt, index, c, gpu, split=False, kinds=(), split_adv=False):
        self.index, self.c, self.gpu = index, c, gpu
        self.cuda = gpu >= 0 and kinds[gpu] == "cuda"   # kernels.cu's kernels, else the C ones
        self.nbc = False   # --kernels numba(-cuda): kernels_numba_cuda.py's kernels (set by _Sim)
        self.nx, self.ny = c.nx, c.ny
        self.pitch = c.nx + 5
        # One allocation holding every field, then the geometry, as
        # run_weft.c lays a chunk out: the fields start at staggered
        # addresses (not all at one offset from a page boundary, as separate
        # large allocations would), which keeps kernels that stream several
        # fields at once clear of cache-set and 4K-aliasing conflicts
        # (measured: revert 3x, accelerate 1.3x slower with one allocation
        # per field).  Each field is a NumPy view of its own disjoint range,
        # registered on its own: weft orders them independently.
        shape = (c.ny + 5, c.nx + 5)
        fc, gc = shape[0] * shape[1], kernels().clover_geom_count(c.nx, c.ny)
        self.mem = np.zeros(fc * CF_NFIELDS + gc)
        self.arrays = [self.mem[f * fc:(f + 1) * fc].reshape(shape) for f in range(CF_NFIELDS)]
        self.geom = self.mem[fc * CF_NFIELDS:]
        self.data = [rt.data(a) for a in self.arrays]
        self.geom_data = rt.data(self.geom)
        self.placement = weft.gpu(gpu) if gpu >= 0 else None
        self.ref = byref(self.c)
        # The host view: every field's host array, for the host's halo
        # reflections (kernel tasks bind their calls to the addresses of
        # their accesses); nothing writes the struct after this, so
        # concurrent tasks of the chunk may share it.
        v = CloverView(c.nx, c.ny, self.pitch)
        for f, a in enumerate(self.arrays):
            v.f[f] = a.ctypes.data
        v.geom = self.geom.ctypes.data
        self.view = v
        self.view_ptr = ctypes.pointer(v)
        # Split kernels (run_weft.c's chunk_rt.stage): the staged halo
        # updates' ghosts as received, an array of the field's shape per
        # field of STAGED_FIELDS (the same offsets; only the ghost blocks
        # are written).
        self.stage_arrays = [None] * CF_NFIELDS
        self.stage_data = [None] * CF_NFIELDS
        if split:
            staged = STAGED_FIELDS + (STAGED_ADV if split_adv else ())
            self.stage_mem = np.zeros(fc * len(staged))
            for i, f in enumerate(staged):
                a = self.stage_mem[i * fc:(i + 1) * fc].reshape(shape)
                self.stage_arrays[f], self.stage_data[f] = a, rt.data(a)
        # The split advection's second arrays (run_weft.c's chunk_rt.out):
        # its parts read a field and write its second array; after a
        # kernel's border part the two swap (swap), so that arrays[f] and
        # data[f] always name the newest values.  The host views of every
        # state of the swaps (_Sim.swapped's bits; the reflections') are
        # made on first use: a view is never written once made (tasks
        # share it).
        self.out_arrays = [None] * CF_NFIELDS
        self.out_data = [None] * CF_NFIELDS
        self.views = {0: self.view_ptr}
        if split_adv:
            self.out_mem = np.zeros(fc * 4)
            for i, f in enumerate((CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1)):
                a = self.out_mem[i * fc:(i + 1) * fc].reshape(shape)
                self.out_arrays[f], self.out_data[f] = a, rt.data(a)

    def swap(self, fields, state):
        """The fields' arrays and second arrays trade places; the host view
        of the new state (`state`: _Sim.swapped after the swap)."""
        for f in fields:
            self.arrays[f], self.out_arrays[f] = self.out_arrays[f], self.arrays[f]
            self.data[f], self.out_data[f] = self.out_data[f], self.data[f]
        if state not in self.views:
            v = CloverView(self.nx, self.ny, self.pitch)
            for f, a in enumerate(self.arrays):
                v.f[f] = a.ctypes.data
            v.geom = self.geom.ctypes.data
            self.views[state] = ctypes.pointer(v)
        self.view_ptr = self.views[state]

    def handle(self, what):
        if what <= OUT:
            return self.out_data[OUT - what]
        if what <= STAGE:
            return self.stage_data[STAGE - what]
        return self.geom_data if what == GEOM else self.data[what]


class _Remote:
    """A chunk of another rank: its place in the mesh only (no arrays; its
    buffers in an exchange are None: not read here)."""

    def __init__(self, index, c):
        self.index, self.c, self.gpu = index, c, -1
        self.nx, self.ny = c.nx, c.ny
        self.pitch = c.nx + 5
        self.ref = byref(self.c)
        self.data = [None] * CF_NFIELDS
        self.stage_data = [None] * CF_NFIELDS


class _Job:
    """One kernel (with its fixed arguments) on one chunk, made once and
    spawned as often as the loop needs it: the task's name, the C function,
    the accesses as weft.Data tuples, and for a GPU body the field each
    access is (`order`, in weft's view order: reads, then readwrites, then
    the reduction).  A split kernel's border job also reads staging arrays
    (STAGE - f in `order`).  On the host and on virtual GPUs the task's
    body is native (weft.native of call.h's clover_call_bound_run: no
    Python runs on the worker): its argument is `head`, the bytes of the
    job's call up to dt (call.h's clover_bound, made by _Sim._bind: the
    kernel and its arguments, a border job's unpack and reflection, what
    each access is), then dt; weft appends the addresses of the task's
    accesses where it runs, clover_bound's pointers.  `arg` is that
    argument for a job without dt.  On a CUDA GPU the body appends them
    itself (`ptrs`) and queues the call with kernels.cu's functions
    (call_cuda.h's clover_cu_bound_run)."""

    __slots__ = ("chunk", "kern", "name", "reads", "readwrites", "reduces", "order", "nreads", "red", "part",
                 "head", "arg", "has_dt", "ptrs", "nb")

    def __init__(self, chunk, kern, reads, readwrites, red=RED_NONE, red_buf=None, red_op=None, part=PART_WHOLE):
        self.chunk, self.kern, self.red = chunk, kern, red
        self.part = part
        self.head = self.arg = None
        self.has_dt = kern in _DT_KERNELS
        self.name = f"{KERN_NAMES[kern]}{PART_SUFFIX[part]}.c{chunk.index}"
        self.reads = tuple(chunk.handle(w) for w in reads)
        self.readwrites = tuple(chunk.handle(w) for w in readwrites)
        self.reduces = ((red_buf, red_op),) if red != RED_NONE else ()
        self.order = tuple(reads) + tuple(readwrites) + ((RED,) if red != RED_NONE else ())
        self.nreads = len(reads)
        self.ptrs = struct.Struct(f"={len(self.order)}Q")   # on a CUDA GPU: the addresses after arg
        self.nb = None     # --kernels numba: the job's _NbCall


class _NbCall:
    """A job's call of the Python kernels (--kernels numba; call.c's
    clover_call_run in Python): `run(v, out, stage, red, dt)` calls the
    kernel (or its part's ranges) on kernels_numba Views; `unpack` (a border
    job's staged update: fields as an int32 array, their blocks, depth,
    edges) first copies the staged ghosts in and reflects; `host` the
    Views over the chunk's arrays (v, out, stage), used on the CPU, where
    the task's data is the host's; on a virtual GPU the body makes them
    from the task's addresses (what[] says what each access is)."""

    __slots__ = ("run", "unpack", "host", "what", "red_dtype")

    def __init__(self, run, unpack, host, what, red_dtype):
        self.run, self.unpack, self.host, self.what, self.red_dtype = run, unpack, host, what, red_dtype


_DT = struct.Struct("=d")


def _cuda_body(sim, job, arg):
    """A kernel task on a CUDA GPU: the job's call (arg: its bytes and dt,
    as a native body's) with the addresses of the task's device replicas
    appended, queued on the task's stream with kernels.cu's functions
    (call_cuda.h's clover_cu_bound_run: a border job's unpack and
    reflection, then the kernel, or its part's ranges).  The host does not
    wait: the launches are queued when the body returns."""
    ctx = weft.context()
    call = arg + job.ptrs.pack(*ctx.addresses)
    if _CUDA_ON_VGPU:
        # the emulation's launches made by the stream's thread, on a copy
        # of the call (queue_native's: raw memory, no Python object)
        n = len(job.order)
        ctx.queue_native(sim.cu.clover_cu_bound_run_now, call, reads=tuple(range(n)),
                         writes=tuple(range(job.nreads, n)))
        return
    # (the calls are counted in the profile; their time is the device's)
    cu = sim.cu
    rc = cu.clover_cu_use_device(ctx.ordinals[0])
    if rc == 0:
        rc = cu.clover_cu_bound_run(call, ctx.streams[0])
    if rc != 0:
        raise RuntimeError(f"cloverleaf: {job.name}: CUDA error {rc}")


class _At:
    """An array interface at an address (a task's access where it runs)."""
    __slots__ = ("__array_interface__",)

    def __init__(self, addr, shape, typestr):
        self.__array_interface__ = {"data": (addr, False), "shape": shape, "typestr": typestr, "version": 3}


def _nb_run(sim, job, v, out, stage, red, dt):
    """One Python-kernel call (call.c's clover_call_run): a border job's
    unpack and reflection, then the kernel; times into the profile."""
    nb, kn = job.nb, sim.kn
    t0 = _now()
    if nb.unpack is not None:
        fields, blocks, depth, edges = nb.unpack
        kn.halo_unpack(v, stage, fields, len(fields), blocks)
        t1 = _now()
        sim.prof.append((K_UNPACK, t1 - t0))
        t0 = t1
        if edges:
            kn.reflect(v, fields, len(fields), depth, edges)
            t1 = _now()
            sim.prof.append((K_REFLECT, t1 - t0))
            t0 = t1
    nb.run(v, out, stage, red, dt)
    sim.prof.append((job.kern, _now() - t0))


def _nb_body(sim, job, dt):
    """A kernel task's body with --kernels numba.  On the CPU: the kernel
    on the chunk's arrays (the task's data where it runs: the host's), the
    reduction on the task's private copy (its view); the kernels release
    the GIL.  On a virtual GPU (device_data=True, as the C kernels' native
    body): the kernel queued on the task's stream over arrays at the
    task's addresses there (the replicas), as weft.native queues the C
    call; the stream's thread runs it."""
    ctx = weft.context()
    nb = job.nb
    if job.chunk.gpu < 0:
        red = np.asarray(ctx.view(len(job.order) - 1)) if job.red != RED_NONE else None
        v, out, stage = nb.host
        _nb_run(sim, job, v, out, stage, red, dt)
        return
    ch = job.chunk
    shape, gshape = (ch.ny + 5, ch.nx + 5), (len(ch.geom),)
    f, o, st = [sim.nb_dummy(ch)] * CF_NFIELDS, [sim.nb_dummy(ch)] * CF_NFIELDS, [sim.nb_dummy(ch)] * CF_NFIELDS
    geom, red = sim.nb_dummy_geom(ch), None
    for w, addr in zip(nb.what, ctx.addresses):
        if w >= 0:
            f[w] = np.asarray(_At(addr, shape, "<f8"))
        elif w <= OUT:
            o[OUT - w] = np.asarray(_At(addr, shape, "<f8"))
        elif w <= STAGE:
            st[STAGE - w] = np.asarray(_At(addr, shape, "<f8"))
        elif w == GEOM:
            geom = np.asarray(_At(addr, gshape, "<f8"))
        else:
            red = np.asarray(_At(addr, (nb.red_dtype[1],), nb.red_dtype[0]))
    kn = sim.kn
    v = kn.View(ch.nx, ch.ny, tuple(f), geom)
    out = kn.View(ch.nx, ch.ny, tuple(o), geom)
    stage = kn.View(ch.nx, ch.ny, tuple(st), geom)
    n = len(job.order)
    ctx.queue(_nb_run, sim, job, v, out, stage, red, dt, reads=tuple(range(n)), writes=tuple(range(job.nreads, n)))


def _nbc_run(sim, job, v, out, stage, red, dt):
    """One call of the numba.cuda kernels (call_cuda.c's
    clover_cu_call_run): a border job's unpack and reflection, then the
    kernel, launched on v.stream.  The profile counts the calls; their time
    is the device's (0 here, as the C driver's CUDA calls)."""
    nb, kc = job.nb, sim.kc
    if nb.unpack is not None:
        fields, blocks, depth, edges = nb.unpack
        kc.halo_unpack(v, stage, fields, len(fields), blocks)
        sim.prof.append((K_UNPACK, 0))
        if edges:
            kc.reflect(v, fields, len(fields), depth, edges)
            sim.prof.append((K_REFLECT, 0))
    nb.run(v, out, stage, red, dt)
    sim.prof.append((job.kern, 0))


def _nbc_body(sim, job, dt):
    """A kernel task's body with the numba.cuda kernels
    (kernels_numba_cuda.py), on a CUDA GPU or on a virtual GPU under Numba's
    CUDA simulator: the task's accesses as Numba device arrays
    (ctx.numba_array: the replicas where the task runs, no copy; what[]
    says what each is), the kernels launched on the task's stream
    (ctx.numba_stream).  On CUDA the body returns once they are queued;
    under the simulator they run as they are launched, one task's at a
    time (_SIM_LOCK)."""
    ctx = weft.context()
    nb, ch, kc = job.nb, job.chunk, sim.kc
    f, o, st = [None] * CF_NFIELDS, [None] * CF_NFIELDS, [None] * CF_NFIELDS
    geom = red = None
    for i, w in enumerate(nb.what):
        a = ctx.numba_array(i)
        if w >= 0:
            f[w] = a
        elif w <= OUT:
            o[OUT - w] = a
        elif w <= STAGE:
            st[STAGE - w] = a
        elif w == GEOM:
            geom = a
        else:
            red = a
    s = ctx.numba_stream()
    v = kc.View(ch.nx, ch.ny, tuple(f), geom, s)
    out = kc.View(ch.nx, ch.ny, tuple(o), geom, s)
    stage = kc.View(ch.nx, ch.ny, tuple(st), geom, s)
    if kc.SIMULATING:
        with _SIM_LOCK:
            _nbc_run(sim, job, v, out, stage, red, dt)
    else:
        _nbc_run(sim, job, v, out, stage, red, dt)


def _host_halo_body(sim, copies, reflects):
    """The halo update of this rank's chunks on the CPU (one task for all
    of them): reflect at the boundary, then copy the blocks between them
    (faces and corners, in one phase).  --no-exchange: the reflection
    alone (copies None); across ranks the exchange with other ranks
    follows this task."""
    t0 = _now()
    reflect = sim.kn.reflect if sim.kn is not None else sim.lib.clover_k_reflect
    for view, fields, nfields, depth, edges in reflects:
        reflect(view, fields, nfields, depth, edges)
    t1 = _now()
    for dst, src in copies or ():
        dst[...] = src
    t2 = _now()
    sim.prof.append((K_REFLECT, t1 - t0))
    if copies is not None:
        sim.prof.append((K_HALO, t2 - t1))


def _gather_halo_body(sim, copies):
    """A staged halo update's blocks into one chunk's staging arrays, from
    this rank's chunks on the CPU (run_weft.c's gather_halo_body)."""
    t0 = _now()
    for dst, src in copies:
        dst[...] = src
    sim.prof.append((K_HALO, _now() - t0))


def _read_dt_body(sim):
    """Read and reset the dt (MIN) and PdV error (MAX) reductions."""
    dt, err = float(sim.dt_min[0]), int(sim.err[0])
    sim.dt_min[0] = np.inf
    sim.err[0] = 0
    return dt, err


def _read_sums_body(sim):
    """Read and reset the field summary's SUM reduction."""
    sums = sim.sums.tolist()
    sim.sums[:] = -0.0
    return sums


def _flip(edges):
    """The same faces seen from the other side (run_weft.c's flip)."""
    out = 0
    for a, b in ((CLOVER_LEFT, CLOVER_RIGHT), (CLOVER_RIGHT, CLOVER_LEFT), (CLOVER_BOTTOM, CLOVER_TOP),
                 (CLOVER_TOP, CLOVER_BOTTOM)):
        if edges & a:
            out |= b
    return out


def _neighbour(c, edge):
    return {CLOVER_LEFT: c.left, CLOVER_RIGHT: c.right, CLOVER_BOTTOM: c.bottom, CLOVER_TOP: c.top}[edge]


# A halo update's directions, run_weft.c's halo_dirs: the four faces, then
# the four corners (blocks from the diagonal chunks), all in one phase.
HALO_DIRS = (CLOVER_LEFT, CLOVER_RIGHT, CLOVER_BOTTOM, CLOVER_TOP, CLOVER_LEFT | CLOVER_BOTTOM,
             CLOVER_RIGHT | CLOVER_BOTTOM, CLOVER_LEFT | CLOVER_TOP, CLOVER_RIGHT | CLOVER_TOP)


def _transfer(src_member, dst_member, other, me, f, mine, theirs, staged=False):
    """The block of field f that chunk `me` takes from the chunk `other`
    across a face or corner, as a weft.Transfer between members (a chunk of another rank
    gives None: its side is not read here); staged: into me's staging array of f."""
    dst = me.stage_data[f] if staged else me.data[f]
    return weft.Transfer(src_member, dst_member, other.data[f], dst, mine.cols * 8,
                         src_offset=theirs.send_off * 8, dst_offset=mine.recv_off * 8, rows=mine.rows,
                         src_pitch=other.pitch * 8, dst_pitch=me.pitch * 8)


def _block(ch, f, off, rows, cols):
    """rows x cols doubles of chunk ch's field f at element offset off."""
    return _block_of(ch.arrays[f], ch.pitch, off, rows, cols)


def _block_of(a, pitch, off, rows, cols):
    """rows x cols doubles of the 2-D array a (rows pitch apart) at element offset off."""
    r, col = divmod(off, pitch)
    return a[r:r + rows, col:col + cols]


class _Sim:
    """One run: the runtime, the chunks, the jobs and halo plans (made on
    first use, then reused), the reduction buffers and the profile.

    net: a weft.Communicator.mpi over the ranks, or None (one process).
    Every rank has the same devices and options: nloc chunks each, this
    rank's being lo .. hi - 1 of the n = nloc * nranks of the mesh."""

    def __init__(self, rt, deck, chunks, out, net=None, no_exchange=False, cpu_chunks=0, split=None,
                 split_advection=False, kernels_="c"):
        self.rt, self.deck, self.out, self.net, self.no_exchange = rt, deck, out, net, bool(no_exchange)
        self.lib = lib = kernels()
        self.deck_ref = byref(deck)
        real_kinds = [d["kind"] for d in rt.devices[1:]]
        kinds = ["cuda" if k == "vgpu" else k for k in real_kinds] if _CUDA_ON_VGPU else real_kinds
        if kernels_ not in KERNEL_CHOICES:
            raise ValueError(f"cloverleaf: kernels={kernels_!r}: not one of {', '.join(KERNEL_CHOICES)}")
        # the Python kernels (--kernels numba, numba-cuda): kn on the CPU
        # (and virtual GPUs), kc on the GPUs whose gpu_nbc is set
        self.kn, self.kc, self.gpu_nbc = self._python_kernels(kernels_, kinds, real_kinds)
        self.nbdeck = self.kn.deck_of(deck) if self.kn is not None else None
        self._nb_dummies = {}
        # With the C kernels CUDA GPUs run kernels.cu's kernels
        # (libclover_cuda_kernels.so); virtual GPUs the C kernels on their
        # streams.
        self.cu = cuda_kernels() if "cuda" in kinds and self.kn is None else None
        if "cuda" in kinds and self.kn is None and self.cu is None:
            raise ValueError("cloverleaf: CUDA devices need the CUDA kernels (libclover_cuda_kernels.so), which "
                             "are built only where nvcc is found; none is beside " + _kernel_paths()[-1])
        self.ngpu = len(kinds)
        self.rank, self.nranks = (net.rank, net.size) if net is not None else (0, 1)
        self.nloc = self.ngpu if self.ngpu else (chunks if chunks > 0 else rt.workers)
        # cpu_chunks beside the GPUs' (run_weft.c's ncpu): this rank's first
        # ngpu chunks on the GPUs, the rest on the CPU, every halo update on
        # the host (weft brings the GPU chunks' fields there and back), and
        # across ranks the ranks' exchange after it
        self.ncpu = cpu_chunks if (cpu_chunks > 0 and self.ngpu) else 0
        self.nloc += self.ncpu
        # run_weft.c's split: the halo updates before viscosity and
        # accelerate staged, those kernels split (interior, then border);
        # by default (split None) where the chunks are on GPUs, as
        # run_weft.c's CLOVER_SPLIT_AUTO (on CUDA GPUs the border jobs'
        # unpack and ranges are call_cuda.c's)
        if split is None:
            split = self.ngpu > 0
        self.split = bool(split) and not self.no_exchange and not self.ncpu
        # the advection kernels split too (run_weft.c's split_adv; off by default)
        self.split_adv = self.split and bool(split_advection)
        self.swapped = 0   # SWAP_* bits: which fields' second arrays are the fields now (0 between steps)
        n = self.nloc * self.nranks
        self.lo, self.hi = self.rank * self.nloc, (self.rank + 1) * self.nloc
        cc = (CloverChunk * n)()
        cx, cy, err = c_int(), c_int(), ctypes.create_string_buffer(256)
        if lib.clover_decompose(byref(deck), n, cc, byref(cx), byref(cy), err, len(err)) != 0:
            raise ValueError("cloverleaf: " + err.value.decode(errors="replace"))
        self.n, self.cx, self.cy = n, cx.value, cy.value
        # Every chunk of the mesh, indexed as the decomposition numbers
        # them: this rank's with their arrays (on GPU c - lo), the others'
        # as places only.
        self.chunks = [_Chunk(rt, i, CloverChunk.from_buffer_copy(cc[i]),
                              i - self.lo if 0 <= i - self.lo < self.ngpu else -1, self.split, kinds,
                              self.split_adv)
                       if self.lo <= i < self.hi else _Remote(i, CloverChunk.from_buffer_copy(cc[i]))
                       for i in range(n)]
        self.mine = self.chunks[self.lo:self.hi]
        for ch in self.mine:
            ch.nbc = ch.gpu >= 0 and self.gpu_nbc[ch.gpu]
        # The reductions, each its own registered array (a reduction needs
        # memory registered as one range), reset by the host task reading it.
        self.dt_min = np.full(1, np.inf)
        self.err = np.zeros(1, dtype=np.int32)
        self.sums = np.full(CS_N, -0.0)
        self.dt_data, self.err_data, self.sums_data = rt.data(self.dt_min), rt.data(self.err), rt.data(self.sums)
        # This rank's GPUs (members numbered as its chunks, from lo).
        self.comm = weft.Communicator(runtime=rt) if self.ngpu > 1 and not self.ncpu else None
        self.gpu_halo = bool(self.ngpu) and not self.ncpu   # halo updates on the GPUs, else on the host
        self.jobs = {}
        self.halos = {}
        self.prof = []     # (kernel, ns) per call; list.append is atomic, bodies run concurrently
        self.cprof = CloverProf()   # the kernel calls' times (clover_call_run adds to it)
        # The kernel tasks' body on the host and on virtual GPUs (_Job):
        # called by the worker, or queued on the task's stream, without Python.
        self.native = weft.native(self.lib.clover_call_bound_run)

    @staticmethod
    def _python_kernels(kernels_, kinds, real_kinds):
        """(the njit kernels, kernels_numba.py, or None; the numba.cuda
        kernels, kernels_numba_cuda.py, or None; for each GPU whether its
        chunk runs the latter) for --kernels kernels_: numba runs the
        numba.cuda kernels on CUDA GPUs and the njit kernels elsewhere;
        numba-cuda the numba.cuda kernels on every GPU (virtual GPUs under
        Numba's CUDA simulator only) and the njit kernels on the CPU.
        ValueError where the numba.cuda kernels cannot run on those GPUs,
        saying what to write instead."""
        if kernels_ == "c":
            return None, None, [False] * len(kinds)
        kn = numba_kernels()
        nbc = [k == "cuda" or kernels_ == "numba-cuda" for k in kinds]
        if not any(nbc):
            if kernels_ == "numba-cuda":
                raise ValueError("cloverleaf: --kernels numba-cuda runs the numba.cuda kernels on the GPUs' chunks, "
                                 "and this run has no GPU: use --kernels numba on the CPU, or give GPUs (--devices "
                                 "cpu,cuda; virtual GPUs, cpu,vgpu:N, under Numba's CUDA simulator)")
            return kn, None, nbc
        kc = numba_cuda_kernels()
        on = {real_kinds[g] for g in range(len(kinds)) if nbc[g]}
        if kc.SIMULATING and "cuda" in on:
            raise ValueError(f"cloverleaf: --kernels {kernels_} on CUDA devices, but Numba runs its CUDA simulator "
                             "(NUMBA_ENABLE_CUDASIM=1), which cannot use device memory: unset NUMBA_ENABLE_CUDASIM")
        if not kc.SIMULATING and "vgpu" in on:
            raise ValueError(f"cloverleaf: --kernels {kernels_}: the numba.cuda kernels run on virtual GPUs under "
                             "Numba's CUDA simulator only: set NUMBA_ENABLE_CUDASIM=1 before numba is imported (in "
                             "the environment), or use --kernels numba (the njit kernels there)")
        if not kc.SIMULATING and not kc.cuda.is_available():
            raise ValueError(f"cloverleaf: --kernels {kernels_} runs the numba.cuda kernels on the CUDA devices, and "
                             "numba.cuda finds no CUDA driver or device it can use here (numba -s tells why): use "
                             "--kernels c")
        return kn, kc, nbc

    # -- kernels --------------------------------------------------------

    def job(self, c, key):
        """The job `key` (a kernel and its fixed arguments) on chunk c, made
        on first use.  The access lists are run_weft.c's k_* functions'."""
        j = self.jobs.get((c, key, self.swapped))
        if j is not None:
            return j
        ch = self.chunks[c]
        kind = key[0]
        if kind == K_INIT:
            j = _Job(ch, kind, (), (GEOM, CF_VOLUME, CF_XAREA, CF_YAREA))
        elif kind == K_GENERATE:
            j = _Job(ch, kind, (GEOM,), (CF_DENSITY0, CF_ENERGY0, CF_XVEL0, CF_YVEL0))
        elif kind == K_IDEAL_GAS:
            j = _Job(ch, kind, (CF_DENSITY1, CF_ENERGY1) if key[1] else (CF_DENSITY0, CF_ENERGY0),
                     (CF_PRESSURE, CF_SOUNDSPEED))
        elif kind == K_VISCOSITY:
            reads, writes = (GEOM, CF_DENSITY0, CF_PRESSURE, CF_XVEL0, CF_YVEL0), (CF_VISCOSITY,)
            part = key[1] if len(key) > 1 else PART_WHOLE
            if part == PART_WHOLE:
                j = _Job(ch, kind, reads, writes)
            else:
                j = self._split_job(ch, kind, reads, writes, part, key[2:])
        elif kind == K_CALC_DT:
            j = _Job(ch, kind,
                     (GEOM, CF_VOLUME, CF_XAREA, CF_YAREA, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY,
                      CF_SOUNDSPEED, CF_XVEL0, CF_YVEL0),
                     (CF_WORK1,), RED_DT_MIN, self.dt_min, weft.MIN)
        elif kind == K_PDV:
            j = _Job(ch, kind,
                     (CF_XAREA, CF_YAREA, CF_VOLUME, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY, CF_XVEL0,
                      CF_XVEL1, CF_YVEL0, CF_YVEL1),
                     (CF_DENSITY1, CF_ENERGY1, CF_WORK1), RED_ERR_MAX, self.err, weft.MAX)
        elif kind == K_REVERT:
            j = _Job(ch, kind, (CF_DENSITY0, CF_ENERGY0), (CF_DENSITY1, CF_ENERGY1))
        elif kind == K_ACCELERATE:
            reads = (CF_DENSITY0, CF_VOLUME, CF_XAREA, CF_YAREA, CF_PRESSURE, CF_VISCOSITY, CF_XVEL0, CF_YVEL0)
            writes = (CF_XVEL1, CF_YVEL1, CF_WORK1)
            part = key[1] if len(key) > 1 else PART_WHOLE
            if part == PART_WHOLE:
                j = _Job(ch, kind, reads, writes)
            else:
                j = self._split_job(ch, kind, reads, writes, part, key[2:])
        elif kind == K_FLUX_CALC:
            j = _Job(ch, kind, (CF_XAREA, CF_YAREA, CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1),
                     (CF_VOL_FLUX_X, CF_VOL_FLUX_Y))
        elif kind == K_ADVEC_CELL:
            mf = CF_MASS_FLUX_X if key[1] == 1 else CF_MASS_FLUX_Y
            if len(key) == 3:
                j = _Job(ch, kind, (GEOM, CF_VOLUME, CF_VOL_FLUX_X, CF_VOL_FLUX_Y),
                         (CF_DENSITY1, CF_ENERGY1, mf) + WORK)
            else:   # a split part, out of place (run_weft.c's k_advec_cell)
                part, upd = key[3:]
                j = self._split_job(ch, kind,
                                    (GEOM, CF_VOLUME, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_DENSITY1, CF_ENERGY1),
                                    (OUT - CF_DENSITY1, OUT - CF_ENERGY1, mf) + WORK, part, upd)
        elif kind == K_ADVEC_MOM:
            vel, dr = key[1:3]
            if len(key) == 4:
                j = _Job(ch, kind,
                         (GEOM, CF_VOLUME, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y, CF_DENSITY1),
                         (vel,) + WORK)
            else:   # a split part: only the sweep's own mass flux (the other is the next advec_cell's)
                part, upd = key[4:]
                j = self._split_job(ch, kind,
                                    (GEOM, CF_VOLUME, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_DENSITY1,
                                     CF_MASS_FLUX_X if dr == 1 else CF_MASS_FLUX_Y, vel),
                                    (OUT - vel,) + WORK, part, upd)
        elif kind == K_RESET:
            j = _Job(ch, kind, (CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1),
                     (CF_DENSITY0, CF_ENERGY0, CF_XVEL0, CF_YVEL0))
        elif kind == K_SUMMARY:
            j = _Job(ch, kind, (CF_VOLUME, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_XVEL0, CF_YVEL0), (),
                     RED_SUM, self.sums, weft.SUM)
        elif kind == K_REFLECT:
            j = _Job(ch, kind, (), key[1])
        else:
            raise ValueError(f"cloverleaf: no kernel {key!r}")
        self._bind(ch, key, j)
        if self.kn is not None:
            self._bind_nb(ch, key, j)
        self.jobs[(c, key, self.swapped)] = j
        return j

    def _split_job(self, ch, kind, reads, writes, part, upd):
        """A split kernel's interior or border job (run_weft.c's job_part):
        the border's job first copies the staged ghosts of the update's
        fields (upd: (fields, depth)) into the fields and reflects on the
        mesh's boundary (its call's unpack), so it writes those fields and
        reads their staging arrays.  A border job with upd None has no
        update to finish (an advection part after another kernel's border,
        which did)."""
        if part == PART_INTERIOR or upd is None:
            return _Job(ch, kind, reads, writes, part=part)
        fields = upd[0]
        rw = tuple(fields) + tuple(w for w in writes if w not in fields)
        rd = tuple(w for w in reads if w not in fields) + tuple(STAGE - f for f in fields)
        return _Job(ch, kind, rd, rw, part=part)

    def _bind(self, ch, key, j):
        """Job j's call (call.h's clover_bound; _Job says how it is used):
        the kernel, its fixed arguments from the key, its part, a border
        job's staged update (unpack) or the reflection's fields, and what
        each access is (j.order)."""
        kind = key[0]
        b = CloverBound()
        c = b.c
        c.kern, c.part = kind, j.part
        upd = None
        if kind in (K_IDEAL_GAS, K_PDV):
            c.a = key[1]
        elif kind in (K_VISCOSITY, K_ACCELERATE):
            upd = key[2:] or None
        elif kind == K_ADVEC_CELL:
            c.b, c.c = key[1:3]
            upd = key[4] if len(key) > 3 else None
        elif kind == K_ADVEC_MOM:
            c.a, c.b, c.c = key[1:4]
            upd = key[5] if len(key) > 4 else None
        elif kind == K_REFLECT:
            upd = key[1:3]
        if upd is not None:
            fields, depth = upd
            c.fields[:len(fields)] = fields
            c.nfields, c.depth = len(fields), depth
            c.unpack = int(kind != K_REFLECT and j.part == PART_BORDER)
        c.v = c.out = c.stage = CloverView(ch.nx, ch.ny, ch.pitch)
        c.d = ctypes.addressof(self.deck)
        c.chunk = ctypes.addressof(ch.c)
        c.prof = ctypes.addressof(self.cprof)
        n = len(j.order)
        if n > MAX_ACC:
            raise ValueError(f"cloverleaf: {j.name}: {n} accesses, more than call.h's {MAX_ACC}")
        b.n = n
        b.what[:n] = j.order
        j.head = bytes(b)[:CloverBound.dt.offset]
        j.arg = j.head + _DT.pack(0.0)

    def nb_dummy(self, ch):
        """What a Python kernel's View holds for a field its task does not
        access (C's NULL): an array of the chunk's shape full of NaN, so
        that a kernel reading it gives NaN, not plausible values."""
        key = (ch.nx, ch.ny)
        a = self._nb_dummies.get(key)
        if a is None:
            a = self._nb_dummies[key] = np.full((ch.ny + 5, ch.nx + 5), np.nan)
        return a

    def nb_dummy_geom(self, ch):
        key = ("geom", ch.nx, ch.ny)
        a = self._nb_dummies.get(key)
        if a is None:
            a = self._nb_dummies[key] = np.full(len(ch.geom), np.nan)
        return a

    def nb_chunk_view(self, ch):
        """A View of every field of chunk ch as its arrays are now (the
        host's reflections)."""
        return self.kn.View(ch.nx, ch.ny, tuple(ch.arrays), ch.geom)

    def _bind_nb(self, ch, key, j):
        """Job j's call of the Python kernels (_NbCall): call.c's
        clover_call_run's dispatch, with the job's fixed arguments."""
        kn, kind, part = self.kn, key[0], j.part
        dummy = self.nb_dummy(ch)
        f, o, st, geom = [dummy] * CF_NFIELDS, [dummy] * CF_NFIELDS, [dummy] * CF_NFIELDS, self.nb_dummy_geom(ch)
        for w in j.order:
            if w >= 0:
                f[w] = ch.arrays[w]
            elif w <= OUT:
                o[OUT - w] = ch.out_arrays[OUT - w]
            elif w <= STAGE:
                st[STAGE - w] = ch.stage_arrays[STAGE - w]
            elif w == GEOM:
                geom = ch.geom
        host = tuple(kn.View(ch.nx, ch.ny, tuple(x), geom) for x in (f, o, st))
        red_dtype = {RED_NONE: None, RED_DT_MIN: ("<f8", 1), RED_ERR_MAX: ("<i4", 1), RED_SUM: ("<f8", CS_N)}[j.red]
        rg = ()
        if part != PART_WHOLE:
            b = key[2] if kind == K_ADVEC_MOM else key[1] if kind == K_ADVEC_CELL else 0
            rg = tuple(tuple(int(x) for x in r) for r in
                       kn.call_ranges(kind == K_ACCELERATE, kind in (K_ADVEC_CELL, K_ADVEC_MOM), kind == K_ADVEC_MOM,
                                      ch.nx, ch.ny, b, part == PART_INTERIOR))
        upd = None
        if kind in (K_VISCOSITY, K_ACCELERATE):
            upd = key[2:] or None
        elif kind == K_ADVEC_CELL and len(key) > 3:
            upd = key[4]
        elif kind == K_ADVEC_MOM and len(key) > 4:
            upd = key[5]
        unpack = None
        if upd is not None and part == PART_BORDER:
            fields, depth = upd
            blocks = np.zeros((len(fields), 9, 3), dtype=np.int64)   # at most 8 blocks, then a row of 0
            strips = (CloverStrip * 8)()
            for i, fl in enumerate(fields):
                n = self.lib.clover_halo_recv_blocks(ch.ref, fl, depth, strips, None)
                for b in range(n):
                    blocks[i, b] = (strips[b].recv_off, strips[b].rows, strips[b].cols)
            unpack = (np.array(fields, dtype=np.int32), blocks, depth, ch.c.edges)
        run = self._nb_run_of(self.kc if ch.nbc else kn, kind, key, self.nbdeck, ch.c.x0, ch.c.y0, rg, ch.c.edges,
                              ch.nbc)
        j.nb = _NbCall(run, unpack, host, j.order, red_dtype)

    @staticmethod
    def _nb_run_of(kn, kind, key, d, x0, y0, rg, edges, device=False):
        """The call of kind `kind` as run(v, out, stage, red, dt) (call.c's
        switch; rg: a split part's ranges, () for the whole kernel).  kn:
        kernels_numba, or (device) kernels_numba_cuda, whose functions take
        the same arguments but for the reductions, which fold into the
        task's copy on the device (call_cuda.c's switch)."""
        if device and kind == K_CALC_DT:
            return lambda v, o, s, r, dt: kn.calc_dt(v, d, r)
        if device and kind == K_PDV:
            a = key[1]
            return lambda v, o, s, r, dt: kn.pdv(v, a, dt, r)
        if device and kind == K_SUMMARY:
            return lambda v, o, s, r, dt: kn.field_summary(v, r)
        if kind == K_INIT:
            return lambda v, o, s, r, dt: kn.initialise(v, d, x0, y0)
        if kind == K_GENERATE:
            return lambda v, o, s, r, dt: kn.generate(v, d)
        if kind == K_IDEAL_GAS:
            a = key[1]
            return lambda v, o, s, r, dt: kn.ideal_gas(v, a)
        if kind == K_VISCOSITY:
            if not rg:
                return lambda v, o, s, r, dt: kn.viscosity(v)
            return lambda v, o, s, r, dt: [kn.viscosity_range(v, x) for x in rg]
        if kind == K_CALC_DT:
            def calc_dt(v, o, s, r, dt):
                m = kn.calc_dt(v, d, x0, y0)[0]
                if m < r[0]:
                    r[0] = m
            return calc_dt
        if kind == K_PDV:
            a = key[1]

            def pdv(v, o, s, r, dt):
                if kn.pdv(v, a, dt):
                    r[0] = 1
            return pdv
        if kind == K_REVERT:
            return lambda v, o, s, r, dt: kn.revert(v)
        if kind == K_ACCELERATE:
            if not rg:
                return lambda v, o, s, r, dt: kn.accelerate(v, dt)
            return lambda v, o, s, r, dt: [kn.accelerate_range(v, dt, x) for x in rg]
        if kind == K_FLUX_CALC:
            return lambda v, o, s, r, dt: kn.flux_calc(v, dt)
        if kind == K_ADVEC_CELL:
            dr, sweep = key[1:3]
            if not rg:
                return lambda v, o, s, r, dt: kn.advec_cell(v, dr, sweep)
            return lambda v, o, s, r, dt: [kn.advec_cell_range(v, dr, sweep, x, o) for x in rg]
        if kind == K_ADVEC_MOM:
            vel, dr, sweep = key[1:4]
            if not rg:
                return lambda v, o, s, r, dt: kn.advec_mom(v, vel, dr, sweep)
            return lambda v, o, s, r, dt: [kn.advec_mom_range(v, vel, dr, sweep, x, o) for x in rg]
        if kind == K_RESET:
            return lambda v, o, s, r, dt: kn.reset_field(v)
        if kind == K_SUMMARY:
            def summary(v, o, s, r, dt):
                part = np.empty(CS_N)
                kn.field_summary(v, part)
                r += part      # acc[i] + part[i], as call.c folds it
            return summary
        if kind == K_REFLECT:
            fields, depth = np.array(key[1], dtype=np.int32), key[2]
            return lambda v, o, s, r, dt: kn.reflect(v, fields, len(fields), depth, edges)
        raise ValueError(f"cloverleaf: no Python kernel for {key!r}")

    def spawn(self, c, key, *dyn):
        """Spawn job `key` on chunk c (dyn: the arguments that change, dt)."""
        j = self.jobs.get((c, key, self.swapped)) or self.job(c, key)
        ch = j.chunk
        # On a GPU all but the least share (run_weft.c's job_spawn): one
        # kernel task at a time per GPU, and the halo exchange beside it.
        share = GPU_SHARE if ch.gpu >= 0 else None
        if self.kn is not None:
            self.rt.spawn(_nbc_body if ch.nbc else _nb_body, self, j, dyn[-1] if j.has_dt else 0.0, reads=j.reads,
                          readwrites=j.readwrites, reduces=j.reduces, name=j.name, placement=ch.placement,
                          device_data=ch.gpu >= 0, share=share)
            return
        arg = j.head + _DT.pack(dyn[-1]) if j.has_dt else j.arg
        if ch.cuda:
            self.rt.spawn(_cuda_body, self, j, arg, reads=j.reads, readwrites=j.readwrites, reduces=j.reduces,
                          name=j.name, placement=ch.placement, device_data=True, share=share)
        else:
            self.rt.spawn(self.native, arg, reads=j.reads, readwrites=j.readwrites, reduces=j.reduces, name=j.name,
                          placement=ch.placement, device_data=ch.gpu >= 0, share=share)

    def each(self, key, *dyn):
        for c in range(self.lo, self.hi):
            self.spawn(c, key, *dyn)

    # -- halo updates ----------------------------------------------------

    def halo(self, depth, *fields):
        """Fill the ghost layers (depth 1 or 2) of the fields: by
        reflection at the mesh's boundary, then from the chunks around
        (faces and corners, in one phase): the blocks between this rank's
        chunks, then those between ranks (run_weft.c's halo, halo_host,
        halo_gpu).  --no-exchange: the reflection alone."""
        plan = self.halos.get((depth, fields, self.swapped)) or self._halo_plan(depth, fields)
        local, net, reflects, handles = plan
        spawn = self.rt.spawn
        if self.gpu_halo:
            for c in reflects:
                self.spawn(c, (K_REFLECT, fields, depth))
            if not self.no_exchange:
                if self.comm is not None and local:
                    self.comm.exchange(local, name="halo")
                if self.net is not None and net:
                    self.net.exchange(net, name="halo")
        elif self.no_exchange:
            spawn(_host_halo_body, self, None, reflects, readwrites=handles, name="halo_reflect")
        else:
            spawn(_host_halo_body, self, local if self.nloc > 1 else None, reflects, readwrites=handles,
                  name="halo")
            if net:
                self.net.exchange(net, name="halo")

    def halo_staged(self, depth, fields):
        """A staged halo update (run_weft.c's halo_staged): the blocks from
        other chunks (faces; corners from the diagonal chunk) into the
        receiving chunks' staging arrays, reading the senders' fields only,
        so that it runs beside the next kernel's interior jobs; the border
        jobs unpack them and reflect.  GPUs: the exchange on this rank's
        communicator; the CPU: one gather task per chunk; across ranks then
        the exchange on the ranks' communicator."""
        key = ("staged", depth, fields, self.swapped)
        plan = self.halos.get(key) or self._staged_plan(depth, fields)
        local, net = plan
        if self.gpu_halo:
            if self.comm is not None and local:
                self.comm.exchange(local, name="halo")
        else:
            for c, (copies, reads, writes) in local.items():
                self.rt.spawn(_gather_halo_body, self, copies, reads=reads, readwrites=writes,
                              name=f"halo_gather.c{c}")
        if self.net is not None and net:
            self.net.exchange(net, name="halo")

    def _staged_plan(self, depth, fields):
        """A staged update's blocks, worked out once (clover_halo_block: as
        clover_halo_recv_blocks lists them): between this rank's chunks
        (Transfers for the GPUs' communicator, or per receiving chunk the
        NumPy slice pairs and the accesses of its gather task) and between
        ranks (Transfers, the whole group in one order every rank derives
        alike)."""
        lo, nloc = self.lo, self.nloc
        local, net = ([] if self.gpu_halo else {}), []
        for me, other, f, mine, theirs in self._blocks(depth, fields, staged=True):
            rank_me, rank_other = me.index // nloc, other.index // nloc
            if rank_me != rank_other:
                net.append(_transfer(rank_other, rank_me, other, me, f, mine, theirs, staged=True))
            elif self.gpu_halo:
                local.append(_transfer(other.index - lo, me.index - lo, other, me, f, mine, theirs, staged=True))
            else:
                copies, reads, writes = local.setdefault(me.index, ([], {}, {}))
                copies.append((_block_of(me.stage_arrays[f], me.pitch, mine.recv_off, mine.rows, mine.cols),
                               _block(other, f, theirs.send_off, mine.rows, mine.cols)))
                reads[other.data[f]] = None
                writes[me.stage_data[f]] = None
        if not self.gpu_halo:
            local = {c: (copies, tuple(reads), tuple(writes)) for c, (copies, reads, writes) in local.items()}
        plan = (local, net)
        self.halos[("staged", depth, fields, self.swapped)] = plan
        return plan

    def _blocks(self, depth, fields, staged):
        """Each block of one halo update that this rank takes part in, as
        (receiving chunk, sending chunk, field, the receiver's strip, the
        sender's strip), in one order every rank derives alike.  staged:
        from the chunk across each face and corner (clover_halo_block; the
        border job reflects after the unpack); else from _source, a corner
        on the mesh's boundary from the face neighbour's reflected ghost
        lines (clover_halo_block_ghost)."""
        lib, nloc = self.lib, self.nloc
        for me in self.chunks:
            for edges in HALO_DIRS:
                nb, ghost = (self._across(me.index, edges), 0) if staged else self._source(me.index, edges)
                if nb < 0:
                    continue
                if me.index // nloc == nb // nloc != self.rank:
                    continue     # between two chunks of another rank
                other = self.chunks[nb]
                for f in fields:
                    mine, theirs = CloverStrip(), CloverStrip()
                    lib.clover_halo_block_ghost(me.ref, f, depth, edges, ghost, byref(mine))
                    lib.clover_halo_block_ghost(other.ref, f, depth, _flip(edges & ~ghost) | ghost, ghost,
                                                byref(theirs))
                    yield me, other, f, mine, theirs

    def _across(self, c, edges):
        """The chunk across `edges` (a face or a corner) from chunk c, or -1."""
        xe, ye = edges & (CLOVER_LEFT | CLOVER_RIGHT), edges & (CLOVER_BOTTOM | CLOVER_TOP)
        n = _neighbour(self.chunks[c].c, xe) if xe else c
        if n >= 0 and ye:
            n = _neighbour(self.chunks[n].c, ye)
        return n

    def _source(self, c, edges):
        """(the chunk chunk c's ghosts across `edges` come from, or -1 for
        its own reflection; the faces along which that chunk sends its
        reflected ghost lines), run_weft.c's source."""
        xe, ye = edges & (CLOVER_LEFT | CLOVER_RIGHT), edges & (CLOVER_BOTTOM | CLOVER_TOP)
        n = self._across(c, edges)
        if n >= 0 or not xe or not ye:
            return n, 0
        n = self._across(c, xe)
        if n >= 0:
            return n, ye
        n = self._across(c, ye)
        return n, (xe if n >= 0 else 0)

    def _halo_plan(self, depth, fields):
        """What one halo update of these fields does, worked out once: the
        blocks each chunk of the mesh receives from the chunks around it
        (faces and corners: _source, clover_halo_block_ghost), split into those
        between this rank's chunks (NumPy slice pairs for the host task, or
        Transfers for the GPUs' communicator, members numbered from lo) and
        those between ranks (Transfers for the ranks' communicator, the
        whole group in one order every rank derives alike, None for the
        buffers of other ranks); and this rank's chunks on the mesh's
        boundary, which reflect."""
        lo, nloc = self.lo, self.nloc
        local, net = [], []
        for me, other, f, mine, theirs in self._blocks(depth, fields, staged=False):
            rank_me, rank_other = me.index // nloc, other.index // nloc
            if rank_me != rank_other:
                net.append(_transfer(rank_other, rank_me, other, me, f, mine, theirs))
            elif self.gpu_halo:
                local.append(_transfer(other.index - lo, me.index - lo, other, me, f, mine, theirs))
            else:
                local.append((_block(me, f, mine.recv_off, mine.rows, mine.cols),
                              _block(other, f, theirs.send_off, mine.rows, mine.cols)))
        boundary = [ch for ch in self.mine if ch.c.edges]
        if self.gpu_halo:
            reflects = [ch.index for ch in boundary]
        else:
            if self.kn is not None:
                arr = np.array(fields, dtype=np.int32)
                reflects = [(self.nb_chunk_view(ch), arr, len(fields), depth, ch.c.edges) for ch in boundary]
            else:
                arr = (c_int * len(fields))(*fields)
                reflects = [(ch.view_ptr, arr, len(fields), depth, ch.c.edges) for ch in boundary]
        handles = tuple(ch.data[f] for f in fields for ch in self.mine)
        plan = (local, net, reflects, handles)
        self.halos[(depth, fields, self.swapped)] = plan
        return plan

    # -- the host's reads of the reductions -------------------------------

    def read_dt(self):
        """(the chunks' smallest dt, the PdV flag), of every rank's chunks."""
        if self.net is not None:
            self.net.allreduce(self.dt_data, op=weft.MIN, name="dt_min")
            self.net.allreduce(self.err_data, op=weft.MAX, name="pdv_check")
        return self.rt.spawn(_read_dt_body, self, readwrites=(self.dt_data, self.err_data), name="read_dt",
                             priority=1).result()

    def summary(self, step, t, show):
        """The field summary (ideal gas first, as the reference), read back."""
        self.each((K_IDEAL_GAS, 0))
        self.each((K_SUMMARY,))
        if self.net is not None:   # every rank's sums, folded in rank order
            self.net.allreduce(self.sums_data, op=weft.SUM, name="field_summary")
        sums = self.rt.spawn(_read_sums_body, self, readwrites=(self.sums_data,), name="read_summary",
                             priority=1).result()
        if show and self.out:
            self.out.write(summary_row(step, t, sums))
        return sums

    # -- the time step (run_weft.c's start, step_start, step_rest, loop) --

    def start(self):
        self.each((K_INIT,))
        self.each((K_GENERATE,))
        self.each((K_IDEAL_GAS, 0))
        self.halo(2, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY, CF_DENSITY1, CF_ENERGY1, CF_XVEL0,
                  CF_YVEL0)
        self.halo(2, CF_XVEL1, CF_YVEL1)

    def step_start(self):
        """The first half of a step, up to the chunks' smallest dt."""
        self.each((K_IDEAL_GAS, 0))
        if self.split:   # every chunk's interior while the ghosts move, then the borders
            self.halo_staged(1, UPD_VISC)
            self.each((K_VISCOSITY, PART_INTERIOR))
            self.each((K_VISCOSITY, PART_BORDER, UPD_VISC, 1))
        else:
            self.halo(1, *UPD_VISC)
            self.each((K_VISCOSITY,))
        self.each((K_CALC_DT,))

    def step_rest(self, dt, advect_x):
        self.each((K_PDV, 1), dt)
        self.each((K_IDEAL_GAS, 1))
        # viscosity's ghosts are first read by accelerate (calc_dt and PdV
        # read their own cells'): exchanged with the predicted pressure's,
        # one update for both, as in C
        if self.split:
            self.halo_staged(1, UPD_ACCEL)
            self.each((K_REVERT,))
            self.each((K_ACCELERATE, PART_INTERIOR), dt)
            self.each((K_ACCELERATE, PART_BORDER, UPD_ACCEL, 1), dt)
        else:
            self.halo(1, *UPD_ACCEL)
            self.each((K_REVERT,))
            self.each((K_ACCELERATE,), dt)
        self.each((K_PDV, 0), dt)
        self.each((K_FLUX_CALC,), dt)
        first, second = (1, 2) if advect_x else (2, 1)
        if self.split_adv:
            self.advect_split(first, second)
            self.each((K_RESET,))
            return
        self.halo(2, CF_ENERGY1, CF_DENSITY1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y)
        self.each((K_ADVEC_CELL, first, 1))
        self.halo(2, CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X, CF_MASS_FLUX_Y)
        self.each((K_ADVEC_MOM, CF_XVEL1, first, 1))
        self.each((K_ADVEC_MOM, CF_YVEL1, first, 1))
        self.each((K_ADVEC_CELL, second, 2))
        self.halo(2, CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X, CF_MASS_FLUX_Y)
        self.each((K_ADVEC_MOM, CF_XVEL1, second, 2))
        self.each((K_ADVEC_MOM, CF_YVEL1, second, 2))
        self.each((K_RESET,))

    def _swap(self, bit):
        """After a split advection kernel's border parts: its fields' second
        arrays become the fields (run_weft.c's swap_out), on every chunk of
        this rank; the jobs and halo plans made from now on name them."""
        self.swapped ^= bit
        for ch in self.mine:
            ch.swap(SWAP_FIELDS[bit], self.swapped)

    def advect_split(self, first, second):
        """The advection split (run_weft.c's advect_split): each kernel's
        interior beside the staged update before it, every part out of
        place, the fields' second arrays swapped in after each kernel's
        border; the swaps come back to none by the step's end."""
        upd_cell, upd1, upd2 = (UPD_ADV_CELL, 2), (UPD_ADV_MOM[first], 2), (UPD_ADV_MOM[second], 2)
        self.halo_staged(2, UPD_ADV_CELL)
        self.each((K_ADVEC_CELL, first, 1, PART_INTERIOR, None))
        self.each((K_ADVEC_CELL, first, 1, PART_BORDER, upd_cell))
        self._swap(SWAP_CELL)
        self.halo_staged(2, UPD_ADV_MOM[first])
        self.each((K_ADVEC_MOM, CF_XVEL1, first, 1, PART_INTERIOR, None))
        self.each((K_ADVEC_MOM, CF_YVEL1, first, 1, PART_INTERIOR, None))
        self.each((K_ADVEC_CELL, second, 2, PART_INTERIOR, None))
        self.each((K_ADVEC_MOM, CF_XVEL1, first, 1, PART_BORDER, upd1))
        self._swap(SWAP_XVEL)
        self.each((K_ADVEC_MOM, CF_YVEL1, first, 1, PART_BORDER, None))
        self._swap(SWAP_YVEL)
        self.each((K_ADVEC_CELL, second, 2, PART_BORDER, None))
        self._swap(SWAP_CELL)
        self.halo_staged(2, UPD_ADV_MOM[second])
        self.each((K_ADVEC_MOM, CF_XVEL1, second, 2, PART_INTERIOR, None))
        self.each((K_ADVEC_MOM, CF_YVEL1, second, 2, PART_INTERIOR, None))
        self.each((K_ADVEC_MOM, CF_XVEL1, second, 2, PART_BORDER, upd2))
        self._swap(SWAP_XVEL)
        self.each((K_ADVEC_MOM, CF_YVEL1, second, 2, PART_BORDER, None))
        self._swap(SWAP_YVEL)
        assert self.swapped == 0

    @staticmethod
    def check_err(err, step):
        if err:
            raise RuntimeError(f"cloverleaf: step {step}: PdV: a cell's volume turned negative")

    def loop(self):
        """The time-step loop; returns (sums0, sums, steps, time, wall_s)
        (self.summaries: the field summaries within it)."""
        d = self.deck
        self.summaries = 0
        if self.out:
            self.out.write(summary_header())
        sums0 = sums = self.summary(0, 0.0, True)
        t0 = time.perf_counter()
        clk = CloverClock(0, 0.0, d.dtinit, d.dtinit)
        advect_x = True
        while True:
            clk.step += 1
            self.step_start()
            dt, err = self.read_dt()
            self.check_err(err, clk.step - 1)   # the previous step's PdV checks
            if self.lib.clover_next_dt(self.deck_ref, byref(clk), dt) != 0:
                raise RuntimeError(f"cloverleaf: step {clk.step}: the time step fell below dtmin "
                                   "(the message is on stderr)")
            self.step_rest(clk.dt, advect_x)
            advect_x = not advect_x
            clk.time += clk.dt
            last = clk.time + 1e-16 > d.end_time or clk.step >= d.end_step
            if last or (d.summary_frequency > 0 and clk.step % d.summary_frequency == 0):
                sums = self.summary(clk.step, clk.time, not last)
                self.summaries += 1
            if last:
                break
        _, err = self.read_dt()
        self.check_err(err, clk.step)
        wall = time.perf_counter() - t0
        if self.out:
            self.out.write(summary_row(clk.step, clk.time, sums))
        return sums0, sums, clk.step, clk.time, wall

    def gather(self, f):
        """Field f of every chunk as one (y_cells, x_cells) array, read by a
        host task (which brings GPU replicas back to the host).  Across
        ranks (collective: every rank calls it) each rank fills its chunks'
        cells of an array of -0.0, and a SUM all-reduce over the ranks
        gives every rank the whole field bit for bit (-0.0 + x is x, signed
        zeros and NaNs included)."""
        out = np.full((self.deck.y_cells, self.deck.x_cells), -0.0)

        def copy():
            for ch in self.mine:
                c = ch.c
                out[c.y0:c.y0 + c.ny, c.x0:c.x0 + c.nx] = ch.arrays[f][2:c.ny + 2, 2:c.nx + 2]
        self.rt.spawn(copy, reads=[ch.data[f] for ch in self.mine], name="gather").result()
        if self.net is not None:
            self.net.allreduce(out, op=weft.SUM, name="gather").wait()
            out = self.rt.spawn(out.copy, reads=[out], name="gather_read").result()
        return out

    def profile(self):
        """kernel name -> (calls, seconds), in run_weft.c's order."""
        ns, calls = list(self.cprof.ns), list(self.cprof.calls)   # the calls' own (call.h)
        for k, t in self.prof:
            ns[k] += t
            calls[k] += 1
        return {KERN_NAMES[k]: (calls[k], ns[k] * 1e-9) for k in range(len(KERN_NAMES)) if calls[k]}


def profile_text(profile, wall):
    """The profile table, as run_weft.c prints it."""
    total = sum(s for _, s in profile.values())
    lines = [f"\n Profile (kernel time summed over chunks; wall {wall:.3f} s)",
             " %-16s %10s %12s %8s" % ("kernel", "calls", "seconds", "share")]
    for name, (calls, sec) in profile.items():
        lines.append(" %-16s %10d %12.4f %7.1f%%" % (name, calls, sec, 100.0 * sec / total if total else 0.0))
    return "\n".join(lines) + "\n"


def run(deck, devices=None, chunks=0, workers=0, trace=None, out=None, fields=False, png=None, mpi=False,
        no_exchange=False, cpu_chunks=0, split=None, split_advection=False, kernels="c"):
    """Run a deck (a CloverDeck from load_deck/parse_deck, or a path) with
    the Python driver over weft.

    devices: weft's device list ("cpu", "cpu,vgpu:4"; None: weft's default);
    chunks: chunks on the CPU when there is no GPU (0: one per worker);
    workers: weft's workers (0: its default); trace: a Chrome trace file;
    out: a text stream for the summary table, verification line and
    profile (None: silent; across ranks only rank 0 writes to it); fields:
    also return the final density0 and energy0; png: write the final
    density there (rank 0); mpi: the mesh over the ranks of MPI_COMM_WORLD
    (collective: every rank calls run with the same arguments; weft starts
    MPI if it is not running), each rank holding as many chunks as it would
    alone; no_exchange: benchmarks only, no halo exchange between chunks
    (the mesh boundary's reflection stays; the results are then wrong);
    cpu_chunks: with GPUs, this many chunks on the CPU beside one per GPU
    (the halo updates then all on the host; one process only); split: the
    halo updates before viscosity and accelerate overlapped with those
    kernels' interiors (True), or not (False: the update writes the ghosts,
    then the kernel runs whole); None: where the chunks are on GPUs, whose
    exchanges run beside the kernels (on the CPU the split only adds tasks);
    split_advection: with the split, the advection kernels split too (out
    of place over their three updates; off by default: slower on virtual
    GPUs on 2 cores, as the C driver's --split-advection); kernels: "c" (the
    compiled C kernels, libclover_kernels.so), "numba" (kernels_numba.py's
    on the CPU and virtual GPUs, kernels_numba_cuda.py's on CUDA GPUs,
    called by Python task bodies) or "numba-cuda" (kernels_numba_cuda.py's
    on every GPU, virtual GPUs under Numba's CUDA simulator only): the
    module docstring's rule; ValueError where those kernels cannot run,
    RuntimeError where Numba does not import.
    Returns a Result; raises on an error (a bad deck, a failed task, the
    PdV check, dt below dtmin)."""
    if not isinstance(deck, CloverDeck):
        deck = load_deck(deck)
    # spawn_gil="yield": the main thread, spawning a step's tasks with the
    # GIL held, hands it over as soon as a worker is waiting for it, so the
    # step's first kernels start while the rest are still being spawned
    # (measured on bm_short: about 1.5% of the wall time).
    kw = {"workers": workers, "spawn_gil": "yield"}
    if devices is not None:
        kw["devices"] = devices
    if trace is not None:
        kw["trace"] = trace
    with weft.Runtime(**kw) as rt:
        sim = net = None
        try:
            net = weft.Communicator.mpi(runtime=rt) if mpi else None
            rank = net.rank if net is not None else 0
            if rank != 0:
                out = None    # across ranks, rank 0 reports
            sim = _Sim(rt, deck, chunks, out, net, no_exchange, cpu_chunks, split, split_advection, kernels)
            sim.start()
            sums0, sums, steps, t, wall = sim.loop()
            rt.wait_all()
            dens = sim.gather(CF_DENSITY0) if (fields or png) else None
            ener = sim.gather(CF_ENERGY0) if fields else None
        except BaseException:
            rt.cancel_pending()   # what was spawned of a failed step need not run
            raise
        finally:
            if sim is not None and sim.comm is not None:
                sim.comm.close()
            if net is not None:
                net.close()       # before MPI may be finalized
    verified, line = verify(deck, sums[CS_KE])
    prof = sim.profile()
    if out:
        out.write(line)
        out.write(profile_text(prof, wall))
    if png and rank == 0 and _kernel_lib().clover_write_png(os.fsencode(png), dens.ctypes.data_as(PD), deck.x_cells,
                                                        deck.y_cells, deck.x_cells) != 0:
        print(f"cloverleaf: writing {png} failed", file=sys.stderr)
    return Result(sums0=sums0, sums=sums, steps=steps, summaries=sim.summaries, time=t, wall_s=wall,
                  nchunks=sim.n, chunks_x=sim.cx, chunks_y=sim.cy, rank=sim.rank, nranks=sim.nranks,
                  verified=verified, density=dens if fields else None, energy=ener, profile=prof)


def _mpirun_env():
    """The ranks mpirun started (OMPI_COMM_WORLD_SIZE or PMI_SIZE; 1 when
    neither is set), and this process's rank (OMPI_COMM_WORLD_RANK or
    PMI_RANK; 0 when neither is set)."""
    def env_int(*names):
        for n in names:
            v = os.environ.get(n)
            if v is not None:
                try:
                    return int(v)
                except ValueError:
                    return None
        return None
    size = env_int("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
    rank = env_int("OMPI_COMM_WORLD_RANK", "PMI_RANK")
    return (size if size else 1), (rank if rank else 0)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="cloverleaf.py", description="Run a CloverLeaf input deck with the Python "
                                 "driver over weft.")
    ap.add_argument("deck")
    ap.add_argument("--devices", help="weft's devices ('cpu', 'cpu,vgpu:4'; default: WEFT_DEVICES or all found)")
    ap.add_argument("--chunks", type=int, default=0, help="chunks on the CPU when there is no GPU "
                    "(default: one per worker)")
    ap.add_argument("--workers", type=int, default=0, help="weft's workers (default: one per core)")
    ap.add_argument("--trace", help="write a Chrome trace there")
    ap.add_argument("--png", help="write the final density as a PNG there")
    ap.add_argument("--mpi", action="store_true", help="the mesh over the ranks of MPI_COMM_WORLD (the default "
                    "when started by mpirun: OMPI_COMM_WORLD_SIZE or PMI_SIZE above 1); each rank holds as many "
                    "chunks as it would alone")
    ap.add_argument("--triad", action="store_true", help="first measure STREAM triad on every core (the "
                    "bandwidth the achieved figure is compared with)")
    ap.add_argument("--cpu-chunks", type=int, default=0, help="with GPUs, this many chunks on the CPU beside one "
                    "per GPU (one process)")
    ap.add_argument("--no-exchange", action="store_true", help="benchmarks only: no halo exchange between "
                    "chunks (wrong results: to time the rest of the step alone)")
    sp = ap.add_mutually_exclusive_group()
    sp.add_argument("--split", dest="split", action="store_const", const=True, default=None,
                    help="the halo updates before viscosity and accelerate overlapped with those kernels' "
                    "interiors (the default where the chunks are on GPUs)")
    sp.add_argument("--no-split", dest="split", action="store_const", const=False,
                    help="the halo updates before viscosity and accelerate not overlapped (for comparison)")
    ap.add_argument("--kernels", choices=KERNEL_CHOICES, default="c", help="the kernels the tasks run: c (the "
                    "compiled C kernels, and kernels.cu's on CUDA GPUs; default), numba (compiled by Numba: "
                    "kernels_numba.py's on the CPU and virtual GPUs, kernels_numba_cuda.py's numba.cuda kernels on "
                    "CUDA GPUs) or numba-cuda (kernels_numba_cuda.py's on every GPU; on virtual GPUs under Numba's "
                    "CUDA simulator only, NUMBA_ENABLE_CUDASIM=1)")
    ap.add_argument("--split-advection", action="store_true", help="with the split, the advection kernels split "
                    "as well (out of place over their updates; off by default)")
    a = ap.parse_args(argv)
    for opt, v in (("--chunks", a.chunks), ("--workers", a.workers), ("--cpu-chunks", a.cpu_chunks)):
        if v < 0 or v > 4096:
            print(f"cloverleaf.py: {opt}: not a count from 1 to 4096: '{v}'", file=sys.stderr)
            return 2
    size, env_rank = _mpirun_env()
    mpi = a.mpi or size > 1
    try:
        deck = load_deck(a.deck)
        lib = kernels()
    except (DeckError, KernelsNotFound, RuntimeError) as e:
        print(f"cloverleaf.py: {e}", file=sys.stderr)
        return 2
    out = sys.stdout
    if env_rank == 0:
        out.write(f" CloverLeaf on Weft (Python driver): {a.deck}, {deck.x_cells} x {deck.y_cells} cells\n")
    triad_bw = 0.0
    if a.triad:
        if not hasattr(lib, "clover_triad_bw") or not hasattr(lib, "clover_traffic_step_bytes"):
            print("cloverleaf.py: --triad: the kernels library has no clover_triad_bw (rebuild it)", file=sys.stderr)
            return 2
        cores = os.cpu_count() or 1
        triad_bw = lib.clover_triad_bw(1 << 25, cores, 10)
        if env_rank == 0:
            out.write(f" STREAM triad: {triad_bw * 1e-9:.2f} GB/s ({cores} threads, 3 x 256 MiB, best of 10)\n")
    if mpi:
        try:
            weft.mpi_init()
        except (RuntimeError, ValueError, OSError) as e:
            print(f"cloverleaf.py: --mpi: {e}", file=sys.stderr)
            return 2
    try:
        r = run(deck, devices=a.devices, chunks=a.chunks, workers=a.workers, trace=a.trace, out=out, png=a.png,
                mpi=mpi, no_exchange=a.no_exchange, cpu_chunks=a.cpu_chunks, split=a.split,
                split_advection=a.split_advection, kernels=a.kernels)
    except (DeckError, KernelsNotFound, ValueError, RuntimeError, weft.CancelledError) as e:
        sys.stdout.flush()
        print(f"cloverleaf.py: {e}", file=sys.stderr)
        return 2
    finally:
        if mpi:
            try:
                weft.mpi_finalize()
            except (RuntimeError, ValueError, OSError) as e:
                print(f"cloverleaf.py: MPI_Finalize: {e}", file=sys.stderr)
    if r.rank != 0:
        return 1 if r.verified == 0 else 0
    cells = deck.x_cells * deck.y_cells
    rate = cells * r.steps / r.wall_s if r.wall_s > 0 else 0.0
    print("\n %d steps to time %.6f on %d chunks (%d x %d) over %d rank(s): %.3f s, %.3g cell-steps/s"
          % (r.steps, r.time, r.nchunks, r.chunks_x, r.chunks_y, r.nranks, r.wall_s, rate))
    if r.wall_s > 0 and hasattr(lib, "clover_traffic_step_bytes") and hasattr(lib, "clover_traffic_summary_bytes"):
        step_b = lib.clover_traffic_step_bytes()
        nbytes = cells * r.steps * step_b + cells * r.summaries * lib.clover_traffic_summary_bytes()
        line = (" Memory traffic (the kernels' model, traffic.c): %.0f bytes per cell-step, %.2f GB/s achieved"
                % (step_b, nbytes / r.wall_s * 1e-9))
        if triad_bw > 0:
            line += ", %.1f%% of triad" % (100.0 * nbytes / r.wall_s / triad_bw)
        print(line)
    if a.no_exchange:
        print(" (--no-exchange: the chunks exchanged no halos; the results above are not this deck's)")
    if a.trace:
        print(f" Trace: {a.trace} (chrome://tracing or ui.perfetto.dev)")
    if a.png:
        print(f" Density picture: {a.png}")
    return 1 if r.verified == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
