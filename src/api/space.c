/*
 * api/space.c — task spaces: tasks named by integer keys, where a key can be
 * depended on before its task is spawned.
 *
 * A key depended on before it was spawned gets a placeholder task (graph
 * layer) that completes as the key's task does; the key's task, once
 * spawned, is linked before it.  A spawn that would close a cycle through a
 * placeholder (a task the new one would follow leads back, through
 * unfinished predecessors, to the placeholder of its own key) is refused
 * with WEFT_EDEADLK.  Closing the space cancels the placeholders of keys nobody
 * spawned, which cancels their dependents with a message naming the key.
 */
#include "api/runtime.h"

#include <string.h>

#define MAX_KEY 16

typedef struct entry {
    weft__task *task;      /* the key's task, or its placeholder until spawned (one reference) */
    weft__task *proxy;     /* the placeholder, if the key was depended on before it was spawned */
    bool spawned;
    uint32_t nkey;
    int64_t key[];
} entry;

struct weft__space {
    weft__slot slot;                   /* must be first */
    /* lock protects everything below; nested under it: the access
     * histories' locks (a spawn), the allocator.  Initialised once per slot
     * and never destroyed (a racing call may still take it). */
    pthread_mutex_t lock;
    bool sync_ready;
    bool closed;                       /* first field create resets */
    weft__rt *rt;
    const void *rt_handle;
    char name[32];
    entry **table;                     /* open addressing, power-of-two size */
    size_t cap, count;
    weft__space *prev, *next;          /* rt->spaces, under rt->data_lock */
};

static weft__space *space_get(const weft_space *h)
{
    weft__space *s = weft__handle_decode(h);
    if (!s || s->slot.pool_id != WEFT__POOL_SPACE)
        return NULL;
    return s;
}

static uint64_t hash_key(const int64_t *key, size_t n)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ n;
    for (size_t i = 0; i < n; i++) {
        x ^= (uint64_t)key[i] + 0x9E3779B97F4A7C15ull + (x << 6) + (x >> 2);
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 31;
    }
    return x;
}

static entry **slot_of(weft__space *s, const int64_t *key, size_t n)
{
    size_t mask = s->cap - 1;
    for (size_t i = hash_key(key, n) & mask;; i = (i + 1) & mask) {
        entry *e = s->table[i];
        if (!e || (e->nkey == n && memcmp(e->key, key, n * sizeof *key) == 0))
            return &s->table[i];
    }
}

static entry *find(weft__space *s, const int64_t *key, size_t n)
{
    return s->cap ? *slot_of(s, key, n) : NULL;
}

static bool grow(weft__space *s)
{
    if ((s->count + 1) * 2 <= s->cap)
        return true;
    size_t ncap = s->cap ? s->cap * 2 : 64;
    entry **old = s->table;
    size_t ocap = s->cap;
    entry **t = weft__alloc(sizeof *t * ncap);
    if (!t)
        return false;
    memset(t, 0, sizeof *t * ncap);
    s->table = t;
    s->cap = ncap;
    for (size_t i = 0; i < ocap; i++)
        if (old[i])
            *slot_of(s, old[i]->key, old[i]->nkey) = old[i];
    weft__free(old);
    return true;
}

static void label(const weft__space *s, const int64_t *key, size_t n, char out[32])
{
    char buf[256];
    int k = snprintf(buf, sizeof buf, "%s[", s->name);
    for (size_t i = 0; i < n && k < (int)sizeof buf; i++)
        k += snprintf(buf + k, sizeof buf - (size_t)k, i ? ",%lld" : "%lld", (long long)key[i]);
    if (k < (int)sizeof buf)
        snprintf(buf + k, sizeof buf - (size_t)k, "]");
    buf[31] = '\0';
    memcpy(out, buf, 32);
}

int weft_space_create(weft_runtime *h, const char *name, weft_space **out)
{
    weft__clear_error();
    int err;
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_space_create: out is NULL");
    weft__rt *rt = weft__rt_enter(h, "weft_space_create", &err, 1, false);
    if (!rt)
        return err;
    weft__space *s = weft__slot_alloc(WEFT__POOL_SPACE, sizeof(weft__space));
    if (!s) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_ENOMEM, "weft_space_create: out of memory");
    }
    if (!s->sync_ready) {
        pthread_mutex_init(&s->lock, NULL);
        s->sync_ready = true;
    }
    size_t from = offsetof(weft__space, closed);
    memset((char *)s + from, 0, sizeof *s - from);
    s->rt = rt;
    s->rt_handle = h;
    snprintf(s->name, sizeof s->name, "%s", name && *name ? name : "space");
    pthread_mutex_lock(&rt->data_lock);
    s->next = rt->spaces;
    if (rt->spaces)
        rt->spaces->prev = s;
    rt->spaces = s;
    pthread_mutex_unlock(&rt->data_lock);
    *out = weft__handle_encode(s);
    weft__rt_leave(rt, 1);
    return 0;
}

static int check_key(const char *fn, const int64_t *key, size_t n)
{
    if (n == 0 || n > MAX_KEY)
        return weft__error(WEFT_EINVAL, "%s: a key has 1 to %d integers, not %zu", fn, MAX_KEY, n);
    if (!key)
        return weft__error(WEFT_EINVAL, "%s: key is NULL", fn);
    return 0;
}

/* Under s->lock: the entry of key, made (with a placeholder) if missing. */
static int entry_of(weft__space *s, const int64_t *key, size_t n, entry **out)
{
    entry *have = find(s, key, n);
    if (have) {
        *out = have;
        return 0;
    }
    if (!grow(s))
        return WEFT_ENOMEM;
    entry **slot = slot_of(s, key, n);
    entry *e = weft__alloc(sizeof *e + n * sizeof *key);
    if (!e)
        return WEFT_ENOMEM;
    char name[32];
    label(s, key, n, name);
    e->task = weft__task_proxy_new(&s->rt->graph, s->rt_handle, name);
    if (!e->task) {
        weft__free(e);
        return WEFT_ENOMEM;
    }
    e->proxy = NULL;
    e->spawned = false;
    e->nkey = (uint32_t)n;
    memcpy(e->key, key, n * sizeof *key);
    *slot = e;
    s->count++;
    *out = e;
    return 0;
}

/* Lock a live, open space; on success the caller holds s->lock.  (Destroy
 * closes a runtime's spaces under their locks before it frees anything, so
 * the space's runtime stays usable while the lock is held.) */
static weft__space *space_enter(const weft_space *h, const char *fn, int *err)
{
    weft__space *s = space_get(h);
    if (!s) {
        *err = weft__error(WEFT_EINVAL, "%s: space is NULL or was destroyed", fn);
        return NULL;
    }
    pthread_mutex_lock(&s->lock);
    if (space_get(h) != s || s->closed) {
        pthread_mutex_unlock(&s->lock);
        *err = weft__error(WEFT_EINVAL, "%s: space was destroyed (or its runtime)", fn);
        return NULL;
    }
    return s;
}

int weft_space_task(weft_space *h, const int64_t *key, size_t nkey, weft_task **out)
{
    weft__clear_error();
    int err = check_key("weft_space_task", key, nkey);
    if (err)
        return err;
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_space_task: out is NULL");
    weft__space *s = space_enter(h, "weft_space_task", &err);
    if (!s)
        return err;
    entry *e;
    int rc = entry_of(s, key, nkey, &e);
    if (rc == 0)
        *out = weft__handle_encode(e->task);
    pthread_mutex_unlock(&s->lock);
    return rc == 0 ? 0 : weft__error(rc, "weft_space_task: out of memory");
}

/* Cycle check for spawning a key that has a placeholder P: would the new
 * task follow (directly or through unfinished predecessors) P itself?  A
 * walk backwards from each task the new one would follow, over unfinished
 * predecessors (each pinned while visited), with one visited set for the
 * whole spawn: its cost is bounded by the unfinished ancestry, and a
 * placeholder of another unspawned key ends a path at once. */
typedef struct reach {
    const weft__task *target;
    const weft__task **v;      /* visited, open addressing */
    size_t cap, n;
    bool oom;
} reach;

static size_t reach_hash(const weft__task *t) { return (size_t)(((uintptr_t)t >> 7) * 0x9E3779B97F4A7C15ull); }

/* Add t to the visited set; false if it was there (or on ENOMEM). */
static bool reach_visit(reach *r, const weft__task *t)
{
    if ((r->n + 1) * 2 > r->cap) {
        size_t ncap = r->cap ? r->cap * 2 : 64;
        const weft__task **nv = weft__alloc(sizeof *nv * ncap);
        if (!nv) {
            r->oom = true;
            return false;
        }
        memset(nv, 0, sizeof *nv * ncap);
        for (size_t i = 0; i < r->cap; i++)
            if (r->v[i]) {
                size_t j = reach_hash(r->v[i]) & (ncap - 1);
                while (nv[j])
                    j = (j + 1) & (ncap - 1);
                nv[j] = r->v[i];
            }
        weft__free(r->v);
        r->v = nv;
        r->cap = ncap;
    }
    size_t mask = r->cap - 1;
    size_t i = reach_hash(t) & mask;
    for (; r->v[i]; i = (i + 1) & mask)
        if (r->v[i] == t)
            return false;
    r->v[i] = t;
    r->n++;
    return true;
}

/* Does pred lead back to r->target?  pred is kept alive by the caller. */
static bool leads_to_target(void *arg, const weft__task *pred)
{
    reach *r = arg;
    if (!pred)
        return false;
    if (pred == r->target)
        return true;
    if (!reach_visit(r, pred))
        return r->oom; /* seen already (or out of memory: refuse, to be safe) */
    size_t cap = 32, sp = 0;
    weft__task **stack = weft__alloc(sizeof *stack * cap);
    if (!stack)
        return true;
    const weft__task *x = pred;
    bool hit = false, pinned = false;
    for (;;) {
        for (uint32_t i = 0; i < weft__task_nedges(x) && !hit; i++) {
            const weft__edge *e = &x->edges[i];
            if (!weft__edge_pin_pred(e))
                continue;
            weft__task *p = e->pred;
            if (p == r->target) {
                hit = true;
            } else if (!weft__state_final(atomic_load(&p->state)) && reach_visit(r, p)) {
                if (sp == cap) {
                    weft__task **ns = weft__realloc(stack, sizeof *stack * cap * 2);
                    if (!ns) {
                        r->oom = hit = true;
                        weft__task_unref(p);
                        break;
                    }
                    stack = ns;
                    cap *= 2;
                }
                stack[sp++] = p; /* keeps its pin until visited */
                continue;
            } else if (r->oom) {
                hit = true;
            }
            weft__task_unref(p);
        }
        if (pinned)
            weft__task_unref((weft__task *)x);
        if (hit || sp == 0)
            break;
        x = stack[--sp];
        pinned = true;
    }
    while (sp > 0)
        weft__task_unref(stack[--sp]);
    weft__free(stack);
    return hit;
}

int weft_space_spawn(weft_space *h, const int64_t *key, size_t nkey, const weft_task_desc *d, weft_task **out)
{
    weft__clear_error();
    const char *fn = "weft_space_spawn";
    int err = check_key(fn, key, nkey);
    if (!err && !d)
        err = weft__error(WEFT_EINVAL, "%s: descriptor is NULL", fn);
    weft__space *s0 = err ? NULL : space_get(h);
    if (!err && !s0)
        err = weft__error(WEFT_EINVAL, "%s: space is NULL or was destroyed", fn);
    if (err) {
        if (d && d->arg_destroy)
            d->arg_destroy(d->arg);
        return err;
    }
    int64_t held;
    weft__rt *rt = weft__spawn_enter((weft_runtime *)s0->rt_handle, d, fn, &err, &held);
    if (!rt)
        goto fail_early;
    weft__space *s = space_enter(h, fn, &err);
    if (!s || s->rt != rt) {
        if (s) {
            pthread_mutex_unlock(&s->lock);
            err = weft__error(WEFT_EINVAL, "%s: space was destroyed (or its runtime)", fn);
        }
        weft__spawn_leave(rt, held, false);
        goto fail_early;
    }
    int rc = weft__desc_check(s->rt_handle, d, fn);
    entry *e = NULL;
    if (rc == 0) {
        e = find(s, key, nkey);
        if (e && e->spawned) {
            char name[32];
            label(s, key, nkey, name);
            rc = weft__error(WEFT_EINVAL, "%s: key %s was already spawned", fn, name);
        }
    }
    reach r = {NULL, NULL, 0, 0, false};
    weft__spawn_extra x = {0};
    x.space_owned = true; /* the space lends out t's handle */
    x.forbidden_what = fn;
    char what[80];
    if (rc == 0 && e) {
        /* Someone depends on this key already: refuse a cycle (the graph
         * layer's message says through which dependency or access). */
        char name[32];
        label(s, key, nkey, name);
        snprintf(what, sizeof what, "%s: spawning %s would close a cycle", fn, name);
        x.forbidden_what = what;
        r.target = e->task;
        x.forbidden = leads_to_target;
        x.arg = &r;
        x.fulfil = e->task;
    }
    entry *fresh = NULL;
    if (rc == 0 && !e) {
        if (!grow(s) || !(fresh = weft__alloc(sizeof *fresh + nkey * sizeof *key)))
            rc = weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    }
    weft__task *t = NULL;
    if (rc == 0) {
        rc = weft__task_spawn(&rt->graph, s->rt_handle, d, &x, out != NULL, &t);
        if (rc == WEFT_EDEADLK && r.oom)
            rc = weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    }
    if (rc == 0) {
        if (e) {
            e->proxy = e->task; /* completes with t; its dependents follow t */
            e->task = t;
            e->spawned = true;
        } else {
            fresh->task = t;
            fresh->proxy = NULL;
            fresh->spawned = true;
            fresh->nkey = (uint32_t)nkey;
            memcpy(fresh->key, key, nkey * sizeof *key);
            *slot_of(s, key, nkey) = fresh;
            s->count++;
            fresh = NULL;
        }
    }
    weft__free(fresh);
    weft__free(r.v);
    pthread_mutex_unlock(&s->lock);
    weft__spawn_leave(rt, held, rc == 0);
    if (rc != 0) {
        if (d->arg_destroy)
            d->arg_destroy(d->arg);
        return rc;
    }
    if (out)
        *out = weft__handle_encode(t);
    return 0;

fail_early:
    if (err != WEFT_EAGAIN && d->arg_destroy)
        d->arg_destroy(d->arg);
    return err;
}

int weft_space_cancel(weft_space *h, const int64_t *key, size_t nkey)
{
    weft__clear_error();
    int err = check_key("weft_space_cancel", key, nkey);
    if (err)
        return err;
    weft__space *s = space_enter(h, "weft_space_cancel", &err);
    if (!s)
        return err;
    /* Under s->lock, so a spawn of the key is wholly before (it finds its
     * placeholder doomed: the new task is doomed too) or wholly after (the
     * key's task is doomed here, unless it started). */
    entry *e;
    int rc = entry_of(s, key, nkey, &e);
    if (rc == 0) {
        weft__task *t = e->task;
        weft__task_doom(t, t->id, t->name, WEFT__CAUSE_REQUEST);
        rc = atomic_load_explicit(&t->run_gate, memory_order_acquire) == WEFT__GATE_DOOMED ? 1 : 0;
    } else {
        rc = weft__error(rc, "weft_space_cancel: out of memory");
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Whether tasks or bodies wait for e's key, which nobody spawned: tasks
 * that depend on it (its placeholder's successors), or bodies in
 * weft_task_wait for it. */
static bool waited_for(const entry *e)
{
    weft__edge *succ = atomic_load_explicit(&e->task->successors, memory_order_acquire);
    return (succ && succ != WEFT__CLOSED) || atomic_load_explicit(&e->task->body_waiters, memory_order_acquire) > 0;
}

/* Close s (the caller claimed it): cancel placeholders of unspawned keys,
 * drop the space's references.  Its handle goes stale.  Returns how many
 * of those keys had tasks or bodies waiting for them (now cancelled: the
 * bodies' waits return); the first
 * one's label goes to first (32 bytes). */
static size_t space_close(weft__space *s, char *first)
{
    size_t waited = 0;
    pthread_mutex_lock(&s->lock);
    s->closed = true;
    entry **table = s->table;
    size_t cap = s->cap;
    s->table = NULL;
    s->cap = s->count = 0;
    pthread_mutex_unlock(&s->lock);
    for (size_t i = 0; i < cap; i++) {
        entry *e = table[i];
        if (!e)
            continue;
        if (!e->spawned) {
            char why[32];
            label(s, e->key, e->nkey, why);
            if (waited_for(e) && waited++ == 0)
                memcpy(first, why, sizeof why);
            weft__task_proxy_abandon(e->task, why);
        }
        atomic_store(&e->task->space_owned, false);
        weft__task_unref(e->task);
        if (e->proxy) {
            atomic_store(&e->proxy->space_owned, false);
            weft__task_unref(e->proxy);
        }
        weft__free(e);
    }
    weft__free(table);
    weft__slot_free(s);
    return waited;
}

/* Unlink s from its runtime's list; false if someone else did. */
static bool claim(weft__rt *rt, weft__space *s)
{
    bool mine = false;
    pthread_mutex_lock(&rt->data_lock);
    pthread_mutex_lock(&s->lock);
    if (!s->closed && s->rt == rt) {
        s->closed = true;
        mine = true;
        if (s->prev)
            s->prev->next = s->next;
        else
            rt->spaces = s->next;
        if (s->next)
            s->next->prev = s->prev;
    }
    pthread_mutex_unlock(&s->lock);
    pthread_mutex_unlock(&rt->data_lock);
    return mine;
}

int weft_space_destroy(weft_space *h)
{
    weft__clear_error();
    if (!h)
        return 0;
    weft__space *s = space_get(h);
    if (!s)
        return weft__error(WEFT_EINVAL, "weft_space_destroy: space was destroyed (or its runtime)");
    int err;
    weft__rt *rt = weft__rt_enter(s->rt_handle, "weft_space_destroy", &err, 1, true);
    if (!rt)
        return weft__error(WEFT_EINVAL, "weft_space_destroy: space was destroyed (or its runtime)");
    if (space_get(h) != s || !claim(rt, s)) {
        weft__rt_leave(rt, 1);
        return weft__error(WEFT_EINVAL, "weft_space_destroy: space was destroyed (or its runtime)");
    }
    char first[32];
    (void)space_close(s, first); /* (cancelling what waits for unspawned keys is what destroy says it does) */
    weft__rt_leave(rt, 1);
    return 0;
}

/* Call visit(s, e, arg) for each entry of rt's spaces whose key nobody
 * spawned, under rt->data_lock and s->lock (e holds a reference to its
 * placeholder, e->task: alive meanwhile). */
static void each_unspawned(weft__rt *rt, void (*visit)(weft__space *, entry *, void *), void *arg)
{
    pthread_mutex_lock(&rt->data_lock);
    for (weft__space *s = rt->spaces; s; s = s->next) {
        pthread_mutex_lock(&s->lock);
        for (size_t i = 0; i < s->cap; i++)
            if (s->table[i] && !s->table[i]->spawned)
                visit(s, s->table[i], arg);
        pthread_mutex_unlock(&s->lock);
    }
    pthread_mutex_unlock(&rt->data_lock);
}

typedef struct unspawned_count {
    size_t waited;
    char *first;
} unspawned_count;

static void count_waited(weft__space *s, entry *e, void *arg)
{
    unspawned_count *c = arg;
    if (waited_for(e) && c->waited++ == 0)
        label(s, e->key, e->nkey, c->first);
}

size_t weft__spaces_unspawned(weft__rt *rt, char *first)
{
    unspawned_count c = {0, first};
    each_unspawned(rt, count_waited, &c);
    return c.waited;
}

size_t weft__spaces_close_all(weft__rt *rt, char *first)
{
    size_t waited = 0;
    for (;;) {
        pthread_mutex_lock(&rt->data_lock);
        weft__space *s = rt->spaces;
        pthread_mutex_unlock(&rt->data_lock);
        if (!s)
            return waited;
        char f[32];
        size_t n = claim(rt, s) ? space_close(s, f) : 0;
        if (n && !waited)
            memcpy(first, f, sizeof f);
        waited += n;
    }
}
