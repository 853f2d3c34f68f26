import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import weft


def _interrupt_after(delay):
    pid = os.getpid()
    t = threading.Timer(delay, lambda: os.kill(pid, signal.SIGINT))
    t.start()
    return t


@pytest.mark.parametrize("how", ["result", "wait_all", "space_wait"])
def test_ctrl_c_during_wait_cancels_pending_and_returns_promptly(how):
    r = weft.Runtime(workers=2)
    try:
        T = weft.TaskSpace()
        gate = r.spawn(time.sleep, 0.5, task=T[0])
        pending = [r.spawn(int, deps=[gate], task=T[i]) for i in range(1, 200)]
        deadline = time.monotonic() + 10
        while gate.status != "running" and time.monotonic() < deadline:
            time.sleep(0.001)
        _interrupt_after(0.1)
        t0 = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            if how == "result":
                pending[-1].result()
            elif how == "wait_all":
                r.wait_all()
            else:
                T.wait()
        assert time.perf_counter() - t0 < 0.3  # promptly: the gate still sleeps
        r.wait_all()  # the running gate finishes; what had not started is cancelled
        assert gate.status == "completed"
        assert all(t.status == "cancelled" for t in pending)
    finally:
        r.close()


def test_ctrl_c_in_a_script_with_runtime_block():
    # As a user sees it: Ctrl-C in a `with` block; the process ends quickly.
    code = textwrap.dedent(
        """
        import os, signal, threading, time, weft
        threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            with weft.Runtime(workers=2):
                first = weft.spawn(time.sleep, 0.5)
                for i in range(1000):
                    weft.spawn(time.sleep, 0.5, deps=[first])
                weft.wait_all()
        except KeyboardInterrupt:
            print("interrupted")
        """
    )
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "interrupted" in p.stdout
    assert time.perf_counter() - t0 < 10  # not 1000 x 0.5 s
