"""rt.bound() on a runtime created without bound=True told a Python user to
set weft_config.bound = WEFT_BOUND_RECORD (C).  Exits 1 while the message
does not name weft.Runtime(..., bound=True)."""
import sys

import weft

with weft.Runtime(workers=1, devices="cpu") as rt:
    rt.spawn(int, "1").result()
    try:
        rt.bound()
        msg = "no error"
    except ValueError as e:
        msg = str(e)
print(msg)
sys.exit(0 if "bound=True" in msg and "weft_config" not in msg else 1)
