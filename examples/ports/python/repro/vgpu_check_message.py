"""A device_data=True body on a virtual GPU that writes the host buffer it
was given (not its view) loses the write silently by default; with
WEFT_VGPU_CHECK=1 the task fails, but its exception says only "its device
work failed (WEFT_EDEVICE or a kernel's error; see the message printed by the
device)": what went wrong ("the body ... wrote the memory registered as
access 0 ... itself, on the host ... write the copy instead ...
weft.context().array(x)") is on stderr alone, although the body, not device
work, did it.  Exits 1 while the exception lacks that explanation."""
import os
import sys

os.environ["WEFT_VGPU_CHECK"] = "1"
import numpy as np

import weft

a = np.ones(4)
with weft.Runtime(devices="cpu,vgpu:2") as rt:
    def scale(x):
        x *= 2                                   # the host's buffer, not weft.context().array(x)

    t = rt.spawn(scale, a, readwrites=[a], placement=weft.gpu, device_data=True)
    err = t.exception()
print("exception:", repr(err))
sys.exit(0 if err is not None and "context().array" in str(err) else 1)
