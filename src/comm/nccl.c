/*
 * comm/nccl.c — the NCCL backend: communicators over CUDA devices.
 *
 * Compiled whenever nccl.h is found; NCCL itself is loaded (dlopen of
 * libnccl.so.2) when the first communicator over CUDA devices is created,
 * so that libweft runs where NCCL is absent (creation then fails, saying
 * so).  One process drives every member: ncclCommInitAll makes a
 * communicator per member (rank k on member k's CUDA device), and each
 * operation is one NCCL group over the members' streams — the task's
 * streams, already ordered after what it follows — queued under the launch
 * lock, so that operations are queued in one order on every device.
 */
#include "comm/comm.h"
#include "data/reduce.h"
#include "device/device.h"

#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

/* The NCCL functions used, resolved once (under load_lock). */
static struct {
    bool tried, ok;
    char why[160];
    ncclResult_t (*comm_init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                           cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*reduce_scatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                   cudaStream_t);
    ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
    ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
} nccl;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static bool load(void)
{
    pthread_mutex_lock(&load_lock);
    if (!nccl.tried) {
        nccl.tried = true;
        void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        if (!h)
            h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            snprintf(nccl.why, sizeof nccl.why, "NCCL could not be loaded (%s)", dlerror());
        } else {
#define SYM(field, name) (*(void **)&nccl.field = dlsym(h, name)) != NULL
            nccl.ok = SYM(comm_init_all, "ncclCommInitAll") && SYM(comm_destroy, "ncclCommDestroy") &&
                      SYM(error_string, "ncclGetErrorString") && SYM(group_start, "ncclGroupStart") &&
                      SYM(group_end, "ncclGroupEnd") && SYM(all_reduce, "ncclAllReduce") &&
                      SYM(broadcast, "ncclBroadcast") && SYM(reduce, "ncclReduce") &&
                      SYM(all_gather, "ncclAllGather") && SYM(reduce_scatter, "ncclReduceScatter") &&
                      SYM(send, "ncclSend") && SYM(recv, "ncclRecv");
#undef SYM
            if (!nccl.ok)
                snprintf(nccl.why, sizeof nccl.why, "the NCCL found lacks a function Weft uses (%s)", dlerror());
        }
    }
    bool ok = nccl.ok;
    pthread_mutex_unlock(&load_lock);
    return ok;
}

static ncclDataType_t nccl_type(unsigned key)
{
    switch (key & WEFT_RED_TYPE_MASK) {
    case WEFT_RED_I32: return ncclInt32;
    case WEFT_RED_I64: return ncclInt64;
    case WEFT_RED_U32: return ncclUint32;
    case WEFT_RED_U64: return ncclUint64;
    case WEFT_RED_F32: return ncclFloat32;
    default: return ncclFloat64;
    }
}

static ncclRedOp_t nccl_op(unsigned key)
{
    switch (key & WEFT_RED_OP_MASK) {
    case WEFT_RED_MIN: return ncclMin;
    case WEFT_RED_MAX: return ncclMax;
    default: return ncclSum;
    }
}

static int nopen(weft__comm *c, const void *group, char *why, size_t len)
{
    (void)group;
    if (!load()) {
        snprintf(why, len, "%s", nccl.why);
        return WEFT_EINVAL;
    }
    ncclComm_t *comms = weft__alloc(c->n * sizeof *comms);
    int devs[WEFT__COMM_MAX];
    if (!comms)
        return WEFT_ENOMEM;
    for (unsigned k = 0; k < c->n; k++)
        devs[k] = c->device[k]->ordinal;
    ncclResult_t r = nccl.comm_init_all(comms, (int)c->n, devs);
    if (r != ncclSuccess) {
        snprintf(why, len, "ncclCommInitAll failed (%s)", nccl.error_string(r));
        weft__free(comms);
        return WEFT_EDEVICE;
    }
    c->impl = comms;
    return 0;
}

static void nclose(weft__comm *c)
{
    ncclComm_t *comms = c->impl;
    for (unsigned k = 0; comms && k < c->n; k++)
        nccl.comm_destroy(comms[k]);
    weft__free(comms);
    c->impl = NULL;
}

static int npost(weft__comm *c, const weft_ctx *ctx, const weft__coll_run *r, const bool *part, void **state)
{
    *state = NULL;
    ncclComm_t *comms = c->impl;
    ncclDataType_t t = nccl_type(r->key);
    ncclRedOp_t op = nccl_op(r->key);
    ncclResult_t res = ncclSuccess;
    weft__comm_launch_lock();
    nccl.group_start();
    if (r->op == 0) {
        for (size_t i = 0; i < r->nxfer && res == ncclSuccess; i++) {
            const weft__xfer_run *x = &r->xfer[i];
            cudaStream_t sf = weft__comm_stream(c, ctx, r->setk[x->from]);
            cudaStream_t st = weft__comm_stream(c, ctx, r->setk[x->to]);
            for (size_t row = 0; row < x->rows && res == ncclSuccess; row++) {
                res = nccl.send(x->src + row * x->src_pitch, x->bytes, ncclUint8, (int)x->to, comms[x->from], sf);
                if (res == ncclSuccess)
                    res = nccl.recv(x->dst + row * x->dst_pitch, x->bytes, ncclUint8, (int)x->from, comms[x->to],
                                    st);
            }
        }
    } else {
        for (unsigned k = 0; k < c->n && res == ncclSuccess; k++) {
            if (!part[k])
                continue;
            cudaStream_t s = weft__comm_stream(c, ctx, r->setk[k]);
            void *out = r->recv[k];
            const void *in = r->send[k];
            switch (r->op) {
            case WEFT_COLL_ALLREDUCE:
                res = nccl.all_reduce(in, out, r->count, t, op, comms[k], s);
                break;
            case WEFT_COLL_BROADCAST:
                res = nccl.broadcast(in, out ? out : (void *)in, r->count, t, (int)r->root, comms[k], s);
                break;
            case WEFT_COLL_REDUCE:
                res = nccl.reduce(in, out, r->count, t, op, (int)r->root, comms[k], s);
                break;
            case WEFT_COLL_ALLGATHER:
                res = nccl.all_gather(in, out, r->count, t, comms[k], s);
                break;
            default:
                res = nccl.reduce_scatter(in, out, r->count, t, op, comms[k], s);
                break;
            }
        }
    }
    ncclResult_t end = nccl.group_end();
    weft__comm_launch_unlock();
    if (res == ncclSuccess)
        res = end;
    if (res != ncclSuccess) {
        fprintf(stderr, "weft: NCCL refused '%s' (%s)\n", r->name, nccl.error_string(res));
        return WEFT_EDEVICE;
    }
    return 0;
}

const weft__comm_engine weft__nccl_engine = {
    .name = "nccl",
    .kind = "cuda",
    .open = nopen,
    .post = npost,
    .close = nclose,
};
