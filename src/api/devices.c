/*
 * api/devices.c — the runtime's device table: what the public API tells
 * about it, work a body queues on a device (the ENQUEUED stage), and the
 * test device's hooks (src/testing.h).  Placement (devices issue) goes here.
 */
#include "api/runtime.h"
#include "data/scratch.h"
#include "device/cuda.h"
#include "device/vcheck.h"
#include "testing.h"

#include <stdio.h>
#include <string.h>

unsigned weft_device_count(weft_runtime *h)
{
    int err;
    weft__rt *rt = weft__rt_get(h, "weft_device_count", &err);
    if (!rt)
        return 0;
    pthread_mutex_lock(&rt->data_lock);
    unsigned n = rt->ndev;
    pthread_mutex_unlock(&rt->data_lock);
    return n;
}

int weft_device_info_get(weft_runtime *h, unsigned i, weft_device_info *out)
{
    weft__clear_error();
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_device_info_get: out is NULL");
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft_device_info_get", &err, 1, true);
    if (!rt)
        return err;
    int rc = 0;
    pthread_mutex_lock(&rt->data_lock);
    if (i >= rt->ndev) {
        rc = weft__error(WEFT_EINVAL, "weft_device_info_get: device %u of %u", i, rt->ndev);
    } else {
        const weft__device *d = rt->dev[i];
        memset(out, 0, sizeof *out);
        out->kind = d->kind;
        out->index = i;
        out->ordinal = d->ordinal;
        snprintf(out->name, sizeof out->name, "%s", d->name);
        out->memory = d->capacity;
        out->memory_used = atomic_load(&d->used);
        out->cpu_tasks = i == 0 && rt->cpu_tasks;
    }
    pthread_mutex_unlock(&rt->data_lock);
    weft__rt_leave(rt, 1);
    return rc;
}

/* A GPU of rt by index (under data_lock), or NULL with the error reported. */
static weft__device *gpu_at(weft__rt *rt, unsigned i, const char *fn)
{
    pthread_mutex_lock(&rt->data_lock);
    weft__device *d = i > 0 && i < rt->ndev ? rt->dev[i] : NULL;
    unsigned n = rt->ndev;
    pthread_mutex_unlock(&rt->data_lock);
    if (!d)
        weft__error(WEFT_EINVAL, "%s: device %u is not a GPU (GPUs are 1 .. %u)", fn, i, n - 1);
    return d;
}

int weft_device_alloc(weft_runtime *h, unsigned i, size_t n, void **out)
{
    weft__clear_error();
    if (!out || !n)
        return weft__error(WEFT_EINVAL, "weft_device_alloc: %s", !out ? "out is NULL" : "size is zero");
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft_device_alloc", &err, 1, true);
    if (!rt)
        return err;
    weft__device *d = gpu_at(rt, i, "weft_device_alloc");
    int rc = d ? d->ops->mem_alloc(d, n, out) : WEFT_EINVAL;
    if (d && rc != 0)
        rc = weft__error(rc, "weft_device_alloc: %zu bytes on %s (%s)", n, d->name, weft_strerror(rc));
    weft__rt_leave(rt, 1);
    return rc;
}

int weft_device_free(weft_runtime *h, unsigned i, void *p, size_t n)
{
    weft__clear_error();
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft_device_free", &err, 1, true);
    if (!rt)
        return err;
    weft__device *d = gpu_at(rt, i, "weft_device_free");
    if (d && p)
        d->ops->mem_free(d, p, n);
    weft__rt_leave(rt, 1);
    return d ? 0 : WEFT_EINVAL;
}

/* ---- placements ---------------------------------------------------------- */

void weft_placement_init(weft_placement *p)
{
    if (!p)
        return;
    memset(p, 0, sizeof *p);
    p->gpus = 1;
    p->gpu = -1;
}

int weft_placement_parse(const char *s, weft_placement *p)
{
    weft__clear_error();
    if (!s || !p)
        return weft__error(WEFT_EINVAL, "weft_placement_parse: %s is NULL", s ? "p" : "s");
    weft_placement_init(p);
    char why[160];
    if (weft__placement_parse(s, p, why, sizeof why) != 0)
        return weft__error(WEFT_EINVAL, "weft_placement_parse: %s", why);
    return 0;
}

/* ---- placement seen from a body ---------------------------------------- */

unsigned weft_ctx_variant(const weft_ctx *ctx)
{
    const weft__place *pl = ctx ? ctx->task->place : NULL;
    return pl && pl->chosen > 0 ? (unsigned)pl->chosen : 0;
}

unsigned weft_ctx_gpu_count(const weft_ctx *ctx)
{
    const weft__place *pl = ctx ? ctx->task->place : NULL;
    return pl ? pl->ngpu : 0;
}

int weft_ctx_gpu(const weft_ctx *ctx, unsigned i)
{
    if (i >= weft_ctx_gpu_count(ctx))
        return -1;
    return ctx->rt->placer.dev_index[ctx->task->place->gpu[i]];
}

void *weft_ctx_stream(const weft_ctx *ctx, unsigned i)
{
    if (i >= weft_ctx_gpu_count(ctx))
        return NULL;
    weft__dqueue *q = ctx->task->place->queue[i];
    weft__device *dev = ctx->rt->placer.gpu[ctx->task->place->gpu[i]];
    return dev->ops->native_queue ? dev->ops->native_queue(q) : (void *)q;
}

int weft_ctx_queue(const weft_ctx *ctx, unsigned i, int (*fn)(void *arg), void *arg, uint64_t model_ns)
{
    weft__clear_error();
    if (!ctx || !fn)
        return weft__error(WEFT_EINVAL, "weft_ctx_queue: %s is NULL", ctx ? "fn" : "ctx");
    if (i >= weft_ctx_gpu_count(ctx))
        return weft__error(WEFT_EINVAL, "weft_ctx_queue: GPU %u of a task with %u", i, weft_ctx_gpu_count(ctx));
    weft__dqueue *q = ctx->task->place->queue[i];
    weft__device *dev = ctx->rt->placer.gpu[ctx->task->place->gpu[i]];
    weft__launch k = {fn, arg, model_ns, NULL, 0, weft__task_op_failed, ctx->task, weft__task_skip_work,
                      i == 0 ? &ctx->task->place->ran_ns : NULL};
    int rc = dev->ops->launch(q, &k);
    return rc ? weft__error(rc, "weft_ctx_queue: could not queue on %s (%s)", dev->name, weft_strerror(rc)) : 0;
}

/* Whether [p, p + n) lies in one of task t's scratch buffers (WEFT_SCRATCH)
 * on device dev: its own memory, to read and write as it likes. */
static bool in_own_scratch(const weft__task *t, unsigned dev, const void *p, size_t n)
{
    uintptr_t lo = (uintptr_t)p, hi = lo + n;
    for (uint32_t a = 0; a < t->naccess; a++) {
        const weft__scratch *s = weft__access_scratch(&t->access[a]);
        uintptr_t slo = s ? (uintptr_t)s->r.ptr : 0;
        if (s && s->dev == dev && lo >= slo && hi <= slo + t->access[a].data->size)
            return true;
    }
    return false;
}

int weft_ctx_queue_rw(const weft_ctx *ctx, unsigned i, int (*fn)(void *arg), void *arg, uint64_t model_ns,
                      const weft_range *ranges, size_t n)
{
    weft__clear_error();
    if (!ctx || !fn)
        return weft__error(WEFT_EINVAL, "weft_ctx_queue_rw: %s is NULL", ctx ? "fn" : "ctx");
    if (i >= weft_ctx_gpu_count(ctx))
        return weft__error(WEFT_EINVAL, "weft_ctx_queue_rw: GPU %u of a task with %u", i, weft_ctx_gpu_count(ctx));
    if (n && !ranges)
        return weft__error(WEFT_EINVAL, "weft_ctx_queue_rw: n is %zu but ranges is NULL", n);
    for (size_t k = 0; k < n; k++)
        if ((ranges[k].bytes && !ranges[k].ptr) || !(ranges[k].mode & WEFT_RW) || (ranges[k].mode & ~(unsigned)WEFT_RW))
            return weft__error(WEFT_EINVAL, "weft_ctx_queue_rw: range %zu (NULL pointer, or mode 0x%x is not "
                                            "WEFT_R, WEFT_W or WEFT_RW)", k, ranges[k].mode);
    weft__dqueue *q = ctx->task->place->queue[i];
    weft__device *dev = ctx->rt->placer.gpu[ctx->task->place->gpu[i]];
    weft_range *sealed = NULL; /* (the checking mode: ranges in data the task only reads, marked) */
    if (ctx->rt->graph.check_data && n) {
        if (!(sealed = weft__alloc(n * sizeof *sealed)))
            return weft__error(WEFT_ENOMEM, "weft_ctx_queue_rw: out of memory");
        memcpy(sealed, ranges, n * sizeof *sealed);
    }
    if (ctx->rt->graph.check_data) { /* the checking mode: its ranges in its own data there */
        for (size_t r = 0; r < n; r++) {
            if (ranges[r].bytes &&
                in_own_scratch(weft__ctx_data_task(ctx), dev->index, ranges[r].ptr, ranges[r].bytes))
                continue;
            const weft__data *d = ranges[r].bytes ? weft__data_at_address(&ctx->rt->mnodes[dev->index],
                                                                         ranges[r].ptr, ranges[r].bytes)
                                                  : NULL;
            if (!d)
                continue;
            unsigned modes = 0; /* how the task accesses d (WEFT_R, WEFT_W) */
            bool reduces = false;
            const weft__task *owner = weft__ctx_data_task(ctx);
            for (uint32_t a = 0; a < owner->naccess; a++)
                if (owner->access[a].data == d && !(owner->access[a].mode & WEFT__ORDER_ONLY)) {
                    modes |= owner->access[a].mode & WEFT_RW;
                    reduces |= (owner->access[a].mode & WEFT_REDUCE) != 0;
                }
            char why[360];
            why[0] = '\0';
            if (!modes && !reduces)
                snprintf(why, sizeof why,
                         "weft_ctx_queue_rw: range %zu [%p, +%zu) lies in the replica of data d%u on %s, which this "
                         "task does not access (a pointer kept from an earlier task, or a missing access)",
                         r, ranges[r].ptr, ranges[r].bytes, d->id, dev->name);
            else if (modes && (ranges[r].mode & ~modes & WEFT_R))
                snprintf(why, sizeof why,
                         "weft_ctx_queue_rw: range %zu [%p, +%zu) is read, but the task accesses data d%u WEFT_W "
                         "only: its replica on %s holds no value for it (access it WEFT_RW to read it)",
                         r, ranges[r].ptr, ranges[r].bytes, d->id, dev->name);
            else if (modes && (ranges[r].mode & ~modes & WEFT_W))
                snprintf(why, sizeof why,
                         "weft_ctx_queue_rw: range %zu [%p, +%zu) is written, but the task accesses data d%u WEFT_R "
                         "only: its replicas would disagree (access it WEFT_RW to write it)",
                         r, ranges[r].ptr, ranges[r].bytes, d->id);
            if (why[0]) {
                weft__vcheck_report(why);
                weft__free(sealed);
                return weft__error(WEFT_EINVAL, "%s", why);
            }
            if (modes == WEFT_R && !reduces)
                sealed[r].mode |= WEFT__VCHECK_SEALED;
        }
    }
    weft__launch k = {fn,   arg, model_ns, sealed ? sealed : ranges, n, weft__task_op_failed, ctx->task,
                      weft__task_skip_work, i == 0 ? &ctx->task->place->ran_ns : NULL};
    int rc = dev->ops->launch(q, &k);
    weft__free(sealed); /* (launch copies the ranges) */
    return rc ? weft__error(rc, "weft_ctx_queue_rw: could not queue on %s (%s)", dev->name, weft_strerror(rc)) : 0;
}

/* weft_ctx_sync: the reports of the task's streams, counted. */
typedef struct stream_sync {
    weft__rt *rt;
    weft__task *task;
    unsigned want;
    _Atomic unsigned reported;
} stream_sync;

static bool streams_reported(const void *arg)
{
    const stream_sync *s = arg;
    return atomic_load(&((stream_sync *)s)->reported) == s->want;
}

/* A stream's report: the error of its work since the last report (a copy's,
 * which no kernel's on_error took) is the task's, as its completion report
 * would have made it. */
static void stream_reported(void *cookie, int status)
{
    stream_sync *s = cookie;
    weft__rt *rt = s->rt;
    if (status != 0)
        weft__task_op_failed(s->task, status);
    atomic_fetch_add(&s->reported, 1);
    /* s (the body's) may be gone from here: the wake names it, no more
     * (at worst a spurious wake of a later wait at the same address). */
    weft__wake(&rt->waits, s);
}

int weft_ctx_sync(const weft_ctx *ctx)
{
    weft__clear_error();
    if (!ctx)
        return weft__error(WEFT_EINVAL, "weft_ctx_sync: ctx is NULL");
    weft__task *t = ctx->task;
    if (weft__tls_worker != ctx->worker || ctx->worker->current != t)
        return weft__error(WEFT_EINVAL, "weft_ctx_sync: called outside the body of task %llu '%s'",
                           (unsigned long long)t->id, t->name);
    int result = 0;
    weft__task_guard_sync(t, ctx->guard, &result); /* (the checking mode: before, the host was not the body's) */
    unsigned n = weft_ctx_gpu_count(ctx);
    stream_sync s = {ctx->rt, t, n, 0};
    for (unsigned i = 0; i < n; i++) {
        weft__device *dev = ctx->rt->placer.gpu[t->place->gpu[i]];
        int rc = dev->ops->notify(t->place->queue[i], stream_reported, &s);
        if (rc != 0) {
            weft__task_op_failed(t, rc);
            s.want = i; /* (wait for those queued) */
            if (result == 0)
                result = rc;
            break;
        }
    }
    weft__wait_cond(ctx->rt, &s, streams_reported, &s, NULL);
    if (result == 0 && atomic_load(&t->op_error) != 0)
        result = atomic_load(&t->op_error);
    if (result != 0)
        return weft__error(result == WEFT_EDEVICE ? WEFT_EDEVICE : result,
                           "weft_ctx_sync: the work of task %llu '%s' on its GPUs failed (%s); the task fails",
                           (unsigned long long)t->id, t->name, weft_strerror(result));
    return 0;
}

int weft_ctx_copy(const weft_ctx *ctx, unsigned i, void *dst, const void *src, size_t n)
{
    weft__clear_error();
    if (!ctx || !dst || !src)
        return weft__error(WEFT_EINVAL, "weft_ctx_copy: %s is NULL", !ctx ? "ctx" : !dst ? "dst" : "src");
    if (i >= weft_ctx_gpu_count(ctx))
        return weft__error(WEFT_EINVAL, "weft_ctx_copy: GPU %u of a task with %u", i, weft_ctx_gpu_count(ctx));
    weft__dqueue *q = ctx->task->place->queue[i];
    weft__device *dev = ctx->rt->placer.gpu[ctx->task->place->gpu[i]];
    ctx->task->body_copied = true;
    int rc = dev->ops->copy(q, dst, src, n);
    return rc ? weft__error(rc, "weft_ctx_copy: could not queue on %s (%s)", dev->name, weft_strerror(rc)) : 0;
}

int weft__test_device_add(weft_runtime *h, uint64_t delay_ns, size_t capacity, unsigned *index)
{
    weft__clear_error();
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft__test_device_add", &err, 1, false);
    if (!rt)
        return err;
    int rc = 0;
    pthread_mutex_lock(&rt->data_lock);
    if (rt->ndev == sizeof rt->dev / sizeof rt->dev[0]) {
        rc = weft__error(WEFT_EINVAL, "weft__test_device_add: too many devices");
    } else {
        weft__device *dev = weft__test_device_new(&rt->waits, delay_ns, capacity);
        if (!dev) {
            rc = weft__error(WEFT_ENOMEM, "weft__test_device_add: could not start the device");
        } else {
            dev->ordinal = (int)rt->ndev;
            dev->index = rt->ndev;
            rt->dev[rt->ndev] = dev;
            if (index)
                *index = rt->ndev;
            rt->ndev++;
        }
    }
    pthread_mutex_unlock(&rt->data_lock);
    weft__rt_leave(rt, 1);
    return rc;
}

/* Queue fn on dev's default queue for the task of ctx, and a completion
 * report after it: the task stays ENQUEUED until the report came. */
static int launch(weft_ctx *ctx, weft__device *dev, weft__kernel_fn fn, void *arg, uint64_t model_ns)
{
    weft__task *t = ctx->task;
    int rc = weft__device_launch(dev->ops, dev->default_queue, fn, arg, model_ns);
    if (rc != 0)
        return rc;
    weft__task_op_begin(t);
    rc = dev->ops->notify(dev->default_queue, weft__task_op_done, t);
    if (rc != 0)
        weft__task_op_done(t, rc); /* the kernel runs, but the task no longer waits for it */
    return rc;
}

int weft__test_launch(weft_ctx *ctx, unsigned device, int (*fn)(void *), void *arg, uint64_t model_ns)
{
    if (!ctx || !fn || device >= ctx->rt->ndev)
        return weft__error(WEFT_EINVAL, "weft__test_launch: bad context, function or device");
    int rc = launch(ctx, ctx->rt->dev[device], fn, arg, model_ns);
    return rc ? weft__error(rc, "weft__test_launch: could not queue the work") : 0;
}

void *weft__test_native_queue(weft_ctx *ctx, unsigned device)
{
    if (!ctx || device >= ctx->rt->ndev)
        return NULL;
    weft__device *dev = ctx->rt->dev[device];
    return dev->ops->native_queue ? dev->ops->native_queue(dev->default_queue) : NULL;
}

int weft__test_enqueued(weft_ctx *ctx, unsigned device)
{
    if (!ctx || device >= ctx->rt->ndev)
        return weft__error(WEFT_EINVAL, "weft__test_enqueued: bad context or device");
    weft__device *dev = ctx->rt->dev[device];
    weft__task *t = ctx->task;
    weft__task_op_begin(t);
    int rc = dev->ops->notify(dev->default_queue, weft__task_op_done, t);
    if (rc != 0)
        weft__task_op_done(t, rc);
    return rc;
}

size_t weft__test_device_used(weft_runtime *h, unsigned device)
{
    int err;
    weft__rt *rt = weft__rt_get(h, "weft__test_device_used", &err);
    return rt && device < rt->ndev ? atomic_load(&rt->dev[device]->used) : 0;
}

int weft__test_cuda_count(void) { return weft__cuda_count(); }

void weft__test_vcheck_last(char *buf, size_t len) { weft__vcheck_last(buf, len); }
void weft__test_vcheck_clear(void) { weft__vcheck_clear(); }

int weft__test_cuda_compiled(void) { return weft__cuda_compiled(); }
