/* stream.c: the memory bandwidth a node's threads reach, as STREAM's
 * triad a[i] = b[i] + s * c[i] measures it.
 *
 * Each thread sets its own slice of the three arrays first, so that on a
 * machine with several memory nodes the pages lie near the thread that
 * streams them; then all meet at a barrier, and every timed pass starts
 * and ends at one. */
#if !defined(_GNU_SOURCE) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include "clover.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

typedef struct triad {
    double *a, *b, *c;
    size_t n;
    int threads, reps;
    double scalar;
    pthread_barrier_t bar;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int go;          /* 0: wait, 1: run, -1: give up (a thread could not start) */
    double best;     /* shortest pass, seconds (thread 0 writes it) */
    int wrong;       /* a result that is not b + s * c */
} triad;

typedef struct worker {
    triad *t;
    int id;
} worker;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void slice(const triad *t, int id, size_t *lo, size_t *hi)
{
    size_t q = t->n / (size_t)t->threads, r = t->n % (size_t)t->threads, i = (size_t)id;
    *lo = i * q + (i < r ? i : r);
    *hi = *lo + q + (i < r ? 1 : 0);
}

static void pass(double *restrict a, const double *restrict b, const double *restrict c, double s, size_t lo,
                 size_t hi)
{
    size_t i;
    for (i = lo; i < hi; i++)
        a[i] = b[i] + s * c[i];
}

static void *run(void *arg)
{
    worker *wk = arg;
    triad *t = wk->t;
    size_t lo, hi, i;
    int rep, go;

    pthread_mutex_lock(&t->lock);
    while (t->go == 0)
        pthread_cond_wait(&t->cond, &t->lock);
    go = t->go;
    pthread_mutex_unlock(&t->lock);
    if (go < 0)
        return NULL;

    slice(t, wk->id, &lo, &hi);
    for (i = lo; i < hi; i++) {
        t->a[i] = 0.0;
        t->b[i] = 1.0;
        t->c[i] = 2.0;
    }
    for (rep = 0; rep < t->reps; rep++) {
        double t0 = 0.0;
        pthread_barrier_wait(&t->bar);
        if (wk->id == 0)
            t0 = now();
        pass(t->a, t->b, t->c, t->scalar, lo, hi);
        pthread_barrier_wait(&t->bar);
        if (wk->id == 0) {
            double dt = now() - t0;
            if (dt < t->best)
                t->best = dt;
        }
    }
    /* check this slice, which also keeps the stores from being dropped */
    for (i = lo; i < hi; i++)
        if (t->a[i] != 1.0 + t->scalar * 2.0) {
            pthread_mutex_lock(&t->lock);
            t->wrong = 1;
            pthread_mutex_unlock(&t->lock);
            break;
        }
    return NULL;
}

double clover_triad_bw(size_t n, int threads, int reps)
{
    triad t;
    worker *wk;
    pthread_t *tid;
    int i, started = 0;
    double bw = -1.0;

    if (n == 0 || n > SIZE_MAX / sizeof(double))
        return -1.0;
    if (threads < 1)
        threads = 1;
    if ((size_t)threads > n)
        threads = (int)n;
    if (reps < 1)
        reps = 1;

    t.n = n;
    t.threads = threads;
    t.reps = reps;
    t.scalar = 3.0;
    t.go = 0;
    t.best = 1e300;
    t.wrong = 0;
    /* not touched here: each thread's first write places its pages */
    t.a = malloc(n * sizeof(double));
    t.b = malloc(n * sizeof(double));
    t.c = malloc(n * sizeof(double));
    wk = malloc((size_t)threads * sizeof *wk);
    tid = malloc((size_t)threads * sizeof *tid);
    if (!t.a || !t.b || !t.c || !wk || !tid)
        goto out;
    if (pthread_barrier_init(&t.bar, NULL, (unsigned)threads) != 0)
        goto out;
    pthread_mutex_init(&t.lock, NULL);
    pthread_cond_init(&t.cond, NULL);

    for (i = 0; i < threads; i++) {
        wk[i].t = &t;
        wk[i].id = i;
        if (pthread_create(&tid[i], NULL, run, &wk[i]) != 0)
            break;
        started++;
    }
    pthread_mutex_lock(&t.lock);
    t.go = started == threads ? 1 : -1;
    pthread_cond_broadcast(&t.cond);
    pthread_mutex_unlock(&t.lock);
    for (i = 0; i < started; i++)
        pthread_join(tid[i], NULL);

    if (t.best <= 0.0)
        t.best = 1e-9; /* below the clock's grain */
    if (started == threads && !t.wrong && t.best < 1e300)
        bw = 3.0 * (double)sizeof(double) * (double)n / t.best;

    pthread_cond_destroy(&t.cond);
    pthread_mutex_destroy(&t.lock);
    pthread_barrier_destroy(&t.bar);
out:
    free(t.a);
    free(t.b);
    free(t.c);
    free(wk);
    free(tid);
    return bw;
}
