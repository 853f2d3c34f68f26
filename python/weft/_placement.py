"""Placement from Python: device sets, variants, and the context a body on
GPUs sees.  The C extension calls `_normalize` at a spawn that names a
placement (or spawns a `Variants` function) and `_call_placed` to run a body
on GPUs; nothing here runs for a plain CPU task.

    weft.cpu                 the CPU
    weft.gpu                 any one GPU
    weft.gpu(1)              GPU 1 (GPUs are numbered 0..G-1, every device but the CPU)
    weft.gpu * 2             any two distinct GPUs
    (weft.cpu, weft.gpu)     the CPU and one GPU (also weft.cpu + weft.gpu)
    (weft.gpu(0), weft.gpu(2))  exactly GPUs 0 and 2 (also weft.gpu(0) + weft.gpu(2))
    "gpu:1", "2*gpu", ...    the same as strings

No array library is imported here: CuPy and PyTorch are used only when the
program has imported them itself, Numba only when a body asks for
Context.numba_array() or numba_stream().
"""
from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Generic, NoReturn, ParamSpec, SupportsIndex, TypeAlias, TypeVar, overload

if TYPE_CHECKING:
    from ._native import CFunction
    from ._weft import Data, View, _BufferLike, _DeviceSpec, _Placement

    # What ctx.queue() / queue_native() take as reads= and writes=: buffers
    # (views from view() too) or ints naming the task's own accesses; one,
    # or a list or tuple of them.
    _QueueItem: TypeAlias = "_BufferLike | int"
    _QueueAccesses: TypeAlias = "_QueueItem | Sequence[_QueueItem]"
    # What names one of the task's accesses: its index, or the weft.Data or
    # object named in the spawn.
    _Which: TypeAlias = "int | _BufferLike | Data"

_P = ParamSpec("_P")
_R = TypeVar("_R")
_F = TypeVar("_F", bound=Callable[..., Any])


class DeviceSet:
    """A set of devices a task may run on (see the module docstring)."""

    __slots__ = ("cpu", "gpus", "gpu", "gset")

    cpu: bool
    gpus: int
    gpu: int
    gset: int

    def __init__(self, cpu: object = False, gpus: int = 0, gpu: int = -1, gset: int = 0) -> None:
        object.__setattr__(self, "cpu", bool(cpu))
        object.__setattr__(self, "gpus", int(gpus))
        object.__setattr__(self, "gpu", int(gpu))
        object.__setattr__(self, "gset", int(gset))  # exactly these GPUs (bit g: GPU g), or 0

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("weft device sets are immutable")

    def __call__(self, i: int) -> DeviceSet:
        if self.cpu and not self.gpus:
            # Parla's placement=cpu(0): Weft's CPU is one device, all its workers.
            raise TypeError(f"weft.cpu({i!r}): the CPU is one device, run by all the workers, and takes no "
                            "number: write placement=weft.cpu (Parla's cpu(0)); only weft.gpu takes a GPU number")
        if self.gpus != 1 or self.gpu != -1 or self.cpu:
            raise TypeError(f"{self!r}(...): only weft.gpu takes a GPU number")
        if not isinstance(i, int) or isinstance(i, bool) or i < 0:
            raise ValueError(f"weft.gpu({i!r}): a GPU number is an int >= 0")
        return DeviceSet(False, 1, i)

    def __mul__(self, k: int) -> DeviceSet:
        if self.gpus != 1 or self.gpu != -1:
            raise TypeError(f"{self!r} * {k!r}: only weft.gpu can be multiplied")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise ValueError(f"weft.gpu * {k!r}: the count is an int >= 1")
        return DeviceSet(self.cpu, k, -1)

    __rmul__ = __mul__

    def _pinned(self) -> int | None:
        """The GPUs this set names one by one, as a bit mask, or None."""
        if self.gset:
            return self.gset
        return 1 << self.gpu if self.gpus == 1 and self.gpu >= 0 else None

    def __add__(self, other: _DeviceSpec) -> DeviceSet:
        other = _as_set(other)
        if self.gpus and other.gpus:
            a, b = self._pinned(), other._pinned()
            if a is None or b is None:
                raise ValueError(f"{self!r} + {other!r}: write the GPU count once (weft.gpu * 2), or name "
                                 "each GPU: (weft.gpu(0), weft.gpu(2))")
            if a & b:
                raise ValueError(f"{self!r} + {other!r}: GPU {(a & b).bit_length() - 1} is named twice")
            m = a | b
            return DeviceSet(self.cpu or other.cpu, bin(m).count("1"), -1, m)
        g = self if self.gpus else other
        return DeviceSet(self.cpu or other.cpu, g.gpus, g.gpu, g.gset)

    __radd__ = __add__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceSet) and (self.cpu, self.gpus, self.gpu, self.gset) == (
            other.cpu, other.gpus, other.gpu, other.gset)

    def __hash__(self) -> int:
        return hash((self.cpu, self.gpus, self.gpu, self.gset))

    def __repr__(self) -> str:
        if not self.gpus:
            return "weft.cpu"
        if self.gset:
            gs = [f"weft.gpu({i})" for i in range(self.gset.bit_length()) if self.gset >> i & 1]
            return "(" + ", ".join((["weft.cpu"] if self.cpu else []) + gs) + ")"
        g = f"weft.gpu({self.gpu})" if self.gpu >= 0 else ("weft.gpu" if self.gpus == 1 else f"weft.gpu * {self.gpus}")
        return f"weft.cpu + {g}" if self.cpu else g


cpu = DeviceSet(cpu=True)
gpu = DeviceSet(gpus=1)


def _parse(s: str) -> DeviceSet:
    from . import _weft

    has_cpu, k, i = _weft._parse_placement(s)  # the C core's grammar and message
    return cpu if has_cpu and k == 0 else DeviceSet(has_cpu, k, i)


def _as_set(x: object) -> DeviceSet:
    if isinstance(x, DeviceSet):
        return x
    if isinstance(x, str):
        return _parse(x)
    if isinstance(x, tuple) and x:
        out = _as_set(x[0])
        for y in x[1:]:
            out = out + _as_set(y)
        return out
    raise TypeError(f"placement: {x!r} is not a device set (weft.cpu, weft.gpu, weft.gpu(i), "
                    "weft.gpu * k, a tuple of them, or a string such as 'gpu:1')")


class Variants(Generic[_P, _R]):
    """A function with one body per device set (see `weft.variants`)."""

    default: Callable[_P, _R]
    default_placement: DeviceSet
    variants: list[tuple[DeviceSet, Callable[..., Any]]]

    def __init__(self, fn: Callable[_P, _R], placement: _DeviceSpec | None = None) -> None:
        functools.update_wrapper(self, fn)
        self.default = fn
        self.default_placement = _as_set(placement) if placement is not None else cpu
        self.variants = []  # (DeviceSet, function), in registration order

    def variant(self, placement: _DeviceSpec) -> Callable[[_F], _F]:
        """Decorator: register the decorated function as this function's body
        on `placement`; it is returned unchanged."""
        ds = _as_set(placement)

        def register(fn: _F) -> _F:
            self.variants.append((ds, fn))
            return fn

        return register

    def body_for(self, placement: _DeviceSpec) -> Callable[..., Any]:
        """The body that runs on `placement` (a device set): the variant
        registered for exactly that set; else one registered for any GPU(s)
        of the kind asked for — a variant for weft.gpu serves weft.gpu(1)
        and, failing a closer one, several GPUs (weft.gpu * 2), as Parla's
        variant for an architecture serves every device of it; else the
        default body."""
        return _best(self, _as_set(placement))

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        # Inside a task, the variant of the device the task runs on (a body
        # on GPUs calls the GPU variant, a CPU body the CPU one), as Parla's
        # specialized functions dispatch on the current device; elsewhere
        # the CPU's.
        body: Callable[_P, _R] = _best(self, _current_set())
        return body(*args, **kwargs)

    def __repr__(self) -> str:
        names = ", ".join(f"{ds!r}: {getattr(f, '__name__', f)}" for ds, f in self.variants)
        return f"<weft.variants of {getattr(self.default, '__name__', self.default)}: {names}>"


@overload
def variants(fn: Callable[_P, _R], *, placement: _DeviceSpec | None = None) -> Variants[_P, _R]: ...
@overload
def variants(fn: None = None, *, placement: _DeviceSpec | None = None) -> Callable[[Callable[_P, _R]], Variants[_P, _R]]: ...
def variants(fn: Callable[_P, _R] | None = None, *,
             placement: _DeviceSpec | None = None) -> Variants[_P, _R] | Callable[[Callable[_P, _R]], Variants[_P, _R]]:
    """Decorator: a function with variants per device set.

        @weft.variants
        def step(x): ...                 # the CPU body (the default)

        @step.variant(weft.gpu)
        def step_gpu(x): ...             # the body on one GPU

        rt.spawn(step, x)                # the policy picks ("load": one GPU if free, else the CPU)

    Spawning it without placement= offers its variants in registration
    order, then the default body on `placement` (the CPU unless given).
    With placement=, each alternative runs the variant that fits it best
    (Variants.body_for: a variant for weft.gpu serves weft.gpu(1) too).
    Called inside a running body it dispatches on the body's device: the
    GPU variant in a body on a GPU, the CPU's in a CPU body."""
    if fn is None:
        return lambda f: Variants(f, placement)
    return Variants(fn, placement)


def _rank(v: DeviceSet, p: DeviceSet) -> int | None:
    """How well a variant registered for device set v fits a placement p
    (lower is better), or None if it does not: the exact set; then a
    variant for any GPU(s) (v.gpu == -1) of the same count and CPU part;
    then the same with the CPU part differing; then a one-GPU variant for
    several GPUs.  A CPU-only placement takes only a CPU-only variant."""
    if v == p:
        return 0
    if (v.gpus == 0) != (p.gpus == 0) or v.gpu not in (-1, p.gpu) or (v.gset and v.gset != p.gset):
        return None
    if p.gpus == 0:
        return 1 if v.cpu == p.cpu else None
    if v.gpus == p.gpus:
        return 1 if v.cpu == p.cpu else 2
    if v.gpus == 1:
        return 3 if v.cpu == p.cpu else 4
    return None


def _best(fn: Variants[..., Any], p: DeviceSet) -> Callable[..., Any]:
    """The body of Variants fn for device set p (see Variants.body_for)."""
    best: int | None = None
    body: Callable[..., Any] | None = None
    for ds, f in fn.variants + [(fn.default_placement, fn.default)]:
        r = _rank(ds, p)
        if r is not None and (best is None or r < best):
            best, body = r, f
    return fn.default if body is None else body


def _current_set() -> DeviceSet:
    """The device set the calling code runs on: the running task's GPUs
    (a specific one for a one-GPU task), or the CPU (a CPU task, or not in
    a task)."""
    from . import _weft

    ctx = _weft._context()
    if ctx is None or not ctx.devices:
        return cpu
    if len(ctx.devices) == 1:
        return DeviceSet(False, 1, _gpu_number(ctx.devices[0]))
    return DeviceSet(False, len(ctx.devices), -1)


def _gpu_number(index: int) -> int:
    """The GPU number (0..G-1) of runtime device `index` (the CPU is
    device 0, the GPUs follow)."""
    return index - 1


def _alt(ds: DeviceSet, share: float, memory: int,
         body: Callable[..., Any] | None) -> tuple[int, int, int, float, int, Callable[..., Any] | None, int]:
    return (int(ds.cpu), ds.gpus, ds.gpu, float(share), int(memory), body, ds.gset)


def _normalize(fn: Any, placement: _Placement, share: float | None,
               memory: int | None) -> tuple[Any, list[tuple[int, int, int, float, int, Any, int]]]:
    """(the default body, [(cpu, gpus, gpu, share, memory, body or None), ...])"""
    if share is not None and not isinstance(share, (int, float)) or isinstance(share, bool):
        raise TypeError(f"spawn(): share= takes a number in (0, 1], not {share!r}")
    if share is not None and share > 1 or share != share:
        raise ValueError(f"spawn(): share= takes a number in (0, 1], not {share!r} (a fraction of each device "
                         "of the placement; 1 or leaving share= out: the whole device)")
    if share is not None and share <= 0:
        # (Parla's vcus=0 reserves nothing; a share of 0 would reserve the
        # whole device, the opposite: refused rather than taken silently.)
        raise ValueError(f"spawn(): share= takes a number in (0, 1], not {share!r} (leave share= out for the "
                         "whole device; a share reserves at least a part of it)")
    share = 0.0 if share is None else share
    memory = 0 if memory is None else memory
    if not isinstance(memory, int) or isinstance(memory, bool) or memory < 0:
        raise ValueError(f"spawn(): memory= takes a number of bytes >= 0, not {memory!r}")
    if isinstance(fn, Variants):
        if placement is None:
            sets = [ds for ds, _ in fn.variants] + [fn.default_placement]
        else:
            sets = [_as_set(p) for p in (placement if isinstance(placement, list) else [placement])]
        alts = [_alt(ds, share, memory, _best(fn, ds)) for ds in sets]
        return fn.default, alts
    if placement is None:
        if share or memory:
            # (Nothing to reserve them on: they would be dropped.)
            what = "share=" if share else "memory="
            raise ValueError(f"spawn(): {what} reserves part of each device of the task's placement, and this "
                             "spawn names none: add placement=weft.cpu to reserve it on the CPU (as one "
                             "whole: two share=0.75 tasks never run at once), or placement=weft.gpu for a GPU")
        return fn, []
    items = placement if isinstance(placement, list) else [placement]
    if not items:
        raise ValueError("spawn(): placement= is an empty list")
    return fn, [_alt(_as_set(p), share, memory, None) for p in items]


# ---- the body's context ---------------------------------------------------



class Context:
    """What a task body sees of its placement: `variant` (the index of the
    alternative chosen), `devices` (runtime device indices of its GPUs),
    `streams` (each GPU's stream as an int: a cudaStream_t on CUDA, usable
    with cupy.cuda.ExternalStream, numba.cuda.external_stream and
    torch.cuda.ExternalStream; an opaque handle on a virtual GPU),
    `queue()` to put a callable on a GPU's stream, and `view()`, `views`
    and `array()`: the task's data where the task runs, without a copy."""

    __slots__ = ("variant", "devices", "streams", "kinds", "ordinals", "_task")

    variant: int
    devices: tuple[int, ...]
    kinds: tuple[str, ...]
    ordinals: tuple[int, ...]
    streams: tuple[int, ...]
    _task: int

    def __init__(self, variant: int, gpus: Sequence[tuple[int, str, int, int]], task: int = 0) -> None:
        self.variant = variant
        self.devices = tuple(g[0] for g in gpus)
        self.kinds = tuple(g[1] for g in gpus)
        self.ordinals = tuple(g[2] for g in gpus)
        self.streams = tuple(g[3] for g in gpus)
        self._task = task  # the C id of the task whose body it was made for (0: any)

    def view(self, which: _Which) -> View:
        """A weft.View of one of the task's data accesses: `which` is its
        index (in the order reads=, writes=, readwrites=, commutes=,
        reduces=, then scratch=, each in the order given), or the weft.Data
        or object named there (not in scratch=: see scratch()).  It points
        at the task's own copy of the data, without a copy (for reduces=,
        the task's private copy, identity-filled: of a tile, its interior
        alone, rows packed; for scratch=, the task's scratch buffer):

          - spawned with device_data=True and placed on GPUs: the replica on
            its first GPU (__cuda_array_interface__ v3 with the task's
            stream, and __dlpack__; on a virtual GPU, whose replica is host
            memory, also the buffer protocol and __array_interface__, for
            callables queued on the task's stream with queue(): the copy into
            the replica runs there);
          - otherwise the host's copy, the registered buffer itself (the
            buffer protocol, so numpy.asarray(view) shares its memory,
            __array_interface__ and __dlpack__).

        Read-only for an access in reads=.  Valid until the task ends:
        afterwards every use of the view raises RuntimeError (an array made
        from it meanwhile cannot be stopped: do not keep one either).  From
        the task's body only."""
        from . import _weft

        return _weft._view(which, self._task)

    def scratch(self, k: SupportsIndex = 0) -> View:
        """A weft.View of the task's scratch buffer k (spawn(...,
        scratch=[...]), in the order given; the same as view(i) with i the
        count of the other accesses plus k): memory of the size asked for,
        the task's own while it runs, contents unspecified (0xDB in
        checking mode, WEFT_VGPU_CHECK=1), writable, C-contiguous, shaped
        and typed like the buffer or weft.Data that gave its size (bytes
        for an int).  On the host by default; with device_data=True on the
        task's first GPU (a virtual GPU's view waits for the task's stream,
        as view() does).  numpy.asarray(v), numpy.frombuffer(v, dtype) and
        memoryview(v) share its memory on the host.  From the body only."""
        from . import _weft

        return _weft._scratch(k, self._task)

    @property
    def views(self) -> tuple[View, ...]:
        """A weft.View of each of the task's data accesses, in order."""
        from . import _weft

        return _weft._views(self._task)

    @property
    def addresses(self) -> tuple[int, ...]:
        """Where each of the task's data accesses is, in order, as ints:
        the address view(i).ptr gives, without making the views (for C code
        handed pointers, e.g. through queue_native)."""
        from . import _weft

        return _weft._addresses(self._task)

    def array(self, which: _Which) -> Any:
        """view(which) as an array of the library at hand, without a copy: a
        NumPy array for memory the host can address (the host's copy, a
        virtual GPU's replica; a memoryview without NumPy), a CuPy array on
        a CUDA GPU when CuPy can be imported (else the view itself, which
        CUDA libraries take through __cuda_array_interface__ or DLPack)."""
        v = self.view(which)
        if v.device.startswith("cuda"):
            try:
                import cupy
            except ImportError:
                return v
            if cupy.cuda.get_current_stream().ptr not in self.streams:
                # CuPy was imported after the body started: its work would
                # go on a stream that is not ordered with the task's.
                raise RuntimeError(f"ctx.array({which!r}): CuPy's current stream is not the task's: import cupy "
                                   "before the task runs (at the top of the program); Weft sets CuPy's current "
                                   "device and stream in a body only when CuPy was imported as it started")
            return _cupy_array(cupy, v)
        try:
            import numpy
        except ImportError:
            return memoryview(v)
        return numpy.asarray(v)

    def numba_array(self, which: _Which) -> Any:
        """view(which) as a Numba CUDA device array, without a copy, for a
        numba.cuda.jit kernel launched in the body on numba_stream():

          - on a CUDA GPU: numba.cuda.from_cuda_array_interface on the
            view's __cuda_array_interface__ (v3), bound to the task's stream
            and without the host synchronisation the interface's import
            makes by default (the kernel goes on that stream, after the
            copies in);
          - on a virtual GPU under Numba's CUDA simulator
            (NUMBA_ENABLE_CUDASIM=1 before numba is imported): the
            simulator's device array over the replica (host memory), which
            view() returned once the copies in had run.

        Raises RuntimeError for the host's copy (spawn with
        device_data=True on a GPU placement), for a virtual GPU without the
        simulator (its memory is the host's: real numba.cuda cannot address
        it), and for a CUDA GPU under the simulator.  From the body only."""
        v = self.view(which)
        ncuda = _numba_cuda(v.device, f"numba_array({which!r})", v.on_host)
        if v.device.startswith("vgpu"):
            import importlib

            import numpy

            # the simulator's device array: a wrapper of a NumPy array, no copy
            sim = importlib.import_module("numba.cuda.simulator.cudadrv.devicearray")
            return sim.FakeCUDAArray(numpy.asarray(v))
        with ncuda.gpus[int(v.device.split(":")[1])]:
            return ncuda.from_cuda_array_interface(v.__cuda_array_interface__, owner=v, sync=False)

    def numba_stream(self, gpu: int = 0) -> Any:
        """The stream of the task's GPU number `gpu` as a Numba stream, for
        kernel[blocks, threads, stream](...): on a CUDA GPU
        numba.cuda.external_stream(streams[gpu]) (made on that device), so
        the kernel runs after the copies that fill the task's data and
        before its dependents; on a virtual GPU under Numba's CUDA simulator
        a simulator stream, which models no order: the simulator runs each
        kernel on the calling thread when it is launched, after view() /
        numba_array() waited for the copies in, and before the body
        returns.  Errors as numba_array()'s.  From the body only."""
        if not 0 <= gpu < len(self.devices):
            raise ValueError(f"numba_stream({gpu!r}): the task runs on {len(self.devices)} GPU(s); "
                             "place it on a GPU (placement=weft.gpu) and number its GPUs from 0")
        kind = self.kinds[gpu]
        ncuda = _numba_cuda(f"{kind}:{self.ordinals[gpu]}", f"numba_stream({gpu!r})", False)
        if kind == "vgpu":
            return ncuda.stream()
        with ncuda.gpus[self.ordinals[gpu]]:
            return ncuda.external_stream(self.streams[gpu])

    def queue(self, fn: Callable[..., object], *args: Any, gpu: int = 0, model_ns: int = 0,
              reads: _QueueAccesses = (), writes: _QueueAccesses = ()) -> None:
        """Queue fn(*args) on the stream of the task's GPU number `gpu`
        (0 .. len(devices)-1), after the work queued there: on a virtual GPU
        it is the kernel (run by the stream's thread, stretched to model_ns
        of modelled time); on CUDA a host function.  It must not call weft.
        An exception it raises fails the task.  From the body only.

        reads / writes: the buffers (one, or a list) it reads and writes
        (views from view() too; a buffer in both is updated in place), or
        an int i for the task's data access i where it runs (not a tile's).
        Virtual GPUs in checking mode (WEFT_VGPU_CHECK=1) check that what it
        reads was written by work it is ordered after, and fill what it only
        writes with 0xDB first; elsewhere they only document."""
        from . import _weft

        call = functools.partial(fn, *args) if args else fn
        _weft._queue(gpu, call, int(model_ns), _buffers(reads), _buffers(writes))

    def queue_native(self, fn: CFunction, arg: _BufferLike | None = None, *, gpu: int = 0, model_ns: int = 0,
                     reads: _QueueAccesses = (), writes: _QueueAccesses = ()) -> None:
        """Queue a C function on the stream of the task's GPU number `gpu`,
        in the stream's order as queue() does a Python callable, but called
        without Python: the stream's thread runs it without taking the GIL,
        so kernels that several GPUs queue this way run beside the
        interpreter and each other.

        fn: `int fn(void *arg)`, as a ctypes function (a CDLL's function, a
        CFUNCTYPE instance, a Numba cfunc's ctypes) or its address (int).
        It is called with a pointer to a copy of `arg`, made now (any
        bytes-like object: a ctypes structure, bytes, an array's bytes;
        aligned for any C type), or with NULL when arg is None.  A non-zero
        return fails the task (RuntimeError).  It must not call Weft; a
        CFUNCTYPE of a Python function takes the GIL itself.

        reads / writes: as queue()'s (ints naming the task's accesses spare
        making views: with `addresses`, a body that hands C its pointers
        makes no Python object per access).  fn's object and the buffers
        are kept alive until the task ends.  From the body only."""
        from . import _weft
        from ._native import _c_address

        addr = _c_address(fn, "queue_native()")
        _weft._queue_native(gpu, addr, fn, arg, int(model_ns), _buffers(reads), _buffers(writes))

    def each_device(self) -> Iterator[int]:
        """Step through the task's GPUs: yields 0, 1, ... with, for CUDA
        devices, CuPy's and PyTorch's current device and stream set to that
        GPU's (when the program imported them)."""
        for i in range(len(self.devices)):
            with _library_current(self, i):
                yield i

    def __repr__(self) -> str:
        return f"<weft.Context variant={self.variant} devices={self.devices}>"


def _buffers(x: _QueueAccesses) -> tuple[object, ...]:
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _cupy_array(cupy: Any, v: View) -> Any:
    """A CuPy array on a CUDA view's memory (untested here: no CUDA device
    and no CuPy on the test machines).  Built from the pointer, not through
    cupy.asarray, whose __cuda_array_interface__ import synchronises the
    host with the interface's stream by default: the body's work goes on
    the task's stream anyway (CuPy's current stream there, see
    _call_placed)."""
    mem = cupy.cuda.UnownedMemory(v.ptr, v.nbytes, v, int(v.device.split(":")[1]))
    return cupy.ndarray(v.shape, dtype=cupy.dtype(v.typestr), memptr=cupy.cuda.MemoryPointer(mem, 0),
                        strides=v.strides)


def _numba_cuda(device: str, what: str, on_host: bool) -> Any:
    """numba.cuda, where a numba.cuda kernel can use `device`'s memory; or
    RuntimeError saying why not and what to write instead."""
    import importlib

    if on_host:
        raise RuntimeError(f"ctx.{what}: the task's data is the host's copy here, not on a GPU: spawn with "
                           "device_data=True on a GPU placement for numba.cuda kernels, or use an "
                           "@numba.njit kernel on ctx.array() on the host")
    ncuda = importlib.import_module("numba.cuda")
    sim = bool(importlib.import_module("numba.core.config").ENABLE_CUDASIM)
    if device.startswith("vgpu") and not sim:
        raise RuntimeError(f"ctx.{what}: {device} is a virtual GPU, whose memory is the host's: numba.cuda "
                           "kernels run there only under Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1 "
                           "set before numba is imported); or use an @numba.njit kernel on ctx.array()")
    if device.startswith("cuda") and sim:
        raise RuntimeError(f"ctx.{what}: {device} is a CUDA GPU, but Numba runs its CUDA simulator "
                           "(NUMBA_ENABLE_CUDASIM=1), which cannot use device memory: unset it")
    return ncuda


def context() -> Context:
    """The running task's Context (its variant, GPUs and streams).  A task
    without placement gets an empty one (variant 0, no devices).  Raises
    RuntimeError outside a task."""
    from . import _weft

    ctx = _weft._context()  # the placed body's, made on first use
    if ctx is not None:
        return ctx
    if _weft.current_task() is None:
        raise RuntimeError("weft.context(): not inside a weft task")
    return Context(0, (), _weft._frame_task())


def _library_current(ctx: Context, i: int) -> contextlib.ExitStack[bool | None]:
    """CuPy's / PyTorch's current device and stream, and Numba's current
    device (Numba has no current stream: its kernels take
    numba.cuda.external_stream(ctx.streams[i])), for GPU i, if it is a CUDA
    device and the program imported the library."""
    stack = contextlib.ExitStack()
    if i < len(ctx.kinds) and ctx.kinds[i] == "cuda":
        cp = sys.modules.get("cupy")
        if cp is not None:
            stack.enter_context(cp.cuda.Device(ctx.ordinals[i]))
            stack.enter_context(cp.cuda.ExternalStream(ctx.streams[i]))
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            stack.enter_context(torch.cuda.device(ctx.ordinals[i]))
            stack.enter_context(torch.cuda.stream(torch.cuda.ExternalStream(ctx.streams[i])))
        ncuda = sys.modules.get("numba.cuda")
        if ncuda is not None and ncuda.is_available():
            stack.enter_context(ncuda.gpus[ctx.ordinals[i]])
    return stack


def _call_placed(ctx: Context, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> Any:
    """Run a body placed on CUDA devices with CuPy's / PyTorch's current
    device and stream set to its first GPU's (the extension calls it; other
    bodies are called directly)."""
    with _library_current(ctx, 0):
        return fn(*args, **kwargs) if kwargs else fn(*args)
