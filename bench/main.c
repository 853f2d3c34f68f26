/* main.c — weft-bench: Task Bench's METG method for Weft and its peers.
 *
 *   weft-bench metg --pattern P --systems weft,openmp,starpu,bsp,spin [options]
 *   weft-bench run  --pattern P --systems ... --iterations N [options]
 *   weft-bench list
 *   weft-bench report [report options]       (bench/report.py)
 *
 * Method (see docs/performance.md): for each system, the kernel length is
 * halved from a large value until the median efficiency of `repeats`
 * executions falls below 50%; METG(50%) is interpolated (linear in efficiency,
 * logarithmic in granularity) between the last point at or above 50% and the
 * first below.  granularity = wall time x workers / tasks; efficiency = the
 * time the same kernels take with no runtime at all (one thread per worker
 * running them back to back, measured right before each execution) / (wall
 * time x workers).  stdout gets one CSV row per point and per summary, then
 * the summary lines `metg50_us <system> <value>`; progress goes to stderr. */
#include "wb.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifndef WB_SOURCE_DIR
#define WB_SOURCE_DIR "."
#endif

static const wb_system *const all_systems[] = {
    &wb_sys_weft, &wb_sys_weft_root, &wb_sys_openmp, &wb_sys_starpu, &wb_sys_bsp, &wb_sys_spin,
};
#define NSYS (sizeof all_systems / sizeof all_systems[0])

typedef struct opts {
    wb_pattern patterns[WB_PATTERN_COUNT];
    int npatterns;
    const wb_system *systems[NSYS];
    int nsystems;
    wb_kernel_kind kernel;
    unsigned workers;
    int width; /* 0: = workers */
    int steps;
    int ngraphs;
    int repeats;
    double start_us;
    double max_us;
    int extra;
    uint64_t iterations; /* run: 0 = from kernel_us */
    double kernel_us;
    size_t output_bytes;
    int validate;
    int radix, period;
    double imbalance;
    size_t scratch_bytes;
    int drop, drop_t, drop_i, drop_j;
    int expect_invalid;
    const char *csv_path;
    int quiet;
    int verbose;
    double wait_quiet;
    int confirm;
} opts;

static FILE *csv_file;
static int quiet;

#define LOG(...)                                                                                   \
    do {                                                                                           \
        if (!quiet) fprintf(stderr, __VA_ARGS__);                                                  \
    } while (0)

/* ------------------------------------------------------------------------ */
/* Baseline: the kernel with no runtime                                      */
/* ------------------------------------------------------------------------ */

typedef struct base_thread {
    wb_kernel_kind kind;
    uint64_t units;
    uint64_t n;
    wb_scratch *scr;
    _Atomic unsigned *go;
    unsigned nthreads;
    double ns_per_kernel;
    pthread_t th;
} base_thread;

static void *base_main(void *arg)
{
    base_thread *b = arg;
    /* Start together, so the threads share the machine as workers do. */
    atomic_fetch_add(b->go, 1);
    while (atomic_load(b->go) < b->nthreads) wb_cpu_relax();
    uint64_t acc = 0;
    double t0 = wb_now();
    for (uint64_t k = 0; k < b->n; k++) acc += wb_kernel_exec(b->kind, b->units, b->scr);
    double t1 = wb_now();
    if (acc == 0x5555555555555555ULL) wb_sink = acc;
    b->ns_per_kernel = (t1 - t0) * 1e9 / (double)b->n;
    return NULL;
}

/* Wait until the process uses (almost) no CPU: the threads of the system
 * under test have gone to sleep, so they do not slow the baseline down (which
 * would flatter the system).  Gives up after 250 ms and says so. */
static int quiesce(void)
{
    double deadline = wb_now() + 0.25;
    for (;;) {
        double c0 = wb_cpu_time(), w0 = wb_now();
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
        double c1 = wb_cpu_time(), w1 = wb_now();
        if (c1 - c0 < 0.1 * (w1 - w0)) return 0;
        if (w1 > deadline) return -1;
    }
}

static double ns_per_unit_estimate = 0.3;
static double ns_per_unit_best;  /* fastest kernel rate of any baseline in this run */
static double *ns_per_unit_seen; /* every baseline's rate, for the machine line */
static size_t n_seen, cap_seen;
static int noisy_waits; /* quiesce() calls that timed out */

/* Nanoseconds one kernel of `units` takes on each of `workers` threads
 * running kernels back to back at the same time (mean over the threads). */
static double baseline_ns(wb_run *r, uint64_t units)
{
    unsigned W = r->workers;
    double est = ns_per_unit_estimate * (double)units + 5.0;
    uint64_t n = (uint64_t)(1e6 / est); /* about 1 ms per thread */
    if (n < 16) n = 16;
    base_thread *b = calloc(W, sizeof *b);
    _Atomic unsigned go = 0;
    for (unsigned k = 0; k < W; k++) {
        b[k] = (base_thread){.kind = r->kernel.kind,
                             .units = units,
                             .n = n,
                             .scr = &r->scratch[k],
                             .go = &go,
                             .nthreads = W};
    }
    for (unsigned k = 1; k < W; k++) pthread_create(&b[k].th, NULL, base_main, &b[k]);
    base_main(&b[0]);
    for (unsigned k = 1; k < W; k++) pthread_join(b[k].th, NULL);
    double s = 0;
    for (unsigned k = 0; k < W; k++) s += b[k].ns_per_kernel;
    free(b);
    if (units >= 256) { /* long enough for a rate: remember how fast the machine was */
        double rate = s / W / (double)units;
        if (ns_per_unit_best == 0 || rate < ns_per_unit_best) ns_per_unit_best = rate;
        if (n_seen == cap_seen) {
            cap_seen = cap_seen ? 2 * cap_seen : 256;
            ns_per_unit_seen = realloc(ns_per_unit_seen, cap_seen * sizeof *ns_per_unit_seen);
        }
        ns_per_unit_seen[n_seen++] = rate;
    }
    return s / W;
}

static void calibrate(wb_kernel_kind kind, size_t scratch_bytes)
{
    if (kind == WB_K_EMPTY) return;
    wb_scratch s;
    if (kind == WB_K_MEMORY_BOUND) {
        if (wb_scratch_init(&s, scratch_bytes) != 0) return;
    } else {
        memset(&s, 0, sizeof s);
    }
    double best = 1e30;
    for (int rep = 0; rep < 7; rep++) {
        double t0 = wb_now();
        (void)wb_kernel_exec(kind, 1u << 20, &s);
        double dt = (wb_now() - t0) * 1e9 / 1048576.0;
        if (dt < best) best = dt;
    }
    ns_per_unit_estimate = best;
    wb_scratch_free(&s);
}

/* CPU time stolen by the hypervisor and spent by other processes, from
 * /proc/stat: a measure of how noisy the machine was during the run. */
typedef struct cpu_sample {
    unsigned long long total, idle, steal, self_ns;
    double wall;
} cpu_sample;

static void cpu_sample_take(cpu_sample *c)
{
    memset(c, 0, sizeof *c);
    c->wall = wb_now();
    c->self_ns = (unsigned long long)(wb_cpu_time() * 1e9);
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return;
    unsigned long long v[10] = {0};
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
               &v[4], &v[5], &v[6], &v[7]) == 8) {
        for (int k = 0; k < 8; k++) c->total += v[k];
        c->idle = v[3] + v[4];
        c->steal = v[7];
    }
    fclose(f);
}

/* Percent of the machine (workers cores) that other processes used between
 * two samples. */
static double others_pct(const cpu_sample *a, const cpu_sample *b, unsigned ncpu)
{
    double ticks = (double)(b->total - a->total);
    double wall = b->wall - a->wall;
    if (ticks <= 0 || wall <= 0) return 0.0;
    long hz = sysconf(_SC_CLK_TCK);
    double busy_s = (ticks - (double)(b->idle - a->idle)) / (double)hz;
    double self_s = (double)(b->self_ns - a->self_ns) * 1e-9;
    double o = (busy_s - self_s) / (wall * (double)ncpu);
    return o > 0 ? 100.0 * o : 0.0;
}

static unsigned online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

static double quiet_budget_s = 60; /* --wait-quiet */
static double quiet_waited_s;
static int remeasured; /* rounds measured again because the machine was busy */

/* Wait (within the budget) until other processes leave the machine alone:
 * on a shared 2-core machine a compiler or a test suite next door halves
 * what any system can do, and no statistic repairs that. */
static void wait_for_quiet(void)
{
    for (;;) {
        cpu_sample a, b;
        cpu_sample_take(&a);
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
        cpu_sample_take(&b);
        double o = others_pct(&a, &b, online_cpus());
        if (o < 10.0) return;
        if (quiet_waited_s >= quiet_budget_s) return;
        LOG("  (other processes use %.0f%% of the machine: waiting for it to calm down, %.0f s of "
            "%.0f s spent)\n",
            o, quiet_waited_s, quiet_budget_s);
        ts.tv_sec = 1;
        ts.tv_nsec = 0;
        nanosleep(&ts, NULL);
        quiet_waited_s += 1.2;
    }
}

/* ------------------------------------------------------------------------ */
/* Systems under test, measured side by side                                 */
/* ------------------------------------------------------------------------ */

/* A growable list of samples. */
typedef struct sample_set {
    double *v;
    size_t n, cap;
} sample_set;

static void ss_add(sample_set *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static double ss_median(const sample_set *s)
{
    if (s->n == 0) return 0;
    double *c = malloc(s->n * sizeof *c);
    memcpy(c, s->v, s->n * sizeof *c);
    double m = wb_median(c, s->n);
    free(c);
    return m;
}

static double ss_min(const sample_set *s)
{
    double m = s->n ? s->v[0] : 0;
    for (size_t k = 1; k < s->n; k++)
        if (s->v[k] < m) m = s->v[k];
    return m;
}

/* One kernel length of one system: its raw executions, and what follows. */
typedef struct point_result {
    uint64_t iterations;
    sample_set walls;  /* every execution at this length (seconds) */
    double base_min;   /* best baseline measured right before one of them (ns per kernel) */
    double others_pct; /* most CPU other processes used during one of its rounds */
    /* derived by point_stats() */
    double wall_s;     /* median */
    double kernel_us;  /* median baseline of all systems at this length, per task */
    double gran_us;
    double eff;
    double gflops, gbytes;
    double gran_best_us, eff_best; /* best execution against base_min */
} point_result;

/* Baselines of all systems at one kernel length (of the pattern being run). */
typedef struct base_pool {
    uint64_t iterations;
    sample_set v;
} base_pool;

static base_pool *pools;
static size_t npools;

static sample_set *pool_for(uint64_t L)
{
    for (size_t k = 0; k < npools; k++)
        if (pools[k].iterations == L) return &pools[k].v;
    pools = realloc(pools, (npools + 1) * sizeof *pools);
    memset(&pools[npools], 0, sizeof pools[npools]);
    pools[npools].iterations = L;
    return &pools[npools++].v;
}

static void pools_clear(void)
{
    for (size_t k = 0; k < npools; k++) free(pools[k].v.v);
    free(pools);
    pools = NULL;
    npools = 0;
}

typedef struct sys_slot {
    const wb_system *sys;
    void *st;
    int alive;         /* started and not failed */
    char status[24];   /* ok, upper_bound, not_reached, missing, failed */
    char msg[400];
    point_result *pts;
    size_t npts, cap;
    int below;         /* consecutive points below 50% at the end of the downward sweep */
    double metg_us;
    double *walls;     /* [repeats] scratch of a round */
    double base_min;   /* scratch of a round */
    double metg_best_us; /* the same from the best executions (0: none) */
    int paused;
} sys_slot;

static void slot_pause(sys_slot *s)
{
    if (s->st && s->sys->pause && !s->paused) {
        s->sys->pause(s->st);
        s->paused = 1;
    }
}

static void slot_resume(sys_slot *s)
{
    if (s->st && s->sys->resume && s->paused) {
        s->sys->resume(s->st);
        s->paused = 0;
    }
}

static double sum_factor(const wb_run *r)
{
    if (r->kernel.kind != WB_K_LOAD_IMBALANCE) return (double)r->tasks;
    double s = 0;
    for (uint32_t g = 0; g < r->ngraphs; g++)
        for (uint32_t p = 0; p < r->graph.npoints; p++) s += wb_task_factor(&r->kernel, g, p);
    return s;
}

static void slot_fail(sys_slot *s, const char *fmt, const char *detail)
{
    s->alive = 0;
    snprintf(s->status, sizeof s->status, "failed");
    snprintf(s->msg, sizeof s->msg, fmt, detail);
    LOG("%s: FAILED: %s\n", s->sys->name, s->msg);
    slot_resume(s);
    if (s->st) s->sys->fini(s->st);
    s->st = NULL;
}

/* Start every system; paused ones stay paused while others run. */
static void slots_start(sys_slot *slots, int n, wb_run *r, int repeats)
{
    for (int k = 0; k < n; k++) {
        sys_slot *s = &slots[k];
        const char *why = s->sys->missing();
        s->walls = calloc((size_t)repeats, sizeof *s->walls);
        if (why) {
            snprintf(s->status, sizeof s->status, "missing");
            snprintf(s->msg, sizeof s->msg, "%s", why);
            LOG("%s: missing (%s)\n", s->sys->name, why);
            continue;
        }
        char err[256] = "";
        if (s->sys->init(r, &s->st, err, sizeof err) != 0) {
            s->st = NULL;
            slot_fail(s, "could not start: %s", err);
            continue;
        }
        s->alive = 1;
        slot_pause(s);
    }
}

static void slots_stop(sys_slot *slots, int n)
{
    for (int k = 0; k < n; k++) {
        if (slots[k].st) {
            slot_resume(&slots[k]);
            slots[k].sys->fini(slots[k].st);
        }
        slots[k].st = NULL;
        for (size_t q = 0; q < slots[k].npts; q++) free(slots[k].pts[q].walls.v);
        free(slots[k].pts);
        free(slots[k].walls);
        slots[k].pts = NULL;
        slots[k].walls = NULL;
    }
}

/* One timed execution of system s; 0, or -1 after marking s failed. */
static int execute_once(sys_slot *s, wb_run *r, double *wall)
{
    char err[256] = "";
    if (quiesce() != 0) noisy_waits++;
    slot_resume(s);
    wb_run_begin(r);
    double t0 = wb_now();
    int rc = s->sys->exec(s->st, r, err, sizeof err);
    double t1 = wb_now();
    slot_pause(s);
    uint64_t bad = wb_run_check(r);
    *wall = t1 - t0;
    if (rc != 0) {
        slot_fail(s, "execution failed: %s", err);
        return -1;
    }
    if (bad) {
        char m[400];
        snprintf(m, sizeof m, "%" PRIu64 " mismatches; first: %s", bad, r->first_msg);
        slot_fail(s, "VALIDATION FAILED: %s", m);
        return -1;
    }
    return 0;
}

static void log_point(const wb_system *sys, const point_result *p)
{
    LOG("  %-9s iters %10" PRIu64 "  kernel %9.3f us  granularity %9.3f us  efficiency %6.1f%%"
        "  (best %8.3f us %6.1f%%)%s\n",
        sys->name, p->iterations, p->kernel_us, p->gran_us, 100.0 * p->eff, p->gran_best_us,
        100.0 * p->eff_best, p->others_pct >= 10 ? "  (machine busy)" : "");
}

static point_result *point_for(sys_slot *s, uint64_t L)
{
    for (size_t k = 0; k < s->npts; k++)
        if (s->pts[k].iterations == L) return &s->pts[k];
    if (s->npts == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->pts = realloc(s->pts, s->cap * sizeof *s->pts);
    }
    point_result *p = &s->pts[s->npts++];
    memset(p, 0, sizeof *p);
    p->iterations = L;
    return p;
}

static void point_stats(point_result *p, const wb_run *r, double factor_sum)
{
    const double W = (double)r->workers;
    const double T = (double)r->tasks;
    double kns = ss_median(pool_for(p->iterations));
    p->wall_s = ss_median(&p->walls);
    double wbest = ss_min(&p->walls);
    p->kernel_us = kns * factor_sum / T * 1e-3;
    p->gran_us = p->wall_s * W / T * 1e6;
    p->eff = p->wall_s > 0 ? kns * factor_sum * 1e-9 / (p->wall_s * W) : 0;
    p->gran_best_us = wbest * W / T * 1e6;
    /* like with like: this system's executions against the baselines measured
     * right before them (the pool of all systems' baselines has more chances
     * to catch a fast moment of the machine) */
    p->eff_best = wbest > 0 ? p->base_min * factor_sum * 1e-9 / (wbest * W) : 0;
    double units_total = (double)p->iterations * factor_sum;
    p->gflops = p->wall_s > 0 ? units_total * wb_kernel_flops_per_unit(r->kernel.kind) / p->wall_s * 1e-9 : 0;
    p->gbytes = p->wall_s > 0 ? units_total * wb_kernel_bytes_per_unit(r->kernel.kind) / p->wall_s * 1e-9 : 0;
}

/* Measure kernel length `units` on the systems listed in act[]: `repeats`
 * rounds; in each round every system executes once, in an order that rotates
 * from round to round, each execution after a baseline measurement (the same
 * kernels on one thread per worker, no runtime), so that a burst of noise on
 * the shared machine hits all systems and the baseline alike.  The samples
 * are added to each system's point for that length (measuring a length again
 * adds to it); point_stats() then gives
 *   - from the medians: the kernel time is the median of all baselines at
 *     that length (all systems), the execution the median of the system's;
 *   - from the best execution against the best of the baselines measured
 *     right before this system's executions (noise only ever slows a run
 *     down, so this is what the system does on an undisturbed machine). */
static void measure_round(const opts *o, sys_slot *slots, const int *act, int nact, wb_run *r,
                          uint64_t units, double factor_sum)
{
    const int R = o->repeats;
    const double W = (double)r->workers;
    r->kernel.iterations = units;
    cpu_sample c0, c1;
    double others = 0;
    double *tmp_pool = calloc((size_t)R * (size_t)nact, sizeof *tmp_pool);
    size_t ntmp = 0;
    /* A round during which other processes took more than 10% of the machine
     * is measured again (twice at most, while the --wait-quiet budget lasts);
     * the discarded samples are not kept. */
    for (int attempt = 0;; attempt++) {
        wait_for_quiet();
        ntmp = 0;
        for (int j = 0; j < nact; j++) slots[act[j]].base_min = 0;
        cpu_sample_take(&c0);
        for (int rep = 0; rep < R; rep++) {
            for (int j = 0; j < nact; j++) {
                sys_slot *s = &slots[act[(j + rep) % nact]];
                if (!s->alive) continue;
                double base = 0;
                if (r->kernel.kind != WB_K_EMPTY) {
                    if (quiesce() != 0) noisy_waits++;
                    base = baseline_ns(r, units);
                    tmp_pool[ntmp++] = base;
                    if (s->base_min == 0 || base < s->base_min) s->base_min = base;
                }
                if (execute_once(s, r, &s->walls[rep]) == 0 && o->verbose)
                    fprintf(stderr, "    %-9s rep %2d  baseline %9.3f us  granularity %9.3f us\n",
                            s->sys->name, rep, base * 1e-3,
                            s->walls[rep] * W / (double)r->tasks * 1e6);
            }
        }
        cpu_sample_take(&c1);
        others = others_pct(&c0, &c1, online_cpus());
        if (others <= 10.0 || attempt >= 2 || quiet_waited_s >= quiet_budget_s) break;
        remeasured++;
        LOG("  (other processes took %.0f%% of the machine: measuring again)\n", others);
    }
    sample_set *pool = pool_for(units);
    for (size_t k = 0; k < ntmp; k++) ss_add(pool, tmp_pool[k]);
    free(tmp_pool);
    for (int j = 0; j < nact; j++) {
        sys_slot *s = &slots[act[j]];
        if (!s->alive) continue;
        point_result *p = point_for(s, units);
        for (int rep = 0; rep < R; rep++) ss_add(&p->walls, s->walls[rep]);
        if (p->base_min == 0 || (s->base_min > 0 && s->base_min < p->base_min))
            p->base_min = s->base_min;
        if (others > p->others_pct) p->others_pct = others;
        point_stats(p, r, factor_sum);
        log_point(s->sys, p);
    }
}

/* ------------------------------------------------------------------------ */
/* CSV                                                                        */
/* ------------------------------------------------------------------------ */

static const char csv_header[] =
    "record,system,pattern,kernel,width,steps,ngraphs,workers,iterations,tasks,repeats,"
    "wall_s,kernel_us,granularity_us,efficiency,gflops,gbytes_s,metg50_us,status,others_pct,"
    "granularity_best_us,efficiency_best,metg50_best_us\n";

static int csv_file_has_header;

static void csv_out(const char *line)
{
    if (line == csv_header) {
        fputs(line, stdout);
        fflush(stdout);
        if (csv_file && !csv_file_has_header) fputs(line, csv_file);
        csv_file_has_header = 1;
        return;
    }
    fputs(line, stdout);
    fflush(stdout);
    if (csv_file) {
        fputs(line, csv_file);
        fflush(csv_file);
    }
}

static void csv_point(const opts *o, const wb_system *sys, const wb_run *r,
                      const point_result *p, const char *status)
{
    char line[512];
    snprintf(line, sizeof line,
             "point,%s,%s,%s,%d,%d,%u,%u,%" PRIu64 ",%" PRIu64 ",%d,%.9f,%.4f,%.4f,%.4f,%.3f,%.3f,,%s,"
             "%.1f,%.4f,%.4f,\n",
             sys->name, wb_pattern_name(r->graph.shape.pattern), wb_kernel_name(o->kernel),
             r->graph.shape.width, r->graph.shape.steps, r->ngraphs, r->workers, p->iterations,
             r->tasks, (int)p->walls.n, p->wall_s, p->kernel_us, p->gran_us, p->eff, p->gflops,
             p->gbytes, status, p->others_pct, p->gran_best_us, p->eff_best);
    csv_out(line);
}

static void csv_metg(const opts *o, const char *sys, wb_pattern pat, int width, double metg,
                     const char *status, double others, double metg_best)
{
    char line[512], val[32] = "", valb[32] = "";
    if (metg > 0) snprintf(val, sizeof val, "%.4f", metg);
    if (metg_best > 0) snprintf(valb, sizeof valb, "%.4f", metg_best);
    snprintf(line, sizeof line, "metg,%s,%s,%s,%d,%d,%d,%u,,,%d,,,,,,,%s,%s,%.1f,,,%s\n", sys,
             wb_pattern_name(pat), wb_kernel_name(o->kernel), width, o->steps, o->ngraphs,
             o->workers, o->repeats, val, status, others, valb);
    csv_out(line);
}

/* ------------------------------------------------------------------------ */
/* The METG sweep of all systems on one pattern                              */
/* ------------------------------------------------------------------------ */

/* Granularity and efficiency of a point, median-based or best-execution. */
static double pg(const point_result *p, int best)
{
    return best ? p->gran_best_us : p->gran_us;
}

static double pe(const point_result *p, int best)
{
    return best ? p->eff_best : p->eff;
}

static double interpolate(const point_result *hi, const point_result *lo, int best)
{
    /* hi: eff >= 0.5 (larger granularity); lo: eff < 0.5 */
    double x1 = log(pg(hi, best)), x0 = log(pg(lo, best));
    double e1 = pe(hi, best), e0 = pe(lo, best);
    if (e1 - e0 <= 1e-12) return pg(hi, best);
    return exp(x0 + (0.5 - e0) * (x1 - x0) / (e1 - e0));
}

static uint64_t units_for_us(double us)
{
    double u = us * 1000.0 / ns_per_unit_estimate;
    uint64_t p = 1;
    while ((double)(p * 2) <= u * 1.41421356 && p < (1ull << 40)) p *= 2; /* nearest power of two */
    return p;
}

static int cmp_points_desc(const void *a, const void *b)
{
    const point_result *x = a, *y = b;
    return (x->iterations < y->iterations) - (x->iterations > y->iterations);
}

/* METG(50%) from a system's points (sorted, longest kernel first): the first
 * point below 50% that the next `extra` points confirm (they are below 50%
 * too) and the point before it bracket the crossing.  Returns the status
 * ("ok", "upper_bound", "not_reached") and sets *metg (0 when not_reached). */
static const char *crossing(const point_result *pts, size_t n, int extra, int best, double *metg,
                            size_t *at)
{
    *metg = 0;
    *at = 0;
    if (pe(&pts[0], best) < 0.5) return "not_reached";
    for (size_t k = 1; k < n; k++) {
        int stays = pe(&pts[k], best) < 0.5;
        for (size_t q = k + 1; q < n && q <= k + (size_t)extra && stays; q++)
            stays = pe(&pts[q], best) < 0.5;
        if (stays) {
            *metg = interpolate(&pts[k - 1], &pts[k], best);
            *at = k;
            return "ok";
        }
    }
    *metg = pg(&pts[n - 1], best);
    return "upper_bound";
}

static void finish_metg(sys_slot *s, int extra)
{
    if (!s->alive) return;
    if (s->npts == 0) {
        snprintf(s->status, sizeof s->status, "failed");
        snprintf(s->msg, sizeof s->msg, "no point measured");
        return;
    }
    qsort(s->pts, s->npts, sizeof *s->pts, cmp_points_desc);
    size_t at;
    const char *st = crossing(s->pts, s->npts, extra, 0, &s->metg_us, &at);
    (void)crossing(s->pts, s->npts, extra, 1, &s->metg_best_us, &at);
    snprintf(s->status, sizeof s->status, "%s", st);
    if (!strcmp(st, "not_reached"))
        snprintf(s->msg, sizeof s->msg, "below 50%% even with a %.0f us kernel",
                 s->pts[0].kernel_us);
    else if (!strcmp(st, "upper_bound"))
        snprintf(s->msg, sizeof s->msg, "still >= 50%% at the shortest kernel: METG <= %.3f us",
                 s->metg_us);
}

/* A second look where noise is most likely to have decided the result: the two
 * points that bracket each system's crossing, and every point whose efficiency
 * is more than 15 points below that of a shorter kernel of the same system
 * (efficiency cannot really grow as tasks get smaller: one of the two was
 * disturbed; both are measured again).  The new executions are added to the
 * old ones, so each such point ends up with twice the samples. */
static void confirm_pass(const opts *o, wb_run *r, sys_slot *slots, int n, double fs)
{
    uint64_t *Ls = NULL;
    size_t nL = 0;
    char **want = calloc((size_t)n, sizeof *want); /* want[k][q]: system k remeasures its point q */
    for (int k = 0; k < n; k++) {
        sys_slot *s = &slots[k];
        if (!s->alive || s->npts < 2) continue;
        qsort(s->pts, s->npts, sizeof *s->pts, cmp_points_desc);
        for (size_t q = 0; q < s->npts; q++) point_stats(&s->pts[q], r, fs);
        want[k] = calloc(s->npts, 1);
        double metg;
        size_t at;
        if (!strcmp(crossing(s->pts, s->npts, o->extra, 0, &metg, &at), "ok"))
            want[k][at - 1] = want[k][at] = 1;
        for (size_t q = 0; q < s->npts; q++)
            for (size_t j = q + 1; j < s->npts; j++)
                if (s->pts[q].eff + 0.15 < s->pts[j].eff) want[k][q] = want[k][j] = 1;
        for (size_t q = 0; q < s->npts; q++) {
            if (!want[k][q]) continue;
            size_t u = 0;
            while (u < nL && Ls[u] != s->pts[q].iterations) u++;
            if (u == nL) {
                Ls = realloc(Ls, (nL + 1) * sizeof *Ls);
                Ls[nL++] = s->pts[q].iterations;
            }
        }
    }
    int *act = calloc((size_t)n, sizeof *act);
    for (size_t u = 0; u < nL; u++) {
        int nact = 0;
        for (int k = 0; k < n; k++) {
            if (!want[k] || !slots[k].alive) continue;
            for (size_t q = 0; q < slots[k].npts; q++)
                if (want[k][q] && slots[k].pts[q].iterations == Ls[u]) act[nact++] = k;
        }
        if (nact == 0) continue;
        LOG("  confirming %" PRIu64 " iterations (%d system(s))\n", Ls[u], nact);
        measure_round(o, slots, act, nact, r, Ls[u], fs);
    }
    for (int k = 0; k < n; k++) free(want[k]);
    free(want);
    free(act);
    free(Ls);
}

static void metg_pattern(const opts *o, wb_run *r, sys_slot *slots, int n)
{
    double fs = sum_factor(r);
    pools_clear();
    slots_start(slots, n, r, o->repeats);
    int *act = calloc((size_t)n, sizeof *act);
    /* Warm-up, and a first validation, with the shortest kernel. */
    for (int k = 0; k < n; k++) {
        double w;
        r->kernel.iterations = 1;
        if (slots[k].alive) (void)execute_once(&slots[k], r, &w);
    }
    const uint64_t L0 = units_for_us(o->start_us);
    /* Downwards from L0 until each system has 1 + extra consecutive points
     * below 50% (one dip followed by a point above 50% is noise, not the end). */
    for (uint64_t L = L0;; L /= 2) {
        int nact = 0;
        for (int k = 0; k < n; k++)
            if (slots[k].alive && slots[k].below <= o->extra) act[nact++] = k;
        if (nact == 0) break;
        measure_round(o, slots, act, nact, r, L, fs);
        for (int j = 0; j < nact; j++) {
            sys_slot *s = &slots[act[j]];
            if (!s->alive) continue;
            const point_result *last = point_for(s, L);
            s->below = (last->eff < 0.5 && last->eff_best < 0.5) ? s->below + 1 : 0;
        }
        if (L == 1) break;
    }
    /* Upwards from L0 for the systems already below 50% there. */
    for (uint64_t L = L0 * 2;; L *= 2) {
        int nact = 0;
        for (int k = 0; k < n; k++) {
            sys_slot *s = &slots[k];
            if (!s->alive || s->npts == 0) continue;
            int reached = 0;
            for (size_t q = 0; q < s->npts; q++)
                if (s->pts[q].iterations >= L0 && s->pts[q].eff >= 0.5) reached = 1;
            if (!reached) act[nact++] = k;
        }
        if (nact == 0) break;
        double kus = point_for(&slots[act[0]], L0)->kernel_us;
        if (kus * (double)(L / L0) > o->max_us) break;
        measure_round(o, slots, act, nact, r, L, fs);
    }
    if (o->confirm) confirm_pass(o, r, slots, n, fs);
    for (int k = 0; k < n; k++) {
        finish_metg(&slots[k], o->extra);
        if (slots[k].msg[0] && strcmp(slots[k].status, "failed") != 0 &&
            strcmp(slots[k].status, "missing") != 0)
            LOG("%s: %s: %s\n", slots[k].sys->name, slots[k].status, slots[k].msg);
    }
    /* The points, final (confirmed) figures, longest kernel first. */
    for (int k = 0; k < n; k++)
        for (size_t q = 0; q < slots[k].npts; q++) {
            point_stats(&slots[k].pts[q], r, fs);
            csv_point(o, slots[k].sys, r, &slots[k].pts[q], r->validate ? "ok" : "unvalidated");
        }
    free(act);
    /* the caller prints, then stops the systems */
}

/* ------------------------------------------------------------------------ */
/* Command line                                                              */
/* ------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: weft-bench metg --pattern P[,P...|all] [--systems S[,S...]|all] [options]\n"
            "       weft-bench run  --pattern P [--systems ...] (--iterations N | --kernel-us U) "
            "[options]\n"
            "       weft-bench list\n"
            "       weft-bench report [--help]\n"
            "\n"
            "patterns: trivial no_comm stencil_1d stencil_1d_periodic dom tree fft all_to_all\n"
            "          nearest spread random_nearest\n"
            "systems:  weft weft_root openmp starpu bsp spin   (default: weft,openmp,starpu,bsp,spin)\n"
            "kernels:  empty busy_wait compute_bound memory_bound load_imbalance\n"
            "\n"
            "options (defaults in brackets):\n"
            "  --kernel K          task kernel [busy_wait]\n"
            "  --workers N         worker threads of every system [online cores]\n"
            "  --width W           points per step [= workers]\n"
            "  --steps T           steps [1000]\n"
            "  --ngraphs G         independent graphs run at once [1]\n"
            "  --repeats R         executions per point; medians are reported [5]\n"
            "  --start-us U        first kernel length of a sweep, in us [64]\n"
            "  --max-us U          longest kernel a sweep tries upwards, in us [1000]\n"
            "  --extra N           a crossing counts once N more points stay below 50%% [1]\n"
            "  --iterations N      run: kernel length in units\n"
            "  --kernel-us U       run: kernel length in us (converted with a calibration)\n"
            "  --output-bytes B    bytes each task writes and its consumers check [16]\n"
            "  --no-validate       do not check inputs and outputs\n"
            "  --radix R           nearest/spread/random_nearest radix [3]\n"
            "  --period P          spread period [3]\n"
            "  --imbalance X       load_imbalance: factor uniform in [1-X/2, 1+X/2) [0.5]\n"
            "  --scratch-bytes B   memory_bound: scratch buffer per worker [64 MiB]\n"
            "  --drop-dep[=t:i:j]  plant a wrong graph: drop the dependency of point (t,i) on\n"
            "                      (t-1,j) [last step, first point, first dependency]\n"
            "  --expect-invalid    run: succeed only if every dependency-driven system's\n"
            "                      validation catches the planted dependency\n"
            "  --csv FILE          also append the CSV rows to FILE\n"
            "  --quiet             no progress on stderr\n"
            "  --no-confirm        skip the second look at the crossing and at outliers\n"
            "  --verbose           every execution on stderr\n"
            "  --wait-quiet S      wait up to S seconds in all for other processes to leave\n"
            "                      the machine idle before measuring a point [60]\n");
}

static int parse_list_patterns(const char *s, opts *o)
{
    if (strcmp(s, "all") == 0) {
        for (int p = 0; p < WB_PATTERN_COUNT; p++) o->patterns[p] = (wb_pattern)p;
        o->npatterns = WB_PATTERN_COUNT;
        return 0;
    }
    char *dup = strdup(s), *save = NULL;
    o->npatterns = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        wb_pattern p;
        if (wb_pattern_parse(tok, &p) != 0 || o->npatterns == WB_PATTERN_COUNT) {
            fprintf(stderr, "weft-bench: unknown pattern '%s'\n", tok);
            free(dup);
            return -1;
        }
        o->patterns[o->npatterns++] = p;
    }
    free(dup);
    return o->npatterns ? 0 : -1;
}

static int parse_list_systems(const char *s, opts *o)
{
    if (strcmp(s, "all") == 0) {
        for (size_t k = 0; k < NSYS; k++) o->systems[k] = all_systems[k];
        o->nsystems = (int)NSYS;
        return 0;
    }
    char *dup = strdup(s), *save = NULL;
    o->nsystems = 0;
    for (char *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        const wb_system *found = NULL;
        for (size_t k = 0; k < NSYS; k++)
            if (strcmp(tok, all_systems[k]->name) == 0) found = all_systems[k];
        if (!found || o->nsystems == (int)NSYS) {
            fprintf(stderr, "weft-bench: unknown system '%s'\n", tok);
            free(dup);
            return -1;
        }
        o->systems[o->nsystems++] = found;
    }
    free(dup);
    return o->nsystems ? 0 : -1;
}

static int parse_num(const char *name, const char *v, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (!v[0] || *end || errno || x < lo || x > hi) {
        fprintf(stderr, "weft-bench: bad value '%s' for %s\n", v, name);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_args(int argc, char **argv, opts *o)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    memset(o, 0, sizeof *o);
    o->kernel = WB_K_BUSY_WAIT;
    o->workers = ncpu > 0 ? (unsigned)ncpu : 2;
    o->steps = 1000;
    o->ngraphs = 1;
    o->repeats = 5;
    o->start_us = 64;
    o->max_us = 1000;
    o->wait_quiet = 60;
    o->confirm = 1;
    o->extra = 1;
    o->output_bytes = 16;
    o->validate = 1;
    o->radix = 3;
    o->period = 3;
    o->imbalance = 0.5;
    o->scratch_bytes = 64u << 20;
    o->drop_t = o->drop_i = o->drop_j = -1;
    parse_list_systems("weft,openmp,starpu,bsp,spin", o);
    for (int k = 2; k < argc; k++) {
        const char *a = argv[k];
        const char *eq = strchr(a, '=');
        char key[64];
        const char *val = NULL;
        if (eq && strncmp(a, "--", 2) == 0 && (size_t)(eq - a) < sizeof key) {
            memcpy(key, a, (size_t)(eq - a));
            key[eq - a] = '\0';
            val = eq + 1;
        } else {
            snprintf(key, sizeof key, "%s", a);
        }
#define NEXT()                                                                                     \
    do {                                                                                           \
        if (!val) {                                                                                \
            if (k + 1 >= argc) {                                                                   \
                fprintf(stderr, "weft-bench: %s needs a value\n", key);                            \
                return -1;                                                                         \
            }                                                                                      \
            val = argv[++k];                                                                       \
        }                                                                                          \
    } while (0)
        double x;
        if (!strcmp(key, "--pattern") || !strcmp(key, "--patterns")) {
            NEXT();
            if (parse_list_patterns(val, o)) return -1;
        } else if (!strcmp(key, "--systems") || !strcmp(key, "--system")) {
            NEXT();
            if (parse_list_systems(val, o)) return -1;
        } else if (!strcmp(key, "--kernel")) {
            NEXT();
            if (wb_kernel_parse(val, &o->kernel)) {
                fprintf(stderr, "weft-bench: unknown kernel '%s'\n", val);
                return -1;
            }
        } else if (!strcmp(key, "--workers")) {
            NEXT();
            if (parse_num(key, val, 1, 1024, &x)) return -1;
            o->workers = (unsigned)x;
        } else if (!strcmp(key, "--width")) {
            NEXT();
            if (parse_num(key, val, 1, 1 << 20, &x)) return -1;
            o->width = (int)x;
        } else if (!strcmp(key, "--steps")) {
            NEXT();
            if (parse_num(key, val, 1, 1 << 24, &x)) return -1;
            o->steps = (int)x;
        } else if (!strcmp(key, "--ngraphs") || !strcmp(key, "-ngraphs")) {
            NEXT();
            if (parse_num(key, val, 1, 1 << 16, &x)) return -1;
            o->ngraphs = (int)x;
        } else if (!strcmp(key, "--repeats")) {
            NEXT();
            if (parse_num(key, val, 1, 1000, &x)) return -1;
            o->repeats = (int)x;
        } else if (!strcmp(key, "--start-us")) {
            NEXT();
            if (parse_num(key, val, 0.001, 1e7, &o->start_us)) return -1;
        } else if (!strcmp(key, "--max-us")) {
            NEXT();
            if (parse_num(key, val, 0.001, 1e8, &o->max_us)) return -1;
        } else if (!strcmp(key, "--extra")) {
            NEXT();
            if (parse_num(key, val, 0, 20, &x)) return -1;
            o->extra = (int)x;
        } else if (!strcmp(key, "--iterations")) {
            NEXT();
            if (parse_num(key, val, 0, 1e15, &x)) return -1;
            o->iterations = (uint64_t)x;
        } else if (!strcmp(key, "--kernel-us")) {
            NEXT();
            if (parse_num(key, val, 0, 1e8, &o->kernel_us)) return -1;
        } else if (!strcmp(key, "--output-bytes")) {
            NEXT();
            if (parse_num(key, val, 16, 1 << 24, &x)) return -1;
            o->output_bytes = (size_t)x;
        } else if (!strcmp(key, "--no-validate")) {
            o->validate = 0;
        } else if (!strcmp(key, "--radix")) {
            NEXT();
            if (parse_num(key, val, 1, 1 << 20, &x)) return -1;
            o->radix = (int)x;
        } else if (!strcmp(key, "--period")) {
            NEXT();
            if (parse_num(key, val, 1, 1 << 20, &x)) return -1;
            o->period = (int)x;
        } else if (!strcmp(key, "--imbalance")) {
            NEXT();
            if (parse_num(key, val, 0, 2, &o->imbalance)) return -1;
        } else if (!strcmp(key, "--scratch-bytes")) {
            NEXT();
            if (parse_num(key, val, 0, 1e12, &x)) return -1;
            o->scratch_bytes = (size_t)x;
        } else if (!strcmp(key, "--drop-dep")) {
            o->drop = 1;
            if (val && sscanf(val, "%d:%d:%d", &o->drop_t, &o->drop_i, &o->drop_j) != 3) {
                fprintf(stderr, "weft-bench: --drop-dep=t:i:j wants three integers\n");
                return -1;
            }
        } else if (!strcmp(key, "--expect-invalid")) {
            o->expect_invalid = 1;
        } else if (!strcmp(key, "--csv")) {
            NEXT();
            o->csv_path = val;
        } else if (!strcmp(key, "--quiet")) {
            o->quiet = 1;
        } else if (!strcmp(key, "--wait-quiet")) {
            NEXT();
            if (parse_num(key, val, 0, 1e6, &o->wait_quiet)) return -1;
        } else if (!strcmp(key, "--no-confirm")) {
            o->confirm = 0;
        } else if (!strcmp(key, "--verbose")) {
            o->verbose = 1;
        } else if (!strcmp(key, "--help") || !strcmp(key, "-h")) {
            usage(stdout);
            exit(0);
        } else {
            fprintf(stderr, "weft-bench: unknown option '%s'\n", a);
            usage(stderr);
            return -1;
        }
#undef NEXT
    }
    if (o->npatterns == 0) {
        fprintf(stderr, "weft-bench: --pattern is required\n");
        return -1;
    }
    return 0;
}

static int setup_run(const opts *o, wb_pattern pat, wb_run *r)
{
    wb_shape s = {.pattern = pat,
                  .width = o->width ? o->width : (int)o->workers,
                  .steps = o->steps,
                  .radix = o->radix,
                  .period = o->period};
    wb_kernel k = {.kind = o->kernel,
                   .iterations = 1,
                   .imbalance = o->imbalance,
                   .scratch_bytes = o->scratch_bytes};
    int dt = -1, di = -1, dj = -1;
    if (o->drop) {
        dt = o->drop_t >= 0 ? o->drop_t : s.steps - 1;
        di = o->drop_t >= 0 ? o->drop_i : wb_shape_offset(&s, dt);
        dj = o->drop_t >= 0 ? o->drop_j : -1;
    }
    char err[256];
    if (wb_run_init(r, &s, (uint32_t)o->ngraphs, o->workers, &k, o->output_bytes,
                    o->validate != 0, dt, di, dj, err, sizeof err) != 0) {
        fprintf(stderr, "weft-bench: %s: %s\n", wb_pattern_name(pat), err);
        return -1;
    }
    if (r->graph.dropped)
        LOG("planted wrong graph: point (t=%d,i=%d) no longer depends on (t=%d,i=%d)\n",
            r->graph.point_t[r->graph.drop_point], r->graph.point_i[r->graph.drop_point],
            r->graph.point_t[r->graph.drop_input], r->graph.point_i[r->graph.drop_input]);
    if (pat == WB_STENCIL_1D_PERIODIC && s.width < 3)
        LOG("note: stencil_1d_periodic with width %d < 3: duplicate neighbours merged\n", s.width);
    return 0;
}

static void report_noise(const cpu_sample *a, const cpu_sample *b)
{
    double ticks = (double)(b->total - a->total);
    if (ticks <= 0) return;
    double o = others_pct(a, b, online_cpus());
    if (n_seen) {
        double med = wb_median(ns_per_unit_seen, n_seen);
        printf("# machine: the %s kernel ran at %.3f ns per iteration (median of %zu baselines; "
               "fastest %.3f): the machine ran at about %.0f%% of its best speed\n",
               "baseline", med, n_seen, ns_per_unit_best, 100.0 * ns_per_unit_best / med);
    }
    printf("# machine: other processes used %.1f%% of its %u core(s) during the run%s; "
           "%.1f%% stolen by the hypervisor; waited %.0f s for quiet; %d point(s) measured again; "
           "%d quiesce wait(s) timed out\n",
           o, online_cpus(), o >= 10 ? " (TOO BUSY: figures unreliable)" : "",
           100.0 * (double)(b->steal - a->steal) / ticks, quiet_waited_s, remeasured, noisy_waits);
}

static int cmd_metg(const opts *o)
{
    if (o->kernel == WB_K_EMPTY) {
        fprintf(stderr, "weft-bench: the empty kernel has no length to sweep; "
                        "use `weft-bench run --kernel empty`\n");
        return 2;
    }
    calibrate(o->kernel, o->scratch_bytes);
    LOG("weft-bench metg: %u worker(s), kernel %s (~%.3f ns per unit), %d steps, %d graph(s), "
        "%d repeats per point, output %zu bytes, validation %s\n",
        o->workers, wb_kernel_name(o->kernel), ns_per_unit_estimate, o->steps, o->ngraphs,
        o->repeats, o->output_bytes, o->validate ? "on" : "OFF");
    csv_out(csv_header);
    cpu_sample c0, c1;
    cpu_sample_take(&c0);
    const int n = o->nsystems;
    sys_slot *all = calloc((size_t)o->npatterns * (size_t)n, sizeof *all);
    int any_failed = 0;
    for (int pi = 0; pi < o->npatterns; pi++) {
        wb_run r;
        if (setup_run(o, o->patterns[pi], &r) != 0) return 2;
        LOG("pattern %s: width %d, %" PRIu64 " tasks per execution, %" PRIu64 " dependencies\n",
            wb_pattern_name(o->patterns[pi]), r.graph.shape.width, r.tasks,
            r.graph.nedges * r.ngraphs);
        sys_slot *slots = all + (size_t)pi * (size_t)n;
        for (int k = 0; k < n; k++) slots[k].sys = o->systems[k];
        cpu_sample p0, p1;
        cpu_sample_take(&p0);
        metg_pattern(o, &r, slots, n);
        cpu_sample_take(&p1);
        double others = others_pct(&p0, &p1, online_cpus());
        for (int k = 0; k < n; k++) {
            csv_metg(o, slots[k].sys->name, o->patterns[pi], r.graph.shape.width, slots[k].metg_us,
                     slots[k].status, others, slots[k].metg_best_us);
            if (!strcmp(slots[k].status, "failed")) any_failed = 1;
        }
        slots_stop(slots, n);
        wb_run_free(&r);
    }
    cpu_sample_take(&c1);
    report_noise(&c0, &c1);
    for (int pi = 0; pi < o->npatterns; pi++) {
        for (int k = 0; k < n; k++) {
            const sys_slot *s = &all[(size_t)pi * (size_t)n + (size_t)k];
            if (s->msg[0])
                printf("# %s %s: %s: %s\n", s->sys->name, wb_pattern_name(o->patterns[pi]),
                       s->status, s->msg);
        }
    }
    /* The best-execution figures first, as comments: the headline is last. */
    for (int pi = 0; pi < o->npatterns; pi++) {
        printf("# METG(50%%) from the best execution of each point (undisturbed machine)%s%s:",
               o->npatterns > 1 ? ", " : "", o->npatterns > 1 ? wb_pattern_name(o->patterns[pi]) : "");
        for (int k = 0; k < n; k++) {
            const sys_slot *s = &all[(size_t)pi * (size_t)n + (size_t)k];
            if (s->metg_best_us > 0)
                printf(" %s %.3f", s->sys->name, s->metg_best_us);
            else
                printf(" %s -", s->sys->name);
        }
        printf("\n");
    }
    /* Summary: one line per system (per pattern), medians. */
    for (int pi = 0; pi < o->npatterns; pi++) {
        for (int k = 0; k < n; k++) {
            const sys_slot *s = &all[(size_t)pi * (size_t)n + (size_t)k];
            char val[48];
            if (!strcmp(s->status, "ok") || !strcmp(s->status, "upper_bound"))
                snprintf(val, sizeof val, "%.3f", s->metg_us);
            else
                snprintf(val, sizeof val, "%s", s->status);
            if (o->npatterns > 1)
                printf("metg50_us %s %s pattern=%s\n", s->sys->name, val,
                       wb_pattern_name(o->patterns[pi]));
            else
                printf("metg50_us %s %s\n", s->sys->name, val);
        }
    }
    fflush(stdout);
    free(all);
    return any_failed ? 1 : 0;
}

static int cmd_run(const opts *o)
{
    calibrate(o->kernel, o->scratch_bytes);
    uint64_t units = o->iterations;
    if (!units && o->kernel_us > 0) units = (uint64_t)(o->kernel_us * 1000.0 / ns_per_unit_estimate);
    if (o->kernel == WB_K_EMPTY) units = 0;
    csv_out(csv_header);
    int rc = 0, expected = 0, caught = 0;
    const int n = o->nsystems;
    sys_slot *slots = calloc((size_t)n, sizeof *slots);
    int *act = calloc((size_t)n, sizeof *act);
    for (int pi = 0; pi < o->npatterns; pi++) {
        wb_run r;
        if (setup_run(o, o->patterns[pi], &r) != 0) return 2;
        memset(slots, 0, sizeof *slots * (size_t)n);
        for (int k = 0; k < n; k++) slots[k].sys = o->systems[k];
        slots_start(slots, n, &r, o->repeats);
        int nact = 0;
        for (int k = 0; k < n; k++)
            if (slots[k].alive) act[nact++] = k;
        pools_clear();
        if (nact) measure_round(o, slots, act, nact, &r, units, sum_factor(&r));
        for (int k = 0; k < n; k++)
            if (slots[k].alive && slots[k].npts)
                csv_point(o, slots[k].sys, &r, &slots[k].pts[0], r.validate ? "ok" : "unvalidated");
        for (int k = 0; k < n; k++) {
            sys_slot *s = &slots[k];
            const char *pat = wb_pattern_name(o->patterns[pi]);
            if (!strcmp(s->status, "missing")) {
                printf("# %s %s: missing: %s\n", s->sys->name, pat, s->msg);
                continue;
            }
            int planted = o->expect_invalid && s->sys->edge_ordered;
            if (planted) expected++;
            if (!strcmp(s->status, "failed")) {
                if (planted && strstr(s->msg, "VALIDATION FAILED")) {
                    caught++;
                    printf("# %s %s: planted dependency caught: %s\n", s->sys->name, pat, s->msg);
                } else {
                    printf("# %s %s: failed: %s\n", s->sys->name, pat, s->msg);
                    rc = 1;
                }
            } else if (planted) {
                printf("# %s %s: planted dependency NOT caught\n", s->sys->name, pat);
            } else if (o->expect_invalid) {
                printf("# %s %s: orders by a barrier per step: a dropped edge cannot show\n",
                       s->sys->name, pat);
            }
        }
        slots_stop(slots, n);
        wb_run_free(&r);
    }
    free(slots);
    free(act);
    fflush(stdout);
    if (o->expect_invalid) {
        printf("planted dependency caught by %d of %d dependency-driven system(s)\n", caught,
               expected);
        return (expected > 0 && caught == expected && rc == 0) ? 0 : 1;
    }
    return rc;
}

static int cmd_list(void)
{
    printf("systems:\n");
    for (size_t k = 0; k < NSYS; k++) {
        const char *why = all_systems[k]->missing();
        printf("  %-10s %s%s%s%s\n", all_systems[k]->name, all_systems[k]->what,
               why ? "  [missing: " : "", why ? why : "", why ? "]" : "");
    }
    printf("patterns:");
    for (int p = 0; p < WB_PATTERN_COUNT; p++) printf(" %s", wb_pattern_name((wb_pattern)p));
    printf("\nkernels:");
    for (int k = 0; k < WB_KERNEL_COUNT; k++) printf(" %s", wb_kernel_name((wb_kernel_kind)k));
    printf("\n");
    return 0;
}

static int cmd_report(int argc, char **argv)
{
    char script[4096], py[4096];
    snprintf(script, sizeof script, "%s/report.py", WB_SOURCE_DIR);
    const char *envpy = getenv("WEFT_BENCH_PYTHON");
    if (envpy && *envpy) {
        snprintf(py, sizeof py, "%s", envpy);
    } else {
        snprintf(py, sizeof py, "%s/../.venv/bin/python", WB_SOURCE_DIR);
        if (access(py, X_OK) != 0) snprintf(py, sizeof py, "python3");
    }
    char **av = calloc((size_t)argc + 2, sizeof *av);
    av[0] = py;
    av[1] = script;
    for (int k = 2; k < argc; k++) av[k] = argv[k];
    av[argc] = NULL;
    execvp(py, av);
    fprintf(stderr, "weft-bench report: cannot run %s %s: %s\n", py, script, strerror(errno));
    free(av);
    return 2;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "list")) return cmd_list();
    if (!strcmp(cmd, "report")) return cmd_report(argc, argv);
    if (strcmp(cmd, "metg") && strcmp(cmd, "run")) {
        fprintf(stderr, "weft-bench: unknown command '%s'\n", cmd);
        usage(stderr);
        return 2;
    }
    opts o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    quiet = o.quiet;
    quiet_budget_s = o.wait_quiet;
    if (o.csv_path) {
        csv_file = fopen(o.csv_path, "a");
        if (!csv_file) {
            fprintf(stderr, "weft-bench: cannot open %s: %s\n", o.csv_path, strerror(errno));
            return 2;
        }
        fseek(csv_file, 0, SEEK_END);
        csv_file_has_header = ftell(csv_file) > 0;
    }
    int rc = !strcmp(cmd, "metg") ? cmd_metg(&o) : cmd_run(&o);
    if (csv_file) fclose(csv_file);
    return rc;
}
