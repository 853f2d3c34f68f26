"""How much of the split kernels' interior work runs while a halo exchange
is in flight, read from a Weft trace of the C or Python CloverLeaf driver:

    weft-cloverleaf --devices cpu,vgpu:4 --trace t.json DECK
    python3 apps/cloverleaf/trace_overlap.py t.json

On the CPU: the interior tasks (names "*.interior.c*") against the staged
updates' gather tasks ("halo_gather.c*") running on another worker.  On
virtual GPUs (4 of them, 4 streams each, as weft-cloverleaf --devices
cpu,vgpu:4 makes them; the trace does not name device spans, so this is
matched by time): an exchange's parts are the kernel spans, one per GPU,
that start after a "halo" task and end together (within 200 us: the
virtual communicator's second barrier); an interior task's kernel is the
first other kernel span on its GPU that starts after the task queued it.
Prints the interior kernels or tasks that overlap an exchange, and for how
long in all."""
import json
import sys
ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
end = lambda e: e["ts"] + e["dur"]
ov = lambda a, b: max(0.0, min(end(a), end(b)) - max(a["ts"], b["ts"]))
tasks = [e for e in ev if e.get("cat") == "task"]
inter = [e for e in tasks if ".interior." in e["name"]]
ker = [e for e in ev if e.get("cat") == "device" and e["name"] == "kernel" and 1000 <= e["tid"] < 5000]
if not ker:  # cpu
    gath = [e for e in tasks if e["name"].startswith("halo_gather")]
    n = sum(1 for i in inter if any(ov(i, g) > 0 for g in gath if g["tid"] != i["tid"]))
    t = sum(ov(i, g) for i in inter for g in gath if g["tid"] != i["tid"])
    print(f"{len(inter)} interior tasks, {n} run beside a halo_gather task; overlap {t/1e3:.1f} ms "
          f"of {sum(i['dur'] for i in inter)/1e3:.1f} ms interior time")
    sys.exit()
gpu = lambda e: (e["tid"] - 1000) // 4
halos = [e for e in tasks if e["name"] == "halo"]
parts = set(); partlist = []
for h in halos:
    cand = [sorted([k for k in ker if gpu(k) == g and k["ts"] >= h["ts"]], key=lambda k: k["ts"])[:6] for g in range(4)]
    for k0 in cand[0]:
        sel = [k0] + [min(c, key=lambda k: abs(end(k) - end(k0))) for c in cand[1:] if c]
        if len(sel) == 4 and max(map(end, sel)) - min(map(end, sel)) < 200:
            for k in sel:
                if id(k) not in parts:
                    parts.add(id(k)); partlist.append(k)
            break
n = 0; t = 0.0; tot = 0.0; used = set()
for i in inter:
    g = int(i["args"]["devices"].split(":")[1])
    c = [k for k in ker if gpu(k) == g and k["ts"] >= i["ts"] and id(k) not in parts and id(k) not in used]
    if not c:
        continue
    k = min(c, key=lambda k: k["ts"]); used.add(id(k))
    o = sum(ov(k, p) for p in partlist if gpu(p) == g)
    n += o > 0; t += o; tot += k["dur"]
print(f"{len(halos)} exchanges ({len(partlist)} parts), {len(inter)} interior kernels, {n} run while an exchange "
      f"part of their GPU is in flight; overlap {t/1e3:.1f} ms of {tot/1e3:.1f} ms interior time")
