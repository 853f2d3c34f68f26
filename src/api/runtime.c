/*
 * api/runtime.c — configuration, runtime lifecycle, statistics and wait_all
 * (errors and the clock: base.c).
 */
#include "api/runtime.h"
#include "data/reduce.h"
#include "device/vcheck.h"
#include "device/cuda.h"
#include "env.h"
#include "testing.h"
#include "trace.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Calls refused in a callback                                               */
/* ------------------------------------------------------------------------ */

int weft__refuse_in_callback(const char *fn)
{
    if (!weft__in_callback())
        return 0;
    return weft__error(WEFT_EDEADLK, "%s: called from an on_finish callback, which must not wait: it runs on the "
                                     "thread that finishes tasks, which the wait may need (spawn the next task "
                                     "from the callback, look with weft_task_status_get, or wait from the "
                                     "program's own thread)", fn);
}

/* ------------------------------------------------------------------------ */
/* Configuration                                                             */
/* ------------------------------------------------------------------------ */

void weft_config_init(weft_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->workers = 0;
    cfg->trace_path = NULL;
    cfg->trace_max_events = 1u << 20;
    cfg->spin_ns = 200000; /* 200 µs: waking a parked thread costs several µs */
    cfg->max_inflight = 0;
    cfg->max_nesting = 64;
    uint64_t v;
    if (weft__env_uint("WEFT_WORKERS", &v)) /* (0 to 4096: env.c's table) */
        cfg->workers = (unsigned)v;
    const char *trace = getenv("WEFT_TRACE");
    if (trace && *trace)
        cfg->trace_path = trace;
    if (weft__env_uint("WEFT_SPIN_NS", &v))
        cfg->spin_ns = v;
    if (weft__env_uint("WEFT_MAX_INFLIGHT", &v))
        cfg->max_inflight = (size_t)v;
    if (weft__env_uint("WEFT_MAX_NESTING", &v))
        cfg->max_nesting = (unsigned)v;
    if (weft__env_uint("WEFT_STALL_WARN_MS", &v))
        cfg->stall_warn_ms = v;
    const char *devices = getenv("WEFT_DEVICES");
    if (devices && *devices)
        cfg->devices = devices;
    if (weft__env_uint("WEFT_VGPU_MEMORY", &v))
        cfg->vgpu_memory = (size_t)v;
    const char *policy = getenv("WEFT_POLICY");
    if (policy && *policy)
        cfg->policy = policy;
    bool flag;
    if (weft__env_flag("WEFT_BOUND", &flag))
        cfg->bound = flag ? WEFT_BOUND_PRINT : WEFT_BOUND_OFF;
    cfg->pin_workers = WEFT_PIN_AUTO;
    unsigned pin; /* the index in env.c's list: auto, four words for yes, four for no */
    if (weft__env_word("WEFT_PIN_WORKERS", &pin))
        cfg->pin_workers = pin == 0 ? WEFT_PIN_AUTO : pin <= 4 ? WEFT_PIN_ON : WEFT_PIN_OFF;
}

static int add_device(weft__rt *rt, weft__device *dev)
{
    dev->index = rt->ndev;
    rt->dev[rt->ndev++] = dev;
    if (dev->kind == WEFT_DEVICE_VGPU)
        atomic_store_explicit(&rt->yield_idle, true, memory_order_relaxed);
    return 0;
}

/* The CUDA devices the parsed device string asks for: every one found (none
 * is fine for the default), or the listed ordinals, each of which must
 * exist. */
static int add_cuda(weft__rt *rt, const weft__devspec *spec, const char *str)
{
    int found = weft__cuda_count();
    if (spec->cuda_all && !spec->cuda_optional && found == 0)
        return weft__error(WEFT_EINVAL, "weft_runtime_create: devices \"%s\": 'cuda': no CUDA device found%s", str,
                           weft__cuda_compiled() ? " (no GPU or no driver)" : " (this build of Weft has no CUDA support)");
    for (unsigned i = 0; i < spec->ncuda; i++)
        if (spec->cuda[i] >= found)
            return weft__error(WEFT_EINVAL, "weft_runtime_create: devices \"%s\": 'cuda:%d': %d CUDA device%s found%s",
                               str, spec->cuda[i], found, found == 1 ? "" : "s",
                               weft__cuda_compiled() ? "" : " (this build of Weft has no CUDA support)");
    unsigned n = spec->cuda_all ? (unsigned)found : spec->ncuda;
    if (n > WEFT__MAX_DEVICES - rt->ndev)
        n = WEFT__MAX_DEVICES - rt->ndev;
    for (unsigned i = 0; i < n; i++) {
        int ordinal = spec->cuda_all ? (int)i : spec->cuda[i];
        weft__device *dev;
        int rc = weft__cuda_new(&rt->waits, ordinal, &dev);
        if (rc) {
            char why[200];
            snprintf(why, sizeof why, "%s", weft_last_error());
            return weft__error(rc, "weft_runtime_create: could not start CUDA device %d: %s", ordinal, why);
        }
        add_device(rt, dev);
    }
    return 0;
}

/* The devices after the host, as the parsed device string asks: CUDA
 * devices first, then virtual GPUs. */
static int add_devices(weft__rt *rt, const weft__devspec *spec, const char *str)
{
    int rc = add_cuda(rt, spec, str);
    if (rc)
        return rc;
    if (spec->vgpus > WEFT__MAX_DEVICES - rt->ndev)
        return weft__error(WEFT_EINVAL, "weft_runtime_create: devices \"%s\": %u virtual GPUs beside %u other devices: "
                                        "at most %d devices in all", str, spec->vgpus, rt->ndev, WEFT__MAX_DEVICES);
    weft__vgpu_params p;
    weft__vgpu_params_default(&p);
    if (rt->cfg.vgpu_memory)
        p.capacity = rt->cfg.vgpu_memory;
    p.trace = rt->cfg.trace_path != NULL; /* each kernel and copy, on a track per stream */
    for (unsigned i = 0; i < spec->vgpus; i++) {
        char name[32];
        snprintf(name, sizeof name, "vgpu:%u", i);
        weft__device *dev = weft__vgpu_new(&rt->waits, &p, name);
        if (!dev)
            return weft__error(WEFT_ENOMEM, "weft_runtime_create: could not start virtual GPU %u "
                                            "(%zu bytes of address space and a thread each)", i, p.capacity);
        dev->kind = WEFT_DEVICE_VGPU;
        dev->ordinal = (int)i;
        add_device(rt, dev);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                 */
/* ------------------------------------------------------------------------ */

weft__rt *weft__rt_get(const weft_runtime *h, const char *fn, int *err)
{
    if (!h) {
        *err = weft__error(WEFT_EINVAL, "%s: runtime is NULL", fn);
        return NULL;
    }
    weft__rt *rt = weft__handle_decode(h);
    if (!rt || ((weft__slot *)rt)->pool_id != WEFT__POOL_RUNTIME) {
        *err = weft__error(WEFT_ECLOSED, "%s: runtime was destroyed (stale handle)", fn);
        return NULL;
    }
    if (!atomic_load_explicit(&rt->open, memory_order_acquire)) {
        *err = weft__error(WEFT_ECLOSED, "%s: runtime is being destroyed", fn);
        return NULL;
    }
    return rt;
}

weft__rt *weft__rt_enter(const weft_runtime *h, const char *fn, int *err, int64_t counts, bool drain_ok)
{
    weft__rt *rt = weft__rt_get(h, fn, err);
    if (!rt)
        return NULL;
    atomic_fetch_add(&rt->graph.inflight, counts);
    /* Re-check after counting ourselves: a destroy that closed the runtime
     * before it saw our count has not waited for us (and the slot may even
     * have been reused by another runtime).  While destroy drains, only the
     * runtime's own tasks may still spawn (their children finish the work). */
    if (weft__handle_decode(h) != rt || !atomic_load(&rt->open) ||
        (atomic_load(&rt->closing) && !drain_ok && !weft__on_own_worker(rt))) {
        weft__rt_leave(rt, counts);
        *err = weft__error(WEFT_ECLOSED, "%s: runtime was destroyed", fn);
        return NULL;
    }
    return rt;
}

/* The placer over rt's devices under policy (NULL: the default, "dmda"
 * when there are GPUs, else "load"), and the policy's models if it keeps
 * any (read from this machine's file).  0 or an error, reported. */
static int start_placer(weft__rt *rt, const weft__policy *policy)
{
    if (!policy)
        policy = weft__policy_find(rt->ndev > 1 ? "dmda" : "load");
    int rc = weft__placer_init(&rt->placer, rt->dev, rt->ndev, policy);
    if (rc != 0)
        return weft__error(rc, "weft_runtime_create: could not create the GPUs' streams");
    rt->placer.cpu_slots = rt->nworkers;
    rt->placer_ready = true;
    if (policy->eft) {
        char path[1024];
        if (weft__pm_open(&rt->models, weft__pm_path(path, sizeof path) ? path : NULL) != 0)
            return weft__error(WEFT_ENOMEM, "weft_runtime_create: out of memory");
        rt->models_ready = true;
        weft__placer_models(&rt->placer, &rt->models);
    }
    rt->graph.placer = &rt->placer;
    rt->cfg.policy = policy->name;
    return 0;
}

/* What rt records of its run beside the work: the trace's path (copied)
 * and the task graph for the makespan's bound (weft_config.bound).  0 or
 * WEFT_ENOMEM (the caller reports it). */
static int start_records(weft__rt *rt, const weft_config *cfg)
{
    if (cfg->trace_path) {
        if (!(rt->trace_path = weft__strdup(cfg->trace_path)))
            return WEFT_ENOMEM;
        rt->cfg.trace_path = rt->trace_path;
    }
    if (cfg->bound && !(rt->graph.blog = weft__bound_log_new()))
        return WEFT_ENOMEM;
    return 0;
}

static void rt_free(weft__rt *rt)
{
    weft__trace_free(rt->tracer);
    rt->tracer = NULL;
    weft__autopin_fini(rt);
    if (rt->workers)
        weft__wait_frames_fini(rt);
    weft__free(rt->workers);
    rt->workers = NULL;
    if (rt->sched.q)
        weft__sched_fini(&rt->sched);
    if (rt->placer_ready)
        weft__placer_fini(&rt->placer);
    rt->placer_ready = false;
    if (rt->models_ready) /* (written back to its file here) */
        weft__pm_close(&rt->models);
    rt->models_ready = false;
    for (unsigned i = 0; i < WEFT__MAX_DEVICES; i++) /* their copy queues, before the devices stop */
        weft__mnode_fini(&rt->mnodes[i]);
    for (unsigned i = rt->ndev; i-- > 0;)
        weft__device_delete(rt->dev[i]);
    rt->ndev = 0;
    weft__reduction_free_all(rt->reductions); /* (after the data: unregister combines with them) */
    rt->reductions = NULL;
    weft__free(rt->trace_path);
    weft__bound_log_free(rt->graph.blog);
    rt->graph.blog = NULL;
    pthread_mutex_destroy(&rt->data_lock);
    weft__ranges_fini(&rt->ranges);
    weft__slot_free(rt);
}

int weft_runtime_create(const weft_config *cfg_in, weft_runtime **out)
{
    weft__clear_error();
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_runtime_create: out is NULL");
    int rc = weft__env_check("weft_runtime_create");
    if (rc != 0)
        return rc;
    weft_config cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        weft_config_init(&cfg);
    unsigned n = cfg.workers;
    if (n == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        n = cores > 0 ? (unsigned)cores : 1;
    }
    if (n > 4096)
        return weft__error(WEFT_EINVAL, "weft_runtime_create: %u workers is more than 4096", n);
    weft__devspec spec;
    char why[160];
    if (weft__devspec_parse(cfg.devices, &spec, why, sizeof why) != 0)
        return weft__error(WEFT_EINVAL, "weft_runtime_create: devices \"%s\": %s", cfg.devices, why);
    const weft__policy *policy = weft__policy_find(cfg.policy);
    if (!policy)
        return weft__error(WEFT_EINVAL,
                           "weft_runtime_create: unknown policy \"%s\" (\"dmda\", \"load\", \"balance\" or "
                           "\"round-robin\")",
                           cfg.policy);
    if (cfg.bound > WEFT_BOUND_PRINT)
        return weft__error(WEFT_EINVAL, "weft_runtime_create: weft_config.bound is %u (WEFT_BOUND_OFF, "
                                        "WEFT_BOUND_RECORD or WEFT_BOUND_PRINT)", cfg.bound);
    if (cfg.pin_workers > WEFT_PIN_AUTO)
        return weft__error(WEFT_EINVAL, "weft_runtime_create: weft_config.pin_workers is %u (WEFT_PIN_OFF: "
                                        "leave the workers to the OS, WEFT_PIN_ON: pin each to one CPU, "
                                        "WEFT_PIN_AUTO: pin them when the OS packs them on one CPU)",
                           cfg.pin_workers);

    weft__rt *rt = weft__slot_alloc(WEFT__POOL_RUNTIME, sizeof(weft__rt));
    if (!rt)
        return weft__error(WEFT_ENOMEM, "weft_runtime_create: out of memory");
    /* Runtime slots are not zeroed by the pool: see weft__rt.waits. */
    if (!rt->sync_ready) {
        weft__waitset_init(&rt->waits);
        rt->sync_ready = true;
    }
    size_t from = offsetof(weft__rt, open);
    memset((char *)rt + from, 0, sizeof *rt - from);
    rt->cfg = cfg;
    if (rt->cfg.max_nesting == 0)
        rt->cfg.max_nesting = 64;
    if (rt->cfg.stall_warn_ms == 0)
        rt->cfg.stall_warn_ms = 5000;
    rt->nworkers = n;
    rt->max_inflight = cfg.max_inflight ? cfg.max_inflight : (size_t)65536 * n;
    /* Backpressure resumes a quarter below the limit, so a producer sleeps
     * and wakes once per batch rather than once per task. */
    int64_t low = (int64_t)(rt->max_inflight - rt->max_inflight / 4) - 1;
    pthread_mutex_init(&rt->data_lock, NULL);
    weft__ranges_init(&rt->ranges);
    for (unsigned i = 0; i < WEFT__MAX_DEVICES; i++)
        weft__mnode_init(&rt->mnodes[i]);
    uint64_t t0 = weft__now_ns(); /* the trace's time origin: before any device's clock starts */
    weft__graph_init(&rt->graph, &rt->sched, &rt->waits, low < 0 ? 0 : low);

    if (weft__sched_init(&rt->sched, n, &rt->waits) != 0) {
        rt_free(rt);
        return weft__error(WEFT_ENOMEM, "weft_runtime_create: out of memory");
    }
    rt->dev[0] = weft__host_device_new(&rt->waits);
    if (!rt->dev[0]) {
        rt_free(rt);
        return weft__error(WEFT_ENOMEM, "weft_runtime_create: out of memory");
    }
    rt->ndev = 1;
    rt->cpu_tasks = spec.cpu;
    rt->cfg.devices = NULL; /* read here only */
    int drc = add_devices(rt, &spec, cfg.devices ? cfg.devices : "");
    if (drc != 0) {
        rt_free(rt);
        return drc;
    }
    drc = start_placer(rt, cfg.policy && *cfg.policy ? policy : NULL);
    if (drc != 0) {
        rt_free(rt);
        return drc;
    }
    if (start_records(rt, &cfg) != 0) {
        rt_free(rt);
        return weft__error(WEFT_ENOMEM, "weft_runtime_create: out of memory");
    }
    rt->graph.check_data = weft__vcheck_wanted(); /* the checking mode (WEFT_VGPU_CHECK) */
    bool prefetch = true; /* the prefetch queues: on unless WEFT_PREFETCH=0 */
    rt->graph.no_prefetch = weft__env_flag("WEFT_PREFETCH", &prefetch) && !prefetch;
    /* Workers are cache-line aligned so their counters do not share lines. */
    size_t bytes = sizeof(weft__worker) * n;
    rt->workers = weft__alloc_aligned(WEFT__CACHELINE, bytes);
    if (!rt->workers) {
        rt_free(rt);
        return weft__error(WEFT_ENOMEM, "weft_runtime_create: out of memory");
    }
    memset(rt->workers, 0, bytes);
    for (unsigned i = 0; i < n; i++) {
        weft__worker *w = &rt->workers[i];
        w->rt = rt;
        w->index = i;
        w->q = &rt->sched.q[i];
        w->stats.owner = &rt->graph;
    }
    if (rt->trace_path && !(rt->tracer = weft__trace_new(rt, t0))) {
        rt_free(rt);
        return weft__error(WEFT_ENOMEM, "weft_runtime_create: out of memory");
    }
    atomic_store(&rt->open, true);
    rc = weft__workers_start(rt);
    if (rc != 0) {
        atomic_store(&rt->open, false);
        rt_free(rt);
        return rc;
    }
    *out = weft__handle_encode(rt);
    return 0;
}

int weft_runtime_destroy(weft_runtime *h)
{
    weft__clear_error();
    if (!h)
        return 0;
    int err;
    weft__rt *rt = weft__rt_get(h, "weft_runtime_destroy", &err);
    if (!rt)
        return err;
    if ((err = weft__refuse_in_callback("weft_runtime_destroy")) != 0)
        return err;
    if (weft__on_own_worker(rt))
        return weft__error(WEFT_EDEADLK, "weft_runtime_destroy: called from one of the runtime's own tasks");
    /* Refuse spawns from outside; let outstanding tasks (and what they
     * spawn) run until nothing is left but tasks waiting for task-space keys
     * nobody spawned (only running bodies could still spawn them); destroy
     * the spaces, which cancels those; let the rest finish; then refuse
     * every call and drain what raced with it. */
    atomic_store(&rt->closing, true);
    weft__acquired_release_all(rt); /* (they would hold what follows them forever) */
    weft__wait_settled(rt, UINT64_MAX);
    char unspawned[32];
    size_t nunspawned = weft__spaces_close_all(rt, unspawned);
    int rc = weft_wait_all(h);
    atomic_store(&rt->open, false);
    weft__wait_idle(rt, UINT64_MAX);
    if (rt->cfg.bound == WEFT_BOUND_PRINT)
        weft__bound_print(rt);
    if (atomic_exchange(&rt->graph.failures, 0) > 0)
        rc = WEFT_ETASKFAILED;
    weft__workers_stop(rt);
    if (rt->tracer && weft__trace_write(rt->tracer) != 0 && rc == 0)
        rc = weft__error(WEFT_ESYSTEM, "weft_runtime_destroy: could not write trace to %s", rt->trace_path);
    /* Unregister what is left (no task is in flight, no call either). */
    weft__data *d = rt->data_list;
    rt->data_list = NULL;
    while (d) {
        weft__data *next = d->list_next;
        weft__ranges_remove(d);
        weft__history_free(d->hist);
        weft__data_free(d);
        d = next;
    }
    rt_free(rt);
    if (rc == WEFT_ETASKFAILED)
        return weft__error(rc, "weft_runtime_destroy: a task failed since the last wait_all");
    if (rc == 0 && nunspawned)
        return weft__error(WEFT_ECANCELLED, "weft_runtime_destroy: tasks waited for task-space key%s nobody "
                           "spawned (%s%s): they were cancelled (spawn the keys, or weft_space_destroy the "
                           "space first to cancel them on purpose)", nunspawned > 1 ? "s" : "", unspawned,
                           nunspawned > 1 ? " and others" : "");
    return rc;
}

unsigned weft_runtime_workers(const weft_runtime *h)
{
    int err;
    weft__rt *rt = weft__rt_get(h, "weft_runtime_workers", &err);
    return rt ? rt->nworkers : 0;
}

int weft_runtime_stats(weft_runtime *h, weft_stats *out)
{
    int err;
    weft__rt *rt = weft__rt_get(h, "weft_runtime_stats", &err);
    if (!rt)
        return err;
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_runtime_stats: out is NULL");
    weft_stats s;
    memset(&s, 0, sizeof s);
    uint64_t now = weft__now_ns();
    for (unsigned i = 0; i < rt->nworkers; i++) {
        weft__worker *w = &rt->workers[i];
        s.tasks_run += atomic_load_explicit(&w->stats.n_run, memory_order_relaxed);
        s.tasks_failed += atomic_load_explicit(&w->stats.n_failed, memory_order_relaxed);
        s.tasks_cancelled += atomic_load_explicit(&w->stats.n_cancelled, memory_order_relaxed);
        s.steals += atomic_load_explicit(&w->q->n_steals, memory_order_relaxed);
        s.parks += atomic_load_explicit(&w->q->n_parks, memory_order_relaxed);
        s.idle_ns += atomic_load_explicit(&w->idle_ns, memory_order_relaxed);
        uint64_t since = atomic_load_explicit(&w->idle_since, memory_order_relaxed);
        if (since && now > since)
            s.idle_ns += now - since; /* the idle period still going on */
    }
    s.trace_dropped = weft__trace_dropped(rt->tracer);
    s.tasks_failed += atomic_load(&rt->graph.ext.n_failed);
    s.tasks_cancelled += atomic_load(&rt->graph.ext.n_cancelled);
    s.tasks_spawned = atomic_load(&rt->graph.next_id) - 1; /* ids are handed out in spawn order from 1 */
    int64_t inflight = atomic_load(&rt->graph.inflight);
    s.inflight = inflight > 0 ? (uint64_t)inflight : 0;
    s.inflight_peak = (uint64_t)atomic_load(&rt->graph.inflight_peak);
    s.bytes_per_task = weft__slot_size(WEFT__POOL_TASK) +
                       (s.tasks_spawned ? atomic_load(&rt->graph.extra_bytes) / s.tasks_spawned : 0);
    s.workers = rt->nworkers;
    s.waits = atomic_load(&rt->waits.n_waits);
    s.wait_sleeps = atomic_load(&rt->waits.n_sleeps);
    s.wait_wakeups_event = atomic_load(&rt->waits.n_wake_event);
    s.wait_wakeups_timer = atomic_load(&rt->waits.n_wake_timer);
    s.bytes_copied = atomic_load(&rt->copied.bytes);
    s.bytes_prefetched = atomic_load(&rt->copied.prefetched);
    s.autopins = atomic_load(&rt->autopin.pins);
    if (rt->placer_ready) {
        pthread_mutex_lock(&rt->placer.lock);
        s.model_hits = rt->placer.pm_hits;
        s.model_fits = rt->placer.pm_fits;
        s.model_calibrating = rt->placer.pm_calibrating;
        s.model_mispredicted = rt->placer.pm_mispredicted;
        pthread_mutex_unlock(&rt->placer.lock);
    }
    *out = s;
    return 0;
}

int weft__test_workers_affinity(weft_runtime *h, const int *cpus, int n)
{
    int err;
    weft__rt *rt = weft__rt_get(h, "weft__test_workers_affinity", &err);
    if (!rt || n <= 0)
        return -1;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++)
        CPU_SET(cpus[i], &set);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        int e = pthread_setaffinity_np(rt->workers[i].thread, sizeof set, &set);
        if (e != 0)
            return e;
    }
    return 0;
}

int weft__test_worker_cpus(weft_runtime *h, unsigned worker, int *cpus, int max)
{
    int err;
    weft__rt *rt = weft__rt_get(h, "weft__test_worker_cpus", &err);
    cpu_set_t set;
    if (!rt || worker >= rt->nworkers || pthread_getaffinity_np(rt->workers[worker].thread, sizeof set, &set) != 0)
        return -1;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            if (n < max)
                cpus[n] = c;
            n++;
        }
    return n;
}

/* ------------------------------------------------------------------------ */
/* Runtime-wide waits                                                        */
/* ------------------------------------------------------------------------ */

int weft_wait_all_timed(weft_runtime *h, uint64_t timeout_ns)
{
    weft__clear_error();
    int err;
    weft__rt *rt = weft__rt_get(h, "weft_wait_all", &err);
    if (!rt)
        return err;
    if ((err = weft__refuse_in_callback("weft_wait_all")) != 0)
        return err;
    if (weft__on_own_worker(rt))
        return weft__error(WEFT_EDEADLK, "weft_wait_all: called from inside one of the runtime's tasks, "
                                         "which would wait for itself");
    if (weft__wait_idle(rt, weft__deadline(timeout_ns)) != 0)
        return weft__error(WEFT_ETIMEDOUT, "weft_wait_all: timed out with %lld tasks in flight",
                           (long long)atomic_load(&rt->graph.inflight));
    if (atomic_exchange(&rt->graph.failures, 0) > 0)
        return weft__error(WEFT_ETASKFAILED, "weft_wait_all: at least one task failed");
    return 0;
}

int weft_wait_all(weft_runtime *h) { return weft_wait_all_timed(h, UINT64_MAX); }

size_t weft_runtime_stalled(weft_runtime *h, char key[32])
{
    int err;
    if (!key)
        return 0;
    weft__rt *rt = weft__rt_enter(h, "weft_runtime_stalled", &err, 1, true); /* (destroy waits for it) */
    if (!rt)
        return 0;
    size_t n = weft__stalled_keys(rt, key);
    weft__rt_leave(rt, 1);
    return n;
}

size_t weft_runtime_deadlocked(weft_runtime *h, char *what, size_t len)
{
    int err;
    if (!what || len == 0)
        return 0;
    weft__rt *rt = weft__rt_enter(h, "weft_runtime_deadlocked", &err, 1, true); /* (destroy waits for it) */
    if (!rt)
        return 0;
    size_t n = weft__deadlocked(rt, what, len);
    weft__rt_leave(rt, 1);
    return n;
}

int weft_wait_settled_timed(weft_runtime *h, uint64_t timeout_ns)
{
    weft__clear_error();
    int err;
    weft__rt *rt = weft__rt_get(h, "weft_wait_settled", &err);
    if (!rt)
        return err;
    if ((err = weft__refuse_in_callback("weft_wait_settled")) != 0)
        return err;
    if (weft__on_own_worker(rt))
        return weft__error(WEFT_EDEADLK, "weft_wait_settled: called from inside one of the runtime's tasks, "
                                         "which would wait for itself");
    if (weft__wait_settled(rt, weft__deadline(timeout_ns)) != 0)
        return weft__error(WEFT_ETIMEDOUT, "weft_wait_settled: timed out with %lld tasks in flight",
                           (long long)atomic_load(&rt->graph.inflight));
    return 0;
}

int weft_cancel_pending(weft_runtime *h)
{
    int err;
    weft__rt *rt = weft__rt_get(h, "weft_cancel_pending", &err);
    if (!rt)
        return err;
    atomic_fetch_add(&rt->graph.cancel_epoch, 1);
    return 0;
}
