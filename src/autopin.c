/*
 * autopin.c — weft_config.pin_workers = WEFT_PIN_AUTO: the workers' samples
 * of their CPU, the scan that suspects packing, the decision (a pure
 * function of the samples and /proc/stat's idle figures), and the pinning.
 * autopin.h describes the rule and what protects what.
 */
#include "autopin.h"
#include "api/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The decision: pure functions of the samples                               */
/* ------------------------------------------------------------------------ */

/* A sample in the last WEFT__PIN_GAP_NS (another worker's may be a little
 * later than `now`). */
static bool busy(const weft__pin_sample *s, uint64_t now)
{
    return s->cpu >= 0 && s->seen_ns + WEFT__PIN_GAP_NS >= now;
}

int weft__autopin_packed(const weft__pin_sample *s, unsigned nworkers, uint64_t now)
{
    int best = -1;
    for (unsigned i = 0; i < nworkers; i++) {
        if ((best >= 0 && s[i].cpu >= best) || !busy(&s[i], now))
            continue;
        for (unsigned j = i + 1; j < nworkers; j++)
            if (s[j].cpu == s[i].cpu && busy(&s[j], now)) {
                best = s[i].cpu;
                break;
            }
    }
    return best;
}

/* The index of cpu in cpus[0..n) (ascending), or -1. */
static int cpu_index(const int *cpus, unsigned n, int cpu)
{
    unsigned lo = 0, hi = n;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (cpus[mid] < cpu)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && cpus[lo] == cpu ? (int)lo : -1;
}

static bool taken(const int *assign, unsigned nworkers, int cpu)
{
    for (unsigned w = 0; w < nworkers; w++)
        if (assign[w] == cpu)
            return true;
    return false;
}

int weft__autopin_plan(const weft__pin_sample *s, unsigned nworkers, const int *cpus, unsigned ncpus,
                       const uint64_t *idle_ns, uint64_t busy_ns, uint64_t slack_ns, unsigned scans,
                       unsigned packed, uint64_t now, int *assign)
{
    if (nworkers > ncpus)
        return WEFT__PIN_TOO_MANY;
    if (scans < WEFT__PIN_MIN_SCANS || packed > scans || 4 * (uint64_t)packed < 3 * (uint64_t)scans)
        return WEFT__PIN_NOT_PACKED;
    /* Half a CPU of idle time in the set, each CPU's counted short by
     * what its source may overstate. */
    uint64_t idle = 0;
    for (unsigned k = 0; k < ncpus; k++)
        if (idle_ns[k] > slack_ns)
            idle += idle_ns[k] - slack_ns;
    if (2 * idle < busy_ns)
        return WEFT__PIN_NO_IDLE;
    for (unsigned w = 0; w < nworkers; w++)
        assign[w] = -1;
    /* Busy workers keep their CPU, first come first kept; then the others
     * theirs; then the rest get the free CPUs, idlest first. */
    for (int pass = 0; pass < 2; pass++)
        for (unsigned w = 0; w < nworkers; w++)
            if (busy(&s[w], now) == (pass == 0) && s[w].cpu >= 0 && cpu_index(cpus, ncpus, s[w].cpu) >= 0 &&
                !taken(assign, nworkers, s[w].cpu))
                assign[w] = s[w].cpu;
    for (unsigned w = 0; w < nworkers; w++) {
        if (assign[w] >= 0)
            continue;
        int best = -1;
        for (unsigned k = 0; k < ncpus; k++)
            if (!taken(assign, nworkers, cpus[k]) && (best < 0 || idle_ns[k] > idle_ns[best]))
                best = (int)k;
        WEFT__CHECK(best >= 0); /* (no more workers than CPUs) */
        assign[w] = cpus[best];
    }
    return WEFT__PIN_GO;
}

/* ------------------------------------------------------------------------ */
/* The runtime's side                                                        */
/* ------------------------------------------------------------------------ */

/* How many cpuidle states CPU cpu has (state0, state1, ...), 0 if none. */
static unsigned cpuidle_states(int cpu)
{
    unsigned n = 0;
    char path[96];
    for (;; n++) {
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpuidle/state%u/time", cpu, n);
        if (access(path, R_OK) != 0)
            return n;
    }
}

int weft__autopin_init(weft__rt *rt, const cpu_set_t *set)
{
    weft__autopin *ap = &rt->autopin;
    atomic_store(&ap->state, WEFT__AP_OFF);
    for (unsigned i = 0; i < rt->nworkers; i++) {
        weft__worker *w = &rt->workers[i];
        w->pin_left = UINT64_MAX;
        w->pin_every = 1;
        atomic_store_explicit(&w->pin_sample, 0, memory_order_relaxed);
    }
    unsigned n = (unsigned)CPU_COUNT(set);
    long hz = sysconf(_SC_CLK_TCK);
    if (rt->cfg.pin_workers != WEFT_PIN_AUTO || n < 2 || rt->nworkers < 2 || rt->nworkers > n || hz <= 0)
        return 0; /* nothing to watch for, or no way to tell */
    ap->cpus = weft__alloc(n * sizeof *ap->cpus);
    ap->nstates = weft__alloc(n * sizeof *ap->nstates);
    ap->prev_idle = weft__alloc(n * sizeof *ap->prev_idle);
    ap->idle = weft__alloc(n * sizeof *ap->idle);
    ap->cur_idle = weft__alloc(n * sizeof *ap->cur_idle);
    ap->samples = weft__alloc(rt->nworkers * sizeof *ap->samples);
    ap->assign = weft__alloc(rt->nworkers * sizeof *ap->assign);
    if (!ap->cpus || !ap->nstates || !ap->prev_idle || !ap->idle || !ap->cur_idle || !ap->samples || !ap->assign) {
        weft__autopin_fini(rt);
        return WEFT_ENOMEM;
    }
    ap->ncpus = 0;
    for (int c = 0; c < CPU_SETSIZE && ap->ncpus < n; c++)
        if (CPU_ISSET(c, set))
            ap->cpus[ap->ncpus++] = c;
    /* cpuidle where every CPU of the set has it, else /proc/stat */
    for (unsigned k = 0; k < ap->ncpus && ap->nstates; k++)
        if ((ap->nstates[k] = cpuidle_states(ap->cpus[k])) == 0) {
            weft__free(ap->nstates);
            ap->nstates = NULL;
        }
    ap->tick_ns = 1000000000ull / (uint64_t)hz;
    ap->backoff_ns = WEFT__PIN_BACKOFF_NS;
    for (unsigned i = 0; i < rt->nworkers; i++)
        rt->workers[i].pin_left = 1; /* a sample at its first task */
    atomic_store(&ap->state, WEFT__AP_WATCHING);
    return 0;
}

void weft__autopin_fini(weft__rt *rt)
{
    weft__autopin *ap = &rt->autopin;
    weft__free(ap->cpus);
    weft__free(ap->nstates);
    weft__free(ap->prev_idle);
    weft__free(ap->idle);
    weft__free(ap->cur_idle);
    weft__free(ap->samples);
    weft__free(ap->assign);
    ap->cpus = NULL;
    ap->nstates = NULL;
    ap->prev_idle = ap->idle = ap->cur_idle = NULL;
    ap->samples = NULL;
    ap->assign = NULL;
}

/* Each CPU of the set's idle time (idle + iowait) in ticks, from
 * /proc/stat, as ns into out[ncpus] (0 for a CPU it does not list); 0, or
 * -1 when it cannot be read or lists none of them. */
static int read_idle_stat(const weft__autopin *ap, uint64_t *out)
{
    FILE *f = fopen("/proc/stat", "re");
    if (!f)
        return -1;
    memset(out, 0, ap->ncpus * sizeof *out);
    unsigned found = 0;
    char line[512];
    while (fgets(line, sizeof line, f) && strncmp(line, "cpu", 3) == 0) {
        if (line[3] < '0' || line[3] > '9')
            continue; /* the line of all CPUs together */
        char *p;
        long cpu = strtol(line + 3, &p, 10);
        unsigned long long v[5];
        for (int i = 0; i < 5; i++)
            v[i] = strtoull(p, &p, 10); /* user nice system idle iowait */
        int k = cpu >= 0 && cpu < CPU_SETSIZE ? cpu_index(ap->cpus, ap->ncpus, (int)cpu) : -1;
        if (k >= 0) {
            out[k] = (v[3] + v[4]) * ap->tick_ns;
            found++;
        }
    }
    fclose(f);
    return found ? 0 : -1;
}

/* Each CPU of the set's time in its cpuidle states (us), as ns into
 * out[ncpus]; 0, or -1 when a file cannot be read. */
static int read_idle_cpuidle(const weft__autopin *ap, uint64_t *out)
{
    char path[96], buf[32];
    for (unsigned k = 0; k < ap->ncpus; k++) {
        uint64_t us = 0;
        for (unsigned st = 0; st < ap->nstates[k]; st++) {
            snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpuidle/state%u/time", ap->cpus[k], st);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0)
                return -1;
            ssize_t got = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (got <= 0)
                return -1;
            buf[got] = 0;
            us += strtoull(buf, NULL, 10);
        }
        out[k] = us * 1000;
    }
    return 0;
}

static int read_idle(const weft__autopin *ap, uint64_t *out)
{
    return ap->nstates ? read_idle_cpuidle(ap, out) : read_idle_stat(ap, out);
}

/* The workers' latest samples. */
static void read_samples(weft__rt *rt, weft__pin_sample *s)
{
    for (unsigned i = 0; i < rt->nworkers; i++) {
        uint64_t v = atomic_load_explicit(&rt->workers[i].pin_sample, memory_order_relaxed);
        s[i].cpu = (int)(v >> 48) - 1;
        s[i].seen_ns = (v & ((1ull << 48) - 1)) * 1000;
    }
}

/* Tell the observers (the trace). */
static void note(weft__rt *rt, unsigned worker, uint64_t at, const char *name, const char *detail)
{
    const weft__observers *obs = &rt->observers;
    for (unsigned k = 0; k < obs->n; k++)
        if (obs->at[k].ops->on_note)
            obs->at[k].ops->on_note(obs->at[k].self, worker, at, name, detail);
}

/* The window closes; `nowhere`: it found the CPUs without time to spare
 * (or their figures unreadable), and the next waits longer. */
static void close_window(weft__autopin *ap, uint64_t now, bool nowhere)
{
    ap->open = false;
    if (!nowhere)
        return;
    ap->retry_ns = now + ap->backoff_ns;
    ap->backoff_ns = ap->backoff_ns * 2 < WEFT__PIN_BACKOFF_MAX_NS ? ap->backoff_ns * 2 : WEFT__PIN_BACKOFF_MAX_NS;
}

static void whole_set(const weft__autopin *ap, cpu_set_t *set)
{
    CPU_ZERO(set);
    for (unsigned k = 0; k < ap->ncpus; k++)
        CPU_SET(ap->cpus[k], set);
}

/* Pin worker i to ap->assign[i], all or none. */
static void pin(weft__rt *rt, unsigned by, uint64_t now)
{
    weft__autopin *ap = &rt->autopin;
    char detail[256];
    for (unsigned i = 0; i < rt->nworkers; i++) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(ap->assign[i], &one);
        int e = pthread_setaffinity_np(rt->workers[i].thread, sizeof one, &one);
        if (e != 0) {
            cpu_set_t all;
            whole_set(ap, &all);
            for (unsigned j = 0; j < i; j++)
                (void)pthread_setaffinity_np(rt->workers[j].thread, sizeof all, &all);
            atomic_store(&ap->state, WEFT__AP_OFF);
            snprintf(detail, sizeof detail, "worker %u: CPU %d refused (%s); the workers stay unpinned", i,
                     ap->assign[i], strerror(e));
            note(rt, by, now, "workers not pinned", detail);
            return;
        }
    }
    uint64_t idle = 0;
    for (unsigned k = 0; k < ap->ncpus; k++)
        idle += ap->idle[k];
    int at = snprintf(detail, sizeof detail, "workers packed on one CPU in %u of %u scans while the CPUs idled "
                      "%.1f of %.1f ms busy (%s, %u segment(s)); worker:CPU", ap->packed, ap->scans,
                      (double)idle / 1e6, (double)ap->busy_ns / 1e6, ap->nstates ? "cpuidle" : "/proc/stat",
                      ap->segments);
    for (unsigned i = 0; i < rt->nworkers && at > 0 && (size_t)at < sizeof detail; i++)
        at += snprintf(detail + at, sizeof detail - (size_t)at, " %u:%d", i, ap->assign[i]);
    atomic_store(&ap->pins, 1);
    atomic_store(&ap->state, WEFT__AP_PINNED);
    note(rt, by, now, "workers pinned", detail);
}

/* Open a window at this scan, or start its next segment (after a pause):
 * the idle figures from here.  false when they cannot be read (the
 * runtime stops watching). */
static bool segment_start(weft__rt *rt, unsigned by, uint64_t now)
{
    weft__autopin *ap = &rt->autopin;
    if (read_idle(ap, ap->prev_idle) != 0) {
        atomic_store(&ap->state, WEFT__AP_OFF); /* no way to tell idle CPUs */
        note(rt, by, now, "workers not pinned",
             ap->nstates ? "cpuidle's figures cannot be read: the workers stay unpinned"
                         : "/proc/stat cannot be read: the workers stay unpinned");
        return false;
    }
    ap->last_scan_ns = now;
    ap->segments++;
    return true;
}

/* Under `deciding`: look at the samples, and go one step (autopin.h). */
static void scan(weft__rt *rt, unsigned by, uint64_t now)
{
    weft__autopin *ap = &rt->autopin;
    atomic_store_explicit(&ap->next_scan, now + WEFT__PIN_EVERY_NS, memory_order_relaxed);
    read_samples(rt, ap->samples);
    bool packed = weft__autopin_packed(ap->samples, rt->nworkers, now) >= 0;
    unsigned nbusy = 0;
    for (unsigned i = 0; i < rt->nworkers; i++)
        nbusy += busy(&ap->samples[i], now);
    if (!ap->open) {
        if (nbusy < 2 || !packed || now < ap->retry_ns)
            return;
        ap->scans = ap->packed = ap->segments = 0;
        ap->busy_ns = 0;
        ap->paused = false;
        memset(ap->idle, 0, ap->ncpus * sizeof *ap->idle);
        ap->open = segment_start(rt, by, now);
        return;
    }
    uint64_t gap = now - ap->last_scan_ns;
    if (gap > WEFT__PIN_STALE_NS) { /* the workers idled long: start afresh */
        close_window(ap, now, false);
        return;
    }
    if (nbusy < 2) {
        /* Not two busy workers (a burst starting or ending, one worker
         * still asleep): no evidence either way; a pause, left out. */
        ap->paused = true;
        return;
    }
    if (ap->paused || gap > WEFT__PIN_GAP_NS) { /* after a pause: the window goes on from here */
        ap->paused = false;
        ap->open = segment_start(rt, by, now);
        return;
    }
    if (read_idle(ap, ap->cur_idle) != 0) {
        close_window(ap, now, true);
        return;
    }
    for (unsigned k = 0; k < ap->ncpus; k++) {
        ap->idle[k] += ap->cur_idle[k] > ap->prev_idle[k] ? ap->cur_idle[k] - ap->prev_idle[k] : 0;
        ap->prev_idle[k] = ap->cur_idle[k];
    }
    ap->busy_ns += gap;
    ap->last_scan_ns = now;
    ap->scans++;
    ap->packed += packed;
    if (ap->scans >= 4 && 4 * (ap->scans - ap->packed) > ap->scans) {
        /* The packing did not hold: the next suspicion may open a window
         * at once (at the next packed scan: no cost till then). */
        close_window(ap, now, false);
        return;
    }
    uint64_t enough = ap->nstates ? WEFT__PIN_WINDOW_NS : WEFT__PIN_WINDOW_TICKS * ap->tick_ns;
    if (ap->busy_ns < enough || ap->scans < WEFT__PIN_MIN_SCANS)
        return;
    /* what each CPU's idle figure may overstate: a granule per segment */
    uint64_t slack = (uint64_t)ap->segments * (ap->nstates ? 1000 : ap->tick_ns);
    if (weft__autopin_plan(ap->samples, rt->nworkers, ap->cpus, ap->ncpus, ap->idle, ap->busy_ns, slack, ap->scans,
                           ap->packed, now, ap->assign) == WEFT__PIN_GO)
        pin(rt, by, now);
    else
        close_window(ap, now, true);
}

void weft__autopin_sample(weft__worker *w)
{
    weft__rt *rt = w->rt;
    weft__autopin *ap = &rt->autopin;
    if (atomic_load_explicit(&ap->state, memory_order_relaxed) != WEFT__AP_WATCHING) {
        w->pin_left = UINT64_MAX; /* pinned, or given up: no more samples */
        return;
    }
    uint64_t now = weft__now_ns();
    /* The next sample about WEFT__PIN_EVERY_NS of running from now, if the
     * tasks to come are as long as those since the last. */
    uint64_t dt = w->pin_last_ns && now > w->pin_last_ns ? now - w->pin_last_ns : 0;
    uint64_t every = dt ? w->pin_every * WEFT__PIN_EVERY_NS / dt : w->pin_every * 2;
    every = every < 1 ? 1 : every > (1u << 20) ? (1u << 20) : every;
    w->pin_every = w->pin_left = every;
    w->pin_last_ns = now;
    int cpu = sched_getcpu();
    if (cpu < 0) { /* no way to tell where workers run */
        int watching = WEFT__AP_WATCHING;
        if (atomic_compare_exchange_strong(&ap->state, &watching, WEFT__AP_OFF))
            note(rt, w->index, now, "workers not pinned", "sched_getcpu failed: the workers stay unpinned");
        return;
    }
    atomic_store_explicit(&w->pin_sample, (uint64_t)(cpu + 1) << 48 | ((now / 1000) & ((1ull << 48) - 1)),
                          memory_order_relaxed);
    if (now >= atomic_load_explicit(&ap->next_scan, memory_order_relaxed) &&
        !atomic_exchange_explicit(&ap->deciding, true, memory_order_acquire)) {
        /* (again under the lock: a scan with a later clock may have run
         * since the look above) */
        if (now >= atomic_load_explicit(&ap->next_scan, memory_order_relaxed) &&
            atomic_load_explicit(&ap->state, memory_order_relaxed) == WEFT__AP_WATCHING)
            scan(rt, w->index, now);
        atomic_store_explicit(&ap->deciding, false, memory_order_release);
    }
}
