"""Dask's idiom: pass lazy results to the next call: add(x, y), and
delayed(sum)([x, y]) over a list of them.  weft.spawn(f, ...) spawns at once,
with no dependency on Tasks among the arguments, and hands the body the Task
objects.  For a Task given as a positional argument the body's TypeError gets
a note saying what to write instead (deps= and .result()); for Tasks inside a
list, or given as a keyword argument, it got none: "unsupported operand
type(s) for +: 'int' and 'weft.Task'" alone.  Exits 1 while a case lacks
the note."""
import sys

import weft


def inc(x):
    return x + 1


def add(x, y):
    return x + y


missing = []
with weft.Runtime() as rt:
    x = weft.spawn(inc, 1)
    y = weft.spawn(inc, 2)
    for label, t in [("add(x, y)", weft.spawn(add, x, y)), ("sum([x, y])", weft.spawn(sum, [x, y])),
                     ("add(1, y=y)", weft.spawn(add, 1, kwargs={"y": y}))]:
        err = t.exception()
        notes = getattr(err, "__notes__", [])
        print(f"{label}: {err!r}", *notes, sep="\n    ")
        if not any("deps=" in n for n in notes):
            missing.append(label)
print("without the note:", missing)
sys.exit(1 if missing else 0)
