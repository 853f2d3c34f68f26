"""Parla's idioms in weft: variants by device kind, task-space slices and
whole spaces as dependencies, reports of what nobody saw at close, and
messages that say what to write instead (python/README.md, "Coming from
Parla")."""
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

import weft

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def grt():
    """2 workers, the CPU and 4 virtual GPUs."""
    r = weft.Runtime(workers=2, devices="cpu,vgpu:4")
    try:
        with r:
            yield r
    finally:
        r.close()


def _variants():
    @weft.variants
    def f(tag=""):
        return ("cpu", weft.context().devices if weft.current_task() else ())

    @f.variant(weft.gpu)
    def f_gpu(tag=""):
        return ("gpu", weft.context().devices)

    return f


# ---- 3. variants by device kind -------------------------------------------


def test_gpu_variant_runs_on_a_specific_gpu(grt):
    f = _variants()
    # GPU 1 is runtime device 2 (the CPU is device 0).
    assert grt.spawn(f, placement=weft.gpu(1)).result() == ("gpu", (2,))
    assert grt.spawn(f, placement="gpu:3").result() == ("gpu", (4,))
    assert grt.spawn(f, placement=weft.gpu).result()[0] == "gpu"
    assert grt.spawn(f, placement=weft.cpu).result()[0] == "cpu"


def test_one_gpu_variant_serves_several_gpus_and_exact_wins(grt):
    f = _variants()
    kind, devs = grt.spawn(f, placement=weft.gpu * 2).result()
    assert kind == "gpu" and len(devs) == 2

    @f.variant(weft.gpu(2))
    def f_gpu2(tag=""):
        return ("gpu2", weft.context().devices)

    assert grt.spawn(f, placement=weft.gpu(2)).result() == ("gpu2", (3,))
    assert grt.spawn(f, placement=weft.gpu(0)).result() == ("gpu", (1,))
    assert f.body_for(weft.gpu(2)) is f_gpu2
    assert f.body_for("gpu:1").__name__ == "f_gpu"
    assert f.body_for(weft.cpu) is f.default


def test_calling_variants_in_a_body_dispatches_on_its_device(grt):
    f = _variants()

    def body():
        return f()

    assert grt.spawn(body, placement=weft.gpu(3)).result() == ("gpu", (4,))
    assert grt.spawn(body, placement=weft.gpu).result()[0] == "gpu"
    assert grt.spawn(body).result()[0] == "cpu"                  # a plain (CPU) task
    assert grt.spawn(body, placement=weft.cpu).result()[0] == "cpu"
    assert f()[0] == "cpu"                                       # outside tasks: the CPU's


def test_without_a_gpu_variant_the_default_body_runs_on_gpus(grt):
    @weft.variants
    def g():
        return "default"

    assert grt.spawn(g, placement=weft.gpu(1)).result() == "default"
    assert grt.spawn(lambda: g(), placement=weft.gpu(1)).result() == "default"


# ---- 4. task spaces: slices, ranges, whole spaces --------------------------


def test_slices_name_sets_of_slots(rt):
    T = weft.TaskSpace("T")
    s = T[0:4]
    assert isinstance(s, weft.TaskList) and len(s) == 4
    assert [t.name for t in s] == ["T[0]", "T[1]", "T[2]", "T[3]"]
    assert s[2] is T[2] and s.label == "T[0:4]"
    assert [t.name for t in T[0:4, 1]] == ["T[0, 1]", "T[1, 1]", "T[2, 1]", "T[3, 1]"]
    assert [t.name for t in T[1:3, 0:2]] == ["T[1, 0]", "T[1, 1]", "T[2, 0]", "T[2, 1]"]
    assert [t.name for t in T[range(0, 6, 2)]] == ["T[0]", "T[2]", "T[4]"]
    assert [t.name for t in T[[5, 1]]] == ["T[5]", "T[1]"]
    assert len(T[0:0]) == 0 and len(T[-3:2]) == 2   # negative indices name no slot
    assert "T[0:4]" in repr(s)


def test_slice_as_dependency_waits_for_every_slot(rt):
    T = weft.TaskSpace("T")
    out = []
    last = weft.spawn(lambda: list(out), deps=[T[0:4]])      # before any of them is spawned
    also = weft.spawn(lambda: len(out), deps=T[0:4])          # a TaskList alone
    for i in range(4):
        weft.spawn(lambda i=i: (time.sleep(0.01), out.append(i)), task=T[i])
    assert sorted(last.result()) == [0, 1, 2, 3]
    assert also.result() == 4
    T[0:4].wait(timeout=10)
    assert T[0:4].done()


def test_slices_in_2d_dependencies(rt):
    T = weft.TaskSpace("G")
    seen = {}
    for t in reversed(range(3)):
        for i in range(3):
            def cell(t=t, i=i):
                if t:
                    assert all((t - 1, j) in seen for j in range(max(i - 1, 0), min(i + 2, 3)))
                seen[t, i] = True
            weft.spawn(cell, task=T[t, i], deps=[T[t - 1, max(i - 1, 0):min(i + 2, 3)]])
    T[0:3, 0:3].wait(timeout=10)
    assert len(seen) == 9


def test_whole_space_as_dependency(rt):
    T = weft.TaskSpace("W")
    out = []
    for i in range(3):
        weft.spawn(lambda i=i: (time.sleep(0.02), out.append(i)), task=T[i])
    T[7]  # declared, never spawned: not part of "the tasks spawned so far"
    a = weft.spawn(lambda: sorted(out), deps=T)
    b = weft.spawn(lambda: sorted(out), deps=[T])
    assert a.result() == [0, 1, 2] and b.result() == [0, 1, 2]


def test_parla_chain_with_negative_index(rt):
    # Parla writes deps=[T[i-1]] at i=0 too: T[-1] names no slot.
    T = weft.TaskSpace("T")
    assert len(T[-1]) == 0 and isinstance(T[-1], weft.TaskList)
    out = []
    for i in range(5):
        @weft.spawn(task=T[i], deps=[T[i - 1]])
        def step():
            out.append(i)
    T[0:5].wait(timeout=10)
    assert out == [0, 1, 2, 3, 4]
    assert T[4].status == "completed"


def test_await_a_slice(rt):
    T = weft.TaskSpace("A")
    for i in range(3):
        weft.spawn(lambda i=i: i * i, task=T[i])

    async def body():
        return await T[0:3]

    assert weft.spawn(body).result() == [0, 1, 4]


def test_spawn_into_a_slice_is_refused(rt):
    T = weft.TaskSpace("T")
    with pytest.raises(ValueError, match=r"task=T\[0:2\] names 2 slots.*task=T\[i\]"):
        weft.spawn(int, task=T[0:2])
    with pytest.raises(ValueError, match=r"task=T\[-1\] names no slot.*negative index"):
        weft.spawn(int, task=T[-1])
    with pytest.raises(ValueError, match=r"needs its end.*deps=\[T\]"):
        T[0:]


# ---- 5. nothing fails without a word ---------------------------------------


def test_close_warns_of_keys_never_spawned():
    T = weft.TaskSpace("T")
    with pytest.warns(weft.TaskWarning, match=r"nobody spawned: T\[5\]"):
        with weft.Runtime(workers=1):
            t = weft.spawn(int, deps=[T[5]])
    assert issubclass(weft.TaskWarning, RuntimeWarning)
    with pytest.raises(weft.CancelledError, match="never spawned"):
        t.result()


def test_close_warns_of_exceptions_never_retrieved():
    def parse():
        return int("x")

    with pytest.warns(weft.TaskWarning, match=r"never retrieved: task 'parse' \(id \d+\) raised ValueError"):
        r = weft.Runtime(workers=1)
        r.spawn(parse).wait()  # wait() on another one below counts; this one is waited for too
        r.spawn(parse)
        time.sleep(0.05)
        r.close()


def _no_task_warning(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fn()
    assert [x for x in w if issubclass(x.category, weft.TaskWarning)] == []


def test_seen_failures_are_not_reported():
    def boom():
        raise OSError("no")

    def run():
        with weft.Runtime(workers=1) as r:
            a = r.spawn(boom)
            b = r.spawn(boom)
            with pytest.raises(OSError):
                a.result()
            assert isinstance(b.exception(), OSError)
            d = r.spawn(boom)
            with pytest.raises(OSError):
                r.wait_all()  # raises d's
            del d

    def waited():
        r = weft.Runtime(workers=1)
        r.spawn(boom).wait()   # wait() saw it fail (wait_all would still raise it)
        r.close()

    _no_task_warning(run)
    _no_task_warning(waited)


def test_with_block_raises_the_first_and_reports_the_others():
    def boom(i):
        raise KeyError(i)

    with pytest.warns(weft.TaskWarning, match=r"1 task exception was never retrieved: task 'boom'"):
        with pytest.raises(KeyError):
            with weft.Runtime(workers=1) as r:
                r.spawn(boom, 1).wait()
                r.spawn(boom, 2).wait()
                r.spawn(boom, 3)


def test_warning_can_be_an_error():
    T = weft.TaskSpace("E")
    r = weft.Runtime(workers=1)
    r.spawn(int, deps=[T[0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", weft.TaskWarning)
        with pytest.raises(weft.TaskWarning, match=r"E\[0\]"):
            r.close()
    assert r.closed


def test_interpreter_exit_reports_a_runtime_never_closed():
    script = textwrap.dedent("""
        import time, weft
        rt = weft.Runtime(workers=1)
        T = weft.TaskSpace("X")
        rt.spawn(int, deps=[T[3]])
        def lost():
            raise ZeroDivisionError("lost")
        rt.spawn(lost)
        time.sleep(0.05)
    """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONWARNINGS": "default"})
    assert p.returncode == 0, p.stderr
    assert "TaskWarning" in p.stderr and r"X[3]" in p.stderr
    assert "task 'lost'" in p.stderr and "ZeroDivisionError" in p.stderr


# ---- 7. messages that teach -------------------------------------------------


def test_cycle_message_names_both_slots(rt):
    C = weft.TaskSpace("C")
    weft.spawn(int, task=C[1], deps=[C[2]])
    with pytest.raises(ValueError, match=r"C\[2\] cannot follow deps\[0\] \(task 'C\[1\]'.*C\[1\] already waits"):
        weft.spawn(int, task=C[2], deps=[C[1]])
    weft.spawn(int, task=C[2])


def test_cycle_message_through_data_names_the_edge(rt):
    U = weft.TaskSpace("U")
    buf = bytearray(1)
    weft.spawn(int, task=U[1], deps=[U[0]], writes=[buf])
    with pytest.raises(ValueError, match=r"through data: U\[0\]'s reads\[0\] would follow task 'U\[1\]'.*"
                                         r"which writes the same data.*waits, directly or not, for U\[0\]"):
        weft.spawn(int, task=U[0], reads=[buf])
    weft.spawn(int, task=U[0])   # without the data: no cycle
    U[0:2].wait(timeout=10)


def test_gpu_number_out_of_range_says_the_numbering(grt):
    with pytest.raises(ValueError, match=r"GPU 4 asked for, this runtime has 4 GPUs, numbered 0 to 3"):
        grt.spawn(int, placement=weft.gpu(4))


def test_parla_positional_task_id_is_refused(rt):
    T = weft.TaskSpace("T")
    with pytest.raises(TypeError, match=r"spawn\(T\[0\], \.\.\.\): .*task=T\[0\]"):
        weft.spawn(T[0], deps=[])
    with pytest.raises(TypeError, match=r"@weft.spawn\(task=T\[1\]"):
        @weft.spawn(T[1], [T[0]])
        def t():
            pass
    with pytest.raises(TypeError, match=r"weft's is deps="):
        weft.spawn(int, dependencies=[T[0]])
    with pytest.raises(TypeError, match=r"weft's is share="):
        weft.spawn(int, vcus=0.5)
    with pytest.raises(TypeError, match=r"deps\[1\]\[0\] is not a weft.Task but 'str'.*slices"):
        weft.spawn(int, deps=[T[0], ["x"]])
    assert T[0].status == "declared" and T[1].status == "declared"


def test_parla_cpu_number_is_refused_saying_what_to_write():
    # Parla's @spawn(placement=cpu(0)) (examples/jacobi.py's driver).
    with pytest.raises(TypeError, match=r"weft.cpu\(0\): .*write placement=weft.cpu \(Parla's cpu\(0\)\)"):
        weft.cpu(0)
    with pytest.raises(TypeError, match=r"only weft.gpu takes a GPU number"):
        (weft.cpu + weft.gpu)(0)
    assert weft.gpu(0) == weft.gpu(0)


def test_unnamed_tasks_go_by_their_function_name(rt):
    def parse():
        raise ValueError("x")

    bad = weft.spawn(parse)
    after = weft.spawn(int, deps=[bad])
    e = after.exception()
    assert "task 'int'" in str(e) and "task 'parse'" in str(e), str(e)
    assert e.cause_name == "parse"
    assert any("parse" in n for n in getattr(bad.exception(), "__notes__", []))
    assert bad.name is None   # .name stays the name given


def test_share_zero_is_refused_not_taken_as_the_whole_device():
    # Parla's vcus=0 reserves nothing; weft's share=0 would reserve all.
    with weft.Runtime(workers=1, devices="cpu,vgpu:1") as rt:
        with pytest.raises(ValueError, match=r"share= takes a number in \(0, 1\]"):
            rt.spawn(lambda: None, placement=weft.gpu, share=0)
        with pytest.raises(ValueError, match=r"share= takes a number in \(0, 1\], not -0.5"):
            rt.spawn(lambda: None, placement=weft.gpu, share=-0.5)
        assert rt.spawn(lambda: 1, placement=weft.gpu).result(timeout=30) == 1


def test_share_without_placement_is_refused_not_dropped():
    # Parla's vcus= on a CPU task: share= reserves part of the placement's
    # devices, and a spawn without placement= has none: refused, saying to
    # add placement=weft.cpu (which two share=0.75 tasks then respect).
    with weft.Runtime(workers=2) as rt:
        for kw in ({"share": 0.75}, {"memory": 1 << 20}):
            with pytest.raises(ValueError, match=r"add placement=weft.cpu"):
                rt.spawn(lambda: None, **kw)
        with pytest.raises(TypeError, match=r"share= \(a fraction of each device of placement=.*weft.cpu"):
            rt.spawn(lambda: None, vcus=0.5)
        seen = []
        lock = threading.Lock()

        def body(i):
            with lock:
                seen.append(("in", i))
            time.sleep(0.05)
            with lock:
                seen.append(("out", i))

        for i in range(2):
            rt.spawn(body, i, placement=weft.cpu, share=0.75)
        rt.wait_all()
        assert [e for e, _ in seen] == ["in", "out", "in", "out"], seen  # never both at once


def test_cycle_message_through_data_with_tuple_keys(rt):
    # A key's label holds a comma ("V[1, 0]"): the message keeps it whole.
    V = weft.TaskSpace("V")
    buf = bytearray(1)
    weft.spawn(int, task=V[1, 0], deps=[V[0, 0]], writes=[buf])
    with pytest.raises(ValueError, match=r"V\[0, ?0\]'s reads\[0\] would follow task 'V\[1, ?0\]' \(id \d+\), "
                                         r"which writes the same data"):
        weft.spawn(int, task=V[0, 0], reads=[buf])
    weft.spawn(int, task=V[0, 0])
    V[0:2, 0].wait(timeout=10)
