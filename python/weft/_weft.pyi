"""Types of weft's C extension (python/weft/*.c; the package re-exports the
public names: see weft/__init__.py and python/README.md for what they do).

Keep it in step with the C method tables and argument parsing: `make
python-test` runs scripts/typecheck.sh, mypy --strict over the package, the
examples and python/tests/typing_usage.py (which also holds misuse the stub
must reject), then stubtest, which fails on a name the extension exports and
this file lacks (python/tests/test_typing.py checks that too, without mypy).

Where the types differ from what the runtime takes: an `int` key of a task
space is typed as one slot (`T[-1]`, a negative index, is an empty TaskList
at run time); a nested dependency list may be any Sequence, where the
runtime takes lists and tuples, and is spelt out three levels deep (deeper
nesting type-checks as an error); placement= takes any Sequence as a list
of alternatives (the runtime: a list), an empty one too; the body's
positional arguments are not checked against its parameters (spawn's own
keywords are).

With mypy, a wrong keyword of spawn() given with a plain (not async)
function is reported twice: the keyword's error, and "Argument 1 ...
expected Callable[..., Coroutine[...]]" (mypy reports a call that no
overload matches against the first overload of its shape, the one for
`async def` bodies).
"""

import types
from collections.abc import Callable, Coroutine, Generator, Hashable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import CancelledError as _FuturesCancelledError
from os import PathLike
from typing import Any, Final, Generic, Literal, NewType, NoReturn, Protocol, SupportsFloat, SupportsIndex, TypedDict, final, overload, type_check_only

from typing_extensions import Buffer, CapsuleType, Self, TypeAlias, TypeVar, Unpack

from ._access import unordered
from ._comm import Transfer
from ._native import Reduction
from ._placement import Context, DeviceSet, Variants
from ._space import TaskList

_T = TypeVar("_T")
# What a task's body returns (Any for a task-space slot, whose body is not
# known where the slot is named).
_R_co = TypeVar("_R_co", covariant=True, default=Any)
# The object a weft.Acquired holds.
_O_co = TypeVar("_O_co", covariant=True, default=Any)
_Obj = TypeVar("_Obj", bound=_BufferLike | Data)

# ---- what the arguments accept ---------------------------------------------

@type_check_only
class _HostArray(Protocol):
    """An array in host memory (NumPy's, and anything else with the NumPy
    array interface): NumPy declares `__buffer__` only for Python >= 3.12,
    so on 3.11 its arrays are not `Buffer`s to a type checker."""

    @property
    def __array_interface__(self) -> dict[str, Any]: ...

# Memory a task or a call names: any object exporting a contiguous buffer
# (bytearray, memoryview, array.array, a NumPy array, bytes for reading).
_BufferLike: TypeAlias = Buffer | _HostArray
# One item of reads= / writes= / readwrites= / commutes=.
_Access: TypeAlias = _BufferLike | Data | unordered
# reads= ...: one access, or an iterable of them (None: none).
_Accesses: TypeAlias = _Access | Iterable[_Access] | None

# deps=: Tasks (task-space slots too), TaskLists (T[0:4]), whole TaskSpaces,
# and lists or tuples of these, nested (spelt out three levels deep: a
# recursive alias would let a str through, being a sequence of itself).
_Dep0: TypeAlias = Task[Any] | TaskSpace
_Dep1: TypeAlias = Task[Any] | TaskSpace | Sequence[_Dep0]
_Dep2: TypeAlias = Task[Any] | TaskSpace | Sequence[_Dep1]
_Dep3: TypeAlias = Task[Any] | TaskSpace | Sequence[_Dep2]
_Deps: TypeAlias = Task[Any] | TaskSpace | Iterable[_Dep3] | None

# A device set: weft.cpu, weft.gpu, weft.gpu(i), weft.gpu * k, a string
# ("gpu:1", "2*gpu", "cpu+gpu"), or a non-empty tuple of them (a pinned set:
# (weft.gpu(0), weft.gpu(2)); (weft.cpu, weft.gpu)).
_DeviceSpec: TypeAlias = DeviceSet | str | tuple[_DeviceSpec, *tuple[_DeviceSpec, ...]]
# placement=: one device set, or a list of alternatives (the runtime's policy picks one).
_Placement: TypeAlias = _DeviceSpec | Sequence[_DeviceSpec] | None

# weft.SUM, weft.MIN, weft.MAX: a type of their own, so that an access mode
# (weft.RW) or another int is refused where an operator is expected.
_ReductionOp = NewType("_ReductionOp", int)
_BuiltinOp: TypeAlias = _ReductionOp | Literal["sum", "min", "max"]
_ReduceOp: TypeAlias = _BuiltinOp | Reduction
_ReducePair: TypeAlias = tuple[_BufferLike | Data, _ReduceOp]
# reduces=: one (buffer, op) pair, or an iterable of pairs ([buffer, op] lists too).
_Reduces: TypeAlias = _ReducePair | Iterable[_ReducePair | list[Any]] | None
# scratch=: sizes in bytes, or buffers / weft.Data whose size (and shape) is taken.
_Scratch: TypeAlias = Iterable[SupportsIndex | _BufferLike | Data] | None

# Every timeout=: seconds (an int or a float, or what converts to a float);
# None, float('inf') and huge values wait without limit.
_Timeout: TypeAlias = SupportsFloat | SupportsIndex | None

_TaskStatus: TypeAlias = Literal["declared", "waiting", "ready", "running", "enqueued", "completed", "failed", "cancelled"]
_Mode: TypeAlias = Literal["r", "w", "rw"]

# A key naming several task-space slots: T[0:4], T[range(0, 8, 2)], T[[1, 5]].
_MultiKey: TypeAlias = slice | range | list[Any]

class _SpawnOptionsBase(TypedDict, total=False):
    deps: _Deps
    reads: _Accesses
    writes: _Accesses
    readwrites: _Accesses
    commutes: _Accesses
    reduces: _Reduces
    scratch: _Scratch
    name: str | None
    priority: int | None
    task: Task[Any] | None
    placement: _Placement
    share: float | None
    memory: int | None
    device_data: bool
    cost: float | None
    kind: str | None

class _SpawnOptions(_SpawnOptionsBase, total=False):
    kwargs: dict[str, Any] | None

class _NativeSpawnOptionsAt(_SpawnOptionsBase, total=False):
    runtime: Runtime | None

class _SpawnOptionsAt(_SpawnOptions, total=False):
    runtime: Runtime | None

@type_check_only
class _SpawnDecorator(Protocol):
    """What @weft.spawn(...) / @rt.spawn(...) return: spawns the function
    below at once; the decorated name is the Task."""

    @overload
    def __call__(self, fn: Callable[..., Coroutine[Any, Any, _T]], /) -> Task[_T]: ...
    @overload
    def __call__(self, fn: Callable[..., _T], /) -> Task[_T]: ...

class _DeviceInfo(TypedDict):
    kind: Literal["cpu", "vgpu", "cuda"]
    index: int
    ordinal: int
    name: str
    memory: int
    memory_used: int

class _Stats(TypedDict):
    tasks_spawned: int
    tasks_run: int
    tasks_failed: int
    tasks_cancelled: int
    steals: int
    parks: int
    idle_ns: int
    inflight: int
    inflight_peak: int
    bytes_per_task: int
    trace_dropped: int
    workers: int
    autopins: int
    gil_kept: int

class _Bound(TypedDict):
    """Runtime.bound(): a lower bound of the makespan (seconds), weft_runtime_bound's."""

    tasks: int
    pending: int
    no_model: int
    makespan: float
    path: float
    area: float
    bound: float
    cpu_slots: int
    gpus: int

@type_check_only
class _MPIComm(Protocol):
    """An mpi4py communicator (mpi4py.MPI.Comm)."""

    def Get_rank(self) -> int: ...
    def Get_size(self) -> int: ...

# Buffers of a communication: one per member (None: another rank's), or
# across ranks this rank's alone.
_CommBuffers: TypeAlias = _BufferLike | Data | Sequence[_BufferLike | Data | None]
_CommDeps: TypeAlias = Task[Any] | Iterable[Task[Any]] | None

# ---- constants ---------------------------------------------------------------

R: Final = 1
W: Final = 2
RW: Final = 3
COMMUTE: Final = 4
SUM: Final[_ReductionOp]  # 4096
MIN: Final[_ReductionOp]  # 8192
MAX: Final[_ReductionOp]  # 12288

# ---- exceptions and warnings -------------------------------------------------

class CancelledError(_FuturesCancelledError):
    """A task never ran: a task it depends on failed or was cancelled, or it
    was cancelled.  __cause__ is the failed task's exception when known."""

    task_name: str | None
    cause_id: int
    cause_name: str | None

class TaskWarning(RuntimeWarning): ...

# ---- types -------------------------------------------------------------------

@final
class Runtime:
    def __new__(
        cls,
        workers: int | None = None,
        *,
        trace: str | bytes | PathLike[str] | PathLike[bytes] | None = None,
        spin_ns: int | None = None,
        max_inflight: int | None = None,
        gil_spin_ns: int | None = None,
        spawn_gil: Literal["hold", "release", "yield"] | None = None,
        devices: str | None = None,
        vgpu_memory: int | None = None,
        policy: Literal["dmda", "load", "round-robin", "balance"] | None = None,
        bound: bool | None = None,
        pin_workers: bool | Literal["auto"] | None = None,
        gil_hold_ns: int | None = None,
    ) -> Self: ...
    @overload
    def spawn(self, fn: Native, arg: _BufferLike | None = None, /, **options: Unpack[_SpawnOptionsBase]) -> Task[None]: ...
    @overload
    def spawn(self, fn: Callable[..., Coroutine[Any, Any, _T]], /, *args: Any, **options: Unpack[_SpawnOptions]) -> Task[_T]: ...
    @overload
    def spawn(self, fn: Callable[..., _T], /, *args: Any, **options: Unpack[_SpawnOptions]) -> Task[_T]: ...
    @overload
    def spawn(self, **options: Unpack[_SpawnOptions]) -> _SpawnDecorator: ...
    def wait_all(self, timeout: _Timeout = None) -> None: ...
    def close(self) -> None: ...
    def data(self, obj: _BufferLike | Data, /) -> Data: ...
    @overload
    def partition(self, obj: _BufferLike | Data, grid: int, halo: SupportsIndex = 0, *, cols: SupportsIndex | None = None) -> list[Data]: ...
    @overload
    def partition(
        self, obj: _BufferLike | Data, grid: tuple[SupportsIndex, SupportsIndex], halo: SupportsIndex = 0, *, cols: SupportsIndex | None = None
    ) -> list[list[Data]]: ...
    def acquire(self, obj: _Obj, mode: _Mode = "r", timeout: _Timeout = None) -> Acquired[_Obj]: ...
    def fetch(self, obj: _Obj, timeout: _Timeout = None) -> _Obj: ...
    def unregister(self, obj: _BufferLike | Data, /) -> None: ...
    def cancel_pending(self) -> None: ...
    def stats(self) -> _Stats: ...
    def bound(self) -> _Bound: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None, /) -> None: ...
    @property
    def workers(self) -> int: ...
    @property
    def policy(self) -> str: ...
    @property
    def devices(self) -> list[_DeviceInfo]: ...
    @property
    def gil_handoff(self) -> bool: ...
    @property
    def closed(self) -> bool: ...

@final
class Task(Generic[_R_co]):
    """A spawned task, or a task-space slot (spawned yet or not).  Made by
    spawn() and TaskSpace[key], never directly."""

    def wait(self, timeout: _Timeout = None) -> Self: ...
    def result(self, timeout: _Timeout = None) -> _R_co: ...
    def exception(self, timeout: _Timeout = None) -> BaseException | None: ...
    def done(self) -> bool: ...
    def cancel(self) -> bool: ...
    @property
    def status(self) -> _TaskStatus: ...
    @property
    def name(self) -> str | None: ...
    @property
    def id(self) -> int | None: ...
    def __await__(self) -> Generator[Any, Any, _R_co]: ...
    def __class_getitem__(cls, item: Any, /) -> types.GenericAlias: ...
    # Raises TypeError: a task given to NumPy is not its result.
    def __array__(self, *args: Any, **kwargs: Any) -> NoReturn: ...

@final
class TaskSpace:
    def __new__(cls, name: str = "T") -> Self: ...
    @property
    def name(self) -> str: ...
    # T[0:4], T[range(4)], T[[1, 5]], and tuples with one of those among
    # their first three parts (T[0:4, 1], T[1:3, 0:2]): a TaskList; any other
    # hashable key names one slot.
    @overload
    def __getitem__(self, key: _MultiKey, /) -> TaskList: ...  # type: ignore[overload-overlap]
    @overload
    def __getitem__(self, key: tuple[_MultiKey, *tuple[Any, ...]], /) -> TaskList: ...  # type: ignore[overload-overlap]
    @overload
    def __getitem__(self, key: tuple[Any, _MultiKey, *tuple[Any, ...]], /) -> TaskList: ...  # type: ignore[overload-overlap]
    @overload
    def __getitem__(self, key: tuple[Any, Any, _MultiKey, *tuple[Any, ...]], /) -> TaskList: ...  # type: ignore[overload-overlap]
    @overload
    def __getitem__(self, key: Hashable, /) -> Task[Any]: ...
    def __len__(self) -> int: ...
    def __contains__(self, key: object, /) -> bool: ...
    def __iter__(self) -> Iterator[Any]: ...
    def tasks(self) -> list[Task[Any]]: ...
    def clear(self) -> None: ...
    def wait(self, timeout: _Timeout = None) -> None: ...
    def __await__(self) -> Generator[Any, Any, None]: ...

@final
class Data:
    """The memory a buffer covers, registered with a runtime (rt.data(obj));
    a tile of a partitioned array too."""

    @property
    def obj(self) -> Any: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def registered(self) -> bool: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def tiles(self) -> tuple[Data, ...] | None: ...
    @property
    def grid(self) -> tuple[int, int] | None: ...
    @property
    def parent(self) -> Data | None: ...
    @property
    def index(self) -> tuple[int, int] | None: ...
    @property
    def span(self) -> tuple[int, int, int, int] | None: ...
    @property
    def interior(self) -> tuple[int, int, int, int] | None: ...
    @property
    def window(self) -> tuple[slice, ...] | None: ...
    @property
    def inner(self) -> tuple[slice, ...] | None: ...
    @property
    def halo(self) -> int | None: ...
    @overload
    def partition(self, grid: int, halo: SupportsIndex = 0, *, cols: SupportsIndex | None = None) -> list[Data]: ...
    @overload
    def partition(self, grid: tuple[SupportsIndex, SupportsIndex], halo: SupportsIndex = 0, *, cols: SupportsIndex | None = None) -> list[list[Data]]: ...
    def unregister(self) -> None: ...
    def wont_use(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None, /) -> None: ...

@final
class View:
    """A task's data access on the task's device, without a copy
    (weft.context().view(i)); valid while the task runs."""

    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def itemsize(self) -> int: ...
    @property
    def ndim(self) -> int: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...]: ...
    @property
    def format(self) -> str: ...
    @property
    def typestr(self) -> str: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def device(self) -> str: ...
    @property
    def on_host(self) -> bool: ...
    @property
    def stream(self) -> int | None: ...
    @property
    def index(self) -> int: ...
    @property
    def valid(self) -> bool: ...
    @property
    def __array_interface__(self) -> dict[str, Any]: ...
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...
    def __dlpack__(
        self, stream: int | None = None, *, max_version: tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None, copy: bool | None = None
    ) -> CapsuleType: ...
    def __dlpack_device__(self) -> tuple[int, int]: ...
    # The buffer protocol, where the memory is the host's (a host view, a
    # virtual GPU's replica); a CUDA view raises BufferError.  (A method
    # Python shows from 3.12 on; declared for 3.11 too, as typeshed does for
    # bytes, so that a View is a Buffer wherever a buffer is taken.)
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class Acquired(Generic[_O_co]):
    """A buffer acquired by rt.acquire(): the caller's until release()."""

    def release(self) -> None: ...
    def __enter__(self) -> _O_co: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None, /) -> None: ...
    @property
    def held(self) -> bool: ...
    @property
    def obj(self) -> _O_co: ...
    def __class_getitem__(cls, item: Any, /) -> types.GenericAlias: ...

@final
class Native:
    """A C function `int fn(void *arg)` as a task body (made by weft.native)."""

    def __new__(cls, address: int, obj: object = None, model_ns: int = 0, name: str = ...) -> Self: ...
    @property
    def address(self) -> int: ...
    @property
    def fn(self) -> Any: ...
    @property
    def model_ns(self) -> int: ...
    @property
    def name(self) -> str: ...

@final
class Communicator:
    def __new__(
        cls, gpus: Iterable[SupportsIndex] | None = None, *, runtime: Runtime | None = None, timeout: SupportsFloat | SupportsIndex | None = None
    ) -> Self: ...
    @classmethod
    def mpi(
        cls,
        comm: _MPIComm | int | None = None,
        *,
        gpus: Iterable[SupportsIndex] | None = None,
        runtime: Runtime | None = None,
        timeout: SupportsFloat | SupportsIndex | None = None,
    ) -> Communicator: ...
    def allreduce(
        self, recv: _CommBuffers, send: _CommBuffers | None = None, op: _BuiltinOp = ..., count: int | None = None, *, name: str | None = None, deps: _CommDeps = ()
    ) -> Task[None]: ...
    def broadcast(
        self,
        recv: _CommBuffers,
        send: _CommBuffers | None = None,
        root: SupportsIndex | None = 0,
        count: int | None = None,
        *,
        name: str | None = None,
        deps: _CommDeps = (),
    ) -> Task[None]: ...
    def reduce(
        self,
        recv: _CommBuffers | None,
        send: _CommBuffers | None = None,
        op: _BuiltinOp = ...,
        root: SupportsIndex | None = 0,
        count: int | None = None,
        *,
        name: str | None = None,
        deps: _CommDeps = (),
    ) -> Task[None]: ...
    def allgather(self, recv: _CommBuffers, send: _CommBuffers, count: int | None = None, *, name: str | None = None, deps: _CommDeps = ()) -> Task[None]: ...
    def reduce_scatter(
        self, recv: _CommBuffers, send: _CommBuffers, op: _BuiltinOp = ..., count: int | None = None, *, name: str | None = None, deps: _CommDeps = ()
    ) -> Task[None]: ...
    # deps= is refused but for None: an exchange is ordered by its buffers.
    def exchange(self, transfers: Iterable[Transfer | Mapping[str, Any]], *, name: str | None = None, deps: None = None) -> Task[None]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: types.TracebackType | None, /) -> None: ...
    @property
    def size(self) -> int: ...
    @property
    def rank(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def runtime(self) -> Runtime: ...
    @property
    def across_ranks(self) -> bool: ...

@final
class _Await(Generic[_T]):
    """What weft.gather() returns: awaitable in an `async def` body weft runs."""

    def __await__(self) -> Generator[Any, Any, _T]: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> Any: ...

# ---- functions ---------------------------------------------------------------

@overload
def spawn(fn: Native, arg: _BufferLike | None = None, /, **options: Unpack[_NativeSpawnOptionsAt]) -> Task[None]: ...
@overload
def spawn(fn: Callable[..., Coroutine[Any, Any, _T]], /, *args: Any, **options: Unpack[_SpawnOptionsAt]) -> Task[_T]: ...
@overload
def spawn(fn: Callable[..., _T], /, *args: Any, **options: Unpack[_SpawnOptionsAt]) -> Task[_T]: ...
@overload
def spawn(**options: Unpack[_SpawnOptionsAt]) -> _SpawnDecorator: ...
def wait_all(timeout: _Timeout = None) -> None: ...
def current_runtime() -> Runtime | None: ...
def current_task() -> Task[Any] | None: ...
def data(obj: _BufferLike | Data, /) -> Data: ...
@overload
def gather(space: TaskSpace, /) -> _Await[None]: ...
@overload
def gather(tasks: Iterable[Task[_T]], /) -> _Await[list[_T]]: ...
@overload
def gather(*tasks: Task[_T]) -> _Await[list[_T]]: ...
def mpi_init() -> None: ...
def mpi_finalize() -> None: ...

# ---- private: for the package's own modules ------------------------------------

_open_runtimes: list[Runtime]

def _close_all() -> None: ...
def _wait_any(tasks: list[Task[Any]], timeout: _Timeout = None, /) -> list[int]: ...
def _set_space(
    expand: Callable[[TaskSpace, Any], TaskList], task_list: type[TaskList], flatten_deps: Callable[[Any], list[Task[Any]]], /
) -> None: ...
def _set_access(unordered: type[unordered], /) -> None: ...
def _set_placement(
    normalize: Callable[[Any, Any, Any, Any], tuple[Any, list[tuple[int, int, int, float, int, Any, int]]]],
    call: Callable[[Context, Callable[..., Any], tuple[Any, ...], dict[str, Any] | None], Any],
    variants: type[Variants[..., Any]],
    device_set: type[DeviceSet],
    context: type[Context],
    /,
) -> None: ...
def _parse_placement(s: str, /) -> tuple[bool, int, int]: ...
def _busy(us: SupportsFloat | SupportsIndex, /) -> None: ...
def _inflight(runtime: Runtime, /) -> int: ...
def _gil_spin_signal(runtime: Runtime, /) -> Literal['gil', 'claim', 'none']: ...
def _context() -> Context | None: ...
def _frame_task() -> int: ...
def _view(which: SupportsIndex | _BufferLike | Data, task: int | None = None, /) -> View: ...
def _views(task: int | None = None, /) -> tuple[View, ...]: ...
def _scratch(k: SupportsIndex = 0, task: int | None = None, /) -> View: ...
def _addresses(task: int | None = None, /) -> tuple[int, ...]: ...
def _ctx_data(i: int, /) -> int | None: ...
# reads / writes: buffers and access indices (the C code checks each).
def _queue(gpu: int, fn: Callable[[], object], model_ns: int, reads: tuple[object, ...], writes: tuple[object, ...], /) -> None: ...
def _queue_native(
    gpu: int,
    address: int,
    fn: object,
    arg: _BufferLike | None,
    model_ns: int,
    reads: tuple[object, ...],
    writes: tuple[object, ...],
    /,
) -> None: ...
def _grid_block(rows: int, cols: int, elem: int, halo: int, brows: int, bcols: int, b: int, /) -> tuple[int, int, int, int, int, int]: ...
def _grid_exchange(
    rows: int, cols: int, elem: int, halo: int, brows: int, bcols: int, members: Sequence[int], /
) -> list[tuple[int, int, int, int, int, int, int, int, int, int]]: ...
