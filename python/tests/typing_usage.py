"""Typed use of weft's public API, for the type checker only (pytest does not
collect it: its name does not start with test_; importing it runs nothing).

`make python-test` runs `mypy --strict` over it (pyproject.toml, [tool.mypy]).
The first part is ordinary use, with `assert_type` pinning what the stubs
infer.  The second part is misuse, one mistake a line, each silenced with
`# type: ignore[code]`: mypy's --warn-unused-ignores (part of --strict)
fails the check if the stubs stop rejecting one of them, and the error code
says that it is rejected for the expected reason.
"""
from __future__ import annotations

import array
import ctypes
from collections.abc import Callable
from typing import Any, Literal, assert_type

import numpy as np
import numpy.typing as npt

import weft


def square(i: int) -> int:
    return i * i


async def total(n: int) -> int:
    parts = [weft.spawn(square, i) for i in range(n)]
    assert_type(await weft.gather(parts), list[int])
    assert_type(await weft.gather(parts[0], parts[1]), list[int])
    s = sum(await weft.gather(parts))
    assert_type(await parts[0], int)
    return s


def fill(buf: bytearray) -> None:
    buf[0] = 42


def usage() -> None:
    with weft.Runtime(workers=2, devices="cpu,vgpu:4", policy="balance", trace="t.json") as rt:
        assert_type(rt, weft.Runtime)
        T = weft.TaskSpace("T")
        for i in reversed(range(1, 101)):
            weft.spawn(square, i, task=T[i], deps=[T[i - 1]] if i > 1 else [])
        assert_type(T[3], weft.Task[Any])
        assert_type(T[0:4], weft.TaskList)
        assert_type(T[0:4, 1], weft.TaskList)
        assert_type(T[1, 0:2], weft.TaskList)
        assert_type(T["x", 2], weft.Task[Any])
        assert_type(T[range(0, 8, 2)], weft.TaskList)
        t = weft.spawn(square, 3)
        assert_type(t, weft.Task[int])
        assert_type(t.result(timeout=1.5), int)
        assert_type(t.wait(), weft.Task[int])
        assert_type(t.exception(), BaseException | None)
        assert_type(t.status, weft._weft._TaskStatus)
        assert_type(rt.spawn(total, 10), weft.Task[int])
        assert_type(weft.spawn(print, "x", runtime=rt), weft.Task[None])
        done, not_done = weft.wait([t, t], timeout=0.5, return_when=weft.FIRST_COMPLETED)
        assert_type(done, set[weft.Task[int]])
        assert_type(weft.wait([t]).not_done, set[weft.Task[int]])
        for f in weft.as_completed([t], timeout=2):
            assert_type(f.result(), int)

        # deps=: a Task, slots, slices, whole spaces, nested lists, iterables.
        later = [weft.spawn(square, i) for i in range(3)]
        weft.spawn(print, deps=t)
        weft.spawn(print, deps=T)
        weft.spawn(print, deps=[T])
        weft.spawn(print, deps=T[0:4])
        weft.spawn(print, deps=[T[0:4], t, [later, T[5]]])
        weft.spawn(print, deps=(x for x in later))

        # Data: any buffer, weft.Data, weft.unordered(...).
        buf = bytearray(8)
        a: npt.NDArray[np.float64] = np.zeros(16)
        weft.spawn(fill, buf, writes=[buf])
        weft.spawn(print, reads=buf, writes=[a, memoryview(buf)], readwrites=(array.array("d", [1.0]),))
        weft.spawn(print, readwrites=[weft.unordered(a)], commutes=weft.data(buf))
        weft.spawn(print, reads=[rt.data(a)], reduces=[(a, weft.SUM), (buf, "max")])
        weft.spawn(print, reduces=(a, weft.MIN))
        d = rt.data(a)
        assert_type(d.partition(4), list[weft.Data])
        assert_type(rt.partition(np.zeros((8, 8)), (2, 2), halo=1), list[list[weft.Data]])
        assert_type(d.tiles, tuple[weft.Data, ...] | None)
        with rt.acquire(a, "rw") as held:
            assert_type(held, npt.NDArray[np.float64])
        assert_type(weft.fetch(buf), bytearray)
        assert_type(rt.acquire(d), weft.Acquired[weft.Data])

        # Placement: device sets, tuples (pinned), lists (alternatives), strings.
        weft.spawn(print, placement=weft.gpu)
        weft.spawn(print, placement=weft.gpu(1), share=0.5, memory=1 << 20)
        weft.spawn(print, placement=weft.gpu * 2)
        weft.spawn(print, placement=(weft.cpu, weft.gpu))
        weft.spawn(print, placement=(weft.gpu(0), weft.gpu(2)))
        weft.spawn(print, placement=[weft.gpu * 2, weft.cpu, "gpu:1", (weft.gpu(0), weft.gpu(1))])
        alternatives = [weft.gpu(i) for i in range(4)]
        weft.spawn(print, placement=alternatives, device_data=True)
        assert_type(weft.cpu + weft.gpu, weft.DeviceSet)

        @weft.variants
        def step(x: float) -> float:
            return x

        @step.variant(weft.gpu)
        def step_gpu(x: float) -> float:
            ctx = weft.context()
            assert_type(ctx, weft.Context)
            assert_type(ctx.devices, tuple[int, ...])
            v = ctx.view(0)
            assert_type(v, weft.View)
            assert_type(ctx.views, tuple[weft.View, ...])
            ctx.queue(lambda: None, reads=[v], writes=v, model_ns=1000)
            for g in ctx.each_device():
                assert_type(g, int)
            return x

        assert_type(step(2.0), float)
        assert_type(rt.spawn(step, 1.0), weft.Task[float])
        assert_type(step.body_for(weft.gpu(1)), Callable[..., Any])

        # The decorator form: the name is the Task.
        @weft.spawn(deps=[t], name="after")
        def after() -> str:
            return "done"

        assert_type(after, weft.Task[str])

        @rt.spawn()
        async def coro() -> bytes:
            return b""

        assert_type(coro, weft.Task[bytes])

        # Native bodies and reductions: C functions.
        cfn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(lambda p: 0)
        k = weft.native(cfn, model_ns=100)
        assert_type(weft.spawn(k, b"\0" * 8, readwrites=[a]), weft.Task[None])
        red = weft.Reduction(0x1000, itemsize=16, identity=bytes(16), name="argmin")
        weft.spawn(print, reduces=[(buf, red)])

        # Communication.
        with weft.Communicator(runtime=rt, timeout=10) as comm:
            grads = [np.full(8, float(k)) for k in range(4)]
            assert_type(comm.allreduce(grads, op=weft.SUM), weft.Task[None])
            comm.broadcast(grads, root=1, deps=[t])
            g = weft.Grid(8, 8, elem=8, halo=1, blocks=(2, 2))
            assert_type(g.block(0), weft.GridBlock)
            comm.exchange(g.exchange([0, 1, 2, 3], grads))
            comm.exchange([weft.Transfer(0, 1, grads[0], grads[1], 8), {"from": 1, "to": 0, "src": None,
                                                                         "dst": grads[0], "nbytes": 8}])

        assert_type(rt.devices[0]["kind"], Literal["cpu", "vgpu", "cuda"])
        assert_type(rt.stats()["tasks_run"], int)
        assert_type(rt.bound()["bound"], float)  # (a runtime made with bound=True)
        rt.wait_all(timeout=None)
        assert_type(weft.current_runtime(), weft.Runtime | None)
        assert_type(weft.current_task(), weft.Task[Any] | None)

    try:
        t.result()
    except weft.CancelledError as e:
        assert_type(e.cause_id, int)
    assert issubclass(weft.TaskWarning, RuntimeWarning)


async def noop() -> None:
    pass


def misuse(rt: weft.Runtime, t: weft.Task[int], T: weft.TaskSpace, a: npt.NDArray[np.float64],
           comm: weft.Communicator) -> None:
    """Each line is a mistake the stubs must refuse (see the module docstring).

    The spawned body is an `async def` here: with a plain function, mypy
    reports a wrong keyword of spawn() twice, the keyword's error and
    "Argument 1 ... expected Callable[..., Coroutine[...]]" (it reports a
    call no overload matches against the first overload whose shape fits,
    the one for coroutine functions)."""
    weft.spawn(noop, deps=["T[0]"])  # type: ignore[list-item]             # a dependency is a Task, not its name
    weft.spawn(noop, deps=5)  # type: ignore[call-overload]                # nor a number
    weft.spawn(noop, reads=["abc"])  # type: ignore[list-item]             # a str is not a buffer
    weft.spawn(noop, writes=[3])  # type: ignore[list-item]                # nor an int
    weft.wait(["x"])  # type: ignore[arg-type]                             # weft.wait takes tasks
    weft.spawn(noop, dependencies=[t])  # type: ignore[call-overload]      # Parla's keyword: weft's is deps=
    weft.spawn(T[0], noop)  # type: ignore[call-overload]                  # Parla's order: the function comes first
    weft.spawn(noop, task=T[0:2])  # type: ignore[call-overload]           # one slot, not a slice
    weft.spawn(noop, placement=[3])  # type: ignore[list-item]             # placement: device sets or strings
    weft.spawn(noop, placement=weft.gpu("1"))  # type: ignore[arg-type]    # a GPU number is an int
    weft.spawn(noop, share="half")  # type: ignore[call-overload]          # share= is a fraction
    weft.spawn(noop, reduces=[(a, weft.RW)])  # type: ignore[list-item]    # an access mode is not an operator
    weft.spawn(noop, reduces=[(a, "avg")])  # type: ignore[list-item]      # no such operator
    weft.spawn(noop, name=3)  # type: ignore[call-overload]                # name= is a str
    weft.spawn(noop, kwargs={1: 2})  # type: ignore[dict-item]             # the body's keywords are str
    weft.spawn(weft.native(0x1000), b"", b"")  # type: ignore[call-overload]  # a native body takes one argument
    weft.Runtime(policy="fastest")  # type: ignore[arg-type]                # "load", "round-robin" or "balance"
    weft.Runtime(workers="2")  # type: ignore[arg-type]
    weft.Runtime(bound=1)  # type: ignore[arg-type]                         # True, False or None
    rt.acquire(a, "x")  # type: ignore[arg-type]                            # mode "r", "w" or "rw"
    t.result().upper()  # type: ignore[attr-defined]                        # the body returned an int
    t.wait(timeout="1s")  # type: ignore[arg-type]                          # seconds, a number
    weft.gather(1, 2)  # type: ignore[call-overload]                        # gather takes Tasks
    weft.native(lambda p: 0)  # type: ignore[arg-type]                      # a C function, not a Python one
    weft.unordered("abc")  # type: ignore[arg-type]
    rt.partition(a, (2, 2))[0].unregister()  # type: ignore[attr-defined]   # a (2, 2) grid gives rows of tiles
    comm.allreduce([a], op=weft.MIN, count="8")  # type: ignore[arg-type]
    comm.allreduce([a], op=weft.R)  # type: ignore[arg-type]

    @weft.spawn()
    def body() -> int:
        return 1

    body()  # type: ignore[operator]                                        # the decorated name is the Task
