/*
 * api/comm_ranks.c — a communicator over the GPUs of several ranks
 * (weft_comm_create_mpi with GPUs): members numbered rank by rank, each
 * rank's its own GPUs.  It is two communicators: one over this rank's GPUs
 * (node: the virtual communicator or NCCL, GPU to GPU) and one over the
 * ranks (net: MPI, through host memory), and each operation is composed of
 * operations on them, ordered by the data they name:
 *
 *   all-reduce  node reduce to the rank's first GPU, net all-reduce of that
 *               buffer, node broadcast from it;
 *   broadcast   on the root's rank a node broadcast from the root, then a
 *               net broadcast of the rank's first buffer, then on the other
 *               ranks a node broadcast from it;
 *   exchange    the transfers within this rank on node, those between
 *               ranks on net (every rank derives the same list from the
 *               same group), and a task that ends when both have.
 *
 * A sum is therefore each rank's sum of its members, then those in rank
 * order: deterministic, the same on every rank, but not the flat member
 * order's rounding.
 */
#include "runtime.h"
#include "comm/comm.h"

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
    if (weft__mpi_allgather_counts(net, rc == 0 ? node->n : 0, counts) != 0 && rc == 0)
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
static int sub_post(weft__comm *s, const weft_coll *o, unsigned op, unsigned root, weft_data *const *send,
                    weft_data *const *recv, const char *what, weft_task **out)
{
    weft_coll x = *o;
    char name[32];
    snprintf(name, sizeof name, "%s (%s)", o->name ? o->name : "op", what);
    x.op = op;
    x.root = root;
    x.send = send;
    x.recv = recv;
    x.name = name;
    if (op == WEFT_COLL_BROADCAST)
        x.type &= ~(unsigned)WEFT_RED_OP_MASK;
    x.deps = NULL; /* only the first part follows the caller's dependencies */
    x.ndeps = 0;
    return weft__comm_post(s, &x, out);
}

int weft__hybrid_post(weft__comm *c, const weft_coll *o, weft_task **out)
{
    static const char fn[] = "weft_comm_post";
    if (!o)
        return weft__error(WEFT_EINVAL, "%s: operation is NULL", fn);
    if (o->op != WEFT_COLL_ALLREDUCE && o->op != WEFT_COLL_BROADCAST)
        return weft__error(WEFT_EINVAL, "%s: operation %u across ranks with GPUs: only all-reduce and broadcast so "
                                        "far (use a communicator over the GPUs and one over the ranks)", fn, o->op);
    if (!o->recv)
        return weft__error(WEFT_EINVAL, "%s: recv is NULL", fn);
    if (o->op == WEFT_COLL_BROADCAST && o->root >= c->n)
        return weft__error(WEFT_EINVAL, "%s: broadcast: root %u, the communicator has %u members", fn, o->root, c->n);
    unsigned L = c->nlocal, me = c->net->me, R = c->net->n;
    weft_data *lsend[WEFT__COMM_MAX], *lrecv[WEFT__COMM_MAX];
    for (unsigned j = 0; j < L; j++) {
        lsend[j] = o->send ? o->send[c->me + j] : NULL;
        lrecv[j] = o->recv[c->me + j];
    }
    weft_data **nrecv = weft__alloc(R * sizeof *nrecv); /* the net's: this rank's first buffer at [me] */
    if (!nrecv)
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    memset(nrecv, 0, R * sizeof *nrecv);
    nrecv[me] = lrecv[0];
    int rc = 0;
    weft_coll first = *o; /* the first part follows the caller's dependencies */
    if (o->op == WEFT_COLL_ALLREDUCE) {
        weft_coll x = first;
        x.root = 0;
        x.op = WEFT_COLL_REDUCE;
        x.send = o->send ? lsend : NULL;
        x.recv = lrecv;
        char name[32];
        snprintf(name, sizeof name, "%s (node)", o->name ? o->name : "allreduce");
        x.name = name;
        rc = weft__comm_post(c->node, &x, NULL);
        if (rc == 0)
            rc = sub_post(c->net, o, WEFT_COLL_ALLREDUCE, 0, NULL, nrecv, "ranks", NULL);
        if (rc == 0)
            rc = sub_post(c->node, o, WEFT_COLL_BROADCAST, 0, NULL, lrecv, "node", out);
    } else {
        unsigned rr = rank_of(c, o->root), j = o->root - c->base[rr];
        if (me == rr) { /* the root's value to this rank's first buffer (and the rest) */
            weft_coll x = first;
            x.root = j;
            x.send = o->send ? lsend : NULL;
            x.recv = lrecv;
            char name[32];
            snprintf(name, sizeof name, "%s (node)", o->name ? o->name : "broadcast");
            x.name = name;
            rc = weft__comm_post(c->node, &x, NULL);
        }
        if (rc == 0)
            rc = sub_post(c->net, o, WEFT_COLL_BROADCAST, rr, NULL, nrecv, "ranks", me == rr ? out : NULL);
        if (rc == 0 && me != rr)
            rc = sub_post(c->node, o, WEFT_COLL_BROADCAST, 0, NULL, lrecv, "node", out);
    }
    /* (a part that failed to post: the parts before it run; the ranks'
     * operation numbers stay in step, as every rank posts the same parts) */
    weft__free(nrecv);
    return rc;
}

static int join_body(weft_ctx *ctx, void *arg)
{
    (void)ctx;
    (void)arg;
    return 0;
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
