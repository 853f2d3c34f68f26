/*
 * callback_chain.c — StarPU's callback idiom, in Weft: a task's completion
 * callback submits the next task.
 *
 * CHAINS chains of LINKS tasks each update one vector of N doubles, x[i] =
 * 2 x[i] + 1, alternating between the CPU and two virtual GPUs (the GPU
 * variant queues its kernel on the task's stream, as a CUDA codelet with
 * STARPU_CUDA_ASYNC would).  Nobody spawns the links up front: each task's
 * on_finish (StarPU's callback_func), with its own finish_arg (StarPU's
 * callback_arg), spawns the next link of its chain — from a worker, or from
 * a virtual GPU's thread when the task ran there — while max_inflight keeps
 * the runtime's backlog small: a spawn from a callback never waits for room
 * (the task finishing makes it), so the chain never stalls.  The program's
 * own thread only waits for the last links.
 *
 * Usage: weft-callback-chain.  Checks each vector against the sequential
 * recurrence ("equal to the sequential computation", or "DIFFERS" and exit
 * status 1).
 */
#include "weft.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#define CHAINS 4
#define LINKS 200
#define N 1024

typedef struct chain {
    weft_runtime *rt;
    weft_data *x;           /* the chain's vector */
    int next;               /* the link its next callback spawns */
    _Atomic int failures;   /* spawns refused from a callback */
    atomic_bool done;       /* its last link finished */
} chain;

static void scale(double *x) {
    for (int i = 0; i < N; i++) x[i] = 2 * x[i] + 1;
}

/* The GPU variant's kernel, run on the task's stream. */
static int scale_kernel(void *arg) {
    scale(arg);
    return 0;
}

/* The CPU variant: its data is the host's copy.  (weft_ctx_data: where the
 * body runs.) */
static int cpu_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    scale(weft_ctx_data(ctx, 0));
    return 0;
}

/* The GPU variant: the replica on its GPU, updated on its stream. */
static int gpu_body(weft_ctx *ctx, void *arg) {
    (void)arg;
    return weft_ctx_queue(ctx, 0, scale_kernel, weft_ctx_data(ctx, 0), 0);
}

static int spawn_link(chain *c);

/* on_finish: spawn the chain's next link (StarPU's callback submitting the
 * next task). */
static void link_finished(void *arg, int status) {
    chain *c = arg;
    if (status != 0 || c->next == LINKS) {
        atomic_store(&c->done, true);
        return;
    }
    if (spawn_link(c) != 0) {
        atomic_fetch_add(&c->failures, 1);
        atomic_store(&c->done, true);
    }
}

static int spawn_link(chain *c) {
    int k = c->next++;
    weft_placement alt[3];
    const char *where[3] = {"cpu", "gpu:0", "gpu:1"};
    weft_body_fn body[3] = {cpu_body, gpu_body, gpu_body};
    for (int i = 0; i < 3; i++) {
        if (weft_placement_parse(where[(k + i) % 3], &alt[i]) != 0) return -1;
        alt[i].body = body[(k + i) % 3];
        alt[i].share = 0.25;
    }
    weft_access a = {c->x, WEFT_RW};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.accesses = &a;
    d.naccesses = 1;
    d.placements = alt; /* every alternative has its body: desc.body may be NULL */
    d.nplacements = 3;
    d.on_finish = link_finished;
    d.finish_arg = c;
    d.name = "link";
    return weft_spawn(c->rt, &d, NULL);
}

int main(void) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = "cpu,vgpu:2";
    cfg.max_inflight = 4; /* a small backlog: the callbacks spawn all the same */
    weft_runtime *rt;
    if (weft_runtime_create(&cfg, &rt) != 0) {
        fprintf(stderr, "weft_runtime_create: %s\n", weft_last_error());
        return 1;
    }
    static double x[CHAINS][N];
    static chain c[CHAINS];
    for (int k = 0; k < CHAINS; k++) {
        for (int i = 0; i < N; i++) x[k][i] = (double)(i % 7) - 3 + k;
        c[k].rt = rt;
        c[k].next = 0;
        if (weft_data_register(rt, x[k], sizeof x[k], &c[k].x) != 0 || spawn_link(&c[k]) != 0) {
            fprintf(stderr, "chain %d: %s\n", k, weft_last_error());
            return 1;
        }
    }
    /* The last links are spawned by callbacks: wait until every chain has
     * spawned its last, then for the tasks. */
    for (int k = 0; k < CHAINS; k++)
        while (!atomic_load(&c[k].done))
            if (weft_wait_all_timed(rt, 1000000) == WEFT_ETASKFAILED) {
                fprintf(stderr, "a link failed\n");
                return 1;
            }
    int rc = weft_wait_all(rt);
    for (int k = 0; k < CHAINS && rc == 0; k++)
        rc = weft_data_unregister(c[k].x);
    weft_runtime_destroy(rt);
    int bad = rc != 0;
    for (int k = 0; k < CHAINS; k++) {
        bad |= c[k].next != LINKS || atomic_load(&c[k].failures) != 0;
        for (int i = 0; i < N; i++) {
            double want = (double)(i % 7) - 3 + k;
            for (int l = 0; l < LINKS && !bad; l++) want = 2 * want + 1;
            if (x[k][i] != want) {
                bad = 1;
                break;
            }
        }
    }
    printf("%d chains of %d links spawned from callbacks (CPU and 2 virtual GPUs): %s\n", CHAINS, LINKS,
           bad ? "DIFFERS from the sequential computation" : "equal to the sequential computation");
    return bad;
}
