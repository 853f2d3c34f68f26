/* sys_bsp.c — the two runtime-free peers.
 *
 *   bsp   bulk-synchronous pthreads: thread k owns columns i with i % W == k;
 *         each step every thread runs its points of that step (all graphs),
 *         then one pthread_barrier_wait.  What an MPI code does on one node.
 *   spin  the same with a sense-reversing spinning barrier: no system call,
 *         nothing but the cache-line hand-off between cores, so its METG is
 *         the floor of the machine for a graph that needs a barrier per step.
 *
 * The main thread is thread 0 (as rank 0 is), so there is exactly one thread
 * per worker.  Between executions the other threads sleep on a condition
 * variable, so they never compete with another system or with the baseline.
 * A barrier per step orders every pattern whose dependencies all point to
 * step t-1, so a dropped dependency is invisible to these two. */
#include "wb.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct spin_barrier {
    _Alignas(64) _Atomic unsigned count;
    _Alignas(64) _Atomic unsigned sense;
    unsigned n;
} spin_barrier;

typedef struct bstate bstate;
typedef struct bthread {
    bstate *S;
    unsigned id;
    pthread_t th;
} bthread;

struct bstate {
    wb_run *run;
    unsigned W;
    int spin;
    bthread *th;
    pthread_barrier_t bar;
    spin_barrier sb;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;  /* execution number, under mu */
    int quit;      /* under mu */
};

static void spin_barrier_wait(spin_barrier *b, unsigned *local_sense)
{
    unsigned s = *local_sense = !*local_sense;
    if (atomic_fetch_sub_explicit(&b->count, 1, memory_order_acq_rel) == 1) {
        atomic_store_explicit(&b->count, b->n, memory_order_relaxed);
        atomic_store_explicit(&b->sense, s, memory_order_release);
    } else {
        while (atomic_load_explicit(&b->sense, memory_order_acquire) != s) wb_cpu_relax();
    }
}

static void do_steps(bstate *S, unsigned k, unsigned *sense)
{
    wb_run *R = S->run;
    const wb_graph *G = &R->graph;
    for (int t = 0; t < G->shape.steps; t++) {
        for (uint32_t g = 0; g < R->ngraphs; g++)
            for (uint32_t p = G->step_start[t]; p < G->step_start[t + 1]; p++)
                if ((unsigned)G->point_i[p] % S->W == k) wb_point(R, g, p, k);
        if (S->spin)
            spin_barrier_wait(&S->sb, sense);
        else
            pthread_barrier_wait(&S->bar);
    }
}

static void *thread_main(void *arg)
{
    bthread *B = arg;
    bstate *S = B->S;
    uint64_t seen = 0;
    unsigned sense = 0;
    for (;;) {
        pthread_mutex_lock(&S->mu);
        while (S->gen == seen && !S->quit) pthread_cond_wait(&S->cv, &S->mu);
        if (S->quit) {
            pthread_mutex_unlock(&S->mu);
            return NULL;
        }
        seen = S->gen;
        pthread_mutex_unlock(&S->mu);
        do_steps(S, B->id, &sense);
    }
}

static const char *bsp_missing(void)
{
    return NULL;
}

static void bsp_fini(void *state);

static int init_common(wb_run *r, void **state, char *err, size_t errn, int spin)
{
    bstate *S = calloc(1, sizeof *S);
    if (!S) {
        snprintf(err, errn, "out of memory");
        return -1;
    }
    S->run = r;
    S->W = r->workers;
    S->spin = spin;
    S->th = calloc(S->W, sizeof *S->th);
    if (!S->th) {
        free(S);
        snprintf(err, errn, "out of memory");
        return -1;
    }
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->cv, NULL);
    pthread_barrier_init(&S->bar, NULL, S->W);
    atomic_store(&S->sb.count, S->W);
    atomic_store(&S->sb.sense, 0);
    S->sb.n = S->W;
    for (unsigned k = 1; k < S->W; k++) {
        S->th[k].S = S;
        S->th[k].id = k;
        if (pthread_create(&S->th[k].th, NULL, thread_main, &S->th[k]) != 0) {
            S->W = k; /* join the ones that started */
            bsp_fini(S);
            snprintf(err, errn, "pthread_create failed");
            return -1;
        }
    }
    *state = S;
    return 0;
}

static int init_bsp(wb_run *r, void **state, char *err, size_t errn)
{
    return init_common(r, state, err, errn, 0);
}

static int init_spin(wb_run *r, void **state, char *err, size_t errn)
{
    return init_common(r, state, err, errn, 1);
}

static unsigned main_sense; /* thread 0's barrier sense; one bsp/spin state at a time */

static int bsp_exec(void *state, wb_run *r, char *err, size_t errn)
{
    (void)r;
    (void)err;
    (void)errn;
    bstate *S = state;
    pthread_mutex_lock(&S->mu);
    S->gen++;
    pthread_cond_broadcast(&S->cv);
    pthread_mutex_unlock(&S->mu);
    do_steps(S, 0, &main_sense);
    /* The last step's barrier has been passed by everyone: all points ran. */
    return 0;
}

static void bsp_fini(void *state)
{
    bstate *S = state;
    if (!S) return;
    pthread_mutex_lock(&S->mu);
    S->quit = 1;
    pthread_cond_broadcast(&S->cv);
    pthread_mutex_unlock(&S->mu);
    for (unsigned k = 1; k < S->W; k++) pthread_join(S->th[k].th, NULL);
    pthread_barrier_destroy(&S->bar);
    pthread_cond_destroy(&S->cv);
    pthread_mutex_destroy(&S->mu);
    free(S->th);
    free(S);
    main_sense = 0;
}

const wb_system wb_sys_bsp = {
    .name = "bsp",
    .what = "bulk-synchronous pthreads, owner computes, one pthread_barrier per step",
    .missing = bsp_missing,
    .init = init_bsp,
    .exec = bsp_exec,
    .fini = bsp_fini,
    .edge_ordered = 0,
};

const wb_system wb_sys_spin = {
    .name = "spin",
    .what = "the same with a spinning sense-reversing barrier (hand-off floor)",
    .missing = bsp_missing,
    .init = init_spin,
    .exec = bsp_exec,
    .fini = bsp_fini,
    .edge_ordered = 0,
};
