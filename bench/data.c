/* data.c — weft-bench-data: data on devices, on virtual GPUs.
 *
 *   weft-bench-data [--quick] [--repeats R] [--devices S]
 *
 * One runtime, 2 workers, devices "cpu,vgpu:4" (the virtual GPUs' default
 * copy model: 2 us + bytes / 25 GB/s between host and GPU).  Each figure is
 * the median of R repeats after a warm-up:
 *
 *   copy_bw_ratio weft     for 4, 16 and 64 MiB (the smallest of the three
 *                          ratios is the figure): the time of 8 raw copies
 *                          of that size from host memory to GPU memory,
 *                          queued by GPU tasks with weft_ctx_copy, over the
 *                          time of 8 GPU tasks that read 8 host arrays of
 *                          that size through the data layer (which copies
 *                          them to the task's GPU); 1 means as fast as the
 *                          device interface
 *   overlap_ratio weft     16 tiles of 8 MiB on one GPU: each tile copied in
 *                          (a GPU task reads and writes it), computed on
 *                          and copied out (a CPU task reads it back); the
 *                          pipeline's time over the larger of two runs of
 *                          its parts alone: the copies (zero-cost kernels)
 *                          and the kernels (tiles already on the GPU, no
 *                          copy out), each kernel modelled to take the
 *                          copies' time per tile (1: the parts overlap
 *                          entirely; 2: not at all)
 *   prefetch_speedup weft  24 GPU tasks of a tenth of gpu:0 each, sharing
 *                          its 4 streams, each reading its own 4 MiB host
 *                          tile and running a kernel as long as the copy:
 *                          the time without the prefetch queue
 *                          (WEFT_PREFETCH=0) over the time with it (above
 *                          1: copies in ran beside the kernels already on
 *                          the streams)
 *   steady_copy_bytes weft 4 independent chains of 50 GPU tasks, each over
 *                          its own 1 MiB array: bytes copied after every
 *                          chain's first step (0: each chain stays where its
 *                          data is)
 *
 * Lines starting with '#' are details (each repeat, each size).
 */
#define _POSIX_C_SOURCE 200809L
#include <weft.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB ((size_t)1 << 20)
#define NCOPY 8

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "weft-bench-data: %s: %s (%s)\n", what, weft_strerror(rc), weft_last_error());
    exit(1);
}

static uint64_t copied(weft_runtime *rt)
{
    weft_stats st;
    int rc = weft_runtime_stats(rt, &st);
    if (rc)
        die("stats", rc);
    return st.bytes_copied;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Print each repeat's ratio after a detail line's text, and return their
 * median (v is sorted). */
static double print_ratios(double *v, int n)
{
    for (int r = 0; r < n; r++)
        printf(" %.3f", v[r]);
    return median(v, n);
}

static void spawn(weft_runtime *rt, const char *where, double share, weft_body_fn body, void *arg,
                  const weft_access *acc, size_t nacc)
{
    weft_placement p;
    int rc = weft_placement_parse(where, &p);
    if (rc)
        die("placement", rc);
    p.share = share;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    d.accesses = acc;
    d.naccesses = nacc;
    d.placements = &p;
    d.nplacements = 1;
    if ((rc = weft_spawn(rt, &d, NULL)) != 0)
        die("spawn", rc);
}

static void wait_all(weft_runtime *rt)
{
    int rc = weft_wait_all(rt);
    if (rc)
        die("wait_all", rc);
}

static int nothing(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return 0;
}

/* ---- copy bandwidth ----------------------------------------------------- */

typedef struct raw_copy {
    const void *src;
    size_t n;
} raw_copy;

/* Raw: copy src into the task's GPU copy of its scratch array (written
 * only, so the data layer copies nothing). */
static int raw_body(weft_ctx *ctx, void *arg)
{
    raw_copy *c = arg;
    return weft_ctx_copy(ctx, 0, weft_ctx_data(ctx, 0), c->src, c->n);
}

/* Weft: read the array on the GPU (the data layer copies it there). */
static int read_body(weft_ctx *ctx, void *arg)
{
    (void)arg;
    return weft_ctx_data(ctx, 0) ? 0 : 1;
}

static double copy_ratio(weft_runtime *rt, size_t size, int repeats)
{
    char *host[NCOPY], *scratch[NCOPY];
    weft_data *h[NCOPY], *s[NCOPY];
    raw_copy rc[NCOPY];
    for (int k = 0; k < NCOPY; k++) {
        host[k] = malloc(size);
        scratch[k] = malloc(size);
        if (!host[k] || !scratch[k])
            die("malloc", WEFT_ENOMEM);
        memset(host[k], k, size);
        int e;
        if ((e = weft_data_register(rt, host[k], size, &h[k])) || (e = weft_data_register(rt, scratch[k], size, &s[k])))
            die("register", e);
        rc[k] = (raw_copy){host[k], size};
    }
    double *ratio = calloc((size_t)repeats + 1, sizeof *ratio);
    for (int r = -1; r < repeats; r++) {
        /* raw copies, one per task, spread over the GPUs */
        uint64_t t0 = now_ns();
        for (int k = 0; k < NCOPY; k++) {
            weft_access a = {s[k], WEFT_W};
            spawn(rt, "gpu", 0.25, raw_body, &rc[k], &a, 1);
        }
        wait_all(rt);
        uint64_t raw = now_ns() - t0;
        /* the same bytes through the data layer (the host's copies were
         * made the only valid ones by a CPU writer just before) */
        for (int k = 0; k < NCOPY; k++) {
            weft_access a = {h[k], WEFT_W};
            spawn(rt, "cpu", 0, nothing, NULL, &a, 1);
        }
        wait_all(rt);
        uint64_t b0 = copied(rt);
        t0 = now_ns();
        for (int k = 0; k < NCOPY; k++) {
            weft_access a = {h[k], WEFT_R};
            spawn(rt, "gpu", 0.25, read_body, NULL, &a, 1);
        }
        wait_all(rt);
        uint64_t through = now_ns() - t0;
        if (copied(rt) - b0 != NCOPY * size) {
            fprintf(stderr, "weft-bench-data: %llu bytes copied, %zu expected\n",
                    (unsigned long long)(copied(rt) - b0), NCOPY * size);
            exit(1);
        }
        if (r >= 0)
            ratio[r] = (double)raw / (double)through;
    }
    for (int k = 0; k < NCOPY; k++) {
        int e;
        if ((e = weft_data_unregister(h[k])) || (e = weft_data_unregister(s[k])))
            die("unregister", e);
        free(host[k]);
        free(scratch[k]);
    }
    printf("# copy_bw %3zu MiB:", size / MIB);
    double m = print_ratios(ratio, repeats);
    printf("   median %.3f (raw time / Weft time, %d copies)\n", m, NCOPY);
    free(ratio);
    return m;
}

/* ---- overlap -------------------------------------------------------------- */

/* n tiles of `size` bytes each, one after another at tiles, as handles. */
static void register_tiles(weft_runtime *rt, char *tiles, size_t size, int n, weft_data **h)
{
    for (int k = 0; k < n; k++) {
        int e = weft_data_register(rt, tiles + (size_t)k * size, size, &h[k]);
        if (e)
            die("register", e);
    }
}

static void unregister_all(weft_data **h, int n)
{
    for (int k = 0; k < n; k++) {
        int e = weft_data_unregister(h[k]);
        if (e)
            die("unregister", e);
    }
}

enum { TILES = 16 };
#define TILE (8 * MIB)

static uint64_t kernel_ns;

static int zero_kernel(void *arg)
{
    (void)arg;
    return 0;
}

static int compute_body(weft_ctx *ctx, void *arg)
{
    (void)arg;
    return weft_ctx_queue(ctx, 0, zero_kernel, NULL, kernel_ns);
}

/* The pipeline over the tiles: with copies (in by a GPU task reading and
 * writing the tile, out by a CPU task reading it) or without (the tiles
 * already on the GPU, no copy out); wall time in ns. */
static uint64_t pipeline(weft_runtime *rt, char *tiles, bool copies)
{
    weft_data *h[TILES];
    register_tiles(rt, tiles, TILE, TILES, h);
    if (!copies) { /* bring them in first, untimed */
        uint64_t keep = kernel_ns;
        kernel_ns = 0;
        for (int k = 0; k < TILES; k++) {
            weft_access a = {h[k], WEFT_RW};
            spawn(rt, "gpu:0", 0.25, compute_body, NULL, &a, 1);
        }
        wait_all(rt);
        kernel_ns = keep;
    }
    uint64_t t0 = now_ns();
    for (int k = 0; k < TILES; k++) {
        weft_access a = {h[k], WEFT_RW};
        spawn(rt, "gpu:0", 0.25, compute_body, NULL, &a, 1); /* copy in (if not there), compute */
        if (copies) {
            a.mode = WEFT_R;
            spawn(rt, "cpu", 0, nothing, NULL, &a, 1); /* copy out */
        }
    }
    wait_all(rt);
    uint64_t wall = now_ns() - t0;
    unregister_all(h, TILES);
    return wall;
}

static double overlap_ratio(weft_runtime *rt, int repeats)
{
    char *tiles = malloc(TILES * TILE);
    if (!tiles)
        die("malloc", WEFT_ENOMEM);
    memset(tiles, 1, TILES * TILE);
    double *ratio = calloc((size_t)repeats + 1, sizeof *ratio);
    uint64_t copy_wall = 0, compute_wall = 0, full = 0;
    for (int r = -1; r < repeats; r++) {
        /* copies alone (zero-cost kernels): their time sets the kernels' */
        kernel_ns = 0;
        copy_wall = pipeline(rt, tiles, true);
        kernel_ns = copy_wall / TILES;
        compute_wall = pipeline(rt, tiles, false); /* kernels alone */
        full = pipeline(rt, tiles, true);          /* both */
        if (r >= 0)
            ratio[r] = (double)full / (double)(copy_wall > compute_wall ? copy_wall : compute_wall);
    }
    free(tiles);
    printf("# overlap (%d tiles of %zu MiB on gpu:0; last round: copies alone %.2f ms, kernels alone %.2f ms, "
           "both %.2f ms):",
           TILES, TILE / MIB, copy_wall / 1e6, compute_wall / 1e6, full / 1e6);
    double m = print_ratios(ratio, repeats);
    printf("   median %.3f\n", m);
    free(ratio);
    return m;
}

/* ---- prefetch: copies in beside kernels on shared streams ----------------- */

enum { PTILES = 24 };
#define PTILE (4 * MIB)

/* 24 GPU tasks of a tenth of gpu:0 each (so that ten run at once on its
 * four streams, which they share), each reading a tile of its own from
 * the host and running a kernel modelled to take as long as its copy;
 * wall time in ns. */
static uint64_t shared_streams(weft_runtime *rt, char *tiles)
{
    weft_data *h[PTILES];
    register_tiles(rt, tiles, PTILE, PTILES, h);
    uint64_t t0 = now_ns();
    for (int k = 0; k < PTILES; k++) {
        weft_access a = {h[k], WEFT_R};
        spawn(rt, "gpu:0", 0.1, compute_body, NULL, &a, 1);
    }
    wait_all(rt);
    uint64_t wall = now_ns() - t0;
    unregister_all(h, PTILES);
    return wall;
}

/* The benchmarks' runtime: 2 workers on devices, no trace; prefetch, when
 * not NULL, is WEFT_PREFETCH's value for it (read at creation). */
static weft_runtime *runtime_with(const char *devices, const char *prefetch)
{
    if (prefetch)
        setenv("WEFT_PREFETCH", prefetch, 1);
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = devices;
    cfg.trace_path = NULL;
    weft_runtime *rt;
    int rc = weft_runtime_create(&cfg, &rt);
    if (prefetch)
        unsetenv("WEFT_PREFETCH");
    if (rc)
        die("runtime_create", rc);
    return rt;
}

/* The same work without the prefetch queue (WEFT_PREFETCH=0: each copy on
 * its task's stream, behind the kernels queued there) over with it. */
static double prefetch_ratio(const char *devices, int repeats)
{
    char *tiles = malloc(PTILES * PTILE);
    if (!tiles)
        die("malloc", WEFT_ENOMEM);
    memset(tiles, 2, PTILES * PTILE);
    weft_runtime *on = runtime_with(devices, "1"), *off = runtime_with(devices, "0");
    double *ratio = calloc((size_t)repeats + 1, sizeof *ratio);
    uint64_t t_on = 0, t_off = 0, b0 = 0, b1 = 0;
    for (int r = -1; r < repeats; r++) {
        kernel_ns = 0; /* the copies' time alone sets the kernels' */
        kernel_ns = shared_streams(off, tiles) / PTILES;
        weft_stats st;
        if (weft_runtime_stats(on, &st) == 0)
            b0 = st.bytes_prefetched;
        t_on = shared_streams(on, tiles);
        if (weft_runtime_stats(on, &st) == 0)
            b1 = st.bytes_prefetched;
        t_off = shared_streams(off, tiles);
        if (r >= 0)
            ratio[r] = (double)t_off / (double)t_on;
    }
    int rc;
    if ((rc = weft_runtime_destroy(on)) != 0 || (rc = weft_runtime_destroy(off)) != 0)
        die("destroy", rc);
    free(tiles);
    printf("# prefetch (%d tasks of a tenth of gpu:0, 4 MiB each copied in, kernels as long as a copy; last round: "
           "%.2f ms with the prefetch queue, %llu MiB of it prefetched, %.2f ms without):",
           PTILES, t_on / 1e6, (unsigned long long)((b1 - b0) / MIB), t_off / 1e6);
    double m = print_ratios(ratio, repeats);
    printf("   median %.3f\n", m);
    free(ratio);
    return m;
}

/* ---- locality ------------------------------------------------------------- */

static int touch_body(weft_ctx *ctx, void *arg)
{
    (void)arg;
    return weft_ctx_data(ctx, 0) ? 0 : 1;
}

static uint64_t steady_bytes(weft_runtime *rt)
{
    enum { C = 4, STEPS = 50 };
    static char arr[C][MIB];
    weft_data *h[C];
    for (int c = 0; c < C; c++) {
        int e = weft_data_register(rt, arr[c], MIB, &h[c]);
        if (e)
            die("register", e);
    }
    uint64_t b0 = copied(rt);
    for (int s = 0; s < STEPS; s++)
        for (int c = 0; c < C; c++) {
            weft_access a = {h[c], WEFT_RW};
            spawn(rt, "gpu", 0.25, touch_body, NULL, &a, 1);
        }
    wait_all(rt);
    uint64_t bytes = copied(rt) - b0;
    for (int c = 0; c < C; c++) {
        int e = weft_data_unregister(h[c]);
        if (e)
            die("unregister", e);
    }
    printf("# steady: %d chains of %d steps over 1 MiB each: %llu bytes copied in all\n", C, STEPS,
           (unsigned long long)bytes);
    return bytes > C * MIB ? bytes - C * MIB : 0;
}

int main(int argc, char **argv)
{
    int repeats = 5;
    const char *devices = "cpu,vgpu:4";
    bool quick = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) {
            quick = true;
            repeats = 1;
        } else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
            repeats = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--devices") && i + 1 < argc) {
            devices = argv[++i];
        } else {
            fprintf(stderr, "usage: weft-bench-data [--quick] [--repeats R] [--devices S]\n");
            return 2;
        }
    }
    if (repeats < 1)
        repeats = 1;
    weft_runtime *rt = runtime_with(devices, NULL);
    int rc;
    printf("# weft-bench-data: 2 workers, devices \"%s\", %d repeats\n", devices, repeats);
    static const size_t sizes[] = {4 * MIB, 16 * MIB, 64 * MIB};
    double worst = 0;
    for (size_t i = 0; i < (quick ? 1u : 3u); i++) {
        double r = copy_ratio(rt, sizes[i], repeats);
        if (i == 0 || r < worst)
            worst = r;
    }
    double ov = overlap_ratio(rt, repeats);
    uint64_t steady = steady_bytes(rt);
    if ((rc = weft_runtime_destroy(rt)) != 0)
        die("destroy", rc);
    double pf = prefetch_ratio(devices, repeats);
    printf("copy_bw_ratio weft %.3f\n", worst);
    printf("overlap_ratio weft %.3f\n", ov);
    printf("prefetch_speedup weft %.3f\n", pf);
    printf("steady_copy_bytes weft %llu\n", (unsigned long long)steady);
    return 0;
}
