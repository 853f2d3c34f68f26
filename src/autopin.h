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
 *     (weft__autopin_packed).  A packed scan opens a window.
 *   - Idle time.  Each CPU's idle time, read at every scan of a window:
 *     from cpuidle (/sys/devices/system/cpu/cpuN/cpuidle/stateK/time,
 *     microseconds) where every CPU of the set has it, else from /proc/stat
 *     (ticks of USER_HZ, 10 ms at 100 Hz).  cpuidle adds an idle period
 *     when it ends: a CPU idle since before a reading, and still, shows
 *     less than it had, so the rule errs towards not pinning.  A CPU
 *     asleep through every burst of tasks (nothing else woke it during
 *     them) shows its idle only after each burst, outside the window's
 *     counted time: such bursts are pinned only once a burst finds it
 *     woken during it (docs/performance.md).
 *   - The window counts only the time the workers were busy: the interval
 *     from one scan to the next, with the idle time the CPUs had in it,
 *     when the scans were less than WEFT__PIN_GAP_NS apart.  Scans further
 *     apart mean the workers went idle in between (the program was doing
 *     something else, or waiting): that interval is left out and the
 *     window goes on from the scan that follows (a new segment), so that
 *     bursts of tasks a few milliseconds long, with pauses between them,
 *     add up.  A scan that finds fewer than two workers busy (a burst
 *     starting or ending) is no evidence either way, and is treated as a
 *     pause.  (A pause shorter than WEFT__PIN_GAP_NS counts as busy time, its idle
 *     included: in a program that pauses its tasks that briefly, the idle
 *     counted is partly the workers' own.)  A pause longer than
 *     WEFT__PIN_STALE_NS closes the window.
 *     It also ends early (nothing decided) when more than a quarter of
 *     its counted scans were not packed; else once it has counted
 *     WEFT__PIN_MIN_SCANS scans and WEFT__PIN_WINDOW_NS (cpuidle) or
 *     WEFT__PIN_WINDOW_TICKS ticks (/proc/stat) of busy time, it decides.
 *   - The decision (weft__autopin_plan, a pure function of the scans'
 *     counts, the samples and the idle figures).  Pin when the workers are
 *     no more than the CPUs of the process's set (its affinity at
 *     weft_runtime_create), at least WEFT__PIN_MIN_SCANS scans were
 *     counted and three quarters of them packed, and the CPUs of the set
 *     were idle, together, at least half the busy time counted: half a
 *     CPU to spare.  Each CPU's idle is counted short by what its source
 *     may overstate: a tick per segment for /proc/stat, whose figures are
 *     whole ticks (a window of 3 ticks in one segment needs a CPU idle all
 *     3, or two idle 2 of them), a microsecond per segment for cpuidle.
 *     Not otherwise: no CPU time to spare means the CPUs are
 *     oversubscribed (other processes, other ranks) and pinning would not
 *     help.  A window that decides not to pin, or cannot read the idle
 *     figures, makes the next one wait
 *     WEFT__PIN_BACKOFF_NS, doubled at each such end up to
 *     WEFT__PIN_BACKOFF_MAX_NS (one that ends because the packing did not
 *     hold does not: packing that comes and goes with each burst of tasks
 *     is caught in the burst where it holds).
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
 * window's state (counts, idle figures, backoff) and the scratch arrays, and
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
#define WEFT__PIN_GAP_NS 10000000ull         /* a sample older is not busy; scans further apart: a pause */
#define WEFT__PIN_MIN_SCANS 5u               /* counted scans in a window, at least */
#define WEFT__PIN_WINDOW_TICKS 3u            /* busy time in a window, in /proc/stat's ticks */
#define WEFT__PIN_WINDOW_NS 4000000ull       /* busy time in a window, read from cpuidle */
#define WEFT__PIN_STALE_NS 1000000000ull     /* a pause in a window longer than this closes it */
#define WEFT__PIN_BACKOFF_NS 10000000ull     /* the wait for a window after one that led nowhere */
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

/* The decision at the end of a window: `scans` counted scans of which
 * `packed` found the workers packed; for each CPU of the set (cpus[0..
 * ncpus), ascending) its idle time (ns) in the window's counted busy time,
 * `busy_ns` long, each counted `slack_ns` short (what its source may
 * overstate); the samples at `now`.  On WEFT__PIN_GO assign[w] is worker
 * w's CPU (distinct, all in cpus).  Pure: no clock, no system call. */
int weft__autopin_plan(const weft__pin_sample *s, unsigned nworkers, const int *cpus, unsigned ncpus,
                       const uint64_t *idle_ns, uint64_t busy_ns, uint64_t slack_ns, unsigned scans,
                       unsigned packed, uint64_t now, int *assign);

/* The runtime's part (in weft__rt). */
typedef struct weft__autopin {
    _Atomic int state;              /* WEFT__AP_* */
    _Atomic bool deciding;          /* the try-lock */
    _Atomic uint64_t next_scan;     /* weft__now_ns of the next scan (under deciding) */
    _Atomic uint64_t pins;          /* weft_stats.autopins */
    /* Written at workers_start, read-only after. */
    unsigned ncpus;
    int *cpus;                      /* the set, ascending */
    unsigned *nstates;              /* [ncpus]: cpuidle states of each CPU; NULL: /proc/stat */
    uint64_t tick_ns;               /* one USER_HZ tick of /proc/stat, in ns */
    /* Under deciding. */
    bool open;                      /* a window is open */
    bool paused;                    /* a scan since its latest found fewer than two workers busy */
    uint64_t last_scan_ns;          /* the window's latest scan */
    unsigned scans, packed;         /* the window's counted scans, and those packed */
    unsigned segments;              /* its runs of scans without a pause */
    uint64_t busy_ns;               /* the time between its counted scans */
    uint64_t retry_ns;              /* no window before */
    uint64_t backoff_ns;
    uint64_t *prev_idle;            /* [ncpus]: each CPU's idle (ns) at the latest scan */
    uint64_t *idle;                 /* [ncpus]: each CPU's idle in the counted intervals */
    uint64_t *cur_idle;             /* [ncpus]: scratch */
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
