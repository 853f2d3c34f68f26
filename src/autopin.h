/*
 * autopin.h — weft_config.pin_workers = WEFT_PIN_AUTO (part of the
 * execution layer, beside worker.c): workers start unpinned; the runtime
 * notices when the operating system keeps two or more busy workers on one
 * CPU while CPUs the process may use idle, and then pins every worker to a
 * CPU of its own, once.
 *
 * How it notices, cheaply:
 *   - Samples.  Each worker counts down tasks as it starts them (a
 *     decrement and a branch per task); when the count runs out it takes a
 *     sample: the clock and sched_getcpu.  The count is recalibrated at
 *     each sample so that samples come about WEFT__PIN_EVERY_NS apart while
 *     the worker runs tasks (one per task for tasks that long, one per
 *     thousands for empty ones).  A worker keeps its latest sample: the CPU
 *     and the time.  A worker is busy when its latest sample is less than
 *     WEFT__PIN_GAP_NS old.
 *   - Scans.  At most once per WEFT__PIN_EVERY_NS in all, the worker whose
 *     sample finds a scan due looks at everyone's latest samples: packed
 *     now when two or more busy workers were on one CPU
 *     (weft__autopin_packed).  WEFT__PIN_SUSPECT_SCANS packed scans in a
 *     row make a suspicion: only then does it read each CPU's idle time
 *     from /proc/stat (the baseline).
 *   - The window.  From the baseline on, each scan counts, and whether it
 *     found the workers packed.  It ends early (nothing decided) when more
 *     than a quarter of the scans were not packed, or when scans stop for
 *     WEFT__PIN_GAP_NS (the workers went idle); else once
 *     WEFT__PIN_WINDOW_TICKS ticks of /proc/stat (USER_HZ: 30 ms at
 *     100 Hz) have passed, /proc/stat is read again and the decision made.
 *   - The decision (weft__autopin_plan, a pure function of the scans'
 *     counts, the samples and the idle figures).  Pin when the workers are
 *     no more than the CPUs of the process's set (its affinity at
 *     weft_runtime_create), at least WEFT__PIN_MIN_SCANS scans were made
 *     and three quarters of them packed, and the CPUs of the set were
 *     idle, together, at least half the window: half a CPU to spare,
 *     counting each CPU's idle a tick short (/proc/stat counts whole
 *     ticks: a window of 3 ticks needs a CPU idle all 3, or two idle 2 of
 *     them).  Not otherwise: no CPU time to spare means the CPUs are
 *     oversubscribed (other processes, other ranks) and pinning would not
 *     help.  A window that ends without pinning makes the next baseline
 *     wait WEFT__PIN_BACKOFF_NS, doubled at each such end up to
 *     WEFT__PIN_BACKOFF_MAX_NS.
 *   - Pinning, once (pthread_setaffinity_np): busy workers first, in
 *     order, keep the CPU of their latest sample if no worker has taken it
 *     yet (so one packed worker keeps the shared CPU), then the others
 *     (idle workers) keep theirs likewise; the workers left get the free
 *     CPUs, idlest first.  Every worker ends on a CPU of its own.  If the
 *     operating system refuses a CPU, every worker is put back on the
 *     whole set and the runtime stops watching.  weft_stats.autopins
 *     counts the pinning; the trace gets a note (observers' on_note).
 *
 * What protects what: a worker's latest sample is one atomic word
 * (pin_sample), written by that worker only, read by the decider.
 * `deciding` is a try-lock: the worker that takes it scans and decides;
 * the others, finding it taken, go on with their task.  It protects the
 * window's state (baseline, counts, backoff) and the scratch arrays, and
 * makes the pinning happen on one thread.  `state` (atomic) says whether
 * workers still sample; `next_scan` (atomic, written under `deciding`)
 * when the next scan is due.  The set of CPUs is written before the
 * workers start and only read after.  Pinning happens inside a task's
 * start, and destroy joins the workers only once no task is in flight, so
 * no worker is joined while another pins it.
 */
#ifndef WEFT_AUTOPIN_H
#define WEFT_AUTOPIN_H

#include "internal.h"

#include <sched.h>

#define WEFT__PIN_EVERY_NS 1000000ull        /* a worker's samples, and the scans: about 1 ms apart */
#define WEFT__PIN_GAP_NS 10000000ull         /* a sample older is not busy; scans further apart end a window */
#define WEFT__PIN_SUSPECT_SCANS 3u           /* packed scans in a row before a baseline */
#define WEFT__PIN_MIN_SCANS 8u               /* scans in a window, at least */
#define WEFT__PIN_WINDOW_TICKS 3u            /* /proc/stat ticks between its two reads */
#define WEFT__PIN_BACKOFF_NS 10000000ull     /* the wait for a baseline after a window that led nowhere */
#define WEFT__PIN_BACKOFF_MAX_NS 1000000000ull

/* One worker's latest sample. */
typedef struct weft__pin_sample {
    int cpu;          /* -1: none yet */
    uint64_t seen_ns; /* when (weft__now_ns) */
} weft__pin_sample;

/* The CPU that two or more busy workers' latest samples share at `now`
 * (the lowest if several), or -1. */
int weft__autopin_packed(const weft__pin_sample *s, unsigned nworkers, uint64_t now);

enum {
    WEFT__PIN_GO = 0,     /* pin: assign[] holds each worker's CPU */
    WEFT__PIN_NOT_PACKED, /* too few scans, or too few of them packed */
    WEFT__PIN_NO_IDLE,    /* packed, but the CPUs had not half a CPU of idle time */
    WEFT__PIN_TOO_MANY,   /* more workers than CPUs in the set */
};

/* The decision at the end of a window: `scans` scans of which `packed`
 * found the workers packed; for each CPU of the set (cpus[0..ncpus),
 * ascending) the idle ticks /proc/stat counted over the window,
 * `elapsed_ticks` long; the samples at `now`.  On WEFT__PIN_GO assign[w]
 * is worker w's CPU (distinct, all in cpus).  Pure: no clock, no system
 * call. */
int weft__autopin_plan(const weft__pin_sample *s, unsigned nworkers, const int *cpus, unsigned ncpus,
                       const uint64_t *idle_ticks, double elapsed_ticks, unsigned scans, unsigned packed,
                       uint64_t now, int *assign);

/* The runtime's part (in weft__rt). */
typedef struct weft__autopin {
    _Atomic int state;              /* WEFT__AP_* */
    _Atomic bool deciding;          /* the try-lock */
    _Atomic uint64_t next_scan;     /* weft__now_ns of the next scan (under deciding) */
    _Atomic uint64_t pins;          /* weft_stats.autopins */
    /* Written at workers_start, read-only after. */
    unsigned ncpus;
    int *cpus;                      /* the set, ascending */
    double ticks_per_ns;            /* USER_HZ / 1e9 */
    /* Under deciding. */
    unsigned streak;                /* packed scans in a row (no window open) */
    uint64_t base_ns;               /* the window's baseline; 0: no window open */
    uint64_t last_scan_ns;
    unsigned scans, packed;         /* the window's scans, and those packed */
    uint64_t retry_ns;              /* no baseline before */
    uint64_t backoff_ns;
    uint64_t *base_idle, *idle;     /* [ncpus]: /proc/stat idle + iowait ticks */
    weft__pin_sample *samples;      /* [nworkers] */
    int *assign;                    /* [nworkers] */
} weft__autopin;

enum { WEFT__AP_OFF = 0, WEFT__AP_WATCHING, WEFT__AP_PINNED };

struct weft__rt;
struct weft__worker;
/* Before the workers start: the set (the creating thread's CPUs, `set`;
 * empty when unknown) and whether to watch.  0 or WEFT_ENOMEM. */
int weft__autopin_init(struct weft__rt *rt, const cpu_set_t *set);
void weft__autopin_fini(struct weft__rt *rt);
/* The worker's countdown ran out (worker.c, as it starts a task). */
void weft__autopin_sample(struct weft__worker *w);

#endif
