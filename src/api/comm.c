/*
 * api/comm.c — the communication functions of weft.h: communicators over a
 * runtime's GPUs, and their operations as tasks.
 *
 * An operation is checked and resolved here (which handle is whose, in
 * what mode, on which of the task's GPUs), then spawned through weft_spawn
 * as a task over exactly the members' GPUs (weft_placement.gpu_set), each
 * buffer an access WEFT_ON_GPU its member's place in that set.  Its body
 * turns the accesses into device pointers (weft_ctx_data) and hands the
 * operation to comm/ (weft__comm_run), whose engine for the communicator's
 * kind queues the members' parts on their streams.  The engines reach the
 * task and the runtime only through this file's host table (comm/comm.h's
 * weft__comm_host), handed to every communicator opened here.
 */
#include "api/runtime.h"
#include "worker.h"
#include "trace.h"
#include "comm/comm.h"
#include "data/reduce.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The host: this layer's services to the engines (comm/comm.h)              */
/* ------------------------------------------------------------------------ */

static void *host_work_begin(const weft_ctx *ctx)
{
    weft__task_op_begin(ctx->task);
    return ctx->task;
}

static void host_trace(weft_runtime *h, const char *name, uint64_t t0, size_t bytes)
{
    weft__rt *rt = weft__handle_decode(h); /* alive: the operation's task is in flight */
    if (rt && rt->trace_path)
        weft__trace_comm(rt, name, t0, weft__now_ns(), bytes);
}

static const weft__comm_host host = {
    .queue = weft_ctx_queue_rw,
    .stream = weft_ctx_stream,
    .work_begin = host_work_begin,
    .work_done = weft__task_op_done,
    .trace = host_trace,
};

/* ------------------------------------------------------------------------ */
/* Communicators                                                             */
/* ------------------------------------------------------------------------ */

#define DEFAULT_TIMEOUT_NS (60ull * 1000000000ull)

void weft_comm_config_init(weft_comm_config *c)
{
    if (c)
        memset(c, 0, sizeof *c);
}

static weft__comm *comm_get(const weft_comm *h) { return weft__handle_decode(h); }

unsigned weft_comm_size(const weft_comm *h)
{
    const weft__comm *c = comm_get(h);
    return c ? c->n : 0;
}

/* The engine for communicators of `kind`, or NULL with the error reported. */
static const weft__comm_engine *engine_for(const char *kind, const char *fn)
{
    char why[200] = "";
    const weft__comm_engine *e = weft__comm_engine_find(kind, why, sizeof why);
    if (!e)
        (void)weft__error(WEFT_EINVAL, "%s: %s", fn, why);
    return e;
}

/* Open c with engine e over group (comm/comm.c); 0, or the error reported
 * (nothing left to undo but c's slot). */
static int comm_open(weft__comm *c, const weft__comm_engine *e, const void *group, const char *fn)
{
    char why[200] = "";
    int rc = weft__comm_open(c, e, &host, group, why, sizeof why);
    return rc ? weft__error(rc, "%s: %s", fn, why[0] ? why : weft_strerror(rc)) : 0;
}

int weft_comm_create(weft_runtime *h, const weft_comm_config *cfg, weft_comm **out)
{
    weft__clear_error();
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_comm_create: out is NULL");
    *out = NULL;
    weft__comm *c;
    int rc = weft__comm_new(h, cfg, &c);
    if (rc == 0)
        *out = weft__handle_encode(c);
    return rc;
}

int weft__comm_new(weft_runtime *h, const weft_comm_config *cfg, weft__comm **out)
{
    *out = NULL;
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft_comm_create", &err, 1, false);
    if (!rt)
        return err;
    weft_comm_config def;
    weft_comm_config_init(&def);
    if (!cfg)
        cfg = &def;
    unsigned ngpu = rt->placer_ready ? rt->placer.ngpu : 0;
    unsigned n = cfg->gpus ? cfg->ngpus : ngpu;
    int rc = 0;
    if (cfg->gpus && (cfg->ngpus == 0 || cfg->ngpus > WEFT__COMM_MAX))
        rc = weft__error(WEFT_EINVAL, "weft_comm_create: %u GPUs named (1 .. %u)", cfg->ngpus, WEFT__COMM_MAX);
    else if (ngpu == 0)
        rc = weft__error(WEFT_ENODEV, "weft_comm_create: this runtime has no GPUs: create it with some "
                                      "(weft_config.devices such as \"cpu,vgpu:4\" or \"cpu,cuda\")");
    weft__comm *c = NULL;
    if (rc == 0 && !(c = weft__slot_alloc(WEFT__POOL_COMM, sizeof *c)))
        rc = weft__error(WEFT_ENOMEM, "weft_comm_create: out of memory");
    if (rc) {
        weft__rt_leave(rt, 1);
        return rc;
    }
    memset((char *)c + sizeof c->slot, 0, sizeof *c - sizeof c->slot);
    c->rt = h;
    c->n = n;
    c->timeout_ns = cfg->timeout_ns ? cfg->timeout_ns : DEFAULT_TIMEOUT_NS;
    const char *kind = NULL;
    for (unsigned k = 0; k < n && rc == 0; k++) {
        unsigned g = cfg->gpus ? cfg->gpus[k] : k;
        if (g >= ngpu) {
            rc = weft__error(WEFT_ENODEV, "weft_comm_create: member %u is GPU %u, this runtime has %u (name GPUs "
                                          "0 .. %u)", k, g, ngpu, ngpu - 1);
        } else if (c->set >> g & 1) {
            rc = weft__error(WEFT_EINVAL, "weft_comm_create: GPU %u is named twice (member %u)", g, k);
        } else {
            const weft__device *d = rt->placer.gpu[g];
            if (kind && strcmp(kind, d->ops->kind) != 0)
                rc = weft__error(WEFT_EINVAL, "weft_comm_create: member %u (%s) is a %s device, member 0 a %s one: "
                                              "a communicator's GPUs are of one kind", k, d->name, d->ops->kind, kind);
            kind = d->ops->kind;
            c->gpu[k] = g;
            c->dev[k] = rt->placer.dev_index[g];
            c->device[k] = rt->placer.gpu[g];
            c->set |= 1ull << g;
        }
    }
    const weft__comm_engine *e = NULL;
    if (rc == 0 && !(e = engine_for(kind, "weft_comm_create")))
        rc = WEFT_EINVAL;
    if (rc == 0)
        rc = comm_open(c, e, NULL, "weft_comm_create");
    weft__rt_leave(rt, 1);
    if (rc) {
        weft__slot_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int weft_comm_create_mpi(weft_runtime *h, const void *mpi_comm, const weft_comm_config *cfg, weft_comm **out)
{
    weft__clear_error();
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_comm_create_mpi: out is NULL");
    *out = NULL;
    const weft__comm_engine *e = engine_for("mpi", "weft_comm_create_mpi");
    if (!e)
        return WEFT_EINVAL;
    if (!mpi_comm)
        mpi_comm = e->world();
    weft__comm *c;
    int rc = cfg && (cfg->gpus || cfg->ngpus) ? weft__comm_new_hybrid(h, mpi_comm, cfg, &c)
                                              : weft__comm_new_mpi(h, mpi_comm, cfg ? cfg->timeout_ns : 0, &c);
    if (rc == 0)
        *out = weft__handle_encode(c);
    return rc;
}

static int comm_poll(void *arg) { return weft__comm_progress(arg); }

int weft__comm_new_mpi(weft_runtime *h, const void *mpi_comm, uint64_t timeout_ns, weft__comm **out)
{
    *out = NULL;
    const weft__comm_engine *e = engine_for("mpi", "weft_comm_create_mpi");
    if (!e)
        return WEFT_EINVAL;
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft_comm_create_mpi", &err, 1, false);
    if (!rt)
        return err;
    weft__comm *c = weft__slot_alloc(WEFT__POOL_COMM, sizeof *c);
    if (!c) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_ENOMEM, "weft_comm_create_mpi: out of memory");
    }
    memset((char *)c + sizeof c->slot, 0, sizeof *c - sizeof c->slot);
    c->rt = h;
    c->ranks = true;
    c->timeout_ns = timeout_ns ? timeout_ns : DEFAULT_TIMEOUT_NS;
    c->poll_slot = -1;
    int rc = comm_open(c, e, mpi_comm, "weft_comm_create_mpi");
    if (rc == 0 && weft__comm_progresses(c)) {
        /* Idle workers and waits drive its progress (without a slot left,
         * its engine's own thread does alone), and that thread needs a
         * core now and then beside idle workers. */
        atomic_store_explicit(&rt->yield_idle, true, memory_order_relaxed);
        (void)weft__rt_poller_add(rt, comm_poll, c, &c->poll_slot);
    }
    weft__rt_leave(rt, 1);
    if (rc) {
        weft__slot_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int weft_mpi_init(void)
{
    weft__clear_error();
    const weft__comm_engine *e = engine_for("mpi", "weft_mpi_init");
    if (!e)
        return WEFT_EINVAL;
    char why[200] = "";
    int rc = e->init(why, sizeof why);
    return rc ? weft__error(rc, "weft_mpi_init: %s", why) : 0;
}

int weft_mpi_finalize(void)
{
    weft__clear_error();
    const weft__comm_engine *e = engine_for("mpi", "weft_mpi_finalize");
    if (!e)
        return WEFT_EINVAL;
    char why[200] = "";
    int rc = e->finalize(why, sizeof why);
    return rc ? weft__error(rc, "weft_mpi_finalize: %s", why) : 0;
}

unsigned weft_comm_rank(const weft_comm *h)
{
    const weft__comm *c = comm_get(h);
    return c ? c->me : 0;
}

int weft_comm_destroy(weft_comm *h)
{
    weft__clear_error();
    weft__comm *c = comm_get(h);
    if (!c)
        return weft__error(WEFT_EINVAL, "weft_comm_destroy: communicator is NULL or was destroyed");
    int rc = weft__refuse_in_callback("weft_comm_destroy");
    if (rc)
        return rc;
    weft__comm_free(c);
    return 0;
}

/* Nobody polls c any more (its poller, if any, is removed). */
static void comm_unpoll(weft__comm *c)
{
    if (c->poll_slot < 0)
        return;
    /* A runtime destroyed first took its pollers with it (its handle no
     * longer decodes; a new runtime in its slot starts with none). */
    weft__rt *rt = weft__handle_decode(c->rt);
    if (rt)
        weft__rt_poller_remove(rt, c->poll_slot);
    c->poll_slot = -1;
}

void weft__comm_free(weft__comm *c)
{
    if (c->hybrid) { /* its two parts hold its operations */
        weft__comm_free(c->node);
        weft__comm_free(c->net);
        weft__free(c->base);
        weft__slot_free(c);
        return;
    }
    weft__comm_drain(c);
    comm_unpoll(c);
    weft__comm_close(c);
    weft__slot_free(c);
}

/* ------------------------------------------------------------------------ */
/* Operations as tasks                                                       */
/* ------------------------------------------------------------------------ */

void weft_coll_init(weft_coll *c)
{
    if (c)
        memset(c, 0, sizeof *c);
}

/* An operation on its way to the task's body. */
enum { OP_XFER_IN = 4 };
typedef struct op_arg {
    weft__comm *c;
    unsigned op, key, root;
    size_t elem, count;
    bool in_place;
    char name[32];
    bool part[WEFT__COMM_MAX];
    unsigned setk[WEFT__COMM_MAX];
    int send_at[WEFT__COMM_MAX];       /* the access of member k's input (-1: none) */
    int recv_at[WEFT__COMM_MAX];       /* of its output */
    size_t nxfer;
    weft_xfer *xfer;                   /* an exchange's (copied: xfer_in for a few) */
    int *xsrc_at, *xdst_at;            /* the access of each transfer's src and dst (xsrc_in, xdst_in) */
    void *state;                       /* the engine's, for its finish */
    uint64_t seq;                      /* across ranks: its number */
    bool posted;                       /* handed to the engine */
    /* A small exchange's tables, inline (one allocation less each). */
    weft_xfer xfer_in[OP_XFER_IN];
    int xsrc_in[OP_XFER_IN], xdst_in[OP_XFER_IN];
} op_arg;

static void op_arg_free(void *p)
{
    op_arg *a = p;
    weft__comm_finish(a->c, a->state);
    if (a->xfer != a->xfer_in) {
        weft__free(a->xfer);
        weft__free(a->xsrc_at);
        weft__free(a->xdst_at);
    }
    weft__free(a);
}

/* An operation's name, cut to fit (no printf on the spawn path). */
static void set_name(op_arg *a, const char *name)
{
    size_t n = strnlen(name, sizeof a->name - 1);
    memcpy(a->name, name, n);
    a->name[n] = '\0';
}

static void op_finished(void *p, int status)
{
    (void)status;
    op_arg *a = p;
    weft__comm_op_end(a->c, a->seq, a->posted); /* never posted: its number is given up */
}

static int op_body(weft_ctx *ctx, void *p)
{
    op_arg *a = p;
    weft__coll_run r;
    memset(&r, 0, sizeof r);
    r.op = a->op;
    r.key = a->key;
    r.elem = a->elem;
    r.count = a->count;
    r.root = a->root;
    r.name = a->name;
    r.in_place = a->in_place;
    memcpy(r.setk, a->setk, sizeof r.setk);
    r.seq = a->seq;
    r.me = a->c->me;
    if (a->c->ranks) {
        r.my_recv = a->recv_at[0] >= 0 ? weft_ctx_data(ctx, (size_t)a->recv_at[0]) : NULL;
        r.my_send = a->send_at[0] >= 0 ? weft_ctx_data(ctx, (size_t)a->send_at[0]) : NULL;
        if (r.my_send == r.my_recv)
            r.my_send = NULL;
    }
    for (unsigned k = 0; k < a->c->n && !a->c->ranks; k++) {
        r.recv[k] = a->recv_at[k] >= 0 ? weft_ctx_data(ctx, (size_t)a->recv_at[k]) : NULL;
        r.send[k] = a->send_at[k] >= 0 ? weft_ctx_data(ctx, (size_t)a->send_at[k]) : r.recv[k];
    }
    /* The resolved transfers: on the stack for a few (the engine copies
     * what it keeps). */
    weft__xfer_run xs[8], *x = NULL;
    if (a->nxfer) {
        x = a->nxfer <= sizeof xs / sizeof xs[0] ? xs : weft__alloc(a->nxfer * sizeof *x);
        if (!x)
            return WEFT_ENOMEM;
        for (size_t i = 0; i < a->nxfer; i++) {
            const weft_xfer *u = &a->xfer[i];
            x[i].from = u->from;
            x[i].to = u->to;
            x[i].src = a->xsrc_at[i] >= 0 ? (const char *)weft_ctx_data(ctx, (size_t)a->xsrc_at[i]) + u->src_off : NULL;
            x[i].dst = a->xdst_at[i] >= 0 ? (char *)weft_ctx_data(ctx, (size_t)a->xdst_at[i]) + u->dst_off : NULL;
            x[i].bytes = u->bytes;
            x[i].rows = u->rows ? u->rows : 1;
            x[i].src_pitch = u->src_pitch;
            x[i].dst_pitch = u->dst_pitch;
        }
        r.xfer = x;
        r.nxfer = a->nxfer;
    }
    int rc = weft__comm_run(a->c, ctx, &r, a->part, &a->state);
    if (rc == 0)
        a->posted = true;
    if (x != xs)
        weft__free(x);
    return rc;
}

/* The accesses of an operation being built. */
typedef struct acc_list {
    weft_access *v;                    /* v_in, or allocated once more are needed */
    unsigned *member;                  /* whose GPU each is on (member_in, or allocated) */
    size_t n, cap;
    weft_access v_in[8];
    unsigned member_in[8];
} acc_list;

static void acc_init(acc_list *l)
{
    l->v = l->v_in;
    l->member = l->member_in;
    l->n = 0;
    l->cap = sizeof l->v_in / sizeof l->v_in[0];
}

static void acc_free(acc_list *l)
{
    if (l->v != l->v_in) {
        weft__free(l->v);
        weft__free(l->member);
    }
}

/* The access of handle d on member k with mode m (merged with one already
 * there): its index, or -1 (ENOMEM). */
static int acc_add(acc_list *l, weft_data *d, unsigned k, unsigned m)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->v[i].data == d && l->member[i] == k) {
            l->v[i].mode |= m;
            return (int)i;
        }
    if (l->n == l->cap) {
        size_t cap = l->cap * 2;
        weft_access *v = weft__alloc(cap * sizeof *v);
        unsigned *mb = weft__alloc(cap * sizeof *mb);
        if (!v || !mb) {
            weft__free(v);
            weft__free(mb);
            return -1;
        }
        if (l->n) {
            memcpy(v, l->v, l->n * sizeof *v);
            memcpy(mb, l->member, l->n * sizeof *mb);
        }
        acc_free(l);
        l->v = v;
        l->member = mb;
        l->cap = cap;
    }
    l->v[l->n].data = d;
    l->v[l->n].mode = m;
    l->member[l->n] = k;
    return (int)l->n++;
}

/* Bytes of handle d (0 with an error naming it if it is unusable here). */
static size_t data_size(weft__comm *c, weft_data *h, const char *fn, const char *what, unsigned k, int *rc)
{
    const weft__data *d = weft__data_get(h);
    if (!d) {
        *rc = weft__error(WEFT_EINVAL, "%s: %s of member %u is NULL or unregistered", fn, what, k);
        return 0;
    }
    if (atomic_load_explicit(&d->rt_handle, memory_order_relaxed) != (const void *)c->rt) {
        *rc = weft__error(WEFT_EINVAL, "%s: %s of member %u belongs to another runtime", fn, what, k);
        return 0;
    }
    if (d->tile || atomic_load(&((weft__data *)d)->fam)) {
        *rc = weft__error(WEFT_EINVAL, "%s: %s of member %u is %s: communication names whole arrays (register "
                                       "each member's buffer on its own)", fn, what, k,
                          d->tile ? "a tile" : "partitioned into tiles");
        return 0;
    }
    return d->size;
}

/* Spawn the operation's task: accesses l (on members' GPUs), members taking
 * part a->part; a is freed here on failure. */
static int spawn_op(weft__comm *c, op_arg *a, acc_list *l, weft_task *const *deps, size_t ndeps, int priority,
                    weft_task **out, const char *fn)
{
    uint64_t set = 0;
    unsigned ngpu = 0;
    for (unsigned k = 0; k < c->n && !c->ranks; k++)
        if (a->part[k]) {
            set |= 1ull << c->gpu[k];
            ngpu++;
        }
    for (unsigned k = 0; k < c->n && !c->ranks; k++) /* the set's k-th GPU is its k-th lowest */
        a->setk[k] = a->part[k] ? (unsigned)__builtin_popcountll(set & ((1ull << c->gpu[k]) - 1)) : 0;
    for (size_t i = 0; i < l->n && !c->ranks; i++)
        l->v[i].mode |= WEFT_ON_GPU(a->setk[l->member[i]]);
    weft_placement pl;
    weft_placement_init(&pl);
    pl.gpus = ngpu;
    pl.gpu = -1;
    pl.gpu_set = set;
    pl.share = 1.0 / 1024; /* the least: communication overlaps the GPUs' compute tasks */
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = op_body;
    d.arg = a;
    d.arg_destroy = op_arg_free;
    d.on_finish = op_finished;
    d.accesses = l->v;
    d.naccesses = l->n;
    d.deps = deps;
    d.ndeps = ndeps;
    d.name = a->name;
    d.priority = priority;
    d.placements = c->ranks ? NULL : &pl; /* across ranks: a host task (its buffers on the host) */
    d.nplacements = c->ranks ? 0 : 1;
    a->seq = weft__comm_op_begin(c); /* in post order: the same on every rank */
    uint64_t seq = a->seq;
    int rc = weft_spawn(c->rt, &d, out);
    if (rc) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s", weft_last_error());
        /* Its number is given up: other ranks may still run it (and wait
         * for this one until their timeout). */
        weft__comm_op_end(c, seq, false);
        if (rc == WEFT_EAGAIN)
            op_arg_free(a);
        return weft__error(rc, "%s: %s", fn, msg);
    }
    return 0;
}

const char *weft__coll_name(unsigned op)
{
    static const char *const names[] = {"", "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter"};
    return op >= 1 && op <= 5 ? names[op] : "?";
}

int weft__coll_check(const weft_coll *o, unsigned n, const char *fn, size_t *elem_out)
{
    if (o->op < WEFT_COLL_ALLREDUCE || o->op > WEFT_COLL_REDUCE_SCATTER)
        return weft__error(WEFT_EINVAL, "%s: unknown operation %u (WEFT_COLL_ALLREDUCE .. WEFT_COLL_REDUCE_SCATTER)",
                           fn, o->op);
    const char *opn = weft__coll_name(o->op);
    bool reduces = o->op == WEFT_COLL_ALLREDUCE || o->op == WEFT_COLL_REDUCE || o->op == WEFT_COLL_REDUCE_SCATTER;
    size_t elem = weft__red_elem(o->type);
    if (o->type & ~(unsigned)(WEFT_RED_OP_MASK | WEFT_RED_TYPE_MASK))
        return weft__error(WEFT_EINVAL, "%s: %s: type 0x%x has unknown bits", fn, opn, o->type);
    if (!elem)
        return weft__error(WEFT_EINVAL, "%s: %s: no element type in 0x%x (WEFT_RED_I32 .. WEFT_RED_F64)", fn, opn,
                           o->type);
    if (reduces && !weft__red_op_known(o->type))
        return weft__error(WEFT_EINVAL, "%s: %s needs an operator (WEFT_RED_SUM, WEFT_RED_MIN or WEFT_RED_MAX)", fn,
                           opn);
    if (!reduces && (o->type & WEFT_RED_OP_MASK))
        return weft__error(WEFT_EINVAL, "%s: %s takes an element type, not an operator", fn, opn);
    bool rooted = o->op == WEFT_COLL_BROADCAST || o->op == WEFT_COLL_REDUCE;
    if (rooted && o->root >= n)
        return weft__error(WEFT_EINVAL, "%s: %s: root %u, the communicator has %u members", fn, opn, o->root, n);
    if (!o->recv)
        return weft__error(WEFT_EINVAL, "%s: %s: recv is NULL", fn, opn);
    if (!o->send && (o->op == WEFT_COLL_ALLGATHER || o->op == WEFT_COLL_REDUCE_SCATTER))
        return weft__error(WEFT_EINVAL, "%s: %s needs send buffers (no in-place form)", fn, opn);
    if (o->count > SIZE_MAX / elem / n)
        return weft__error(WEFT_EINVAL, "%s: %s: count %zu is too large", fn, opn, o->count);
    if (o->ndeps && !o->deps)
        return weft__error(WEFT_EINVAL, "%s: ndeps is %zu but deps is NULL", fn, o->ndeps);
    *elem_out = elem;
    return 0;
}

int weft_comm_post(weft_comm *h, const weft_coll *o, weft_task **out)
{
    weft__clear_error();
    if (out)
        *out = NULL;
    weft__comm *c = comm_get(h);
    if (!c)
        return weft__error(WEFT_EINVAL, "weft_comm_post: communicator is NULL or was destroyed");
    return c->hybrid ? weft__hybrid_post(c, o, out) : weft__comm_post(c, o, out);
}

int weft__comm_post(weft__comm *c, const weft_coll *o, weft_task **out)
{
    static const char fn[] = "weft_comm_post";
    if (!o)
        return weft__error(WEFT_EINVAL, "%s: operation is NULL", fn);
    size_t elem;
    int rc = weft__coll_check(o, c->n, fn, &elem);
    if (rc != 0)
        return rc;
    const char *opn = weft__coll_name(o->op);
    bool in_place = !o->send;
    size_t B = o->count * elem;
    size_t in_bytes = o->op == WEFT_COLL_REDUCE_SCATTER ? B * c->n : B;
    size_t out_bytes = o->op == WEFT_COLL_ALLGATHER ? B * c->n : B;
    op_arg *a = weft__alloc(sizeof *a);
    if (!a)
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    memset(a, 0, sizeof *a);
    a->c = c;
    a->op = o->op;
    a->key = weft__red_key(o->type);
    a->root = o->root;
    a->elem = elem;
    a->count = o->count;
    a->in_place = in_place;
    set_name(a, o->name ? o->name : opn);
    acc_list l;
    acc_init(&l);
    /* Across ranks only this rank's member is named here (its entries at
     * index 0 of the op's tables). */
    for (unsigned k = c->ranks ? c->me : 0; k < (c->ranks ? c->me + 1 : c->n) && rc == 0; k++) {
        unsigned at_k = c->ranks ? 0 : k;
        a->part[at_k] = true;
        a->send_at[at_k] = a->recv_at[at_k] = -1;
        /* What member k reads (its input) and writes (its output). */
        bool reads = o->op != WEFT_COLL_BROADCAST || k == o->root;
        bool writes = o->op == WEFT_COLL_BROADCAST ? !(in_place && k == o->root)
                                                   : o->op != WEFT_COLL_REDUCE || k == o->root;
        weft_data *rv = o->recv[k];
        if (in_place) { /* recv[k] is both */
            size_t need = writes && out_bytes > in_bytes ? out_bytes : in_bytes;
            size_t have = data_size(c, rv, fn, "recv", k, &rc);
            if (rc)
                break;
            if (have < need) {
                rc = weft__error(WEFT_EINVAL, "%s: %s: recv of member %u has %zu bytes, %zu needed", fn, opn, k,
                                 have, need);
                break;
            }
            unsigned m = reads && writes ? WEFT_RW : writes ? (have > out_bytes ? WEFT_RW : WEFT_W) : WEFT_R;
            int at = acc_add(&l, rv, k, m);
            if (at < 0) {
                rc = weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
                break;
            }
            a->send_at[at_k] = reads ? at : -1;
            a->recv_at[at_k] = writes ? at : -1;
            continue;
        }
        weft_data *sv = o->send[k];
        if (writes) {
            size_t have = data_size(c, rv, fn, "recv", k, &rc);
            if (rc)
                break;
            if (have < out_bytes) {
                rc = weft__error(WEFT_EINVAL, "%s: %s: recv of member %u has %zu bytes, %zu needed", fn, opn, k,
                                 have, out_bytes);
                break;
            }
            if (reads && sv == rv) {
                rc = weft__error(WEFT_EINVAL, "%s: %s: member %u's send and recv are one handle: pass send = NULL "
                                              "for the in-place form", fn, opn, k);
                break;
            }
            if ((a->recv_at[at_k] = acc_add(&l, rv, k, have > out_bytes ? WEFT_RW : WEFT_W)) < 0) {
                rc = weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
                break;
            }
        }
        if (reads) {
            size_t have = data_size(c, sv, fn, "send", k, &rc);
            if (rc)
                break;
            if (have < in_bytes) {
                rc = weft__error(WEFT_EINVAL, "%s: %s: send of member %u has %zu bytes, %zu needed", fn, opn, k,
                                 have, in_bytes);
                break;
            }
            if ((a->send_at[at_k] = acc_add(&l, sv, k, WEFT_R)) < 0) {
                rc = weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
                break;
            }
        }
    }
    /* One handle on two members, written on one of them: refused. */
    for (size_t i = 0; i < l.n && rc == 0; i++)
        for (size_t j = i + 1; j < l.n && rc == 0; j++)
            if (l.v[i].data == l.v[j].data && ((l.v[i].mode | l.v[j].mode) & WEFT_W))
                rc = weft__error(WEFT_EINVAL, "%s: %s: members %u and %u name the same handle, and one writes it "
                                              "(each member needs buffers of its own)", fn, opn, l.member[i],
                                 l.member[j]);
    if (rc) {
        acc_free(&l);
        op_arg_free(a);
        return rc;
    }
    rc = spawn_op(c, a, &l, o->deps, o->ndeps, o->priority, out, fn);
    acc_free(&l);
    return rc;
}

/* [lo, hi) of a transfer's side: rows rows of bytes, pitch apart, from
 * off; false if that overflows. */
static bool extent(size_t off, size_t rows, size_t pitch, size_t bytes, size_t *lo, size_t *hi)
{
    size_t span;
    *lo = *hi = off;
    if (!bytes)
        return true;
    return !__builtin_mul_overflow(rows - 1, pitch, &span) && !__builtin_add_overflow(span, bytes, &span) &&
           !__builtin_add_overflow(off, span, hi);
}

/* Whether two strided sides (rows rows of bytes, pitch apart, from off; each
 * within a handle, so below 2^62) share a byte.  For each row of a, the
 * rows of b that could overlap it form one range of indices. */
static bool sides_overlap(size_t aoff, size_t arows, size_t apitch, size_t abytes, size_t boff, size_t brows,
                          size_t bpitch, size_t bbytes)
{
    if (!abytes || !bbytes)
        return false;
    if (brows == 1)
        bpitch = 1; /* unused */
    for (size_t i = 0; i < arows; i++) {
        int64_t x = (int64_t)(aoff + i * apitch), o = (int64_t)boff, p = (int64_t)bpitch;
        /* rows j with o + j p < x + abytes and x < o + j p + bbytes */
        int64_t hi_num = x + (int64_t)abytes - 1 - o, lo_num = x - o - (int64_t)bbytes + 1;
        if (hi_num < 0)
            continue;
        int64_t jhi = hi_num / p, jlo = lo_num <= 0 ? 0 : (lo_num + p - 1) / p;
        if (jhi > (int64_t)brows - 1)
            jhi = (int64_t)brows - 1;
        if (jlo <= jhi)
            return true;
    }
    return false;
}

int weft_comm_exchange(weft_comm *h, const weft_xfer *x, size_t n, const char *name, weft_task **out)
{
    weft__clear_error();
    if (out)
        *out = NULL;
    weft__comm *c = comm_get(h);
    if (!c)
        return weft__error(WEFT_EINVAL, "weft_comm_exchange: communicator is NULL or was destroyed");
    return c->hybrid ? weft__hybrid_exchange(c, x, n, name, out) : weft__comm_exchange(c, x, n, name, out);
}

/* An exchange's operation, x's n transfers copied into it: 0 and *out,
 * or WEFT_ENOMEM (reported). */
static int exchange_arg_new(weft__comm *c, const weft_xfer *x, size_t n, const char *name, const char *fn,
                            op_arg **out)
{
    op_arg *a = weft__alloc(sizeof *a);
    if (!a)
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    memset(a, 0, sizeof *a);
    a->c = c;
    a->nxfer = n;
    set_name(a, name ? name : "exchange");
    for (unsigned k = 0; k < c->n; k++)
        a->send_at[k] = a->recv_at[k] = -1;
    if (n <= OP_XFER_IN) {
        a->xfer = a->xfer_in;
        a->xsrc_at = a->xsrc_in;
        a->xdst_at = a->xdst_in;
    } else {
        a->xfer = weft__alloc(n * sizeof *a->xfer);
        a->xsrc_at = weft__alloc(n * sizeof *a->xsrc_at);
        a->xdst_at = weft__alloc(n * sizeof *a->xdst_at);
    }
    if (!a->xfer || !a->xsrc_at || !a->xdst_at) {
        op_arg_free(a);
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    }
    if (n)
        memcpy(a->xfer, x, n * sizeof *x);
    *out = a;
    return 0;
}

/* Transfer t (number i): members of the communicator, two of them, and
 * pitches that hold its rows.  0, or the error. */
static int xfer_check_shape(const weft__comm *c, const weft_xfer *t, size_t i, const char *fn)
{
    size_t rows = t->rows ? t->rows : 1;
    if (t->from >= c->n || t->to >= c->n)
        return weft__error(WEFT_EINVAL, "%s: transfer %zu is from member %u to %u, the communicator has %u", fn, i,
                           t->from, t->to, c->n);
    if (t->from == t->to)
        return weft__error(WEFT_EINVAL, "%s: transfer %zu is from member %u to itself", fn, i, t->from);
    if (rows > 1 && (t->src_pitch < t->bytes || t->dst_pitch < t->bytes))
        return weft__error(WEFT_EINVAL, "%s: transfer %zu has rows of %zu bytes but pitches %zu and %zu", fn, i,
                           t->bytes, t->src_pitch, t->dst_pitch);
    return 0;
}

/* Transfer x[i]'s sides that this rank names (lsrc, ldst) lie within their
 * handles.  0, or the error. */
static int xfer_check_extents(weft__comm *c, const weft_xfer *x, size_t i, bool lsrc, bool ldst, const char *fn)
{
    const weft_xfer *t = &x[i];
    size_t rows = t->rows ? t->rows : 1;
    int rc = 0;
    size_t ssz = lsrc ? data_size(c, t->src, fn, "src", t->from, &rc) : SIZE_MAX;
    size_t dsz = rc ? 0 : ldst ? data_size(c, t->dst, fn, "dst", t->to, &rc) : SIZE_MAX;
    if (rc)
        return rc;
    size_t slo, shi, dlo, dhi;
    if (!extent(t->src_off, rows, t->src_pitch, t->bytes, &slo, &shi) || shi > ssz)
        return weft__error(WEFT_EINVAL, "%s: transfer %zu reaches outside its src (%zu bytes from %zu, %zu rows "
                                        "%zu apart; the handle has %zu)", fn, i, t->bytes, t->src_off, rows,
                           t->src_pitch, ssz);
    if (!extent(t->dst_off, rows, t->dst_pitch, t->bytes, &dlo, &dhi) || dhi > dsz)
        return weft__error(WEFT_EINVAL, "%s: transfer %zu reaches outside its dst (%zu bytes from %zu, %zu rows "
                                        "%zu apart; the handle has %zu)", fn, i, t->bytes, t->dst_off, rows,
                           t->dst_pitch, dsz);
    return 0;
}

/* Destinations overlap no source and no other destination of the same
 * handle (byte for byte, strided sides row by row): x[i] against the
 * transfers before it, and against itself.  0, or the error. */
static int xfer_check_overlaps(const weft__comm *c, const weft_xfer *x, size_t i, bool lsrc, bool ldst,
                               const char *fn)
{
    const weft_xfer *t = &x[i];
    size_t rows = t->rows ? t->rows : 1;
    int rc = 0;
    for (size_t j = 0; j < i && rc == 0; j++) { /* each pair once: the earlier one is checked */
        const weft_xfer *u = &x[j];
        size_t urows = u->rows ? u->rows : 1;
        bool ulsrc = !c->ranks || u->from == c->me, uldst = !c->ranks || u->to == c->me;
        if (ldst && ulsrc && u->src == t->dst && sides_overlap(t->dst_off, rows, t->dst_pitch, t->bytes, u->src_off, urows,
                                              u->src_pitch, u->bytes))
            rc = weft__error(WEFT_EINVAL, "%s: transfer %zu writes where transfer %zu reads", fn, i, j);
        else if (uldst && lsrc && u->dst == t->src && sides_overlap(u->dst_off, urows, u->dst_pitch, u->bytes, t->src_off, rows,
                                                   t->src_pitch, t->bytes))
            rc = weft__error(WEFT_EINVAL, "%s: transfer %zu writes where transfer %zu reads", fn, j, i);
        else if (uldst && ldst && u->dst == t->dst && sides_overlap(t->dst_off, rows, t->dst_pitch, t->bytes, u->dst_off, urows,
                                                   u->dst_pitch, u->bytes))
            rc = weft__error(WEFT_EINVAL, "%s: transfers %zu and %zu write overlapping ranges", fn, j, i);
    }
    if (rc == 0 && lsrc && ldst && t->src == t->dst && sides_overlap(t->dst_off, rows, t->dst_pitch, t->bytes, t->src_off, rows,
                                                     t->src_pitch, t->bytes))
        rc = weft__error(WEFT_EINVAL, "%s: transfer %zu writes where it reads", fn, i);
    return rc;
}

/* Transfer t (number i)'s accesses in l, the sides this rank names, and
 * where a's body finds them.  0, or WEFT_ENOMEM (reported). */
static int xfer_add_accesses(const weft__comm *c, op_arg *a, acc_list *l, const weft_xfer *t, size_t i, bool lsrc,
                             bool ldst, const char *fn)
{
    if (!c->ranks)
        a->part[t->from] = a->part[t->to] = true;
    int si = lsrc ? acc_add(l, t->src, t->from, WEFT_R) : -2;
    int di = si == -1 ? -1 : ldst ? acc_add(l, t->dst, t->to, WEFT_RW) : -2;
    if (si == -1 || di == -1)
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    a->xsrc_at[i] = si < 0 ? -1 : si;
    a->xdst_at[i] = di < 0 ? -1 : di;
    return 0;
}

/* One handle written on one member and used on another: refused.  0, or
 * the error. */
static int xfer_check_shared(const acc_list *l, const char *fn)
{
    int rc = 0;
    for (size_t i = 0; i < l->n && rc == 0; i++)
        for (size_t j = i + 1; j < l->n && rc == 0; j++)
            if (l->v[i].data == l->v[j].data && ((l->v[i].mode | l->v[j].mode) & WEFT_W))
                rc = weft__error(WEFT_EINVAL, "%s: one handle is written on member %u and used on member %u", fn,
                                 (l->v[i].mode & WEFT_W) ? l->member[i] : l->member[j],
                                 (l->v[i].mode & WEFT_W) ? l->member[j] : l->member[i]);
    return rc;
}

int weft__comm_exchange(weft__comm *c, const weft_xfer *x, size_t n, const char *name, weft_task **out)
{
    static const char fn[] = "weft_comm_exchange";
    if (n && !x)
        return weft__error(WEFT_EINVAL, "%s: n is %zu but x is NULL", fn, n);
    if (n > 65536)
        return weft__error(WEFT_EINVAL, "%s: %zu transfers in one group (at most 65536)", fn, n);
    op_arg *a = NULL;
    int rc = exchange_arg_new(c, x, n, name, fn, &a);
    if (rc)
        return rc;
    acc_list l;
    acc_init(&l);
    for (size_t i = 0; i < n && rc == 0; i++) {
        const weft_xfer *t = &x[i];
        if ((rc = xfer_check_shape(c, t, i, fn)) != 0)
            break;
        /* Across ranks, this rank checks and names only its own sides. */
        bool lsrc = !c->ranks || t->from == c->me, ldst = !c->ranks || t->to == c->me;
        a->xsrc_at[i] = a->xdst_at[i] = -1;
        if (!lsrc && !ldst)
            continue;
        if ((rc = xfer_check_extents(c, x, i, lsrc, ldst, fn)) != 0 ||
            (rc = xfer_check_overlaps(c, x, i, lsrc, ldst, fn)) != 0)
            break;
        rc = xfer_add_accesses(c, a, &l, t, i, lsrc, ldst, fn);
    }
    if (rc == 0)
        rc = xfer_check_shared(&l, fn);
    if (rc == 0 && n == 0 && !c->ranks) {
        /* An empty group: a task that only orders (on member 0's GPU). */
        a->part[0] = true;
    }
    if (rc) {
        acc_free(&l);
        op_arg_free(a);
        return rc;
    }
    rc = spawn_op(c, a, &l, NULL, 0, 0, out, fn);
    acc_free(&l);
    return rc;
}
