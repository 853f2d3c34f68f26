/*
 * data/overlap.c — the index of registered host ranges (data/overlap.h):
 * an array of entries sorted by their start, each with the list of the
 * entries that overlap it.  A lookup scans from the first entry that may
 * reach its start (entries start at most `longest` bytes before it).
 */
#include "data/overlap.h"
#include "data/reduce.h"

#include <string.h>

void weft__ranges_init(weft__ranges *x)
{
    memset(x, 0, sizeof *x);
    pthread_mutex_init(&x->lock, NULL);
}

void weft__ranges_fini(weft__ranges *x)
{
    weft__free(x->v);
    x->v = NULL;
    x->n = x->cap = 0;
    pthread_mutex_destroy(&x->lock);
}

void weft__ranges_lock(weft__ranges *x) { pthread_mutex_lock(&x->lock); }
void weft__ranges_unlock(weft__ranges *x) { pthread_mutex_unlock(&x->lock); }

/* The first entry starting at or after lo. */
static size_t lower_bound(const weft__ranges *x, uintptr_t lo)
{
    size_t a = 0, b = x->n;
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (x->v[m]->lo < lo)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* The first entry that may overlap [lo, ...). */
static size_t scan_start(const weft__ranges *x, uintptr_t lo)
{
    return lower_bound(x, lo > x->longest ? lo - x->longest : 0);
}

static bool overlaps(const weft__range *r, uintptr_t lo, uintptr_t hi) { return r->lo < hi && lo < r->hi; }

static bool reserve(weft__range_nb **arr, uint32_t *cap, uint32_t need)
{
    if (need <= *cap)
        return true;
    uint32_t c = *cap ? *cap : 4;
    while (c < need)
        c *= 2;
    weft__range_nb *p = weft__realloc(*arr, sizeof *p * c);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

/* Room for one more entry. */
static bool reserve_index(weft__ranges *x)
{
    if (x->n < x->cap)
        return true;
    size_t c = x->cap ? x->cap * 2 : 16;
    weft__range **p = weft__realloc(x->v, sizeof *p * c);
    if (!p)
        return false;
    x->v = p;
    x->cap = c;
    return true;
}

/* d out of r's list. */
static void nb_remove(weft__range *r, const weft__data *d)
{
    for (uint32_t i = 0; i < r->nnb; i++)
        if (r->nb[i].d == d) {
            r->nlive -= r->nb[i].live;
            r->nb[i] = r->nb[--r->nnb];
            atomic_store_explicit(&r->d->noverlap, r->nlive, memory_order_release);
            return;
        }
}

int weft__ranges_add(weft__ranges *x, weft__data *d, bool (*take_over)(weft__data *closing, weft__data *d),
                     uint32_t *other_id, uintptr_t *olo, uintptr_t *ohi)
{
    weft__range *e = weft__alloc(sizeof *e);
    if (!e)
        return WEFT_ENOMEM;
    memset(e, 0, sizeof *e);
    e->lo = (uintptr_t)d->ptr;
    e->hi = e->lo + d->size;
    e->d = d;
    e->idx = x;
    pthread_mutex_lock(&x->lock);
    int rc = 0;
    uint32_t count = 0;
    size_t start = scan_start(x, e->lo);
    for (size_t i = start; i < x->n && x->v[i]->lo < e->hi && rc == 0; i++) {
        weft__range *r = x->v[i];
        if (!overlaps(r, e->lo, e->hi))
            continue;
        if (r->partitioned) {
            *other_id = r->d->id;
            *olo = r->lo;
            *ohi = r->hi;
            rc = WEFT_EINVAL;
        } else if (!reserve(&r->nb, &r->cap, r->nnb + 1)) {
            rc = WEFT_ENOMEM;
        }
        count++;
    }
    if (rc == 0 && (!reserve(&e->nb, &e->cap, count) || !reserve_index(x)))
        rc = WEFT_ENOMEM;
    if (rc != 0) {
        pthread_mutex_unlock(&x->lock);
        weft__free(e->nb);
        weft__free(e);
        return rc;
    }
    for (size_t i = start; i < x->n && x->v[i]->lo < e->hi; i++) {
        weft__range *r = x->v[i];
        if (!overlaps(r, e->lo, e->hi))
            continue;
        r->nb[r->nnb++] = (weft__range_nb){d, true};
        atomic_store_explicit(&r->d->noverlap, ++r->nlive, memory_order_release);
        /* A closing neighbour's history is d's to follow (listed, not
         * live); where that finds no memory, d's spawns name it. */
        bool live = !r->closing || !take_over(r->d, d);
        e->nb[e->nnb++] = (weft__range_nb){r->d, live};
        e->nlive += live;
    }
    size_t at = lower_bound(x, e->lo);
    memmove(x->v + at + 1, x->v + at, sizeof *x->v * (x->n - at));
    x->v[at] = e;
    x->n++;
    if (d->size > x->longest)
        x->longest = d->size;
    d->range = e;
    atomic_store_explicit(&d->noverlap, e->nlive, memory_order_release);
    pthread_mutex_unlock(&x->lock);
    return 0;
}

bool weft__ranges_partition(weft__data *d, uint32_t *id, uintptr_t *lo, uintptr_t *hi)
{
    weft__range *e = d->range;
    if (!e)
        return true;
    pthread_mutex_lock(&e->idx->lock);
    bool ok = !weft__ranges_first(d, id, lo, hi);
    if (ok)
        e->partitioned = true;
    pthread_mutex_unlock(&e->idx->lock);
    return ok;
}

void weft__ranges_unpartition(weft__data *d)
{
    weft__range *e = d->range;
    if (!e)
        return;
    pthread_mutex_lock(&e->idx->lock);
    e->partitioned = atomic_load(&d->fam) != NULL; /* (another partition of it may have won) */
    pthread_mutex_unlock(&e->idx->lock);
}

size_t weft__ranges_pin_neighbours(weft__data *d, weft__data **out, size_t max)
{
    const weft__range *e = d->range;
    if (!e || e->nlive > max)
        return e ? e->nlive : 0;
    size_t k = 0;
    for (uint32_t i = 0; i < e->nnb; i++) {
        if (!e->nb[i].live)
            continue;
        out[k] = e->nb[i].d;
        /* Listed: not freed while the lock is held, closing or not (a
         * closing one still listed is waited for by its unregister,
         * which takes it out of the lists only once unused). */
        atomic_fetch_add(&out[k++]->users, 1);
    }
    return k;
}

void weft__ranges_detach(weft__data *d, weft__data *n)
{
    weft__range *r = n->range;
    for (uint32_t i = 0; r && i < r->nnb; i++)
        if (r->nb[i].d == d && r->nb[i].live) {
            r->nb[i].live = false;
            atomic_store_explicit(&n->noverlap, --r->nlive, memory_order_release);
        }
}

void weft__ranges_mark_closing(weft__data *d)
{
    if (d->range)
        d->range->closing = true;
}

/* Out of the index and of every list (the lock held), and freed. */
static void take_out(weft__data *d)
{
    weft__range *e = d->range;
    weft__ranges *x = e->idx;
    for (uint32_t i = 0; i < e->nnb; i++) /* (the lists are symmetric: each lists d, live or not) */
        nb_remove(e->nb[i].d->range, d);
    size_t at = lower_bound(x, e->lo);
    while (at < x->n && x->v[at] != e)
        at++;
    if (at < x->n) {
        memmove(x->v + at, x->v + at + 1, sizeof *x->v * (x->n - at - 1));
        x->n--;
    }
    d->range = NULL;
    atomic_store_explicit(&d->noverlap, 0, memory_order_relaxed);
    weft__free(e->nb);
    weft__free(e);
}

bool weft__ranges_remove_if_unused(weft__data *d)
{
    if (!d->range)
        return true;
    if (!weft__data_unused(d))
        return false;
    take_out(d);
    return true;
}

void weft__ranges_remove(weft__data *d)
{
    weft__range *e = d->range;
    if (!e)
        return;
    weft__ranges *x = e->idx;
    pthread_mutex_lock(&x->lock);
    take_out(d);
    pthread_mutex_unlock(&x->lock);
}

size_t weft__ranges_count(const weft__data *d) { return d->range ? d->range->nlive : 0; }

size_t weft__ranges_listed(const weft__data *d) { return d->range ? d->range->nnb : 0; }

bool weft__ranges_first(const weft__data *d, uint32_t *id, uintptr_t *lo, uintptr_t *hi)
{
    const weft__range *e = d->range;
    for (uint32_t i = 0; e && i < e->nnb; i++)
        if (e->nb[i].live) {
            *id = e->nb[i].d->id;
            *lo = e->nb[i].d->range->lo;
            *hi = e->nb[i].d->range->hi;
            return true;
        }
    return false;
}

weft__data *weft__ranges_neighbour(const weft__data *d, size_t k) { return d->range->nb[k].d; }
