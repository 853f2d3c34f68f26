"""python/README.md said a placement list is "an order of preference (the
first that fits), unless the runtime balances" (the Parla table), and that
`rt.spawn(step, x)` of a @weft.variants function runs "a GPU while one is
free, else the CPU".  That holds under policy="load", not under "dmda", the
default on a runtime with GPUs: there [weft.gpu, weft.cpu] runs on the CPU
while both GPUs are idle (its models calibrate, then weigh predicted finish
times).  The text now says which policy does what.  This shows the two
policies side by side; it exits 1 if "load" does not take the first
alternative every time."""
import os
import sys
import tempfile

os.environ.setdefault("WEFT_PERFMODEL_DIR", tempfile.mkdtemp())
import weft

where = {}
for policy in ("load", "dmda"):
    with weft.Runtime(devices="cpu,vgpu:2", policy=policy) as rt:
        def body():
            return "gpu" if weft.context().devices else "cpu"

        where[policy] = [rt.spawn(body, placement=[weft.gpu, weft.cpu]).result() for _ in range(8)]
    print(f"{policy}: [weft.gpu, weft.cpu] ran on", where[policy])
sys.exit(0 if set(where["load"]) == {"gpu"} else 1)
