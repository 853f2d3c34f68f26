/* comm_check.h — what the communication tests share: the reduction
 * oracle (as weft.h defines the operators), deterministic inputs, and GPU
 * tasks that make a buffer's value on a GPU or read it back there. */
#ifndef WEFT_TEST_COMM_CHECK_H
#define WEFT_TEST_COMM_CHECK_H

#include "check.h"

#include <math.h>

static const unsigned TYPES[6] = {WEFT_RED_I32, WEFT_RED_I64, WEFT_RED_U32,
                                  WEFT_RED_U64, WEFT_RED_F32, WEFT_RED_F64};
static const unsigned OPS[3] = {WEFT_RED_SUM, WEFT_RED_MIN, WEFT_RED_MAX};

static size_t tsize(unsigned key) {
    unsigned t = key & WEFT_RED_TYPE_MASK;
    return t == WEFT_RED_I32 || t == WEFT_RED_U32 || t == WEFT_RED_F32 ? 4 : 8;
}

#define FMIN(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : ((b) < (a) || ((b) == (a) && signbit(b))) ? (b) : (a))
#define FMAX(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : ((b) > (a) || ((b) == (a) && !signbit(b))) ? (b) : (a))
#define IMIN(a, b) ((b) < (a) ? (b) : (a))
#define IMAX(a, b) ((b) > (a) ? (b) : (a))

/* *a = *a OP *b for one element of key's type (the oracle). */
static void apply(unsigned key, void *pa, const void *pb) {
    unsigned op = key & WEFT_RED_OP_MASK;
    switch (key & WEFT_RED_TYPE_MASK) {
#define CASE(TAG, T, TS, MN, MX)                                                           \
    case TAG: {                                                                            \
        T a, b;                                                                            \
        memcpy(&a, pa, sizeof a);                                                          \
        memcpy(&b, pb, sizeof b);                                                          \
        a = op == WEFT_RED_SUM ? (T)((TS)a + (TS)b) : op == WEFT_RED_MIN ? MN(a, b) : MX(a, b); \
        memcpy(pa, &a, sizeof a);                                                          \
        break;                                                                             \
    }
        CASE(WEFT_RED_I32, int32_t, uint32_t, IMIN, IMAX)
        CASE(WEFT_RED_I64, int64_t, uint64_t, IMIN, IMAX)
        CASE(WEFT_RED_U32, uint32_t, uint32_t, IMIN, IMAX)
        CASE(WEFT_RED_U64, uint64_t, uint64_t, IMIN, IMAX)
        CASE(WEFT_RED_F32, float, float, FMIN, FMAX)
    default:
        CASE(0, double, double, FMIN, FMAX)
#undef CASE
    }
}

/* Element i of member k's input: any bits for integers, thirds (whose sums
 * round) for floating point. */
static void value(unsigned key, unsigned k, size_t i, uint64_t seed, void *out) {
    uint64_t h = mix64(seed * 1000003u + k * 7919u + i);
    double x = (double)((int64_t)(h % 20001) - 10000) / 3.0;
    switch (key & WEFT_RED_TYPE_MASK) {
    case WEFT_RED_I32: case WEFT_RED_U32: { uint32_t v = (uint32_t)h; memcpy(out, &v, 4); break; }
    case WEFT_RED_I64: case WEFT_RED_U64: memcpy(out, &h, 8); break;
    case WEFT_RED_F32: { float v = (float)x; memcpy(out, &v, 4); break; }
    default: memcpy(out, &x, 8); break;
    }
}

/* ---- GPU tasks around the operations ------------------------------------ */

typedef struct gpu_job {
    void *ptr;          /* the replica, set by the body */
    size_t bytes;
    const void *from;   /* fill: copy from here (host); NULL: read back into `to` */
    void *to;
} gpu_job;

static int job_kernel(void *arg) {
    gpu_job *j = arg;
    if (j->from)
        memcpy(j->ptr, j->from, j->bytes);
    else
        memcpy(j->to, j->ptr, j->bytes);
    return 0;
}

static int job_body(weft_ctx *ctx, void *arg) {
    gpu_job *j = arg;
    j->ptr = weft_ctx_data(ctx, 0);
    weft_range r = {j->ptr, j->bytes, j->from ? WEFT_RW : WEFT_R};
    return weft_ctx_queue_rw(ctx, 0, job_kernel, j, 0, &r, j->bytes ? 1 : 0);
}

/* A task on GPU g that writes (from) or reads (to) d's first bytes there. */
static void gpu_task(weft_runtime *rt, unsigned g, weft_data *d, gpu_job *j, weft_task **out) {
    char where[16];
    snprintf(where, sizeof where, "gpu:%u", g);
    weft_access a = {d, j->from ? WEFT_RW : WEFT_R}; /* RW: a fill may not cover all of d */
    weft_task *t = test_spawn_at(rt, where, 0.25, job_body, j, &a, 1, out != NULL);
    if (out)
        *out = t;
}

/* Post collective op (key, count, root; send NULL: in place) on c; its
 * task's handle.  A failed post fails the test. */
static weft_task *post_coll(weft_comm *c, unsigned op, unsigned key, size_t count, unsigned root,
                            weft_data *const *send, weft_data *const *recv) {
    weft_coll o;
    weft_coll_init(&o);
    o.op = op;
    o.type = key;
    o.count = count;
    o.root = root;
    o.send = send;
    o.recv = recv;
    weft_task *t = NULL;
    CHECKF(weft_comm_post(c, &o, &t) == 0, "%s", weft_last_error());
    return t;
}

/* What member k of n holds after collective op (key, count elements, root,
 * in place or not) on inputs input[j]: written over want, which holds its
 * buffer before (what the operation does not write stays). */
static void comm_oracle(unsigned op, unsigned key, size_t count, unsigned n, unsigned root, bool in_place,
                        const char *const *input, unsigned k, char *want) {
    size_t E = tsize(key), B = count * E;
    size_t in_b = (op == WEFT_COLL_REDUCE_SCATTER ? count * n : count) * E;
    if (in_place)
        memcpy(want, input[k], in_b);
    switch (op) {
    case WEFT_COLL_ALLREDUCE:
    case WEFT_COLL_REDUCE:
        if (op == WEFT_COLL_REDUCE && k != root)
            break;
        memcpy(want, input[0], B);
        for (unsigned j = 1; j < n; j++)
            for (size_t i = 0; i < count; i++)
                apply(key, want + i * E, input[j] + i * E);
        break;
    case WEFT_COLL_BROADCAST:
        memcpy(want, input[root], B);
        break;
    case WEFT_COLL_ALLGATHER:
        for (unsigned j = 0; j < n; j++)
            memcpy(want + j * B, input[j], B);
        break;
    default:
        memcpy(want, input[0] + k * B, B);
        for (unsigned j = 1; j < n; j++)
            for (size_t i = 0; i < count; i++)
                apply(key, want + i * E, input[j] + k * B + i * E);
        break;
    }
}

#endif
