/*
 * data/data.c — data handles: registration, unregistration, and the state
 * the graph layer keeps per handle.
 *
 * A handle has one replica per device; so far only the host replica (the
 * registered memory itself) exists.  The coherence state (MSI per replica),
 * asynchronous copies, prefetch and eviction come with the device issues and
 * live here.
 */
#include "internal.h"

#include <stddef.h>
#include <string.h>
#include <time.h>

weft__data *weft__data_get(const weft_data *h)
{
    weft__data *d = weft__handle_decode(h);
    if (!d || d->slot.pool_id != WEFT__POOL_DATA)
        return NULL;
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
    weft__rt *rt = weft__rt_enter(h, "weft_data_register", &err, 1); /* destroy waits for us */
    if (!rt)
        return err;
    weft__data *d = weft__slot_alloc(WEFT__POOL_DATA);
    if (!d) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_ENOMEM, "weft_data_register: out of memory");
    }
    size_t from = offsetof(weft__data, rt);
    memset((char *)d + from, 0, sizeof *d - from);
    d->rt = rt;
    d->rt_handle = h;
    d->ptr = ptr;
    d->size = n;
    d->replica[0] = ptr;
    pthread_mutex_init(&d->lock, NULL);
    atomic_store(&d->users, 0);
    atomic_init(&d->commute_owner, NULL);
    pthread_mutex_lock(&rt->data_lock);
    d->rt_next = rt->data_list;
    if (rt->data_list)
        rt->data_list->rt_prev = d;
    rt->data_list = d;
    pthread_mutex_unlock(&rt->data_lock);
    *out = weft__handle_encode(d);
    weft__rt_leave(rt, 1);
    return 0;
}

weft__data *weft__data_pin(const weft_data *h)
{
    weft__data *d = weft__data_get(h);
    if (!d)
        return NULL;
    int64_t v = atomic_load(&d->users);
    do {
        if (v & WEFT__DATA_CLOSING)
            return NULL;
    } while (!atomic_compare_exchange_weak(&d->users, &v, v + 1));
    /* The slot may have been freed and reused between the check and the
     * pin: then the pin landed on another handle; take it back. */
    if (weft__handle_decode(h) != d) {
        weft__data_finish_use(d);
        return NULL;
    }
    return d;
}

static void release_state(weft__data *d)
{
    for (uint32_t i = 0; i < d->nwriters; i++)
        weft__task_unref(d->writers[i]);
    for (uint32_t i = 0; i < d->nreaders; i++)
        weft__task_unref(d->readers[i]);
    for (uint32_t i = 0; i < d->nbase; i++)
        weft__task_unref(d->base[i]);
    weft__free(d->writers);
    weft__free(d->readers);
    weft__free(d->base);
    weft__free(d->base_propagate);
    pthread_mutex_destroy(&d->lock);
    weft__slot_free(d);
}

void weft__data_finish_use(weft__data *d)
{
    weft__rt *rt = d->rt; /* read first: d may be freed right after the decrement */
    if (atomic_fetch_sub(&d->users, 1) - 1 == WEFT__DATA_CLOSING)
        weft__wake_sleepers(rt);
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
    weft__data *d = weft__data_get(h);
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_data_unregister: data is NULL or already unregistered");
    if (used_by_caller(d))
        return weft__error(WEFT_EBUSY, "weft_data_unregister: the calling task accesses this data itself");
    weft__rt *rt = d->rt;
    pthread_mutex_lock(&d->lock);
    int64_t before = atomic_fetch_or(&d->users, WEFT__DATA_CLOSING);
    pthread_mutex_unlock(&d->lock);
    if (before & WEFT__DATA_CLOSING)
        return weft__error(WEFT_EINVAL, "weft_data_unregister: data is already being unregistered");

    weft__worker *w = weft__tls_worker;
    if (w && w->rt == rt) {
        while (atomic_load(&d->users) != WEFT__DATA_CLOSING)
            if (!weft__help_waiting(w, NULL)) {
                struct timespec ts = {0, 20000};
                nanosleep(&ts, NULL);
            }
    } else {
        pthread_mutex_lock(&rt->wait_lock);
        while (atomic_load(&d->users) != WEFT__DATA_CLOSING)
            pthread_cond_wait(&rt->wait_cond, &rt->wait_lock);
        pthread_mutex_unlock(&rt->wait_lock);
    }
    pthread_mutex_lock(&rt->data_lock);
    if (d->rt_prev)
        d->rt_prev->rt_next = d->rt_next;
    else
        rt->data_list = d->rt_next;
    if (d->rt_next)
        d->rt_next->rt_prev = d->rt_prev;
    pthread_mutex_unlock(&rt->data_lock);
    release_state(d);
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

/* At runtime destruction (no task in flight): unregister what is left. */
void weft__data_destroy_all(weft__rt *rt)
{
    weft__data *d = rt->data_list;
    rt->data_list = NULL;
    while (d) {
        weft__data *next = d->rt_next;
        release_state(d);
        d = next;
    }
}
