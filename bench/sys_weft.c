/* sys_weft.c — Weft runs the graph with explicit task-handle dependencies.
 *
 * Two ways to feed it, both measured:
 *   weft       the main thread spawns every task itself while the workers run
 *              them (one more runnable thread than cores while it spawns,
 *              then it sleeps in weft_wait_all); ready tasks go round-robin to
 *              the workers' queues.  The faster of the two on this machine
 *              (docs/performance.md), so it is the headline.
 *   weft_root  the graph is spawned from inside one root Weft task (as
 *              OpenMP's parallel+single does): the spawner is a worker, so
 *              nothing is oversubscribed, but that worker runs no task while
 *              it spawns and every ready task lands on its queue, to be stolen.
 *
 * Points are spawned step by step (all graphs of step t, then step t+1); each
 * names the handles of its producers in step t-1 as dependencies.  Handles of
 * step t-1 are released as soon as step t has been spawned, so a run holds at
 * most two steps of handles. */
#include "wb.h"
#include "weft.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wpoint {
    wb_run *run;
    uint32_t g, p;
} wpoint;

typedef struct wstate {
    weft_runtime *rt;
    wb_run *run;
    wpoint *args;      /* [ngraphs * npoints] */
    weft_task **h;     /* [ngraphs * npoints] */
    int from_root;
    int spawn_err;     /* first weft_spawn error of the execution */
    char msg[160];
} wstate;

static int point_body(weft_ctx *ctx, void *arg)
{
    const wpoint *a = arg;
    wb_point(a->run, a->g, a->p, weft_ctx_worker(ctx));
    return 0;
}

static void release_step(wstate *S, int t)
{
    const wb_graph *G = &S->run->graph;
    const uint32_t np = G->npoints;
    for (uint32_t g = 0; g < S->run->ngraphs; g++)
        for (uint32_t p = G->step_start[t]; p < G->step_start[t + 1]; p++) {
            weft_task_release(S->h[(size_t)g * np + p]);
            S->h[(size_t)g * np + p] = NULL;
        }
}

/* Spawn the whole graph; returns 0 or a WEFT_E code. */
static int spawn_all(wstate *S, weft_runtime *rt)
{
    const wb_run *R = S->run;
    const wb_graph *G = &R->graph;
    const uint32_t np = G->npoints;
    weft_task *dh[64];
    weft_task **dhp = G->maxdeps <= 64 ? dh : malloc(sizeof(weft_task *) * G->maxdeps);
    if (!dhp) return WEFT_ENOMEM;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = point_body;
    d.deps = dhp;
    int rc = 0;
    for (int t = 0; t < G->shape.steps && rc == 0; t++) {
        for (uint32_t g = 0; g < R->ngraphs && rc == 0; g++) {
            weft_task **hg = S->h + (size_t)g * np;
            for (uint32_t p = G->step_start[t]; p < G->step_start[t + 1]; p++) {
                uint32_t b = G->dep_start[p], e = G->dep_start[p + 1];
                for (uint32_t k = b; k < e; k++) dhp[k - b] = hg[G->deps[k]];
                d.ndeps = e - b;
                d.arg = &S->args[(size_t)g * np + p];
                rc = weft_spawn(rt, &d, &hg[p]);
                if (rc != 0) {
                    snprintf(S->msg, sizeof S->msg, "weft_spawn: %s (%s)", weft_strerror(rc),
                             weft_last_error());
                    break;
                }
            }
        }
        if (t > 0) release_step(S, t - 1);
    }
    /* Release whatever is still held (the last step, or everything spawned
     * before a failure). */
    for (size_t k = 0; k < (size_t)R->ngraphs * np; k++) {
        if (S->h[k]) {
            weft_task_release(S->h[k]);
            S->h[k] = NULL;
        }
    }
    if (dhp != dh) free(dhp);
    return rc;
}

static int root_body(weft_ctx *ctx, void *arg)
{
    wstate *S = arg;
    int rc = spawn_all(S, weft_ctx_runtime(ctx));
    if (rc != 0) S->spawn_err = rc;
    return rc != 0;
}

static const char *weft_missing(void)
{
    return NULL;
}

static int init_common(wb_run *r, void **state, char *err, size_t errn, int from_root)
{
    wstate *S = calloc(1, sizeof *S);
    if (!S) {
        snprintf(err, errn, "out of memory");
        return -1;
    }
    S->run = r;
    S->from_root = from_root;
    size_t n = (size_t)r->ngraphs * r->graph.npoints;
    S->args = malloc(sizeof *S->args * (n ? n : 1));
    S->h = calloc(n ? n : 1, sizeof *S->h);
    if (!S->args || !S->h) {
        free(S->args);
        free(S->h);
        free(S);
        snprintf(err, errn, "out of memory");
        return -1;
    }
    for (uint32_t g = 0; g < r->ngraphs; g++)
        for (uint32_t p = 0; p < r->graph.npoints; p++)
            S->args[(size_t)g * r->graph.npoints + p] = (wpoint){r, g, p};
    weft_config cfg;
    weft_config_init(&cfg); /* defaults plus WEFT_* environment (spin, trace) */
    cfg.workers = r->workers;
    int rc = weft_runtime_create(&cfg, &S->rt);
    if (rc != 0) {
        snprintf(err, errn, "weft_runtime_create: %s (%s)", weft_strerror(rc), weft_last_error());
        free(S->args);
        free(S->h);
        free(S);
        return -1;
    }
    if (weft_runtime_workers(S->rt) != r->workers) {
        snprintf(err, errn, "weft started %u workers, asked for %u", weft_runtime_workers(S->rt),
                 r->workers);
        (void)weft_runtime_destroy(S->rt);
        free(S->args);
        free(S->h);
        free(S);
        return -1;
    }
    *state = S;
    return 0;
}

static int init_root(wb_run *r, void **state, char *err, size_t errn)
{
    return init_common(r, state, err, errn, 1);
}

static int init_main(wb_run *r, void **state, char *err, size_t errn)
{
    return init_common(r, state, err, errn, 0);
}

static int weft_exec(void *state, wb_run *r, char *err, size_t errn)
{
    wstate *S = state;
    (void)r;
    S->spawn_err = 0;
    S->msg[0] = '\0';
    int rc;
    if (S->from_root) {
        weft_task *root = NULL;
        rc = weft_spawn_simple(S->rt, root_body, S, &root);
        if (rc != 0) {
            snprintf(err, errn, "weft_spawn (root): %s (%s)", weft_strerror(rc), weft_last_error());
            return -1;
        }
        weft_task_release(root);
    } else {
        rc = spawn_all(S, S->rt);
        if (rc != 0) S->spawn_err = rc;
    }
    int wrc = weft_wait_all(S->rt);
    if (S->spawn_err) {
        snprintf(err, errn, "%s", S->msg);
        return -1;
    }
    if (wrc != 0) {
        snprintf(err, errn, "weft_wait_all: %s (%s)", weft_strerror(wrc), weft_last_error());
        return -1;
    }
    return 0;
}

static void weft_fini(void *state)
{
    wstate *S = state;
    if (!S) return;
    (void)weft_runtime_destroy(S->rt);
    free(S->args);
    free(S->h);
    free(S);
}

const wb_system wb_sys_weft_root = {
    .name = "weft_root",
    .what = "Weft, graph spawned from a root task, explicit task-handle dependencies",
    .missing = weft_missing,
    .init = init_root,
    .exec = weft_exec,
    .fini = weft_fini,
    .edge_ordered = 1,
};

const wb_system wb_sys_weft = {
    .name = "weft",
    .what = "Weft, graph spawned by the main thread, explicit task-handle dependencies",
    .missing = weft_missing,
    .init = init_main,
    .exec = weft_exec,
    .fini = weft_fini,
    .edge_ordered = 1,
};
