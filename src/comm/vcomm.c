/*
 * comm/vcomm.c — the virtual communicator: collectives and exchanges over
 * virtual GPUs, with NCCL's semantics, so that every communication path runs
 * (and is tested) without a GPU.
 *
 * An operation queues one part per member taking part, each a kernel on
 * that member's stream (weft__comm_queue: weft_ctx_queue_rw, naming the
 * member's own buffers for the checking mode).  The parts meet at a barrier — the moment every
 * member's stream has reached the operation, as NCCL's kernels wait for
 * their peers — then each does its share of the data movement in host
 * memory (a virtual GPU's memory is the process's), meets the others at a
 * second barrier (no member's buffers are touched by another after its part
 * ends), and stretches its part to the time a ring over the members' peer
 * links would take (the copy model's latency and peer bandwidth per step),
 * counted from the first barrier.
 *
 * Shares: an all-reduce or reduce-scatter splits the elements into one
 * block per member; member k combines block k of every input in member
 * order (so each element's result is the same sequential fold on every
 * run) and writes it to the outputs; a broadcast or all-gather member
 * copies what its own output needs; an exchange's receiver copies its
 * incoming transfers.
 *
 * A member that does not reach the first barrier within the communicator's
 * timeout fails the operation on every member (reported on stderr once).
 * Parts never block a worker: they run on the streams' threads.  The
 * operation's state lives until its task has finished (every part run or
 * skipped: a part refused by the checking mode never runs).
 */
#include "comm/comm.h"
#include "data/reduce.h"
#include "device/device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct vinst vinst;

/* A communicator's state (c->impl): its members' links, as the copy model
 * of member 0's virtual GPU has them. */
typedef struct vlink {
    uint64_t latency_ns;
    double bw;
} vlink;

typedef struct vpart {
    vinst *in;
    unsigned k;                        /* the member */
    uint64_t model_ns;                 /* its modelled duration from the first barrier */
} vpart;

struct vinst {
    weft__comm *c;
    weft__coll_run r;                  /* the operation (xfer: copied, owned) */
    unsigned nparts;                   /* members taking part */
    bool part[WEFT__COMM_MAX];
    /* lock protects arrived, seen, failed, t0 and wakes waiters (cv). */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    unsigned arrived[2];               /* at each barrier */
    bool seen[WEFT__COMM_MAX];         /* reached the first barrier */
    int failed;                        /* 0, or the error every part returns */
    uint64_t t0;                       /* when the first barrier opened */
    vpart parts[WEFT__COMM_MAX];
};

/* The task finished: every part queued has run or was skipped. */
static void inst_free(weft__comm *c, void *state)
{
    (void)c;
    vinst *in = state;
    pthread_mutex_destroy(&in->lock);
    pthread_cond_destroy(&in->cv);
    weft__free((void *)in->r.xfer);
    weft__free(in);
}

static const char *op_name(unsigned op)
{
    switch (op) {
    case WEFT_COLL_ALLREDUCE: return "all-reduce";
    case WEFT_COLL_BROADCAST: return "broadcast";
    case WEFT_COLL_REDUCE: return "reduce";
    case WEFT_COLL_ALLGATHER: return "all-gather";
    case WEFT_COLL_REDUCE_SCATTER: return "reduce-scatter";
    default: return "exchange";
    }
}

/* Fail the operation (under in->lock): every part waiting or to come
 * returns err. */
static void fail_locked(vinst *in, int err)
{
    if (!in->failed)
        in->failed = err;
    pthread_cond_broadcast(&in->cv);
}

/* Barrier b for member k: 0 once every part arrived, or the error. */
static int barrier(vinst *in, unsigned b, unsigned k)
{
    pthread_mutex_lock(&in->lock);
    if (b == 0)
        in->seen[k] = true;
    if (++in->arrived[b] == in->nparts) {
        if (b == 0)
            in->t0 = weft__now_ns();
        pthread_cond_broadcast(&in->cv);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + in->c->timeout_ns;
    until.tv_sec += (time_t)(ns / 1000000000u);
    until.tv_nsec = (long)(ns % 1000000000u);
    while (!in->failed && in->arrived[b] < in->nparts) {
        int rc = pthread_cond_timedwait(&in->cv, &in->lock, &until);
        if (rc == ETIMEDOUT && !in->failed && in->arrived[b] < in->nparts) {
            char late[160];
            size_t at = 0;
            late[0] = '\0';
            for (unsigned j = 0; j < in->c->n && at < sizeof late; j++)
                if (in->part[j] && !in->seen[j])
                    at += (size_t)snprintf(late + at, sizeof late - at, "%s%u (GPU %u)", at ? ", " : "", j,
                                           in->c->gpu[j]);
            fprintf(stderr,
                    "weft: %s '%s' on a communicator of %u GPUs: member%s %s did not take part within %.3f s "
                    "(its stream is behind other work, or its part failed); the operation fails\n",
                    op_name(in->r.op), in->r.name, in->c->n, strchr(late, ',') ? "s" : "", late[0] ? late : "?",
                    (double)in->c->timeout_ns / 1e9);
            fail_locked(in, WEFT_ETIMEDOUT);
        }
    }
    int rc = in->failed;
    pthread_mutex_unlock(&in->lock);
    return rc;
}

/* Elements [lo, hi) of member k's block of n elements split in `parts`. */
static void block(size_t n, unsigned parts, unsigned k, size_t *lo, size_t *hi)
{
    size_t q = n / parts, r = n % parts;
    *lo = k * q + (k < r ? k : r);
    *hi = *lo + q + (k < r);
}

#define TILE_BYTES (32u << 10) /* folded in tiles that stay in cache */

/* Fold elements [lo, hi) (plus `base` elements into each input) of every
 * member's input, in member order, tile by tile through acc (TILE_BYTES),
 * and write each folded tile to the outputs out[0 .. nout-1] at out_at
 * elements (every input read before its outputs are written: in place is
 * fine, as each block belongs to one part). */
static void fold(const vinst *in, char *acc, size_t base, size_t lo, size_t hi, char *const *out, unsigned nout,
                 size_t out_at)
{
    const weft__coll_run *r = &in->r;
    size_t per = TILE_BYTES / r->elem * r->elem;
    for (size_t b0 = lo * r->elem; b0 < hi * r->elem; b0 += per) {
        size_t bytes = hi * r->elem - b0 < per ? hi * r->elem - b0 : per, at = base * r->elem + b0;
        memcpy(acc, (const char *)r->send[0] + at, bytes);
        for (unsigned j = 1; j < in->c->n; j++)
            weft__red_combine(r->key, acc, (const char *)r->send[j] + at, bytes);
        for (unsigned j = 0; j < nout; j++)
            memcpy(out[j] + out_at * r->elem + (b0 - lo * r->elem), acc, bytes);
    }
}

/* Member k's share of the data movement (between the barriers). */
static int share(vinst *in, unsigned k)
{
    const weft__coll_run *r = &in->r;
    unsigned n = in->c->n;
    size_t lo, hi, B = r->count * r->elem;
    switch (r->op) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE:
    case WEFT_COLL_REDUCE_SCATTER: {
        /* all-reduce, reduce: member k's block of the elements, to every
         * output (the root's); reduce-scatter: block k of the inputs, to
         * member k's output */
        char *out[WEFT__COMM_MAX];
        unsigned nout = 0;
        size_t base = 0, at;
        if (r->op == WEFT_COLL_REDUCE_SCATTER) {
            lo = 0;
            hi = r->count;
            base = k * r->count;
            out[nout++] = r->recv[k];
        } else {
            block(r->count, n, k, &lo, &hi);
            for (unsigned j = 0; j < n; j++)
                if (r->op == WEFT_COLL_ALLREDUCE || j == r->root)
                    out[nout++] = r->recv[j];
        }
        at = r->op == WEFT_COLL_REDUCE_SCATTER ? 0 : lo;
        if (hi == lo)
            return 0;
        char *acc = weft__alloc(TILE_BYTES);
        if (!acc)
            return WEFT_ENOMEM;
        fold(in, acc, base, lo, hi, out, nout, at);
        weft__free(acc);
        return 0;
    }
    case WEFT_COLL_BROADCAST:
        if (B && r->recv[k] && r->recv[k] != r->send[r->root])
            memcpy(r->recv[k], r->send[r->root], B);
        return 0;
    case WEFT_COLL_ALLGATHER:
        for (unsigned j = 0; j < n && B; j++)
            memcpy((char *)r->recv[k] + j * B, r->send[j], B);
        return 0;
    default: /* an exchange: what k receives */
        for (size_t i = 0; i < r->nxfer; i++) {
            const weft__xfer_run *x = &r->xfer[i];
            if (x->to != k)
                continue;
            for (size_t row = 0; row < x->rows; row++)
                memcpy(x->dst + row * x->dst_pitch, x->src + row * x->src_pitch, x->bytes);
        }
        return 0;
    }
}

static void sleep_until(uint64_t t)
{
    uint64_t now = weft__now_ns();
    if (now >= t)
        return;
    struct timespec ts = {(time_t)((t - now) / 1000000000u), (long)((t - now) % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* A member's part: the kernel on its stream. */
static int part_run(void *arg)
{
    vpart *p = arg;
    vinst *in = p->in;
    int rc = barrier(in, 0, p->k);
    if (rc == 0) {
        rc = share(in, p->k);
        if (rc) {
            pthread_mutex_lock(&in->lock);
            fail_locked(in, rc);
            pthread_mutex_unlock(&in->lock);
        }
        /* Every part reaches the second barrier (failed or not): the
         * others may still read or write this member's buffers. */
        int rc2 = barrier(in, 1, p->k);
        if (!rc)
            rc = rc2;
    }
    if (rc == 0)
        sleep_until(in->t0 + p->model_ns);
    return rc;
}

/* The modelled duration of member k's part: a ring over n members with
 * per-step latency L and bandwidth W. */
static uint64_t model(const weft__comm *c, const weft__coll_run *r, unsigned k)
{
    const vlink *link = c->impl;
    double L = (double)link->latency_ns, W = link->bw > 0 ? link->bw : 1e30, n = c->n;
    double B = (double)r->count * (double)r->elem, t = 0;
    switch (r->op) {
    case WEFT_COLL_ALLREDUCE:
        t = c->n > 1 ? 2 * (n - 1) * (L + B / n / W * 1e9) : 0;
        break;
    case WEFT_COLL_BROADCAST:
    case WEFT_COLL_REDUCE:
        t = c->n > 1 ? (n - 1) * L + B / W * 1e9 : 0;
        break;
    case WEFT_COLL_ALLGATHER:
    case WEFT_COLL_REDUCE_SCATTER:
        t = (n - 1) * (L + B / W * 1e9);
        break;
    default:
        for (size_t i = 0; i < r->nxfer; i++)
            if (r->xfer[i].to == k)
                t += L + (double)r->xfer[i].bytes * (double)r->xfer[i].rows / W * 1e9;
        break;
    }
    return (uint64_t)t;
}

/* The ranges of member k's own buffers, for the checking mode. */
static size_t ranges_of(const vinst *in, unsigned k, weft_range *out, size_t max)
{
    const weft__coll_run *r = &in->r;
    size_t n = 0, B = r->count * r->elem, N = in->c->n;
    if (r->op == 0) {
        /* Each transfer's extent (rows and the gaps between them): read on
         * the sender; on the receiver RW, not W, so that the checking mode
         * does not poison the gaps.  (Beyond `max`, undeclared: ranges
         * only check.) */
        for (size_t i = 0; i < r->nxfer && n < max; i++) {
            const weft__xfer_run *x = &r->xfer[i];
            size_t span = (x->rows - 1) * (x->from == k ? x->src_pitch : x->dst_pitch) + x->bytes;
            if (x->bytes && x->from == k)
                out[n++] = (weft_range){(void *)x->src, span, WEFT_R};
            else if (x->bytes && x->to == k)
                out[n++] = (weft_range){x->dst, span, WEFT_RW};
        }
        return n;
    }
    size_t in_bytes = r->op == WEFT_COLL_REDUCE_SCATTER ? B * N : B;
    size_t out_bytes = r->op == WEFT_COLL_ALLGATHER ? B * N : B;
    bool reads = r->op != WEFT_COLL_BROADCAST || k == r->root;
    bool writes = r->recv[k] && (r->op != WEFT_COLL_REDUCE || k == r->root);
    if (r->in_place) { /* one buffer, recv[k] (NULL where only read: send[k] is it) */
        if (in_bytes || out_bytes)
            out[n++] = (weft_range){r->recv[k] ? r->recv[k] : (void *)r->send[k],
                                    in_bytes > out_bytes ? in_bytes : out_bytes,
                                    writes ? (reads ? WEFT_RW : WEFT_W) : WEFT_R};
        return n;
    }
    if (reads && in_bytes)
        out[n++] = (weft_range){(void *)r->send[k], in_bytes, WEFT_R};
    if (writes && out_bytes)
        out[n++] = (weft_range){r->recv[k], out_bytes, WEFT_W};
    return n;
}

static int vpost(weft__comm *c, const weft_ctx *ctx, const weft__coll_run *r, const bool *part, void **state)
{
    *state = NULL;
    vinst *in = weft__alloc(sizeof *in);
    if (!in)
        return WEFT_ENOMEM;
    memset(in, 0, sizeof *in);
    in->c = c;
    in->r = *r;
    in->r.xfer = NULL;
    if (r->nxfer) {
        weft__xfer_run *x = weft__alloc(r->nxfer * sizeof *x);
        if (!x) {
            weft__free(in);
            return WEFT_ENOMEM;
        }
        memcpy(x, r->xfer, r->nxfer * sizeof *x);
        in->r.xfer = x;
    }
    for (unsigned k = 0; k < c->n; k++)
        if ((in->part[k] = part[k]))
            in->nparts++;
    pthread_mutex_init(&in->lock, NULL);
    pthread_cond_init(&in->cv, NULL);
    *state = in;
    int rc = 0;
    weft__comm_launch_lock();
    for (unsigned k = 0; k < c->n; k++) {
        if (!part[k])
            continue;
        vpart *p = &in->parts[k];
        p->in = in;
        p->k = k;
        p->model_ns = model(c, &in->r, k);
        if (rc == 0) {
            weft_range rg[64];
            size_t nr = ranges_of(in, k, rg, 64);
            rc = weft__comm_queue(c, ctx, r->setk[k], part_run, p, 0, rg, nr);
        }
    }
    weft__comm_launch_unlock();
    if (rc) { /* the parts queued fail at once */
        pthread_mutex_lock(&in->lock);
        fail_locked(in, WEFT_EDEVICE);
        pthread_mutex_unlock(&in->lock);
    }
    return rc;
}

static int vopen(weft__comm *c, const void *group, char *why, size_t len)
{
    (void)group;
    (void)why;
    (void)len;
    vlink *link = weft__alloc(sizeof *link);
    if (!link)
        return WEFT_ENOMEM;
    weft__vgpu_link(c->device[0], &link->latency_ns, &link->bw);
    c->impl = link;
    return 0;
}

static void vclose(weft__comm *c)
{
    weft__free(c->impl);
    c->impl = NULL;
}

const weft__comm_engine weft__vcomm_engine = {
    .name = "virtual",
    .kind = "vgpu",
    .open = vopen,
    .post = vpost,
    .finish = inst_free,
    .close = vclose,
};
