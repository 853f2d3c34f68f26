"""A Task passed to a body where NumPy expects an array: no note, or no error.

Found porting parla_tsqr.py (the Dask habit of passing the lazy value, here
t2's Task, to the next call).  python/README.md (*Coming from Dask*) says a
Task passed as an argument reaches the body as the Task, and that a body
failing on it with a `TypeError` or `AttributeError` gets a note saying to
spawn with `deps=[t]` and call `t.result()`.  NumPy does not fail with
those: it takes the Task as a 0-d object array, so

  np.linalg.qr(t)        LinAlgError: 0-dimensional array given ...     (no note)
  np.matmul(t, x), t @ x ValueError: matmul: Input operand 0 does not
                         have enough dimensions (has 0, ...)             (no note)
  np.vstack([t, t])      no error: an object array of Tasks
  np.asarray(t).sum()    no error: returns the Task itself

Exits 1 while any of these fails without the note or succeeds silently.
"""
import sys

import numpy as np

import weft

NOTE = "weft passes to the body as it is"


def main():
    bad = False
    with weft.Runtime(workers=2) as rt:
        blk = rt.spawn(np.random.rand, 10, 4, name="block")
        for name, fn in [("np.linalg.qr(t)", np.linalg.qr), ("np.matmul(t, x)", lambda t: np.matmul(t, np.eye(4))),
                         ("t @ x", lambda t: t @ np.eye(4)), ("np.vstack([t, t])", lambda t: np.vstack([t, t])),
                         ("np.asarray(t).sum()", lambda t: np.asarray(t).sum())]:
            r = rt.spawn(fn, blk, deps=[blk], name="body")
            e = r.exception()
            if e is None:
                print(f"{name:22} no error: {type(r.result()).__name__} "
                      f"{getattr(r.result(), 'dtype', '')}")
                bad = True
            else:
                noted = any(NOTE in n for n in getattr(e, "__notes__", []))
                print(f"{name:22} {type(e).__name__}: {str(e)[:60]}  note: {noted}")
                bad |= not noted
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
