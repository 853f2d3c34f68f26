/*
 * api/api_data.c — the data-handle functions of weft.h: register, unregister,
 * host address.  The handle itself belongs to the data layer, its access
 * history to the graph layer; this file makes and frees both and keeps the
 * runtime's list of handles.
 */
#include "api/runtime.h"
#include "data/reduce.h"
#include "data/tile.h"
#include "testing.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>

/* Add d to the runtime's list (which destroy frees, newest first). */
static void list_add(weft__rt *rt, weft__data *d)
{
    pthread_mutex_lock(&rt->data_lock);
    d->list_prev = NULL;
    d->list_next = rt->data_list;
    if (rt->data_list)
        rt->data_list->list_prev = d;
    rt->data_list = d;
    pthread_mutex_unlock(&rt->data_lock);
}

static void list_remove(weft__rt *rt, weft__data *d)
{
    pthread_mutex_lock(&rt->data_lock);
    if (d->list_prev)
        d->list_prev->list_next = d->list_next;
    else
        rt->data_list = d->list_next;
    if (d->list_next)
        d->list_next->list_prev = d->list_prev;
    pthread_mutex_unlock(&rt->data_lock);
}

/* A new handle over n bytes at ptr with its history; NULL on ENOMEM. */
static weft__data *data_new(weft__rt *rt, const void *h, void *ptr, size_t n)
{
    void *hist = weft__history_new();
    weft__data *d = hist ? weft__data_new(&rt->waits, h, ptr, n, rt->dev, rt->mnodes, rt->ndev, &rt->copied)
                         : NULL;
    if (!d) {
        weft__history_free(hist);
    } else {
        d->hist = hist;
        d->id = atomic_fetch_add(&rt->next_data_id, 1) + 1;
    }
    return d;
}

int weft_data_register(weft_runtime *h, void *ptr, size_t n, weft_data **out)
{
    weft__clear_error();
    int err;
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_data_register: out is NULL");
    if (n == 0)
        return weft__error(WEFT_EINVAL, "weft_data_register: size is zero");
    weft__rt *rt = weft__rt_enter(h, "weft_data_register", &err, 1, false); /* destroy waits for us */
    if (!rt)
        return err;
    weft__data *d = data_new(rt, h, ptr, n);
    if (!d) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_ENOMEM, "weft_data_register: out of memory");
    }
    atomic_store_explicit(&d->no_memory, ptr == NULL, memory_order_relaxed); /* for WEFT_SCRATCH only */
    uint32_t other = 0;
    uintptr_t lo = 0, hi = 0;
    int rc = ptr ? weft__ranges_add(&rt->ranges, d, weft__history_hand_over, &other, &lo, &hi) : 0;
    if (rc != 0) {
        weft__history_free(d->hist);
        weft__data_free(d);
        weft__rt_leave(rt, 1);
        if (rc == WEFT_ENOMEM)
            return weft__error(rc, "weft_data_register: out of memory");
        return weft__error(rc, "weft_data_register: memory [%p, %p) (%zu bytes) overlaps d%u over [%#jx, %#jx) "
                           "(%ju bytes), which is partitioned into tiles: name that handle or its tiles, not "
                           "another view of part of its memory", ptr, (void *)((char *)ptr + n), n, other,
                           (uintmax_t)lo, (uintmax_t)hi, (uintmax_t)(hi - lo));
    }
    list_add(rt, d);
    *out = weft__handle_encode(d);
    weft__rt_leave(rt, 1);
    return 0;
}

int weft_data_register_device(weft_runtime *h, unsigned i, void *ptr, size_t n, weft_data **out)
{
    weft__clear_error();
    int err;
    if (!out || !ptr || !n)
        return weft__error(WEFT_EINVAL, "weft_data_register_device: %s", !out ? "out is NULL"
                                                                        : !ptr ? "pointer is NULL"
                                                                               : "size is zero");
    weft__rt *rt = weft__rt_enter(h, "weft_data_register_device", &err, 1, false);
    if (!rt)
        return err;
    pthread_mutex_lock(&rt->data_lock);
    unsigned ndev = rt->ndev;
    pthread_mutex_unlock(&rt->data_lock);
    if (i == 0 || i >= ndev) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_EINVAL, "weft_data_register_device: device %u is not a GPU (GPUs are 1 .. %u)", i,
                           ndev - 1);
    }
    weft__data *d = data_new(rt, h, NULL, n);
    if (!d) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_ENOMEM, "weft_data_register_device: out of memory");
    }
    weft__data_live_on(d, i, ptr);
    list_add(rt, d);
    *out = weft__handle_encode(d);
    weft__rt_leave(rt, 1);
    return 0;
}

/* A user reduction from desc for runtime handle h, not numbered yet;
 * NULL on ENOMEM. */
static weft__reduction *reduction_new(const void *h, const weft_reduction_desc *desc)
{
    weft__reduction *u = weft__alloc(sizeof *u);
    if (!u)
        return NULL;
    memset(u, 0, sizeof *u);
    if (desc->identity) {
        if (!(u->identity = weft__alloc(desc->elem_size))) {
            weft__free(u);
            return NULL;
        }
        memcpy(u->identity, desc->identity, desc->elem_size);
    }
    u->rt_handle = h;
    u->elem = desc->elem_size;
    u->init = desc->init;
    u->combine = desc->combine;
    u->arg = desc->arg;
    snprintf(u->name, sizeof u->name, "%s", desc->name ? desc->name : "unnamed");
    return u;
}

/* What is wrong with a reduction's description, or NULL. */
static const char *reduction_desc_problem(const weft_reduction_desc *desc)
{
    if (desc->elem_size == 0)
        return "elem_size is 0 (the bytes of one element)";
    if (!desc->combine)
        return "combine is NULL (it is the operator: inout[i] = inout[i] OP in[i])";
    if (!desc->identity && !desc->init)
        return "neither identity (one element's bytes) nor init is set: a private copy starts as the identity";
    if (desc->identity && desc->init)
        return "both identity and init are set: give one of them";
    return NULL;
}

int weft_reduction_register(weft_runtime *h, const weft_reduction_desc *desc, unsigned *op)
{
    weft__clear_error();
    int err;
    if (!desc || !op)
        return weft__error(WEFT_EINVAL, "weft_reduction_register: %s is NULL", !desc ? "desc" : "op");
    const char *why = reduction_desc_problem(desc);
    if (why)
        return weft__error(WEFT_EINVAL, "weft_reduction_register: %s", why);
    weft__rt *rt = weft__rt_enter(h, "weft_reduction_register", &err, 1, false); /* destroy waits for us */
    if (!rt)
        return err;
    weft__reduction *u = reduction_new(h, desc);
    if (!u || weft__reduction_number(u) != 0) {
        bool full = u != NULL;
        if (u)
            weft__free(u->identity);
        weft__free(u);
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_ENOMEM, "weft_reduction_register: %s",
                           full ? "2047 user reductions are registered already in this process (register each "
                                  "once per runtime, at set-up)"
                                : "out of memory");
    }
    pthread_mutex_lock(&rt->data_lock);
    u->next = rt->reductions;
    rt->reductions = u;
    pthread_mutex_unlock(&rt->data_lock);
    *op = WEFT_RED_USER | (u->id << 20);
    weft__rt_leave(rt, 1);
    return 0;
}

static bool acq_listed(weft__rt *rt, const weft__data *d);

static bool used_by_caller(const weft__data *d)
{
    weft__worker *w = weft__tls_worker;
    if (!w)
        return false;
    for (weft__task *t = w->current; t; t = t->outer)
        for (uint32_t i = 0; i < t->naccess; i++)
            if (t->access[i].data == d)
                return true;
    return false;
}

/* d (closed) is being unregistered and other registered ranges overlap
 * its memory: each of them takes over d's history (the tasks that name d
 * now are followed by its later tasks as they were through d) and stops
 * listing d, so that no new spawn names d for the order.  Where the hand
 * over finds no memory, the neighbour keeps listing d: its spawns then
 * still name d, and wait_unused waits for them too. */
static void hand_over(weft__rt *rt, weft__data *d)
{
    weft__ranges_lock(&rt->ranges);
    weft__ranges_mark_closing(d);
    /* (d's own list does not change while the lock is held) */
    size_t n = weft__ranges_listed(d);
    for (size_t k = 0; k < n; k++) {
        weft__data *nb = weft__ranges_neighbour(d, k);
        if (weft__history_hand_over(d, nb))
            weft__ranges_detach(d, nb);
    }
    weft__ranges_unlock(&rt->ranges);
}

/* Wait until no task uses d; a handle in the range index leaves it then
 * (under the index lock, so that no spawn pins it meanwhile). */
static void wait_unused(weft__rt *rt, weft__data *d)
{
    for (;;) {
        weft__wait_data_unused(rt, d);
        if (!d->range)
            return;
        weft__ranges_lock(&rt->ranges);
        bool gone = weft__ranges_remove_if_unused(d);
        weft__ranges_unlock(&rt->ranges);
        if (gone)
            return;
    }
}

int weft_data_unregister(weft_data *h)
{
    weft__clear_error();
    int err;
    weft__data *d = weft__data_get(h);
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_data_unregister: data is NULL or already unregistered");
    if ((err = weft__refuse_in_callback("weft_data_unregister")) != 0)
        return err;
    if (used_by_caller(d))
        return weft__error(WEFT_EBUSY, "weft_data_unregister: the calling task accesses this data itself (or "
                                       "data whose memory overlaps it)");
    if (d->tile)
        return weft__error(WEFT_EBUSY, "weft_data_unregister: this is a tile; tiles are unregistered with the "
                                       "data they were partitioned from");
    /* Hold an in-flight count for the whole call, so a destroy racing with
     * it waits instead of freeing the handle (and the runtime) under it. */
    weft__rt *rt = weft__rt_enter(atomic_load_explicit(&d->rt_handle, memory_order_relaxed),
                                  "weft_data_unregister", &err, 1, true);
    if (!rt)
        return weft__data_get(h) ? err
                                 : weft__error(WEFT_EINVAL, "weft_data_unregister: data is already unregistered");
    /* Acquired (weft_data_acquire): the wait below would last until the
     * release, which the caller may be the one to make. */
    if (acq_listed(rt, d)) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_EBUSY, "weft_data_unregister: the data (d%u)%s is acquired (weft_data_acquire): "
                                       "release it first (weft_data_release)", d->id,
                           atomic_load(&d->fam) ? ", or one of its tiles," : "");
    }
    /* Pin it ourselves so it cannot be freed between the checks below (the
     * slot may have been reused since the decode above); then close it. */
    weft__data *pinned = weft__data_pin(h);
    if (!pinned) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_EINVAL, "weft_data_unregister: data is already unregistered or being unregistered");
    }
    bool mine = weft__data_close(d);
    weft__data_unpin(d);
    if (!mine) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_EINVAL, "weft_data_unregister: data is already being unregistered");
    }
    if (d->range)
        hand_over(rt, d);
    bool tripped = false;
    weft__family *f = atomic_load(&d->fam);
    if (f) { /* its tiles first: closed (new spawns fail), waited for, freed */
        for (unsigned i = 0; i < f->ntiles; i++)
            (void)weft__data_close(f->tiles[i]);
        for (unsigned i = 0; i < f->ntiles; i++)
            weft__wait_data_unused(rt, f->tiles[i]);
        weft__family_write_back_start(f); /* every device copies its tiles back at once */
        for (unsigned i = 0; i < f->ntiles; i++) {
            weft__data *t = f->tiles[i];
            list_remove(rt, t);
            weft__history_free(t->hist);
            tripped |= weft__data_free(t);
        }
    }
    wait_unused(rt, d);
    list_remove(rt, d);
    weft__history_free(d->hist);
    uint32_t id = d->id;
    tripped |= weft__data_free(d);
    weft__rt_leave(rt, 1);
    if (tripped) /* the checking mode's host watch (data/data.h) */
        return weft__error(WEFT_EDEVICE, "weft_data_unregister: data d%u: " WEFT__WATCH_TRIPPED
                                         "; the data is unregistered", id);
    return 0;
}

int weft_data_host(const weft_data *h, void **ptr, size_t *n)
{
    weft__data *d = weft__data_get(h);
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_data_host: data is NULL or unregistered");
    if (ptr)
        *ptr = d->ptr;
    if (n)
        *n = d->size;
    return 0;
}

int weft_data_partition(weft_data *h, const weft_tiling *t, weft_data **tiles)
{
    weft__clear_error();
    int err;
    if (!t || !tiles)
        return weft__error(WEFT_EINVAL, "weft_data_partition: %s is NULL", t ? "tiles" : "tiling");
    if ((err = weft__refuse_in_callback("weft_data_partition")) != 0)
        return err;
    weft__data *d = weft__data_pin(h);
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_data_partition: data is NULL, unregistered or being unregistered");
    weft__rt *rt = weft__rt_enter(d->rt_handle, "weft_data_partition", &err, 1, false);
    if (!rt) {
        weft__data_unpin(d);
        return err;
    }
    int rc = 0;
    char why[200] = "";
    weft__family *f = NULL;
    uint32_t nb_id = 0;
    uintptr_t nb_lo = 0, nb_hi = 0;
    bool marked = false; /* partitioning marked in the range index */
    if (d->tile)
        rc = weft__error(WEFT_EINVAL, "weft_data_partition: data is a tile (tiles are not partitioned again)");
    else if (atomic_load_explicit(&d->no_memory, memory_order_relaxed))
        rc = weft__error(WEFT_EINVAL, "weft_data_partition: data (d%u) has no memory (registered with "
                                      "weft_data_register(rt, NULL, %zu)): there is nothing to partition; it can "
                                      "only be a task's WEFT_SCRATCH access", d->id, d->size);
    else if (d->user_dev)
        rc = weft__error(WEFT_EINVAL, "weft_data_partition: data registered on a device cannot be partitioned");
    else if (atomic_load(&d->fam))
        rc = weft__error(WEFT_EBUSY, "weft_data_partition: data is partitioned already");
    else if (!weft__ranges_partition(d, &nb_id, &nb_lo, &nb_hi))
        rc = weft__error(WEFT_EINVAL, "weft_data_partition: data d%u over [%p, %p) (%zu bytes) overlaps d%u over "
                         "[%#jx, %#jx) (%ju bytes): only memory registered as one range can be partitioned; "
                         "unregister the overlapping handle first, or partition one handle that covers "
                         "both", d->id, d->ptr, (void *)((char *)d->ptr + d->size), d->size, nb_id,
                         (uintmax_t)nb_lo, (uintmax_t)nb_hi, (uintmax_t)(nb_hi - nb_lo));
    else
        marked = d->range != NULL;
    if (rc == 0 && t->grid_rows && t->grid_cols && (uint64_t)t->grid_rows * t->grid_cols > 4096)
        rc = weft__error(WEFT_EINVAL, "weft_data_partition: %u x %u tiles: at most 4096", t->grid_rows,
                         t->grid_cols);
    else if (rc == 0 && (rc = weft__family_new(d, t, &f, why, sizeof why)) != 0)
        rc = rc == WEFT_EINVAL ? weft__error(rc, "weft_data_partition: %s", why)
                               : weft__error(rc, "weft_data_partition: out of memory");
    unsigned made = 0;
    for (; rc == 0 && made < f->ntiles; made++) {
        void *p;
        size_t n;
        weft__family_tile_shape(f, made, &p, &n);
        weft__data *x = data_new(rt, d->rt_handle, p, n);
        if (!x || weft__family_attach(f, made, x) != 0) {
            if (x) {
                weft__history_free(x->hist);
                weft__data_free(x);
            }
            rc = weft__error(WEFT_ENOMEM, "weft_data_partition: out of memory");
            break;
        }
    }
    if (rc == 0) {
        /* Published under the parent's history: a spawn naming it plans
         * either before (and is pending: refused here) or after (and sees
         * the tiles). */
        weft__history_lock(d);
        int64_t users = atomic_load(&d->users);
        if (users != 1 && acq_listed(rt, d)) {
            rc = weft__error(WEFT_EBUSY, "weft_data_partition: the data (d%u) is acquired (weft_data_acquire): "
                                         "release it first (weft_data_release)", d->id);
        } else if (users != 1) { /* ours */
            rc = weft__error(WEFT_EBUSY, "weft_data_partition: %lld task(s) naming the data are pending; "
                                         "partition it before spawning on it, or once they finished",
                             (long long)(users - 1));
        } else if (atomic_load(&d->has_partials)) {
            /* Reductions not combined yet (their tasks have finished): into
             * the value first, which the tiles are made from. */
            pthread_mutex_lock(&d->lock);
            int frc = weft__reduce_fold(d, UINT64_MAX);
            pthread_mutex_unlock(&d->lock);
            if (frc != 0)
                rc = weft__error(frc, "weft_data_partition: combining the data's reductions failed (%s)",
                                 weft_strerror(frc));
        }
        if (rc == 0)
            weft__family_publish(f);
        weft__history_unlock(d);
    }
    if (rc != 0 && f) {
        for (unsigned i = 0; i < made; i++) {
            weft__data *x = f->tiles[i];
            x->tile = NULL;
            weft__history_free(x->hist);
            weft__data_free(x);
        }
        weft__family_discard(f);
    }
    if (rc != 0 && marked)
        weft__ranges_unpartition(d);
    if (rc == 0)
        for (unsigned i = 0; i < f->ntiles; i++) {
            list_add(rt, f->tiles[i]);
            tiles[i] = weft__handle_encode(f->tiles[i]);
        }
    weft__data_unpin(d);
    weft__rt_leave(rt, 1);
    return rc;
}

int weft_data_tile_info(const weft_data *h, weft_tile_info *out)
{
    weft__data *d = weft__data_get(h);
    if (!d || !out)
        return weft__error(WEFT_EINVAL, "weft_data_tile_info: %s", !out ? "out is NULL" : "data is NULL or unregistered");
    weft__tile *x = d->tile;
    if (!x)
        return weft__error(WEFT_EINVAL, "weft_data_tile_info: data is not a tile");
    size_t elem = x->fam->elem;
    *out = (weft_tile_info){x->r0, x->c0 / elem, x->rows, x->row_bytes / elem,
                            x->in_r0, x->in_c0 / elem, x->in_rows, x->in_bytes / elem, x->index};
    return 0;
}

unsigned weft__test_data_id(weft_data *h)
{
    weft__data *d = weft__data_get(h);
    return d ? d->id : 0;
}

int weft__test_data_source(weft_data *h, unsigned dev)
{
    weft__data *d = weft__data_get(h);
    if (!d || dev >= d->nrep)
        return -1;
    pthread_mutex_lock(&d->lock);
    int src = weft__data_source_for(d, dev);
    pthread_mutex_unlock(&d->lock);
    return src;
}

/* ------------------------------------------------------------------------ */
/* Acquire and release: a thread outside tasks uses the host's copy          */
/* ------------------------------------------------------------------------ */

/* An acquisition is an internal task with the acquired accesses on the
 * host, spawned like any other (so it is ordered like one, and the data
 * layer makes the host's copy valid before its body runs).  Its body
 * takes an op (graph.h: a task completes when its last op is done) and
 * returns at once, so no worker is held; the release gives the op back
 * and the task completes, releasing what follows it.  The acquiring
 * thread waits until the body ran (state HELD) or the task finished
 * without running (cancelled: a failed writer before it).  A timed-out
 * acquire marks the group ABANDONED: a body that runs later gives its op
 * back at once (a timed WEFT_W acquire is made as WEFT_RW, so that such a
 * body leaves the data's value as it was). */
enum { ACQ_WAITING = 0, ACQ_HELD = 1, ACQ_ABANDONED = 2 };

typedef struct acq_group {
    _Atomic int refs;           /* the task's arg, and the acquiring side's */
    _Atomic int state;          /* ACQ_* */
    weft__task *t;              /* its task, referenced by a handle; set under data_lock
                                   (NULL: being spawned) */
    size_t left;                /* its records still listed (under data_lock) */
    struct acq_group *end_next; /* (weft__acquired_release_all's list) */
} acq_group;

/* One handle acquired (or being acquired), in the runtime's list. */
struct weft__acq {
    struct weft__acq *next;
    weft__data *d;
    acq_group *g;
};

static void group_unref(void *arg)
{
    acq_group *g = arg;
    if (atomic_fetch_sub(&g->refs, 1) == 1)
        weft__free(g);
}

static int acq_body(weft_ctx *ctx, void *arg)
{
    acq_group *g = arg;
    weft__task *t = ctx->task;
    weft__task_op_begin(t); /* before HELD is seen: a release may follow at once */
    int waiting = ACQ_WAITING;
    if (atomic_compare_exchange_strong(&g->state, &waiting, ACQ_HELD)) {
        if (atomic_load(&t->waiters) > 0)
            weft__wake(t->g->ws, t);
        return 0;
    }
    weft__task_op_done(t, 0); /* given up (timed out): nothing is held */
    return 0;
}

static bool acq_not_waiting(const void *arg)
{
    return atomic_load(&((acq_group *)arg)->state) != ACQ_WAITING;
}

/* d's record in rt's list, or NULL (data_lock held). */
static struct weft__acq *acq_find(weft__rt *rt, const weft__data *d)
{
    for (struct weft__acq *r = rt->acquired; r; r = r->next)
        if (r->d == d)
            return r;
    return NULL;
}

/* Take g's records out of rt's list and free them (data_lock held). */
static void acq_unlink_group(weft__rt *rt, acq_group *g)
{
    for (struct weft__acq **p = &rt->acquired; *p;) {
        struct weft__acq *r = *p;
        if (r->g == g) {
            *p = r->next;
            weft__free(r);
            g->left--;
        } else {
            p = &r->next;
        }
    }
}

/* The last handle of a held acquisition was released: its task gets back
 * the in-flight count the acquire dropped, and completes (here, or when
 * its body returns, if it has not yet). */
static void acq_end(weft__rt *rt, acq_group *g)
{
    weft__task *t = g->t;
    atomic_fetch_add(&rt->graph.inflight, 1);
    atomic_fetch_sub(&rt->graph.ext.n_done, 1); /* (its completion counts it done now) */
    weft__task_op_done(t, 0);
    weft_task_release(weft__handle_encode(t));
    group_unref(g);
}

void weft__acquired_release_all(weft__rt *rt)
{
    acq_group *ending = NULL;
    pthread_mutex_lock(&rt->data_lock);
    for (struct weft__acq **p = &rt->acquired; *p;) {
        struct weft__acq *r = *p;
        acq_group *g = r->g;
        if (g->t && atomic_load(&g->state) == ACQ_HELD) {
            *p = r->next;
            weft__free(r);
            if (--g->left == 0) {
                g->end_next = ending;
                ending = g;
            }
        } else {
            p = &r->next;
        }
    }
    pthread_mutex_unlock(&rt->data_lock);
    while (ending) {
        acq_group *g = ending;
        ending = g->end_next;
        acq_end(rt, g);
    }
}

/* Whether d, or one of its tiles, is acquired or being acquired. */
static bool acq_listed(weft__rt *rt, const weft__data *d)
{
    pthread_mutex_lock(&rt->data_lock);
    bool found = acq_find(rt, d) != NULL;
    weft__family *f = atomic_load(&d->fam);
    for (unsigned i = 0; f && f->tiles && !found && f->parent == d && i < f->ntiles; i++)
        found = acq_find(rt, f->tiles[i]) != NULL;
    pthread_mutex_unlock(&rt->data_lock);
    return found;
}

/* Why task t of an acquisition finished without its body running. */
static int acq_outcome(const weft__task *t, const char *fn)
{
    if (atomic_load(&((weft__task *)t)->state) == WEFT__T_FAILED && t->fail_why == WEFT__FAIL_WATCH)
        return weft__error(WEFT_EDEVICE, "%s: " WEFT__WATCH_TRIPPED "; nothing is held", fn);
    if (atomic_load(&((weft__task *)t)->state) == WEFT__T_FAILED) {
        int r = t->result;
        return weft__error(r < 0 && r >= WEFT_EDEVICE ? r : WEFT_EDEVICE,
                           "%s: making the host's copy of the data valid failed (%s); nothing is held", fn,
                           weft_strerror(r));
    }
    if (t->cause_kind == WEFT__CAUSE_REQUEST)
        return weft__error(WEFT_ECANCELLED, "%s: cancelled by request (weft_cancel_pending) while it waited; "
                                            "nothing is held", fn);
    if (t->cause_kind == WEFT__CAUSE_UNSPAWNED)
        return weft__error(WEFT_ECANCELLED, "%s: cancelled because key %s was never spawned; nothing is held",
                           fn, t->cause_name);
    return weft__error(WEFT_ECANCELLED, "%s: task %llu '%s', which the acquisition follows (the data's last "
                                        "writer, or a task it follows), failed or was cancelled: the data has "
                                        "no valid value to read; nothing is held (a WEFT_W acquire, or a task "
                                        "that writes the data, makes it valid again)",
                       fn, (unsigned long long)t->cause_id, t->cause_name);
}

/* acc[0..n) as an acquisition's accesses: called from outside tasks and
 * callbacks, WEFT_R, WEFT_W or WEFT_RW each, of registered data with
 * memory, each named once.  0, or the error. */
static int acq_check_args(const weft_access *acc, size_t n, const char *fn)
{
    int err;
    if (!acc || n == 0)
        return weft__error(WEFT_EINVAL, "%s: %s", fn, !acc ? "accesses are NULL" : "no accesses (n is 0)");
    if ((err = weft__refuse_in_callback(fn)) != 0)
        return err;
    if (weft__tls_worker)
        return weft__error(WEFT_EINVAL, "%s: called from a task: a task names the data in its accesses instead "
                                        "(acquire is for threads outside the runtime's tasks)", fn);
    if (n > UINT16_MAX)
        return weft__error(WEFT_EINVAL, "%s: %zu accesses: at most %u", fn, n, UINT16_MAX);
    char which[32] = "";
    for (size_t i = 0; i < n; i++) {
        unsigned m = acc[i].mode;
        if (n > 1)
            snprintf(which, sizeof which, " (access %zu)", i);
        if (m != WEFT_R && m != WEFT_W && m != WEFT_RW) {
            if (m & (WEFT_REDUCE | WEFT_COMMUTE | WEFT_UNORDERED | WEFT_HOST | WEFT_ON_GPU_MASK | WEFT_SCRATCH))
                return weft__error(WEFT_EINVAL, "%s: mode 0x%x%s: WEFT_REDUCE, WEFT_COMMUTE, WEFT_UNORDERED, "
                                                "WEFT_HOST, WEFT_ON_GPU and WEFT_SCRATCH are for tasks' accesses; "
                                                "acquire with WEFT_R, WEFT_W or WEFT_RW (what is acquired is the "
                                                "host's copy)", fn, m, which);
            return weft__error(WEFT_EINVAL, "%s: mode 0x%x%s is not an access mode: acquire with WEFT_R, WEFT_W "
                                            "or WEFT_RW", fn, m, which);
        }
        const weft__data *x = weft__data_get(acc[i].data);
        if (!x)
            return weft__error(WEFT_EINVAL, "%s: data%s is NULL or unregistered", fn, which);
        if (atomic_load_explicit(&x->no_memory, memory_order_relaxed))
            return weft__error(WEFT_EINVAL, "%s: data%s has no memory (registered with "
                                            "weft_data_register(rt, NULL, n)): there is nothing to acquire; it "
                                            "can only be a task's WEFT_SCRATCH access", fn, which);
        for (size_t j = 0; j < i; j++)
            if (acc[j].data == acc[i].data)
                return weft__error(WEFT_EINVAL, "%s: accesses %zu and %zu name the same data: name each once, "
                                                "with WEFT_RW to read and write it", fn, j, i);
    }
    return 0;
}

/* One acquire call on its way: what it was given, and what it made. */
typedef struct acq_call {
    const weft_access *acc;
    size_t n;
    uint64_t timeout_ns;
    const char *fn;
    weft_access small[4], *ta;     /* the internal task's accesses (small, or allocated) */
    acq_group *g;
    struct weft__acq **recs;       /* g's records; NULL once listed */
    weft__rt *rt;                  /* from weft__spawn_enter (NULL: refused) */
    int64_t held;                  /* its count, for weft__spawn_leave / weft__rt_leave */
    size_t listed;                 /* records in rt's list */
    weft__task *t;                 /* the internal task, once spawned */
} acq_call;

/* a's task accesses, group and records, all allocated before anything is
 * listed.  The task's accesses: a timed WEFT_W is made as WEFT_RW (a body
 * that runs after the acquire gave up then changes nothing).  0, or
 * WEFT_ENOMEM (reported; nothing kept). */
static int acq_alloc(acq_call *a)
{
    size_t n = a->n;
    weft_access *ta = n <= 4 ? a->small : weft__alloc(sizeof *ta * n);
    acq_group *g = weft__alloc(sizeof *g);
    struct weft__acq **recs = weft__alloc(sizeof *recs * n);
    bool nomem = !ta || !g || !recs;
    for (size_t i = 0; i < n && !nomem; i++)
        nomem = !(recs[i] = weft__alloc(sizeof **recs));
    if (nomem) {
        for (size_t i = 0; recs && i < n; i++)
            weft__free(recs[i]);
        weft__free(recs);
        weft__free(g);
        if (ta != a->small)
            weft__free(ta);
        return weft__error(WEFT_ENOMEM, "%s: out of memory", a->fn);
    }
    for (size_t i = 0; i < n; i++) {
        ta[i] = a->acc[i];
        if (a->timeout_ns && ta[i].mode == WEFT_W)
            ta[i].mode = WEFT_RW;
    }
    atomic_init(&g->refs, 2);
    atomic_init(&g->state, ACQ_WAITING);
    g->t = NULL;
    g->left = 0;
    g->end_next = NULL;
    a->ta = ta;
    a->g = g;
    a->recs = recs;
    return 0;
}

/* The internal task's description: its body holds the data for a. */
static void acq_desc_init(const acq_call *a, weft_task_desc *desc)
{
    weft_task_desc_init(desc);
    desc->body = acq_body;
    desc->arg = a->g;
    desc->arg_destroy = group_unref;
    desc->accesses = a->ta;
    desc->naccesses = a->n;
    desc->name = "weft_data_acquire";
}

/* List a's records in rt's list before the spawn: a second acquire of the
 * same data (from any thread) is refused rather than queued behind this
 * one.  Nothing is listed if one is acquired already.  0, or the error. */
static int acq_list(acq_call *a)
{
    weft__rt *rt = a->rt;
    const char *fn = a->fn;
    int rc = 0;
    pthread_mutex_lock(&rt->data_lock);
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        weft__data *d = weft__data_get(a->acc[i].data);
        struct weft__acq *other = d ? acq_find(rt, d) : NULL;
        if (!d)
            rc = weft__error(WEFT_EINVAL, "%s: data is unregistered", fn);
        else if (other)
            rc = weft__error(WEFT_EINVAL, "%s: the data (d%u) is %s already: release it "
                                          "(weft_data_release) before acquiring it again", fn, d->id,
                             other->g->t && atomic_load(&other->g->state) == ACQ_HELD
                                 ? "acquired"
                                 : "being acquired (by another thread)");
    }
    for (size_t i = 0; i < a->n && rc == 0; i++) {
        a->recs[i]->d = weft__data_get(a->acc[i].data);
        a->recs[i]->g = a->g;
        a->recs[i]->next = rt->acquired;
        rt->acquired = a->recs[i];
        a->recs[i] = NULL;
        a->listed++;
    }
    a->g->left = a->listed;
    pthread_mutex_unlock(&rt->data_lock);
    return rc;
}

/* Free the records not listed, and the array that held them. */
static void acq_free_unlisted(acq_call *a)
{
    for (size_t i = 0; i < a->n; i++)
        weft__free(a->recs[i]); /* (those not listed) */
    weft__free(a->recs);
    a->recs = NULL;
}

/* Spawn the internal task (a->t), its errors named as the acquire's.
 * Cancelled by a request of its own (weft_cancel_pending while it waits),
 * the acquisition is as if never made: what follows it is not cancelled
 * for it (it acquired nothing, as any task cancelled before it ran).  0,
 * or the error. */
static int acq_spawn(acq_call *a, weft_runtime *h, const weft_task_desc *desc)
{
    weft__spawn_extra transparent = {.transparent = true};
    int rc = weft__task_spawn(&a->rt->graph, h, desc, &transparent, true, &a->t);
    if (rc != 0) {
        char msg[256];
        const char *m = weft_last_error(), *colon = strstr(m, ": ");
        snprintf(msg, sizeof msg, "%s", colon && !strncmp(m, "weft_spawn", 10) ? colon + 2 : m);
        rc = weft__error(rc, "%s: %s", a->fn, msg);
    }
    return rc;
}

/* The acquisition failed before its task was spawned: unlist its records,
 * leave the runtime, free the group.  Returns rc. */
static int acq_undo(acq_call *a, int rc)
{
    if (a->listed) {
        pthread_mutex_lock(&a->rt->data_lock);
        acq_unlink_group(a->rt, a->g);
        pthread_mutex_unlock(&a->rt->data_lock);
    }
    if (a->rt)
        weft__spawn_leave(a->rt, a->held, false);
    weft__free(a->g); /* (never handed to a task) */
    return rc;
}

/* The body ran: the data is held.  0, or WEFT_ECLOSED if the runtime's
 * destroy began meanwhile (then nothing is held). */
static int acq_held(acq_call *a)
{
    weft__rt *rt = a->rt;
    weft__task *t = a->t;
    /* Held: not a task in flight, for weft_wait_all (its count is
     * dropped below) nor for weft_wait_settled (counted done, until
     * acq_end takes that back before it completes). */
    atomic_fetch_add(&rt->graph.ext.n_done, 1);
    /* Its body returns at once: wait for that (a few instructions on a
     * worker), so that the release completes the acquisition then and
     * there — a call right after it that needs the data idle (a
     * partition) finds it so. */
    while (atomic_load(&t->ops) > 1)
        sched_yield();
    if (!atomic_load(&rt->closing)) {
        weft__rt_leave(rt, a->held); /* the task's count too: a held acquisition is not in flight */
        return 0;
    }
    /* Destroy began meanwhile: it releases what is held (this, if it
     * saw it held), so give it back too. */
    bool mine;
    pthread_mutex_lock(&rt->data_lock);
    mine = acq_find(rt, weft__data_get(a->acc[0].data)) != NULL;
    if (mine)
        acq_unlink_group(rt, a->g);
    pthread_mutex_unlock(&rt->data_lock);
    if (mine)
        acq_end(rt, a->g);
    weft__rt_leave(rt, a->held);
    return weft__error(WEFT_ECLOSED, "%s: the runtime is being destroyed (which releases acquired data)", a->fn);
}

/* Not held: timed out (its body, if it runs, gives up), or the task
 * finished without its body (cancelled).  Nothing is held; the error. */
static int acq_not_held(acq_call *a, bool timed_out)
{
    weft__rt *rt = a->rt;
    weft__task *t = a->t;
    int rc;
    pthread_mutex_lock(&rt->data_lock);
    acq_unlink_group(rt, a->g);
    pthread_mutex_unlock(&rt->data_lock);
    if (weft__state_final(atomic_load(&t->state)))
        rc = acq_outcome(t, a->fn);
    else if (timed_out)
        rc = weft__error(WEFT_ETIMEDOUT, "%s: not acquired in %llu ns: tasks spawned before it that access the "
                                         "data have not finished; nothing is held",
                         a->fn, (unsigned long long)a->timeout_ns);
    else
        rc = weft__error(WEFT_ECLOSED, "%s: gave up (the runtime is being destroyed)", a->fn);
    weft_task_release(weft__handle_encode(t));
    group_unref(a->g);
    weft__spawn_leave(rt, a->held, true); /* the task keeps its count until it finishes */
    return rc;
}

/* Wait until the body ran (held), the task finished without it, or the
 * timeout passed (the group then abandoned).  0, or the error. */
static int acq_wait(acq_call *a)
{
    uint64_t deadline = a->timeout_ns ? weft__deadline(a->timeout_ns) : UINT64_MAX;
    bool timed_out = weft__wait_task_or(a->rt, a->t, acq_not_waiting, a->g, deadline) != 0;
    int st = ACQ_WAITING;
    if (!atomic_compare_exchange_strong(&a->g->state, &st, ACQ_ABANDONED) && st == ACQ_HELD)
        return acq_held(a);
    return acq_not_held(a, timed_out);
}

static int acquire(const weft_access *acc, size_t n, uint64_t timeout_ns, const char *fn)
{
    weft__clear_error();
    int err = acq_check_args(acc, n, fn);
    if (err)
        return err;
    weft__data *d0 = weft__data_get(acc[0].data);
    if (!d0)
        return weft__error(WEFT_EINVAL, "%s: data is NULL or unregistered", fn);
    weft_runtime *h = (weft_runtime *)atomic_load_explicit(&d0->rt_handle, memory_order_relaxed);
    acq_call a = {.acc = acc, .n = n, .timeout_ns = timeout_ns, .fn = fn};
    if ((err = acq_alloc(&a)) != 0)
        return err;
    weft_task_desc desc;
    acq_desc_init(&a, &desc);
    a.rt = weft__spawn_enter(h, &desc, fn, &err, &a.held);
    int rc = a.rt ? acq_list(&a) : err;
    acq_free_unlisted(&a);
    if (rc == 0)
        rc = weft__desc_check(h, &desc, fn);
    if (rc == 0)
        rc = acq_spawn(&a, h, &desc);
    if (a.ta != a.small)
        weft__free(a.ta);
    if (rc != 0)
        return acq_undo(&a, rc);
    pthread_mutex_lock(&a.rt->data_lock);
    a.g->t = a.t;
    pthread_mutex_unlock(&a.rt->data_lock);
    return acq_wait(&a);
}

int weft_data_acquire(weft_data *d, unsigned mode, uint64_t timeout_ns)
{
    weft_access a = {d, mode};
    return acquire(&a, 1, timeout_ns, "weft_data_acquire");
}

int weft_data_acquire_many(const weft_access *acc, size_t n, uint64_t timeout_ns)
{
    return acquire(acc, n, timeout_ns, "weft_data_acquire_many");
}

int weft_data_wont_use(weft_data *h)
{
    weft__clear_error();
    weft__data *d = weft__data_pin(h);
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_data_wont_use: data is NULL, unregistered or being unregistered");
    weft__data_wont_use(d);
    weft__data_unpin(d);
    return 0;
}

int weft_data_release(weft_data *h)
{
    weft__clear_error();
    int err;
    weft__data *d = weft__data_get(h);
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_data_release: data is NULL or unregistered");
    weft__rt *rt = weft__rt_enter(atomic_load_explicit(&d->rt_handle, memory_order_relaxed), "weft_data_release",
                                  &err, 1, true);
    if (!rt)
        return err;
    int rc = 0;
    acq_group *end = NULL;
    pthread_mutex_lock(&rt->data_lock);
    struct weft__acq **p = &rt->acquired;
    while (*p && (*p)->d != d)
        p = &(*p)->next;
    struct weft__acq *r = *p;
    if (!r) {
        rc = weft__error(WEFT_EINVAL, "weft_data_release: the data (d%u) is not acquired (weft_data_release "
                                      "ends a weft_data_acquire, once)", d->id);
    } else if (!r->g->t || atomic_load(&r->g->state) != ACQ_HELD) {
        rc = weft__error(WEFT_EINVAL, "weft_data_release: the data (d%u) is still being acquired (by another "
                                      "thread): release it once weft_data_acquire has returned", d->id);
    } else {
        *p = r->next;
        if (--r->g->left == 0)
            end = r->g;
        weft__free(r);
    }
    pthread_mutex_unlock(&rt->data_lock);
    if (end)
        acq_end(rt, end);
    weft__rt_leave(rt, 1);
    return rc;
}
