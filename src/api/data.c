/*
 * api/data.c — the data-handle functions of weft.h: register, unregister,
 * host address.  The handle itself belongs to the data layer, its access
 * history to the graph layer; this file makes and frees both and keeps the
 * runtime's list of handles.
 */
#include "runtime.h"
#include "data/reduce.h"
#include "data/tile.h"
#include "testing.h"

#include <stdio.h>

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
    if (!ptr)
        return weft__error(WEFT_EINVAL, "weft_data_register: pointer is NULL");
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

int weft_data_unregister(weft_data *h)
{
    weft__clear_error();
    int err;
    weft__data *d = weft__data_get(h);
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_data_unregister: data is NULL or already unregistered");
    if (used_by_caller(d))
        return weft__error(WEFT_EBUSY, "weft_data_unregister: the calling task accesses this data itself");
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
    weft__family *f = atomic_load(&d->fam);
    if (f) { /* its tiles first: closed (new spawns fail), waited for, freed */
        for (unsigned i = 0; i < f->ntiles; i++)
            (void)weft__data_close(f->tiles[i]);
        for (unsigned i = 0; i < f->ntiles; i++) {
            weft__data *t = f->tiles[i];
            weft__wait_data_unused(rt, t);
            list_remove(rt, t);
            weft__history_free(t->hist);
            weft__data_free(t);
        }
    }
    weft__wait_data_unused(rt, d);
    list_remove(rt, d);
    weft__history_free(d->hist);
    weft__data_free(d);
    weft__rt_leave(rt, 1);
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
    if (d->tile)
        rc = weft__error(WEFT_EINVAL, "weft_data_partition: data is a tile (tiles are not partitioned again)");
    else if (d->user_dev)
        rc = weft__error(WEFT_EINVAL, "weft_data_partition: data registered on a device cannot be partitioned");
    else if (atomic_load(&d->fam))
        rc = weft__error(WEFT_EBUSY, "weft_data_partition: data is partitioned already");
    else if (t->grid_rows && t->grid_cols && (uint64_t)t->grid_rows * t->grid_cols > 4096)
        rc = weft__error(WEFT_EINVAL, "weft_data_partition: %u x %u tiles: at most 4096", t->grid_rows,
                         t->grid_cols);
    else if ((rc = weft__family_new(d, t, &f, why, sizeof why)) != 0)
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
        if (users != 1) { /* ours */
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

int weft__test_data_plant_modified(weft_data *h, unsigned dev)
{
    weft__data *d = weft__data_get(h);
    if (!d || dev >= d->nrep || (dev && !d->rep[dev].ptr))
        return WEFT_EINVAL; /* a device replica must exist (a task used it there) */
    pthread_mutex_lock(&d->lock);
    d->rep[dev].state = WEFT__REP_MODIFIED;
    pthread_mutex_unlock(&d->lock);
    return 0;
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
