"""Parla's GPU tasks that compute in their body, in weft: a blocked
vector update y = a * x + y over four GPUs.

Each block task is placed on a GPU with its data there (device_data=True)
and computes on the arrays itself: on CUDA with CuPy (the task's stream is
CuPy's current one, so the kernels follow the copies in), on virtual GPUs
with NumPy, standing in for CuPy — weft.context().array() returns once the
task's inputs are in the replica, and what the body writes there is the
task's output.  A second sweep reads the first's results on another GPU.
Checked against NumPy on the host ("equal to the sequential computation",
or "DIFFERS" and exit status 1).

    python examples/python/gpu_body.py [DEVICES]   (default "cpu,vgpu:4")
"""
import sys

import numpy as np
import numpy.typing as npt

import weft


def main(devices: str = "cpu,vgpu:4") -> int:
    n, blocks, a = 1 << 16, 8, 3.0
    x = np.arange(n, dtype=np.float64)
    y = np.ones(n, dtype=np.float64)
    xs, ys = np.split(x, blocks), np.split(y, blocks)

    def axpy(xb: npt.NDArray[np.float64], yb: npt.NDArray[np.float64]) -> None:
        ctx = weft.context()
        xd, yd = ctx.array(xb), ctx.array(yb)  # CuPy arrays on CUDA, NumPy on a virtual GPU
        yd += a * xd                           # computed in the body, on the task's device

    with weft.Runtime(workers=2, devices=devices) as rt:
        ngpu = sum(1 for d in rt.devices if d["kind"] != "cpu")
        for sweep in range(2):
            for b in range(blocks):
                rt.spawn(axpy, xs[b], ys[b], reads=[xs[b]], readwrites=[ys[b]],
                         placement=weft.gpu((b + sweep) % ngpu), device_data=True)
        rt.wait_all()
    want = 1.0 + 2 * a * np.arange(n, dtype=np.float64)
    ok = bool(np.array_equal(y, want))
    print(f"y = {a} x + y, twice, in {blocks} blocks on {ngpu} GPUs, computed in the bodies: "
          + ("equal to the sequential computation" if ok else "DIFFERS from the sequential computation"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:2]))
