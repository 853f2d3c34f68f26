"""Task spaces from Python: keys that name several slots at once, as in
Parla.  The C extension calls `_expand` for a key with a slice, a range, a
list or a negative int in it, and `_flatten_deps` for a deps= value that
is not a plain list of Tasks.

    T[0:4]          T[0], T[1], T[2], T[3]            (a weft.TaskList)
    T[0:4, 1]       T[0, 1], T[1, 1], T[2, 1], T[3, 1]
    T[1:3, 0:2]     T[1, 0], T[1, 1], T[2, 0], T[2, 1]
    T[range(0, 8, 2)], T[[1, 5]]
    T[-1]           no slot: an empty TaskList (indices start at 0, so that
                    Parla's deps=[T[i-1]] is no dependency at i=0)
    deps=T          the tasks spawned into T so far (as `await T`)
"""
from __future__ import annotations

import operator
from collections.abc import Generator, Hashable, Iterable
from typing import TYPE_CHECKING, Any, Self

if TYPE_CHECKING:
    from ._weft import Task, TaskSpace

    _TaskTuple = tuple[Task[Any], ...]
else:
    _TaskTuple = tuple


class TaskList(_TaskTuple):
    """Task-space slots named at once: T[0:4], T[0:4, 1], T[1:3, 0:2], T[-1]
    (none).  A tuple of weft.Task slots (spawned yet or not) in key order,
    with `label` ("T[0:4]").  Use it in deps= (alone or in a list), wait for
    it (`.wait()`, `await T[0:4]`: the list of results, as weft.gather), or
    iterate it.  Spawning goes into one slot: task=T[i]."""

    label: str

    def __new__(cls, tasks: Iterable[Task[Any]], label: str) -> Self:
        self = super().__new__(cls, tasks)
        self.label = label
        return self

    def wait(self, timeout: float | None = None) -> Self:
        """Wait until every slot's task was spawned and has finished (failed
        or cancelled ones included: their outcome is not raised here).
        timeout: seconds for all of them together; TimeoutError when it
        runs out."""
        if timeout is None:
            for t in self:
                t.wait()
            return self
        import time

        end = time.monotonic() + timeout
        for t in self:
            t.wait(max(0.0, end - time.monotonic()))
        return self

    def done(self) -> bool:
        """True once every slot's task has finished."""
        return all(t.done() for t in self)

    def __await__(self) -> Generator[Any, Any, list[Any]]:
        from . import _weft

        return _weft.gather(*self).__await__()

    def __repr__(self) -> str:
        return f"<weft.TaskList {self.label}: {len(self)} slot{'' if len(self) == 1 else 's'}>"


def _fmt(part: object) -> str:
    if isinstance(part, slice):
        a = "" if part.start is None else repr(part.start)
        b = "" if part.stop is None else repr(part.stop)
        return f"{a}:{b}" if part.step is None else f"{a}:{b}:{part.step!r}"
    return repr(part)


def _values(space: TaskSpace, part: object, label: str) -> list[Any]:
    """The key components one index component stands for."""
    if isinstance(part, slice):
        if part.stop is None:
            raise ValueError(f"{label}: a slice of a task space needs its end ({space.name}[0:n]): a space "
                             f"has no length of its own. To follow every task spawned into it so far, pass "
                             f"the space itself: deps=[{space.name}]")
        try:
            start = 0 if part.start is None else operator.index(part.start)
            stop = operator.index(part.stop)
            step = 1 if part.step is None else operator.index(part.step)
        except TypeError:
            raise TypeError(f"{label}: a slice of a task space takes ints") from None
        if step == 0:
            raise ValueError(f"{label}: slice step cannot be zero")
        return [v for v in range(start, stop, step) if v >= 0]
    if isinstance(part, range):
        return [v for v in part if v >= 0]
    if isinstance(part, list):
        return [v for v in part if not (type(v) is int and v < 0)]
    if type(part) is int and part < 0:
        return []
    return [part]


def _expand(space: TaskSpace, key: Hashable | slice | range | list[Any]) -> TaskList:
    """T[key] for a key naming several slots (or none): a TaskList."""
    parts = key if isinstance(key, tuple) else (key,)
    label = f"{space.name}[{', '.join(_fmt(p) for p in parts)}]"
    keys: list[tuple[Any, ...]] = [()]
    for p in parts:
        vals = _values(space, p, label)
        keys = [k + (v,) for k in keys for v in vals]
    one = not isinstance(key, tuple)
    return TaskList([space[k[0] if one else k] for k in keys], label)


def _flatten_deps(deps: Any) -> list[Task[Any]]:
    """deps= as a list of Tasks: lists, tuples and TaskLists are flattened,
    a TaskSpace stands for the tasks spawned into it so far."""
    from ._weft import Task, TaskSpace

    out: list[Task[Any]] = []

    def add(x: object, where: str) -> None:
        if isinstance(x, Task):
            out.append(x)
        elif isinstance(x, TaskSpace):
            out.extend(t for t in x.tasks() if t.status != "declared")
        elif isinstance(x, (list, tuple)):
            for i, y in enumerate(x):
                add(y, f"{where}[{i}]")
        else:
            raise TypeError(f"spawn(): {where} is not a weft.Task but {type(x).__name__!r} (deps= takes tasks, "
                            f"task-space slots T[i], slices such as T[0:i], whole TaskSpaces, or lists of them)")

    if isinstance(deps, TaskSpace):
        add(deps, "deps")
    else:
        for i, x in enumerate(deps):
            add(x, f"deps[{i}]")
    return out
