/*
 * api/api_task.c — the task functions of weft.h: spawn (validation and
 * backpressure here; linking in the graph layer), waits, inspection,
 * cancellation, and what a body sees through its context.
 */
#include "api/runtime.h"
#include "data/reduce.h"
#include "data/scratch.h"
#include "data/tile.h"
#include "sched/perfmodel.h"

#include <stdio.h>
#include <string.h>

void weft_task_desc_init(weft_task_desc *d)
{
    if (d)
        memset(d, 0, sizeof *d);
}

static int spawn_fail(const weft_task_desc *d, int code)
{
    if (d && d->arg_destroy)
        d->arg_destroy(d->arg);
    return code;
}

/* Whether a mode names a user reduction (rightly or not: WEFT_RED_USER
 * among its operator bits), so that its bits 20-30 are a number. */
static bool names_user(unsigned m) { return (m & WEFT_REDUCE) && (m & WEFT_RED_USER); }

/* The operator and element type of reduction access i of d, a task of
 * runtime h: *elem, the bytes of its element, and *what, the operator's
 * name for messages; 0 or WEFT_EINVAL naming the access. */
static int reduce_op_check(const weft_task_desc *d, size_t i, const void *h, const char *fn, size_t *elem,
                           const char **what)
{
    const weft_access *a = &d->accesses[i];
    unsigned m = a->mode, op = m & WEFT_RED_OP_MASK;
    if (op == WEFT_RED_USER) {
        unsigned id = weft__red_user_id(m);
        const weft__reduction *u = weft__reduction_find(h, id);
        if (!id)
            return weft__error(WEFT_EINVAL, "%s: access %zu reduces with WEFT_RED_USER but names no reduction: "
                                            "use WEFT_REDUCE | op, with the op weft_reduction_register gave", fn, i);
        if (!u)
            return weft__error(WEFT_EINVAL, "%s: access %zu reduces with user reduction number %u, which this "
                                            "runtime did not register (another runtime's, or a stale op): a "
                                            "reduction is registered with the runtime whose tasks use it", fn, i, id);
        if (m & WEFT_RED_TYPE_MASK)
            return weft__error(WEFT_EINVAL, "%s: access %zu has type bits 0x%x with user reduction \"%s\": it gives "
                                            "its element size (%zu bytes) itself; drop the type",
                               fn, i, m & WEFT_RED_TYPE_MASK, u->name, u->elem);
        *elem = u->elem;
        *what = u->name;
        return 0;
    }
    if (op > WEFT_RED_USER && op <= (WEFT_RED_USER | WEFT_RED_MAX))
        return weft__error(WEFT_EINVAL, "%s: access %zu reduces with operator 0x%x: WEFT_RED_USER (a user "
                                        "reduction, whose combine is the operator) cannot be combined with "
                                        "WEFT_RED_SUM, WEFT_RED_MIN or WEFT_RED_MAX", fn, i, op);
    if (!weft__red_op_known(m))
        return weft__error(WEFT_EINVAL, "%s: access %zu reduces with operator 0x%x: add WEFT_RED_SUM, WEFT_RED_MIN, "
                                        "WEFT_RED_MAX, or WEFT_RED_USER with a weft_access.reduction", fn, i, op);
    if (!(*elem = weft__red_elem(m)))
        return weft__error(WEFT_EINVAL, "%s: access %zu reduces elements of type 0x%x: add WEFT_RED_I32, "
                                        "WEFT_RED_I64, WEFT_RED_U32, WEFT_RED_U64, WEFT_RED_F32 or WEFT_RED_F64",
                           fn, i, m & WEFT_RED_TYPE_MASK);
    *what = NULL;
    return 0;
}

/* A reduction access (access i of d, a task of runtime h): 0 or
 * WEFT_EINVAL naming it. */
static int reduce_check(const weft_task_desc *d, size_t i, const void *h, const char *fn)
{
    unsigned m = d->accesses[i].mode;
    if (m & (WEFT_RW | WEFT_COMMUTE | WEFT_UNORDERED))
        return weft__error(WEFT_EINVAL, "%s: access %zu has mode 0x%x: WEFT_REDUCE cannot be combined with "
                                        "WEFT_R, WEFT_W, WEFT_COMMUTE or WEFT_UNORDERED (a reduction group "
                                        "is unordered already)", fn, i, m);
    unsigned known = WEFT_REDUCE | WEFT_HOST | WEFT_RED_OP_MASK | WEFT_RED_TYPE_MASK |
                     (names_user(m) ? WEFT_RED_USER_ID_MASK : 0u);
    if (m & ~known)
        return weft__error(WEFT_EINVAL, "%s: access %zu has mode 0x%x: unknown bits 0x%x with WEFT_REDUCE", fn, i,
                           m, m & ~known);
    size_t elem = 0;
    const char *user = NULL;
    int orc = reduce_op_check(d, i, h, fn, &elem, &user);
    if (orc)
        return orc;
    char by[64] = "";
    if (user)
        snprintf(by, sizeof by, " (user reduction \"%s\")", user);
    for (size_t j = 0; j < d->naccesses; j++)
        if (j != i && d->accesses[j].data == d->accesses[i].data && !(d->accesses[j].mode & WEFT_SCRATCH))
            return weft__error(WEFT_EINVAL, "%s: access %zu reduces data that access %zu names too: a reduction "
                                            "must be the task's only access to its data (a scratch buffer of it "
                                            "aside)", fn, i, j);
    /* What follows reads tiles' geometry: pinned meanwhile (an unregister
     * frees it; a handle being unregistered fails the spawn later). */
    weft__data *x = weft__data_pin(d->accesses[i].data);
    if (!x)
        return 0;
    int rc = 0;
    if (!x->tile && x->size % elem)
        rc = weft__error(WEFT_EINVAL, "%s: access %zu reduces %zu-byte elements%s, but its data's %zu bytes are "
                                      "not a whole number of them", fn, i, elem, by, x->size);
    else if (x->tile && x->in_bytes % elem)
        rc = weft__error(WEFT_EINVAL, "%s: access %zu reduces %zu-byte elements%s, but the rows of its tile's "
                                      "interior are %zu bytes, not a whole number of them", fn, i, elem, by,
                         x->in_bytes);
    else if (!x->tile && atomic_load(&x->fam))
        rc = weft__error(WEFT_EINVAL, "%s: access %zu reduces data partitioned into tiles: reduce its tiles (or "
                                      "the data before it is partitioned)", fn, i);
    /* A tile's reduction must not meet the order-only accesses the task's
     * other accesses add on it (data/tile.h): the parent of its tile, or a
     * read of a tile whose halo covers it. */
    for (size_t j = 0; j < d->naccesses && rc == 0 && x->tile; j++) {
        weft__data *e = j == i ? NULL : weft__data_pin(d->accesses[j].data);
        if (!e)
            continue;
        const weft__tile *xt = x->tile, *et = e->tile;
        if (e == xt->fam->parent)
            rc = weft__error(WEFT_EINVAL, "%s: access %zu reduces a tile of the data that access %zu names: a task "
                                          "reducing a tile must not access the data it was partitioned from",
                             fn, i, j);
        else if (et && et->fam == xt->fam && (d->accesses[j].mode & WEFT_R))
            for (unsigned k = 0; k < et->nnb && rc == 0; k++)
                if (et->nb[k].tile == xt->index)
                    rc = weft__error(WEFT_EINVAL, "%s: access %zu reduces tile %u, but access %zu reads tile %u, "
                                                  "whose halo covers part of it: a task must not read what it "
                                                  "reduces", fn, i, xt->index, j, et->index);
        weft__data_unpin(e);
    }
    weft__data_unpin(x);
    return rc;
}

/* A tile (access i of d) and its partitioned parent in one task, one of
 * them written: 0 or WEFT_EINVAL naming both.  The two are views of one
 * array that the data layer brings up to date one from the other between
 * tasks (data/tile.h), never within one: what the task wrote through one
 * view would be replaced by the other's. */
static int family_check(const weft_task_desc *d, size_t i, const char *fn)
{
    weft__data *x = weft__data_pin(d->accesses[i].data);
    if (!x)
        return 0; /* (being unregistered: the spawn fails later) */
    int rc = 0;
    for (size_t j = 0; j < d->naccesses && rc == 0 && x->tile; j++) {
        unsigned both = d->accesses[i].mode | d->accesses[j].mode;
        /* (a reduction's own rule: reduce_check; a scratch buffer is not the data) */
        if (j == i || !(both & WEFT_W) || (both & (WEFT_REDUCE | WEFT_SCRATCH)))
            continue;
        weft__data *e = weft__data_pin(d->accesses[j].data);
        if (e && e == x->tile->fam->parent)
            rc = weft__error(WEFT_EINVAL, "%s: access %zu names tile %u of the data that access %zu names, and "
                                          "one of them writes: a task may use a tile and the data it was "
                                          "partitioned from together only to read both (write the tiles, or "
                                          "the whole data, in tasks of their own)",
                             fn, i, x->tile->index, j);
        if (e)
            weft__data_unpin(e);
    }
    weft__data_unpin(x);
    return rc;
}

/* An access with WEFT_ON_GPU (access i of d): 0 or WEFT_EINVAL naming it. */
static int on_gpu_check(const weft_task_desc *d, size_t i, const char *fn)
{
    unsigned m = d->accesses[i].mode, k = ((m & WEFT_ON_GPU_MASK) >> 20) - 1;
    if ((m & (WEFT_HOST | WEFT_COMMUTE | WEFT_UNORDERED | WEFT_REDUCE)) || !(m & (WEFT_RW | WEFT_SCRATCH)))
        return weft__error(WEFT_EINVAL, "%s: access %zu has mode 0x%x: WEFT_ON_GPU goes with WEFT_R, WEFT_W, "
                                        "WEFT_RW or WEFT_SCRATCH only (not WEFT_HOST, WEFT_COMMUTE, "
                                        "WEFT_UNORDERED or WEFT_REDUCE)", fn, i, m);
    if (!d->nplacements)
        return weft__error(WEFT_EINVAL, "%s: access %zu is on the task's GPU %u, but the task runs on the CPU "
                                        "(no placements)", fn, i, k);
    for (size_t j = 0; j < d->nplacements; j++)
        if (d->placements[j].gpus <= k)
            return weft__error(WEFT_EINVAL, "%s: access %zu is on the task's GPU %u, but alternative %zu has %u GPU%s",
                               fn, i, k, j, d->placements[j].gpus, d->placements[j].gpus == 1 ? "" : "s");
    for (size_t j = 0; j < d->naccesses; j++) {
        const weft_access *b = &d->accesses[j];
        unsigned kb = (weft__red_task_mode(b->mode) & WEFT_ON_GPU_MASK) >> 20;
        kb = kb ? kb - 1 : 0;
        if (j != i && b->data == d->accesses[i].data && (kb != k || (b->mode & WEFT_HOST)) &&
            ((m | b->mode) & WEFT_W) && !((m | b->mode) & WEFT_SCRATCH)) /* (a scratch buffer is not the data) */
            return weft__error(WEFT_EINVAL, "%s: accesses %zu and %zu name the same data in two places, and one "
                                            "writes it (only readers may share data across a task's GPUs)",
                               fn, i < j ? i : j, i < j ? j : i);
    }
    return 0;
}

/* A scratch access (access i of d): 0 or WEFT_EINVAL naming it. */
static int scratch_check(const weft_task_desc *d, size_t i, const char *fn)
{
    unsigned m = d->accesses[i].mode;
    if (m & (WEFT_RW | WEFT_COMMUTE | WEFT_REDUCE))
        return weft__error(WEFT_EINVAL, "%s: access %zu has mode 0x%x: WEFT_SCRATCH cannot be combined with WEFT_R, "
                                        "WEFT_W, WEFT_RW, WEFT_COMMUTE or WEFT_REDUCE: a scratch buffer is memory of "
                                        "the data's size for the task alone, not the data (whose value it neither "
                                        "reads nor writes); to use the value too, name the data in another access",
                           fn, i, m);
    if (m & WEFT_ON_GPU_MASK) {
        int rc = on_gpu_check(d, i, fn);
        if (rc)
            return rc;
        m &= ~(unsigned)WEFT_ON_GPU_MASK;
    }
    if (m & ~(unsigned)(WEFT_SCRATCH | WEFT_HOST))
        return weft__error(WEFT_EINVAL, "%s: access %zu has mode 0x%x: unknown bits 0x%x with WEFT_SCRATCH (it "
                                        "takes WEFT_HOST or WEFT_ON_GPU only)", fn, i, m,
                           m & ~(unsigned)(WEFT_SCRATCH | WEFT_HOST));
    return 0;
}

/* Every alternative of d has a body to run: d's own, or the alternative's
 * (then d->body may be NULL).  0 or WEFT_EINVAL saying what to set. */
static int body_check(const weft_task_desc *d, const char *fn)
{
    if (d->body)
        return 0;
    if (!d->nplacements)
        return weft__error(WEFT_EINVAL, "%s: descriptor has no body: set desc.body (or give it placements whose "
                                        "every alternative has a body of its own)", fn);
    if (!d->placements)
        return 0; /* (refused below, as NULL placements) */
    for (size_t i = 0; i < d->nplacements; i++)
        if (!d->placements[i].body)
            return weft__error(WEFT_EINVAL, "%s: descriptor has no body, and placement alternative %zu has none "
                                            "of its own: set desc.body (the body of the alternatives without "
                                            "one) or placements[%zu].body", fn, i, i);
    return 0;
}

/* Validate a descriptor against runtime handle h: 0 or an error (with a
 * message; arg_destroy not called). */
/* A kind the models can keep apart from every other: not empty, at most
 * WEFT_KIND_MAX bytes (a longer one would be cut, and two cut to the same
 * bytes would share one model), no control character (the model file
 * keeps a kind per line, tab-separated). */
static int kind_check(const char *kind, const char *fn)
{
    if (!kind[0])
        return weft__error(WEFT_EINVAL, "%s: kind is \"\": name the kind of work (\"gemm\"), or leave kind NULL "
                                        "to have the body's name used", fn);
    size_t n = strlen(kind);
    if (n > WEFT_KIND_MAX)
        return weft__error(WEFT_EINVAL, "%s: kind \"%.32s...\" is %zu bytes, more than the %d a model's name keeps "
                                        "(kinds that differ only after that would share one model): shorten it",
                           fn, kind, n, WEFT_KIND_MAX);
    if (strcmp(kind, WEFT__PM_PER_COST) == 0)
        return weft__error(WEFT_EINVAL, "%s: kind \"%s\" is the name of the models' own rate per unit of cost: "
                                        "name the kind of work", fn, kind);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)kind[i] < 0x20 || kind[i] == 0x7f)
            return weft__error(WEFT_EINVAL, "%s: kind \"%.32s\" has a control character (0x%02x) at byte %zu: a "
                                            "kind is a name of printable characters", fn, kind,
                               (unsigned)(unsigned char)kind[i], i);
    return 0;
}

int weft__desc_check(const weft_runtime *h, const weft_task_desc *d, const char *fn)
{
    if (!d)
        return weft__error(WEFT_EINVAL, "%s: descriptor is NULL", fn);
    int rc = body_check(d, fn);
    if (rc)
        return rc;
    if (d->ndeps && !d->deps)
        return weft__error(WEFT_EINVAL, "%s: ndeps is %zu but deps is NULL", fn, d->ndeps);
    if (d->naccesses && !d->accesses)
        return weft__error(WEFT_EINVAL, "%s: naccesses is %zu but accesses is NULL", fn, d->naccesses);
    if (d->flags & ~(unsigned)WEFT_SPAWN_NOWAIT)
        return weft__error(WEFT_EINVAL, "%s: unknown flags 0x%x", fn, d->flags);
    if (d->nplacements && !d->placements)
        return weft__error(WEFT_EINVAL, "%s: nplacements is %zu but placements is NULL", fn, d->nplacements);
    if (d->naccesses > UINT16_MAX || d->ndeps > UINT32_MAX / 2)
        return weft__error(WEFT_EINVAL, "%s: too many dependencies or accesses", fn);
    if (!(d->cost >= 0) || d->cost > 1e300) /* NaN too */
        return weft__error(WEFT_EINVAL, "%s: cost %g is not a finite number of at least 0 (the task's work, in "
                                        "flops or any unit its time is proportional to; 0: none)",
                           fn, d->cost);
    if (d->kind) {
        int rc = kind_check(d->kind, fn);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < d->ndeps; i++) {
        weft__task *p = weft__task_get(d->deps[i]);
        if (!p)
            return weft__error(WEFT_EINVAL, "%s: dependency %zu is NULL or was released", fn, i);
        if (p->rt_handle != (const void *)h)
            return weft__error(WEFT_EINVAL, "%s: dependency %zu belongs to another runtime", fn, i);
    }
    for (size_t i = 0; i < d->naccesses; i++) {
        const weft_access *a = &d->accesses[i];
        weft__data *dd = weft__data_get(a->data);
        if (!dd)
            return weft__error(WEFT_EINVAL, "%s: data of access %zu is NULL or unregistered", fn, i);
        if (atomic_load_explicit(&dd->rt_handle, memory_order_relaxed) != (const void *)h)
            return weft__error(WEFT_EINVAL, "%s: data of access %zu belongs to another runtime", fn, i);
        unsigned m = a->mode;
        if (m & WEFT_SCRATCH) { /* a buffer of its own: the data's size is all it uses */
            int rc = scratch_check(d, i, fn);
            if (rc)
                return rc;
            continue;
        }
        if (atomic_load_explicit(&dd->no_memory, memory_order_relaxed))
            return weft__error(WEFT_EINVAL, "%s: data of access %zu has no memory (registered with "
                                            "weft_data_register(rt, NULL, n)): it can only be a task's "
                                            "WEFT_SCRATCH access, and mode 0x%x asks for its value", fn, i, m);
        if ((m & WEFT_ON_GPU_MASK) && !names_user(m)) { /* (a user reduction's number is in those bits) */
            int rc = on_gpu_check(d, i, fn);
            if (rc)
                return rc;
            m &= ~(unsigned)WEFT_ON_GPU_MASK;
        }
        if (d->naccesses > 1 && atomic_load(&dd->fam)) {
            int rc = family_check(d, i, fn);
            if (rc)
                return rc;
        }
        if (m & WEFT_REDUCE) {
            int rc = reduce_check(d, i, h, fn);
            if (rc)
                return rc;
            continue;
        }
        if ((m & WEFT_COMMUTE) && (m & WEFT_RW) != WEFT_RW)
            return weft__error(WEFT_EINVAL, "%s: access %zu has mode 0x%x: WEFT_COMMUTE goes with WEFT_RW only "
                                            "(for reads or writes the data does not order, add WEFT_UNORDERED "
                                            "to WEFT_R or WEFT_W)", fn, i, m);
        if ((m & ~(unsigned)(WEFT_RW | WEFT_COMMUTE | WEFT_UNORDERED | WEFT_HOST)) || !(m & WEFT_RW))
            return weft__error(WEFT_EINVAL, "%s: access %zu has invalid mode 0x%x "
                                            "(WEFT_R, WEFT_W or WEFT_RW, optionally | WEFT_UNORDERED; "
                                            "WEFT_RW|WEFT_COMMUTE; any of them | WEFT_HOST; or "
                                            "WEFT_REDUCE | an operator | a type, or WEFT_REDUCE | a user "
                                            "reduction's op; or WEFT_SCRATCH)", fn, i, m);
    }
    return 0;
}

/* Tasks that count against max_inflight, not counting the `self` counts the
 * calling spawn holds itself. */
static int64_t pressure(weft__rt *rt, int64_t self)
{
    int64_t n = atomic_load(&rt->graph.inflight);
    if (weft__on_own_worker(rt))
        for (unsigned i = 0; i < rt->nworkers; i++)
            n -= atomic_load_explicit(&rt->workers[i].depth, memory_order_relaxed);
    return n - self;
}

/* Enter h for a spawn, applying backpressure: returns the runtime with
 * *held counts taken (1 from a task, 2 from outside), or NULL with *err. */
weft__rt *weft__spawn_enter(weft_runtime *h, const weft_task_desc *d, const char *fn, int *err, int64_t *held)
{
    /* Entering counts the spawn as in flight, so a destroy racing with it
     * waits for it; a spawned task keeps that count until it finishes.  An
     * outside thread holds a second count until it returns: once the task
     * is queued it may finish at once, and destroy must not free the
     * workers while this call still wakes one of them. */
    const weft__rt *guess = weft__handle_decode(h);
    bool outside = !(guess && weft__on_own_worker(guess));
    *held = outside ? 2 : 1;
    /* An on_finish callback of one of the runtime's tasks may spawn while
     * destroy drains, as the task's body might have: the finishing task's
     * count keeps the runtime open until the callback has returned. */
    bool callback = weft__in_callback();
    bool own_callback = callback && guess && weft__tls_finishing->g == &guess->graph;
    weft__rt *rt = weft__rt_enter(h, fn, err, *held, own_callback);
    if (!rt)
        return NULL;
    /* A callback never waits for backpressure: the thread running it
     * finishes tasks (a device's queue thread, perhaps the only one that
     * can finish those in flight), and its task's finish makes room. */
    if (d && !callback &&
        atomic_load_explicit(&rt->graph.inflight, memory_order_relaxed) - *held >= (int64_t)rt->max_inflight &&
        pressure(rt, *held) >= (int64_t)rt->max_inflight) {
        if (d->flags & WEFT_SPAWN_NOWAIT) {
            weft__rt_leave(rt, *held);
            *err = weft__error(WEFT_EAGAIN, "%s: %zu tasks in flight (max_inflight)", fn, rt->max_inflight);
            return NULL;
        }
        if (outside) {
            /* Sleep holding no count (so several producers cannot keep each
             * other above the mark), then enter again. */
            for (;;) {
                weft__rt_leave(rt, *held);
                weft__wait_throttle(rt, 0);
                rt = weft__rt_enter(h, fn, err, *held, false);
                if (!rt)
                    return NULL;
                if (pressure(rt, *held) < (int64_t)rt->max_inflight)
                    break;
            }
        } else {
            weft__wait_throttle(rt, *held);
        }
    }
    return rt;
}

void weft__spawn_leave(weft__rt *rt, int64_t held, bool spawned)
{
    if (spawned) {
        int64_t now = atomic_load_explicit(&rt->graph.inflight, memory_order_relaxed) - (held - 1);
        int64_t peak = atomic_load_explicit(&rt->graph.inflight_peak, memory_order_relaxed);
        while (now > peak && !atomic_compare_exchange_weak(&rt->graph.inflight_peak, &peak, now))
            ;
        held--; /* the task keeps one */
    }
    if (held)
        weft__rt_leave(rt, held);
}

int weft_spawn(weft_runtime *h, const weft_task_desc *d, weft_task **out)
{
    weft__clear_error();
    int err;
    int64_t held;
    if (!d)
        return weft__error(WEFT_EINVAL, "weft_spawn: descriptor is NULL");
    weft__rt *rt = weft__spawn_enter(h, d, "weft_spawn", &err, &held);
    if (!rt)
        return err == WEFT_EAGAIN ? err : spawn_fail(d, err);
    int rc = weft__desc_check(h, d, "weft_spawn");
    weft__task *t = NULL;
    if (rc == 0)
        rc = weft__task_spawn(&rt->graph, h, d, NULL, out != NULL, &t);
    weft__spawn_leave(rt, held, rc == 0);
    if (rc != 0)
        return spawn_fail(d, rc);
    if (out)
        *out = weft__handle_encode(t);
    return 0;
}

/* Whether task t holds any of its data on a GPU. */
static bool holds_data_on_gpus(const weft__task *t)
{
    for (uint32_t i = 0; i < t->naccess; i++)
        if (!(t->access[i].mode & WEFT__ORDER_ONLY) && weft__task_access_dev(t, &t->access[i], NULL) != 0)
            return true;
    return false;
}

int weft_ctx_continue(weft_ctx *ctx, const weft_task_desc *next, weft_task **out)
{
    weft__clear_error();
    if (!ctx || !next)
        return weft__error(WEFT_EINVAL, "weft_ctx_continue: %s is NULL", ctx ? "next" : "ctx");
    weft__task *t = ctx->task;
    if (weft__tls_worker != ctx->worker || ctx->worker->current != t)
        return spawn_fail(next, weft__error(WEFT_EINVAL, "weft_ctx_continue: called outside the body of "
                                                         "task %llu '%s'", (unsigned long long)t->id, t->name));
    if (t->continued)
        return spawn_fail(next, weft__error(WEFT_EINVAL, "weft_ctx_continue: the body of task %llu '%s' has "
                                                         "continued already", (unsigned long long)t->id, t->name));
    if (ctx->worker->held) /* (cleared as every body starts: this body kept it) */
        return spawn_fail(next, weft__error(WEFT_EINVAL, "weft_ctx_continue: the body of task %llu '%s' called "
                                                         "weft_ctx_hold_over, which must be its last step "
                                                         "(continue first: hold_over then declines, and the "
                                                         "body lets go itself)",
                                            (unsigned long long)t->id, t->name));
    if (next->naccesses)
        return spawn_fail(next, weft__error(WEFT_EINVAL, "weft_ctx_continue: a continuation names no data "
                                                         "(task %llu '%s' holds its data until it finishes)",
                                            (unsigned long long)t->id, t->name));
    weft__task *root = weft__task_cont_root(t);
    if (holds_data_on_gpus(root) && weft_ctx_gpu_count(ctx) > 0) {
        /* next may use the data where the body left it: what the body
         * queued on its streams runs first. */
        int rc = weft_ctx_sync(ctx);
        if (rc != 0)
            return spawn_fail(next, rc);
    }
    for (size_t i = 0; i < next->ndeps; i++) {
        weft__task *d = weft__task_get(next->deps[i]);
        if (d && weft__depends_on(d, root))
            return spawn_fail(next, weft__error(WEFT_EDEADLK, "weft_ctx_continue: task %llu '%s' would wait "
                                                              "for dependency %zu, task %llu '%s', which cannot "
                                                              "finish before it (it is that task, or depends on it)",
                                                (unsigned long long)root->id, root->name, i,
                                                (unsigned long long)d->id, d->name));
    }
    int err;
    int64_t held;
    weft_runtime *h = weft__handle_encode(ctx->rt);
    weft__rt *rt = weft__spawn_enter(h, next, "weft_ctx_continue", &err, &held);
    if (!rt)
        return err == WEFT_EAGAIN ? err : spawn_fail(next, err);
    int rc = weft__desc_check(h, next, "weft_ctx_continue");
    weft__task *c = NULL;
    if (rc == 0) {
        /* The root's op for the continuation, before it can run and end;
         * and its state as its users see it: waiting, until the
         * continuation starts (weft__task_start), from now on (it must not
         * overwrite the continuation's RUNNING, which may come at once). */
        weft__task_op_begin(root);
        atomic_store_explicit(&root->state, WEFT__T_WAITING, memory_order_relaxed);
        weft__spawn_extra x = {0};
        x.cont_of = root;
        rc = weft__task_spawn(&rt->graph, h, next, &x, out != NULL, &c);
        if (rc != 0) { /* (never the last op: this body's guard, or this continuation's, holds one) */
            atomic_fetch_sub(&root->ops, 1);
            atomic_store_explicit(&root->state, WEFT__T_RUNNING, memory_order_relaxed); /* (this body runs) */
        }
    }
    weft__spawn_leave(rt, held, rc == 0);
    if (rc != 0)
        return spawn_fail(next, rc);
    t->continued = true;
    if (out)
        *out = weft__handle_encode(c);
    return 0;
}

int weft_spawn_simple(weft_runtime *rt, weft_body_fn body, void *arg, weft_task **out)
{
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    return weft_spawn(rt, &d, out);
}

/* ------------------------------------------------------------------------ */
/* Waiting and inspection                                                    */
/* ------------------------------------------------------------------------ */

static int outcome(const weft__task *t)
{
    return weft__task_outcome(t, atomic_load(&((weft__task *)t)->state));
}

int weft_task_timedwait(weft_task *h, uint64_t timeout_ns)
{
    weft__clear_error();
    weft__task *t = weft__task_get(h);
    if (!t)
        return weft__error(WEFT_EINVAL, "weft_task_wait: task is NULL or was released");
    int rc = weft__refuse_in_callback("weft_task_wait");
    if (rc)
        return rc;
    if (weft__state_final(atomic_load(&t->state)))
        return outcome(t);
    weft__worker *w = weft__tls_worker;
    weft__rt *rt = weft__handle_decode(t->rt_handle);
    if (!rt || ((weft__slot *)rt)->pool_id != WEFT__POOL_RUNTIME)
        return weft__error(WEFT_EINVAL, "weft_task_wait: the task's runtime was destroyed");
    if (w && w->rt == rt) {
        if (w->current == t)
            return weft__error(WEFT_EBUSY, "weft_task_wait: task %llu '%s' waits for itself",
                               (unsigned long long)t->id, t->name);
        for (weft__task *x = w->current; x; x = x->outer)
            if (x == t)
                return weft__error(WEFT_EDEADLK, "weft_task_wait: task %llu '%s' is suspended below the "
                                                 "caller on this worker and cannot finish first",
                                   (unsigned long long)t->id, t->name);
        if (weft__depends_on_suspended(w, t))
            return weft__error(WEFT_EDEADLK, "weft_task_wait: task %llu '%s' depends on the calling task "
                                             "(or a task suspended under it), which cannot finish first",
                               (unsigned long long)t->id, t->name);
    }
    /* A body placed on GPUs lends its reservation while it waits: the task
     * it waits for may need that very GPU (its own child placed there). */
    weft__task *lender = w && w->rt == rt && timeout_ns ? w->current : NULL;
    if (lender)
        weft__task_lend(lender);
    int timed_out = weft__wait_task(rt, t, weft__deadline(timeout_ns));
    if (lender)
        weft__task_unlend(lender);
    if (timed_out != 0)
        return weft__error(WEFT_ETIMEDOUT, "weft_task_wait: task %llu '%s' not finished in time",
                           (unsigned long long)t->id, t->name);
    return outcome(t);
}

int weft_task_wait(weft_task *t) { return weft_task_timedwait(t, UINT64_MAX); }

/* The waits of weft_task_wait_any up to this many tasks keep their task
 * pointers on the stack. */
#define WAIT_ANY_STACK 16

int weft_task_wait_any(weft_task *const *hs, size_t n, uint64_t timeout_ns, size_t *which)
{
    weft__clear_error();
    if (!hs || !which || n == 0)
        return weft__error(WEFT_EINVAL, "weft_task_wait_any: %s", !hs ? "tasks is NULL"
                                                                  : !which ? "which is NULL"
                                                                           : "no tasks to wait for (n is 0)");
    int rc = weft__refuse_in_callback("weft_task_wait_any");
    if (rc)
        return rc;
    weft__task *stack[WAIT_ANY_STACK];
    weft__task **ts = n <= WAIT_ANY_STACK ? stack : weft__alloc(n * sizeof *ts);
    if (!ts)
        return weft__error(WEFT_ENOMEM, "weft_task_wait_any: out of memory for %zu tasks", n);
    const void *rt_handle = NULL;
    for (size_t i = 0; i < n; i++) {
        ts[i] = weft__task_get(hs[i]);
        if (!ts[i]) {
            rc = weft__error(WEFT_EINVAL, "weft_task_wait_any: tasks[%zu] is NULL or was released", i);
            goto out;
        }
        if (i == 0)
            rt_handle = ts[0]->rt_handle;
        else if (ts[i]->rt_handle != rt_handle) {
            rc = weft__error(WEFT_EINVAL, "weft_task_wait_any: tasks[%zu] (task %llu '%s') belongs to another "
                                          "runtime than tasks[0]: wait for each runtime's tasks apart", i,
                             (unsigned long long)ts[i]->id, ts[i]->name);
            goto out;
        }
    }
    weft__rt *rt = weft__handle_decode(rt_handle);
    if (!rt || ((weft__slot *)rt)->pool_id != WEFT__POOL_RUNTIME) {
        rc = weft__error(WEFT_EINVAL, "weft_task_wait_any: the tasks' runtime was destroyed");
        goto out;
    }
    weft__worker *w = weft__tls_worker;
    if (w && w->rt == rt) {
        for (size_t i = 0; i < n; i++) {
            weft__task *t = ts[i];
            if (w->current == t) {
                rc = weft__error(WEFT_EBUSY, "weft_task_wait_any: tasks[%zu] is the calling task %llu '%s' "
                                             "itself", i, (unsigned long long)t->id, t->name);
                goto out;
            }
            for (weft__task *x = w->current; x; x = x->outer)
                if (x == t) {
                    rc = weft__error(WEFT_EDEADLK, "weft_task_wait_any: tasks[%zu] (task %llu '%s') is "
                                                   "suspended below the caller on this worker and cannot "
                                                   "finish first", i, (unsigned long long)t->id, t->name);
                    goto out;
                }
            if (!weft__state_final(atomic_load(&t->state)) && weft__depends_on_suspended(w, t)) {
                rc = weft__error(WEFT_EDEADLK, "weft_task_wait_any: tasks[%zu] (task %llu '%s') depends on "
                                               "the calling task (or a task suspended under it), which cannot "
                                               "finish first", i, (unsigned long long)t->id, t->name);
                goto out;
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        if (weft__state_final(atomic_load(&ts[i]->state))) {
            *which = weft__first_index(ts, i);
            rc = 0;
            goto out;
        }
    /* A body placed on GPUs lends its reservation while it waits (as
     * weft_task_timedwait). */
    weft__task *lender = w && w->rt == rt && timeout_ns ? w->current : NULL;
    if (lender)
        weft__task_lend(lender);
    int timed_out = weft__wait_any(rt, ts, n, weft__deadline(timeout_ns), which);
    if (lender)
        weft__task_unlend(lender);
    rc = timed_out ? weft__error(WEFT_ETIMEDOUT, "weft_task_wait_any: none of the %zu tasks finished in time", n)
                   : 0;
out:
    if (ts != stack)
        weft__free(ts);
    return rc;
}

int weft_task_status_get(const weft_task *h, weft_task_status *out)
{
    weft__task *t = weft__task_get(h);
    if (!t)
        return weft__error(WEFT_EINVAL, "weft_task_status_get: task is NULL or was released");
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_task_status_get: out is NULL");
    *out = weft__state_public(atomic_load(&t->state));
    return 0;
}

int weft_task_info_get(const weft_task *h, weft_task_info *out)
{
    weft__task *t = weft__task_get(h);
    if (!t)
        return weft__error(WEFT_EINVAL, "weft_task_info_get: task is NULL or was released");
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_task_info_get: out is NULL");
    memset(out, 0, sizeof *out);
    out->id = t->id;
    out->status = weft__state_public(atomic_load(&t->state));
    memcpy(out->name, t->name, sizeof out->name);
    if (out->status == WEFT_TASK_FAILED || out->status == WEFT_TASK_COMPLETED)
        out->result = t->result;
    if (out->status == WEFT_TASK_CANCELLED) {
        out->cause_id = t->cause_id;
        memcpy(out->cause_name, t->cause_name, sizeof out->cause_name);
    }
    return 0;
}

int weft_task_cancel(weft_task *h)
{
    weft__task *t = weft__task_get(h);
    if (!t)
        return weft__error(WEFT_EINVAL, "weft_task_cancel: task is NULL or was released");
    if (!weft__task_doom(t, t->id, t->name, WEFT__CAUSE_REQUEST)) {
        /* Started: if it is suspended in a continuation that has not
         * started, that one does not run, and the task ends cancelled. */
        weft__task *c = weft__task_cont_pin(t);
        if (c) {
            (void)weft__task_doom(c, t->id, t->name, WEFT__CAUSE_REQUEST);
            weft__task_unref(c);
        }
    }
    return 0;
}

void weft_task_release(weft_task *h)
{
    weft__task *t = weft__task_get(h);
    if (!t)
        return;
    bool live = true;
    if (atomic_compare_exchange_strong(&t->handle_live, &live, false))
        weft__task_unref(t);
}

/* ------------------------------------------------------------------------ */
/* Inside a body                                                             */
/* ------------------------------------------------------------------------ */

weft_runtime *weft_ctx_runtime(const weft_ctx *ctx) { return ctx ? weft__handle_encode(ctx->rt) : NULL; }

unsigned weft_ctx_worker(const weft_ctx *ctx) { return ctx ? ctx->worker->index : 0; }

uint64_t weft_ctx_task_id(const weft_ctx *ctx) { return ctx ? ctx->task->id : 0; }

weft_task *weft_ctx_task(const weft_ctx *ctx)
{
    if (!ctx)
        return NULL;
    weft__task *t = ctx->task;
    if (!atomic_load_explicit(&t->handle_live, memory_order_acquire) &&
        !atomic_load_explicit(&t->space_owned, memory_order_acquire))
        return NULL;
    return weft__handle_encode(t);
}

int weft_ctx_hold_over(weft_ctx *ctx)
{
    if (!ctx || !ctx->rt->cfg.on_worker_let_go)
        return 0;
    weft__worker *w = ctx->worker;
    weft__task *t = ctx->task;
    /* Only the outermost body (a nested one returns into its waiter's
     * body), and only while tasks are queued: with none, the worker's next
     * step is most likely to idle, and it would let go only after this
     * task's completion. */
    if (w->current != t || atomic_load_explicit(&w->depth, memory_order_relaxed) != 1 ||
        !weft__task_holdable(t) || t->continued || !weft__sched_any(&ctx->rt->sched))
        return 0;
    w->held = t->body;
    return 1;
}

const weft__task *weft__ctx_data_task(const weft_ctx *ctx)
{
    const weft__task *t = ctx->task;
    return t->cont_of && t->naccess == 0 ? t->cont_of : t;
}

/* Whether task t runs on runtime device dev (one of its GPUs). */
static bool runs_on(const weft_ctx *ctx, const weft__task *t, unsigned dev)
{
    for (unsigned k = 0; t->place && k < t->place->ngpu; k++)
        if (weft__place_gpu(&ctx->rt->placer, t->place, k)->index == dev)
            return true;
    return false;
}

/* The i-th access the body of ctx reaches (weft__ctx_data_task's), and the
 * device it is on (to *dev, if dev): NULL if i is out of range, or if a
 * continuation's access is on a GPU the continuation does not run on. */
static const weft__task_access *body_access(const weft_ctx *ctx, size_t i, unsigned *dev)
{
    if (!ctx)
        return NULL;
    const weft__task *t = weft__ctx_data_task(ctx);
    if (i >= t->naccess || (t->access[i].mode & WEFT__ORDER_ONLY))
        return NULL;
    const weft__task_access *a = &t->access[i];
    unsigned d = weft__task_access_dev(t, a, NULL);
    if (t != ctx->task && d != 0 && !runs_on(ctx, ctx->task, d))
        return NULL;
    if (dev)
        *dev = d;
    return a;
}

void *weft_ctx_data(const weft_ctx *ctx, size_t i)
{
    unsigned dev;
    const weft__task_access *a = body_access(ctx, i, &dev);
    if (!a)
        return NULL;
    if (a->mode & WEFT_REDUCE) /* its private copy */
        return a->part ? a->part->r.ptr : NULL;
    if (a->mode & WEFT_SCRATCH) /* its buffer */
        return a->scratch ? a->scratch->r.ptr : NULL;
    return weft__data_replica(a->data, dev);
}

size_t weft_ctx_bytes(const weft_ctx *ctx, size_t i)
{
    const weft__task_access *a = body_access(ctx, i, NULL);
    if (!a)
        return 0;
    if ((a->mode & WEFT_REDUCE) && a->data->tile) /* its private copy: the interior */
        return a->data->in_rows * a->data->in_bytes;
    return a->data->size;
}

size_t weft_ctx_pitch(const weft_ctx *ctx, size_t i)
{
    unsigned dev;
    const weft__task_access *a = body_access(ctx, i, &dev);
    if (!a)
        return 0;
    if (a->mode & WEFT_REDUCE) /* its private copy: the interior's rows, packed */
        return a->data->in_bytes;
    if (a->mode & WEFT_SCRATCH) /* its buffer: the data's rows, packed */
        return a->data->row_bytes;
    return weft__data_pitch(a->data, dev < a->data->nrep ? dev : 0);
}
