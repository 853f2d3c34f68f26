import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import weft


@pytest.fixture(autouse=True)
def _sigint_raises():
    # Python makes SIGINT raise KeyboardInterrupt only when it is not
    # ignored at start-up, and a shell's background job (`make test &`)
    # starts with it ignored: these tests are about weft, so they set the
    # handler Python would have installed.
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def _interrupt_after(delay):
    pid = os.getpid()
    t = threading.Timer(delay, lambda: os.kill(pid, signal.SIGINT))
    t.start()
    return t


@pytest.mark.parametrize("how", ["result", "wait_all", "space_wait"])
def test_ctrl_c_during_wait_cancels_pending_and_returns_promptly(how):
    r = weft.Runtime(workers=2)
    release = threading.Event()
    try:
        T = weft.TaskSpace()
        gate = r.spawn(release.wait, 60, task=T[0])  # runs until the test releases it
        pending = [r.spawn(int, deps=[gate], task=T[i]) for i in range(1, 200)]
        deadline = time.monotonic() + 60
        while gate.status != "running" and time.monotonic() < deadline:
            time.sleep(0.001)
        assert gate.status == "running"
        with pytest.raises(KeyboardInterrupt):
            _interrupt_after(0.2)
            if how == "result":
                pending[-1].result()
            elif how == "wait_all":
                r.wait_all()
            else:
                T.wait()
        # Promptly: the wait gave up while what it waits for could not have
        # finished (the gate runs until released below).
        assert gate.status == "running"
        release.set()
        r.wait_all()  # the running gate finishes; what had not started is cancelled
        assert gate.status == "completed"
        assert all(t.status == "cancelled" for t in pending)
    finally:
        release.set()
        r.close()


def test_ctrl_c_in_a_script_with_runtime_block():
    # As a user sees it: Ctrl-C in a `with` block; the process ends quickly.
    # Run to the end, the 1000 dependents would take 250 s on 2 workers: the
    # process ending within the subprocess timeout shows they were cancelled.
    code = textwrap.dedent(
        """
        import os, signal, threading, time, weft
        signal.signal(signal.SIGINT, signal.default_int_handler)  # not ignored, as in a background job
        try:
            with weft.Runtime(workers=2):
                first = weft.spawn(time.sleep, 1.0)
                for i in range(1000):
                    weft.spawn(time.sleep, 0.5, deps=[first])
                threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
                weft.wait_all()
        except KeyboardInterrupt:
            print("interrupted")
        """
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100)
    assert p.returncode == 0, p.stderr
    assert "interrupted" in p.stdout
