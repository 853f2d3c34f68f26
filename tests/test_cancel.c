/* Cancellation racing execution: one thread spawns a random DAG (explicit
 * dependencies) while another cancels random tasks (weft_task_cancel) and now
 * and then everything pending (weft_cancel_pending).  Whatever the timing,
 * afterwards:
 *   - every task either ran exactly once and is COMPLETED, or never ran and is
 *     CANCELLED; arg_destroy ran exactly once;
 *   - a task with a cancelled dependency is cancelled;
 *   - a cancelled task names a root that was cancelled by request, names
 *     itself, and is the task itself or one of its ancestors; if the root is
 *     not the task itself, one of its dependencies was cancelled with the
 *     same root; if it is the task itself, a cancel request could have hit it;
 *   - no failures: weft_wait_all returns 0; stats add up. */
#include <pthread.h>

#include "check.h"

#define MAXD 3

typedef struct node {
    int ndeps;
    int deps[MAXD];
    atomic_int ran, destroyed;
    atomic_int cancel_requested; /* weft_task_cancel was called on it */
} node;

typedef struct run {
    int n;
    node *nodes;
    weft_task **handles;
    atomic_int spawned;        /* handles[0 .. spawned-1] are valid */
    atomic_int pending_before; /* cancel_pending was called after this many spawns */
    atomic_int stop;
    weft_runtime *rt;
    unsigned seed;
} run;

static int body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    node *nd = arg;
    atomic_fetch_add(&nd->ran, 1);
    for (volatile int k = 0; k < 3000; k++) {
    }
    return 0;
}

static void destroy_arg(void *arg) {
    node *nd = arg;
    atomic_fetch_add(&nd->destroyed, 1);
}

static void *canceller(void *p) {
    run *r = p;
    test_rng rng = {r->seed * 77u + 5u};
    while (!atomic_load(&r->stop)) {
        int s = atomic_load(&r->spawned);
        if (s == 0) continue;
        uint32_t what = rng_below(&rng, 1000);
        if (what < 2) {
            if (weft_cancel_pending(r->rt) != 0) abort();
            /* The call may have cancelled any task whose spawn had begun
             * before it returned: indexes up to the count read now (the
             * spawner stores i before it starts spawning task i). */
            int before = atomic_load(&r->spawned) + 1;
            int cur = atomic_load(&r->pending_before);
            while (cur < before && !atomic_compare_exchange_weak(&r->pending_before, &cur, before)) {
            }
        } else {
            int i = (int)rng_below(&rng, (uint32_t)s);
            atomic_store(&r->nodes[i].cancel_requested, 1);
            if (weft_task_cancel(r->handles[i]) != 0) abort();
        }
        for (volatile int k = 0; k < 200; k++) {
        }
    }
    return NULL;
}

static int is_ancestor(const run *r, int anc, int i, char *seen) {
    if (anc == i) return 1;
    if (seen[i]) return 0;
    seen[i] = 1;
    for (int k = 0; k < r->nodes[i].ndeps; k++)
        if (is_ancestor(r, anc, r->nodes[i].deps[k], seen)) return 1;
    return 0;
}

static void one_run(unsigned seed, unsigned workers, int n) {
    run r;
    memset(&r, 0, sizeof r);
    r.n = n;
    r.seed = seed;
    r.nodes = calloc((size_t)n, sizeof *r.nodes);
    r.handles = calloc((size_t)n, sizeof *r.handles);
    CHECK(r.nodes && r.handles);
    test_rng rng = {seed};
    for (int i = 0; i < n; i++) {
        node *nd = &r.nodes[i];
        int want = i == 0 ? 0 : (int)rng_below(&rng, MAXD + 1);
        for (int k = 0; k < want; k++) {
            int d = i - 1 - (int)rng_below(&rng, (uint32_t)(i < 16 ? i : 16));
            int dup = 0;
            for (int q = 0; q < nd->ndeps; q++) dup |= nd->deps[q] == d;
            if (!dup) nd->deps[nd->ndeps++] = d;
        }
    }
    r.rt = make_rt(workers);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, canceller, &r) == 0);
    for (int i = 0; i < n; i++) {
        node *nd = &r.nodes[i];
        weft_task *deps[MAXD];
        for (int k = 0; k < nd->ndeps; k++) deps[k] = r.handles[nd->deps[k]];
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = body;
        d.arg = nd;
        d.arg_destroy = destroy_arg;
        d.deps = deps;
        d.ndeps = (size_t)nd->ndeps;
        CHECK_OK(weft_spawn(r.rt, &d, &r.handles[i]));
        atomic_store(&r.spawned, i + 1);
    }
    int rc = weft_wait_all(r.rt);
    atomic_store(&r.stop, 1);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK_OK(weft_wait_all(r.rt)); /* cancels after the first wait_all */
    CHECK_OK(rc);

    weft_task_info *info = calloc((size_t)n, sizeof *info);
    char *seen = calloc((size_t)n, 1);
    CHECK(info && seen);
    int cancelled = 0;
    for (int i = 0; i < n; i++) CHECK_OK(weft_task_info_get(r.handles[i], &info[i]));
    for (int i = 0; i < n; i++) {
        node *nd = &r.nodes[i];
        weft_task_info *in = &info[i];
        int ran = atomic_load(&nd->ran);
        CHECKF(atomic_load(&nd->destroyed) == 1, "seed %u: task %d: arg_destroy %d times", seed,
               i + 1, atomic_load(&nd->destroyed));
        CHECKF((in->status == WEFT_TASK_COMPLETED && ran == 1) ||
                   (in->status == WEFT_TASK_CANCELLED && ran == 0),
               "seed %u workers %u: task %d status %d but its body ran %d times", seed, workers,
               i + 1, (int)in->status, ran);
        int dep_cancelled = 0, same_cause = 0;
        for (int k = 0; k < nd->ndeps; k++) {
            const weft_task_info *di = &info[nd->deps[k]];
            if (di->status == WEFT_TASK_CANCELLED) {
                dep_cancelled = 1;
                if (di->cause_id == in->cause_id) same_cause = 1;
            }
        }
        if (dep_cancelled)
            CHECKF(in->status == WEFT_TASK_CANCELLED,
                   "seed %u workers %u: task %d ran although a dependency was cancelled", seed,
                   workers, i + 1);
        if (in->status != WEFT_TASK_CANCELLED) continue;
        cancelled++;
        uint64_t c = in->cause_id;
        CHECKF(c >= 1 && c <= (uint64_t)n, "seed %u: task %d: cause_id %" PRIu64, seed, i + 1, c);
        const weft_task_info *root = &info[c - 1];
        CHECKF(root->status == WEFT_TASK_CANCELLED && root->cause_id == c,
               "seed %u workers %u: task %d names root %" PRIu64
               ", which is not a task cancelled by request (status %d, cause %" PRIu64 ")",
               seed, workers, i + 1, c, (int)root->status, root->cause_id);
        char want_name[32];
        snprintf(want_name, sizeof want_name, "%s", root->name);
        CHECK(strcmp(in->cause_name, want_name) == 0);
        memset(seen, 0, (size_t)n);
        CHECKF(is_ancestor(&r, (int)c - 1, i, seen),
               "seed %u workers %u: task %d names root %" PRIu64 ", not one of its ancestors",
               seed, workers, i + 1, c);
        if (c != (uint64_t)i + 1) {
            CHECKF(same_cause, "seed %u workers %u: task %d names root %" PRIu64
                   " but no dependency was cancelled with that root", seed, workers, i + 1, c);
        } else {
            CHECKF(atomic_load(&nd->cancel_requested) || i < atomic_load(&r.pending_before),
                   "seed %u workers %u: task %d cancelled as its own root without a request",
                   seed, workers, i + 1);
        }
    }
    weft_stats st;
    CHECK_OK(weft_runtime_stats(r.rt, &st));
    CHECKF(st.tasks_cancelled == (uint64_t)cancelled && st.tasks_run == (uint64_t)(n - cancelled) &&
               st.tasks_failed == 0,
           "seed %u: stats run %" PRIu64 " cancelled %" PRIu64 ", observed %d cancelled", seed,
           st.tasks_run, st.tasks_cancelled, cancelled);
    if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "seed %u workers %u: %d of %d cancelled\n", seed, workers, cancelled, n);
    for (int i = 0; i < n; i++) weft_task_release(r.handles[i]);
    CHECK_OK(weft_runtime_destroy(r.rt));
    free(info);
    free(seen);
    free(r.nodes);
    free(r.handles);
}

int main(void) {
    int seeds = test_pick(30, 6);
    int n = test_pick(4000, 1000);
    const unsigned workers[] = {1, 2, 4};
    for (int s = 0; s < seeds; s++)
        for (int w = 0; w < 3; w++) {
            alarm(0);
            test_watchdog(test_pick(20, 60));
            one_run((unsigned)s + 1, workers[w], n);
        }
    alarm(0);
    printf("test_cancel: ok\n");
    return 0;
}
