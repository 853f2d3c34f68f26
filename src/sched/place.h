/*
 * sched/place.h — placement: which device set a ready task runs on, the
 * compute shares and memory it reserves there, the stream it gets on each
 * GPU, and the tasks that wait for resources others hold.
 *
 * The placer knows the runtime's GPUs (every device but the host) and one
 * mapping policy (a named table of functions: "load", "round-robin").  A
 * task with placements carries a weft__place (allocated at spawn); mapping
 * it reserves, releasing it gives back and hands over the tasks that waited.
 * The layer knows tasks only through an opaque owner pointer.
 */
#ifndef WEFT_SCHED_PLACE_H
#define WEFT_SCHED_PLACE_H

#include "internal.h"
#include "device/device.h"
#include "sched/perfmodel.h"

#define WEFT__SHARE_UNITS 1024u /* a whole GPU's compute, in units */
#define WEFT__STREAMS 4u        /* streams per GPU handed out in turn */
#define WEFT__ARCHS 4u          /* kinds of device the earliest-finish policy tells apart */
#define WEFT__CALIBRATE 3u      /* observations of a (kind, arch) before its model is trusted */

/* One alternative, checked and normalised at spawn. */
typedef struct weft__alt {
    bool cpu;
    bool possible;              /* some device set of the runtime can ever satisfy it */
    uint16_t gpus;              /* 0 .. 64 */
    int16_t gpu;                /* -1: any; else a GPU number */
    uint64_t set;               /* 0: any; else exactly these GPUs (bit g: GPU g), in order */
    uint16_t share;             /* units per GPU, 1 .. WEFT__SHARE_UNITS */
    size_t memory;              /* bytes per GPU */
    size_t data;                /* bytes of the task's data (its accesses not WEFT_HOST), reserved
                                   on each GPU like memory: its replicas fit there */
    uint16_t cpu_share;         /* a CPU-only alternative: units of the CPU it reserves (0: none;
                                   share is then the CPU's, not a GPU's) */
    size_t cpu_memory;          /* a CPU-only alternative: bytes of host memory it reserves */
    weft_body_fn body;          /* NULL: the task's */
} weft__alt;

/* A pooled event of one GPU: a task's completion event there. */
typedef struct weft__pevent {
    weft__devent *e;
    struct weft__pevent *next;  /* in the pool */
} weft__pevent;

typedef struct weft__place {
    void *owner;                /* the task (graph) */
    struct weft__place *parked_next;
    bool gpu_only;              /* every alternative that can run is GPUs only (no CPU):
                                   the task may start on its streams before its GPU
                                   predecessors finish, ordered by their events */
    _Atomic bool events_ready;  /* event[] recorded (release: read by successors) */
    int16_t near_gpu;           /* a GPU predecessor's first GPU, or where most of the task's
                                   data is; -1: none (see weft__place_map) */
    weft__dqueue *near_queue;   /* the predecessor's stream there (NULL: any) */
    /* Riding (under the placer's lock).  A task whose work on a GPU is
     * ordered after a predecessor's on the same stream cannot run there at
     * the same time: when it does not fit beside the predecessor, it may
     * ride on the predecessor's reservation (one rider per reservation, and
     * needing no more share or memory), taking it over when the predecessor
     * gives it back.  ride_on: the predecessor ridden on (during
     * weft__place_map, the candidate); rider: the task riding on this one's
     * reservation of gpu[0]. */
    struct weft__place *ride_on, *rider;
    bool riding;
    bool released;              /* its reservation was given back (under the lock) */
    bool lent;                  /* its share and memory are lent while its body waits
                                   (weft__place_lend; under the lock) */
    uint16_t nalt;
    int16_t chosen;             /* alternative mapped, -1 before */
    uint16_t ngpu;              /* GPUs of the chosen set */
    uint8_t *gpu;               /* GPU numbers of the chosen set */
    weft__dqueue **queue;       /* the stream on each */
    weft__pevent **event;       /* its completion event on each (events_ready) */
    uint16_t nevent;            /* events taken from the pools (given back at release) */
    /* The earliest-finish policy (weft__policy.eft; sched/eft.c).  Set at
     * spawn: the task's priority, the bytes of its accesses, its model on
     * each arch.  Set by the decision, under the placer's lock: the target
     * (an alternative and its GPUs, which the map then waits for), the
     * predicted execution and transfer times, and where the task is in the
     * device's accounting (queued when decided, running from its start,
     * done when it finished). */
    int priority;
    uint64_t size;
    weft__pm_model *model[WEFT__ARCHS];
    double cost;                /* weft_task_desc.cost (0: none) */
    weft__pm_model *per_cost[WEFT__ARCHS]; /* each arch's time per unit of cost (when cost > 0) */
    int16_t target;             /* the alternative decided on, -1: none yet */
    uint8_t tgpu[WEFT__MAX_DEVICES - 1];
    double pred_exec, pred_xfer, weight;
    double pred_fin;            /* its predicted finish when decided (weft__now_ns's clock) */
    int8_t pred_how;            /* WEFT__PM_*, or -1: calibrating */
    weft__pm_model *calibrates; /* the model it was sent to calibrate (counted pending), or NULL */
    uint8_t acct;               /* WEFT__ACCT_* */
    uint64_t t_start, t_commit;
    /* Its time measured on the devices, for its model: what its kernels on
     * its first GPU ran there, as that GPU's kind timed them (0: none timed),
     * and when its body returned (0: not yet).  Written by the queue's and
     * the body's threads, read once it finished. */
    _Atomic uint64_t ran_ns, body_end;
    weft__alt alt[];            /* then queue[], event[], gpu[] */
} weft__place;

enum { WEFT__ACCT_NONE = 0, WEFT__ACCT_QUEUED, WEFT__ACCT_RUNNING, WEFT__ACCT_DONE };

typedef struct weft__placer weft__placer;

/* A mapping policy: choose k GPUs for alternative a among those that can
 * take it now (fits(p, g, a) says which), into out[]; false if there are
 * not k.  Called with the placer's lock held. */
typedef struct weft__policy {
    const char *name;
    bool (*choose)(weft__placer *p, const weft__alt *a, uint8_t *out);
    bool balance; /* among a task's alternatives that fit, the least loaded (else the first) */
    bool eft;     /* earliest finish: decide once, when ready, where it would finish first
                     (sched/eft.c), then wait for that device set */
} weft__policy;

/* The earliest-finish policy's view of one device (the CPU's workers as
 * one pool of `slots`, or a GPU as one): the predicted work decided on it
 * and not started (ns, weighted by the share of the device each task
 * takes) and its weights, and of the running tasks the sum of their
 * weighted predicted ends and of their weights: its backlog for a task of
 * priority p is the queued work of priority p or higher + (Σ end·w −
 * now·Σ w), over slots — none for a task that fits beside what is
 * decided there (the weights, its own too, within the slots). */
#define WEFT__EFT_PRIOS 32  /* priorities told apart in a device's queued work */
typedef struct weft__eft_dev {
    /* The queued work by priority: a task parked for the device waits
     * only for those of its priority or higher (the parked list is in
     * priority order).  Bucket k holds priority prio[k]; more distinct
     * priorities than buckets share the last, counted for every task. */
    double queued_at[WEFT__EFT_PRIOS], queued_w_at[WEFT__EFT_PRIOS];
    int prio[WEFT__EFT_PRIOS];
    unsigned nprio;
    double queued, queued_w, run_end, run_w;
    unsigned running;
    unsigned slots;
    uint64_t last_done;         /* a GPU: when its last task's work completed */
    uint64_t chosen;            /* the placer's decision count when a task last went here */
} weft__eft_dev;

struct weft__placer {
    /* lock protects everything below that changes after init: shares, loads,
     * the stream cursors, the round-robin cursor and the parked list.
     * Nothing nests under it. */
    pthread_mutex_t lock;
    const weft__policy *policy;
    unsigned ngpu;
    weft__device *gpu[WEFT__MAX_DEVICES - 1];
    uint8_t dev_index[WEFT__MAX_DEVICES - 1];   /* runtime device index of each GPU */
    weft__dqueue *streams[WEFT__MAX_DEVICES - 1][WEFT__STREAMS];
    uint32_t next_stream[WEFT__MAX_DEVICES - 1];
    uint32_t share_used[WEFT__MAX_DEVICES - 1]; /* units */
    uint32_t load[WEFT__MAX_DEVICES - 1];       /* tasks mapped there, not finished */
    /* Bytes reserved by the tasks mapped there (memory + data), and of
     * those the memory charged to the device (weft_placement.memory): what
     * the device holds beyond these and its data replicas was taken outside
     * the placer.  Replicas of no mapped task can be evicted, so they never
     * keep a task from fitting. */
    size_t reserved[WEFT__MAX_DEVICES - 1], quota[WEFT__MAX_DEVICES - 1];
    /* The CPU's reservations by CPU-only alternatives that ask for a share
     * or memory (weft_placement on "cpu"): units of the CPU's one whole,
     * bytes of the host's physical memory (cpu_capacity), tasks holding
     * them. */
    uint32_t cpu_share_used, cpu_load;
    size_t cpu_reserved, cpu_capacity;
    /* Tasks mapped on CPU-only alternatives, and the workers that run them
     * (cpu_slots, set by the runtime): the CPU's load for "balance". */
    uint32_t cpu_mapped, cpu_slots;
    uint32_t rr;
    weft__place *parked, *parked_tail;          /* waiting for resources, oldest first (under
                                                   the earliest-finish policy: by priority,
                                                   then in the order decided) */
    /* The earliest-finish policy: the models (NULL: none, and the policy
     * spreads tasks by their number instead), the archs (0: the CPU's;
     * a GPU's in gpu_arch[]), each device's accounting (0: the CPU, 1 + g:
     * GPU g), and what its predictions were worth (weft_stats). */
    weft__perfmodel *pm;
    unsigned narch;
    char arch[WEFT__ARCHS][WEFT__PM_NAME];
    uint8_t gpu_arch[WEFT__MAX_DEVICES - 1];
    weft__eft_dev eft[WEFT__MAX_DEVICES];
    uint64_t pm_hits, pm_fits, pm_calibrating, pm_mispredicted;
    uint64_t decisions;                         /* tasks decided (stamps weft__eft_dev.chosen) */
    /* Under the policy, the task holding each GPU whole (the one a task
     * decided on that GPU may ride on, its work queued after the holder's
     * on its stream), and the tasks decided on the CPU that hold a worker
     * slot (at most eft[0].slots). */
    weft__place *holder[WEFT__MAX_DEVICES - 1];
    uint32_t eft_cpu_mapped;
    weft__pevent *events[WEFT__MAX_DEVICES - 1]; /* spare events of each GPU */
    _Atomic bool hints_told;                    /* weft__place_hints_unused has warned */
};

/* A task with placements carries a kind or a cost, which p's policy does
 * not use: a warning on stderr, the first time only.  Any thread. */
void weft__place_hints_unused(weft__placer *p);

/* The policy of this name (NULL: the default), or NULL if unknown. */
const weft__policy *weft__policy_find(const char *name);
/* Whether GPU g can take alternative a now (share and memory free). */
bool weft__placer_fits(const weft__placer *p, unsigned g, const weft__alt *a);

/* Set up over devices dev[1 .. ndev-1] (their streams are created here).
 * 0, or an error of the device (WEFT_ENOMEM, ...).  fini destroys the
 * streams (finishing their work). */
int weft__placer_init(weft__placer *p, weft__device *const *dev, unsigned ndev, const weft__policy *policy);
void weft__placer_fini(weft__placer *p);

/* A task's placement from its descriptor's alternatives, for owner, whose
 * data (on a GPU) is `data` bytes: 0, or WEFT_ENOMEM, or WEFT_EINVAL when
 * no alternative could ever run (the message, under fn, says why for each,
 * a GPU too small for the data and memory among the reasons).  Never
 * blocks. */
int weft__place_new(const weft__placer *p, const weft_placement *alts, size_t n, size_t data, void *owner,
                    const char *fn, weft__place **out);
void weft__place_free(weft__place *pl);

/* Record pl's completion event on each of its streams (after the work the
 * body queued there) and publish them (events_ready).  false if an event
 * could not be had (nothing is published then). */
bool weft__place_record(weft__placer *p, weft__place *pl);
/* Make each of pl's streams wait for the completion events of pred (a
 * task's placement whose events_ready is set).  An event of another kind of
 * device than the stream's is waited for on the host.  0 or an error of the
 * device. */
int weft__place_wait_for(weft__placer *p, weft__place *pl, const weft__place *pred);
/* The GPU number of runtime device index dev, or -1 (the host, a test device). */
int weft__placer_gpu_of(const weft__placer *p, unsigned dev);
/* The runtime device of GPU g (for the graph's reports). */
static inline weft__device *weft__place_gpu(const weft__placer *p, const weft__place *pl, unsigned k)
{
    return p->gpu[pl->gpu[k]];
}

/* Map pl now (reserve, pick streams): 1; or park it and return 0 (a later
 * release hands it back); or -1 when it does not fit and no task holds a
 * reservation that could be given back (memory taken outside the placer):
 * waiting would never end.  A one-GPU alternative goes, when it fits there,
 * to near_gpu and near_queue (the graph sets them to a predecessor's whose
 * events order it): a chain then stays in one stream, in order, with no
 * event to wait for across streams.  Under the earliest-finish policy the
 * device set is decided first (once: sched/eft.h) from xfer, the
 * predicted time (ns) to bring pl's data to each device (0: the host,
 * 1 + g: GPU g); then pl waits for that set, and may ride on the task
 * holding its GPU (its work queued after the holder's).  xfer is not read
 * under other policies (NULL is fine there). */
int weft__place_map(weft__placer *p, weft__place *pl, const double *xfer);
/* Give pl's reservation and its events back (if it was mapped), then map the parked
 * placements in the order they parked until one does not fit.  Returns
 * those it mapped (linked by parked_next) for the caller to queue — and,
 * when no task holds a GPU any more, the rest too, unmapped (chosen < 0):
 * no release will come to map them (as weft__place_map's -1). */
weft__place *weft__place_release(weft__placer *p, weft__place *pl);

/* Lend pl's compute share and memory reservation (mapped, not released)
 * while its task's body waits: the placement stays pl's (its GPUs, streams
 * and load), but the parked placements that now fit are mapped and
 * returned, as weft__place_release's.  NULL if there was nothing to lend.
 * unlend takes them back unconditionally (the GPU may be over-committed
 * until a task finishes). */
weft__place *weft__place_lend(weft__placer *p, weft__place *pl);
void weft__place_unlend(weft__placer *p, weft__place *pl);

/* The earliest-finish policy (sched/eft.c).  Before the workers start:
 * the models (pm, owned by the caller; NULL: none) and the arch of the CPU
 * and of each GPU (its weft__device.arch). */
void weft__placer_models(weft__placer *p, weft__perfmodel *pm);
/* At spawn, under the policy: pl's kind (its models on every arch), its
 * priority, the bytes of its accesses and its cost (weft_task_desc.cost).
 * Never fails (a model that could not be made predicts nothing). */
void weft__place_kind(weft__placer *p, weft__place *pl, const char *kind, int priority, uint64_t size,
                      double cost);
/* pl's task starts its body now (its device's work moves from queued to
 * running). */
void weft__place_started(weft__placer *p, weft__place *pl);
/* pl's task's body returned (its GPU work may still run).  Any thread. */
void weft__place_body_returned(weft__place *pl);
/* pl's task finished (ok: completed, its time a fair observation): its
 * work leaves its device's accounting, and its time goes into its model
 * (on a GPU whose kind times kernels, what they ran there; else elapsed
 * time: sched/eft.c, stop_running). */
void weft__place_finished(weft__placer *p, weft__place *pl, bool ok);

/* The body of the chosen alternative (or dflt). */
static inline weft_body_fn weft__place_body(const weft__place *pl, weft_body_fn dflt)
{
    weft_body_fn b = pl && pl->chosen >= 0 ? pl->alt[pl->chosen].body : NULL;
    return b ? b : dflt;
}

#endif
