/*
 * data/data.c — data handles: creation, pinning by tasks, closing.
 *
 * A handle has one replica per device; so far only the host replica (the
 * registered memory itself) is ever valid.
 */
#include "data/data.h"

#include <string.h>

weft__data *weft__data_get(const weft_data *h)
{
    weft__data *d = weft__handle_decode(h);
    if (!d || d->slot.pool_id != WEFT__POOL_DATA)
        return NULL;
    return d;
}

weft__data *weft__data_new(weft__waitset *ws, const void *rt_handle, void *ptr, size_t n, unsigned ndev)
{
    weft__replica *rep = weft__alloc(sizeof *rep * (ndev ? ndev : 1));
    if (!rep)
        return NULL;
    weft__data *d = weft__slot_alloc(WEFT__POOL_DATA, sizeof(weft__data));
    if (!d) {
        weft__free(rep);
        return NULL;
    }
    size_t from = offsetof(weft__data, ws);
    memset((char *)d + from, 0, sizeof *d - from);
    d->ws = ws;
    d->rt_handle = rt_handle;
    d->ptr = ptr;
    d->size = n;
    d->nrep = ndev ? ndev : 1;
    d->rep = rep;
    for (unsigned i = 0; i < d->nrep; i++)
        d->rep[i] = (weft__replica){NULL, WEFT__REP_INVALID};
    d->rep[0] = (weft__replica){ptr, WEFT__REP_MODIFIED};
    atomic_store(&d->users, 0);
    return d;
}

void weft__data_free(weft__data *d)
{
    weft__free(d->rep);
    d->rep = NULL;
    weft__slot_free(d);
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
        weft__data_unpin(d);
        return NULL;
    }
    return d;
}

void weft__data_unpin(weft__data *d)
{
    weft__waitset *ws = d->ws; /* read first: d may be freed right after the decrement */
    if (atomic_fetch_sub(&d->users, 1) - 1 == WEFT__DATA_CLOSING)
        weft__wake(ws, d);
}

bool weft__data_close(weft__data *d)
{
    return !(atomic_fetch_or(&d->users, WEFT__DATA_CLOSING) & WEFT__DATA_CLOSING);
}
