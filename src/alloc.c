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

static pool pools[WEFT__NPOOLS] = {
    [WEFT__POOL_TASK] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
    [WEFT__POOL_DATA] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
    [WEFT__POOL_RUNTIME] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
    [WEFT__POOL_SPACE] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
    [WEFT__POOL_COMM] = {0, PTHREAD_MUTEX_INITIALIZER, NULL, NULL},
};

/* ------------------------------------------------------------------------ */
/* Per-thread caches                                                         */
/*                                                                          */
/* A thread's cache is a heap struct, found through the _Thread_local pointer */
/* `tcache`.  At thread exit the pthread key's destructor gets that struct as */
/* its argument, returns its slots to the pools and retires it; it never      */
/* reads or writes the dying thread's TLS.  That matters: in a shared object   */
/* (the Python extension links this file) `tcache` lives in the module's      */
/* dynamic TLS block, which glibc frees from another thread when it reuses    */
/* the exiting thread's stack, and nothing orders that free after the key     */
/* destructors in a way ThreadSanitizer can see (google/sanitizers#414, "TSan */
/* should correctly synchronize the TSD destructors and the parent thread",   */
/* closed WontFix): touching TLS in a destructor of a detached thread is      */
/* reported as a race with that free.                                         */
/*                                                                          */
/* Since the destructor cannot reset `tcache`, the pointer stays behind; code */
/* that the same thread runs later (other keys' destructors may free slots)   */
/* must not use the cache through it.  So a cache is never freed, only        */
/* retired to a list from which a new thread adopts it, and `owner` says      */
/* whose it is: the address of the owning thread's `tcache`, unique among     */
/* running threads, or NULL while retired.  Every operation checks           */
/* `c->owner == &tcache` (one load from a line it reads anyway); a thread      */
/* whose cache was retired fails the check for good and takes and returns     */
/* slots at the pool itself, under its lock.  Caches are bounded by the most */
/* threads ever alive at once and stay reachable from `all_caches`.           */
/* ------------------------------------------------------------------------ */

typedef struct thread_cache {
    struct thread_cache **_Atomic owner; /* &tcache of the owning thread; NULL while retired */
    weft__slot *head[WEFT__NPOOLS];
    size_t count[WEFT__NPOOLS];
    struct thread_cache *next_free; /* retired caches, under caches_lock */
    struct thread_cache *next_all;  /* every cache made, under caches_lock */
} thread_cache;

#define CACHE_ALIGN 64u
#define CACHE_BYTES ((sizeof(thread_cache) + CACHE_ALIGN - 1) / CACHE_ALIGN * CACHE_ALIGN)

/* What `tcache` points to before a thread adopts a cache: owned by no one,
 * so every operation takes the slow path, which adopts one. */
static thread_cache no_cache;
static _Thread_local thread_cache *tcache = &no_cache;

static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;
static thread_cache *free_caches; /* retired, flushed, ready to adopt */
static thread_cache *all_caches;

static pthread_key_t flush_key;
static bool flush_key_ok;
static pthread_once_t flush_once = PTHREAD_ONCE_INIT;

/* Push a list of n free slots (linked by free_next, NULL-terminated) onto
 * pool p as one batch. */
static void put_batch(int p, weft__slot *first, size_t n)
{
    first->batch_len = (uint16_t)n;
    pthread_mutex_lock(&pools[p].lock);
    first->batch_next = pools[p].batches;
    pools[p].batches = first;
    pthread_mutex_unlock(&pools[p].lock);
}

/* A batch of free slots of pool p, a free_next list of *n slots: one the
 * pool holds, or a new chunk.  NULL on (real or injected) failure. */
static weft__slot *take_batch(int p, size_t *n)
{
    pool *pl = &pools[p];
    pthread_mutex_lock(&pl->lock);
    weft__slot *batch = pl->batches;
    if (batch)
        pl->batches = batch->batch_next;
    pthread_mutex_unlock(&pl->lock);
    if (batch) {
        *n = batch->batch_len;
        return batch;
    }
    /* A new chunk: a header followed by BATCH slots, slot-aligned.  The
     * chunk is published to the pool list only after it was allocated. */
    size_t bytes = WEFT__SLOT_ALIGN + BATCH * atomic_load_explicit(&pl->slot_size, memory_order_relaxed);
    if (injected_failure())
        return NULL;
    chunk *ch = aligned_alloc(WEFT__SLOT_ALIGN, bytes);
    if (!ch)
        return NULL;
    memset(ch, 0, bytes);
    char *base = (char *)ch + WEFT__SLOT_ALIGN;
    for (size_t i = 0; i < BATCH; i++) {
        weft__slot *s = (weft__slot *)(base + i * atomic_load_explicit(&pl->slot_size, memory_order_relaxed));
        s->pool_id = (uint16_t)p;
        s->free_next = batch;
        batch = s;
    }
    pthread_mutex_lock(&pl->lock);
    ch->next = pl->chunks;
    pl->chunks = ch;
    pthread_mutex_unlock(&pl->lock);
    *n = BATCH;
    return batch;
}

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
        put_batch(p, first, n);
    }
}

static void retire(thread_cache *c)
{
    atomic_store_explicit(&c->owner, NULL, memory_order_relaxed);
    pthread_mutex_lock(&caches_lock);
    c->next_free = free_caches;
    free_caches = c;
    pthread_mutex_unlock(&caches_lock);
}

/* The key's destructor, at thread exit: `arg` is the thread's cache (the
 * value of flush_key).  Return its slots so no thread strands them, then
 * retire it.  Touches the cache and the pools, never `tcache`. */
static void flush_at_exit(void *arg)
{
    thread_cache *c = arg;
    for (int p = 0; p < WEFT__NPOOLS; p++)
        give_back(c, p, 0);
    retire(c);
}

static void make_flush_key(void) { flush_key_ok = pthread_key_create(&flush_key, flush_at_exit) == 0; }

/* A retired cache (flushed: empty) or a new one; NULL on failure. */
static thread_cache *adopt(void)
{
    pthread_mutex_lock(&caches_lock);
    thread_cache *c = free_caches;
    if (c)
        free_caches = c->next_free;
    pthread_mutex_unlock(&caches_lock);
    if (c)
        return c;
    if (injected_failure())
        return NULL;
    c = aligned_alloc(CACHE_ALIGN, CACHE_BYTES);
    if (!c)
        return NULL;
    memset(c, 0, CACHE_BYTES);
    pthread_mutex_lock(&caches_lock);
    c->next_all = all_caches;
    all_caches = c;
    pthread_mutex_unlock(&caches_lock);
    return c;
}

/* The calling thread's cache, adopting one on first use.  NULL when the
 * thread has none and cannot get one: out of memory, no key, or its cache
 * was retired (the thread is exiting; see above).  The caller then works on
 * the pool directly. */
static thread_cache *my_cache(void)
{
    thread_cache **self = &tcache;
    thread_cache *c = *self;
    if (atomic_load_explicit(&c->owner, memory_order_relaxed) == self)
        return c;
    if (c != &no_cache)
        return NULL; /* retired: never adopt again, the destructors may be done */
    pthread_once(&flush_once, make_flush_key);
    if (!flush_key_ok || !(c = adopt()))
        return NULL;
    atomic_store_explicit(&c->owner, self, memory_order_relaxed);
    /* The key's value arms the destructor and is what it receives.  A thread
     * whose first slot operation comes from a key destructor after the last
     * round keeps its cache until exit: its slots stay in their chunks,
     * unused, and the struct on all_caches. */
    if (pthread_setspecific(flush_key, c) != 0) {
        retire(c);
        return NULL;
    }
    *self = c;
    return c;
}

__attribute__((noinline)) static weft__slot *alloc_slow(int p)
{
    thread_cache *c = my_cache();
    size_t n;
    weft__slot *s;
    if (!c) { /* one slot straight from the pool */
        s = take_batch(p, &n);
        if (s && s->free_next)
            put_batch(p, s->free_next, n - 1);
        return s;
    }
    if (!c->head[p]) {
        if (!(s = take_batch(p, &n)))
            return NULL;
        c->head[p] = s; /* the cache is empty here */
        c->count[p] = n;
    }
    s = c->head[p];
    c->head[p] = s->free_next;
    c->count[p]--;
    return s;
}

__attribute__((noinline)) static void free_slow(weft__slot *s, int p)
{
    thread_cache *c = my_cache();
    if (!c) {
        s->free_next = NULL;
        put_batch(p, s, 1);
        return;
    }
    s->free_next = c->head[p];
    c->head[p] = s;
    if (++c->count[p] > CACHE_MAX)
        give_back(c, p, BATCH);
}

void *weft__slot_alloc(weft__pool_id p, size_t size)
{
    /* Each pool holds one struct type: its size is set by the first
     * allocation and checked by every later one. */
    size_t have = atomic_load_explicit(&pools[p].slot_size, memory_order_acquire);
    if (__builtin_expect(!have, 0)) {
        size_t none = 0;
        atomic_compare_exchange_strong(&pools[p].slot_size, &none, ROUND_SLOT(size));
        have = atomic_load(&pools[p].slot_size);
    }
    WEFT__CHECK(ROUND_SLOT(size) == have);
    thread_cache **self = &tcache;
    thread_cache *c = *self;
    weft__slot *s;
    bool mine = atomic_load_explicit(&c->owner, memory_order_relaxed) == self;
    if (__builtin_expect(mine && c->head[p] != NULL, 1)) {
        s = c->head[p];
        c->head[p] = s->free_next;
        c->count[p]--;
    } else if (!(s = alloc_slow((int)p))) {
        return NULL;
    }
    /* Zero everything but the header (the generation must survive) and, in
     * a task slot, the reference count right after it: a late pinner of the
     * slot's previous task (weft__edge_pin_pred) may still read it.  It is 0
     * here (a task slot is freed when it drops to 0), and the graph layer
     * stores the new count atomically.  Data, runtime and space slots
     * initialise themselves (see weft__data.users, weft__rt.waits,
     * weft__space.lock): fields that late racers may still touch must never
     * be overwritten by plain stores. */
    if (p == WEFT__POOL_TASK) {
        size_t keep = sizeof(weft__slot) + WEFT__TASK_SLOT_KEEP;
        memset((char *)s + keep, 0, have - keep);
    }
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
    thread_cache **self = &tcache;
    thread_cache *c = *self;
    bool mine = atomic_load_explicit(&c->owner, memory_order_relaxed) == self;
    if (__builtin_expect(mine && c->count[p] < CACHE_MAX, 1)) {
        s->free_next = c->head[p];
        c->head[p] = s;
        c->count[p]++;
    } else {
        free_slow(s, p);
    }
}

size_t weft__slot_size(weft__pool_id p) { return atomic_load_explicit(&pools[p].slot_size, memory_order_relaxed); }
