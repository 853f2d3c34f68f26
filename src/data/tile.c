/*
 * data/tile.c — families of tiles (data/tile.h): the geometry of a
 * partition, halos copied from neighbours, and the parent and its tiles kept
 * coherent with each other.
 */
#include "data/tile.h"
#include "data/reduce.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Geometry                                                                  */
/* ------------------------------------------------------------------------ */

/* Start of block k of n over len. */
/* Where block k of len cells split in n near-equal blocks begins (k == n:
 * len): the first len % n blocks get one cell more, as weft_grid's. */
static size_t split(size_t len, unsigned n, unsigned k) { return k * (len / n) + (k < len % n ? k : len % n); }

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

int weft__family_new(weft__data *parent, const weft_tiling *t, weft__family **out, char *err, size_t errlen)
{
    *out = NULL;
#define BAD(...) (snprintf(err, errlen, __VA_ARGS__), WEFT_EINVAL)
    if (!t->elem || !t->rows || !t->cols)
        return BAD("elem, rows and cols must not be zero (elem %zu, rows %zu, cols %zu)", t->elem, t->rows, t->cols);
    if (t->cols > SIZE_MAX / t->elem)
        return BAD("%zu columns of %zu bytes overflow", t->cols, t->elem);
    size_t e = t->elem, row = t->cols * e, pitch = t->pitch ? t->pitch : row;
    if (pitch < row)
        return BAD("pitch %zu is less than a row's %zu bytes", pitch, row);
    if (t->rows - 1 > (SIZE_MAX - row) / pitch || (t->rows - 1) * pitch + row > parent->size)
        return BAD("%zu rows of %zu bytes, %zu apart, do not fit in the data's %zu bytes", t->rows, row, pitch,
                   parent->size);
    if (!t->grid_rows || !t->grid_cols || t->grid_rows > t->rows || t->grid_cols > t->cols)
        return BAD("a grid of %u x %u tiles does not fit %zu x %zu elements", t->grid_rows, t->grid_cols, t->rows,
                   t->cols);
    if ((uint64_t)t->grid_rows * t->grid_cols > 65536)
        return BAD("%u x %u tiles: at most 65536", t->grid_rows, t->grid_cols);
    size_t brows = t->rows / t->grid_rows, bcols = t->cols / t->grid_cols; /* the smallest blocks */
    if ((t->grid_rows > 1 && t->halo > brows) || (t->grid_cols > 1 && t->halo > bcols))
        return BAD("halo %u is wider than the smallest tile (%zu x %zu elements)", t->halo, brows, bcols);
#undef BAD

    unsigned n = t->grid_rows * t->grid_cols;
    weft__family *f = weft__alloc(sizeof *f);
    weft__data **tiles = weft__alloc(sizeof *tiles * n);
    weft__tile *tl = weft__alloc(sizeof *tl * n);
    if (!f || !tiles || !tl) {
        weft__free(f);
        weft__free(tiles);
        weft__free(tl);
        return WEFT_ENOMEM;
    }
    memset(f, 0, sizeof *f);
    memset(tiles, 0, sizeof *tiles * n);
    memset(tl, 0, sizeof *tl * n);
    pthread_mutex_init(&f->lock, NULL);
    f->parent = parent;
    f->ntiles = n;
    f->grid_rows = t->grid_rows;
    f->grid_cols = t->grid_cols;
    f->pitch = pitch;
    f->elem = e;
    f->parent_id = parent->id;
    f->tiles = tiles;
    f->tile = tl;
    f->members = 1;
    /* The tiles are made from the parent's value at their first use (it
     * may be on a device now). */
    atomic_init(&f->parent_wver, 1);
    atomic_init(&f->tiles_wver, 0);

    size_t h = t->halo;
    for (unsigned i = 0; i < n; i++) {
        weft__tile *x = &tl[i];
        unsigned a = i / t->grid_cols, b = i % t->grid_cols;
        size_t r0 = split(t->rows, t->grid_rows, a), r1 = split(t->rows, t->grid_rows, a + 1);
        size_t c0 = split(t->cols, t->grid_cols, b), c1 = split(t->cols, t->grid_cols, b + 1);
        size_t er0 = r0 > h ? r0 - h : 0, er1 = min_sz(t->rows, r1 + h);
        size_t ec0 = c0 > h ? c0 - h : 0, ec1 = min_sz(t->cols, c1 + h);
        x->fam = f;
        x->index = i;
        atomic_init(&x->wver, 1);
        x->r0 = er0, x->c0 = ec0 * e, x->rows = er1 - er0, x->row_bytes = (ec1 - ec0) * e;
        x->in_r0 = r0, x->in_c0 = c0 * e, x->in_rows = r1 - r0, x->in_bytes = (c1 - c0) * e;
        x->band_rows = t->grid_rows > 1 ? h : 0; /* rows its neighbours above and below read */
        x->band_bytes = t->grid_cols > 1 ? h * e : 0;
        atomic_init(&x->band, 0);
    }
    /* Neighbours: the other interiors inside each tile's span (the halo is
     * at most a block wide: only the 8 around it). */
    for (unsigned i = 0; i < n; i++) {
        weft__tile *x = &tl[i];
        long a = (long)(i / t->grid_cols), b = (long)(i % t->grid_cols);
        for (long na = a - 1; na <= a + 1; na++)
            for (long nb = b - 1; nb <= b + 1; nb++) {
                if ((na == a && nb == b) || na < 0 || nb < 0 || na >= (long)t->grid_rows ||
                    nb >= (long)t->grid_cols)
                    continue;
                const weft__tile *y = &tl[na * (long)t->grid_cols + nb];
                size_t r0 = max_sz(y->in_r0, x->r0), r1 = min_sz(y->in_r0 + y->in_rows, x->r0 + x->rows);
                size_t c0 = max_sz(y->in_c0, x->c0), c1 = min_sz(y->in_c0 + y->in_bytes, x->c0 + x->row_bytes);
                if (r0 < r1 && c0 < c1)
                    x->nb[x->nnb++] = (weft__tile_nb){y->index, r0, c0, r1 - r0, c1 - c0};
            }
    }
    *out = f;
    return 0;
}

void weft__family_tile_shape(const weft__family *f, unsigned i, void **ptr, size_t *size)
{
    const weft__tile *x = &f->tile[i];
    *ptr = (char *)f->parent->ptr + x->r0 * f->pitch + x->c0;
    *size = x->rows * x->row_bytes;
}

int weft__family_attach(weft__family *f, unsigned i, weft__data *d)
{
    weft__tile *x = &f->tile[i];
    if (x->nnb) {
        x->seen = weft__alloc(sizeof *x->seen * d->nrep * x->nnb);
        if (!x->seen)
            return WEFT_ENOMEM;
        memset(x->seen, 0, sizeof *x->seen * d->nrep * x->nnb);
    }
    d->rows = x->rows;
    d->row_bytes = x->row_bytes;
    d->hpitch = f->pitch;
    d->in_r0 = x->in_r0 - x->r0;
    d->in_c0 = x->in_c0 - x->c0;
    d->in_rows = x->in_rows;
    d->in_bytes = x->in_bytes;
    d->tile = x;
    f->tiles[i] = d;
    f->members++;
    return 0;
}

void weft__family_discard(weft__family *f)
{
    for (unsigned i = 0; i < f->ntiles; i++) {
        weft__free(f->tile[i].seen);
        if (f->tiles[i])
            f->tiles[i]->tile = NULL;
    }
    pthread_mutex_destroy(&f->lock);
    weft__free(f->tiles);
    weft__free(f->tile);
    weft__free(f);
}

void weft__family_publish(weft__family *f)
{
    for (unsigned i = 0; i < f->ntiles; i++)
        atomic_store_explicit(&f->tiles[i]->fam, f, memory_order_release);
    atomic_store_explicit(&f->parent->fam, f, memory_order_release);
}

/* ------------------------------------------------------------------------ */
/* Coherence                                                                 */
/* ------------------------------------------------------------------------ */

/* Make the host's replica of each handle of xs[0 .. n-1] valid (the
 * family's lock held).  A task on the host (q NULL) runs after its
 * predecessors finished: each copy is the data layer's own, waited for.  A
 * task on a device may start before its predecessors' kernels ran (its
 * queue waits for them): the copies go on its queue, after them, and are
 * waited for there. */
static int to_host_all(weft__data *const *xs, size_t n, weft__device *qdev, weft__dqueue *q)
{
    int rc = 0;
    int8_t stack_src[64], *src = n <= 64 ? stack_src : weft__alloc(n);
    if (!src)
        return WEFT_ENOMEM;
    bool queued = false;
    for (size_t i = 0; i < n; i++) {
        weft__data *x = xs[i];
        src[i] = -1;
        if (!x)
            continue;
        pthread_mutex_lock(&x->lock);
        weft__data_wait_overwritable(x, 0); /* (the last copy of a value an open write may fall back to) */
        int s = !weft__rep_valid(x, 0) ? weft__data_source_for(x, 0) : 0;
        if (s > 0 && q && x->devs[s]->ops == qdev->ops) {
            rc = weft__data_wait_ready(x, (unsigned)s, q);
            weft__rect p = {x->in_r0, x->in_c0, x->in_rows, x->in_bytes};
            if (x->tile)
                weft__tile_host_part(x, &p);
            if (rc == 0) {
                weft__data_watch_before_copy(x, (unsigned)s); /* (the checking mode: what it held until now) */
                rc = weft__data_copy_rect(qdev->ops, q, x, 0, p.r, p.c, x, (unsigned)s, p.r, p.c, p.rows, p.bytes);
            }
            if (rc == 0) {
                atomic_fetch_add(&x->rep[s].pins, 1); /* not evicted before the copy ran */
                src[i] = (int8_t)s;
                queued = true;
            }
        } else if (s != 0) {
            rc = weft__data_to_host(x); /* a host task's, or from a device of another kind */
        }
        pthread_mutex_unlock(&x->lock);
        if (rc != 0)
            break;
    }
    if (queued) {
        weft__devent *e = NULL;
        int wrc = qdev->ops->event_create(qdev, &e);
        if (wrc == 0 && (wrc = qdev->ops->event_record(e, q)) == 0)
            wrc = weft__device_event_wait(qdev, e);
        if (e)
            qdev->ops->event_destroy(e);
        if (rc == 0)
            rc = wrc;
        for (size_t i = 0; i < n; i++) {
            if (src[i] < 0)
                continue;
            weft__data *x = xs[i];
            pthread_mutex_lock(&x->lock);
            if (wrc == 0)
                weft__data_host_copied(x, (unsigned)src[i]);
            else
                weft__data_watch_off(x); /* (part of the copy may have landed: not the program's) */
            pthread_mutex_unlock(&x->lock);
            weft__data_unpin_replica(x, src[i], true);
        }
    }
    if (src != stack_src)
        weft__free(src);
    return rc;
}

/* The tiles, before a task uses one: made from the parent's newest value
 * if the parent was written since they were last (the family's lock held). */
static int sync_tiles(weft__family *f, weft__device *qdev, weft__dqueue *q)
{
    uint64_t pv = atomic_load(&f->parent_wver);
    if (f->tiles_synced == pv)
        return 0;
    int rc = f->parent ? to_host_all(&f->parent, 1, qdev, q) : 0;
    if (rc != 0)
        return rc;
    for (unsigned i = 0; i < f->ntiles; i++) {
        weft__data *t = f->tiles[i];
        if (!t)
            continue; /* freed (unregister frees the tiles one by one) */
        pthread_mutex_lock(&t->lock);
        weft__data_reset_to_host(t);
        for (unsigned r = 0; r < t->nrep; r++)
            weft__tile_halo_stale(t, r);
        pthread_mutex_unlock(&t->lock);
        atomic_fetch_add(&t->tile->wver, 1); /* the neighbours' copies of it too */
    }
    f->tiles_synced = pv;
    return 0;
}

/* The parent, before a task uses it: reassembled from the tiles if one was
 * written since it was last (the family's lock held). */
static int sync_parent(weft__family *f, weft__device *qdev, weft__dqueue *q)
{
    uint64_t tv = atomic_load(&f->tiles_wver);
    if (f->parent_synced == tv)
        return 0;
    int rc = to_host_all(f->tiles, f->ntiles, qdev, q);
    if (rc != 0)
        return rc;
    if (f->parent) {
        pthread_mutex_lock(&f->parent->lock);
        weft__data_reset_to_host(f->parent);
        pthread_mutex_unlock(&f->parent->lock);
    }
    f->parent_synced = tv;
    return 0;
}

/* Tile t's reductions spawned before task seq (UINT64_MAX: all) combined
 * into its interior on the host, in spawn order (the family's lock held,
 * the tiles made from the parent already: sync_tiles).  The graph has
 * made task seq follow those reducers (a tile's own history, or the
 * order-only accesses of a neighbour's reader or of a parent access), so
 * they have finished.  The interior changed: its version is bumped, so
 * that its neighbours' halos and the parent are brought up to date. */
static int fold_tile(weft__data *t, uint64_t seq)
{
    if (!atomic_load_explicit(&t->has_partials, memory_order_acquire))
        return 0;
    pthread_mutex_lock(&t->lock);
    bool any = t->partials && t->partials->seq < seq;
    int rc = any ? weft__reduce_fold(t, seq) : 0;
    pthread_mutex_unlock(&t->lock);
    if (any) { /* (a spurious bump, when only failed reducers were dropped, costs a copy of the halo) */
        atomic_fetch_add(&t->tile->wver, 1);
        atomic_fetch_add(&t->tile->fam->tiles_wver, 1);
    }
    return rc;
}

/* Before a task on the parent (task seq): the tiles' reductions spawned
 * before it, combined into the tiles made from the parent's newest value
 * (the family's lock held; nothing if there are none). */
static int fold_tiles(weft__family *f, uint64_t seq, weft__device *qdev, weft__dqueue *q)
{
    bool any = false;
    for (unsigned i = 0; i < f->ntiles && !any; i++)
        any = f->tiles[i] && atomic_load_explicit(&f->tiles[i]->has_partials, memory_order_acquire);
    if (!any)
        return 0;
    int rc = sync_tiles(f, qdev, q);
    for (unsigned i = 0; i < f->ntiles && rc == 0; i++)
        if (f->tiles[i])
            rc = fold_tile(f->tiles[i], seq);
    return rc;
}

/* The border band of tile n's interior (local rows and bytes): up to four
 * parts, top and bottom rows, then the left and right columns between. */
static unsigned band_parts(const weft__data *n, weft__rect p[4])
{
    const weft__tile *x = n->tile;
    size_t r0 = n->in_r0, c0 = n->in_c0, rows = n->in_rows, bytes = n->in_bytes;
    size_t h = x->band_rows, w = x->band_bytes;
    if (2 * h >= rows || 2 * w >= bytes) { /* all band */
        p[0] = (weft__rect){r0, c0, rows, bytes};
        return 1;
    }
    unsigned k = 0;
    if (h) {
        p[k++] = (weft__rect){r0, c0, h, bytes};
        p[k++] = (weft__rect){r0 + rows - h, c0, h, bytes};
    }
    if (w) {
        p[k++] = (weft__rect){r0 + h, c0, rows - 2 * h, w};
        p[k++] = (weft__rect){r0 + h, c0 + bytes - w, rows - 2 * h, w};
    }
    return k;
}

/* Tile n's border band into the user's memory (its lock held). */
static int band_to_host(weft__data *n)
{
    weft__rect p[4];
    unsigned k = band_parts(n, p);
    return weft__data_parts_to_host(n, p, k);
}

void weft__tile_host_part(const weft__data *d, weft__rect *p)
{
    const weft__tile *x = d->tile;
    *p = (weft__rect){d->in_r0, d->in_c0, d->in_rows, d->in_bytes};
    if (atomic_load(&x->band) != atomic_load(&x->wver))
        return;
    size_t h = x->band_rows, w = x->band_bytes;
    if (2 * h >= p->rows || 2 * w >= p->bytes) { /* all of it is there */
        p->rows = p->bytes = 0;
        return;
    }
    *p = (weft__rect){p->r + h, p->c + w, p->rows - 2 * h, p->bytes - 2 * w};
}

/* A read of tile d on device dev by task seq: bring its halo there up to
 * date (the family's lock held; d's replica there valid and pinned by the
 * task).  The neighbours' reductions spawned before the task are combined
 * first (the task follows them through its order-only accesses). */
static int halo(weft__data *d, unsigned dev, uint64_t seq, weft__dqueue *q, weft__data_hold *hold)
{
    weft__tile *x = d->tile;
    weft__family *f = x->fam;
    int rc = 0;
    for (unsigned k = 0; k < x->nnb && rc == 0; k++)
        rc = fold_tile(f->tiles[x->nb[k].tile], seq);
    if (rc != 0)
        return rc;
    if (dev == 0) { /* the host's halo is the neighbours' own memory: their border bands brought there */
        for (unsigned k = 0; k < x->nnb && rc == 0; k++) {
            weft__data *n = f->tiles[x->nb[k].tile];
            uint64_t *seen = &x->seen[k], v = atomic_load(&n->tile->wver);
            if (*seen == v)
                continue;
            pthread_mutex_lock(&n->lock);
            if (!weft__rep_valid(n, 0) && atomic_load(&n->tile->band) != v) {
                rc = band_to_host(n);
                if (rc == 0) {
                    atomic_store(&n->tile->band, v);
                    hold->nhalo++;
                }
            }
            pthread_mutex_unlock(&n->lock);
            if (rc == 0)
                *seen = v;
        }
        return rc;
    }
    const weft__device_ops *ops = d->devs[dev]->ops;
    bool any = false;
    for (unsigned k = 0; k < x->nnb && rc == 0; k++) {
        const weft__tile_nb *nb = &x->nb[k];
        weft__data *n = f->tiles[nb->tile];
        uint64_t *seen = &x->seen[dev * x->nnb + k], v = atomic_load(&n->tile->wver);
        if (*seen == v)
            continue;
        pthread_mutex_lock(&n->lock);
        int s = dev < n->nrep && weft__rep_valid(n, dev) ? (int)dev : weft__data_source_for(n, dev);
        if (s < -1) { /* only on a device of another kind: through the host */
            rc = weft__data_to_host(n);
            s = 0;
        } else if (s == -1) {
            rc = WEFT_EDEVICE; /* no valid copy anywhere: cannot happen while the states hold */
        }
        if (rc == 0 && s > 0)
            rc = weft__data_wait_ready(n, (unsigned)s, q);
        if (rc == 0)
            rc = weft__data_copy_rect(ops, q, d, dev, nb->r0 - x->r0, nb->c0 - x->c0, n, (unsigned)s,
                                      nb->r0 - n->tile->r0, nb->c0 - n->tile->c0, nb->rows, nb->bytes);
        if (rc == 0 && s > 0) { /* not evicted before the copy ran */
            atomic_fetch_add(&n->rep[s].pins, 1);
            hold->halo[k] = (int8_t)s;
        }
        pthread_mutex_unlock(&n->lock);
        if (rc == 0) {
            *seen = v;
            any = true;
            hold->nhalo++;
        }
    }
    if (any) { /* later users of the replica on other queues wait for the halo too */
        pthread_mutex_lock(&d->lock);
        int nrc = weft__data_note_ready(d, dev, q);
        pthread_mutex_unlock(&d->lock);
        if (rc == 0)
            rc = nrc;
    }
    return rc;
}

int weft__family_acquire(weft__data *d, unsigned dev, unsigned mode, uint64_t seq, weft__dqueue *q,
                         weft__data_hold *hold, weft__wrec *rec)
{
    weft__family *f = atomic_load_explicit(&d->fam, memory_order_acquire);
    if (dev >= d->nrep || !q)
        dev = 0, q = NULL;
    weft__device *qdev = dev ? d->devs[dev] : NULL;
    pthread_mutex_lock(&f->lock);
    /* The value first: made from the parent, with the reductions spawned
     * before this task combined; then the view it uses. */
    int rc;
    if (d->tile) {
        rc = sync_tiles(f, qdev, q);
        if (rc == 0)
            rc = fold_tile(d, seq);
    } else {
        rc = fold_tiles(f, seq, qdev, q);
        if (rc == 0)
            rc = sync_parent(f, qdev, q);
    }
    if (rc == 0)
        rc = weft__data_acquire_one(d, dev, mode, q, hold, rec);
    if (rc == 0 && (mode & WEFT_W)) {
        if (d->tile) {
            atomic_fetch_add(&d->tile->wver, 1);
            atomic_fetch_add(&f->tiles_wver, 1);
        } else {
            atomic_fetch_add(&f->parent_wver, 1);
        }
    }
    if (rc == 0 && d->tile && (mode & WEFT_R))
        rc = halo(d, dev, seq, q, hold);
    /* The checking mode's host watch: a change of the memory of another
     * member of the family, found by a copy made for this task (the parent
     * brought back for a tile, the tiles for the parent, a neighbour's
     * border band), fails this task (weft__data_watch_take). */
    if (d->tile) {
        weft__data_watch_pass(f->parent, d);
        for (unsigned k = 0; (mode & WEFT_R) && k < d->tile->nnb; k++)
            weft__data_watch_pass(f->tiles[d->tile->nb[k].tile], d);
    } else {
        for (unsigned i = 0; i < f->ntiles; i++)
            weft__data_watch_pass(f->tiles[i], d);
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

int weft__tile_check(weft__data *d, unsigned dev, unsigned mode, char *why, size_t len)
{
    weft__tile *x = d->tile;
    if (!(mode & WEFT_R) || !x->nnb)
        return 0;
    weft__family *f = x->fam;
    int rc = 0;
    pthread_mutex_lock(&f->lock);
    for (unsigned k = 0; k < x->nnb && rc == 0; k++) {
        weft__data *n = f->tiles[x->nb[k].tile];
        uint64_t v = atomic_load(&n->tile->wver);
        bool fresh = x->seen[dev * x->nnb + k] == v;
        if (fresh && dev == 0) { /* and the cells are there */
            pthread_mutex_lock(&n->lock);
            fresh = weft__rep_valid(n, 0) || atomic_load(&n->tile->band) == v;
            pthread_mutex_unlock(&n->lock);
        }
        if (!fresh) {
            snprintf(why, len, "its halo on %s from tile %u is not its newest value", d->devs[dev]->name,
                     n->tile->index);
            rc = WEFT_EDEVICE;
        }
    }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

void weft__family_undone(weft__data *d)
{
    weft__family *f = atomic_load_explicit(&d->fam, memory_order_acquire);
    if (d->tile) {
        atomic_fetch_add(&d->tile->wver, 1);
        atomic_fetch_add(&f->tiles_wver, 1);
    } else {
        atomic_fetch_add(&f->parent_wver, 1);
    }
}

uint64_t weft__family_tile_spawns(const weft__data *d)
{
    return atomic_load(&d->tile->fam->tile_spawns);
}

void weft__family_tile_spawned(weft__data *d) { atomic_fetch_add(&d->tile->fam->tile_spawns, 1); }

uint64_t weft__tile_halo_digest(const weft__data *d)
{
    if (!d->tile || !d->tile->nnb || !d->ptr)
        return 0;
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the halo's bytes, row by row */
    for (size_t r = 0; r < d->rows; r++) {
        const unsigned char *row = (const unsigned char *)d->ptr + r * d->hpitch;
        bool inner = r >= d->in_r0 && r < d->in_r0 + d->in_rows;
        for (size_t c = 0; c < d->row_bytes; c++) {
            if (inner && c == d->in_c0) {
                c += d->in_bytes - 1; /* (the interior: the tile's own) */
                continue;
            }
            h = (h ^ row[c]) * 1099511628211ull;
        }
    }
    return h;
}

void weft__tile_halo_stale(weft__data *d, unsigned dev)
{
    weft__tile *x = d->tile;
    if (x && x->nnb && dev < d->nrep)
        memset(&x->seen[dev * x->nnb], 0, sizeof *x->seen * x->nnb);
}

void weft__tile_release_halo(weft__data *d, const weft__data_hold *hold, bool notify)
{
    weft__tile *x = d->tile;
    for (unsigned k = 0; k < x->nnb; k++)
        if (hold->halo[k] > 0)
            weft__data_unpin_replica(x->fam->tiles[x->nb[k].tile], hold->halo[k], notify);
}

void weft__family_write_back_start(weft__family *f)
{
    pthread_mutex_lock(&f->lock);
    if (f->tiles_synced == atomic_load(&f->parent_wver))
        for (unsigned i = 0; i < f->ntiles; i++)
            if (f->tiles[i])
                weft__data_host_fetch_start(f->tiles[i]);
    pthread_mutex_unlock(&f->lock);
}

void weft__family_leave(weft__data *d)
{
    weft__family *f = atomic_load_explicit(&d->fam, memory_order_acquire);
    pthread_mutex_lock(&f->lock);
    if (d->tile && atomic_load(&d->has_partials)) {
        /* Its reductions not combined yet, into the value made from the
         * parent (a failed copy leaves them out, as unregister's copy back
         * does: data/reduce.h). */
        if (sync_tiles(f, NULL, NULL) == 0) {
            pthread_mutex_lock(&d->lock);
            weft__reduce_free(d);
            pthread_mutex_unlock(&d->lock);
            atomic_fetch_add(&d->tile->wver, 1);
            atomic_fetch_add(&f->tiles_wver, 1);
        }
    }
    if (d->tile) {
        if (f->tiles_synced != atomic_load(&f->parent_wver)) {
            /* The parent's value replaced the tile's: not written back. */
            pthread_mutex_lock(&d->lock);
            weft__data_reset_to_host(d);
            pthread_mutex_unlock(&d->lock);
        }
        f->tiles[d->tile->index] = NULL;
    } else {
        weft__data *const *t = f->tiles;
        size_t n = 0;
        for (unsigned i = 0; i < f->ntiles; i++)
            n += t[i] != NULL;
        if (n == 0 && f->parent_synced != atomic_load(&f->tiles_wver)) {
            /* Every tile wrote itself back when it was freed. */
            pthread_mutex_lock(&d->lock);
            weft__data_reset_to_host(d);
            pthread_mutex_unlock(&d->lock);
        } else {
            (void)sync_parent(f, NULL, NULL); /* a failed copy leaves the user's memory as it was */
        }
        f->parent = NULL;
    }
    bool last = --f->members == 0;
    pthread_mutex_unlock(&f->lock);
    atomic_store(&d->fam, NULL);
    d->tile = NULL;
    if (last)
        weft__family_discard(f);
}

/* Count x as a user of the task being spawned; false if it is closing. */
static bool pin_user(weft__data *x)
{
    int64_t v = atomic_load(&x->users);
    do {
        if (v & WEFT__DATA_CLOSING)
            return false;
    } while (!atomic_compare_exchange_weak(&x->users, &v, v + 1));
    return true;
}

size_t weft__family_orders(weft__data *d, unsigned mode, weft__data **out, unsigned *modes, size_t max, bool *closing)
{
    weft__family *f = atomic_load_explicit(&d->fam, memory_order_acquire);
    *closing = false;
    if (!f)
        return 0;
    size_t n = 0;
    pthread_mutex_lock(&f->lock);
    if (d->tile) {
        if (mode & WEFT_R)
            for (unsigned k = 0; k < d->tile->nnb; k++) {
                if (n < max) {
                    out[n] = f->tiles[d->tile->nb[k].tile];
                    modes[n] = WEFT_R;
                }
                n++;
            }
    } else {
        for (unsigned i = 0; i < f->ntiles; i++) {
            if (n < max) {
                out[n] = f->tiles[i];
                /* A parent RW reads the tiles too (their failures reach
                 * it); a commute member commutes on them as on the parent
                 * (it takes their exclusion too, and does not follow the
                 * other members). */
                modes[n] = mode & (WEFT_RW | WEFT_COMMUTE);
            }
            n++;
        }
    }
    if (n <= max)
        for (size_t i = 0; i < n; i++)
            if (!out[i] || !pin_user(out[i])) {
                *closing = true;
                while (i-- > 0)
                    weft__data_unpin(out[i]);
                n = 0;
                break;
            }
    pthread_mutex_unlock(&f->lock);
    return n;
}
