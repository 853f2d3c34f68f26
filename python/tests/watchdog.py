"""The suite's watchdog: a separate process that ends a test stuck where
pytest-timeout cannot reach it, and shows where it was stuck first.

pytest-timeout's signal method raises in the main thread only when that
thread next runs Python code; a test blocked in C (a wait that never ends,
a deadlock with the GIL held) is never interrupted, and the suite would sit
until CI's own limit, printing nothing.  conftest.py starts this program
once per pytest process and writes to its stdin one line as each test
starts ("B <seconds> <test id>") and one as it ends ("E").  When a test
runs past its seconds, this prints the test's id, every thread's C stack
(gdb, where it is installed) and every thread's Python stack (the
faulthandler of the pytest process, on SIGUSR1), then kills the process
and the processes it started: the suite fails at once, saying where.
Once its input ends (the last test is over), the process has two minutes
to exit; this ends when it has (this process reparented).

    python watchdog.py PID
"""
import os
import select
import shutil
import signal
import subprocess
import sys
import time


def descendants(pid):
    """The processes below pid (from /proc), children first."""
    kids = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(name))
    out, pending = [], [pid]
    while pending:
        for k in kids.get(pending.pop(), []):
            out.append(k)
            pending.append(k)
    return out


def report(pid, test, limit):
    err = sys.stderr
    err.write(f"\n==== watchdog: {test} still running after {limit:.0f} s; "
              f"the stacks of process {pid}, then it is killed\n")
    err.flush()
    gdb = shutil.which("gdb")
    if gdb:
        try:
            subprocess.run([gdb, "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
                            "-ex", "thread apply all bt"],
                           stdin=subprocess.DEVNULL, stdout=err, stderr=subprocess.STDOUT, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            err.write(f"==== watchdog: gdb failed: {e}\n")
    else:
        err.write("==== watchdog: no gdb here, so no C stacks\n")
    err.write("==== watchdog: the Python stacks\n")
    err.flush()
    try:
        os.kill(pid, signal.SIGUSR1)   # faulthandler, registered by conftest.py
        time.sleep(2)
    except ProcessLookupError:
        return
    # The test's own processes (mpirun and its ranks, say) go too: left
    # behind, they would hold the suite's output open.
    for p in [pid] + [k for k in descendants(pid) if k != os.getpid()]:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


EXIT_LIMIT = 120.0   # seconds the pytest process may take to end after its last test


def main():
    pid = int(sys.argv[1])
    fd = sys.stdin.fileno()
    buf = b""
    test, deadline, limit = None, None, 0.0
    reading = True
    while True:
        wait = 5.0 if deadline is None else min(5.0, max(0.0, deadline - time.monotonic()))
        if reading:
            ready, _, _ = select.select([fd], [], [], wait)
        else:
            time.sleep(wait)
            ready = []
        if os.getppid() != pid:
            return    # the pytest process ended (a child of its may hold the pipe open)
        if not ready:
            if deadline is not None and time.monotonic() >= deadline:
                report(pid, test, limit)
                return
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            # The last test ended: the process has EXIT_LIMIT to exit (a
            # runtime's threads can hold up the interpreter's end too).
            reading = False
            test, limit = "the end of the pytest process, after its last test,", EXIT_LIMIT
            deadline = time.monotonic() + limit
            continue
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            words = line.decode(errors="replace").split(" ", 2)
            if words[0] == "B" and len(words) == 3:
                limit = float(words[1])
                test, deadline = words[2], time.monotonic() + limit
            elif words[0] == "E":
                test, deadline = None, None


if __name__ == "__main__":
    main()
