"""Placement from Python on virtual GPUs: device sets, refusals, shares and
memory, variants, multi-GPU tasks, the body's Context and ctx.queue()."""
import threading
import time

import pytest

import weft


def rt4(**kw):
    return weft.Runtime(workers=2, devices="cpu,vgpu:4", vgpu_memory=1 << 20, **kw)


def test_device_sets():
    assert weft.gpu(2) == weft.DeviceSet(False, 1, 2)
    assert weft.gpu * 3 == 3 * weft.gpu == weft.DeviceSet(False, 3, -1)
    assert weft.cpu + weft.gpu == weft.DeviceSet(True, 1, -1)
    assert repr(weft.cpu + weft.gpu(1)) == "weft.cpu + weft.gpu(1)"
    with pytest.raises(ValueError):
        weft.gpu * 0
    with pytest.raises(TypeError):
        weft.gpu(1)(2)
    with pytest.raises(AttributeError):
        weft.gpu.gpus = 3


@pytest.mark.parametrize("spec", [weft.gpu, "gpu", [weft.gpu], ("gpu",)])
def test_one_gpu(spec):
    with rt4() as rt:
        c = rt.spawn(lambda: weft.context(), placement=spec).result()
        assert c.variant == 0 and len(c.devices) == 1 and 1 <= c.devices[0] <= 4
        assert len(c.streams) == 1 and isinstance(c.streams[0], int) and c.streams[0] != 0


def test_each_kind_of_set():
    def devices():
        return weft.context().devices

    with rt4() as rt:
        assert rt.spawn(devices, placement="gpu:2").result() == (3,)
        devs = rt.spawn(devices, placement=weft.gpu * 3).result()
        assert len(set(devs)) == 3
        assert rt.spawn(devices, placement=weft.cpu).result() == ()
        assert len(rt.spawn(devices, placement=(weft.cpu, weft.gpu)).result()) == 1
        # a plain task: an empty context
        assert rt.spawn(lambda: weft.context().devices).result() == ()
    with pytest.raises(RuntimeError, match="not inside a weft task"):
        weft.context()


@pytest.mark.parametrize(
    "placement, kw, why",
    [("8*gpu", {}, "8 GPUs asked for"), (weft.gpu(9), {}, "GPU 9"), ("gpu", {"share": 2.0}, r"share= takes a number in \(0, 1\], not 2.0"),
     ("gpu", {"memory": 2 << 20}, "bytes of memory")])
def test_impossible_refused_at_spawn(placement, kw, why):
    with rt4() as rt:
        with pytest.raises(ValueError, match=why):
            rt.spawn(print, placement=placement, **kw)
        assert rt.spawn(int, 3).result() == 3  # still usable


def test_bad_placement_values():
    with rt4() as rt:
        with pytest.raises(ValueError, match="not a device set"):
            rt.spawn(print, placement="tpu")
        with pytest.raises(TypeError, match="not a device set"):
            rt.spawn(print, placement=3)
        with pytest.raises(ValueError, match="memory="):
            rt.spawn(print, placement="gpu", memory=-1)
        with pytest.raises(ValueError, match="empty"):
            rt.spawn(print, placement=[])


def test_round_robin_policy():
    with rt4(policy="round-robin") as rt:
        got = [rt.spawn(lambda: weft.context().devices[0], placement=weft.gpu, share=0.01).result()
               for _ in range(8)]
        assert got == [1, 2, 3, 4, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="unknown policy"):
        rt4(policy="fastest")


def test_quarter_shares_run_together():
    with rt4() as rt:
        started = []
        lock = threading.Lock()

        def kernel():  # runs until all four kernels have started
            with lock:
                started.append(1)
            end = time.monotonic() + 10
            while len(started) < 4 and time.monotonic() < end:
                time.sleep(0.001)
            assert len(started) >= 4

        def body():
            weft.context().queue(kernel)

        ts = [rt.spawn(body, placement="gpu:0", share=0.25) for _ in range(4)]
        for t in ts:
            t.result()


def test_memory_reserved_and_returned():
    with rt4() as rt:
        def body():
            return [d["memory_used"] for d in rt.devices[1:]]

        used = rt.spawn(body, placement="gpu:1", memory=300_000).result()
        assert used[1] == 300_000
        assert all(d["memory_used"] == 0 for d in rt.devices)

        def fails():
            raise KeyError("x")

        with pytest.raises(KeyError):
            rt.spawn(fails, placement="gpu:1", memory=300_000).result()
        assert all(d["memory_used"] == 0 for d in rt.devices)


def test_variants():
    @weft.variants
    def f(x):
        return ("cpu", x, weft.context().devices)

    @f.variant(weft.gpu * 2)
    def f_two(x):
        return ("two", x, weft.context().devices)

    with pytest.raises(RuntimeError, match="not inside"):
        f(1)  # a plain call runs the default body (here, outside any task)
    with rt4() as rt:
        kind, x, devs = rt.spawn(f, 5).result()
        assert kind == "two" and x == 5 and len(devs) == 2
        # an explicit placement list picks the matching variant per set
        assert rt.spawn(f, 6, placement=[weft.cpu]).result()[0] == "cpu"
    with weft.Runtime(workers=1, devices="cpu") as rt:
        # no GPUs here: the GPU variant cannot run, the CPU body does
        assert rt.spawn(f, 7).result() == ("cpu", 7, ())


@pytest.mark.timeout(60)
def test_context_variant_is_the_alternative_run_by_a_plain_body():
    # ctx.variant is the index, in placement=, of the alternative the task
    # runs on, for a plain function as for weft.variants: here the GPU
    # alternatives cannot hold memory= (1 MiB GPUs), so the CPU, listed
    # after them, runs the task
    @weft.variants
    def v():
        c = weft.context()
        return c.variant, c.devices

    def plain():
        c = weft.context()
        return c.variant, c.devices

    with weft.Runtime(workers=2, devices="cpu,vgpu:2", vgpu_memory=1 << 20, policy="load") as rt:
        for fn in (plain, v):
            assert rt.spawn(fn, placement=[weft.gpu, weft.cpu], memory=2 << 20).result() == (1, ())
            assert rt.spawn(fn, placement=[weft.gpu(1), weft.gpu(0), weft.cpu],
                            memory=2 << 20).result() == (2, ())
            # the first alternative: 0, on a GPU and on the CPU alike
            assert rt.spawn(fn, placement=[weft.cpu, weft.gpu]).result() == (0, ())
            variant, devices = rt.spawn(fn, placement=[weft.gpu, weft.cpu]).result()
            assert variant == 0 and len(devices) == 1
        # an async body too, before and after an await
        async def coro():
            first = weft.context().variant
            await rt.spawn(int, "1")
            return first, weft.context().variant, weft.context().devices

        assert rt.spawn(coro, placement=[weft.gpu, weft.cpu], memory=2 << 20).result() == (1, 1, ())


def test_variant_falls_back_while_gpus_are_taken():
    # "load"'s first fit (the default with GPUs, "dmda", decides by
    # predicted finish instead: tests/test_dmda.c)
    with weft.Runtime(workers=2, devices="cpu,vgpu:1", policy="load") as rt:
        gate = threading.Event()

        def hold():
            weft.context().queue(gate.wait, 10)

        @weft.variants
        def g():
            return "cpu"

        @g.variant(weft.gpu)
        def g_gpu():
            return "gpu"

        holder = rt.spawn(hold, placement="gpu")
        while holder.status != "enqueued":
            time.sleep(0.001)
        assert rt.spawn(g).result() == "cpu"
        gate.set()
        holder.result()
        assert rt.spawn(g).result() == "gpu"


def test_multi_gpu_task_completes_after_both_streams():
    with rt4() as rt:
        done = []

        def body():
            c = weft.context()
            assert len(c.devices) == 2
            c.queue(lambda: (time.sleep(0.01), done.append(0)), gpu=0)
            c.queue(lambda: (time.sleep(0.02), done.append(1)), gpu=1)
            with pytest.raises(ValueError, match="gpu=2"):
                c.queue(print, gpu=2)
            return list(c.each_device())

        assert rt.spawn(body, placement=weft.gpu * 2).result() == [0, 1]
        assert sorted(done) == [0, 1]


def test_queued_callable_failure_fails_the_task_and_its_dependents():
    with rt4() as rt:
        def body():
            weft.context().queue(lambda: 1 / 0)

        a = rt.spawn(body, placement="gpu:0")
        b = rt.spawn(print, deps=[a], placement="gpu:1")
        with pytest.raises(ZeroDivisionError):
            a.result()
        with pytest.raises(weft.CancelledError):
            b.result()
        rt.wait_all()  # a.result() retrieved the failure
        rt.spawn(body, placement="gpu")  # not retrieved: wait_all raises it
        with pytest.raises(ZeroDivisionError):
            rt.wait_all()


def test_task_nested_in_a_placed_body_has_its_own_context():
    # one worker: the plain task runs nested on it while the placed body waits
    with weft.Runtime(workers=1, devices="cpu,vgpu:4") as rt:
        def inner():
            return weft.context().devices

        def outer():
            t = rt.spawn(inner)  # a plain task: it may run nested, on this thread, while we wait
            return weft.context().devices, t.result(), weft.context().devices

        mine, theirs, after = rt.spawn(outer, placement="gpu:1").result()
        assert mine == after == (2,) and theirs == ()


def test_checking_mode_catches_an_unordered_read(monkeypatch):
    monkeypatch.setenv("WEFT_VGPU_CHECK", "1")
    rt = weft.Runtime(workers=2, devices="cpu,vgpu:2")
    monkeypatch.delenv("WEFT_VGPU_CHECK")
    with rt:
        a, b = bytearray(64), bytearray(64)
        started = threading.Event()
        # The writer holds its stream until the unordered reader has queued
        # its read (the check compares with what the host had seen then), so
        # the host cannot have seen the writer finish, whatever the load.
        release = threading.Event()
        release.set()

        def fill(buf):
            started.set()
            release.wait(10)
            buf[:] = b"\x05" * 64

        def first(buf):
            assert buf[0] == 5

        def write(buf):
            weft.context().queue(fill, buf, writes=buf)

        def read(buf):
            weft.context().queue(first, buf, reads=[buf])

        def read_unordered(buf):
            started.wait(10)  # a plain event: it orders nothing the checker sees
            weft.context().queue(first, buf, reads=buf)
            release.set()

        w = rt.spawn(write, a, placement="gpu:0")
        rt.spawn(read, a, placement="gpu:1", deps=[w]).result()  # ordered by w's event: fine
        started.clear()  # set again by the next writer only
        release.clear()
        rt.spawn(write, b, placement="gpu:0")
        bad = rt.spawn(read_unordered, b, placement="gpu:1")
        with pytest.raises(RuntimeError, match="device work failed|WEFT_EDEVICE"):
            bad.result()
        with pytest.raises(TypeError, match="writable buffer"):
            rt.spawn(lambda: weft.context().queue(print, writes=b"x"), placement="gpu").result()
        rt.wait_all()  # the failures were retrieved through .result()
        # a failure of device work alone, never retrieved: wait_all raises it
        started.clear()
        release.clear()
        rt.spawn(write, b, placement="gpu:0")
        rt.spawn(read_unordered, b, placement="gpu:1")
        with pytest.raises(RuntimeError, match="device work failed"):
            rt.wait_all()
        rt.wait_all()  # raised once


def test_queue_outside_a_placed_body():
    with rt4() as rt:
        def plain():
            weft.context().queue(print)

        with pytest.raises(RuntimeError, match="placed on GPUs"):
            rt.spawn(plain).result()


def test_cpu_share_and_memory():
    """share= and memory= on the CPU alone: two tasks of 0.75 never run at
    once, two of 0.5 may; memory beyond the host's is refused; a parent
    waiting for a child that needs its share lends it (no hang)."""
    lock = threading.Lock()
    state = {"now": 0, "most": 0}

    def busy():
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        time.sleep(0.005)
        with lock:
            state["now"] -= 1

    with weft.Runtime(workers=2) as rt:
        for share, most in ((0.75, 1), (0.5, 2)):
            state["most"] = 0
            for _ in range(10):
                rt.spawn(busy, placement=weft.cpu, share=share)
            rt.wait_all()
            assert state["most"] <= most and (most == 2 or state["most"] == 1), (share, state)
        with pytest.raises(ValueError, match="memory on the CPU"):
            rt.spawn(busy, placement=weft.cpu, memory=1 << 62)

        def parent():
            return rt.spawn(lambda: 7, placement=weft.cpu, share=0.75).result(timeout=30)

        assert rt.spawn(parent, placement=weft.cpu, share=0.75).result(timeout=60) == 7


def test_pinned_gpu_set_and_balance():
    """(weft.gpu(0), weft.gpu(2)) is exactly those GPUs (C's gpu_set); a
    GPU named twice, or an unpinned GPU beside pinned ones, is refused;
    under policy="balance" Parla's list [cpu, gpu(0) .. gpu(3)] spreads."""
    with weft.Runtime(workers=2, devices="cpu,vgpu:4") as rt:
        for placement, want in (((weft.gpu(0), weft.gpu(2)), (1, 3)), (weft.gpu(3) + weft.gpu(1), (2, 4)),
                                ((weft.cpu, weft.gpu(1), weft.gpu(2)), (2, 3))):
            assert rt.spawn(lambda: weft.context().devices, placement=placement).result(timeout=30) == want
        with pytest.raises(ValueError, match="GPU 0 is named twice"):
            rt.spawn(int, placement=(weft.gpu(0), weft.gpu(0)))
        with pytest.raises(ValueError, match=r"name each GPU"):
            rt.spawn(int, placement=(weft.gpu, weft.gpu(1)))
        with pytest.raises(ValueError, match="GPU 7 in its set"):
            rt.spawn(int, placement=(weft.gpu(0), weft.gpu(7)))
    for policy in ("load", "balance"):
        with weft.Runtime(workers=2, devices="cpu,vgpu:4", policy=policy) as rt:
            def where():
                time.sleep(0.002)
                d = weft.context().devices
                return d[0] if d else 0

            tasks = [rt.spawn(where, placement=[weft.cpu] + [weft.gpu(i) for i in range(4)], share=0.05)
                     for _ in range(40)]
            on = [t.result(timeout=60) for t in tasks]
        if policy == "load":  # the first that fits: the CPU, until its share is spent (20 x 0.05)
            assert on.count(0) >= 19, on
        else:
            assert all(on.count(d) > 0 for d in range(5)), on
            assert on.count(0) < 20, on


@pytest.mark.parametrize("text, want", [
    ("cpu", weft.cpu), ("gpu", weft.gpu), (" gpu:2 ", weft.gpu(2)), ("3*gpu", weft.gpu * 3), ("2xgpu", weft.gpu * 2),
    ("cpu+gpu", weft.cpu + weft.gpu), ("cpu + gpu:1", weft.cpu + weft.gpu(1))])
def test_device_set_strings_are_the_c_grammar(text, want):
    # The C core parses the strings (weft_placement_parse): the same sets as
    # the objects, and its messages for what it refuses.
    assert weft._placement._parse(text) == want


@pytest.mark.parametrize("text", ["tpu", "gpu:x", "gpu:-1", "0*gpu", "2*gpu:1", "cpu+", "cpux", "gpu\0:1", ""])
def test_bad_device_set_strings(text):
    with pytest.raises(ValueError, match=r"is not a device set \(cpu, gpu, gpu:I, K\*gpu, cpu\+gpu\)"):
        weft._placement._parse(text)


def test_a_placement_no_device_can_run_says_what_to_write_in_python():
    """A placement the runtime has no device for is refused at the spawn,
    saying why and what to create instead in Python's terms (not the C
    config's weft_config.devices)."""
    with weft.Runtime(workers=1, devices="cpu,vgpu:2", vgpu_memory=1 << 20) as rt:
        with pytest.raises(ValueError) as e:
            rt.spawn(print, placement=weft.gpu(5))
        msg = str(e.value)
        assert "GPU 5 asked for, this runtime has 2 GPUs, numbered 0 to 1" in msg, msg
        assert 'weft.Runtime(devices="cpu,vgpu:N")' in msg and "weft_config" not in msg, msg
        with pytest.raises(ValueError) as e:
            rt.spawn(print, placement=weft.gpu, memory=1 << 30)
        msg = str(e.value)
        assert "the largest has 1048576" in msg and "vgpu_memory=" in msg and "weft_config" not in msg, msg
