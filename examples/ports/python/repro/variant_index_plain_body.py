"""weft.context().variant is the index, in placement=, of the alternative
the task runs on (python/README.md, Placement).  A plain function (not
@weft.variants) that runs on the CPU listed after GPU alternatives said 0,
the GPU's index.  Here the GPUs cannot hold memory=, so the CPU runs it.
Exits 1 while the defect is there."""
import sys

import weft

with weft.Runtime(workers=2, devices="cpu,vgpu:2", vgpu_memory=1 << 20, policy="load") as rt:
    def body():
        ctx = weft.context()
        return ctx.variant, ctx.devices

    got = rt.spawn(body, placement=[weft.gpu, weft.cpu], memory=2 << 20).result()
print("variant, devices:", got, "(expected (1, ()): the CPU, alternative 1)")
sys.exit(0 if got == (1, ()) else 1)
