/*
 * Port of StarPU's examples/basic_examples/vector_scal.c (a codelet with CPU
 * and CUDA implementations and a STARPU_HISTORY_BASED model "vector_scal"),
 * grown as tests/perfmodels/regression_based_gpu.c does: many tasks over
 * vectors of several sizes, so that the "dmda" policy has a choice to make.
 *
 *   StarPU                                   here
 *   codelet cpu_funcs / cuda_funcs           two weft_placement: "cpu", "gpu", each its body
 *   .model = {STARPU_HISTORY_BASED,          desc.kind = "vector_scal" (or argv's --kind)
 *             .symbol = "vector_scal"}
 *   starpu_vector_data_register              weft_data_register(ptr, bytes)
 *   STARPU_RW                                WEFT_RW
 *   STARPU_CUDA_ASYNC + stream               weft_ctx_queue(ctx, 0, kernel, arg, model_ns)
 *
 * The device speeds are modelled, so that the answer is known in advance:
 * the CPU variant scales the vector and then pads its time to CPU_NS_PER_ELEM
 * per element; the "GPU" variant queues the same loop on the virtual GPU's
 * stream, stretched to GPU_NS_PER_ELEM per element plus a launch overhead.
 * With the default copy model (2 us + 25 GB/s) vectors of up to 4096
 * elements are fastest on the CPU, of 65536 and more on a GPU.
 *
 * Usage: vector_scal [--reps R] [--kind NAME] [--devices D] [--serial]
 * Checks every vector against the sequential computation; exit 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L
#include <weft.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CPU_NS_PER_ELEM 10.0  /* 0.1 G elem/s on a core */
#define GPU_NS_PER_ELEM 0.5   /* 2 G elem/s on a GPU */
#define GPU_LAUNCH_NS 100000.0 /* 100 us per kernel */

static const size_t sizes[] = {256, 1024, 4096, 65536, 262144, 1048576};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define PER_SIZE 4 /* vectors of each size */

static atomic_uint placed[NSIZES][2]; /* [size class][0 cpu, 1 gpu] */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int size_class(size_t n)
{
    for (size_t i = 0; i < NSIZES; i++)
        if (sizes[i] == n) return (int)i;
    return -1;
}

static void scal(float *v, size_t n, float f)
{
    for (size_t i = 0; i < n; i++) v[i] *= f;
}

static const float factor = 3.14f;

/* scal_cpu_func */
static int scal_cpu(weft_ctx *ctx, void *arg)
{
    (void)arg;
    uint64_t t0 = now_ns();
    float *v = weft_ctx_data(ctx, 0);
    size_t n = weft_ctx_bytes(ctx, 0) / sizeof(float);
    scal(v, n, factor);
    uint64_t want = (uint64_t)(CPU_NS_PER_ELEM * (double)n);
    uint64_t spent = now_ns() - t0;
    if (spent + 200000 < want) { /* sleep the bulk, spin the rest (nanosleep's slack is ~60 us) */
        uint64_t s = want - spent - 100000;
        struct timespec ts = {(time_t)(s / 1000000000u), (long)(s % 1000000000u)};
        nanosleep(&ts, NULL);
    }
    while (now_ns() - t0 < want) {
    }
    atomic_fetch_add(&placed[size_class(n)][0], 1);
    return 0;
}

struct kargs { float *v; size_t n; };

static int scal_kernel(void *p)
{
    struct kargs *k = p;
    scal(k->v, k->n, factor);
    free(k);
    return 0;
}

/* scal_cuda_func (STARPU_CUDA_ASYNC): queue the kernel and return */
static int scal_gpu(weft_ctx *ctx, void *arg)
{
    (void)arg;
    struct kargs *k = malloc(sizeof *k);
    if (!k) return 1;
    k->v = weft_ctx_data(ctx, 0);
    k->n = weft_ctx_bytes(ctx, 0) / sizeof(float);
    atomic_fetch_add(&placed[size_class(k->n)][1], 1);
    uint64_t model = (uint64_t)(GPU_LAUNCH_NS + GPU_NS_PER_ELEM * (double)k->n);
    int rc = weft_ctx_queue(ctx, 0, scal_kernel, k, model);
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
    int reps = 8, serial = 0;
    const char *kind = "vector_scal";
    const char *devices = "cpu,vgpu:2";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kind") && i + 1 < argc) kind = argv[++i];
        else if (!strcmp(argv[i], "--devices") && i + 1 < argc) devices = argv[++i];
        else if (!strcmp(argv[i], "--serial")) serial = 1; /* one task in flight at a time */
        else { fprintf(stderr, "usage: %s [--reps R] [--kind NAME] [--devices D] [--serial]\n", argv[0]); return 2; }
    }

    weft_config cfg;
    weft_config_init(&cfg);
    if (!getenv("WEFT_DEVICES")) cfg.devices = devices;
    if (!getenv("WEFT_BOUND")) cfg.bound = WEFT_BOUND_RECORD;
    weft_runtime *rt;
    CHECK(weft_runtime_create(&cfg, &rt));

    size_t nvec = NSIZES * PER_SIZE;
    float *vec[NSIZES * PER_SIZE];
    float *ref[NSIZES * PER_SIZE];
    weft_data *h[NSIZES * PER_SIZE];
    for (size_t i = 0; i < nvec; i++) {
        size_t n = sizes[i / PER_SIZE];
        vec[i] = malloc(n * sizeof(float));
        ref[i] = malloc(n * sizeof(float));
        for (size_t j = 0; j < n; j++) vec[i][j] = ref[i][j] = (float)(j % 1000) + 1.0f;
        CHECK(weft_data_register(rt, vec[i], n * sizeof(float), &h[i]));
    }

    weft_placement pl[2];
    CHECK(weft_placement_parse("cpu", &pl[0]));
    pl[0].body = scal_cpu;
    CHECK(weft_placement_parse("gpu", &pl[1]));
    pl[1].body = scal_gpu;

    for (int r = 0; r < reps; r++)
        for (size_t i = 0; i < nvec; i++) {
            weft_access acc = {h[i], WEFT_RW};
            weft_task_desc d;
            weft_task_desc_init(&d);
            d.accesses = &acc;
            d.naccesses = 1;
            d.placements = pl;
            d.nplacements = 2;
            d.kind = kind;
            d.name = "vector_scal";
            if (serial) {
                weft_task *t;
                CHECK(weft_spawn(rt, &d, &t));
                CHECK(weft_task_wait(t));
                weft_task_release(t);
            } else {
                CHECK(weft_spawn(rt, &d, NULL));
            }
        }
    CHECK(weft_wait_all(rt));

    /* What the models say now, per size, on the CPU (device 0) and GPU 1. */
    printf("%-9s %12s %12s   %6s %6s   %s\n", "elements", "cpu pred us", "gpu pred us", "on cpu", "on gpu",
           "verdict");
    int bad_place = 0;
    for (size_t s = 0; s < NSIZES; s++) {
        double pc = -1, pg = -1;
        int rc1 = weft_runtime_predict(rt, kind, 0, sizes[s] * sizeof(float), &pc);
        int rc2 = weft_runtime_predict(rt, kind, 1, sizes[s] * sizeof(float), &pg);
        unsigned oc = atomic_load(&placed[s][0]), og = atomic_load(&placed[s][1]);
        const char *v = "";
        if (rc1 > 0 && rc2 > 0) {
            /* the models' favourite device should have taken most of them */
            int fav_gpu = pg < pc;
            unsigned fav = fav_gpu ? og : oc, other = fav_gpu ? oc : og;
            v = fav >= other ? (fav_gpu ? "ok (gpu faster)" : "ok (cpu faster)")
                             : (fav_gpu ? "MOSTLY CPU though gpu predicted faster"
                                        : "MOSTLY GPU though cpu predicted faster");
            if (fav < other) bad_place++;
        }
        printf("%-9zu %12.1f %12.1f   %6u %6u   %s (predict rc %d/%d)\n", sizes[s], rc1 > 0 ? pc / 1e3 : -1,
               rc2 > 0 ? pg / 1e3 : -1, oc, og, v, rc1, rc2);
    }

    weft_stats st;
    CHECK(weft_runtime_stats(rt, &st));
    printf("dmda decisions: hits %llu fits %llu calibrating %llu mispredicted %llu; bytes copied %llu\n",
           (unsigned long long)st.model_hits, (unsigned long long)st.model_fits,
           (unsigned long long)st.model_calibrating, (unsigned long long)st.model_mispredicted,
           (unsigned long long)st.bytes_copied);

    weft_bound b;
    if (weft_runtime_bound(rt, &b) == 0)
        printf("bound: tasks %llu no_model %llu makespan %.3f ms  path %.3f ms area %.3f ms bound %.3f ms "
               "(ratio %.2f; cpu slots %u, gpus %u)\n",
               (unsigned long long)b.tasks, (unsigned long long)b.no_model, b.makespan * 1e3, b.path * 1e3,
               b.area * 1e3, b.bound * 1e3, b.bound > 0 ? b.makespan / b.bound : 0, b.cpu_slots, b.gpus);
    else
        printf("bound: %s\n", weft_last_error());

    int wrong = 0;
    for (size_t i = 0; i < nvec; i++) {
        CHECK(weft_data_unregister(h[i]));
        size_t n = sizes[i / PER_SIZE];
        for (int r = 0; r < reps; r++) scal(ref[i], n, factor);
        if (memcmp(ref[i], vec[i], n * sizeof(float)) != 0) {
            wrong++;
            fprintf(stderr, "vector %zu (%zu elements) DIFFERS from the sequential computation\n", i, n);
        }
        free(vec[i]);
        free(ref[i]);
    }
    CHECK(weft_runtime_destroy(rt));
    printf("%s; %d size classes placed against the models\n",
           wrong ? "results DIFFER" : "results equal to the sequential computation", bad_place);
    return wrong ? 1 : 0;
}
