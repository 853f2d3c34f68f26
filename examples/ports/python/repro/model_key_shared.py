"""Under "dmda" each function's performance model is keyed by its qualified
name (python/README.md, Placement).  Two different bodies with the same
qualified name — two lambdas, or two closures `def task():` in one function,
as Parla programs often write them — share one model, and name= does not
separate them (Python has no counterpart of weft_task_desc.kind): a 1 ms and
a 20 ms kernel are predicted alike, silently.  Exits 1 while the two named
kernels below end up in one model."""
import os
import sys
import tempfile
import time

import weft

d = tempfile.mkdtemp()
os.environ["WEFT_PERFMODEL_DIR"] = d
with weft.Runtime(devices="cpu,vgpu:2", policy="dmda") as rt:
    for _ in range(4):
        rt.spawn(lambda: time.sleep(0.001), placement=[weft.cpu, weft.gpu], name="short").result()
        rt.spawn(lambda: time.sleep(0.020), placement=[weft.cpu, weft.gpu], name="long").result()
lines = [ln for f in os.listdir(d) for ln in open(os.path.join(d, f)) if not ln.startswith("#")]
print("".join(lines), end="")
keys = {ln.split("\t")[0] for ln in lines}
print("model keys:", sorted(keys))
sys.exit(0 if {"short", "long"} <= keys else 1)
