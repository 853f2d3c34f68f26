/*
 * graph/access.c — dependencies inferred from data access modes, in spawn
 * order, and the run-time exclusion of commuting tasks.
 *
 * Per data handle we keep the last writer(s) and the readers since them (and,
 * for an open commute group, what came before the group).  Spawn locks the
 * handles it names in address order, plans (counts edges, reserves room — the
 * only step that can fail), then links; see the rules in weft.h.
 */
#include "internal.h"

void weft__data_lock_all(weft__task_access *sorted, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        pthread_mutex_lock(&sorted[i].data->lock);
}

void weft__data_unlock_all(weft__task_access *sorted, uint32_t n)
{
    for (uint32_t i = n; i-- > 0;)
        pthread_mutex_unlock(&sorted[i].data->lock);
}

static bool reserve(weft__task ***arr, uint32_t *cap, uint32_t need)
{
    if (need <= *cap)
        return true;
    uint32_t ncap = *cap ? *cap : 4;
    while (ncap < need)
        ncap *= 2;
    weft__task **p = weft__realloc(*arr, sizeof **arr * ncap);
    if (!p)
        return false;
    *arr = p;
    *cap = ncap;
    return true;
}

static bool reserve_base(weft__data *d, uint32_t need)
{
    if (need <= d->cap_base)
        return true;
    uint32_t cap = d->cap_base;
    if (!reserve(&d->base, &cap, need))
        return false;
    bool *p = weft__realloc(d->base_propagate, sizeof *p * cap);
    if (!p)
        return false; /* base grew but flags did not: cap_base stays, retried next time */
    d->base_propagate = p;
    d->cap_base = cap;
    return true;
}

/* Finished readers need no edge from later writers: drop them. */
static void prune_readers(weft__data *d)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < d->nreaders; i++) {
        weft__task *r = d->readers[i];
        if (atomic_load_explicit(&r->state, memory_order_acquire) >= WEFT_TASK_COMPLETED)
            weft__task_unref(r);
        else
            d->readers[k++] = r;
    }
    d->nreaders = k;
}

static bool joins_open_group(const weft__data *d) { return d->writers_commute && d->nreaders == 0; }

int weft__access_plan(weft__task_access *sorted, uint32_t n, uint32_t *ninferred)
{
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        weft__data *d = sorted[i].data;
        unsigned mode = sorted[i].mode;
        prune_readers(d);
        bool ok;
        if (mode & WEFT_COMMUTE) {
            if (joins_open_group(d)) {
                count += d->nbase;
                ok = reserve(&d->writers, &d->cap_writers, d->nwriters + 1);
            } else {
                count += d->nwriters + d->nreaders;
                ok = reserve_base(d, d->nwriters + d->nreaders) && reserve(&d->writers, &d->cap_writers, 1);
            }
        } else if (mode == WEFT_R) {
            count += d->nwriters;
            ok = reserve(&d->readers, &d->cap_readers, d->nreaders + 1);
        } else {
            count += d->nwriters + d->nreaders;
            ok = reserve(&d->writers, &d->cap_writers, 1);
        }
        if (!ok)
            return WEFT_ENOMEM;
    }
    *ninferred = count;
    return 0;
}

static void drop_all(weft__task **arr, uint32_t *n)
{
    for (uint32_t i = 0; i < *n; i++)
        weft__task_unref(arr[i]);
    *n = 0;
}

void weft__access_link(weft__task *t, const weft__task_access *sorted, uint32_t n, weft__edge *edges)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        weft__data *d = sorted[i].data;
        unsigned mode = sorted[i].mode;
        if (mode & WEFT_COMMUTE) {
            if (!joins_open_group(d)) {
                /* Open a group: what came before it becomes its base.  The
                 * references move from writers/readers to base. */
                drop_all(d->base, &d->nbase);
                for (uint32_t j = 0; j < d->nwriters; j++) {
                    d->base[d->nbase] = d->writers[j];
                    d->base_propagate[d->nbase++] = true;
                }
                for (uint32_t j = 0; j < d->nreaders; j++) {
                    d->base[d->nbase] = d->readers[j];
                    d->base_propagate[d->nbase++] = false;
                }
                d->nwriters = 0;
                d->nreaders = 0;
                d->writers_commute = true;
            }
            for (uint32_t j = 0; j < d->nbase; j++)
                weft__edge_add(t, &edges[k++], d->base[j], d->base_propagate[j]);
            d->writers[d->nwriters++] = t;
        } else if (mode == WEFT_R) {
            for (uint32_t j = 0; j < d->nwriters; j++)
                weft__edge_add(t, &edges[k++], d->writers[j], true);
            d->readers[d->nreaders++] = t;
        } else {
            bool reads = mode & WEFT_R;
            for (uint32_t j = 0; j < d->nwriters; j++)
                weft__edge_add(t, &edges[k++], d->writers[j], reads);
            for (uint32_t j = 0; j < d->nreaders; j++)
                weft__edge_add(t, &edges[k++], d->readers[j], false);
            drop_all(d->writers, &d->nwriters);
            drop_all(d->readers, &d->nreaders);
            drop_all(d->base, &d->nbase);
            d->writers[d->nwriters++] = t;
            d->writers_commute = false;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Commute exclusion                                                         */
/* ------------------------------------------------------------------------ */

/* Give up t's hold on every commuting datum it owns and resubmit the tasks
 * that were waiting for one. */
void weft__commute_release(weft__task *t, weft__task **next)
{
    for (uint32_t i = 0; i < t->naccess; i++) {
        weft__data *d = t->access[i].data;
        if (!(t->access[i].mode & WEFT_COMMUTE) || atomic_load(&d->commute_owner) != t)
            continue;
        atomic_store(&d->commute_owner, NULL);
        pthread_mutex_lock(&d->lock);
        weft__task *waiting = d->commute_waiters;
        d->commute_waiters = NULL;
        pthread_mutex_unlock(&d->lock);
        while (waiting) {
            weft__task *x = waiting;
            waiting = x->wait_next;
            x->wait_next = NULL;
            weft__task_ready(t->rt, x, next);
        }
    }
}

/* Take every commuting datum of t, or none: on conflict, release what was
 * taken and queue t on the busy datum (no hold-and-wait, so no deadlock). */
bool weft__commute_acquire(weft__task *t)
{
retry:
    for (uint32_t i = 0; i < t->naccess; i++) {
        weft__data *d = t->access[i].data;
        if (!(t->access[i].mode & WEFT_COMMUTE))
            continue;
        weft__task *owner = NULL;
        if (atomic_compare_exchange_strong(&d->commute_owner, &owner, t) || owner == t)
            continue;
        weft__commute_release(t, NULL);
        pthread_mutex_lock(&d->lock);
        if (atomic_load(&d->commute_owner) == NULL) {
            pthread_mutex_unlock(&d->lock);
            goto retry;
        }
        t->wait_next = d->commute_waiters;
        d->commute_waiters = t;
        pthread_mutex_unlock(&d->lock);
        return false;
    }
    return true;
}
