/*
 * data/tile.h — tiles: a data handle split into a grid of blocks, each a
 * handle of its own, optionally with a read-only halo of its neighbours'
 * edges (weft_data_partition).  The handle split and its tiles make a
 * family; this file keeps the family coherent:
 *
 *   - a tile's replica states (data/data.h) are those of its interior; its
 *     halo on a device is copied from the neighbours' replicas when a task
 *     reads the tile there and a neighbour was written since (versions per
 *     replica and neighbour); on the host the halo is the neighbours' own
 *     memory, made valid there;
 *   - the parent and the tiles are two views of one array: a task on a tile
 *     after a task wrote the parent finds the tiles made from the parent's
 *     newest value, and a task on the parent after tiles were written finds
 *     the parent reassembled from them (both through the host; a phase
 *     switch, not a step of a stencil).
 *
 * The graph orders them: a task reading a tile also follows its neighbours'
 * writers, and a task on the parent follows (and precedes) every tile's
 * tasks (implicit order-only accesses added at spawn, weft__family_orders).
 *
 * A tile's reductions (data/reduce.h: private copies of its interior) are
 * combined here, under the family's lock, into the tile made from the
 * parent's newest value: by the next task on the tile, the next read of a
 * neighbour (its halo), the next task on the parent, or unregister, which
 * the graph orders after the reducers through the same accesses.
 */
#ifndef WEFT_TILE_H
#define WEFT_TILE_H

#include "data/data.h"

/* A neighbour of a tile: the part of its interior in this tile's halo. */
typedef struct weft__tile_nb {
    unsigned tile;                 /* its index in the family */
    size_t r0, c0, rows, bytes;    /* in the parent's rows and bytes */
} weft__tile_nb;

typedef struct weft__tile {
    struct weft__family *fam;
    unsigned index;                /* row-major in the grid */
    size_t r0, c0;                 /* where the tile (halo included) starts in the parent's rows
                                      and bytes, */
    size_t rows, row_bytes;        /* its size, */
    size_t in_r0, in_c0, in_rows, in_bytes; /* and its interior's (in the parent's rows and bytes) */
    unsigned nnb;
    weft__tile_nb nb[WEFT__HALO_MAX];
    /* seen[i * nnb + k]: the version of neighbour k its halo in replica i
     * holds (0: none yet).  Under the family's lock. */
    uint64_t *seen;
    _Atomic uint64_t wver;         /* bumped by each write of its interior; from 1 */
    /* Its border band (the cells of its interior within `halo` of its
     * edges, which its neighbours' halos read) is in the user's memory as
     * of version band while its host replica is invalid (0: not): copied
     * for a neighbour's host task, once per version, so that no cell of the
     * user's memory is written while a task may read it; a copy of the
     * tile to the host then brings the rest (weft__tile_host_part).  Set
     * under the tile's lock. */
    _Atomic uint64_t band;
    size_t band_rows, band_bytes;  /* its width: halo rows, halo elements' bytes */
} weft__tile;

typedef struct weft__family {
    /* lock serialises the acquires of the family's handles and protects
     * tiles[], the tiles' seen[], the *_synced fields and members.  Taken
     * before any handle's lock (a handle's lock is taken under it one at a
     * time, or a tile's and then a neighbour's: only a holder of this lock
     * holds two).  Never taken on a device's thread. */
    pthread_mutex_t lock;
    weft__data *parent;            /* NULL once freed */
    unsigned ntiles, grid_rows, grid_cols;
    size_t pitch;                  /* of the parent's rows in the user's memory */
    size_t elem;                   /* bytes per element */
    uint32_t parent_id;            /* the parent's number (the trace names tile i d<id>.t<i>) */
    weft__data **tiles;            /* NULL once a tile is freed */
    weft__tile *tile;              /* [ntiles] */
    unsigned members;              /* parent + tiles not freed: the last one frees the family */
    /* Bumped (atomically: undo bumps them without the lock) by each write
     * of the parent, of any tile. */
    _Atomic uint64_t parent_wver, tiles_wver;
    /* Spawns that named a tile itself (not through the parent): each ends
     * a commute group of the parent's (graph/access.c).  Bumped under that
     * tile's history lock; read under every tile's (a parent access holds
     * them all), so it cannot change within such a spawn. */
    _Atomic uint64_t tile_spawns;
    uint64_t tiles_synced;         /* parent_wver the tiles were last made from */
    uint64_t parent_synced;        /* tiles_wver the parent was last reassembled at */
} weft__family;

/* A family over parent (not yet published) with the tiling t (validated:
 * WEFT_EINVAL with the reason in err).  The tiles are then made by the
 * caller (weft__family_tile_shape, weft__data_new) and attached. */
int weft__family_new(weft__data *parent, const weft_tiling *t, weft__family **out, char *err, size_t errlen);
/* Tile i's host address, size and shape, to register it. */
void weft__family_tile_shape(const weft__family *f, unsigned i, void **ptr, size_t *size);
/* Attach tile i's handle (shape set from the tiling); ENOMEM possible. */
int weft__family_attach(weft__family *f, unsigned i, weft__data *tile);
/* Free a family never published (the tiles' handles are the caller's). */
void weft__family_discard(weft__family *f);
/* Publish: the parent is partitioned from now on. */
void weft__family_publish(weft__family *f);

/* The "reserved" stage for a handle of a family (weft__data_acquire), for
 * task seq: the tiles' reductions spawned before it that it depends on
 * are combined first (its tile's own and its neighbours' for a tile
 * read, every tile's for a parent access), under the family's lock, into
 * the tiles made from the parent's newest value. */
int weft__family_acquire(weft__data *d, unsigned dev, unsigned mode, uint64_t seq, weft__dqueue *q,
                         weft__data_hold *hold, weft__wrec *rec);
/* A write of d was undone: the rest of the family refreshes from it. */
void weft__family_undone(weft__data *d);
/* The family's tile_spawns (d a tile), and a spawn naming tile d itself. */
uint64_t weft__family_tile_spawns(const weft__data *d);
void weft__family_tile_spawned(weft__data *d);
/* The checking mode's look at tile d's halo where a task on dev reads it
 * (weft__data_check). */
int weft__tile_check(weft__data *d, unsigned dev, unsigned mode, char *why, size_t len);
/* A digest of tile d's halo cells in the user's memory (its neighbours'
 * interiors there), for the checking mode: 0 for a tile with no halo. */
uint64_t weft__tile_halo_digest(const weft__data *d);

/* The part of tile d's interior a copy to the host brings (its lock
 * held): all of it, or without the border band already there. */
void weft__tile_host_part(const weft__data *d, weft__rect *p);
/* Called by a fetch into device replica dev of tile d (under its lock and
 * the family's): its halo there is to be copied again. */
void weft__tile_halo_stale(weft__data *d, unsigned dev);
/* Unpin the neighbours' replicas a tile's halo was copied from. */
void weft__tile_release_halo(weft__data *d, const weft__data_hold *hold, bool notify);
/* d (no task uses it) is being freed: the family brought up to date (a
 * tile's reductions combined, a tile whose value the parent's replaced is
 * not written back), then d leaves it; the last to leave frees it. */
void weft__family_leave(weft__data *d);
/* Every task on the family done (an unregister, before it frees the
 * tiles): the copies back to the host of the tiles whose newest value is
 * on a device only, started together (weft__data_host_fetch_start), unless
 * the parent was written after them (their values are not written back).
 * Takes the family's lock, then each tile's. */
void weft__family_write_back_start(weft__family *f);

/* The handles a task accessing d with mode must also be ordered with
 * (order-only, not acquired): a tile read follows its neighbours; a parent
 * access every tile with its own R, W and COMMUTE (a parent RW reads them:
 * a tile writer's failure reaches it; a commute member commutes on them).  Returns how many there are;
 * when at most max, they are in out (modes in modes), each counted as a
 * user (weft__data_unpin) — unless one is being unregistered (*closing
 * set, none counted, 0 returned). */
size_t weft__family_orders(weft__data *d, unsigned mode, weft__data **out, unsigned *modes, size_t max,
                           bool *closing);

#endif
