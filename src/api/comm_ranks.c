/*
 * api/comm_ranks.c — a communicator over the GPUs of several ranks
 * (weft_comm_create_mpi with GPUs): members numbered rank by rank, each
 * rank's its own GPUs.  It is two communicators: one over this rank's GPUs
 * (node: the virtual communicator or NCCL, GPU to GPU) and one over the
 * ranks (net: MPI, through host memory), and each operation is composed of
 * operations on them, ordered by the data they name:
 *
 *   all-reduce      node reduce to the rank's first GPU, net all-reduce of
 *                   that buffer, node broadcast from it;
 *   broadcast       on the root's rank a node broadcast from the root, then
 *                   a net broadcast of the rank's first buffer, then on the
 *                   other ranks a node broadcast from it;
 *   reduce          node reduce (to the root on its rank, to a staging
 *                   buffer elsewhere), net reduce to the root's rank;
 *   all-gather      a copy task and a node exchange put the rank's blocks
 *                   into its first GPU's recv at their places, a net
 *                   exchange sends them to the other ranks (GPU counts may
 *                   differ), a node broadcast hands the whole out;
 *   reduce-scatter  node reduce of the whole input to staging, net
 *                   reduce-scatter of the ranks' blocks (equal GPU counts)
 *                   or net all-reduce of it all, then each member's block
 *                   to it (a copy task, a node exchange, a join);
 *   exchange        the transfers within this rank on node, those between
 *                   ranks on net (every rank derives the same list from the
 *                   same group), and a task that ends when both have.
 *
 * Every rank posts one net part per operation (the same on every rank, so
 * the numbers stay in step).  A sum is each rank's sum of its members, then
 * those in rank order: deterministic, the same on every rank, but not the
 * flat member order's rounding (integers, min and max are exact).
 */
#include "api/runtime.h"
#include "comm/comm.h"
#include "data/reduce.h"

#include <limits.h>

#include <stdio.h>
#include <string.h>

int weft__comm_new_hybrid(weft_runtime *h, const void *mpi_comm, const weft_comm_config *cfg, weft__comm **out)
{
    *out = NULL;
    weft__comm *net = NULL, *node = NULL, *c = NULL;
    int rc = weft__comm_new_mpi(h, mpi_comm, cfg->timeout_ns, &net);
    if (rc)
        return rc;
    /* Every rank learns every rank's count of GPUs (0: it failed), so that
     * all fail together: the gather is collective, and takes place whatever
     * happened here. */
    unsigned *counts = weft__alloc((net->n + 1) * sizeof *counts);
    if (!counts) {
        weft__comm_free(net);
        return weft__error(WEFT_ENOMEM, "weft_comm_create_mpi: out of memory");
    }
    rc = weft__comm_new(h, cfg, &node);
    if (rc == 0 && !(c = weft__slot_alloc(WEFT__POOL_COMM, sizeof *c)))
        rc = weft__error(WEFT_ENOMEM, "weft_comm_create_mpi: out of memory");
    char why[256];
    snprintf(why, sizeof why, "%s", rc ? weft_last_error() : "");
    if (weft__comm_gather_counts(net, rc == 0 ? node->n : 0, counts) != 0 && rc == 0)
        rc = weft__error(WEFT_EDEVICE, "weft_comm_create_mpi: MPI could not gather the ranks' GPU counts");
    if (rc && why[0])
        rc = weft__error(rc, "%s", why); /* this rank's own reason */
    for (unsigned r = 0; rc == 0 && r < net->n; r++)
        if (counts[r] == 0)
            rc = weft__error(WEFT_EINVAL, "weft_comm_create_mpi: rank %u could not make its communicator over GPUs "
                                          "(see its own error)", r);
    if (rc) {
        if (node)
            weft__comm_free(node);
        weft__comm_free(net);
        weft__free(counts);
        if (c)
            weft__slot_free(c);
        return rc;
    }
    memset((char *)c + sizeof c->slot, 0, sizeof *c - sizeof c->slot);
    /* counts[] becomes base[]: each rank's first member, then the total */
    unsigned total = 0;
    for (unsigned r = 0; r <= net->n; r++) {
        unsigned k = r < net->n ? counts[r] : 0;
        counts[r] = total;
        total += k;
    }
    c->rt = h;
    c->hybrid = true;
    c->node = node;
    c->net = net;
    c->base = counts;
    c->nlocal = node->n;
    c->n = total;
    c->me = counts[net->me];
    c->timeout_ns = net->timeout_ns;
    *out = c;
    return 0;
}

/* The rank that member g belongs to. */
static unsigned rank_of(const weft__comm *c, unsigned g)
{
    unsigned r = 0;
    while (r + 1 < c->net->n && c->base[r + 1] <= g)
        r++;
    return r;
}

/* Post o on sub-communicator s with buffers send/recv (NULL: none). */
static int sub_post(weft__comm *s, const weft_coll *o, unsigned op, unsigned root, size_t count,
                    weft_data *const *send, weft_data *const *recv, const char *what, weft_task **out)
{
    weft_coll x = *o;
    char name[32];
    snprintf(name, sizeof name, "%s (%s)", o->name ? o->name : "op", what);
    x.op = op;
    x.root = root;
    x.count = count;
    x.send = send;
    x.recv = recv;
    x.name = name;
    if (op == WEFT_COLL_BROADCAST || op == WEFT_COLL_ALLGATHER)
        x.type &= ~(unsigned)WEFT_RED_OP_MASK;
    x.deps = NULL; /* only the first part follows the caller's dependencies */
    x.ndeps = 0;
    return weft__comm_post(s, &x, out);
}

/* ---- Staging buffers ----------------------------------------------------
 * Host memory registered as data handles for a result that no caller's
 * buffer may hold (a rank's partial reduction): allocated before any part
 * is posted; once every part is posted, a host task writing them (a pure
 * ordering edge: it follows every part that names them, and is not
 * cancelled when one of them fails) is followed by one that unregisters
 * and frees them. */
enum { STAGE_MAX = 2 };

typedef struct stage {
    unsigned n;
    void *mem[STAGE_MAX];
    weft_data *h[STAGE_MAX];
    bool done;
} stage;

/* A buffer of `bytes` (at least 1) in s, its handle in *out: 0, or
 * WEFT_ENOMEM or the registration's error (reported). */
static int stage_add(weft_runtime *rt, stage *s, size_t bytes, const char *fn, weft_data **out)
{
    void *m = weft__alloc(bytes ? bytes : 1);
    if (!m)
        return weft__error(WEFT_ENOMEM, "%s: out of memory (staging %zu bytes)", fn, bytes);
    int rc = weft_data_register(rt, m, bytes ? bytes : 1, out);
    if (rc) {
        weft__free(m);
        return rc;
    }
    s->mem[s->n] = m;
    s->h[s->n++] = *out;
    return 0;
}

/* Unregister (waiting for their tasks) and free s's buffers. */
static void stage_drop(stage *s)
{
    for (unsigned i = 0; i < s->n; i++) {
        if (weft_data_unregister(s->h[i]) != 0)
            fprintf(stderr, "weft: a staging buffer of an operation across ranks with GPUs: %s\n", weft_last_error());
        weft__free(s->mem[i]);
    }
    s->n = 0;
}

static int stage_fence_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return 0;
}

static int stage_free_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    stage *s = arg;
    stage_drop(s); /* the fence finished: nothing names them any more */
    s->done = true;
    return 0;
}

static void stage_free_finished(void *arg, int status)
{
    stage *s = arg;
    if (!s->done) /* cancelled by request (weft_cancel_pending): the runtime unregisters the handles at its end */
        fprintf(stderr, "weft: the staging buffers of an operation across ranks with GPUs were not freed (their "
                        "release was cancelled, status %d)\n", status);
}

static void stage_free_destroy(void *arg)
{
    stage *s = arg;
    if (s->done)
        weft__free(s);
}

/* Hand s over to the tasks that free it once every part naming its
 * buffers has finished (or free it now if they cannot be spawned). */
static void stage_release(weft_runtime *rt, stage *s, const char *name)
{
    if (s->n == 0) {
        weft__free(s);
        return;
    }
    weft_access acc[STAGE_MAX];
    for (unsigned i = 0; i < s->n; i++)
        acc[i] = (weft_access){s->h[i], WEFT_W};
    char nm[32];
    snprintf(nm, sizeof nm, "%s (staging)", name);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = stage_fence_body;
    d.accesses = acc;
    d.naccesses = s->n;
    d.name = nm;
    weft_task *fence = NULL;
    if (weft_spawn(rt, &d, &fence) == 0) {
        weft_task_desc_init(&d);
        d.body = stage_free_body;
        d.arg = s;
        d.arg_destroy = stage_free_destroy;
        d.on_finish = stage_free_finished;
        d.deps = &fence;
        d.ndeps = 1;
        d.name = nm;
        s->done = false;
        int rc = weft_spawn(rt, &d, NULL);
        weft_task_release(fence);
        if (rc == 0)
            return;
        /* (arg_destroy ran, leaving s: not done) */
    }
    stage_drop(s); /* blocks until the parts have finished */
    weft__free(s);
}

/* ---- A copy within one GPU --------------------------------------------- */

typedef struct copy_arg {
    size_t src_off, dst_off, bytes;
} copy_arg;

static int copy_body(weft_ctx *ctx, void *arg)
{
    const copy_arg *a = arg;
    const char *src = weft_ctx_data(ctx, 0);
    char *dst = weft_ctx_data(ctx, 1);
    if (!a->bytes)
        return 0;
    return weft_ctx_copy(ctx, 0, dst + a->dst_off, src + a->src_off, a->bytes);
}

/* Spawn a task on GPU gpu that copies a->bytes from src (at a->src_off)
 * to dst (at a->dst_off); a is the task's (freed with it, or here if the
 * spawn fails). */
static int copy_post(weft_runtime *rt, unsigned gpu, weft_data *src, weft_data *dst, copy_arg *a, const weft_coll *o,
                     weft_task *const *deps, size_t ndeps, weft_task **out)
{
    weft_placement pl;
    weft_placement_init(&pl);
    pl.gpus = 1;
    pl.gpu = (int)gpu;
    pl.share = 1.0 / 1024;
    weft_access acc[2] = {{src, WEFT_R}, {dst, WEFT_RW}}; /* RW: the rest of dst is kept */
    char nm[32];
    snprintf(nm, sizeof nm, "%s (copy)", o->name ? o->name : weft__coll_name(o->op));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = copy_body;
    d.arg = a;
    d.arg_destroy = weft__free;
    d.accesses = acc;
    d.naccesses = 2;
    d.deps = deps;
    d.ndeps = ndeps;
    d.name = nm;
    d.priority = o->priority;
    d.placements = &pl;
    d.nplacements = 1;
    return weft_spawn(rt, &d, out);
}

static int join_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return 0;
}

/* A task that ends when every task of parts has (a failure among them
 * cancels it); parts are released. */
static int join_post(weft_runtime *rt, weft_task **parts, size_t n, const char *name, weft_task **out)
{
    weft_task *deps[4];
    size_t nd = 0;
    for (size_t k = 0; k < n; k++)
        if (parts[k])
            deps[nd++] = parts[k];
    int rc = 0;
    if (out) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = join_body;
        d.deps = deps;
        d.ndeps = nd;
        d.name = name;
        rc = weft_spawn(rt, &d, out);
    }
    for (size_t k = 0; k < nd; k++)
        weft_task_release(deps[k]);
    return rc;
}

/* ---- Checks -------------------------------------------------------------- */

/* Bytes of handle h, member g's `what` (0 with an error if unusable). */
static size_t buf_size(weft_data *h, const char *fn, const char *opn, const char *what, unsigned g, int *rc)
{
    const weft__data *d = h ? weft__data_get(h) : NULL;
    if (!d) {
        *rc = weft__error(WEFT_EINVAL, "%s: %s: %s of member %u is NULL or unregistered", fn, opn, what, g);
        return 0;
    }
    return d->size;
}

/* Everything this rank's part of o needs, checked before any part is
 * posted (the messages name the argument, with members numbered as in c). */
static int hybrid_check(const weft__comm *c, const weft_coll *o, const char *fn)
{
    size_t elem;
    int rc = weft__coll_check(o, c->n, fn, &elem);
    if (rc != 0)
        return rc;
    const char *opn = weft__coll_name(o->op);
    bool in_place = !o->send;
    size_t B = o->count * elem;
    /* The most any rank hands MPI at once (an int count of bytes there). */
    size_t most_local = 0;
    for (unsigned r = 0; r < c->net->n; r++)
        if (c->base[r + 1] - c->base[r] > most_local)
            most_local = c->base[r + 1] - c->base[r];
    size_t net_bytes = o->op == WEFT_COLL_ALLGATHER ? B * most_local : o->op == WEFT_COLL_REDUCE_SCATTER ? B * c->n : B;
    if (net_bytes > INT_MAX)
        return weft__error(WEFT_EINVAL, "%s: %s: count %zu puts %zu bytes in one MPI operation, more than its int "
                                        "counts allow", fn, opn, o->count, net_bytes);
    if (o->op == WEFT_COLL_ALLGATHER && (size_t)c->net->n * (c->net->n - 1) > 65536)
        return weft__error(WEFT_EINVAL, "%s: %s across %u ranks with GPUs: its exchange between the ranks would have "
                                        "more than 65536 transfers (at most 256 ranks)", fn, opn, c->net->n);
    size_t in_b = o->op == WEFT_COLL_REDUCE_SCATTER ? B * c->n : B;
    size_t out_b = o->op == WEFT_COLL_ALLGATHER ? B * c->n : B;
    /* This rank's members: what each reads and writes (as on a
     * communicator over GPUs), and no handle written on one member used on
     * another. */
    weft_data *h[2 * WEFT__COMM_MAX];
    unsigned who[2 * WEFT__COMM_MAX];
    bool wr[2 * WEFT__COMM_MAX];
    unsigned nh = 0;
    for (unsigned k = 0; k < c->nlocal; k++) {
        unsigned g = c->me + k;
        bool root = g == o->root;
        bool reads_send = !in_place && (o->op != WEFT_COLL_BROADCAST || root);
        bool uses_recv = in_place || o->op != WEFT_COLL_REDUCE || root;
        bool writes_recv = in_place ? (o->op == WEFT_COLL_ALLREDUCE || (o->op == WEFT_COLL_BROADCAST && !root) ||
                                       (o->op == WEFT_COLL_REDUCE && root))
                                    : uses_recv;
        if (uses_recv) {
            size_t need = in_place ? B : out_b, have = buf_size(o->recv[g], fn, opn, "recv", g, &rc);
            if (rc)
                return rc;
            if (have < need)
                return weft__error(WEFT_EINVAL, "%s: %s: recv of member %u has %zu bytes, %zu needed", fn, opn, g,
                                   have, need);
            h[nh] = o->recv[g];
            who[nh] = g;
            wr[nh++] = writes_recv;
        }
        if (reads_send) {
            size_t have = buf_size(o->send[g], fn, opn, "send", g, &rc);
            if (rc)
                return rc;
            if (have < in_b)
                return weft__error(WEFT_EINVAL, "%s: %s: send of member %u has %zu bytes, %zu needed", fn, opn, g,
                                   have, in_b);
            if (uses_recv && o->send[g] == o->recv[g])
                return weft__error(WEFT_EINVAL, "%s: %s: member %u's send and recv are one handle%s", fn, opn, g,
                                   o->op == WEFT_COLL_ALLGATHER || o->op == WEFT_COLL_REDUCE_SCATTER
                                       ? " (no in-place form)"
                                       : ": pass send = NULL for the in-place form");
            h[nh] = o->send[g];
            who[nh] = g;
            wr[nh++] = false;
        }
    }
    for (unsigned i = 0; i < nh; i++)
        for (unsigned j = i + 1; j < nh; j++)
            if (h[i] == h[j] && who[i] != who[j] && (wr[i] || wr[j]))
                return weft__error(WEFT_EINVAL, "%s: %s: members %u and %u name the same handle, and one writes it "
                                                "(each member needs buffers of its own)", fn, opn, who[i], who[j]);
    return 0;
}

/* ---- The collectives ----------------------------------------------------- */

/* A collective across ranks being composed: the caller's operation, this
 * rank's view of the group, and what is allocated before any part is
 * posted. */
typedef struct hybrid_op {
    weft__comm *c;
    const weft_coll *o;
    const char *nm;                   /* its name */
    unsigned L, me, R, n;             /* this rank's GPUs, its number, the ranks, the members */
    size_t B;                         /* bytes of one member's block */
    bool even;                        /* every rank has as many GPUs as this one */
    weft_data *lsend[WEFT__COMM_MAX]; /* this rank's members' buffers */
    weft_data *lrecv[WEFT__COMM_MAX];
    weft_data **nsend, **nrecv;       /* the buffers of the part across the ranks */
    stage *st;
    weft_xfer *x;                     /* room for an exchange's transfers */
    copy_arg *ca;                     /* a copy task's argument (the task's once posted: ca_used) */
    bool ca_used;
    unsigned rr, rj;                  /* a rooted operation's rank and its member there */
    weft_data *S, *T;                 /* staging: a rank's partial result, and its block of it */
    weft_coll first;                  /* the first part: it follows the caller's dependencies */
    char name[32];                    /* the name of the node's parts */
} hybrid_op;

/* h for o on c: this rank's buffers, and everything the parts need,
 * allocated before anything is posted.  0, or the error (nothing kept). */
static int hybrid_prepare(hybrid_op *h, weft__comm *c, const weft_coll *o, const char *fn)
{
    h->c = c;
    h->o = o;
    h->nm = o->name ? o->name : weft__coll_name(o->op);
    unsigned L = h->L = c->nlocal, R = h->R = c->net->n;
    h->me = c->net->me;
    h->n = c->n;
    h->B = o->count * weft__red_elem(o->type);
    h->even = true;
    for (unsigned r = 0; r < R; r++)
        h->even = h->even && c->base[r + 1] - c->base[r] == L;
    for (unsigned j = 0; j < L; j++) {
        h->lsend[j] = o->send ? o->send[c->me + j] : NULL;
        h->lrecv[j] = o->recv[c->me + j];
    }
    h->nsend = weft__alloc(R * sizeof *h->nsend);
    h->nrecv = weft__alloc(R * sizeof *h->nrecv);
    h->st = weft__alloc(sizeof *h->st);
    size_t nx = o->op == WEFT_COLL_ALLGATHER && (size_t)R * R > L ? (size_t)R * R : L;
    h->x = weft__alloc(nx * sizeof *h->x);
    h->ca = weft__alloc(sizeof *h->ca);
    if (!h->nsend || !h->nrecv || !h->st || !h->x || !h->ca) {
        weft__free(h->nsend);
        weft__free(h->nrecv);
        weft__free(h->st);
        weft__free(h->x);
        weft__free(h->ca);
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    }
    memset(h->nsend, 0, R * sizeof *h->nsend);
    memset(h->nrecv, 0, R * sizeof *h->nrecv);
    memset(h->st, 0, sizeof *h->st);
    memset(h->ca, 0, sizeof *h->ca);
    h->ca_used = false;
    h->rr = h->rj = 0;
    if (o->op == WEFT_COLL_BROADCAST || o->op == WEFT_COLL_REDUCE) {
        h->rr = rank_of(c, o->root);
        h->rj = o->root - c->base[h->rr];
    }
    h->S = h->T = NULL;
    int rc = 0;
    if (o->op == WEFT_COLL_REDUCE && h->me != h->rr) {
        rc = stage_add(c->rt, h->st, h->B, fn, &h->S);
    } else if (o->op == WEFT_COLL_REDUCE_SCATTER) {
        rc = stage_add(c->rt, h->st, h->B * h->n, fn, &h->S);
        if (rc == 0 && h->even && L > 1)
            rc = stage_add(c->rt, h->st, h->B * L, fn, &h->T);
    }
    if (rc) {
        stage_drop(h->st);
        weft__free(h->st);
        weft__free(h->nsend);
        weft__free(h->nrecv);
        weft__free(h->x);
        weft__free(h->ca);
        return rc;
    }
    h->first = *o;
    snprintf(h->name, sizeof h->name, "%s (node)", h->nm);
    h->first.name = h->name;
    return 0;
}

/* All-reduce: node reduce to the rank's first GPU, across the ranks, node
 * broadcast. */
static int hybrid_allreduce(hybrid_op *h, weft_task **out)
{
    const weft_coll *o = h->o;
    h->nrecv[h->me] = h->lrecv[0];
    h->first.root = 0;
    h->first.op = WEFT_COLL_REDUCE;
    h->first.send = o->send ? h->lsend : NULL;
    h->first.recv = h->lrecv;
    int rc = weft__comm_post(h->c->node, &h->first, NULL);
    if (rc == 0)
        rc = sub_post(h->c->net, o, WEFT_COLL_ALLREDUCE, 0, o->count, NULL, h->nrecv, "ranks", NULL);
    if (rc == 0)
        rc = sub_post(h->c->node, o, WEFT_COLL_BROADCAST, 0, o->count, NULL, h->lrecv, "node", out);
    return rc;
}

/* Broadcast: the root's value to its rank's first buffer (and the rest),
 * across, then out. */
static int hybrid_broadcast(hybrid_op *h, weft_task **out)
{
    const weft_coll *o = h->o;
    unsigned me = h->me, rr = h->rr;
    int rc = 0;
    h->nrecv[me] = h->lrecv[0];
    if (me == rr) {
        h->first.root = h->rj;
        h->first.send = o->send ? h->lsend : NULL;
        h->first.recv = h->lrecv;
        rc = weft__comm_post(h->c->node, &h->first, NULL);
    }
    if (rc == 0)
        rc = sub_post(h->c->net, o, WEFT_COLL_BROADCAST, rr, o->count, NULL, h->nrecv, "ranks", me == rr ? out : NULL);
    if (rc == 0 && me != rr)
        rc = sub_post(h->c->node, o, WEFT_COLL_BROADCAST, 0, o->count, NULL, h->lrecv, "node", out);
    return rc;
}

/* Reduce: node reduce, on the root's rank to the root itself, elsewhere to
 * a staging buffer at the first GPU (a caller's buffer off the root is not
 * written); then a reduce across the ranks in place. */
static int hybrid_reduce(hybrid_op *h, weft_task **out)
{
    const weft_coll *o = h->o;
    weft_data *srecv[WEFT__COMM_MAX] = {0};
    if (h->me == h->rr) {
        h->first.root = h->rj;
        h->first.send = o->send ? h->lsend : NULL;
        h->first.recv = h->lrecv;
        h->nrecv[h->me] = h->lrecv[h->rj];
    } else {
        srecv[0] = h->S;
        h->first.root = 0;
        h->first.send = o->send ? h->lsend : h->lrecv; /* in place, recv[k] holds the input and stays */
        h->first.recv = srecv;
        h->nrecv[h->me] = h->S;
    }
    int rc = weft__comm_post(h->c->node, &h->first, NULL);
    if (rc == 0)
        rc = sub_post(h->c->net, o, WEFT_COLL_REDUCE, h->rr, o->count, NULL, h->nrecv, "ranks", out);
    return rc;
}

/* All-gather: this rank's blocks to its first GPU's recv, at their places;
 * the ranks' blocks between the ranks; then that buffer to the rest. */
static int hybrid_allgather(hybrid_op *h, weft_task **out)
{
    weft__comm *c = h->c;
    const weft_coll *o = h->o;
    unsigned L = h->L, R = h->R, me = h->me;
    size_t B = h->B;
    weft_data **lsend = h->lsend, **lrecv = h->lrecv;
    weft_xfer *x = h->x;
    *h->ca = (copy_arg){0, c->me * B, B};
    h->ca_used = true;
    int rc = copy_post(c->rt, c->node->gpu[0], lsend[0], lrecv[0], h->ca, o, o->deps, o->ndeps, NULL);
    size_t k = 0;
    for (unsigned j = 1; j < L; j++)
        x[k++] = (weft_xfer){j, 0, lsend[j], 0, 0, lrecv[0], (c->me + j) * B, 0, B, 0};
    if (rc == 0 && k)
        rc = weft__comm_exchange(c->node, x, k, h->name, NULL);
    k = 0;
    for (unsigned r = 0; r < R; r++) /* the whole group, the same on every rank (others' sides NULL) */
        for (unsigned t = 0; t < R; t++)
            if (r != t) {
                size_t off = c->base[r] * B, bytes = (c->base[r + 1] - c->base[r]) * B;
                x[k++] = (weft_xfer){r, t, r == me ? lrecv[0] : NULL, off, 0, t == me ? lrecv[0] : NULL, off, 0,
                                     bytes, 0};
            }
    char rn[32];
    snprintf(rn, sizeof rn, "%s (ranks)", h->nm);
    if (rc == 0)
        rc = weft__comm_exchange(c->net, x, k, rn, NULL);
    if (rc == 0)
        rc = sub_post(c->node, o, WEFT_COLL_BROADCAST, 0, o->count * h->n, NULL, lrecv, "node", out);
    return rc;
}

/* Reduce-scatter: node reduce of the whole input to a staging buffer at
 * the first GPU; across the ranks a reduce-scatter of the ranks' blocks (as
 * many GPUs everywhere) or an all-reduce of it all; this rank's blocks out
 * to its members. */
static int hybrid_reduce_scatter(hybrid_op *h, weft_task **out)
{
    weft__comm *c = h->c;
    const weft_coll *o = h->o;
    unsigned L = h->L, me = h->me;
    size_t B = h->B;
    weft_data **lrecv = h->lrecv;
    weft_data *srecv[WEFT__COMM_MAX] = {0};
    srecv[0] = h->S;
    h->first.op = WEFT_COLL_REDUCE;
    h->first.root = 0;
    h->first.count = o->count * h->n;
    h->first.send = h->lsend;
    h->first.recv = srecv;
    int rc = weft__comm_post(c->node, &h->first, NULL);
    weft_data *X; /* where this rank's blocks are, from offset xoff */
    size_t xoff;
    if (h->even) {
        X = L > 1 ? h->T : lrecv[0];
        xoff = 0;
        h->nsend[me] = h->S;
        h->nrecv[me] = X;
        if (rc == 0)
            rc = sub_post(c->net, o, WEFT_COLL_REDUCE_SCATTER, 0, o->count * L, h->nsend, h->nrecv, "ranks",
                          L > 1 ? NULL : out);
    } else {
        X = h->S;
        xoff = c->me * B;
        h->nrecv[me] = h->S;
        if (rc == 0)
            rc = sub_post(c->net, o, WEFT_COLL_ALLREDUCE, 0, o->count * h->n, NULL, h->nrecv, "ranks", NULL);
    }
    if (X == lrecv[0])
        return rc;
    weft_task *parts[2] = {NULL, NULL};
    *h->ca = (copy_arg){xoff, 0, B};
    if (rc == 0) {
        h->ca_used = true;
        rc = copy_post(c->rt, c->node->gpu[0], X, lrecv[0], h->ca, o, NULL, 0, out ? &parts[0] : NULL);
    }
    size_t k = 0;
    for (unsigned j = 1; j < L; j++)
        h->x[k++] = (weft_xfer){0, j, X, xoff + j * B, 0, lrecv[j], 0, 0, B, 0};
    if (rc == 0 && k)
        rc = weft__comm_exchange(c->node, h->x, k, h->name, out ? &parts[1] : NULL);
    char jn[32];
    snprintf(jn, sizeof jn, "%s (end)", h->nm);
    int jrc = join_post(c->rt, parts, 2, jn, rc == 0 ? out : NULL);
    if (rc == 0)
        rc = jrc;
    return rc;
}

/* What h allocated goes: the copy argument no task took, and the staging
 * buffers to the tasks that free them after the parts. */
static void hybrid_finish(hybrid_op *h)
{
    if (!h->ca_used)
        weft__free(h->ca);
    /* (a part that failed to post: the parts before it run; the ranks'
     * operation numbers stay in step, as every rank posts the same parts) */
    stage_release(h->c->rt, h->st, h->nm);
    weft__free(h->nsend);
    weft__free(h->nrecv);
    weft__free(h->x);
}

int weft__hybrid_post(weft__comm *c, const weft_coll *o, weft_task **out)
{
    static const char fn[] = "weft_comm_post";
    if (!o)
        return weft__error(WEFT_EINVAL, "%s: operation is NULL", fn);
    int rc = hybrid_check(c, o, fn);
    if (rc)
        return rc;
    hybrid_op h;
    if ((rc = hybrid_prepare(&h, c, o, fn)) != 0)
        return rc;
    switch (o->op) {
    case WEFT_COLL_ALLREDUCE:
        rc = hybrid_allreduce(&h, out);
        break;
    case WEFT_COLL_BROADCAST:
        rc = hybrid_broadcast(&h, out);
        break;
    case WEFT_COLL_REDUCE:
        rc = hybrid_reduce(&h, out);
        break;
    case WEFT_COLL_ALLGATHER:
        rc = hybrid_allgather(&h, out);
        break;
    default: /* WEFT_COLL_REDUCE_SCATTER */
        rc = hybrid_reduce_scatter(&h, out);
        break;
    }
    hybrid_finish(&h);
    return rc;
}

int weft__hybrid_exchange(weft__comm *c, const weft_xfer *x, size_t n, const char *name, weft_task **out)
{
    static const char fn[] = "weft_comm_exchange";
    if (n && !x)
        return weft__error(WEFT_EINVAL, "%s: n is %zu but x is NULL", fn, n);
    weft_xfer *local = n ? weft__alloc(n * sizeof *local) : NULL, *remote = n ? weft__alloc(n * sizeof *remote) : NULL;
    if (n && (!local || !remote)) {
        weft__free(local);
        weft__free(remote);
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    }
    size_t nl = 0, nr = 0;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (x[i].from >= c->n || x[i].to >= c->n) {
            rc = weft__error(WEFT_EINVAL, "%s: transfer %zu is from member %u to %u, the communicator has %u", fn, i,
                             x[i].from, x[i].to, c->n);
            break;
        }
        unsigned rf = rank_of(c, x[i].from), rt = rank_of(c, x[i].to);
        if (rf != rt) { /* between ranks: on net, with ranks as members */
            remote[nr] = x[i];
            remote[nr].from = rf;
            remote[nr].to = rt;
            nr++;
        } else if (rf == c->net->me) { /* within this rank: on node */
            local[nl] = x[i];
            local[nl].from -= c->me;
            local[nl].to -= c->me;
            nl++;
        }
    }
    weft_task *parts[2] = {NULL, NULL};
    if (rc == 0 && nl)
        rc = weft__comm_exchange(c->node, local, nl, name, &parts[0]);
    if (rc == 0) /* every rank posts the ranks' part, even empty: the numbers stay in step */
        rc = weft__comm_exchange(c->net, remote, nr, name, &parts[1]);
    weft__free(local);
    weft__free(remote);
    if (rc == 0 && out) { /* one task that ends when both parts have */
        weft_task *deps[2];
        size_t nd = 0;
        for (int k = 0; k < 2; k++)
            if (parts[k])
                deps[nd++] = parts[k];
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = join_body;
        d.deps = deps;
        d.ndeps = nd;
        d.name = name ? name : "exchange";
        rc = weft_spawn(c->rt, &d, out);
    }
    for (int k = 0; k < 2; k++)
        if (parts[k])
            weft_task_release(parts[k]);
    return rc;
}
