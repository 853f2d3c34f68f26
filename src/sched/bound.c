/*
 * sched/bound.c — the recorded task graph (sched/bound.h) and the lower
 * bound of its makespan (weft_runtime_bound).
 *
 * The bound is the larger of two:
 *   the critical path: the longest chain of the graph, each task at its
 *     time on its fastest class of device;
 *   the area: the least T in which the CPU's slots and the GPUs could do
 *     all the work, each task split between the two classes at will (the
 *     fractional relaxation of assigning them: StarPU's bound solves it as
 *     a linear program; with two classes it is exact by a greedy fill).
 * A task's time on a class is its kind's model's prediction at its size
 * (the fastest GPU arch's for the GPUs); where no model predicts, its
 * observed time on the class it ran on, and none (it may not go there)
 * on the other.
 */
#include "sched/bound.h"

#include <math.h>
#include <string.h>

#define ARENA_ENTRIES 16384u /* predecessor indices per arena chunk */
#define NONE UINT32_MAX

typedef struct arena_block {
    struct arena_block *next;
    size_t cap, used;
    uint32_t v[];
} arena_block;

struct weft__bound_log {
    /* lock protects the chunk table and the count, the kinds and their
     * hash, the arena, lost, and the fields of each record marked "under
     * the lock" (sched/bound.h).  Taken alone, or under the access
     * histories' locks (a spawn's record); nothing nests under it. */
    pthread_mutex_t lock;
    weft__brec **chunk;                 /* nchunk chunks of WEFT__BOUND_CHUNK records */
    size_t nchunk, chunk_cap;
    uint32_t count;                     /* records made */
    char (*kinds)[WEFT__PM_NAME];       /* each kind once, cut to the models' length */
    uint32_t nkinds;
    size_t kinds_cap;
    uint32_t *hash;                     /* kinds by name: index + 1 (0: empty), hash_size slots */
    uint32_t hash_size;
    arena_block *arena;                 /* predecessor lists; the first has room */
    uint64_t lost;                      /* tasks that could not be recorded (out of memory) */
};

weft__bound_log *weft__bound_log_new(void)
{
    weft__bound_log *log = weft__alloc(sizeof *log);
    if (!log)
        return NULL;
    memset(log, 0, sizeof *log);
    pthread_mutex_init(&log->lock, NULL);
    return log;
}

void weft__bound_log_free(weft__bound_log *log)
{
    if (!log)
        return;
    for (size_t i = 0; i < log->nchunk; i++)
        weft__free(log->chunk[i]);
    weft__free(log->chunk);
    weft__free(log->kinds);
    weft__free(log->hash);
    while (log->arena) {
        arena_block *b = log->arena;
        log->arena = b->next;
        weft__free(b);
    }
    pthread_mutex_destroy(&log->lock);
    weft__free(log);
}

/* ------------------------------------------------------------------------ */
/* Recording (the lock held in the helpers)                                  */
/* ------------------------------------------------------------------------ */

/* Room for n predecessor indices, or NULL.  A large list gets a block of
 * its own, after the first, so the first keeps its room. */
static uint32_t *arena_take(weft__bound_log *log, uint32_t n)
{
    arena_block *b = log->arena;
    if (b && b->cap - b->used >= n) {
        b->used += n;
        return b->v + b->used - n;
    }
    size_t cap = n > ARENA_ENTRIES / 4 ? n : ARENA_ENTRIES;
    arena_block *nb = weft__alloc(sizeof *nb + cap * sizeof(uint32_t));
    if (!nb)
        return NULL;
    nb->cap = cap;
    nb->used = n;
    if (b && cap == n) { /* (its own) */
        nb->next = b->next;
        b->next = nb;
    } else {
        nb->next = b;
        log->arena = nb;
    }
    return nb->v;
}

static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* Rehash the kinds into a table of size slots.  false: out of memory. */
static bool hash_grow(weft__bound_log *log, uint32_t size)
{
    uint32_t *h = weft__alloc(size * sizeof *h);
    if (!h)
        return false;
    memset(h, 0, size * sizeof *h);
    for (uint32_t k = 0; k < log->nkinds; k++) {
        uint32_t at = name_hash(log->kinds[k]) & (size - 1);
        while (h[at])
            at = (at + 1) & (size - 1);
        h[at] = k + 1;
    }
    weft__free(log->hash);
    log->hash = h;
    log->hash_size = size;
    return true;
}

/* arr (used of *cap elements of `size` bytes) with room for one more: arr
 * itself, or a copy with twice the capacity (16 at first), arr freed; NULL
 * when out of memory (arr is left as it was). */
static void *with_room(void *arr, size_t *cap, size_t used, size_t size)
{
    if (used < *cap)
        return arr;
    size_t n = *cap ? 2 * *cap : 16;
    void *a = weft__alloc(n * size);
    if (!a)
        return NULL;
    if (used)
        memcpy(a, arr, used * size);
    weft__free(arr);
    *cap = n;
    return a;
}

/* The index of kind (cut to the models' length), added if new.  false:
 * out of memory. */
static bool kind_index(weft__bound_log *log, const char *kind, uint32_t *out)
{
    char name[WEFT__PM_NAME];
    snprintf(name, sizeof name, "%s", kind ? kind : "");
    if (2 * (log->nkinds + 1) > log->hash_size && !hash_grow(log, log->hash_size ? 2 * log->hash_size : 64))
        return false;
    uint32_t at = name_hash(name) & (log->hash_size - 1);
    for (; log->hash[at]; at = (at + 1) & (log->hash_size - 1))
        if (strcmp(log->kinds[log->hash[at] - 1], name) == 0) {
            *out = log->hash[at] - 1;
            return true;
        }
    void *kinds = with_room(log->kinds, &log->kinds_cap, log->nkinds, sizeof *log->kinds);
    if (!kinds)
        return false;
    log->kinds = kinds;
    memcpy(log->kinds[log->nkinds], name, sizeof name);
    log->hash[at] = log->nkinds + 1;
    *out = log->nkinds++;
    return true;
}

/* A new record, zeroed, with its index; NULL when out of memory. */
static weft__brec *rec_new(weft__bound_log *log)
{
    if (log->count == NONE)
        return NULL;
    size_t c = log->count / WEFT__BOUND_CHUNK;
    if (c == log->nchunk) {
        void *chunks = with_room(log->chunk, &log->chunk_cap, log->nchunk, sizeof *log->chunk);
        if (!chunks)
            return NULL;
        log->chunk = chunks;
        if (!(log->chunk[c] = weft__alloc(WEFT__BOUND_CHUNK * sizeof(weft__brec))))
            return NULL;
        log->nchunk++;
    }
    weft__brec *r = &log->chunk[c][log->count % WEFT__BOUND_CHUNK];
    memset(r, 0, sizeof *r);
    r->index = log->count++;
    r->pred = r->pred_inline;
    r->cap = WEFT__BOUND_INLINE;
    return r;
}

/* A record for a task or a placeholder (kind NULL), with room for nedges
 * predecessors; NULL (counted lost) when out of memory. */
static weft__brec *record(weft__bound_log *log, const char *kind, uint32_t nedges)
{
    uint64_t now = weft__now_ns();
    pthread_mutex_lock(&log->lock);
    weft__brec *r = rec_new(log);
    uint32_t k = 0;
    bool ok = r && (!kind || kind_index(log, kind, &k));
    if (ok && nedges > WEFT__BOUND_INLINE) {
        ok = (r->pred = arena_take(log, nedges)) != NULL;
        r->cap = nedges;
    }
    if (r && !ok)
        log->count--; /* (the last one, still under the lock) */
    if (!ok) {
        log->lost++;
        r = NULL;
    } else {
        r->kind = k;
        r->t_spawn = now;
        r->proxy = kind == NULL;
    }
    pthread_mutex_unlock(&log->lock);
    return r;
}

weft__brec *weft__bound_task(weft__bound_log *log, const char *kind, uint64_t size, const weft__place *pl,
                             uint32_t nedges)
{
    /* Its classes, as the earliest-finish policy tells them apart: an
     * alternative without GPUs is the CPU's; one with GPUs takes their
     * number times its share of each. */
    bool cpu = pl == NULL;
    float gpu_w = 0;
    for (unsigned i = 0; pl && i < pl->nalt; i++) {
        const weft__alt *a = &pl->alt[i];
        if (!a->possible)
            continue;
        float w = (float)a->gpus * (float)a->share / (float)WEFT__SHARE_UNITS;
        if (!a->gpus)
            cpu = true;
        else if (gpu_w == 0 || w < gpu_w)
            gpu_w = w;
    }
    weft__brec *r = record(log, kind ? kind : "", nedges);
    if (r) { /* (the spawn's own until it links) */
        r->size = size;
        r->cost = pl ? pl->cost : 0;
        r->cpu = cpu;
        r->gpu_w = gpu_w;
    }
    return r;
}

weft__brec *weft__bound_proxy(weft__bound_log *log) { return record(log, NULL, 1); }

void weft__bound_started(weft__brec *r) { r->t_start = weft__now_ns(); }

void weft__bound_body_end(weft__brec *r) { r->t_body_end = weft__now_ns(); }

void weft__bound_finished(weft__bound_log *log, weft__brec *r, bool ran, bool on_gpu, unsigned dev)
{
    uint64_t now = weft__now_ns();
    pthread_mutex_lock(&log->lock);
    r->t_end = now;
    r->on_gpu = on_gpu;
    r->dev = (uint16_t)dev;
    r->finished = ran && r->t_start ? WEFT__BREC_RAN : WEFT__BREC_CANCELLED;
    pthread_mutex_unlock(&log->lock);
}

/* ------------------------------------------------------------------------ */
/* The bound                                                                 */
/* ------------------------------------------------------------------------ */

/* A finished task as the bound sees it. */
typedef struct bnode {
    double tc, tg;          /* s on the CPU, on a GPU (INFINITY: not there) */
    double obs;             /* s observed on the class it ran on */
    double fin;             /* the critical path's finish */
    uint64_t start, end;    /* ns: its body's start, its completion */
    uint64_t own_end;       /* ns: the end of its own work (a continued task's body's) */
    uint64_t size;
    double cost;
    uint32_t kind, pred_at, npred;
    float gpu_w;
    uint16_t dev;
    bool cpu, on_gpu, ran, proxy, no_model;
} bnode;

/* The finished part of the log, copied out under its lock. */
typedef struct bgraph {
    bnode *node;
    uint32_t n;
    uint32_t *pred;         /* node indices, by node (pred_at, npred) */
    char (*kinds)[WEFT__PM_NAME];
    uint32_t nkinds;
    uint64_t first_spawn, last_end, pending;
} bgraph;

static void graph_free(bgraph *g)
{
    weft__free(g->node);
    weft__free(g->pred);
    weft__free(g->kinds);
}

static weft__brec *rec_at(const weft__bound_log *log, uint32_t i)
{
    return &log->chunk[i / WEFT__BOUND_CHUNK][i % WEFT__BOUND_CHUNK];
}

/* Copy the finished records (the lock held) into g, numbered by map[]
 * (NONE: left out); their edges among themselves. */
static void snapshot_copy(const weft__bound_log *log, const uint32_t *map, bgraph *g)
{
    size_t e = 0;
    for (uint32_t i = 0; i < log->count; i++) {
        const weft__brec *r = rec_at(log, i);
        if (map[i] == NONE)
            continue;
        bnode *b = &g->node[map[i]];
        memset(b, 0, sizeof *b);
        b->start = r->t_start;
        b->end = r->t_end;
        b->own_end = r->t_body_end ? r->t_body_end : r->t_end;
        b->size = r->size;
        b->cost = r->cost;
        b->kind = r->kind;
        b->gpu_w = r->gpu_w;
        b->dev = r->dev;
        b->cpu = r->cpu;
        b->on_gpu = r->on_gpu;
        b->ran = r->finished == WEFT__BREC_RAN;
        b->proxy = r->proxy;
        b->pred_at = (uint32_t)e;
        for (uint32_t k = 0; k < r->npred; k++)
            if (map[r->pred[k]] != NONE)
                g->pred[e++] = map[r->pred[k]];
        b->npred = (uint32_t)e - b->pred_at;
        if (!r->proxy && (g->first_spawn == 0 || r->t_spawn < g->first_spawn))
            g->first_spawn = r->t_spawn;
        if (!r->proxy && r->t_end > g->last_end)
            g->last_end = r->t_end;
    }
}

/* Step 1: the finished tasks and their edges, out of the log.  0, or
 * WEFT_ENOMEM (reported). */
static int snapshot(weft__bound_log *log, bgraph *g, const char *fn)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_lock(&log->lock);
    if (log->lost) {
        uint64_t lost = log->lost;
        pthread_mutex_unlock(&log->lock);
        return weft__error(WEFT_ENOMEM, "%s: the task graph is incomplete: %llu task%s could not be recorded "
                                        "(out of memory)", fn, (unsigned long long)lost, lost == 1 ? "" : "s");
    }
    uint32_t *map = weft__alloc(((size_t)log->count + 1) * sizeof *map);
    size_t npred = 0;
    for (uint32_t i = 0; map && i < log->count; i++) {
        const weft__brec *r = rec_at(log, i);
        map[i] = r->finished ? g->n++ : NONE;
        npred += r->finished ? r->npred : 0;
        g->pending += !r->finished && !r->proxy;
    }
    g->node = map ? weft__alloc(((size_t)g->n + 1) * sizeof *g->node) : NULL;
    g->pred = g->node ? weft__alloc((npred + 1) * sizeof *g->pred) : NULL;
    g->kinds = g->pred ? weft__alloc(((size_t)log->nkinds + 1) * sizeof *g->kinds) : NULL;
    if (g->kinds) {
        if (log->nkinds)
            memcpy(g->kinds, log->kinds, log->nkinds * sizeof *g->kinds);
        g->nkinds = log->nkinds;
        snapshot_copy(log, map, g);
    }
    pthread_mutex_unlock(&log->lock);
    weft__free(map);
    if (!g->kinds) {
        graph_free(g);
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    }
    return 0;
}

/* A GPU task in the order of completion. */
typedef struct ended {
    uint64_t end;
    uint32_t node;
} ended;

static int by_end(const void *x, const void *y)
{
    uint64_t a = ((const ended *)x)->end, b = ((const ended *)y)->end;
    return (a > b) - (a < b);
}

/* Step 2: each task's observed time on the class it ran on: from its
 * start, or its predecessors' last completion, or (on a GPU) the
 * completion of the task before it there, whichever is latest (its body
 * may start before its work can: a GPU task released early queues work
 * behind its predecessors'), to the end of its own work.  0 or
 * WEFT_ENOMEM (reported). */
static int observe(bgraph *g, const char *fn)
{
    ended *gpu = weft__alloc(((size_t)g->n + 1) * sizeof *gpu);
    if (!gpu)
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    uint32_t ngpu = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        bnode *b = &g->node[i];
        for (uint32_t k = 0; k < b->npred; k++)
            if (g->node[g->pred[b->pred_at + k]].end > b->start)
                b->start = g->node[g->pred[b->pred_at + k]].end;
        if (b->ran && b->on_gpu)
            gpu[ngpu++] = (ended){b->end, i};
    }
    qsort(gpu, ngpu, sizeof *gpu, by_end);
    uint64_t last[WEFT__MAX_DEVICES] = {0};
    for (uint32_t j = 0; j < ngpu; j++) {
        bnode *b = &g->node[gpu[j].node];
        unsigned d = b->dev < WEFT__MAX_DEVICES ? b->dev : 0;
        if (last[d] > b->start)
            b->start = last[d];
        last[d] = b->end;
    }
    for (uint32_t i = 0; i < g->n; i++) {
        bnode *b = &g->node[i];
        b->obs = b->ran && b->own_end > b->start ? (double)(b->own_end - b->start) * 1e-9 : 0;
    }
    weft__free(gpu);
    return 0;
}

/* What model m predicts at size (s), or INFINITY. */
static double predicted(weft__perfmodel *pm, weft__pm_model *m, uint64_t size)
{
    double ns = 0;
    uint64_t seen;
    if (!m || weft__pm_predict(pm, m, size, &ns, &seen) == WEFT__PM_NONE || !(ns > 0))
        return INFINITY;
    return ns * 1e-9;
}

/* What a task of kind model m (NULL: none), size and cost takes on an
 * arch whose time per unit of cost is per (NULL: none), or INFINITY: its
 * kind's prediction, else its cost at that rate (as the earliest-finish
 * policy predicts a kind never seen there). */
static double predicted_or_rated(weft__perfmodel *pm, weft__pm_model *m, weft__pm_model *per, uint64_t size,
                                 double cost)
{
    double t = predicted(pm, m, size);
    return isfinite(t) || !(cost > 0) ? t : cost * predicted(pm, per, 0);
}

/* Step 3: each task's time on each class: its model's prediction (the
 * fastest GPU arch's), else for a task with a cost its cost at the rate
 * tasks with a cost showed there, else its observed time on the class it
 * ran on, else none.  0 or WEFT_ENOMEM (reported). */
static int predict(bgraph *g, const weft__bound_machine *m, const char *fn)
{
    unsigned narch = m->pm ? (m->narch < WEFT__ARCHS ? m->narch : WEFT__ARCHS) : 0;
    weft__pm_model **model = weft__alloc(((size_t)g->nkinds * WEFT__ARCHS + 1) * sizeof *model);
    if (!model)
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    for (uint32_t k = 0; k < g->nkinds; k++)
        for (unsigned a = 0; a < WEFT__ARCHS; a++)
            model[k * WEFT__ARCHS + a] = a < narch ? weft__pm_model_find(m->pm, g->kinds[k], m->arch[a]) : NULL;
    weft__pm_model *per[WEFT__ARCHS] = {NULL};
    for (unsigned a = 0; a < narch; a++)
        per[a] = weft__pm_model_find(m->pm, WEFT__PM_PER_COST, m->arch[a]);
    for (uint32_t i = 0; i < g->n; i++) {
        bnode *b = &g->node[i];
        weft__pm_model **km = &model[b->kind * WEFT__ARCHS];
        if (!b->ran) { /* (a placeholder, or a task that never ran: no work) */
            b->tc = b->tg = 0;
            continue;
        }
        double pc = b->cpu && narch ? predicted_or_rated(m->pm, km[0], per[0], b->size, b->cost) : INFINITY;
        double pg = INFINITY;
        for (unsigned a = 1; b->gpu_w > 0 && a < narch; a++) {
            double t = predicted_or_rated(m->pm, km[a], per[a], b->size, b->cost);
            pg = t < pg ? t : pg;
        }
        b->tc = !b->cpu ? INFINITY : isfinite(pc) ? pc : !b->on_gpu ? b->obs : INFINITY;
        b->tg = !(b->gpu_w > 0) ? INFINITY : isfinite(pg) ? pg : b->on_gpu ? b->obs : INFINITY;
        b->no_model = (b->cpu && !isfinite(pc)) || (b->gpu_w > 0 && !isfinite(pg));
    }
    weft__free(model);
    return 0;
}

/* Step 4: the critical path (s): the graph in topological order (Kahn's),
 * each task finishing at its predecessors' last finish plus its time on
 * its fastest class.  0 or WEFT_ENOMEM (reported). */
static int critical_path(bgraph *g, double *path, const char *fn)
{
    size_t n = g->n, e = g->n ? g->node[n - 1].pred_at + g->node[n - 1].npred : 0;
    uint32_t *indeg = weft__alloc((n + 1) * sizeof *indeg), *succ_at = weft__alloc((n + 2) * sizeof *succ_at);
    uint32_t *succ = weft__alloc((e + 1) * sizeof *succ), *ready = weft__alloc((n + 1) * sizeof *ready);
    int rc = indeg && succ_at && succ && ready ? 0 : weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    *path = 0;
    if (rc == 0) {
        /* Successor lists from the predecessor lists: counted into
         * succ_at[p + 2], summed so that succ_at[p + 1] is where p's begin,
         * then filled, moving each succ_at[p + 1] to where p's end (so
         * that p's are succ_at[p] .. succ_at[p + 1]). */
        memset(succ_at, 0, (n + 2) * sizeof *succ_at);
        for (size_t i = 0; i < n; i++) {
            indeg[i] = g->node[i].npred;
            for (uint32_t k = 0; k < g->node[i].npred; k++)
                succ_at[g->pred[g->node[i].pred_at + k] + 2]++;
        }
        for (size_t i = 0; i < n; i++)
            succ_at[i + 2] += succ_at[i + 1];
        for (size_t i = 0; i < n; i++)
            for (uint32_t k = 0; k < g->node[i].npred; k++)
                succ[succ_at[g->pred[g->node[i].pred_at + k] + 1]++] = (uint32_t)i;
        size_t head = 0, tail = 0;
        for (size_t i = 0; i < n; i++)
            if (!indeg[i])
                ready[tail++] = (uint32_t)i;
        while (head < tail) {
            bnode *b = &g->node[ready[head++]];
            double from = 0, w = b->tc < b->tg ? b->tc : b->tg;
            for (uint32_t k = 0; k < b->npred; k++)
                from = g->node[g->pred[b->pred_at + k]].fin > from ? g->node[g->pred[b->pred_at + k]].fin : from;
            b->fin = from + (isfinite(w) ? w : 0);
            *path = b->fin > *path ? b->fin : *path;
            uint32_t self = (uint32_t)(b - g->node);
            for (uint32_t k = succ_at[self]; k < succ_at[self + 1]; k++)
                if (--indeg[succ[k]] == 0)
                    ready[tail++] = succ[k];
        }
        /* (every node is reached: an edge never closes a cycle, spawn
         * refuses one) */
    }
    weft__free(indeg);
    weft__free(succ_at);
    weft__free(succ);
    weft__free(ready);
    return rc;
}

/* A task that may go to either class: its work on each. */
typedef struct flex {
    double c, gw; /* s on one CPU slot; GPU-seconds (its time x the GPU it takes) */
} flex;

static int by_ratio(const void *x, const void *y)
{
    const flex *a = x, *b = y;
    double ra = a->c / a->gw, rb = b->c / b->gw; /* (the CPU relatively best first) */
    return (ra > rb) - (ra < rb);
}

/* Whether the work fits in T: what must go to the CPU there first, then
 * the flexible tasks in order, each whole or in part, while the CPU has
 * room, and what is left, with what must go to the GPUs, on the GPUs.
 * (Filling the CPU with the tasks it is relatively best at is optimal:
 * exchanging any part of a task for an equal CPU time of one later in
 * the order takes no less GPU time.) */
static bool area_fits(const flex *f, size_t nf, double cpu_only, double gpu_only, unsigned cs, unsigned gs,
                      double T)
{
    double room = cs * T - cpu_only, gpu = gpu_only;
    if (room < -1e-12 * T)
        return false;
    for (size_t i = 0; i < nf; i++) {
        double on_cpu = room <= 0 ? 0 : room >= f[i].c ? 1 : room / f[i].c;
        room -= on_cpu * f[i].c;
        gpu += (1 - on_cpu) * f[i].gw;
    }
    return gpu <= gs * T * (1 + 1e-12);
}

/* Step 5: the area bound (s) over cs CPU slots and gs GPUs, by bisection
 * on T (area_fits is monotone in it).  0 or WEFT_ENOMEM (reported). */
static int area_bound(const bgraph *g, unsigned cs, unsigned gs, double *area, const char *fn)
{
    flex *f = weft__alloc(((size_t)g->n + 1) * sizeof *f);
    if (!f)
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    size_t nf = 0;
    double cpu_only = 0, gpu_only = 0, hi = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        const bnode *b = &g->node[i];
        double c = b->tc, gw = b->gpu_w > 0 ? b->tg * b->gpu_w : INFINITY;
        if (isfinite(c) && isfinite(gw) && c > 0 && gw > 0)
            f[nf++] = (flex){c, gw};
        else if (isfinite(c) && !(isfinite(gw) && gw <= 0))
            cpu_only += c;
        else if (isfinite(gw))
            gpu_only += gw;
        hi += (isfinite(c) ? c : 0) + (isfinite(gw) ? gw : 0);
    }
    qsort(f, nf, sizeof *f, by_ratio);
    cs = cs ? cs : 1;
    gs = gs ? gs : 1;
    /* hi fits: everything flexible fits on the CPU beside what must go
     * there, and what must go to the GPUs is no more than hi. */
    double lo = 0;
    for (int it = 0; it < 200 && hi - lo > 1e-12 * hi; it++) {
        double mid = lo + (hi - lo) / 2;
        if (area_fits(f, nf, cpu_only, gpu_only, cs, gs, mid))
            hi = mid;
        else
            lo = mid;
    }
    weft__free(f);
    *area = hi;
    return 0;
}

/* Step 6: the answer. */
static void fill(const bgraph *g, const weft__bound_machine *m, double path, double area, weft_bound *out)
{
    memset(out, 0, sizeof *out);
    bool cpu = false, gpu = false;
    for (uint32_t i = 0; i < g->n; i++) {
        const bnode *b = &g->node[i];
        if (b->proxy)
            continue;
        out->tasks++;
        out->no_model += b->ran && b->no_model;
        cpu |= b->cpu;
        gpu |= b->gpu_w > 0;
    }
    out->pending = g->pending;
    out->makespan = g->last_end > g->first_spawn ? (double)(g->last_end - g->first_spawn) * 1e-9 : 0;
    out->path = path;
    out->area = area;
    out->bound = path > area ? path : area;
    out->cpu_slots = cpu ? m->cpu_slots : 0;
    out->gpus = gpu ? m->gpus : 0;
}

int weft__bound_compute(weft__bound_log *log, const weft__bound_machine *m, weft_bound *out, const char *fn)
{
    bgraph g;
    int rc = snapshot(log, &g, fn);
    if (rc)
        return rc;
    double path = 0, area = 0;
    rc = observe(&g, fn);
    if (rc == 0)
        rc = predict(&g, m, fn);
    if (rc == 0)
        rc = critical_path(&g, &path, fn);
    if (rc == 0)
        rc = area_bound(&g, m->cpu_slots, m->gpus, &area, fn);
    if (rc == 0)
        fill(&g, m, path, area, out);
    graph_free(&g);
    return rc;
}
