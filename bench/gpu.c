/* gpu.c — weft-bench-gpu: the cost of a GPU task, on virtual GPUs.
 *
 *   weft-bench-gpu [--quick] [--repeats R] [--tasks N] [--chain M] [--workers W] [--devices S]
 *
 * One runtime, 2 workers, devices "cpu,vgpu:4".  Every GPU task's body queues
 * one zero-cost kernel (a function returning 0, model_ns 0) with
 * weft_ctx_queue on each GPU of its set; the task completes once the kernels
 * have run.  Each figure is the median of R repeats (after one warm-up
 * round), in microseconds per task = (time from the first spawn to
 * weft_wait_all returning) / tasks:
 *
 *   gpu_task_us weft_c         N independent tasks on "gpu" (any one GPU), share 0.25
 *   chain_task_us weft         M tasks on "gpu", share 0.25, each depending on the one before
 *   independent_task_us weft   M independent ones, same body, measured beside the chain
 *   chain_extra_us weft        chain_task_us - independent_task_us (the two medians above;
 *                              the median of the per-round differences is a detail line)
 *   multidev_task_us weft_c    M independent tasks on "2*gpu", share 0.25, a kernel on each
 *                              of their two streams
 *
 * Lines starting with '#' are details: each repeat; a plain CPU task (no
 * placement, empty body) for comparison; gpu_task again with at most 64
 * tasks in flight (the spawner waits for task i-64 before spawning task i),
 * which shows what a backlog of tasks waiting for a GPU share costs; and the
 * chain beside M such windowed tasks.  The five lines above end the output,
 * in that order.  Every round checks that each kernel ran exactly once and
 * that no task failed.  Progress goes to stderr when it is a terminal.
 */
#define _POSIX_C_SOURCE 200809L
#include <weft.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_ulong kernels; /* kernels run, checked after every round */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The zero-cost kernel.  The count is one relaxed increment on the stream's
 * thread: part of what a kernel costs, small beside a queue hand-off. */
static int zero_kernel(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&kernels, 1, memory_order_relaxed);
    return 0;
}

static int gpu_body(weft_ctx *ctx, void *arg)
{
    (void)arg;
    unsigned n = weft_ctx_gpu_count(ctx);
    if (n == 0)
        return 1; /* placed on the CPU: this benchmark never asks for that */
    for (unsigned i = 0; i < n; i++)
        if (weft_ctx_queue(ctx, i, zero_kernel, NULL, 0) != 0)
            return 2;
    return 0;
}

static int cpu_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    atomic_fetch_add_explicit(&kernels, 1, memory_order_relaxed);
    return 0;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "weft-bench-gpu: %s: %s (%s)\n", what, weft_strerror(rc), weft_last_error());
    exit(1);
}

typedef enum shape { INDEPENDENT, CHAIN, WINDOW } shape;

/* WINDOW: independent tasks, but at most WINDOW_N in flight (the spawner
 * waits for the task WINDOW_N before the next): no backlog of tasks waiting
 * for a GPU share.  A detail line, not one of the figures. */
#define WINDOW_N 64

/* Spawn n tasks of placement pl (NULL: plain CPU tasks) in the given shape,
 * wait for all, check, and return microseconds per task. */
static double round_us(weft_runtime *rt, const weft_placement *pl, shape sh, size_t n)
{
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = pl ? gpu_body : cpu_body;
    d.placements = pl;
    d.nplacements = pl ? 1 : 0;
    unsigned per_task = pl ? pl->gpus : 1;
    atomic_store(&kernels, 0);
    weft_task *prev = NULL, *ring[WINDOW_N] = {NULL};
    int rc;
    uint64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        if (sh == CHAIN) {
            weft_task *t;
            d.deps = prev ? &prev : NULL;
            d.ndeps = prev ? 1 : 0;
            if ((rc = weft_spawn(rt, &d, i + 1 < n ? &t : NULL)) != 0)
                die("spawn", rc);
            weft_task_release(prev);
            prev = i + 1 < n ? t : NULL;
        } else if (sh == WINDOW) {
            weft_task **slot = &ring[i % WINDOW_N];
            if (*slot) {
                if ((rc = weft_task_wait(*slot)) != 0)
                    die("task_wait", rc);
                weft_task_release(*slot);
            }
            if ((rc = weft_spawn(rt, &d, slot)) != 0)
                die("spawn", rc);
        } else if ((rc = weft_spawn(rt, &d, NULL)) != 0) {
            die("spawn", rc);
        }
    }
    if ((rc = weft_wait_all(rt)) != 0)
        die("wait_all", rc);
    for (size_t i = 0; i < WINDOW_N; i++)
        weft_task_release(ring[i]);
    uint64_t t1 = now_ns();
    unsigned long want = (unsigned long)n * per_task, got = atomic_load(&kernels);
    if (got != want) {
        fprintf(stderr, "weft-bench-gpu: %lu kernels ran, %lu expected\n", got, want);
        exit(1);
    }
    return (double)(t1 - t0) / 1e3 / (double)n;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    double *s = malloc(sizeof *s * (size_t)n);
    if (!s)
        exit(1);
    memcpy(s, v, sizeof *s * (size_t)n);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    free(s);
    return m;
}

static void print_row(const char *what, const double *v, int n)
{
    printf("# %-27s", what);
    for (int i = 0; i < n; i++)
        printf(" %7.3f", v[i]);
    printf("   median %.3f us/task\n", median((double *)v, n));
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weft-bench-gpu [--quick] [--repeats R] [--tasks N] [--chain M] [--workers W] [--devices S]\n"
            "  GPU-task overhead on virtual GPUs; each figure is the median of R rounds.\n"
            "  --tasks N    independent single-GPU tasks for gpu_task_us (default 20000)\n"
            "  --chain M    tasks of the chain, its independent twin and the 2-GPU run (default 10000)\n"
            "  --repeats R  rounds per figure, after one warm-up round (default 7)\n"
            "  --quick      N=2000, M=1000, R=3\n"
            "  --workers W  worker threads (default 2)\n"
            "  --devices S  device string (default \"cpu,vgpu:4\")\n"
            "  -h, --help   this text\n"
            "Ends with: gpu_task_us weft_c, chain_task_us weft, independent_task_us weft,\n"
            "chain_extra_us weft, multidev_task_us weft_c (microseconds per task).\n");
}

static long arg_num(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "weft-bench-gpu: %s needs a value\n", argv[*i]);
        exit(2);
    }
    char *end;
    long v = strtol(argv[++*i], &end, 10);
    if (*end || v <= 0) {
        fprintf(stderr, "weft-bench-gpu: bad value '%s' for %s\n", argv[*i], argv[*i - 1]);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    size_t ntasks = 20000, nchain = 10000;
    int repeats = 7;
    unsigned workers = 2;
    const char *devices = "cpu,vgpu:4";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--quick")) {
            ntasks = 2000;
            nchain = 1000;
            repeats = 3;
        } else if (!strcmp(argv[i], "--repeats")) {
            repeats = (int)arg_num(argc, argv, &i);
        } else if (!strcmp(argv[i], "--tasks")) {
            ntasks = (size_t)arg_num(argc, argv, &i);
        } else if (!strcmp(argv[i], "--chain")) {
            nchain = (size_t)arg_num(argc, argv, &i);
        } else if (!strcmp(argv[i], "--workers")) {
            workers = (unsigned)arg_num(argc, argv, &i);
        } else if (!strcmp(argv[i], "--devices")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "weft-bench-gpu: --devices needs a value\n");
                return 2;
            }
            devices = argv[++i];
        } else {
            fprintf(stderr, "weft-bench-gpu: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.devices = devices;
    cfg.trace_path = NULL; /* a trace would time the tracer */
    weft_runtime *rt;
    int rc = weft_runtime_create(&cfg, &rt);
    if (rc)
        die("runtime_create", rc);
    unsigned ndev = weft_device_count(rt);
    if (ndev < 3) {
        fprintf(stderr, "weft-bench-gpu: devices \"%s\" give %u GPU(s); the 2-GPU tasks need 2\n", devices,
                ndev ? ndev - 1 : 0);
        (void)weft_runtime_destroy(rt);
        return 2;
    }
    printf("# weft-bench-gpu: %u workers, devices \"%s\" (%u GPUs), %zu / %zu tasks, %d repeats\n",
           weft_runtime_workers(rt), devices, ndev - 1, ntasks, nchain, repeats);

    weft_placement one, two;
    if ((rc = weft_placement_parse("gpu", &one)) != 0 || (rc = weft_placement_parse("2*gpu", &two)) != 0)
        die("placement_parse", rc);
    one.share = two.share = 0.25;

    /* warm-up: thread start-up, first-touch of the task slots */
    (void)round_us(rt, NULL, INDEPENDENT, ntasks);
    (void)round_us(rt, &one, INDEPENDENT, ntasks);
    (void)round_us(rt, &one, CHAIN, nchain / 4 + 1);
    (void)round_us(rt, &two, INDEPENDENT, nchain / 4 + 1);

    double *cpu = calloc((size_t)repeats, sizeof *cpu), *gpu = calloc((size_t)repeats, sizeof *gpu),
           *chain = calloc((size_t)repeats, sizeof *chain), *indep = calloc((size_t)repeats, sizeof *indep),
           *extra = calloc((size_t)repeats, sizeof *extra), *window = calloc((size_t)repeats, sizeof *window),
           *window_m = calloc((size_t)repeats, sizeof *window_m), *extra_w = calloc((size_t)repeats, sizeof *extra_w),
           *multi = calloc((size_t)repeats, sizeof *multi);
    if (!cpu || !gpu || !chain || !indep || !extra || !window || !window_m || !extra_w || !multi)
        return 1;
    /* Rounds interleave the figures, so that a slow spell of the machine
     * touches them all alike; the chain and its independent twin run back
     * to back. */
    bool progress = isatty(2);
    for (int r = 0; r < repeats; r++) {
        cpu[r] = round_us(rt, NULL, INDEPENDENT, ntasks);
        gpu[r] = round_us(rt, &one, INDEPENDENT, ntasks);
        window[r] = round_us(rt, &one, WINDOW, ntasks);
        chain[r] = round_us(rt, &one, CHAIN, nchain);
        indep[r] = round_us(rt, &one, INDEPENDENT, nchain);
        extra[r] = chain[r] - indep[r];
        window_m[r] = round_us(rt, &one, WINDOW, nchain);
        extra_w[r] = chain[r] - window_m[r];
        multi[r] = round_us(rt, &two, INDEPENDENT, nchain);
        if (progress)
            fprintf(stderr, "weft-bench-gpu: round %d/%d done\n", r + 1, repeats);
    }
    print_row("cpu_task (plain, N)", cpu, repeats);
    print_row("gpu_task (N)", gpu, repeats);
    print_row("gpu_task, window 64 (N)", window, repeats);
    print_row("chain_task (M)", chain, repeats);
    print_row("independent_task (M)", indep, repeats);
    print_row("chain_extra (per round)", extra, repeats);
    print_row("independent, window 64 (M)", window_m, repeats);
    print_row("chain - window 64 (M)", extra_w, repeats);
    print_row("multidev_task (M)", multi, repeats);
    weft_stats st;
    if (weft_runtime_stats(rt, &st) == 0)
        printf("# %llu tasks run, %llu steals, %llu parks, peak %llu in flight\n",
               (unsigned long long)st.tasks_run, (unsigned long long)st.steals, (unsigned long long)st.parks,
               (unsigned long long)st.inflight_peak);
    if ((rc = weft_runtime_destroy(rt)) != 0)
        die("runtime_destroy", rc);

    printf("gpu_task_us weft_c %.3f\n", median(gpu, repeats));
    printf("chain_task_us weft %.3f\n", median(chain, repeats));
    printf("independent_task_us weft %.3f\n", median(indep, repeats));
    printf("chain_extra_us weft %.3f\n", median(chain, repeats) - median(indep, repeats));
    printf("multidev_task_us weft_c %.3f\n", median(multi, repeats));
    free(cpu);
    free(gpu);
    free(chain);
    free(indep);
    free(extra);
    free(window);
    free(window_m);
    free(extra_w);
    free(multi);
    return 0;
}
