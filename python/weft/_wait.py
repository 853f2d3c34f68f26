"""Waiting for the first of several tasks: weft.wait and weft.as_completed,
with the semantics of concurrent.futures.wait and as_completed (and its
FIRST_COMPLETED / FIRST_EXCEPTION / ALL_COMPLETED constants, the same
objects), for weft.Task objects.

The waiting is the extension's `_wait_any` (python/weft/wait.c, on the C
core's weft_task_wait_any): it sleeps until one of the tasks finishes, and
in a body the worker runs the awaited tasks meanwhile, as for
Task.result(), so a body that waits never starves its runtime.

Also here: what concurrent.futures.wait / as_completed find when they are
given weft tasks, so that they raise a TypeError naming these functions
instead of an AttributeError from inside the standard library.
"""
from __future__ import annotations

import math
import time
from collections.abc import Generator, Iterable, Iterator
from concurrent.futures import ALL_COMPLETED as ALL_COMPLETED
from concurrent.futures import FIRST_COMPLETED as FIRST_COMPLETED
from concurrent.futures import FIRST_EXCEPTION as FIRST_EXCEPTION
from typing import Any, Generic, NamedTuple, TypeVar

from . import _weft
from ._weft import Task, TaskSpace

_T = TypeVar("_T")

_RETURN_WHEN = (FIRST_COMPLETED, FIRST_EXCEPTION, ALL_COMPLETED)


class DoneAndNotDone(NamedTuple, Generic[_T]):
    """What weft.wait returns: the tasks that finished and those that did
    not (as concurrent.futures.wait's pair)."""

    done: set[Task[_T]]
    not_done: set[Task[_T]]


def _tasks_of(tasks: Iterable[Task[_T]], fn: str) -> list[Task[_T]]:
    """The distinct tasks of `tasks`, in first-seen order; TypeError naming
    what was passed instead of a task."""
    if isinstance(tasks, Task):
        raise TypeError(f"weft.{fn}() takes an iterable of tasks, not one weft.Task: pass [task] "
                        "(or call task.wait() / task.result())")
    if isinstance(tasks, TaskSpace):
        # (Iterating a space gives its keys, not its tasks.)
        raise TypeError(f"weft.{fn}() takes the tasks of a weft.TaskSpace, not the space: pass its "
                        "slots, as T[0:n] or [T[k] for k in keys] (or call T.wait() for every task "
                        "spawned into it so far)")
    try:
        it = iter(tasks)
    except TypeError:
        raise TypeError(f"weft.{fn}() takes an iterable of weft.Task objects (a list, a set, a "
                        f"TaskList), not {type(tasks).__name__!r}") from None
    items = list(it)  # (what the iteration itself raises propagates as it is)
    for i, t in enumerate(items):
        if not isinstance(t, Task):
            raise TypeError(f"weft.{fn}(): item {i} is {type(t).__name__!r}, not a weft.Task: pass the "
                            "tasks weft.spawn() returns (or task-space slots); wait for other futures "
                            "with their own library's wait")
    return list(dict.fromkeys(items))


def _deadline(timeout: float | None, fn: str) -> float:
    """The monotonic time at which the wait gives up (inf: never)."""
    if timeout is None:
        return math.inf
    if isinstance(timeout, (str, bytes, bytearray, bool)) or not (
            hasattr(timeout, "__float__") or hasattr(timeout, "__index__")):
        raise TypeError(f"weft.{fn}(): timeout must be a number of seconds or None, "
                        f"got {type(timeout).__name__!r}")
    try:
        seconds = float(timeout)
    except OverflowError:
        # A number too large for a float (an int): its sign decides, as for
        # Task.result's timeout.
        seconds = math.inf if timeout > 0 else -math.inf
    if not seconds >= 0:
        raise ValueError(f"weft.{fn}(): timeout must be >= 0 seconds (or None: no limit), got {timeout!r}")
    return time.monotonic() + seconds


def _left(end: float) -> float | None:
    """Seconds left until end (None: no limit), at least 0."""
    if end == math.inf:
        return None
    return max(0.0, end - time.monotonic())


def wait(tasks: Iterable[Task[_T]], timeout: float | None = None,
         return_when: str = ALL_COMPLETED) -> DoneAndNotDone[_T]:
    """Wait for the tasks, as concurrent.futures.wait does for futures.

    Returns (done, not_done), two sets of tasks (a named tuple: .done,
    .not_done), when return_when holds: weft.FIRST_COMPLETED (any task
    finished), weft.FIRST_EXCEPTION (a task failed, or all finished) or
    weft.ALL_COMPLETED (all finished), or when timeout seconds passed (then
    not_done holds the others; no exception).  Finished means completed,
    failed or cancelled; the tasks' outcomes are not raised here (call
    .result() on the done ones).  Duplicates count once.  The tasks must
    belong to one runtime (ValueError otherwise); task-space slots nobody
    spawned into yet count as not done until their task finishes.  Blocks,
    with the GIL released; from a body, the worker runs the awaited tasks
    (and what they wait for) meanwhile, as for Task.result().  Any thread.
    """
    items = _tasks_of(tasks, "wait")
    if return_when not in _RETURN_WHEN:
        raise ValueError(f"weft.wait(): return_when must be weft.FIRST_COMPLETED, weft.FIRST_EXCEPTION "
                         f"or weft.ALL_COMPLETED (the concurrent.futures constants), got {return_when!r}")
    end = _deadline(timeout, "wait")
    done: set[Task[_T]] = set()
    pending = items
    while pending:
        # (Once the time is up, a wait polls: it still sees what finished.)
        idx = _weft._wait_any(pending, _left(end))
        if not idx:
            break  # timed out
        now = [pending[i] for i in idx]
        done.update(now)
        taken = set(idx)
        pending = [t for i, t in enumerate(pending) if i not in taken]
        if return_when == FIRST_COMPLETED:
            break
        if return_when == FIRST_EXCEPTION and any(t.status == "failed" for t in now):
            break
    return DoneAndNotDone(done, set(pending))


def as_completed(tasks: Iterable[Task[_T]], timeout: float | None = None) -> Iterator[Task[_T]]:
    """Yield the tasks as they finish (completed, failed or cancelled), as
    concurrent.futures.as_completed does for futures: those finished
    already first, then each as it finishes (several finishing together:
    in the order given).  Duplicates are yielded once.  timeout: seconds
    from this call for the whole iteration; when it runs out with tasks
    unfinished, the iterator raises TimeoutError naming them (the first
    five).  The tasks are checked here, at the call (TypeError,
    ValueError as weft.wait; a TaskSpace is refused: iterating it gives
    its keys, not its tasks); the waits
    happen as the iterator is advanced, as weft.wait's, from any thread or
    from a body."""
    items = _tasks_of(tasks, "as_completed")
    end = _deadline(timeout, "as_completed")
    return _as_completed(items, end)


_NAMED = 5  # the unfinished tasks an as_completed TimeoutError names


def _as_completed(pending: list[Task[_T]], end: float) -> Generator[Task[_T], None, None]:
    total = len(pending)
    while pending:
        idx = _weft._wait_any(pending, _left(end))
        if not idx:
            named = ", ".join(repr(t) for t in pending[:_NAMED])
            more = f" and {len(pending) - _NAMED} more" if len(pending) > _NAMED else ""
            raise TimeoutError(f"weft.as_completed(): {len(pending)} (of {total}) tasks unfinished "
                               f"when the timeout ran out: {named}{more} (task.result(timeout=0) on "
                               "one says what it waits for)")
        taken = set(idx)
        now = [pending[i] for i in idx]
        pending = [t for i, t in enumerate(pending) if i not in taken]
        yield from now


# ---------------------------------------------------------------------------
# concurrent.futures.wait / as_completed given weft tasks
# ---------------------------------------------------------------------------

_NOT_A_FUTURE = ("weft tasks are not concurrent.futures.Future objects: use weft.wait(tasks, timeout=None, "
                 "return_when=weft.FIRST_COMPLETED) or weft.as_completed(tasks, timeout=None) instead of "
                 "concurrent.futures.wait / as_completed (weft.wait takes the same arguments)")


class _NotAFutureCondition:
    """What concurrent.futures finds at Task._condition: a lock that holds
    nothing.  Both wait() and as_completed() take every future's
    _condition, then read each future's _state inside the block that
    releases them all again; Task._state raises the TypeError.  (Raising
    here already would leave the real futures of a mixed list locked.)"""

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return True

    def release(self) -> None:
        pass

    def __enter__(self) -> bool:
        return True

    def __exit__(self, *exc: object) -> None:
        return None


def _not_a_future(self: Task[Any]) -> Any:
    raise TypeError(_NOT_A_FUTURE)


def _install_future_guard() -> None:
    setattr(Task, "_condition", _NotAFutureCondition())
    setattr(Task, "_state", property(_not_a_future))
