/*
 * data/reduce.c — reductions (data/reduce.h): the reducers' private copies
 * ("partials"), their identity fill, their eviction to host memory, and
 * their combination into the data's value on the host, in spawn order.
 */
#include "data/reduce.h"

#include <math.h>
#include <string.h>

size_t weft__red_elem(unsigned mode)
{
    switch (mode & WEFT_RED_TYPE_MASK) {
    case WEFT_RED_I32:
    case WEFT_RED_U32:
    case WEFT_RED_F32:
        return 4;
    case WEFT_RED_I64:
    case WEFT_RED_U64:
    case WEFT_RED_F64:
        return 8;
    default:
        return 0;
    }
}

bool weft__red_op_known(unsigned mode)
{
    unsigned op = mode & WEFT_RED_OP_MASK;
    return op == WEFT_RED_SUM || op == WEFT_RED_MIN || op == WEFT_RED_MAX;
}

/* Whether partials may be combined in any order with the same result
 * (integers: wrapping sums, min, max).  Floating point follows the spawn
 * order (sums round, NaN payloads differ), and so do user reductions
 * (associative, perhaps not commutative). */
static bool any_order(unsigned key)
{
    unsigned t = key & WEFT_RED_TYPE_MASK;
    return (key & WEFT_RED_OP_MASK) != WEFT_RED_USER && t != WEFT_RED_F32 && t != WEFT_RED_F64;
}

/* Whether partials p and q reduce with the same operator (and type). */
static bool same_op(const weft__partial *p, const weft__partial *q)
{
    return p->key == q->key && p->user == q->user;
}

/* ------------------------------------------------------------------------ */
/* User reductions' numbers                                                  */
/* ------------------------------------------------------------------------ */

/* The process's user reductions by number.  numbers_lock protects claiming
 * and giving back a number (owner from NULL and back); a lookup reads
 * without it: owner (acquire) first, and rec only when owner is the
 * caller's runtime, which is alive while it calls. */
static pthread_mutex_t numbers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const void *_Atomic owner;         /* the runtime handle, or NULL: free */
    weft__reduction *_Atomic rec;
} numbers[WEFT__RED_MAX_USER + 1];
static unsigned numbers_next = 1;      /* where the search for a free one starts (under the lock) */

int weft__reduction_number(weft__reduction *u)
{
    int rc = WEFT_ENOMEM;
    pthread_mutex_lock(&numbers_lock);
    for (unsigned k = 0; k < WEFT__RED_MAX_USER; k++) {
        unsigned id = 1 + (numbers_next - 1 + k) % WEFT__RED_MAX_USER;
        if (atomic_load_explicit(&numbers[id].owner, memory_order_relaxed))
            continue;
        u->id = id;
        atomic_store_explicit(&numbers[id].rec, u, memory_order_relaxed);
        atomic_store_explicit(&numbers[id].owner, u->rt_handle, memory_order_release);
        numbers_next = id % WEFT__RED_MAX_USER + 1; /* (numbers are reused last: a stale one is caught longer) */
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&numbers_lock);
    return rc;
}

const weft__reduction *weft__reduction_find(const void *h, unsigned id)
{
    if (id == 0 || id > WEFT__RED_MAX_USER || atomic_load_explicit(&numbers[id].owner, memory_order_acquire) != h)
        return NULL;
    return atomic_load_explicit(&numbers[id].rec, memory_order_relaxed);
}

void weft__reduction_free_all(weft__reduction *list)
{
    while (list) {
        weft__reduction *next = list->next;
        pthread_mutex_lock(&numbers_lock);
        atomic_store_explicit(&numbers[list->id].owner, NULL, memory_order_relaxed);
        atomic_store_explicit(&numbers[list->id].rec, NULL, memory_order_relaxed);
        pthread_mutex_unlock(&numbers_lock);
        weft__free(list->identity);
        weft__free(list);
        list = next;
    }
}

/* ------------------------------------------------------------------------ */
/* The operators                                                             */
/* ------------------------------------------------------------------------ */

/* Floating-point min and max: -0.0 below +0.0, NaN wins (the left one). */
#define FMIN(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : ((b) < (a) || ((b) == (a) && signbit(b))) ? (b) : (a))
#define FMAX(a, b) (isnan(a) ? (a) : isnan(b) ? (b) : ((b) > (a) || ((b) == (a) && !signbit(b))) ? (b) : (a))
#define IMIN(a, b) ((b) < (a) ? (b) : (a))
#define IMAX(a, b) ((b) > (a) ? (b) : (a))
#define ADD(a, b) ((a) + (b))

/* dst[i] = dst[i] OP src[i] over n bytes of elements of type T (through
 * memcpy: the user's memory need not be aligned). */
#define LOOP(T, OP)                                                                                          \
    do {                                                                                                     \
        for (size_t i = 0; i + sizeof(T) <= n; i += sizeof(T)) {                                             \
            T a, b;                                                                                          \
            memcpy(&a, (char *)dst + i, sizeof a);                                                           \
            memcpy(&b, (const char *)src + i, sizeof b);                                                     \
            a = OP(a, b);                                                                                    \
            memcpy((char *)dst + i, &a, sizeof a);                                                           \
        }                                                                                                    \
    } while (0)

/* The three operators over one type: sums of T_SUM (unsigned for the
 * integers: they wrap), min and max with MINF / MAXF. */
#define BY_OP(T, T_SUM, MINF, MAXF)                                                                          \
    do {                                                                                                     \
        switch (key & WEFT_RED_OP_MASK) {                                                                    \
        case WEFT_RED_SUM:                                                                                   \
            LOOP(T_SUM, ADD);                                                                                \
            break;                                                                                           \
        case WEFT_RED_MIN:                                                                                   \
            LOOP(T, MINF);                                                                                   \
            break;                                                                                           \
        default:                                                                                             \
            LOOP(T, MAXF);                                                                                   \
            break;                                                                                           \
        }                                                                                                    \
    } while (0)

/* dst = dst OP src over n bytes: a user reduction's combine (user set),
 * or the built-in operator and type of key. */
static void combine(unsigned key, const weft__reduction *user, void *dst, const void *src, size_t n)
{
    if (user) {
        user->combine(dst, src, n / user->elem, user->arg);
        return;
    }
    switch (key & WEFT_RED_TYPE_MASK) {
    case WEFT_RED_I32:
        BY_OP(int32_t, uint32_t, IMIN, IMAX);
        break;
    case WEFT_RED_I64:
        BY_OP(int64_t, uint64_t, IMIN, IMAX);
        break;
    case WEFT_RED_U32:
        BY_OP(uint32_t, uint32_t, IMIN, IMAX);
        break;
    case WEFT_RED_U64:
        BY_OP(uint64_t, uint64_t, IMIN, IMAX);
        break;
    case WEFT_RED_F32:
        BY_OP(float, float, FMIN, FMAX);
        break;
    default:
        BY_OP(double, double, FMIN, FMAX);
        break;
    }
}

#define FILL(T, v)                                                                                           \
    do {                                                                                                     \
        T x = (v);                                                                                           \
        for (size_t i = 0; i + sizeof(T) <= n; i += sizeof(T))                                               \
            memcpy((char *)dst + i, &x, sizeof x);                                                           \
    } while (0)

/* A user reduction's identity in every element of dst (n bytes). */
static void fill_user_identity(const weft__reduction *user, void *dst, size_t n)
{
    if (!user->identity) {
        user->init(dst, n / user->elem, user->arg);
        return;
    }
    for (size_t i = 0; i + user->elem <= n; i += user->elem)
        memcpy((char *)dst + i, user->identity, user->elem);
}

/* The operator's identity in every element of dst (n bytes). */
static void fill_identity(unsigned key, const weft__reduction *user, void *dst, size_t n)
{
    if (user) {
        fill_user_identity(user, dst, n);
        return;
    }
    unsigned op = key & WEFT_RED_OP_MASK;
    bool sum = op == WEFT_RED_SUM, min = op == WEFT_RED_MIN;
    switch (key & WEFT_RED_TYPE_MASK) {
    case WEFT_RED_I32:
        FILL(int32_t, sum ? 0 : min ? INT32_MAX : INT32_MIN);
        break;
    case WEFT_RED_I64:
        FILL(int64_t, sum ? 0 : min ? INT64_MAX : INT64_MIN);
        break;
    case WEFT_RED_U32:
        FILL(uint32_t, sum ? 0 : min ? UINT32_MAX : 0);
        break;
    case WEFT_RED_U64:
        FILL(uint64_t, sum ? 0 : min ? UINT64_MAX : 0);
        break;
    case WEFT_RED_F32: /* -0.0: x + -0.0 is x for every x, +0.0 and -0.0 included */
        FILL(float, sum ? -0.0f : min ? INFINITY : -INFINITY);
        break;
    default:
        FILL(double, sum ? -0.0 : min ? (double)INFINITY : -(double)INFINITY);
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Partials                                                                  */
/* ------------------------------------------------------------------------ */

/* A partial's shape: the handle's interior, rows packed (in_bytes apart);
 * for data that is not a tile, one row of all its bytes.  Its allocation
 * is the handle's size (a tile's span), as a replica's, for the accounting
 * of a device's memory; only the first pbytes are used. */
static size_t pbytes(const weft__data *d) { return d->in_rows * d->in_bytes; }

/* value OP partial, row by row, into the interior of d's host copy. */
static void combine_into(weft__data *d, const weft__partial *p, const void *src)
{
    for (size_t r = 0; r < d->in_rows; r++)
        combine(p->key, p->user, weft__data_at(d, 0, d->in_r0 + r, d->in_c0), (const char *)src + r * d->in_bytes,
                d->in_bytes);
}

/* Its task has finished and no longer touches it. */
static bool finished(weft__partial *p)
{
    return atomic_load_explicit(&p->state, memory_order_acquire) >= WEFT__PART_DONE &&
           atomic_load(&p->r.pins) == 0;
}

static bool done(weft__partial *p) { return atomic_load(&p->state) == WEFT__PART_DONE; }

/* Give p's memory back (d's lock held). */
static void partial_memory_free(weft__data *d, weft__partial *p)
{
    if (!p->r.ptr)
        return;
    if (p->dev) {
        weft__data_lru_unlink(d, p->dev, &p->r);
        d->devs[p->dev]->ops->mem_free(d->devs[p->dev], p->r.ptr, d->size);
        atomic_fetch_sub(&d->devs[p->dev]->replicas, weft__device_bytes(d->size));
    } else {
        d->devs[0]->ops->mem_free(d->devs[0], p->r.ptr, d->size);
    }
    p->r.ptr = NULL;
    p->dev = 0;
}

/* Take *pp out of d's list and free it (d's lock held). */
static void partial_remove(weft__data *d, weft__partial **pp, weft__partial *prev)
{
    weft__partial *p = *pp;
    *pp = p->next;
    if (d->partials_tail == p)
        d->partials_tail = prev;
    partial_memory_free(d, p);
    weft__free(p);
    atomic_store_explicit(&d->has_partials, d->partials != NULL, memory_order_release);
}

weft__partial *weft__reduce_new(unsigned mode, const weft__reduction *user)
{
    weft__partial *p = weft__alloc(sizeof *p);
    if (!p)
        return NULL;
    memset(p, 0, sizeof *p);
    p->r.tag = WEFT__TAG_GARBAGE;
    p->r.partial = true;
    atomic_init(&p->r.pins, 0);
    atomic_init(&p->state, WEFT__PART_WAITING);
    p->key = weft__red_key(mode);
    p->user = user;
    WEFT__CHECK((p->key & WEFT_RED_OP_MASK) != WEFT_RED_USER || user); /* (the spawn checked its number) */
    return p;
}

void weft__reduce_discard(weft__partial *p) { weft__free(p); }

void weft__reduce_enlist(weft__data *d, weft__partial *p, uint64_t seq)
{
    p->r.owner = d;
    p->seq = seq;
    pthread_mutex_lock(&d->lock);
    /* Spawns naming d link in id order (its history's lock): at the end. */
    WEFT__CHECK(!d->partials_tail || d->partials_tail->seq < seq);
    p->next = NULL;
    if (d->partials_tail)
        d->partials_tail->next = p;
    else
        d->partials = p;
    d->partials_tail = p;
    atomic_store_explicit(&d->has_partials, true, memory_order_release);
    pthread_mutex_unlock(&d->lock);
}

/* Combine what can be combined now without copies from devices (d's lock
 * held, a reducer starting): finished partials of failed tasks are
 * dropped, and done ones in host memory are combined into the host's value
 * — each once every earlier partial is combined (spawn order), or, for
 * integers, once every earlier one left has its operator and type (they
 * commute).  A finished partial means that every task before its group has
 * finished: the value may be read then, and is brought to the host for it
 * only if may_fetch.  Best effort. */
static void compact(weft__data *d, bool may_fetch)
{
    bool host = weft__rep_valid(d, 0), wrote = false;
    if (!host && may_fetch)
        for (weft__partial *p = d->partials; p; p = p->next)
            if (finished(p) && done(p) && p->dev == 0) {
                host = weft__data_to_host_now(d) == 0;
                break;
            }
    weft__partial *prev = NULL, *first_left = NULL;
    bool mixed = false; /* partials left before here of different keys */
    for (weft__partial **pp = &d->partials; *pp;) {
        weft__partial *p = *pp;
        bool fin = finished(p);
        if (fin && !done(p)) {
            partial_remove(d, pp, prev);
            continue;
        }
        bool turn = !first_left || (any_order(p->key) && !mixed && same_op(first_left, p));
        if (fin && p->dev == 0 && host && turn) {
            combine_into(d, p, p->r.ptr);
            wrote = true;
            partial_remove(d, pp, prev);
            continue;
        }
        if (!first_left)
            first_left = p;
        else
            mixed |= !same_op(p, first_left);
        prev = p;
        pp = &p->next;
    }
    if (wrote) /* the host's copy holds the value now */
        weft__data_reset_to_host(d);
}

int weft__reduce_acquire(weft__data *d, unsigned dev, weft__partial *p)
{
    if (dev >= d->nrep)
        dev = 0; /* a device added after registration: host memory */
    pthread_mutex_lock(&d->lock);
    int rc = 0;
    if (!d->image || d->image_key != p->key || d->image_user != p->user) {
        /* (The old image is no longer read: the tasks that filled from it
         * have finished, as this one follows them.) */
        void *img = weft__alloc(pbytes(d));
        if (!img) {
            rc = WEFT_ENOMEM;
        } else {
            fill_identity(p->key, p->user, img, pbytes(d));
            weft__free(d->image);
            d->image = img;
            d->image_key = p->key;
            d->image_user = p->user;
        }
    }
    if (rc == 0 && !d->tile) /* (a tile's value is its family's: combined under its lock, data/tile.c) */
        compact(d, dev == 0);
    if (rc == 0) {
        rc = dev ? weft__data_alloc_evicting(d, dev, &p->r.ptr)
                 : d->devs[0]->ops->mem_alloc(d->devs[0], d->size, &p->r.ptr);
    }
    if (rc == 0) {
        p->dev = dev;
        atomic_fetch_add(&p->r.pins, 1);
        atomic_store(&p->state, WEFT__PART_RUNNING);
    } else {
        p->r.ptr = NULL;
    }
    pthread_mutex_unlock(&d->lock);
    if (rc == 0 && dev)
        weft__data_lru_touch(d, dev, &p->r); /* evictable once its task finished */
    return rc;
}

int weft__reduce_begin(weft__data *d, weft__partial *p, weft__dqueue *q)
{
    /* d->image stays until a group of another operator begins, after this
     * task has finished. */
    if (p->dev == 0) {
        memcpy(p->r.ptr, d->image, pbytes(d));
        return 0;
    }
    return d->devs[p->dev]->ops->copy(q, p->r.ptr, d->image, pbytes(d));
}

void weft__reduce_drop(weft__data *d, weft__partial *p)
{
    if (atomic_load(&p->state) != WEFT__PART_RUNNING)
        return;
    pthread_mutex_lock(&d->lock);
    atomic_store(&p->state, WEFT__PART_WAITING);
    atomic_fetch_sub(&p->r.pins, 1);
    partial_memory_free(d, p);
    pthread_mutex_unlock(&d->lock);
}

void weft__reduce_finish(weft__data *d, weft__partial *p, bool ok)
{
    bool ran = atomic_load(&p->state) == WEFT__PART_RUNNING; /* (only this task changes it until now) */
    unsigned dev = p->dev;                                    /* (it moves only once unpinned) */
    atomic_store_explicit(&p->state, ran && ok ? WEFT__PART_DONE : WEFT__PART_FAILED, memory_order_release);
    /* The last touch of p: it may be evicted, combined and freed from now on. */
    if (ran && atomic_fetch_sub(&p->r.pins, 1) == 1 && dev) {
        atomic_fetch_add(&d->mnodes[dev].unpinned, 1);
        weft__wake(d->ws, &d->mnodes[dev]);
    }
}

/* Partials copied from devices at once, per round of a fold (the copies of
 * a round overlap; one host wait per device and round). */
#define FOLD_BATCH 32

int weft__reduce_fold(weft__data *d, uint64_t upto)
{
    if (!d->partials || d->partials->seq >= upto)
        return 0;
    int rc = weft__data_to_host_now(d);
    void *tmp[FOLD_BATCH] = {NULL};
    bool wrote = false;
    while (rc == 0 && d->partials && d->partials->seq < upto) {
        /* A round: the copies of the next partials on devices queued, */
        bool used[WEFT__MAX_DEVICES] = {false};
        int err[WEFT__MAX_DEVICES] = {0};
        int n = 0;
        for (weft__partial *p = d->partials; p && p->seq < upto && n < FOLD_BATCH; p = p->next) {
            WEFT__CHECK(finished(p)); /* the graph orders the combining task after every reducer before it */
            if (!done(p) || !p->dev)
                continue;
            if (!tmp[n] && !(tmp[n] = weft__alloc(pbytes(d)))) {
                rc = n ? 0 : WEFT_ENOMEM; /* (or a smaller round) */
                break;
            }
            int c = weft__data_copy_out_queue(d, p->dev, tmp[n++], p->r.ptr, pbytes(d));
            used[p->dev] = true;
            if (c && !err[p->dev])
                err[p->dev] = c;
        }
        /* waited for (one wait per device), */
        for (unsigned dev = 1; dev < d->nrep; dev++)
            if (used[dev]) {
                int w = weft__data_copy_out_wait(d, dev);
                if (w && !err[dev])
                    err[dev] = w;
            }
        /* and the partials combined in order, up to the round's last copy
         * or the first that failed (it and the rest stay pending). */
        for (int k = 0; rc == 0 && d->partials && d->partials->seq < upto;) {
            weft__partial *p = d->partials;
            if (done(p) && p->dev) {
                if (k == n)
                    break; /* the next round's */
                if ((rc = err[p->dev]) != 0)
                    break;
                combine_into(d, p, tmp[k++]);
                wrote = true;
            } else if (done(p)) {
                combine_into(d, p, p->r.ptr);
                wrote = true;
            }
            partial_remove(d, &d->partials, NULL);
        }
    }
    for (int i = 0; i < FOLD_BATCH; i++)
        weft__free(tmp[i]);
    if (wrote) /* the host's copy holds the value now */
        weft__data_reset_to_host(d);
    return rc;
}

void weft__reduce_free(weft__data *d)
{
    /* A failed copy leaves those partials out of the user's memory, as a
     * failed copy back does (unregister has no task to report it to). */
    if (weft__reduce_fold(d, UINT64_MAX) != 0)
        while (d->partials)
            partial_remove(d, &d->partials, NULL);
    weft__free(d->image);
    d->image = NULL;
}

bool weft__reduce_evict(weft__data *e, weft__replica *r, unsigned dev)
{
    weft__partial *p = (weft__partial *)r;
    void *host = NULL;
    if (done(p)) { /* to host memory; a failed one is just dropped */
        if (e->devs[0]->ops->mem_alloc(e->devs[0], e->size, &host) != 0)
            return false;
        if (weft__data_copy_out(e, dev, host, r->ptr, pbytes(e)) != 0) {
            e->devs[0]->ops->mem_free(e->devs[0], host, e->size);
            return false;
        }
    }
    e->devs[dev]->ops->mem_free(e->devs[dev], r->ptr, e->size);
    atomic_fetch_sub(&e->devs[dev]->replicas, weft__device_bytes(e->size));
    r->ptr = host;
    p->dev = 0;
    return true;
}

void weft__red_combine(unsigned key, void *dst, const void *src, size_t n) { combine(key, NULL, dst, src, n); }
