/* What the kernels allow, without Weft (roofline.h says what and why). */
#include "roofline.h"

#include "traffic.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The kernels of a step, as traffic.c names them, and the reflection that
 * stands in for each halo update (bytes 0: the model ignores ghosts). */
enum { R_IDEAL_GAS, R_VISCOSITY, R_CALC_DT, R_PDV, R_REVERT, R_ACCELERATE, R_FLUX_CALC,
       R_ADVEC_CELL, R_ADVEC_MOM, R_RESET, R_REFLECT, R_N };
static const char *const roof_name[R_N] = {"ideal_gas", "viscosity", "calc_dt", "pdv",
                                           "revert", "accelerate", "flux_calc", "advec_cell",
                                           "advec_mom", "reset_field", "halo_reflect"};

#define CACHE_NX 128
#define CACHE_NY 32
#define STREAM_STEPS 8
#define REPEATS 2

/* The threads wait here until every one exists (go 1) or one could not be
 * made (go -1: they return at once). */
typedef struct roof_go {
    pthread_mutex_t lock;        /* protects go */
    pthread_cond_t cond;
    int go;
} roof_go;

/* One thread's chunk and what it measured. */
typedef struct roof_chunk {
    const clover_deck *d;
    clover_chunk c;
    int steps;
    struct roof_go *go;          /* every thread starts once all exist */
    pthread_barrier_t *start;    /* every thread times its steps at once */
    uint64_t ns[R_N];
    int failed;                  /* out of memory */
} roof_chunk;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A halo update of a closed box: every face reflects. */
static void reflect(const clover_view *v, uint64_t *ns, int depth, const int *fields, int n)
{
    uint64_t t0 = now_ns();
    clover_k_reflect(v, fields, n, depth, CLOVER_LEFT | CLOVER_RIGHT | CLOVER_BOTTOM | CLOVER_TOP);
    ns[R_REFLECT] += now_ns() - t0;
}
#define REFLECT(v, ns, depth, ...)                                                                       \
    do {                                                                                                 \
        const int fl_[] = {__VA_ARGS__};                                                                 \
        reflect((v), (ns), (depth), fl_, (int)(sizeof fl_ / sizeof fl_[0]));                             \
    } while (0)
#define TIMED(ns, k, call)                                                                               \
    do {                                                                                                 \
        uint64_t t0_ = now_ns();                                                                         \
        call;                                                                                            \
        (ns)[k] += now_ns() - t0_;                                                                       \
    } while (0)

/* One step in the reference's order (serial.c's), dt from the chunk's own
 * calc_dt by the deck's rules (the PdV check's answer is not needed). */
static void step(const clover_view *v, const roof_chunk *rc, uint64_t *ns, double *dtold, int advect_x)
{
    const clover_deck *d = rc->d;
    TIMED(ns, R_IDEAL_GAS, clover_k_ideal_gas(v, 0));
    REFLECT(v, ns, 1, CF_PRESSURE, CF_ENERGY0, CF_DENSITY0, CF_XVEL0, CF_YVEL0);
    TIMED(ns, R_VISCOSITY, clover_k_viscosity(v));
    REFLECT(v, ns, 1, CF_VISCOSITY);
    clover_dt r;
    TIMED(ns, R_CALC_DT, r = clover_k_calc_dt(v, d, &rc->c));
    double dt = r.dt;
    if (*dtold * d->dtrise < dt)
        dt = *dtold * d->dtrise;
    if (d->dtmax < dt)
        dt = d->dtmax;
    *dtold = dt;
    TIMED(ns, R_PDV, (void)clover_k_pdv(v, 1, dt));
    TIMED(ns, R_IDEAL_GAS, clover_k_ideal_gas(v, 1));
    REFLECT(v, ns, 1, CF_PRESSURE);
    TIMED(ns, R_REVERT, clover_k_revert(v));
    TIMED(ns, R_ACCELERATE, clover_k_accelerate(v, dt));
    TIMED(ns, R_PDV, (void)clover_k_pdv(v, 0, dt));
    TIMED(ns, R_FLUX_CALC, clover_k_flux_calc(v, dt));
    int dir = advect_x ? 1 : 2;
    for (int sweep = 1; sweep <= 2; sweep++) {
        if (sweep == 1)
            REFLECT(v, ns, 2, CF_ENERGY1, CF_DENSITY1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y);
        TIMED(ns, R_ADVEC_CELL, clover_k_advec_cell(v, dir, sweep));
        REFLECT(v, ns, 2, CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X, CF_MASS_FLUX_Y);
        TIMED(ns, R_ADVEC_MOM, clover_k_advec_mom(v, CF_XVEL1, dir, sweep));
        TIMED(ns, R_ADVEC_MOM, clover_k_advec_mom(v, CF_YVEL1, dir, sweep));
        dir = 3 - dir;
    }
    TIMED(ns, R_RESET, clover_k_reset_field(v));
}

/* A thread: its chunk made and filled here (its pages on this thread's
 * memory node), one step untimed, then its steps timed. */
static void *roof_thread(void *arg)
{
    roof_chunk *rc = arg;
    pthread_mutex_lock(&rc->go->lock);
    while (rc->go->go == 0)
        pthread_cond_wait(&rc->go->cond, &rc->go->lock);
    int go = rc->go->go;
    pthread_mutex_unlock(&rc->go->lock);
    if (go < 0)
        return NULL;
    const int nx = rc->c.nx, ny = rc->c.ny;
    size_t fc = clover_field_count(nx, ny);
    double *mem = calloc(fc * CF_NFIELDS, sizeof(double));
    double *geom = calloc(clover_geom_count(nx, ny), sizeof(double));
    if (!mem || !geom) {
        rc->failed = 1;
        free(mem);
        free(geom);
        pthread_barrier_wait(rc->start);
        return NULL;
    }
    clover_view v = {.nx = nx, .ny = ny, .pitch = (size_t)nx + 5, .geom = geom};
    for (int f = 0; f < CF_NFIELDS; f++)
        v.f[f] = mem + (size_t)f * fc;
    clover_k_initialise(&v, rc->d, &rc->c);
    clover_k_generate(&v, rc->d);
    clover_k_ideal_gas(&v, 0);
    const int all[] = {CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY, CF_DENSITY1,
                       CF_ENERGY1, CF_XVEL0, CF_YVEL0, CF_XVEL1, CF_YVEL1};
    clover_k_reflect(&v, all, (int)(sizeof all / sizeof all[0]), 2, CLOVER_LEFT | CLOVER_RIGHT | CLOVER_BOTTOM | CLOVER_TOP);
    uint64_t warm[R_N] = {0};
    double dtold = rc->d->dtinit;
    step(&v, rc, warm, &dtold, 1);
    pthread_barrier_wait(rc->start);
    memset(rc->ns, 0, sizeof rc->ns);
    for (int s = 0; s < rc->steps; s++)
        step(&v, rc, rc->ns, &dtold, s % 2 == 0 ? 0 : 1);
    free(mem);
    free(geom);
    return NULL;
}

/* Run `threads` threads on chunks[0 .. threads-1] for `steps` steps each;
 * ns_per_cell[k]: kernel k's time per cell-step, averaged over the threads. */
static int measure(const clover_deck *d, const clover_chunk *chunks, int threads, int steps, double *ns_per_cell)
{
    roof_chunk *rc = calloc((size_t)threads, sizeof *rc);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    pthread_barrier_t start;
    if (!rc || !tid || pthread_barrier_init(&start, NULL, (unsigned)threads) != 0) {
        free(rc);
        free(tid);
        fprintf(stderr, "clover roofline: out of memory\n");
        return -1;
    }
    roof_go go = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .go = 0};
    int started = 1, rc_ = 0;
    for (int i = 0; i < threads; i++)
        rc[i] = (roof_chunk){.d = d, .c = chunks[i], .steps = steps, .go = &go, .start = &start};
    for (int i = 1; i < threads; i++, started++)
        if (pthread_create(&tid[i], NULL, roof_thread, &rc[i]) != 0)
            break;
    pthread_mutex_lock(&go.lock);
    go.go = started == threads ? 1 : -1;
    pthread_cond_broadcast(&go.cond);
    pthread_mutex_unlock(&go.lock);
    if (started < threads) {
        fprintf(stderr, "clover roofline: cannot start thread %d of %d\n", started, threads);
        for (int i = 1; i < started; i++)
            pthread_join(tid[i], NULL);
        pthread_barrier_destroy(&start);
        free(rc);
        free(tid);
        return -1;
    }
    roof_thread(&rc[0]);
    for (int i = 1; i < threads; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&start);
    for (int k = 0; k < R_N; k++)
        ns_per_cell[k] = 0.0;
    for (int i = 0; i < threads; i++) {
        if (rc[i].failed)
            rc_ = -1;
        double cells = (double)rc[i].c.nx * rc[i].c.ny * steps;
        for (int k = 0; k < R_N; k++)
            ns_per_cell[k] += (double)rc[i].ns[k] / cells / threads;
    }
    if (rc_)
        fprintf(stderr, "clover roofline: out of memory for a chunk\n");
    free(rc);
    free(tid);
    return rc_;
}

/* The small chunk: centred on the corner of the first state with a
 * rectangle (where the flow starts), else on the mesh's centre; clipped to
 * the mesh. */
static clover_chunk cache_chunk(const clover_deck *d)
{
    clover_chunk c = {.nx = d->x_cells < CACHE_NX ? d->x_cells : CACHE_NX,
                      .ny = d->y_cells < CACHE_NY ? d->y_cells : CACHE_NY,
                      .edges = CLOVER_LEFT | CLOVER_RIGHT | CLOVER_BOTTOM | CLOVER_TOP,
                      .left = -1, .right = -1, .bottom = -1, .top = -1};
    int cx = d->x_cells / 2, cy = d->y_cells / 2;
    for (int s = 1; s < d->nstates; s++)
        if (d->state[s].defined && d->state[s].geometry == CLOVER_GEOM_RECTANGLE) {
            cx = (int)((d->state[s].xmax - d->xmin) / (d->xmax - d->xmin) * d->x_cells);
            cy = (int)((d->state[s].ymax - d->ymin) / (d->ymax - d->ymin) * d->y_cells);
            break;
        }
    c.x0 = cx - c.nx / 2;
    c.y0 = cy - c.ny / 2;
    if (c.x0 > d->x_cells - c.nx)
        c.x0 = d->x_cells - c.nx;
    if (c.y0 > d->y_cells - c.ny)
        c.y0 = d->y_cells - c.ny;
    if (c.x0 < 0)
        c.x0 = 0;
    if (c.y0 < 0)
        c.y0 = 0;
    return c;
}

int clover_roofline_measure(const clover_deck *d, int threads, clover_roofline *out)
{
    memset(out, 0, sizeof *out);
    if (threads < 1)
        threads = 1;
    clover_chunk *stream = calloc((size_t)threads, sizeof *stream);
    clover_chunk *cache = calloc((size_t)threads, sizeof *cache);
    if (!stream || !cache) {
        free(stream);
        free(cache);
        fprintf(stderr, "clover roofline: out of memory\n");
        return -1;
    }
    char err[256];
    int cx, cy;
    if (clover_decompose(d, threads, stream, &cx, &cy, err, sizeof err) != 0) {
        fprintf(stderr, "clover roofline: %s\n", err);
        free(stream);
        free(cache);
        return -1;
    }
    for (int i = 0; i < threads; i++) {
        stream[i].edges = CLOVER_LEFT | CLOVER_RIGHT | CLOVER_BOTTOM | CLOVER_TOP;
        stream[i].left = stream[i].right = stream[i].bottom = stream[i].top = -1;
        cache[i] = cache_chunk(d);
    }
    out->threads = threads;
    out->cache_nx = cache[0].nx;
    out->cache_ny = cache[0].ny;
    out->stream_nx = stream[0].nx;
    out->stream_ny = stream[0].ny;
    out->stream_steps = STREAM_STEPS;
    /* about as many cell-steps in cache as streaming */
    double ratio = (double)stream[0].nx * stream[0].ny / ((double)cache[0].nx * cache[0].ny);
    double cs = STREAM_STEPS * ratio;
    out->cache_steps = cs < 50 ? 50 : cs > 4000 ? 4000 : (int)cs;
    double best_c[R_N], best_s[R_N];
    int rc = 0;
    /* best of REPEATS for each kernel: a shared machine only ever slows a run */
    for (int rep = 0; rep < REPEATS && rc == 0; rep++) {
        double c[R_N], s[R_N];
        rc = measure(d, cache, threads, out->cache_steps, c);
        if (rc == 0)
            rc = measure(d, stream, threads, out->stream_steps, s);
        for (int k = 0; rc == 0 && k < R_N; k++) {
            best_c[k] = rep == 0 || c[k] < best_c[k] ? c[k] : best_c[k];
            best_s[k] = rep == 0 || s[k] < best_s[k] ? s[k] : best_s[k];
        }
    }
    free(stream);
    free(cache);
    if (rc != 0)
        return -1;
    for (int k = 0; k < R_N; k++) {
        clover_roof_row *r = &out->row[out->nrows++];
        r->kernel = roof_name[k];
        r->bytes = clover_traffic_kernel_step_bytes(roof_name[k]);
        r->cache_ns = best_c[k];
        r->stream_ns = best_s[k];
        out->bytes += r->bytes;
        out->cache_ns += r->cache_ns;
        out->stream_ns += r->stream_ns;
    }
    return 0;
}

/* A kernel's bound, ns per cell-step of one thread: its arithmetic (in
 * cache) or its bytes at this thread's share of triad, whichever is more. */
static double row_bound(const clover_roof_row *r, int threads, double triad_bw)
{
    double mem = triad_bw > 0 ? r->bytes * threads / triad_bw * 1e9 : 0.0;
    return r->cache_ns > mem ? r->cache_ns : mem;
}

double clover_roofline_bound_bw(const clover_roofline *r, double triad_bw)
{
    double ns = 0.0;
    for (int k = 0; k < r->nrows; k++)
        ns += row_bound(&r->row[k], r->threads, triad_bw);
    return ns > 0 ? r->bytes * r->threads / ns * 1e9 : 0.0;
}

void clover_roofline_print(FILE *out, const clover_roofline *r, double triad_bw)
{
    fprintf(out,
            "\n Kernels alone (no Weft): %d thread(s), each its own closed chunk; in cache %d x %d cells, %d steps;"
            " streaming %d x %d cells, %d steps; best of %d\n",
            r->threads, r->cache_nx, r->cache_ny, r->cache_steps, r->stream_nx, r->stream_ny, r->stream_steps,
            REPEATS);
    fprintf(out, " %-13s %6s %10s %10s %9s %10s %9s\n", "kernel", "bytes", "cache ns", "stream ns", "GB/s",
            "bound ns", "bound by");
    for (int k = 0; k < r->nrows; k++) {
        const clover_roof_row *w = &r->row[k];
        double gbs = w->stream_ns > 0 ? w->bytes * r->threads / w->stream_ns : 0.0;
        double b = row_bound(w, r->threads, triad_bw);
        fprintf(out, " %-13s %6.0f %10.2f %10.2f %9.1f %10.2f %9s\n", w->kernel, w->bytes, w->cache_ns, w->stream_ns,
                gbs, b, triad_bw <= 0 || w->bytes == 0 ? "-" : b > w->cache_ns ? "memory" : "arithmetic");
    }
    double gbs = r->stream_ns > 0 ? r->bytes * r->threads / r->stream_ns : 0.0;
    fprintf(out, " %-13s %6.0f %10.2f %10.2f %9.1f\n", "step", r->bytes, r->cache_ns, r->stream_ns, gbs);
    if (triad_bw > 0) {
        double bound = clover_roofline_bound_bw(r, triad_bw);
        fprintf(out, " Kernels alone: %.2f GB/s, %.1f%% of triad; roofline bound %.2f GB/s, %.1f%% of triad\n", gbs,
                100.0 * gbs * 1e9 / triad_bw, bound * 1e-9, 100.0 * bound / triad_bw);
    }
}
