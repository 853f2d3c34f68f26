"""GPU-task overhead from Python on virtual GPUs (2 workers, 4 virtual GPUs),
beside Ray tasks on declared GPU resources, in the same run.

    gpu_task_us weft_py <v>     independent tasks placed on weft.gpu (a
                                quarter share each) whose body queues one
                                zero-cost Python callable on its stream; from
                                the first spawn to wait_all, per task
    gpu_task_us weft_py_c <v>   the same, the body queueing a C function that
                                does nothing (ctx.queue_native)
    gpu_task_us weft_native <v> the same C function as the task's whole body
                                (weft.native): no Python on the worker
                                (both skipped, and said so, without a C
                                compiler to build that function)
    multidev_task_us weft <v>   independent tasks on weft.gpu * 2 (whole
                                GPUs, so two run at once on four), empty body;
                                per task
    multidev_task_us ray <v>    the same graph as Ray tasks with num_gpus=2,
                                ray.init(num_cpus=2, num_gpus=4); per task
                                (skipped, and said so, when Ray is missing).
                                Ray's default for a GPU task is a fresh worker
                                process each time (max_calls=1, which frees
                                what the task left on the GPU); the line
                                `multidev_task_us ray_reuse` is the same with
                                max_calls=0 (workers reused), the fairer peer
    multidev_ratio ray/weft <v>  (against ray_reuse)

Each figure is the median of --reps runs.

    python bench/py/devices.py [--tasks 20000] [--ray-tasks 60] [--reps 5]
"""
import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import weft


def noop():
    return None


def gpu_body():
    weft.context().queue(noop)


def empty():
    return None


def weft_gpu_task_us(n, body=gpu_body):
    with weft.Runtime(workers=2, devices="cpu,vgpu:4") as rt:
        for _ in range(200):  # warm up
            rt.spawn(body, placement=weft.gpu, share=0.25)
        rt.wait_all()
        t0 = time.perf_counter()
        for _ in range(n):
            rt.spawn(body, placement=weft.gpu, share=0.25)
        rt.wait_all()
        return (time.perf_counter() - t0) / n * 1e6


def c_noop():
    """A C function int noop(void *) that does nothing, compiled now (None
    without a compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    d = tempfile.mkdtemp(prefix="weft-bench-")
    with open(os.path.join(d, "noop.c"), "w") as f:
        f.write("int noop(void *p) { (void)p; return 0; }\n")
    so = os.path.join(d, "libnoop.so")
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", so, os.path.join(d, "noop.c")], check=True)
    return ctypes.CDLL(so).noop


def weft_multidev_us(n):
    with weft.Runtime(workers=2, devices="cpu,vgpu:4") as rt:
        for _ in range(200):
            rt.spawn(empty, placement=weft.gpu * 2)
        rt.wait_all()
        t0 = time.perf_counter()
        for _ in range(n):
            rt.spawn(empty, placement=weft.gpu * 2)
        rt.wait_all()
        return (time.perf_counter() - t0) / n * 1e6


def ray_multidev_us(n, reps, reuse):
    try:
        import ray
    except ImportError:
        return None
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    ray.init(num_cpus=2, num_gpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        @ray.remote(num_gpus=2, max_calls=0 if reuse else 1)
        def two():
            return None

        ray.get([two.remote() for _ in range(20)])  # warm up: workers started
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            ray.get([two.remote() for _ in range(n)])
            out.append((time.perf_counter() - t0) / n * 1e6)
        return statistics.median(out)
    finally:
        ray.shutdown()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=20000)
    ap.add_argument("--ray-tasks", type=int, default=60)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-ray", action="store_true")
    args = ap.parse_args(argv)
    print(f"# Python {sys.version.split()[0]}, {os.cpu_count()} cores, devices cpu,vgpu:4, 2 workers", flush=True)
    g = statistics.median(weft_gpu_task_us(args.tasks) for _ in range(args.reps))
    print(f"gpu_task_us weft_py {g:.2f}", flush=True)
    fn = c_noop()
    if fn is None:
        print("# gpu_task_us weft_py_c, weft_native: skipped (no C compiler)")
    else:
        for name, native in (("weft_py_c", False), ("weft_native", True)):
            body = weft.native(fn) if native else (lambda: weft.context().queue_native(fn))
            v = statistics.median(weft_gpu_task_us(args.tasks, body) for _ in range(args.reps))
            print(f"gpu_task_us {name} {v:.2f}", flush=True)
    m = statistics.median(weft_multidev_us(args.tasks // 2) for _ in range(args.reps))
    print(f"multidev_task_us weft {m:.2f}", flush=True)
    r = None if args.no_ray else ray_multidev_us(args.ray_tasks, args.reps, False)
    if r is None:
        print("# multidev_task_us ray: skipped (Ray is not installed here, or --no-ray)")
        return
    print(f"multidev_task_us ray {r:.1f}", flush=True)
    rr = ray_multidev_us(args.ray_tasks * 10, args.reps, True)
    print(f"multidev_task_us ray_reuse {rr:.1f}")
    print(f"multidev_ratio ray/weft {rr / m:.0f}")


if __name__ == "__main__":
    main()
