/*
 * sched/place.c — placement of tasks on device sets (sched/place.h): the
 * checks at spawn, the mapping policies, reservations of compute shares and
 * memory, streams handed out in turn, and the tasks parked until another
 * task gives its reservation back.
 */
#include "sched/place.h"
#include "sched/eft.h"
#include "testing.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Policies                                                                  */
/* ------------------------------------------------------------------------ */

/* Whether a's memory and data fit on GPU g now. */
static bool fits_room(const weft__placer *p, unsigned g, const weft__alt *a)
{
    const weft__device *d = p->gpu[g];
    size_t need = a->memory + a->data, cap = d->capacity;
    if (need < a->memory || need > cap || p->reserved[g] > cap - need)
        return false;
    /* and beside what was taken outside the placer */
    size_t used = atomic_load(&((weft__device *)d)->used), cached = atomic_load(&((weft__device *)d)->replicas);
    size_t outside = used > p->quota[g] + cached ? used - p->quota[g] - cached : 0;
    return outside <= cap - need - p->reserved[g];
}

bool weft__placer_fits(const weft__placer *p, unsigned g, const weft__alt *a)
{
    return p->share_used[g] + a->share <= WEFT__SHARE_UNITS && fits_room(p, g, a);
}

static size_t free_memory(const weft__placer *p, unsigned g)
{
    size_t used = atomic_load(&p->gpu[g]->used);
    return used < p->gpu[g]->capacity ? p->gpu[g]->capacity - used : 0;
}

/* An exact set (weft_placement.gpu_set): its GPUs in increasing order, if
 * each fits now. */
static bool choose_set(weft__placer *p, const weft__alt *a, uint8_t *out)
{
    unsigned k = 0;
    for (unsigned g = 0; g < p->ngpu; g++)
        if (a->set >> g & 1) {
            if (!weft__placer_fits(p, g, a))
                return false;
            out[k++] = (uint8_t)g;
        }
    return k == a->gpus;
}

/* "load": the k least loaded GPUs that fit, then the most free memory, then
 * the lowest number. */
static bool choose_load(weft__placer *p, const weft__alt *a, uint8_t *out)
{
    if (a->gpu >= 0) {
        out[0] = (uint8_t)a->gpu;
        return weft__placer_fits(p, (unsigned)a->gpu, a);
    }
    if (a->set)
        return choose_set(p, a, out);
    bool taken[WEFT__MAX_DEVICES - 1] = {false};
    for (unsigned k = 0; k < a->gpus; k++) {
        int best = -1;
        for (unsigned g = 0; g < p->ngpu; g++) {
            if (taken[g] || !weft__placer_fits(p, g, a))
                continue;
            if (best < 0 || p->load[g] < p->load[best] ||
                (p->load[g] == p->load[best] && free_memory(p, g) > free_memory(p, (unsigned)best)))
                best = (int)g;
        }
        if (best < 0)
            return false;
        taken[best] = true;
        out[k] = (uint8_t)best;
    }
    return true;
}

/* "round-robin": the GPUs in turn, from the one after the last chosen. */
static bool choose_rr(weft__placer *p, const weft__alt *a, uint8_t *out)
{
    if (a->gpu >= 0) {
        out[0] = (uint8_t)a->gpu;
        return weft__placer_fits(p, (unsigned)a->gpu, a);
    }
    if (a->set)
        return choose_set(p, a, out);
    unsigned k = 0;
    for (unsigned i = 0; i < p->ngpu && k < a->gpus; i++) {
        unsigned g = (p->rr + i) % p->ngpu;
        if (weft__placer_fits(p, g, a))
            out[k++] = (uint8_t)g;
    }
    if (k < a->gpus)
        return false;
    p->rr = (out[k - 1] + 1u) % p->ngpu;
    return true;
}

static const weft__policy policies[] = {
    {"load", choose_load, false, false},
    {"round-robin", choose_rr, false, false},
    {"balance", choose_load, true, false},
    {"dmda", choose_load, false, true},
};

void weft__place_hints_unused(weft__placer *p)
{
    if (!atomic_exchange(&p->hints_told, true))
        fprintf(stderr,
                "weft: warning: tasks carry a kind or a cost (weft_task_desc.kind, .cost; kind=, cost= in "
                "Python), which only the \"dmda\" policy uses to place them; this runtime's policy is \"%s\": "
                "set weft_config.policy = \"dmda\" (WEFT_POLICY=dmda, Runtime(policy=\"dmda\")) to place tasks "
                "by their performance models\n",
                p->policy->name);
}

const weft__policy *weft__policy_find(const char *name)
{
    if (!name || !*name)
        return &policies[0];
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
        if (strcmp(policies[i].name, name) == 0)
            return &policies[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The placer                                                                */
/* ------------------------------------------------------------------------ */

int weft__placer_init(weft__placer *p, weft__device *const *dev, unsigned ndev, const weft__policy *policy)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    p->policy = policy ? policy : &policies[0];
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    p->cpu_capacity = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : SIZE_MAX;
    for (unsigned i = 1; i < ndev; i++) {
        unsigned g = p->ngpu;
        p->gpu[g] = dev[i];
        p->dev_index[g] = (uint8_t)i;
        p->streams[g][0] = dev[i]->default_queue;
        p->ngpu++;
        for (unsigned s = 1; s < WEFT__STREAMS; s++) {
            int rc = dev[i]->ops->queue_create(dev[i], &p->streams[g][s]);
            if (rc) {
                weft__placer_fini(p);
                return rc;
            }
        }
    }
    return 0;
}

void weft__placer_fini(weft__placer *p)
{
    for (unsigned g = 0; g < p->ngpu; g++)
        while (p->events[g]) {
            weft__pevent *e = p->events[g];
            p->events[g] = e->next;
            p->gpu[g]->ops->event_destroy(e->e);
            weft__free(e);
        }
    for (unsigned g = 0; g < p->ngpu; g++)
        for (unsigned s = 1; s < WEFT__STREAMS; s++)
            if (p->streams[g][s]) {
                p->gpu[g]->ops->queue_destroy(p->streams[g][s]);
                p->streams[g][s] = NULL;
            }
    p->ngpu = 0;
    pthread_mutex_destroy(&p->lock);
}

/* ------------------------------------------------------------------------ */
/* A task's placement                                                        */
/* ------------------------------------------------------------------------ */

static void describe(const weft_placement *a, char *buf, size_t len)
{
    char set[96];
    if (a->gpus && a->gpu_set) { /* its GPUs one by one: "gpu:0+gpu:2" */
        size_t at = (size_t)snprintf(set, sizeof set, "%s", a->cpu ? "cpu+" : "");
        for (unsigned g = 0; g < 64 && at < sizeof set; g++)
            if (a->gpu_set >> g & 1)
                at += (size_t)snprintf(set + at, sizeof set - at, "%sgpu:%u", at > (a->cpu ? 4u : 0u) ? "+" : "", g);
    } else if (a->gpus == 0)
        snprintf(set, sizeof set, "cpu");
    else if (a->gpus == 1 && a->gpu >= 0)
        snprintf(set, sizeof set, "%sgpu:%d", a->cpu ? "cpu+" : "", a->gpu);
    else if (a->gpus == 1)
        snprintf(set, sizeof set, "%sgpu", a->cpu ? "cpu+" : "");
    else
        snprintf(set, sizeof set, "%s%u*gpu", a->cpu ? "cpu+" : "", a->gpus);
    snprintf(buf, len, "%s", set);
}

/* Whether alternative a could never run here, and why: 0 (it could; why
 * ""), WEFT_EINVAL (it is malformed) or WEFT_ENODEV (well formed, but it
 * asks for GPUs or GPU memory this runtime lacks). */
static int impossible(const weft__placer *p, const weft_placement *a, size_t data, char *why, size_t len)
{
    why[0] = '\0';
    if (!(a->share >= 0 && a->share <= 1)) { /* NaN too */
        snprintf(why, len, "share %g is not in (0, 1]", a->share);
    } else if (a->gpus == 0 && !a->cpu) {
        snprintf(why, len, "an empty device set (no cpu, no gpu)");
    } else if (a->gpus > 1 && a->gpu >= 0) {
        snprintf(why, len, "a GPU number (%d) with %u GPUs", a->gpu, a->gpus);
    } else if (a->gpu < -1) {
        snprintf(why, len, "GPU %d", a->gpu);
    } else if (a->gpu_set && (a->gpus == 0 || a->gpu >= 0)) {
        snprintf(why, len, "a GPU set (0x%llx) with %s", (unsigned long long)a->gpu_set,
                 a->gpus ? "a GPU number" : "no GPUs");
    } else if (a->gpu_set && (unsigned)__builtin_popcountll(a->gpu_set) != a->gpus) {
        snprintf(why, len, "a GPU set (0x%llx) of %d GPUs with gpus = %u", (unsigned long long)a->gpu_set,
                 __builtin_popcountll(a->gpu_set), a->gpus);
    }
    if (why[0])
        return WEFT_EINVAL;
    if (a->gpus > p->ngpu) {
        snprintf(why, len, "%u GPU%s asked for, this runtime has %u", a->gpus, a->gpus == 1 ? "" : "s", p->ngpu);
    } else if (a->gpus == 1 && a->gpu >= (int)p->ngpu) {
        if (p->ngpu == 0)
            snprintf(why, len, "GPU %d asked for, this runtime has no GPU", a->gpu);
        else if (p->ngpu == 1)
            snprintf(why, len, "GPU %d asked for, this runtime has 1 GPU, numbered 0", a->gpu);
        else
            snprintf(why, len, "GPU %d asked for, this runtime has %u GPUs, numbered 0 to %u", a->gpu, p->ngpu,
                     p->ngpu - 1);
    } else if (a->gpu_set && p->ngpu < 64 && (a->gpu_set >> p->ngpu)) {
        snprintf(why, len, "GPU %d in its set, this runtime has %u", 63 - __builtin_clzll(a->gpu_set), p->ngpu);
    } else if (a->gpus == 0 && a->memory > p->cpu_capacity) {
        snprintf(why, len, "%zu bytes of memory on the CPU, the host has %zu", a->memory, p->cpu_capacity);
    } else if (a->gpus && (a->memory || data)) {
        /* enough GPUs with the capacity */
        size_t need = a->memory + data;
        unsigned big = 0;
        size_t most = 0;
        for (unsigned g = 0; g < p->ngpu; g++) {
            if ((a->gpus == 1 && a->gpu >= 0 && (int)g != a->gpu) || (a->gpu_set && !(a->gpu_set >> g & 1)))
                continue;
            if (p->gpu[g]->capacity >= need && need >= a->memory)
                big++;
            if (p->gpu[g]->capacity > most)
                most = p->gpu[g]->capacity;
        }
        if (big < a->gpus && data)
            snprintf(why, len, "%zu bytes of data and %zu of memory on each of %u GPU%s, the largest has %zu", data,
                     a->memory, a->gpus, a->gpus == 1 ? "" : "s", most);
        else if (big < a->gpus)
            snprintf(why, len, "%zu bytes of memory on each of %u GPU%s, the largest has %zu", a->memory, a->gpus,
                     a->gpus == 1 ? "" : "s", most);
    }
    return why[0] ? WEFT_ENODEV : 0;
}

int weft__place_new(const weft__placer *p, const weft_placement *alts, size_t n, size_t data, void *owner,
                    const char *fn, weft__place **out)
{
    *out = NULL;
    if (n > UINT16_MAX)
        return weft__error(WEFT_EINVAL, "%s: %zu placements (at most %u)", fn, n, UINT16_MAX);
    char msg[400];
    size_t at = 0;
    unsigned possible = 0, maxgpu = 0;
    bool malformed = false;
    for (size_t i = 0; i < n; i++) {
        char why[160], set[96];
        int kind = impossible(p, &alts[i], data, why, sizeof why);
        malformed |= kind == WEFT_EINVAL;
        if (!kind) {
            possible++;
            if (alts[i].gpus > maxgpu)
                maxgpu = alts[i].gpus;
        } else if (at < sizeof msg) {
            describe(&alts[i], set, sizeof set);
            at += (size_t)snprintf(msg + at, sizeof msg - at, "%salternative %zu (%s): %s", at ? "; " : "", i, set, why);
        }
    }
    /* None can run: a malformed alternative is the caller's to fix first;
     * otherwise the runtime lacks the devices they all ask for. */
    if (!possible && (malformed || !n))
        return weft__error(WEFT_EINVAL, "%s: no device set of this runtime can run the task: %s (correct the "
                                        "placement: weft_placement_parse makes well-formed ones)", fn,
                           n ? msg : "no placements");
    if (!possible)
        return weft__error(WEFT_ENODEV, "%s: no device of this runtime can run the task: %s (add an alternative "
                                        "this runtime has, such as \"cpu\", or create the runtime with the "
                                        "devices asked for: weft_config.devices, vgpu_memory)", fn, msg);
    size_t bytes = sizeof(weft__place) + n * sizeof(weft__alt) +
                   maxgpu * (sizeof(weft__dqueue *) + sizeof(weft__pevent *) + 1);
    weft__place *pl = weft__alloc(bytes);
    if (!pl)
        return weft__error(WEFT_ENOMEM, "%s: out of memory", fn);
    memset(pl, 0, bytes);
    pl->owner = owner;
    pl->nalt = (uint16_t)n;
    pl->chosen = -1;
    pl->queue = (weft__dqueue **)(void *)&pl->alt[n];
    pl->event = (weft__pevent **)(void *)(pl->queue + maxgpu);
    pl->gpu = (uint8_t *)(pl->event + maxgpu);
    pl->gpu_only = true;
    pl->near_gpu = -1;
    pl->target = -1;
    pl->pred_how = -1;
    for (size_t i = 0; i < n; i++) {
        char why[160];
        weft__alt *a = &pl->alt[i];
        a->possible = impossible(p, &alts[i], data, why, sizeof why) == 0;
        a->cpu = alts[i].cpu || alts[i].gpus == 0;
        a->gpus = (uint16_t)(a->possible ? alts[i].gpus : 0);
        a->gpu = (int16_t)(alts[i].gpus == 1 && !alts[i].gpu_set ? alts[i].gpu : -1);
        a->set = a->possible ? alts[i].gpu_set : 0;
        double want = alts[i].share * WEFT__SHARE_UNITS; /* rounded up: a share never gets less */
        unsigned units = alts[i].share == 0 ? WEFT__SHARE_UNITS : (unsigned)want + ((double)(unsigned)want < want);
        a->share = (uint16_t)(units < 1 ? 1 : units > WEFT__SHARE_UNITS ? WEFT__SHARE_UNITS : units);
        a->memory = alts[i].memory;
        a->data = a->gpus ? data : 0;
        if (alts[i].gpus == 0) { /* the CPU's share and memory: none unless asked for */
            a->cpu_share = alts[i].share == 0 ? 0 : a->share;
            a->cpu_memory = alts[i].memory;
        }
        a->body = alts[i].body;
        if (a->possible && (a->cpu || a->gpus == 0))
            pl->gpu_only = false;
    }
    *out = pl;
    return 0;
}

void weft__place_free(weft__place *pl) { weft__free(pl); }

bool weft__place_record(weft__placer *p, weft__place *pl)
{
    unsigned n = pl->ngpu;
    /* Take one event per GPU from the pools (make one where a pool is dry). */
    pthread_mutex_lock(&p->lock);
    for (unsigned k = 0; k < n; k++) {
        unsigned g = pl->gpu[k];
        pl->event[k] = p->events[g];
        if (pl->event[k])
            p->events[g] = pl->event[k]->next;
    }
    pthread_mutex_unlock(&p->lock);
    pl->nevent = (uint16_t)n;
    bool ok = true;
    for (unsigned k = 0; k < n && ok; k++) {
        if (!pl->event[k]) {
            weft__device *dev = p->gpu[pl->gpu[k]];
            weft__pevent *pe = weft__alloc(sizeof *pe);
            if (pe && dev->ops->event_create(dev, &pe->e) == 0) {
                pl->event[k] = pe;
            } else {
                weft__free(pe);
                pl->nevent = (uint16_t)k; /* those after k are NULL: none taken */
                for (unsigned j = k + 1; j < n; j++)
                    if (pl->event[j]) { /* give back the rest */
                        pthread_mutex_lock(&p->lock);
                        pl->event[j]->next = p->events[pl->gpu[j]];
                        p->events[pl->gpu[j]] = pl->event[j];
                        pthread_mutex_unlock(&p->lock);
                    }
                ok = false;
                break;
            }
        }
        weft__device *dev = p->gpu[pl->gpu[k]];
        if (dev->ops->event_record(pl->event[k]->e, pl->queue[k]) != 0)
            ok = false;
    }
    if (ok)
        atomic_store_explicit(&pl->events_ready, true, memory_order_release);
    return ok;
}

/* Event waits still to skip (weft__test_skip_event_waits). */
static _Atomic int skip_waits;

void weft__test_skip_event_waits(int n) { atomic_store(&skip_waits, n); }

int weft__place_wait_for(weft__placer *p, weft__place *pl, const weft__place *pred)
{
    if (!atomic_load_explicit(&((weft__place *)pred)->events_ready, memory_order_acquire))
        return 0;
    if (atomic_load_explicit(&skip_waits, memory_order_relaxed) > 0 && atomic_fetch_sub(&skip_waits, 1) > 0)
        return 0; /* the planted bug */
    /* Its events may be back in the pools once it has finished: then there
     * is nothing to wait for.  Should one be reused between this check and
     * the wait below, the wait follows a later record of an unrelated task
     * (an extra ordering, never a missing one). */
    for (unsigned j = 0; j < pred->nevent; j++) {
        weft__device *src = p->gpu[pred->gpu[j]];
        weft__devent *e = pred->event[j]->e;
        bool host_waited = false;
        for (unsigned k = 0; k < pl->ngpu; k++) {
            weft__device *dev = p->gpu[pl->gpu[k]];
            int rc;
            if (dev->ops == src->ops) {
                rc = dev->ops->queue_wait(pl->queue[k], e);
            } else if (!host_waited) { /* another kind: no stream can wait for it */
                rc = weft__device_event_wait(src, e);
                host_waited = true;
            } else {
                rc = 0;
            }
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

/* Reserve a on the GPUs of out[]; false (nothing kept) if memory ran out
 * in the meantime (an allocation outside the placer). */
static bool reserve(weft__placer *p, const weft__alt *a, const uint8_t *out)
{
    for (unsigned k = 0; k < a->gpus; k++)
        if (a->memory && weft__device_charge(p->gpu[out[k]], a->memory) != 0) {
            while (k-- > 0)
                weft__device_uncharge(p->gpu[out[k]], a->memory);
            return false;
        }
    for (unsigned k = 0; k < a->gpus; k++) {
        p->share_used[out[k]] += a->share;
        p->load[out[k]]++;
        p->reserved[out[k]] += a->memory + a->data;
        p->quota[out[k]] += a->memory;
    }
    return true;
}

/* Reserve a CPU-only alternative's share of the CPU and host memory, if
 * it asks for any and they are free; false if they are not. */
static bool reserve_cpu(weft__placer *p, const weft__alt *a)
{
    if (!a->cpu_share && !a->cpu_memory)
        return true;
    if (p->cpu_share_used + a->cpu_share > WEFT__SHARE_UNITS || a->cpu_memory > p->cpu_capacity - p->cpu_reserved)
        return false;
    p->cpu_share_used += a->cpu_share;
    p->cpu_reserved += a->cpu_memory;
    p->cpu_load++;
    return true;
}

/* Give a CPU-only alternative's reservation back. */
static void unreserve_cpu(weft__placer *p, const weft__alt *a)
{
    if (!a->gpus && (a->cpu_share || a->cpu_memory)) {
        p->cpu_share_used -= a->cpu_share;
        p->cpu_reserved -= a->cpu_memory;
        p->cpu_load--;
    }
}

/* Whether any task holds a reservation: one may be given back, and a
 * parked task may fit then. */
static bool any_held(const weft__placer *p)
{
    for (unsigned g = 0; g < p->ngpu; g++)
        if (p->load[g] > 0)
            return true;
    return p->cpu_load > 0 || p->eft_cpu_mapped > 0;
}

/* Whether a may ride on pred's reservation of its first GPU (see
 * weft__place.ride_on): pred holds it still, nobody rides on it yet, and it
 * is as large. */
static bool can_ride(const weft__placer *p, const weft__place *pred, const weft__alt *a)
{
    if (!pred || pred->released || pred->rider || pred->chosen < 0 || !pred->ngpu)
        return false;
    const weft__alt *pa = &pred->alt[pred->chosen];
    return pa->share >= a->share && fits_room(p, pred->gpu[0], a);
}

/* Map pl on its alternative i if that fits now (the placer's lock held).
 * chosen: the GPUs the policy chose for it under this lock (try_map's
 * scoring), or NULL to ask the policy here. */
static bool map_alt(weft__placer *p, weft__place *pl, unsigned i, const uint8_t *chosen)
{
    uint8_t out[WEFT__MAX_DEVICES - 1];
    const weft__alt *a = &pl->alt[i];
    if (!a->possible)
        return false;
    bool eft = p->policy->eft && chosen;
    if (eft && !a->gpus && p->eft_cpu_mapped >= p->eft[0].slots)
        return false; /* a worker stays free for the GPUs' bodies */
    if (eft && a->gpus == 1 && !(pl->near_gpu == chosen[0] && pl->ride_on)) {
        /* Not beside a pinned predecessor on that GPU (its first map
         * only): it may ride on the GPU's holder, on the holder's stream. */
        weft__place *h = p->holder[chosen[0]];
        pl->near_gpu = (int16_t)chosen[0];
        pl->ride_on = h && !h->riding && !h->released ? h : NULL;
        pl->near_queue = pl->ride_on ? h->queue[0] : NULL;
    }
    bool near_ok = a->gpus == 1 && pl->near_gpu >= 0 && (a->gpu < 0 || a->gpu == pl->near_gpu);
    bool near = near_ok && weft__placer_fits(p, (unsigned)pl->near_gpu, a);
    bool ride = near_ok && !near && can_ride(p, pl->ride_on, a);
    if (near || ride)
        out[0] = (uint8_t)pl->near_gpu;
    if (ride) {
        /* only the compute share is ridden on: the rider's memory and
         * data are its own (both tasks' replicas are held at once) */
        pl->riding = true;
        pl->ride_on->rider = pl;
        p->load[out[0]]++;
        p->reserved[out[0]] += a->memory + a->data;
        p->quota[out[0]] += a->memory;
        if (a->memory) /* fits_room saw it free; the placer's lock holds */
            (void)weft__device_charge(p->gpu[out[0]], a->memory);
        near = true;
    } else if (a->gpus) {
        if (!near) {
            for (unsigned k = 0; eft && k < a->gpus; k++)
                if (!weft__placer_fits(p, chosen[k], a))
                    return false; /* (its decision waits for these GPUs) */
            if (chosen)
                memcpy(out, chosen, a->gpus);
            else if (!p->policy->choose(p, a, out))
                return false;
        }
        if (!reserve(p, a, out))
            return false;
    } else if (!reserve_cpu(p, a)) {
        return false;
    }
    if (!a->gpus)
        p->cpu_mapped++;
    if (eft && !a->gpus)
        p->eft_cpu_mapped++;
    if (eft && a->gpus && !pl->riding && a->share == WEFT__SHARE_UNITS)
        p->holder[out[0]] = pl;
    pl->chosen = (int16_t)i;
    pl->ngpu = a->gpus;
    for (unsigned k = 0; k < a->gpus; k++) {
        unsigned g = out[k];
        pl->gpu[k] = (uint8_t)g;
        pl->queue[k] = near && pl->near_queue ? pl->near_queue : p->streams[g][p->next_stream[g]++ % WEFT__STREAMS];
    }
    return true;
}

/* How loaded alternative a's devices are now, if it fits: tasks mapped per
 * device — its most loaded GPU's count, or for the CPU alone the tasks
 * mapped there per worker.  Negative if it does not fit.  out: the GPUs the
 * policy chose for it (a->gpus of them, when it fits on GPUs). */
static double alt_load(weft__placer *p, const weft__alt *a, uint8_t *out)
{
    if (!a->possible)
        return -1;
    if (!a->gpus) {
        if (p->cpu_share_used + a->cpu_share > WEFT__SHARE_UNITS || a->cpu_memory > p->cpu_capacity - p->cpu_reserved)
            return -1;
        return (double)p->cpu_mapped / (p->cpu_slots ? p->cpu_slots : 1);
    }
    if (!p->policy->choose(p, a, out))
        return -1;
    unsigned most = 0;
    for (unsigned k = 0; k < a->gpus; k++)
        if (p->load[out[k]] > most)
            most = p->load[out[k]];
    return most;
}

/* Map pl if some alternative fits now (the placer's lock held): the first
 * in the order given; under a policy that balances, the least loaded (the
 * earlier of equals), on the GPUs its scoring chose. */
static bool try_map(weft__placer *p, weft__place *pl)
{
    if (p->policy->eft) { /* where it was decided (sched/eft.c), or nowhere */
        bool mapped = pl->target >= 0 && map_alt(p, pl, (unsigned)pl->target, pl->tgpu);
        if (!pl->riding)
            pl->ride_on = NULL; /* (a candidate only during this map: it may be freed after) */
        return mapped;
    }
    if (p->policy->balance) {
        int best = -1;
        double least = 0;
        uint8_t out[WEFT__MAX_DEVICES - 1], best_out[WEFT__MAX_DEVICES - 1];
        for (unsigned i = 0; i < pl->nalt; i++) {
            double l = alt_load(p, &pl->alt[i], out);
            if (l >= 0 && (best < 0 || l < least)) {
                best = (int)i;
                least = l;
                memcpy(best_out, out, pl->alt[i].gpus);
            }
        }
        if (best < 0)
            return false;
        if (map_alt(p, pl, (unsigned)best, best_out))
            return true;
        /* (its memory was taken outside the placer meanwhile: the first that fits) */
    }
    for (unsigned i = 0; i < pl->nalt; i++)
        if (map_alt(p, pl, i, NULL))
            return true;
    return false;
}

int weft__placer_gpu_of(const weft__placer *p, unsigned dev)
{
    for (unsigned g = 0; g < p->ngpu; g++)
        if (p->dev_index[g] == dev)
            return (int)g;
    return -1;
}

static void park(weft__placer *p, weft__place *pl);

int weft__place_map(weft__placer *p, weft__place *pl, const double *xfer)
{
    pthread_mutex_lock(&p->lock);
    if (p->policy->eft && pl->target < 0)
        weft__eft_decide(p, pl, xfer);
    bool mapped = try_map(p, pl);
    if (!pl->riding)
        pl->ride_on = NULL; /* a candidate only while its task is pinned (now) */
    if (mapped) {
        pthread_mutex_unlock(&p->lock);
        return 1;
    }
    if (!any_held(p)) {
        pthread_mutex_unlock(&p->lock);
        return -1;
    }
    park(p, pl);
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* Add pl to the parked list (the lock held): last; under the earliest-
 * finish policy after those of its priority or higher. */
static void park(weft__placer *p, weft__place *pl)
{
    pl->parked_next = NULL;
    if (p->policy->eft && p->parked_tail && p->parked_tail->priority < pl->priority) {
        weft__place **at = &p->parked;
        while (*at && (*at)->priority >= pl->priority)
            at = &(*at)->parked_next;
        pl->parked_next = *at;
        *at = pl; /* (not last: parked_tail stays) */
        return;
    }
    if (p->parked_tail)
        p->parked_tail->parked_next = pl;
    else
        p->parked = pl;
    p->parked_tail = pl;
}

static weft__place *map_parked(weft__placer *p);

weft__place *weft__place_release(weft__placer *p, weft__place *pl)
{
    pthread_mutex_lock(&p->lock);
    /* Its events go back to the pools now, while the runtime surely lives
     * (not when the task is freed, which may come after destroy).  pl's
     * event[] keeps pointing at them: a successor that reads them late only
     * finds the task finished (weft__place_wait_for). */
    for (unsigned k = 0; k < pl->nevent; k++) {
        unsigned g = pl->gpu[k];
        pl->event[k]->next = p->events[g];
        p->events[g] = pl->event[k];
    }
    if (pl->chosen >= 0) {
        const weft__alt *a = &pl->alt[pl->chosen];
        unreserve_cpu(p, a);
        if (!a->gpus)
            p->cpu_mapped--;
        if (p->policy->eft && !a->gpus)
            p->eft_cpu_mapped--;
        if (pl->ngpu && p->holder[pl->gpu[0]] == pl)
            p->holder[pl->gpu[0]] = pl->rider; /* (it takes the share over, below) */
        for (unsigned k = 0; k < pl->ngpu; k++) {
            unsigned g = pl->gpu[k];
            p->load[g]--;
            size_t share = a->share, memory = a->memory, data = a->data; /* what to give back */
            if (k == 0 && pl->riding) {
                /* It held no share of its own: its rider rides on what it rode on. */
                weft__place *under = pl->ride_on;
                under->rider = pl->rider;
                if (pl->rider)
                    pl->rider->ride_on = under;
                share = 0;
            } else if (k == 0 && pl->rider) {
                /* The rider takes the share over, keeping what it needs. */
                weft__place *r = pl->rider;
                const weft__alt *ra = &r->alt[r->chosen];
                r->riding = false;
                r->ride_on = NULL;
                share -= ra->share;
            }
            p->share_used[g] -= (uint32_t)share;
            p->reserved[g] -= memory + data;
            p->quota[g] -= memory;
            if (memory)
                weft__device_uncharge(p->gpu[g], memory);
        }
        pl->rider = NULL;
        pl->riding = false;
        pl->ride_on = NULL;
    }
    pl->released = true;
    return map_parked(p);
}

weft__place *weft__place_lend(weft__placer *p, weft__place *pl)
{
    pthread_mutex_lock(&p->lock);
    const weft__alt *a = pl->chosen >= 0 ? &pl->alt[pl->chosen] : NULL;
    if (!a || pl->released || pl->lent || (!pl->ngpu && !a->cpu_share && !a->cpu_memory)) {
        pthread_mutex_unlock(&p->lock);
        return NULL;
    }
    if (!pl->ngpu) { /* the CPU's share and memory */
        p->cpu_share_used -= a->cpu_share;
        p->cpu_reserved -= a->cpu_memory;
    }
    for (unsigned k = 0; k < pl->ngpu; k++) {
        unsigned g = pl->gpu[k];
        /* (riding, it holds no share of its own there) */
        p->share_used[g] -= k == 0 && pl->riding ? 0u : a->share;
        p->reserved[g] -= a->memory + a->data;
        p->quota[g] -= a->memory;
        if (a->memory)
            weft__device_uncharge(p->gpu[g], a->memory);
    }
    pl->lent = true;
    return map_parked(p);
}

void weft__place_unlend(weft__placer *p, weft__place *pl)
{
    pthread_mutex_lock(&p->lock);
    if (pl->lent) {
        const weft__alt *a = &pl->alt[pl->chosen];
        if (!pl->ngpu) { /* (even beyond the CPU's whole, for a while) */
            p->cpu_share_used += a->cpu_share;
            p->cpu_reserved += a->cpu_memory;
        }
        for (unsigned k = 0; k < pl->ngpu; k++) {
            unsigned g = pl->gpu[k];
            p->share_used[g] += k == 0 && pl->riding ? 0u : a->share;
            p->reserved[g] += a->memory + a->data;
            p->quota[g] += a->memory;
            if (a->memory) /* unconditionally: what release gives back */
                atomic_fetch_add(&p->gpu[g]->used, a->memory);
        }
        pl->lent = false;
    }
    pthread_mutex_unlock(&p->lock);
}

static void map_parked_eft(weft__placer *p, weft__place ***tail);

/* The parked placements in order, until one does not fit (the lock held;
 * released here): each release maps what it made room for, at O(1) per
 * task mapped, and a task needing much is not passed over by later ones
 * needing less.  (Under the earliest-finish policy: map_parked_eft.) */
static weft__place *map_parked(weft__placer *p)
{
    weft__place *mapped = NULL, **tail = &mapped;
    if (p->policy->eft)
        map_parked_eft(p, &tail);
    while (!p->policy->eft && p->parked && try_map(p, p->parked)) {
        weft__place *m = p->parked;
        p->parked = m->parked_next;
        m->parked_next = NULL;
        *tail = m;
        tail = &m->parked_next;
    }
    if (!any_held(p) && p->parked) { /* what the devices hold now is held outside any task */
        *tail = p->parked;
        p->parked = NULL;
    }
    if (!p->parked)
        p->parked_tail = NULL;
    pthread_mutex_unlock(&p->lock);
    return mapped;
}

/* map_parked under the earliest-finish policy: every parked placement
 * whose target fits now, in the parked order, but that a placement waiting
 * for the same first device is never passed over (the lock held).
 * Appends those mapped at **tail (*tail: the caller's list's end). */
static void map_parked_eft(weft__placer *p, weft__place ***tail)
{
    weft__place **mt = *tail;
    bool blocked[WEFT__MAX_DEVICES] = {false}; /* 0: the CPU, 1 + g */
    weft__place *last = NULL;
    for (weft__place **at = &p->parked; *at;) {
        weft__place *pl = *at;
        const weft__alt *a = pl->target >= 0 ? &pl->alt[pl->target] : NULL;
        unsigned first = a && a->gpus ? 1u + pl->tgpu[0] : 0;
        if (!blocked[first] && try_map(p, pl)) {
            *at = pl->parked_next;
            pl->parked_next = NULL;
            *mt = pl;
            mt = &pl->parked_next;
            continue;
        }
        blocked[first] = true;
        last = pl;
        at = &pl->parked_next;
    }
    p->parked_tail = last;
    *tail = mt;
}
