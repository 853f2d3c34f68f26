"""A placement the runtime has no device for is refused at spawn (good), but
the message tells a Python user to change the C config ("create the runtime
with the devices asked for: weft_config.devices, vgpu_memory") instead of
weft.Runtime(devices="cpu,vgpu:N").  Exits 1 while it does."""
import sys

import weft

with weft.Runtime(devices="cpu,vgpu:2") as rt:
    try:
        rt.spawn(print, placement=weft.gpu(5))
        msg = "no error"
    except ValueError as e:
        msg = str(e)
print(msg)
sys.exit(0 if "weft_config" not in msg and "devices=" in msg else 1)
