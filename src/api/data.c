/*
 * api/data.c — the data-handle functions of weft.h: register, unregister,
 * host address.  The handle itself belongs to the data layer, its access
 * history to the graph layer; this file makes and frees both and keeps the
 * runtime's list of handles.
 */
#include "runtime.h"

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
    void *hist = weft__history_new();
    weft__data *d = hist ? weft__data_new(&rt->waits, h, ptr, n, rt->dev, rt->mnodes, rt->ndev, &rt->bytes_copied) : NULL;
    if (!d) {
        weft__history_free(hist);
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_ENOMEM, "weft_data_register: out of memory");
    }
    d->hist = hist;
    pthread_mutex_lock(&rt->data_lock);
    d->list_prev = NULL;
    d->list_next = rt->data_list;
    if (rt->data_list)
        rt->data_list->list_prev = d;
    rt->data_list = d;
    pthread_mutex_unlock(&rt->data_lock);
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
    weft__wait_data_unused(rt, d);
    pthread_mutex_lock(&rt->data_lock);
    if (d->list_prev)
        d->list_prev->list_next = d->list_next;
    else
        rt->data_list = d->list_next;
    if (d->list_next)
        d->list_next->list_prev = d->list_prev;
    pthread_mutex_unlock(&rt->data_lock);
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
