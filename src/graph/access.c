/*
 * graph/access.c — dependencies inferred from data access modes, in spawn
 * order, and the run-time exclusion of commuting (and unordered) tasks.
 *
 * Per data handle the graph keeps an access history: the last writer(s), the
 * readers since them and, for an open commute or reduction group, what came
 * before the group.  Spawn locks the histories it names in address order,
 * plans (counts edges, reserves room — the only step that can fail), then
 * links; see the rules in weft.h.  Edges from the members of a reduction
 * group are late (never released early): whoever follows a group combines
 * its members' private copies on the host once they have completed.
 */
#include "graph/graph.h"
#include "data/reduce.h"
#include "data/tile.h"

#include <string.h>

typedef struct history {
    /* lock protects everything below; taken by spawn (several at once, in
     * handle address order) and by commute release.  Nothing nests under it
     * except the allocator and the slot pool. */
    pthread_mutex_t lock;
    /* The last writer(s): one task, a commute group or a reduction group. */
    weft__task **writers;
    uint32_t nwriters, cap_writers;
    bool writers_commute;              /* writers form a commute group */
    bool writers_reduce;               /* writers form a reduction group, of reduce_key */
    /* On a tile: the writers named its parent (WEFT__VIA_PARENT).  The
     * parent's and the tile's commute groups are distinct groups, and an
     * edge from a writer through one view to a task through the other is
     * late: the family syncs the views on the host (data/tile.h), never
     * behind work still queued that may yet be undone. */
    bool writers_parent;
    uint64_t group_tile_spawns;        /* a parent's commute group on a tile: the family's
                                          tile_spawns when it opened (another since closes it) */
    /* Every one of the writers was linked while the data was partitioned
     * (a parent): each wrote every tile too, so its failure reaches a
     * reader through the tiles' histories, unless a tile's writer replaced
     * its value there since — the parent's own edges to them only order. */
    bool writers_tiled;
    bool group_read;                   /* a reader followed the group: it is closed */
    unsigned reduce_key;               /* operator and type (data/reduce.h) */
    const weft__reduction *reduce_user; /* reduce_key WEFT_RED_USER: the user reduction */
    /* Readers since the last writer(s); finished ones are pruned only when
     * the array is full or a writer comes, so a spawn costs O(1) amortised. */
    weft__task **readers;
    uint32_t nreaders, cap_readers;
    /* What came before the open group (followed by every member), and how
     * each member follows it (BASE_*). */
    weft__task **base;
    uint8_t *base_flags;
    uint32_t nbase, cap_base;
    /* Partial accesses (WEFT__OVERLAP) since the last writer(s), and the
     * accesses a handle over overlapping memory handed over as it was
     * unregistered: writers and readers, unordered among themselves.
     * Finished readers are pruned as readers are; writers only once
     * completed (a failed one still cancels the readers that follow). */
    weft__task **pwriters, **preaders;
    uint32_t npwriters, cap_pwriters, npreaders, cap_preaders;
    /* The `linked` of the last task that wrote the data through its own
     * access (not partial, not handed over): a partial writer linked
     * before it wrote memory that has been written again since. */
    uint64_t own_write;
    /* Tasks with a scratch access (WEFT_SCRATCH) to the data: in no order,
     * kept so that an unregister's wait can help run them; finished ones
     * are pruned as the next is reserved.  scratch_room: slots reserved by
     * spawns that have not linked yet. */
    weft__task **scratch;
    uint32_t nscratch, cap_scratch, scratch_room;
    /* Commute exclusion at run time. */
    _Atomic(weft__task *) commute_owner;
    weft__task *commute_waiters;       /* under lock, linked by wait_next */
} history;

static history *H(const weft__data *d) { return d->hist; }

/* The spawn order of links (weft__task.linked): taken with the histories
 * of the spawn locked, so two spawns that share a history take it in the
 * order they link. */
static _Atomic uint64_t link_clock;

enum { BASE_PROPAGATE = 1, BASE_LATE = 2 };

void *weft__history_new(void)
{
    history *h = weft__alloc(sizeof *h);
    if (!h)
        return NULL;
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->lock, NULL);
    atomic_init(&h->commute_owner, NULL);
    return h;
}

static void drop_all(weft__task **arr, uint32_t *n)
{
    for (uint32_t i = 0; i < *n; i++)
        weft__task_unref(arr[i]);
    *n = 0;
}

void weft__history_free(void *hist)
{
    history *h = hist;
    if (!h)
        return;
    drop_all(h->writers, &h->nwriters);
    drop_all(h->readers, &h->nreaders);
    drop_all(h->base, &h->nbase);
    drop_all(h->pwriters, &h->npwriters);
    drop_all(h->preaders, &h->npreaders);
    drop_all(h->scratch, &h->nscratch);
    weft__free(h->scratch);
    weft__free(h->pwriters);
    weft__free(h->preaders);
    weft__free(h->writers);
    weft__free(h->readers);
    weft__free(h->base);
    weft__free(h->base_flags);
    pthread_mutex_destroy(&h->lock);
    weft__free(h);
}

size_t weft__history_members(weft__data *d, weft__task **out, size_t max)
{
    history *h = H(d);
    size_t k = 0;
    pthread_mutex_lock(&h->lock);
    for (uint32_t i = 0; i < h->nwriters && k < max; i++)
        out[k++] = h->writers[i];
    for (uint32_t i = 0; i < h->nreaders && k < max; i++)
        out[k++] = h->readers[i];
    for (uint32_t i = 0; i < h->nbase && k < max; i++)
        out[k++] = h->base[i];
    for (uint32_t i = 0; i < h->npwriters && k < max; i++)
        out[k++] = h->pwriters[i];
    for (uint32_t i = 0; i < h->npreaders && k < max; i++)
        out[k++] = h->preaders[i];
    for (uint32_t i = 0; i < h->nscratch && k < max; i++)
        if (!weft__state_final(atomic_load_explicit(&h->scratch[i]->state, memory_order_acquire)))
            out[k++] = h->scratch[i];
    for (size_t i = 0; i < k; i++)
        weft__task_ref(out[i]);
    pthread_mutex_unlock(&h->lock);
    return k;
}

void weft__history_lock(weft__data *d) { pthread_mutex_lock(&H(d)->lock); }
void weft__history_unlock(weft__data *d) { pthread_mutex_unlock(&H(d)->lock); }

void weft__access_lock_all(weft__task_access *sorted, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        pthread_mutex_lock(&H(sorted[i].data)->lock);
}

void weft__access_unlock_all(weft__task_access *sorted, uint32_t n)
{
    for (uint32_t i = n; i-- > 0;)
        pthread_mutex_unlock(&H(sorted[i].data)->lock);
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

static bool reserve_base(history *h, uint32_t need)
{
    if (need <= h->cap_base)
        return true;
    uint32_t cap = h->cap_base;
    if (!reserve(&h->base, &cap, need))
        return false;
    uint8_t *p = weft__realloc(h->base_flags, sizeof *p * cap);
    if (!p)
        return false; /* base grew but flags did not: cap_base stays, retried next time */
    h->base_flags = p;
    h->cap_base = cap;
    return true;
}

/* Drop the finished tasks of arr (completed ones only, if completed):
 * later tasks need no edge from them. */
static void prune(weft__task **arr, uint32_t *n, bool completed)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < *n; i++) {
        weft__task *r = arr[i];
        int st = atomic_load_explicit(&r->state, memory_order_acquire);
        if (completed ? st == WEFT__T_COMPLETED : weft__state_final(st))
            weft__task_unref(r);
        else
            arr[k++] = r;
    }
    *n = k;
}

/* Finished readers need no edge from later writers: drop them. */
static void prune_readers(history *h) { prune(h->readers, &h->nreaders, false); }

/* Room for one more task in a list that only grows until a writer comes
 * (readers, partial accesses): pruned when full, so a spawn costs O(1)
 * amortised (at most one pruning per doubling). */
static bool room_for_one(weft__task ***arr, uint32_t *n, uint32_t *cap, bool completed)
{
    if (*n == *cap) {
        prune(*arr, n, completed);
        if (*n > *cap / 2 && !reserve(arr, cap, *cap * 2))
            return false;
    }
    return reserve(arr, cap, *n + 1);
}

bool weft__history_scratch_reserve(weft__data *d)
{
    history *h = H(d);
    pthread_mutex_lock(&h->lock);
    prune(h->scratch, &h->nscratch, false);
    bool ok = reserve(&h->scratch, &h->cap_scratch, h->nscratch + h->scratch_room + 1);
    if (ok)
        h->scratch_room++;
    pthread_mutex_unlock(&h->lock);
    return ok;
}

void weft__history_scratch_add(weft__data *d, weft__task *t)
{
    history *h = H(d);
    weft__task_ref(t);
    pthread_mutex_lock(&h->lock);
    h->scratch_room--;
    h->scratch[h->nscratch++] = t; /* (room reserved) */
    pthread_mutex_unlock(&h->lock);
}

void weft__history_scratch_unreserve(weft__data *d)
{
    history *h = H(d);
    pthread_mutex_lock(&h->lock);
    h->scratch_room--;
    pthread_mutex_unlock(&h->lock);
}

/* Partial accesses since the last writer(s), which a task that is not
 * partial itself follows. */
static uint32_t npartial(const history *h) { return h->npwriters + h->npreaders; }

/* The user reduction of a reducing access (its record's), or NULL. */
static const weft__reduction *reduce_user(const weft__task_access *a)
{
    return (a->mode & WEFT_REDUCE) && a->part ? a->part->user : NULL;
}

/* Whether h's writer j changes d's value: a commute group may hold
 * unordered readers (WEFT_R|WEFT_UNORDERED), whose failure cancels nobody.
 * (A member's accesses were fixed at its spawn.) */
static bool writes(const history *h, uint32_t j, const weft__data *d)
{
    if (!h->writers_commute)
        return true;
    const weft__task *m = h->writers[j];
    for (uint32_t i = 0; i < m->naccess; i++)
        if (m->access[i].data == d && (m->access[i].mode & WEFT_W))
            return true;
    return false;
}

/* A commute access joins the open group unless anything but a commute
 * access came after it, or the group came through the other view of a
 * tile (mode with WEFT__VIA_PARENT, or not), or (a parent's group) a task
 * named any tile of the family itself since; a reduction, unless anything
 * but a reduction with the same operator and type came after it.  Decided
 * from what was spawned, never from what has finished, so the graph does
 * not depend on timing. */
static bool joins_open_group(const weft__task_access *a)
{
    const weft__data *d = a->data;
    unsigned mode = a->mode;
    const history *h = H(d);
    if (mode & WEFT_REDUCE)
        return h->writers_reduce && !h->group_read && h->reduce_key == weft__red_key(mode) &&
               h->reduce_user == reduce_user(a);
    bool via_parent = (mode & WEFT__VIA_PARENT) != 0;
    return (mode & WEFT_COMMUTE) && h->writers_commute && !h->group_read && h->writers_parent == via_parent &&
           (!via_parent || h->group_tile_spawns == weft__family_tile_spawns(d));
}

int weft__access_plan(weft__task_access *sorted, uint32_t n, uint32_t *ninferred)
{
    uint32_t count = 0;
    for (uint32_t i = 0; i < n; i++) {
        history *h = H(sorted[i].data);
        unsigned mode = sorted[i].mode & ~WEFT__VIA_PARENT;
        bool ok;
        if (mode & WEFT__OVERLAP) {
            if (mode & WEFT_W) {
                prune_readers(h);
                count += h->nwriters + h->nreaders;
                ok = room_for_one(&h->pwriters, &h->npwriters, &h->cap_pwriters, true);
            } else {
                count += h->nwriters;
                ok = room_for_one(&h->preaders, &h->npreaders, &h->cap_preaders, false);
            }
        } else if (mode & (WEFT_COMMUTE | WEFT_REDUCE)) {
            if (joins_open_group(&sorted[i])) {
                count += h->nbase;
                ok = reserve(&h->writers, &h->cap_writers, h->nwriters + 1);
            } else {
                prune_readers(h);
                prune(h->preaders, &h->npreaders, false);
                uint32_t before = h->nwriters + h->nreaders + npartial(h);
                count += before;
                ok = reserve_base(h, before) && reserve(&h->writers, &h->cap_writers, 1);
            }
        } else if (mode == WEFT_R) {
            count += h->nwriters + h->npwriters;
            ok = room_for_one(&h->readers, &h->nreaders, &h->cap_readers, false);
        } else {
            prune_readers(h);
            prune(h->preaders, &h->npreaders, false);
            count += h->nwriters + h->nreaders + npartial(h);
            ok = reserve(&h->writers, &h->cap_writers, 1);
        }
        if (!ok)
            return WEFT_ENOMEM;
    }
    *ninferred = count;
    return 0;
}

/* Would any task this spawn is about to follow through its data be
 * forbidden?  (Same choice of predecessors as weft__access_link.)  The one
 * that is goes to *hit, *hit_i, *hit_writer for the caller's message. */
bool weft__access_check(const weft__task_access *sorted, uint32_t n,
                        bool (*forbidden)(void *arg, const weft__task *pred), void *arg,
                        const weft__task **hit, uint32_t *hit_i, bool *hit_writer)
{
    const weft__task *p = NULL;
    bool writer = false;
    uint32_t i;
    for (i = 0; i < n && !p; i++) {
        history *h = H(sorted[i].data);
        unsigned mode = sorted[i].mode & ~WEFT__VIA_PARENT;
        bool partial = (mode & WEFT__OVERLAP) != 0;
        mode &= ~WEFT__OVERLAP;
        if (!partial && joins_open_group(&sorted[i])) {
            for (uint32_t j = 0; j < h->nbase && !p; j++)
                if (forbidden(arg, h->base[j]))
                    p = h->base[j], writer = true;
            continue;
        }
        for (uint32_t j = 0; j < h->nwriters && !p; j++)
            if (forbidden(arg, h->writers[j]))
                p = h->writers[j], writer = true;
        for (uint32_t j = 0; j < h->npwriters && !p && !partial; j++)
            if (forbidden(arg, h->pwriters[j]))
                p = h->pwriters[j], writer = true;
        if (mode != WEFT_R)
            for (uint32_t j = 0; j < h->nreaders && !p; j++)
                if (forbidden(arg, h->readers[j]))
                    p = h->readers[j], writer = false;
        for (uint32_t j = 0; j < h->npreaders && !p && !partial && mode != WEFT_R; j++)
            if (forbidden(arg, h->preaders[j]))
                p = h->preaders[j], writer = false;
    }
    if (!p)
        return true;
    if (hit)
        *hit = p;
    if (hit_i)
        *hit_i = i - 1;
    if (hit_writer)
        *hit_writer = writer;
    return false;
}

/* Whether d is partitioned into tiles (the parent; its history locked). */
static bool tiled_parent(const weft__data *d)
{
    return !d->tile && atomic_load_explicit(&d->fam, memory_order_acquire) != NULL;
}

/* Whether writer w's failure reaches t through memory that overlaps d
 * (t names d partially, or d is t's own handle and w wrote part of it):
 * some access of t's own that reads (R, RW, COMMUTE) names a handle over
 * memory overlapping d's that no task wrote through that handle since w
 * was linked (its own_write is older).  A handle written since holds a
 * valid value again, as one handle's writer makes it valid.  The
 * histories of t's data are locked; own_write is still what came before
 * t (weft__access_link updates it last). */
static bool reaches(const weft__task *t, const weft__data *d, const weft__task *w)
{
    uintptr_t lo = (uintptr_t)d->ptr, hi = lo + d->size;
    for (uint32_t i = 0; i < t->naccess; i++) {
        const weft__task_access *a = &t->access[i];
        const weft__data *o = a->data;
        if ((a->mode & (WEFT__OVERLAP | WEFT__ORDER_ONLY | WEFT_SCRATCH | WEFT_REDUCE)) || !(a->mode & WEFT_R) ||
            !o->ptr)
            continue;
        uintptr_t olo = (uintptr_t)o->ptr, ohi = olo + o->size;
        if (olo < hi && lo < ohi && H(o)->own_write < w->linked)
            return true;
    }
    return false;
}

/* A partial access (WEFT__OVERLAP) of d by t, which reads and/or writes
 * part of its memory: it follows the data's writers (a writer also its
 * readers), never another partial access, and closes an open group (the
 * group's next members follow it through the group's base).  A failed
 * writer cancels t when t reads memory it wrote that was not written
 * again since (reaches).  Returns the edges used. */
static uint32_t link_partial(weft__task *t, const weft__data *d, unsigned mode, bool late, weft__edge *edges)
{
    history *h = H(d);
    uint32_t k = 0;
    for (uint32_t j = 0; j < h->nwriters; j++)
        weft__edge_add(t, &edges[k++], h->writers[j], !h->writers_tiled && writes(h, j, d) &&
                       reaches(t, d, h->writers[j]), late);
    if (mode & WEFT_W) {
        for (uint32_t j = 0; j < h->nreaders; j++)
            weft__edge_add(t, &edges[k++], h->readers[j], false, false);
        h->pwriters[h->npwriters++] = t;
    } else {
        h->preaders[h->npreaders++] = t;
    }
    if (h->writers_commute || h->writers_reduce)
        h->group_read = true;
    return k;
}

/* Whether t, reading d through its own access, is cancelled by partial
 * writer w of d that failed: w wrote part of d after d's own last writer. */
static bool partial_carries(const history *h, const weft__task *w) { return w->linked > h->own_write; }

/* t, which is not partial, follows h's partial accesses: the writers (a
 * failed one cancels t when t reads, partial_carries), and when t writes
 * the readers too, and then they are over. */
static uint32_t follow_partials(weft__task *t, history *h, unsigned mode, weft__edge *edges)
{
    uint32_t k = 0;
    bool reads = (mode & WEFT_R) != 0;
    for (uint32_t j = 0; j < h->npwriters; j++)
        weft__edge_add(t, &edges[k++], h->pwriters[j], reads && partial_carries(h, h->pwriters[j]), false);
    if (mode == WEFT_R)
        return k;
    for (uint32_t j = 0; j < h->npreaders; j++)
        weft__edge_add(t, &edges[k++], h->preaders[j], false, false);
    drop_all(h->pwriters, &h->npwriters);
    drop_all(h->preaders, &h->npreaders);
    return k;
}

/* Every write through t's own accesses, noted in their histories once t
 * is linked (reaches reads what came before t). */
static void note_own_writes(const weft__task *t, const weft__task_access *sorted, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (!(sorted[i].mode & (WEFT__OVERLAP | WEFT_REDUCE)) && (sorted[i].mode & WEFT_W))
            H(sorted[i].data)->own_write = t->linked;
}

void weft__access_link(weft__task *t, const weft__task_access *sorted, uint32_t n, weft__edge *edges)
{
    uint32_t k = 0;
    t->linked = atomic_fetch_add_explicit(&link_clock, 1, memory_order_relaxed) + 1;
    for (uint32_t i = 0; i < n; i++) {
        history *h = H(sorted[i].data);
        unsigned mode = sorted[i].mode;
        bool tiled = tiled_parent(sorted[i].data);
        bool via_parent = (mode & WEFT__VIA_PARENT) != 0;
        mode &= ~WEFT__VIA_PARENT;
        /* Edges from a reduction group's members are late, and from writers
         * through the other view of a tile. */
        bool late = h->writers_reduce || h->writers_parent != via_parent;
        /* A failed writer cancels its readers through this edge, or (all
         * linked while partitioned) through the tiles' histories. */
        bool carries = !h->writers_tiled;
        if (sorted[i].data->tile && !via_parent)
            weft__family_tile_spawned(sorted[i].data);
        if (mode & WEFT__OVERLAP) {
            k += link_partial(t, sorted[i].data, mode & ~WEFT__OVERLAP, late, edges + k);
        } else if (mode & (WEFT_COMMUTE | WEFT_REDUCE)) {
            if (!joins_open_group(&sorted[i])) {
                /* Open a group: what came before it becomes its base.  The
                 * references move from writers/readers to base.  Members
                 * follow its writers as readers do (a reduction updates the
                 * value: it is cancelled when the value's writer failed). */
                drop_all(h->base, &h->nbase);
                for (uint32_t j = 0; j < h->nwriters; j++) {
                    h->base[h->nbase] = h->writers[j];
                    h->base_flags[h->nbase++] = (carries && writes(h, j, sorted[i].data) ? BASE_PROPAGATE : 0) |
                                                (late ? BASE_LATE : 0);
                }
                for (uint32_t j = 0; j < h->nreaders; j++) {
                    h->base[h->nbase] = h->readers[j];
                    h->base_flags[h->nbase++] = 0;
                }
                for (uint32_t j = 0; j < h->npwriters; j++) {
                    h->base[h->nbase] = h->pwriters[j];
                    h->base_flags[h->nbase++] = partial_carries(h, h->pwriters[j]) ? BASE_PROPAGATE : 0;
                }
                for (uint32_t j = 0; j < h->npreaders; j++) {
                    h->base[h->nbase] = h->preaders[j];
                    h->base_flags[h->nbase++] = 0;
                }
                h->nwriters = 0;
                h->nreaders = 0;
                h->npwriters = 0;
                h->npreaders = 0;
                h->writers_commute = (mode & WEFT_COMMUTE) != 0;
                h->writers_reduce = (mode & WEFT_REDUCE) != 0;
                h->reduce_key = weft__red_key(mode);
                h->reduce_user = reduce_user(&sorted[i]);
                h->group_read = false;
                h->writers_tiled = tiled;
                h->writers_parent = via_parent;
                if (via_parent)
                    h->group_tile_spawns = weft__family_tile_spawns(sorted[i].data);
            } else if (!tiled) {
                h->writers_tiled = false;
            }
            /* (A member that only writes starts from scratch, as a WEFT_W
             * writer does: it is not cancelled by the value's writer.) */
            bool uses_value = (mode & (WEFT_R | WEFT_REDUCE)) != 0;
            for (uint32_t j = 0; j < h->nbase; j++)
                weft__edge_add(t, &edges[k++], h->base[j], uses_value && (h->base_flags[j] & BASE_PROPAGATE),
                               h->base_flags[j] & BASE_LATE);
            h->writers[h->nwriters++] = t;
        } else if (mode == WEFT_R) {
            for (uint32_t j = 0; j < h->nwriters; j++)
                weft__edge_add(t, &edges[k++], h->writers[j], carries && writes(h, j, sorted[i].data), late);
            k += follow_partials(t, h, mode, edges + k);
            h->readers[h->nreaders++] = t;
            if (h->writers_commute || h->writers_reduce)
                h->group_read = true;
        } else {
            bool reads = mode & WEFT_R;
            for (uint32_t j = 0; j < h->nwriters; j++)
                weft__edge_add(t, &edges[k++], h->writers[j], reads && carries && writes(h, j, sorted[i].data),
                               late);
            for (uint32_t j = 0; j < h->nreaders; j++)
                weft__edge_add(t, &edges[k++], h->readers[j], false, false);
            k += follow_partials(t, h, mode, edges + k);
            drop_all(h->writers, &h->nwriters);
            drop_all(h->readers, &h->nreaders);
            drop_all(h->base, &h->nbase);
            h->writers[h->nwriters++] = t;
            h->writers_commute = false;
            h->writers_reduce = false;
            h->group_read = false;
            h->writers_tiled = tiled;
            h->writers_parent = via_parent;
        }
    }
    note_own_writes(t, sorted, n);
}

bool weft__history_hand_over(weft__data *d, weft__data *n)
{
    history *a = H(d), *b = H(n);
    history *first = d < n ? a : b, *second = d < n ? b : a; /* spawn's order: by handle address */
    pthread_mutex_lock(&first->lock);
    pthread_mutex_lock(&second->lock);
    bool ok = reserve(&b->pwriters, &b->cap_pwriters, b->npwriters + a->nwriters) &&
              reserve(&b->preaders, &b->cap_preaders, b->npreaders + a->nreaders);
    if (ok) {
        for (uint32_t j = 0; j < a->nwriters; j++) {
            weft__task_ref(a->writers[j]);
            b->pwriters[b->npwriters++] = a->writers[j];
        }
        for (uint32_t j = 0; j < a->nreaders; j++) {
            weft__task_ref(a->readers[j]);
            b->preaders[b->npreaders++] = a->readers[j];
        }
        if ((a->nwriters || a->nreaders) && (b->writers_commute || b->writers_reduce))
            b->group_read = true;
    }
    pthread_mutex_unlock(&second->lock);
    pthread_mutex_unlock(&first->lock);
    return ok;
}

/* ------------------------------------------------------------------------ */
/* Commute exclusion                                                         */
/* ------------------------------------------------------------------------ */

/* Give up t's hold on every commuting datum it owns and requeue the tasks
 * that were waiting for one. */
void weft__commute_release(weft__task *t, weft__qnode **next)
{
    for (uint32_t i = 0; i < t->naccess; i++) {
        history *h = H(t->access[i].data);
        if (!(t->access[i].mode & WEFT_COMMUTE) || atomic_load(&h->commute_owner) != t)
            continue;
        atomic_store(&h->commute_owner, NULL);
        pthread_mutex_lock(&h->lock);
        weft__task *waiting = h->commute_waiters;
        h->commute_waiters = NULL;
        pthread_mutex_unlock(&h->lock);
        while (waiting) {
            weft__task *x = waiting;
            waiting = x->wait_next;
            x->wait_next = NULL;
            weft__task_requeue(x, next);
        }
    }
}

/* Take every commuting datum of t, or none: on conflict, release what was
 * taken and queue t on the busy datum (no hold-and-wait, so no deadlock). */
bool weft__commute_acquire(weft__task *t)
{
retry:
    for (uint32_t i = 0; i < t->naccess; i++) {
        history *h = H(t->access[i].data);
        if (!(t->access[i].mode & WEFT_COMMUTE))
            continue;
        weft__task *owner = NULL;
        if (atomic_compare_exchange_strong(&h->commute_owner, &owner, t) || owner == t)
            continue;
        weft__commute_release(t, NULL);
        pthread_mutex_lock(&h->lock);
        if (atomic_load(&h->commute_owner) == NULL) {
            pthread_mutex_unlock(&h->lock);
            goto retry;
        }
        t->wait_next = h->commute_waiters;
        h->commute_waiters = t;
        pthread_mutex_unlock(&h->lock);
        return false;
    }
    return true;
}
