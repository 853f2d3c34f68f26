/* Stress: random task graphs checked against a sequential model.
 *
 * Each run builds a random program: thousands of tasks, each with random
 * explicit dependencies on earlier tasks, random accesses (R, W, RW,
 * RW|COMMUTE) to a handful of data handles holding 64-bit integers, and a
 * small chance that its body fails.  Every body computes a deterministic
 * function of what it reads and writes it (commute bodies add a value that
 * does not depend on the data they accumulate into, so a group's result does
 * not depend on its order).
 *
 * The same program is then executed sequentially in spawn order — a valid
 * schedule — applying the documented propagation rules, which gives the
 * expected final data values and the expected status of every task.  The
 * runtime must agree exactly: every value, the set of failed and cancelled
 * tasks, and for every cancelled task a cause that is the root of one of the
 * chains that cancelled it.  Bodies also check at run time that no writer of
 * a data handle overlaps another access to it.
 *
 * Usage: test_stress [seeds [tasks]]  (defaults depend on WEFT_TEST_SCALE).
 */
#include "check.h"
#include "testing.h"

#define MAX_DEPS 3
#define MAX_ACC 3
#define NDATA 6

enum { M_R = WEFT_R, M_W = WEFT_W, M_RW = WEFT_RW, M_C = WEFT_RW | WEFT_COMMUTE };

typedef struct spec {
    int ndeps;
    int deps[MAX_DEPS];
    int nacc;
    int acc_data[MAX_ACC];
    unsigned acc_mode[MAX_ACC];
    int fail_code; /* 0: succeeds */
    int keep_handle;
    int spin;
} spec;

typedef struct run_state run_state;

typedef struct task_rec {
    run_state *run;
    int idx;
    atomic_int ran;
    atomic_int destroyed;
} task_rec;

struct run_state {
    int n;
    spec *specs;
    task_rec *recs;
    uint64_t cells[NDATA];
    atomic_int readers[NDATA];
    atomic_int writers[NDATA];
    atomic_int violations;
    atomic_int bad_ptr;
};

static uint64_t task_seed(int idx) { return mix64(0x1234567ull + (uint64_t)idx * 7919u); }

/* The body's computation, shared by the real body and the model: cell[j]
 * is the value of the task's j-th access. */
static void apply(const spec *s, int idx, uint64_t **cell) {
    uint64_t h = task_seed(idx);
    for (int j = 0; j < s->nacc; j++)
        if (s->acc_mode[j] == M_R || s->acc_mode[j] == M_RW) h = mix64(h ^ *cell[j]);
    for (int j = 0; j < s->nacc; j++) {
        switch (s->acc_mode[j]) {
        case M_W: *cell[j] = mix64(h + 1 + (uint64_t)j); break;
        case M_RW: *cell[j] = mix64(h + 101 + (uint64_t)j); break;
        case M_C: *cell[j] += (h >> 40) + 1; break;
        default: break;
        }
    }
}

static int stress_body(weft_ctx *ctx, void *arg) {
    task_rec *tr = arg;
    run_state *r = tr->run;
    const spec *s = &r->specs[tr->idx];
    uint64_t *cell[MAX_ACC];
    for (int j = 0; j < s->nacc; j++) {
        int d = s->acc_data[j];
        cell[j] = weft_ctx_data(ctx, (size_t)j);
        if (cell[j] != &r->cells[d]) {
            atomic_fetch_add(&r->bad_ptr, 1);
            return 9999;
        }
        if (s->acc_mode[j] == M_R) {
            atomic_fetch_add(&r->readers[d], 1);
            if (atomic_load(&r->writers[d]) != 0) atomic_fetch_add(&r->violations, 1);
        } else {
            if (atomic_fetch_add(&r->writers[d], 1) != 0) atomic_fetch_add(&r->violations, 1);
            if (atomic_load(&r->readers[d]) != 0) atomic_fetch_add(&r->violations, 1);
        }
    }
    if (s->spin) {
        for (volatile int k = 0; k < s->spin; k++) {
        }
    }
    apply(s, tr->idx, cell);
    for (int j = 0; j < s->nacc; j++) {
        int d = s->acc_data[j];
        if (s->acc_mode[j] == M_R) atomic_fetch_sub(&r->readers[d], 1);
        else atomic_fetch_sub(&r->writers[d], 1);
    }
    atomic_fetch_add(&tr->ran, 1);
    return s->fail_code;
}

static void rec_destroy(void *arg) {
    task_rec *tr = arg;
    atomic_fetch_add(&tr->destroyed, 1);
}

/* ---- the sequential model ------------------------------------------------------ */

typedef struct ivec {
    int *v;
    int n, cap;
} ivec;

static void iv_push(ivec *a, int x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? 2 * a->cap : 8;
        a->v = realloc(a->v, sizeof *a->v * (size_t)a->cap);
        CHECK(a->v);
    }
    a->v[a->n++] = x;
}

static void iv_copy(ivec *dst, const ivec *src) {
    dst->n = 0;
    for (int i = 0; i < src->n; i++) iv_push(dst, src->v[i]);
}

typedef struct model {
    weft_task_status *status;
    ivec *bad_preds; /* per task: the predecessors that cancelled it */
    uint64_t cells[NDATA];
    int failed, cancelled;
} model;

static void run_model(const spec *specs, int n, model *m) {
    ivec writers[NDATA], pre[NDATA];
    int group_open[NDATA];
    memset(writers, 0, sizeof writers);
    memset(pre, 0, sizeof pre);
    memset(group_open, 0, sizeof group_open);
    memset(m->cells, 0, sizeof m->cells);
    m->failed = m->cancelled = 0;
    for (int i = 0; i < n; i++) {
        const spec *s = &specs[i];
        ivec *bp = &m->bad_preds[i];
        bp->n = 0;
        for (int k = 0; k < s->ndeps; k++)
            if (m->status[s->deps[k]] != WEFT_TASK_COMPLETED) iv_push(bp, s->deps[k]);
        for (int j = 0; j < s->nacc; j++) {
            int d = s->acc_data[j];
            const ivec *src = &writers[d];
            if (s->acc_mode[j] == M_C) {
                if (!group_open[d]) {
                    iv_copy(&pre[d], &writers[d]);
                    writers[d].n = 0;
                    group_open[d] = 1;
                }
                src = &pre[d];
            }
            if (s->acc_mode[j] != M_W)
                for (int k = 0; k < src->n; k++)
                    if (m->status[src->v[k]] != WEFT_TASK_COMPLETED) iv_push(bp, src->v[k]);
        }
        if (bp->n > 0) {
            m->status[i] = WEFT_TASK_CANCELLED;
            m->cancelled++;
        } else {
            uint64_t *cell[MAX_ACC];
            for (int j = 0; j < s->nacc; j++) cell[j] = &m->cells[s->acc_data[j]];
            apply(s, i, cell);
            m->status[i] = s->fail_code ? WEFT_TASK_FAILED : WEFT_TASK_COMPLETED;
            if (s->fail_code) m->failed++;
        }
        for (int j = 0; j < s->nacc; j++) {
            int d = s->acc_data[j];
            switch (s->acc_mode[j]) {
            case M_R: group_open[d] = 0; break;
            case M_W:
            case M_RW:
                group_open[d] = 0;
                writers[d].n = 0;
                iv_push(&writers[d], i);
                break;
            case M_C: iv_push(&writers[d], i); break;
            }
        }
    }
    for (int d = 0; d < NDATA; d++) {
        free(writers[d].v);
        free(pre[d].v);
    }
}

/* ---- generating a program ----------------------------------------------------------- */

static void gen_program(test_rng *rng, spec *specs, int n, unsigned fail_permille) {
    unsigned last_mode[NDATA] = {0};
    for (int i = 0; i < n; i++) {
        spec *s = &specs[i];
        memset(s, 0, sizeof *s);
        /* Some tasks only overwrite one datum (W, no dependencies): they make
         * it valid again after a failure, so failures stay local. */
        if (rng_below(rng, 100) < 8) {
            s->nacc = 1;
            s->acc_data[0] = (int)rng_below(rng, NDATA);
            s->acc_mode[0] = M_W;
            last_mode[s->acc_data[0]] = M_W;
            s->keep_handle = 1;
            continue;
        }
        /* explicit deps: mostly recent tasks, sometimes any earlier one */
        if (i > 0) {
            int nd = (int)rng_below(rng, 100);
            nd = nd < 70 ? 0 : nd < 90 ? 1 : nd < 97 ? 2 : 3;
            for (int k = 0; k < nd; k++) {
                int dep;
                if (rng_below(rng, 4) == 0) dep = (int)rng_below(rng, (uint32_t)i);
                else dep = i - 1 - (int)rng_below(rng, (uint32_t)(i < 32 ? i : 32));
                /* only tasks whose handle is kept can be named */
                int dup = !specs[dep].keep_handle;
                for (int q = 0; q < s->ndeps; q++) dup |= s->deps[q] == dep;
                if (!dup) s->deps[s->ndeps++] = dep;
            }
        }
        int na = (int)rng_below(rng, 100);
        na = na < 15 ? 0 : na < 55 ? 1 : na < 85 ? 2 : 3;
        for (int j = 0; j < na; j++) {
            int d = (int)rng_below(rng, NDATA);
            int dup = 0;
            for (int q = 0; q < s->nacc; q++) dup |= s->acc_data[q] == d;
            if (dup) continue;
            unsigned mode;
            uint32_t p = rng_below(rng, 100);
            if (last_mode[d] == M_C && p < 60) mode = M_C; /* grow groups */
            else if (p < 35) mode = M_R;
            else if (p < 55) mode = M_W;
            else if (p < 78) mode = M_RW;
            else mode = M_C;
            last_mode[d] = mode;
            s->acc_data[s->nacc] = d;
            s->acc_mode[s->nacc] = mode;
            s->nacc++;
        }
        if (rng_below(rng, 1000) < fail_permille) s->fail_code = 1 + (int)rng_below(rng, 1000);
        s->keep_handle = rng_below(rng, 10) != 0;
        s->spin = rng_below(rng, 10) == 0 ? (int)rng_below(rng, 3000) : 0;
    }
}

/* ---- one run ------------------------------------------------------------------------- */

typedef struct actual {
    weft_task_info *info;
    weft_task **handles;
} actual;

/* Is `cause` an acceptable root for cancelled task i? */
static int cause_ok(const spec *specs, const model *m, const actual *a, int i, uint64_t cause,
                    int depth) {
    if (depth > 100000) return 0;
    const ivec *bp = &m->bad_preds[i];
    for (int k = 0; k < bp->n; k++) {
        int p = bp->v[k];
        if (m->status[p] == WEFT_TASK_FAILED) {
            if (cause == (uint64_t)p + 1) return 1;
        } else if (specs[p].keep_handle) {
            if (a->info[p].cause_id == cause) return 1;
        } else if (cause_ok(specs, m, a, p, cause, depth + 1)) {
            return 1;
        }
    }
    return 0;
}

static void one_run(unsigned seed, unsigned workers, int n) {
    test_rng rng = {seed * 0x51ED27ull + workers};
    unsigned fail_permille = (unsigned[]){0, 1, 3, 6, 15}[seed % 5];
    spec *specs = calloc((size_t)n, sizeof *specs);
    CHECK(specs);
    gen_program(&rng, specs, n, fail_permille);

    model m;
    m.status = calloc((size_t)n, sizeof *m.status);
    m.bad_preds = calloc((size_t)n, sizeof *m.bad_preds);
    CHECK(m.status && m.bad_preds);
    run_model(specs, n, &m);

    long live0 = weft__alloc_live();
    run_state *r = calloc(1, sizeof *r);
    CHECK(r);
    r->n = n;
    r->specs = specs;
    r->recs = calloc((size_t)n, sizeof *r->recs);
    CHECK(r->recs);

    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.trace_path = NULL;
    if (seed % 4 == 3) cfg.max_inflight = 4 + rng_below(&rng, 64); /* spawn must block */
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    weft_data *dh[NDATA];
    for (int d = 0; d < NDATA; d++) CHECK_OK(weft_data_register(rt, &r->cells[d], 8, &dh[d]));

    actual a;
    a.info = calloc((size_t)n, sizeof *a.info);
    a.handles = calloc((size_t)n, sizeof *a.handles);
    CHECK(a.info && a.handles);
    for (int i = 0; i < n; i++) {
        const spec *s = &specs[i];
        weft_task *deps[MAX_DEPS];
        int nd = 0;
        for (int k = 0; k < s->ndeps; k++) {
            CHECK(specs[s->deps[k]].keep_handle);
            deps[nd++] = a.handles[s->deps[k]];
        }
        weft_access acc[MAX_ACC];
        for (int j = 0; j < s->nacc; j++) {
            acc[j].data = dh[s->acc_data[j]];
            acc[j].mode = s->acc_mode[j];
        }
        r->recs[i].run = r;
        r->recs[i].idx = i;
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = stress_body;
        desc.arg = &r->recs[i];
        desc.arg_destroy = rec_destroy;
        desc.deps = deps;
        desc.ndeps = (size_t)nd;
        desc.accesses = acc;
        desc.naccesses = (size_t)s->nacc;
        desc.priority = (int)rng_below(&rng, 3) - 1;
        char name[16];
        snprintf(name, sizeof name, "t%d", i + 1);
        desc.name = name;
        CHECK_OK(weft_spawn(rt, &desc, s->keep_handle ? &a.handles[i] : NULL));
    }
    int rc = weft_wait_all(rt);

    /* Compare. */
    int mismatches = 0;
    CHECKF(atomic_load(&r->bad_ptr) == 0, "seed %u workers %u: weft_ctx_data gave a wrong pointer",
           seed, workers);
    CHECKF(atomic_load(&r->violations) == 0,
           "seed %u workers %u: %d exclusive accesses overlapped another access", seed, workers,
           atomic_load(&r->violations));
    CHECKF(rc == (m.failed ? WEFT_ETASKFAILED : 0), "seed %u workers %u: wait_all %d, model has %d failures",
           seed, workers, rc, m.failed);
    for (int i = 0; i < n; i++) {
        const spec *s = &specs[i];
        int ran = atomic_load(&r->recs[i].ran);
        int want_ran = m.status[i] != WEFT_TASK_CANCELLED;
        if (ran != want_ran || atomic_load(&r->recs[i].destroyed) != 1) {
            if (mismatches++ < 10)
                fprintf(stderr, "seed %u workers %u: task %d ran %d times (want %d), arg_destroy %d times\n",
                        seed, workers, i + 1, ran, want_ran, atomic_load(&r->recs[i].destroyed));
        }
        if (!s->keep_handle) continue;
        CHECK_OK(weft_task_info_get(a.handles[i], &a.info[i]));
        const weft_task_info *in = &a.info[i];
        if (in->id != (uint64_t)i + 1 || in->status != m.status[i]) {
            if (mismatches++ < 10)
                fprintf(stderr, "seed %u workers %u: task %d: id %" PRIu64 ", status %d, model says %d\n",
                        seed, workers, i + 1, in->id, (int)in->status, (int)m.status[i]);
        } else if (in->status == WEFT_TASK_FAILED && in->result != s->fail_code) {
            if (mismatches++ < 10)
                fprintf(stderr, "seed %u workers %u: task %d result %d, body returned %d\n", seed,
                        workers, i + 1, in->result, s->fail_code);
        }
        char want_name[32];
        snprintf(want_name, sizeof want_name, "t%d", i + 1);
        if (strcmp(in->name, want_name) != 0 && mismatches++ < 10)
            fprintf(stderr, "seed %u: task %d named \"%s\"\n", seed, i + 1, in->name);
    }
    CHECKF(mismatches == 0, "seed %u workers %u: %d task mismatches (see above)", seed, workers,
           mismatches);
    /* Causes, now that all infos are known. */
    for (int i = 0; i < n; i++) {
        if (!specs[i].keep_handle || m.status[i] != WEFT_TASK_CANCELLED) continue;
        const weft_task_info *in = &a.info[i];
        int ok = in->cause_id >= 1 && in->cause_id <= (uint64_t)n &&
                 m.status[in->cause_id - 1] == WEFT_TASK_FAILED &&
                 cause_ok(specs, &m, &a, i, in->cause_id, 0);
        if (ok) {
            char want_name[32];
            snprintf(want_name, sizeof want_name, "t%" PRIu64, in->cause_id);
            ok = strcmp(in->cause_name, want_name) == 0;
        }
        if (!ok && mismatches++ < 10) {
            fprintf(stderr, "seed %u workers %u: task %d cancelled with cause %" PRIu64
                    " (\"%s\"); cancelling predecessors:", seed, workers, i + 1, in->cause_id,
                    in->cause_name);
            for (int k = 0; k < m.bad_preds[i].n; k++) fprintf(stderr, " %d", m.bad_preds[i].v[k] + 1);
            fprintf(stderr, "\n");
        }
    }
    CHECKF(mismatches == 0, "seed %u workers %u: %d wrong causes", seed, workers, mismatches);
    for (int d = 0; d < NDATA; d++)
        CHECKF(r->cells[d] == m.cells[d], "seed %u workers %u: data %d is %016" PRIx64
               ", the sequential model gives %016" PRIx64, seed, workers, d, r->cells[d], m.cells[d]);

    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECKF(st.tasks_spawned == (uint64_t)n && st.tasks_failed == (uint64_t)m.failed &&
               st.tasks_cancelled == (uint64_t)m.cancelled &&
               st.tasks_run == (uint64_t)(n - m.cancelled) && st.inflight == 0,
           "seed %u: stats spawned %" PRIu64 " run %" PRIu64 " failed %" PRIu64 " cancelled %" PRIu64
           " inflight %" PRIu64 "; want %d %d %d %d 0", seed, st.tasks_spawned, st.tasks_run,
           st.tasks_failed, st.tasks_cancelled, st.inflight, n, n - m.cancelled, m.failed,
           m.cancelled);
    if (cfg.max_inflight)
        CHECKF(st.inflight_peak <= cfg.max_inflight + workers + 1,
               "seed %u: inflight_peak %" PRIu64 " with max_inflight %zu", seed, st.inflight_peak,
               cfg.max_inflight);

    if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "seed %u workers %u: %d tasks, %d failed, %d cancelled, %" PRIu64
                " steals, max_inflight %zu\n", seed, workers, n, m.failed, m.cancelled, st.steals,
                cfg.max_inflight);
    for (int i = 0; i < n; i++) weft_task_release(a.handles[i]);
    for (int d = 0; d < NDATA; d++) CHECK_OK(weft_data_unregister(dh[d]));
    CHECK_OK(weft_runtime_destroy(rt));
    long live1 = weft__alloc_live();
    CHECKF(live1 == live0, "seed %u workers %u: alloc_live %ld after destroy, %ld before create",
           seed, workers, live1, live0);

    for (int i = 0; i < n; i++) free(m.bad_preds[i].v);
    free(m.bad_preds);
    free(m.status);
    free(a.info);
    free(a.handles);
    free(r->recs);
    free(r);
    free(specs);
}

int main(int argc, char **argv) {
    int seeds = test_pick(100, 30);
    int n = test_pick(5000, 2000);
    if (argc > 1) seeds = atoi(argv[1]);
    if (argc > 2) n = atoi(argv[2]);
    unsigned per_run = test_small() ? 60 : 20;
    const unsigned workers[] = {1, 2, 4};
    uint64_t t0 = now_ns();
    for (int s = 0; s < seeds; s++)
        for (int w = 0; w < 3; w++) {
            alarm(0);
            test_watchdog(per_run);
            one_run((unsigned)s, workers[w], n);
        }
    alarm(0);
    printf("test_stress: ok (%d seeds x 3 worker counts x %d tasks, %.1f s)\n", seeds, n,
           (double)(now_ns() - t0) / 1e9);
    return 0;
}
