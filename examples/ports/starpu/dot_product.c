/*
 * Port of StarPU's examples/reductions/dot_product.c: x . y over NBLOCKS
 * blocks, each block's partial dot product accumulated into one variable
 * with STARPU_REDUX (init_codelet / redux_codelet).  The "dot" codelet gets
 * a performance model (StarPU's has none; a user adds one as in
 * vector_scal) and a CPU and a "GPU" implementation.
 *
 *   StarPU                                   here
 *   STARPU_REDUX + init/redux codelets       WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64
 *   starpu_vector_data_register per block    weft_data_register per block
 *   starpu_variable_data_register(&dot)      weft_data_register(&dot, sizeof dot)
 *   cpu_funcs / cuda_funcs                   placements "cpu" / "gpu", each its body
 *   .model HISTORY_BASED "dot"               desc.kind = "dot"
 *   starpu_data_unregister(dot)              weft_data_unregister: dot holds the sum
 *
 * The GPU variant queues the block's dot product on the stream, stretched to
 * a modelled time (GPU_NS_PER_ELEM); the CPU variant pads to CPU_NS_PER_ELEM.
 * The result is compared with the sequential sum over the blocks in order
 * (Weft combines the private copies in spawn order, so it must be equal bit
 * for bit), and with the element-by-element sum to 1e-12 relative.
 *
 * Usage: dot_product [--blocks N] [--entries E] [--devices D]
 */
#define _XOPEN_SOURCE 700
#include <weft.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CPU_NS_PER_ELEM 4.0
#define GPU_NS_PER_ELEM 0.2
#define GPU_LAUNCH_NS 30000.0

static atomic_uint on_cpu, on_gpu;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pad_to(uint64_t t0, uint64_t want)
{
    uint64_t spent = now_ns() - t0;
    if (spent + 200000 < want) {
        uint64_t s = want - spent - 100000;
        struct timespec ts = {(time_t)(s / 1000000000u), (long)(s % 1000000000u)};
        nanosleep(&ts, NULL);
    }
    while (now_ns() - t0 < want) {
    }
}

static double block_dot(const float *x, const float *y, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * (double)y[i];
    return s;
}

/* dot_cpu_func: *dot += local dot (the private copy starts at the identity) */
static int dot_cpu(weft_ctx *ctx, void *arg)
{
    (void)arg;
    uint64_t t0 = now_ns();
    const float *x = weft_ctx_data(ctx, 0), *y = weft_ctx_data(ctx, 1);
    double *dot = weft_ctx_data(ctx, 2);
    size_t n = weft_ctx_bytes(ctx, 0) / sizeof(float);
    *dot += block_dot(x, y, n);
    pad_to(t0, (uint64_t)(CPU_NS_PER_ELEM * (double)n));
    atomic_fetch_add(&on_cpu, 1);
    return 0;
}

struct kargs { const float *x, *y; double *dot; size_t n; };

static int dot_kernel(void *p)
{
    struct kargs *k = p;
    *k->dot += block_dot(k->x, k->y, k->n);
    free(k);
    return 0;
}

/* dot_cuda_func */
static int dot_gpu(weft_ctx *ctx, void *arg)
{
    (void)arg;
    struct kargs *k = malloc(sizeof *k);
    if (!k) return 1;
    k->x = weft_ctx_data(ctx, 0);
    k->y = weft_ctx_data(ctx, 1);
    k->dot = weft_ctx_data(ctx, 2);
    k->n = weft_ctx_bytes(ctx, 0) / sizeof(float);
    atomic_fetch_add(&on_gpu, 1);
    int rc = weft_ctx_queue(ctx, 0, dot_kernel, k, (uint64_t)(GPU_LAUNCH_NS + GPU_NS_PER_ELEM * (double)k->n));
    if (rc != 0) free(k);
    return rc;
}

#define CHECK(call)                                                                                 \
    do {                                                                                            \
        int rc_ = (call);                                                                           \
        if (rc_ != 0) {                                                                             \
            fprintf(stderr, "%s:%d: %s -> %s (%s)\n", __FILE__, __LINE__, #call, weft_strerror(rc_), \
                    weft_last_error());                                                             \
            exit(2);                                                                                \
        }                                                                                           \
    } while (0)

int main(int argc, char **argv)
{
    unsigned nblocks = 128;
    size_t entries = 1024 * 64;
    const char *devices = "cpu,vgpu:2";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--blocks") && i + 1 < argc) nblocks = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--entries") && i + 1 < argc) entries = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc) devices = argv[++i];
        else { fprintf(stderr, "usage: %s [--blocks N] [--entries E] [--devices D]\n", argv[0]); return 2; }
    }

    weft_config cfg;
    weft_config_init(&cfg);
    if (!getenv("WEFT_DEVICES")) cfg.devices = devices;
    weft_runtime *rt;
    CHECK(weft_runtime_create(&cfg, &rt));

    size_t nelems = (size_t)nblocks * entries;
    float *x = malloc(nelems * sizeof(float)), *y = malloc(nelems * sizeof(float));
    srand48(0);
    for (size_t i = 0; i < nelems; i++) {
        x[i] = (float)drand48();
        y[i] = (float)drand48();
    }
    double reference_elem = 0.0, reference_blocks = 0.0;
    for (size_t i = 0; i < nelems; i++) reference_elem += (double)x[i] * (double)y[i];
    for (unsigned b = 0; b < nblocks; b++) reference_blocks += block_dot(x + b * entries, y + b * entries, entries);

    weft_data **xh = calloc(nblocks, sizeof *xh), **yh = calloc(nblocks, sizeof *yh);
    for (unsigned b = 0; b < nblocks; b++) {
        CHECK(weft_data_register(rt, x + (size_t)b * entries, entries * sizeof(float), &xh[b]));
        CHECK(weft_data_register(rt, y + (size_t)b * entries, entries * sizeof(float), &yh[b]));
    }
    double dot = 0.0; /* StarPU's init codelet's neutral element: the value starts at 0 */
    weft_data *doth;
    CHECK(weft_data_register(rt, &dot, sizeof dot, &doth));

    weft_placement pl[2];
    CHECK(weft_placement_parse("cpu", &pl[0]));
    pl[0].body = dot_cpu;
    CHECK(weft_placement_parse("gpu", &pl[1]));
    pl[1].body = dot_gpu;

    for (unsigned b = 0; b < nblocks; b++) {
        weft_access acc[3] = {{xh[b], WEFT_R}, {yh[b], WEFT_R}, {doth, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64}};
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.accesses = acc;
        d.naccesses = 3;
        d.placements = pl;
        d.nplacements = 2;
        d.kind = "dot";
        d.name = "dot";
        d.cost = 2.0 * (double)entries; /* STARPU_FLOPS */
        CHECK(weft_spawn(rt, &d, NULL));
    }
    CHECK(weft_data_unregister(doth));

    double pc = 0, pg = 0;
    int r0 = weft_runtime_predict(rt, "dot", 0, 2 * entries * sizeof(float) + sizeof(double), &pc);
    int r1 = weft_runtime_predict(rt, "dot", 1, 2 * entries * sizeof(float) + sizeof(double), &pg);
    weft_stats st;
    CHECK(weft_runtime_stats(rt, &st));
    for (unsigned b = 0; b < nblocks; b++) {
        CHECK(weft_data_unregister(xh[b]));
        CHECK(weft_data_unregister(yh[b]));
    }
    CHECK(weft_runtime_destroy(rt));

    printf("blocks %u x %zu: on cpu %u, on gpu %u; predicted cpu %.1f us (rc %d), gpu %.1f us (rc %d)\n", nblocks,
           entries, atomic_load(&on_cpu), atomic_load(&on_gpu), pc / 1e3, r0, pg / 1e3, r1);
    printf("dmda decisions: hits %llu fits %llu calibrating %llu mispredicted %llu\n",
           (unsigned long long)st.model_hits, (unsigned long long)st.model_fits,
           (unsigned long long)st.model_calibrating, (unsigned long long)st.model_mispredicted);
    double rel = fabs(dot - reference_elem) / fabs(reference_elem);
    int ok = dot == reference_blocks && rel < 1e-12;
    printf("dot %.17g, sequential by blocks %.17g (%s), by elements %.17g (rel %.2g)\n", dot, reference_blocks,
           dot == reference_blocks ? "equal" : "DIFFERS", reference_elem, rel);
    printf("%s\n", ok ? "results equal to the sequential computation" : "results DIFFER");
    free(x);
    free(y);
    free(xh);
    free(yh);
    return ok ? 0 : 1;
}
