"""Shared by the tests that use several Python threads at once."""
import threading


def run_threads(targets):
    """Start one thread per callable (all released together by a barrier),
    join them, and re-raise the first exception any of them raised."""
    errors = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn):
        try:
            barrier.wait()
            fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(fn,)) for fn in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def run_beside_wait_all(rt, targets, ignore):
    """Run the targets as run_threads does while one more thread loops
    rt.wait_all() (ignoring the task exceptions `ignore` it re-raises), then
    wait_all once more."""
    stop = threading.Event()

    def waiter():
        while not stop.is_set():
            try:
                rt.wait_all()
            except ignore:
                pass

    w = threading.Thread(target=waiter)
    w.start()
    try:
        run_threads(targets)
    finally:
        stop.set()
        w.join()
    try:
        rt.wait_all()
    except ignore:
        pass
