/*
 * sched/eft.c — the earliest-finish-time policy ("dmda", as StarPU's and
 * HEFT's): a ready task goes where its predicted finish is earliest.
 *
 * For each device set an alternative of the task allows, its finish is
 *     when the device could start it: its backlog (the predicted work
 *     decided on it, of the task's priority or higher, and what remains
 *     of the running tasks'), and not before the predecessor it was
 *     released early after is predicted to finish
 *   + the transfers its data would need there (the graph's estimate),
 *     counted XFER_WEIGHT times
 *   + its execution there (its kind's model on the device's arch).
 * The CPU's workers are one pool of slots (less one when there are GPUs:
 * a worker stays free to run the bodies that feed them, as StarPU gives
 * each GPU a core); a GPU is one slot, a task taking its share of it.
 * Ties go to the device with less decided on it.
 *
 * Calibration: while a candidate's model has fewer than WEFT__CALIBRATE
 * observations and tasks sent to observe it, only such candidates are
 * considered, each charged a guess (another arch's prediction, else 100
 * µs), so that tasks spread over them, by backlog, until each has a model.
 *
 * The decision is made once, when the task is ready; the map then waits
 * for that device set (sched/place.c).  Everything here runs under the
 * placer's lock, but the calls at the end, which take it.
 */
#include "sched/place.h"
#include "sched/eft.h"

#include <math.h>
#include <string.h>

#define GUESS_NS 1e5 /* a task's time when nothing predicts it */
/* Copies count this many times their time (StarPU's beta): a copy also
 * takes bandwidth other tasks' copies need, and moving a chain's data
 * away from its GPU to gain less than that is not worth the churn. */
#define XFER_WEIGHT 2.0

void weft__placer_models(weft__placer *p, weft__perfmodel *pm)
{
    p->pm = pm;
    p->narch = 1;
    snprintf(p->arch[0], sizeof p->arch[0], "cpu");
    for (unsigned g = 0; g < p->ngpu; g++) {
        unsigned a = 1;
        while (a < p->narch && strcmp(p->arch[a], p->gpu[g]->arch) != 0)
            a++;
        if (a == p->narch && p->narch < WEFT__ARCHS)
            snprintf(p->arch[p->narch++], sizeof p->arch[0], "%s", p->gpu[g]->arch);
        p->gpu_arch[g] = (uint8_t)(a < p->narch ? a : p->narch - 1); /* (archs beyond the table share the last) */
    }
    unsigned workers = p->cpu_slots ? p->cpu_slots : 1;
    p->eft[0].slots = p->ngpu && workers > 1 ? workers - 1 : workers;
    for (unsigned g = 0; g < p->ngpu; g++)
        p->eft[1 + g].slots = 1;
}

void weft__place_kind(weft__placer *p, weft__place *pl, const char *kind, int priority, uint64_t size,
                      double cost)
{
    pl->priority = priority;
    pl->size = size;
    pl->cost = cost;
    pl->target = -1;
    pl->pred_how = -1;
    for (unsigned a = 0; a < p->narch && p->pm; a++) {
        pl->model[a] = weft__pm_model_get(p->pm, kind, p->arch[a]);
        if (cost > 0)
            pl->per_cost[a] = weft__pm_model_get(p->pm, WEFT__PM_PER_COST, p->arch[a]);
    }
}

/* When device d (0: the CPU, 1 + g) could start pl, predicted: when it
 * would be free, but not before pl's data is (ready: its predecessor still
 * running, when pl was released before it finished). */
static double avail(const weft__placer *p, unsigned d, double now, double ready, double w, int prio)
{
    const weft__eft_dev *e = &p->eft[d];
    unsigned slots = e->slots ? e->slots : 1;
    double run = e->run_end - now * e->run_w, queued = 0, queued_w = 0;
    for (unsigned k = 0; k < e->nprio; k++)
        if (e->prio[k] >= prio || k == WEFT__EFT_PRIOS - 1) {
            queued += e->queued_at[k];
            queued_w += e->queued_w_at[k];
        }
    double at = e->run_w + queued_w + w <= slots + 1e-9 ? now : now + ((run > 0 ? run : 0) + queued) / slots;
    return at > ready ? at : ready;
}

/* The bucket of priority prio in e (made if new; the last when full). */
static unsigned prio_bucket(weft__eft_dev *e, int prio)
{
    for (unsigned k = 0; k < e->nprio; k++)
        if (e->prio[k] == prio)
            return k;
    for (unsigned k = 0; k < e->nprio; k++) /* an empty one */
        if (e->queued_w_at[k] <= 0 && k != WEFT__EFT_PRIOS - 1) {
            e->prio[k] = prio;
            e->queued_at[k] = e->queued_w_at[k] = 0;
            return k;
        }
    if (e->nprio < WEFT__EFT_PRIOS) {
        e->prio[e->nprio] = prio;
        e->queued_at[e->nprio] = e->queued_w_at[e->nprio] = 0;
        return e->nprio++;
    }
    return WEFT__EFT_PRIOS - 1;
}

/* When pl's data will be ready: now, or when the predecessor it was
 * released early after (pinned in ride_on while it is decided) is
 * predicted to finish. */
static double data_ready(const weft__place *pl, double now)
{
    const weft__place *pred = pl->ride_on;
    double at = now;
    if (pred && (pred->acct == WEFT__ACCT_RUNNING || pred->acct == WEFT__ACCT_QUEUED)) {
        /* (its finish as decided: after what was decided before it there;
         * a body released early starts long before its stream reaches its
         * work) */
        at = pred->pred_fin;
        double run = (double)pred->t_start + pred->pred_exec + pred->pred_xfer;
        if (pred->acct == WEFT__ACCT_RUNNING && run > at)
            at = run;
    }
    return at > now ? at : now;
}

/* pl's execution on arch ar: *ns, and what it rests on (WEFT__PM_*; NONE
 * with *ns 0 while the tasks sent to calibrate it have not come back), or
 * -1 while the model calibrates (*ns then its own guess, or 0). */
static int predict(const weft__placer *p, const weft__place *pl, unsigned ar, double *ns)
{
    *ns = 0;
    uint64_t seen = 0;
    int how = pl->model[ar] ? weft__pm_predict(p->pm, pl->model[ar], pl->size, ns, &seen) : WEFT__PM_NONE;
    if (how == WEFT__PM_NONE)
        *ns = 0;
    double per = 0;
    uint64_t rated = 0;
    if (seen < WEFT__CALIBRATE && pl->per_cost[ar] &&
        weft__pm_predict(p->pm, pl->per_cost[ar], 0, &per, &rated) == WEFT__PM_HISTORY && per > 0) {
        *ns = pl->cost * per; /* its cost at the rate tasks with a cost showed there */
        return WEFT__PM_FIT;
    }
    /* (enough sent to calibrate it, none back yet: no model, no calibration) */
    return seen < WEFT__CALIBRATE ? -1 : how;
}

/* The share of device d decided on (running or queued). */
static double committed(const weft__placer *p, unsigned d) { return p->eft[d].run_w + p->eft[d].queued_w; }

/* Of two devices that would finish a task at once, whether d goes before
 * e: the one with less decided on it, else the one chosen least recently.
 * (Independent data then spreads over idle GPUs even when each task ends
 * before the next is spawned; it would all go to the first GPU otherwise,
 * and move later at the price of copies.) */
static bool tie_before(const weft__placer *p, unsigned d, unsigned e)
{
    double cd = committed(p, d), ce = committed(p, e);
    return cd < ce || (cd == ce && p->eft[d].chosen < p->eft[e].chosen);
}

/* A candidate: an alternative on a device set, and its predicted finish. */
typedef struct cand {
    unsigned alt;
    uint8_t gpu[WEFT__MAX_DEVICES - 1];
    double exec, xfer, fin;
    int how;
} cand;

/* Whether GPU g could ever hold a's data and memory. */
static bool room_ever(const weft__placer *p, unsigned g, const weft__alt *a)
{
    size_t need = a->memory + a->data;
    return need >= a->memory && need <= p->gpu[g]->capacity;
}

/* The GPUs alternative a may use, earliest free (with its transfers) first:
 * their number. */
static unsigned gpus_by_finish(const weft__placer *p, const weft__alt *a, const double *xfer, double now,
                               double ready, int prio, uint8_t *out)
{
    unsigned n = 0;
    double w = (double)a->share / WEFT__SHARE_UNITS;
    for (unsigned g = 0; g < p->ngpu; g++) {
        bool allowed = a->set ? (a->set >> g & 1) : a->gpu < 0 || (unsigned)a->gpu == g;
        if (allowed && room_ever(p, g, a))
            out[n++] = (uint8_t)g;
    }
    for (unsigned i = 1; i < n; i++) /* insertion sort: few GPUs */
        for (unsigned j = i; j > 0; j--) {
            double x = avail(p, 1 + out[j], now, ready, w, prio) + xfer[1 + out[j]];
            double y = avail(p, 1 + out[j - 1], now, ready, w, prio) + xfer[1 + out[j - 1]];
            if (!(x < y) && !(x == y && tie_before(p, 1 + out[j], 1 + out[j - 1])))
                break;
            uint8_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

/* The candidate of alternative i on its best device set (false: none). */
static bool candidate(const weft__placer *p, const weft__place *pl, unsigned i, const double *xfer, double now,
                      cand *c)
{
    const weft__alt *a = &pl->alt[i];
    double ready = data_ready(pl, now);
    c->alt = i;
    if (!a->gpus) {
        c->how = predict(p, pl, 0, &c->exec);
        c->xfer = xfer[0];
        c->fin = avail(p, 0, now, ready, 1, pl->priority) + c->xfer;
        return true;
    }
    uint8_t order[WEFT__MAX_DEVICES - 1];
    unsigned n = gpus_by_finish(p, a, xfer, now, ready, pl->priority, order);
    if (n < a->gpus)
        return false;
    memcpy(c->gpu, order, a->gpus);
    c->how = predict(p, pl, p->gpu_arch[order[0]], &c->exec);
    c->xfer = 0;
    c->fin = 0;
    for (unsigned k = 0; k < a->gpus; k++) {
        double f = avail(p, 1 + order[k], now, ready, (double)a->share / WEFT__SHARE_UNITS, pl->priority) +
                   xfer[1 + order[k]];
        c->fin = f > c->fin ? f : c->fin;
        c->xfer = xfer[1 + order[k]] > c->xfer ? xfer[1 + order[k]] : c->xfer;
    }
    /* (a one-GPU alternative: order[0] is its earliest finish, so the
     * candidate is the best GPU for it; several GPUs: the earliest k, in
     * ascending order, as the task sees its devices) */
    for (unsigned i = 1; i < a->gpus; i++)
        for (unsigned j = i; j > 0 && c->gpu[j] < c->gpu[j - 1]; j--) {
            uint8_t t = c->gpu[j];
            c->gpu[j] = c->gpu[j - 1];
            c->gpu[j - 1] = t;
        }
    return true;
}

/* The devices of pl's target: 0 for the CPU, else 1 + each GPU; their number. */
static unsigned target_devs(const weft__place *pl, unsigned *dev)
{
    const weft__alt *a = &pl->alt[pl->target];
    if (!a->gpus) {
        dev[0] = 0;
        return 1;
    }
    for (unsigned k = 0; k < a->gpus; k++)
        dev[k] = 1u + pl->tgpu[k];
    return a->gpus;
}

/* Charge (sign +1) or discharge (-1) pl's predicted work to its target's
 * queued work. */
static void charge_queued(weft__placer *p, const weft__place *pl, double sign)
{
    unsigned dev[WEFT__MAX_DEVICES];
    unsigned n = target_devs(pl, dev);
    for (unsigned k = 0; k < n; k++) {
        weft__eft_dev *e = &p->eft[dev[k]];
        unsigned b = prio_bucket(e, pl->priority);
        double work = sign * (pl->pred_exec + pl->pred_xfer) * pl->weight;
        e->queued += work;
        e->queued_w += sign * pl->weight;
        e->queued_at[b] += work;
        e->queued_w_at[b] += sign * pl->weight;
        if (e->queued_at[b] < 0 || e->queued_w_at[b] < 1e-9)
            e->queued_at[b] = e->queued_w_at[b] = 0;
        if (e->queued < 0 || e->queued_w < 1e-9) { /* nothing queued: no rounding (nor lumping) left over */
            e->queued = e->queued_w = 0;
            e->nprio = 0;
        }
    }
}

/* Stamp pl's target devices as the ones chosen last (see tie_before). */
static void stamp_chosen(weft__placer *p, const weft__place *pl)
{
    unsigned dev[WEFT__MAX_DEVICES];
    unsigned n = target_devs(pl, dev);
    p->decisions++;
    for (unsigned k = 0; k < n; k++)
        p->eft[dev[k]].chosen = p->decisions;
}

void weft__eft_decide(weft__placer *p, weft__place *pl, const double *xfer)
{
    double now = (double)weft__now_ns();
    cand best = {0}, c;
    bool have = false, calibrating = false;
    for (unsigned i = 0; i < pl->nalt; i++)
        if (pl->alt[i].possible && candidate(p, pl, i, xfer, now, &c))
            calibrating |= c.how < 0;
    /* A calibrating candidate's guess: the least another arch predicts. */
    double guess = INFINITY;
    for (unsigned a = 0; a < p->narch; a++) {
        double ns;
        if (predict(p, pl, a, &ns) > 0 && ns > 0 && ns < guess)
            guess = ns;
    }
    if (!isfinite(guess))
        guess = GUESS_NS;
    for (unsigned i = 0; i < pl->nalt; i++) {
        if (!pl->alt[i].possible || !candidate(p, pl, i, xfer, now, &c) || (calibrating && c.how >= 0))
            continue;
        if (c.how <= 0 && !(c.exec > 0))
            c.exec = guess;
        c.fin += c.exec + c.xfer * (XFER_WEIGHT - 1);
        if (!have || c.fin < best.fin) {
            best = c;
            have = true;
        }
    }
    if (!have) { /* (no alternative is possible: the map refuses it) */
        pl->target = -1;
        return;
    }
    const weft__alt *a = &pl->alt[best.alt];
    pl->target = (int16_t)best.alt;
    memcpy(pl->tgpu, best.gpu, a->gpus);
    pl->pred_exec = best.exec;
    pl->pred_xfer = best.xfer;
    pl->pred_how = (int8_t)best.how;
    pl->pred_fin = best.fin - best.xfer * (XFER_WEIGHT - 1);
    pl->weight = a->gpus ? (double)a->share / WEFT__SHARE_UNITS : 1.0;
    pl->acct = WEFT__ACCT_QUEUED;
    pl->t_commit = (uint64_t)now;
    charge_queued(p, pl, +1);
    stamp_chosen(p, pl);
    if (best.how == WEFT__PM_HISTORY)
        p->pm_hits++;
    else if (best.how == WEFT__PM_FIT)
        p->pm_fits++;
    else
        p->pm_calibrating++;
    unsigned ar = a->gpus ? p->gpu_arch[best.gpu[0]] : 0;
    if (best.how < 0 && p->pm && pl->model[ar]) {
        pl->calibrates = pl->model[ar];
        weft__pm_pending(p->pm, pl->calibrates, +1);
    }
}

void weft__place_started(weft__placer *p, weft__place *pl)
{
    if (!p->policy->eft)
        return;
    pthread_mutex_lock(&p->lock);
    if (pl->acct == WEFT__ACCT_QUEUED && pl->target >= 0) {
        uint64_t now = weft__now_ns();
        charge_queued(p, pl, -1);
        unsigned dev[WEFT__MAX_DEVICES];
        unsigned n = target_devs(pl, dev);
        for (unsigned k = 0; k < n; k++) {
            weft__eft_dev *e = &p->eft[dev[k]];
            e->run_end += ((double)now + pl->pred_exec + pl->pred_xfer) * pl->weight;
            e->run_w += pl->weight;
            e->running++;
        }
        pl->t_start = now;
        atomic_store_explicit(&pl->ran_ns, 0, memory_order_relaxed);
        atomic_store_explicit(&pl->body_end, 0, memory_order_relaxed);
        pl->acct = WEFT__ACCT_RUNNING;
    }
    pthread_mutex_unlock(&p->lock);
}

/* Take a running pl out of its devices' accounting; its observed execution
 * (ns), 0 if none.  On a GPU whose kind timed its kernels, that is the
 * time they ran there, or its body's time on the host if longer: its
 * elapsed time would also count its wait behind other work queued on the
 * GPU, its copies and the report of its completion, and a model that
 * learned those would steer tasks away from GPUs and overstate the bound.
 * Otherwise it is the elapsed time, from its start or from when its GPU's
 * previous task completed (work queued before its own then), less the
 * predicted transfers. */
static double stop_running(weft__placer *p, weft__place *pl, uint64_t now)
{
    unsigned dev[WEFT__MAX_DEVICES];
    unsigned n = target_devs(pl, dev);
    uint64_t start = pl->t_start;
    for (unsigned k = 0; k < n; k++) {
        weft__eft_dev *e = &p->eft[dev[k]];
        e->run_end -= ((double)pl->t_start + pl->pred_exec + pl->pred_xfer) * pl->weight;
        e->run_w -= pl->weight;
        if (--e->running == 0)
            e->run_end = e->run_w = 0; /* (no rounding left over) */
        if (dev[k] && e->last_done > start && k == 0)
            start = e->last_done;
        if (dev[k])
            e->last_done = now;
    }
    uint64_t ran = atomic_load_explicit(&pl->ran_ns, memory_order_relaxed);
    if (dev[0] && ran > 0) {
        uint64_t body_end = atomic_load_explicit(&pl->body_end, memory_order_relaxed);
        uint64_t body = body_end > pl->t_start ? body_end - pl->t_start : 0;
        return (double)(ran > body ? ran : body);
    }
    double obs = (double)(now - start) - (dev[0] ? pl->pred_xfer : 0);
    return obs > 0 ? obs : 1;
}

void weft__place_body_returned(weft__place *pl)
{
    atomic_store_explicit(&pl->body_end, weft__now_ns(), memory_order_relaxed);
}

void weft__place_finished(weft__placer *p, weft__place *pl, bool ok)
{
    if (!p->policy->eft)
        return;
    pthread_mutex_lock(&p->lock);
    double obs = 0;
    unsigned ar = 0;
    if (pl->acct == WEFT__ACCT_QUEUED) {
        charge_queued(p, pl, -1);
    } else if (pl->acct == WEFT__ACCT_RUNNING) {
        obs = stop_running(p, pl, weft__now_ns());
        const weft__alt *a = &pl->alt[pl->target];
        ar = a->gpus ? p->gpu_arch[pl->tgpu[0]] : 0;
        if (ok && pl->pred_how > 0 && (obs > 2 * pl->pred_exec || 2 * obs < pl->pred_exec))
            p->pm_mispredicted++;
    }
    pl->acct = WEFT__ACCT_DONE;
    weft__pm_model *cal = pl->calibrates;
    pl->calibrates = NULL;
    pthread_mutex_unlock(&p->lock);

    if (ok && obs > 0 && p->pm && pl->model[ar])
        weft__pm_observe(p->pm, pl->model[ar], pl->size, obs);
    if (ok && obs > 0 && p->pm && pl->per_cost[ar])
        weft__pm_observe(p->pm, pl->per_cost[ar], 0, obs / pl->cost);
    if (cal) /* (after its observation: seen + pending never dips between) */
        weft__pm_pending(p->pm, cal, -1);
}
