/*
 * alloc.c — every internal allocation goes through here (convention 7), so a
 * test can make the n-th one fail; and the type-stable slot pools behind
 * every user-visible handle.
 */
#include "internal.h"
#include "testing.h"

#include <string.h>

static _Atomic long alloc_count;
static _Atomic long alloc_fail_at; /* absolute count that fails, 0 = never */
static _Atomic long alloc_live;

void weft__alloc_fail_at(long n)
{
    long now = atomic_load(&alloc_count);
    atomic_store(&alloc_fail_at, n > 0 ? now + n : 0);
}

long weft__alloc_count(void) { return atomic_load(&alloc_count); }
long weft__alloc_live(void) { return atomic_load(&alloc_live); }

static bool injected_failure(void)
{
    long k = atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed) + 1;
    long target = atomic_load_explicit(&alloc_fail_at, memory_order_relaxed);
    if (target != 0 && k == target) {
        atomic_store(&alloc_fail_at, 0);
        return true;
    }
    return false;
}

void *weft__alloc(size_t n)
{
    if (injected_failure())
        return NULL;
    void *p = malloc(n ? n : 1);
    if (p)
        atomic_fetch_add_explicit(&alloc_live, 1, memory_order_relaxed);
    return p;
}

void *weft__alloc_aligned(size_t align, size_t n)
{
    if (injected_failure())
        return NULL;
    size_t rounded = (n + align - 1) / align * align;
    void *p = aligned_alloc(align, rounded ? rounded : align);
    if (p)
        atomic_fetch_add_explicit(&alloc_live, 1, memory_order_relaxed);
    return p;
}

void *weft__realloc(void *p, size_t n)
{
    if (!p)
        return weft__alloc(n);
    if (injected_failure())
        return NULL;
    return realloc(p, n ? n : 1);
}

void weft__free(void *p)
{
    if (!p)
        return;
    atomic_fetch_sub_explicit(&alloc_live, 1, memory_order_relaxed);
    free(p);
}

char *weft__strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = weft__alloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ------------------------------------------------------------------------ */
/* Slot pools                                                                */
/*                                                                          */
/* Each thread keeps a small LIFO cache of free slots per pool; overflow      */
/* moves in batches to the pool's global list (one mutex, touched once per    */
/* BATCH slots), so spawning and finishing tasks normally take no lock here.  */
/* Chunks of slots are never freed: they stay reachable from the pool, so the */
/* memory is reused, never leaked, and stale handles stay safe to inspect.    */
/* ------------------------------------------------------------------------ */

#define BATCH 64
#define CACHE_MAX (2 * BATCH)

typedef struct chunk {
    struct chunk *next;
} chunk;

typedef struct pool {
    _Atomic size_t slot_size; /* set once, by the first allocation */
    pthread_mutex_t lock; /* protects batches and chunks */
    weft__slot *batches;  /* stack of free batches, each a free_next list */
    chunk *chunks;
} pool;

#define ROUND_SLOT(sz) (((sz) + WEFT__SLOT_ALIGN - 1) / WEFT__SLOT_ALIGN * WEFT__SLOT_ALIGN)

/* Slot sizes are set by the first allocation of each pool (each pool holds
 * one struct type, whose owner passes its size). */
static pool pools[WEFT__NPOOLS] = {
    [WEFT__POOL_TASK] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
    [WEFT__POOL_DATA] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
    [WEFT__POOL_RUNTIME] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
    [WEFT__POOL_SPACE] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
};

typedef struct thread_cache {
    weft__slot *head[WEFT__NPOOLS];
    size_t count[WEFT__NPOOLS];
} thread_cache;

static _Thread_local thread_cache tcache;
static pthread_key_t flush_key;
static pthread_once_t flush_once = PTHREAD_ONCE_INIT;

/* Move cached slots to the pool, a batch (a ready-made list) at a time,
 * until at most `keep` remain.  Refill then takes a whole batch in O(1)
 * instead of walking cold slots one by one. */
static void give_back(thread_cache *c, int p, size_t keep)
{
    while (c->count[p] > keep) {
        weft__slot *first = c->head[p], *last = first;
        size_t n = 1;
        while (n < BATCH && c->count[p] - n > keep && last->free_next) {
            last = last->free_next;
            n++;
        }
        c->head[p] = last->free_next;
        c->count[p] -= n;
        last->free_next = NULL;
        first->batch_len = (uint16_t)n;
        pthread_mutex_lock(&pools[p].lock);
        first->batch_next = pools[p].batches;
        pools[p].batches = first;
        pthread_mutex_unlock(&pools[p].lock);
    }
}

/* At thread exit, return the cached slots so no thread strands them. */
static void flush_at_exit(void *arg)
{
    (void)arg;
    for (int p = 0; p < WEFT__NPOOLS; p++)
        give_back(&tcache, p, 0);
}

static void make_flush_key(void) { pthread_key_create(&flush_key, flush_at_exit); }

static bool refill(thread_cache *c, int p)
{
    pool *pl = &pools[p];
    pthread_mutex_lock(&pl->lock);
    weft__slot *batch = pl->batches;
    if (batch)
        pl->batches = batch->batch_next;
    pthread_mutex_unlock(&pl->lock);
    if (batch) {
        c->head[p] = batch; /* the cache is empty when refill is called */
        c->count[p] = batch->batch_len;
        return true;
    }
    /* A new chunk: a header followed by BATCH slots, slot-aligned.  The
     * chunk is published to the pool list only after it was allocated. */
    size_t bytes = WEFT__SLOT_ALIGN + BATCH * atomic_load_explicit(&pl->slot_size, memory_order_relaxed);
    if (injected_failure())
        return false;
    chunk *ch = aligned_alloc(WEFT__SLOT_ALIGN, bytes);
    if (!ch)
        return false;
    memset(ch, 0, bytes);
    char *base = (char *)ch + WEFT__SLOT_ALIGN;
    for (size_t i = 0; i < BATCH; i++) {
        weft__slot *s = (weft__slot *)(base + i * atomic_load_explicit(&pl->slot_size, memory_order_relaxed));
        s->pool_id = (uint16_t)p;
        s->free_next = c->head[p];
        c->head[p] = s;
    }
    c->count[p] += BATCH;
    pthread_mutex_lock(&pl->lock);
    ch->next = pl->chunks;
    pl->chunks = ch;
    pthread_mutex_unlock(&pl->lock);
    return true;
}

void *weft__slot_alloc(weft__pool_id p, size_t size)
{
    pool *pl = &pools[p];
    size_t have = atomic_load_explicit(&pl->slot_size, memory_order_acquire);
    if (!have) {
        size_t none = 0;
        atomic_compare_exchange_strong(&pl->slot_size, &none, ROUND_SLOT(size));
        have = atomic_load(&pl->slot_size);
    }
    WEFT__CHECK(ROUND_SLOT(size) == have);
    thread_cache *c = &tcache;
    if (!c->head[p]) {
        pthread_once(&flush_once, make_flush_key);
        pthread_setspecific(flush_key, c); /* any non-NULL value arms the destructor */
        if (!refill(c, p))
            return NULL;
    }
    weft__slot *s = c->head[p];
    c->head[p] = s->free_next;
    c->count[p]--;
    /* Zero everything but the header (the generation must survive).  Data
     * and runtime slots initialise themselves (see weft__data.users and
     * weft__rt.wait_lock): fields that late racers may still touch must
     * never be overwritten by plain stores. */
    if (p == WEFT__POOL_TASK)
        memset((char *)s + sizeof(weft__slot), 0, atomic_load_explicit(&pools[p].slot_size, memory_order_relaxed) - sizeof(weft__slot));
    s->free_next = NULL;
    atomic_fetch_add_explicit(&alloc_live, 1, memory_order_relaxed);
    return s;
}

void weft__slot_free(void *slot)
{
    weft__slot *s = slot;
    int p = (int)s->pool_id;
    atomic_fetch_add_explicit(&s->gen, 1, memory_order_release);
    atomic_fetch_sub_explicit(&alloc_live, 1, memory_order_relaxed);
    thread_cache *c = &tcache;
    if (!c->head[p]) {
        pthread_once(&flush_once, make_flush_key);
        pthread_setspecific(flush_key, c);
    }
    s->free_next = c->head[p];
    c->head[p] = s;
    if (++c->count[p] > CACHE_MAX)
        give_back(c, p, BATCH);
}

size_t weft__slot_size(weft__pool_id p) { return atomic_load_explicit(&pools[p].slot_size, memory_order_relaxed); }
