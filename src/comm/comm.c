/*
 * comm/comm.c — what every communication engine shares (comm/comm.h): the
 * registry of engines by kind, a communicator's life (open; drain and
 * close), its operations' count and numbers, the launch lock, and the api
 * layer's services to the engines (the host a communicator was opened
 * with), so that the engines call nothing above comm/.
 */
#include "comm/comm.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The registry                                                              */
/* ------------------------------------------------------------------------ */

/* Every engine built in, one per kind of communicator (an absent one says
 * why it serves none). */
static const weft__comm_engine *const engines[] = {&weft__vcomm_engine, &weft__nccl_engine, &weft__mpi_engine};

const weft__comm_engine *weft__comm_engine_find(const char *kind, char *why, size_t len)
{
    for (size_t i = 0; i < sizeof engines / sizeof engines[0]; i++) {
        const weft__comm_engine *e = engines[i];
        if (strcmp(e->kind, kind) != 0)
            continue;
        if (e->absent) {
            snprintf(why, len, "%s", e->absent);
            return NULL;
        }
        return e;
    }
    snprintf(why, len, "no communicator for %s devices", kind);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* A communicator's life                                                     */
/* ------------------------------------------------------------------------ */

int weft__comm_open(weft__comm *c, const weft__comm_engine *e, const weft__comm_host *host, const void *group,
                    char *why, size_t len)
{
    c->engine = e;
    c->host = host;
    c->inflight = 0;
    c->next_seq = 0;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->idle, NULL);
    int rc = e->open(c, group, why, len);
    if (rc) {
        pthread_mutex_destroy(&c->lock);
        pthread_cond_destroy(&c->idle);
    }
    return rc;
}

void weft__comm_drain(weft__comm *c)
{
    pthread_mutex_lock(&c->lock);
    while (c->inflight)
        pthread_cond_wait(&c->idle, &c->lock);
    pthread_mutex_unlock(&c->lock);
}

void weft__comm_close(weft__comm *c)
{
    c->engine->close(c);
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->idle);
}

bool weft__comm_progresses(const weft__comm *c) { return c->engine->progress != NULL; }

int weft__comm_progress(weft__comm *c) { return c->engine->progress(c); }

int weft__comm_gather_counts(weft__comm *c, unsigned mine, unsigned *all)
{
    return c->engine->gather_counts ? c->engine->gather_counts(c, mine, all) : WEFT_EINVAL;
}

/* ------------------------------------------------------------------------ */
/* Operations                                                                */
/* ------------------------------------------------------------------------ */

uint64_t weft__comm_op_begin(weft__comm *c)
{
    pthread_mutex_lock(&c->lock);
    c->inflight++;
    uint64_t seq = c->next_seq++;
    pthread_mutex_unlock(&c->lock);
    return seq;
}

void weft__comm_op_end(weft__comm *c, uint64_t seq, bool posted)
{
    if (!posted && c->engine->skip) /* its number is given up: later ones go on */
        c->engine->skip(c, seq);
    pthread_mutex_lock(&c->lock);
    if (--c->inflight == 0)
        pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->lock);
}

int weft__comm_run(weft__comm *c, const weft_ctx *ctx, const weft__coll_run *r, const bool *part, void **state)
{
    *state = NULL;
    return c->engine->post(c, ctx, r, part, state);
}

void weft__comm_finish(weft__comm *c, void *state)
{
    if (state && c->engine->finish)
        c->engine->finish(c, state);
}

/* ------------------------------------------------------------------------ */
/* The launch lock                                                           */
/* ------------------------------------------------------------------------ */

/* Orders the queueing of every operation's parts, process-wide: two
 * operations sharing streams are queued on all of them in one order.
 * Nothing else is taken under it but the device queues' own locks. */
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

void weft__comm_launch_lock(void) { pthread_mutex_lock(&launch_lock); }
void weft__comm_launch_unlock(void) { pthread_mutex_unlock(&launch_lock); }

/* ------------------------------------------------------------------------ */
/* The host's services, for the engines                                     */
/* ------------------------------------------------------------------------ */

int weft__comm_queue(const weft__comm *c, const weft_ctx *ctx, unsigned i, int (*fn)(void *arg), void *arg,
                     uint64_t model_ns, const weft_range *ranges, size_t n)
{
    return c->host->queue(ctx, i, fn, arg, model_ns, ranges, n);
}

void *weft__comm_stream(const weft__comm *c, const weft_ctx *ctx, unsigned i) { return c->host->stream(ctx, i); }

void *weft__comm_work_begin(const weft__comm *c, const weft_ctx *ctx) { return c->host->work_begin(ctx); }

void weft__comm_work_done(const weft__comm *c, void *cookie, int status) { c->host->work_done(cookie, status); }

void weft__comm_trace(const weft__comm *c, const char *name, uint64_t t0, size_t bytes)
{
    c->host->trace(c->rt, name, t0, bytes);
}
