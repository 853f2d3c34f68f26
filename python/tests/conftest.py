import faulthandler
import gc
import os
import signal
import sys

import pytest

import weft

# The "dmda" policy's models (the default with GPUs) are learned within each
# runtime, never read from this machine's model file: what earlier runs
# taught would change where the suite's tasks go.  The tests of the file set
# WEFT_PERFMODEL_DIR to a directory of their own and clear this.
os.environ["WEFT_PERFMODEL"] = "off"


@pytest.fixture(scope="session")
def c_library(tmp_path_factory):
    """build(name, source) -> ctypes.CDLL: C source compiled into a shared
    library by the machine's C compiler (weft itself is built with one)."""
    import ctypes
    import shutil
    import subprocess

    def build(name, source):
        cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
        assert cc, "no C compiler: weft itself is built with one"
        d = tmp_path_factory.mktemp(name)
        (d / "k.c").write_text(source)
        so = d / "libk.so"
        subprocess.run([cc, "-O1", "-shared", "-fPIC", "-o", str(so), str(d / "k.c")], check=True)
        return ctypes.CDLL(str(so))

    return build


@pytest.fixture
def rt():
    """A 2-worker runtime, closed after the test (its tasks finish first)."""
    r = weft.Runtime(workers=2)
    try:
        with r:
            yield r
    finally:
        r.close()
        gc.collect()


_watchdog = None   # the write end of the watchdog's input
WATCHDOG_GRACE = 60   # seconds past a test's pytest-timeout before the watchdog ends it


def pytest_configure(config):
    # Every test has a timeout (pytest-timeout), even without the ini file.
    if not config.getoption("timeout", None):
        config.option.timeout = 120
    # ... and a watchdog behind it, for a test stuck in C (watchdog.py).
    # The Python stacks go to the stderr pytest started with (a copy of it:
    # a test's own is captured, and lost when the watchdog kills the process).
    global _watchdog
    faulthandler.register(signal.SIGUSR1, file=os.dup(2), all_threads=True)
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS")}
    r, w = os.pipe()   # (not inherited by the tests' own subprocesses)
    os.posix_spawn(sys.executable, [sys.executable, os.path.join(os.path.dirname(__file__), "watchdog.py"),
                                    str(os.getpid())], env,
                   file_actions=[(os.POSIX_SPAWN_DUP2, r, 0), (os.POSIX_SPAWN_CLOSE, w)])
    os.close(r)
    _watchdog = w


def pytest_unconfigure(config):
    # The watchdog goes on watching until this process has exited.
    global _watchdog
    if _watchdog is not None:
        os.close(_watchdog)
        _watchdog = None


def _tell_watchdog(line):
    try:
        os.write(_watchdog, line.encode() + b"\n")
    except (TypeError, OSError):
        pass   # no watchdog (it died): the test runs without one


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    mark = item.get_closest_marker("timeout")
    limit = mark.args[0] if mark is not None and mark.args else item.config.option.timeout
    _tell_watchdog(f"B {float(limit or 120) + WATCHDOG_GRACE} {item.nodeid}")
    yield
    _tell_watchdog("E")
