"""What the reduction tests share: an operator's identity for a NumPy
element type, as weft fills a reducer's private copy with it (-0.0 for a
floating-point sum, so that the sum of no terms keeps the sign of zero)."""
import numpy as np

import weft


def identity(op, dt):
    if op == weft.SUM:
        return np.array(-0.0 if np.dtype(dt).kind == "f" else 0, dtype=dt)
    if np.dtype(dt).kind == "f":
        return np.array(np.inf if op == weft.MIN else -np.inf, dtype=dt)
    info = np.iinfo(dt)
    return np.array(info.max if op == weft.MIN else info.min, dtype=dt)
