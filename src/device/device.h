/*
 * device/device.h — the device interface: one table of operations per device
 * kind, modelled on what a CUDA device needs, so that the virtual-GPU and CUDA
 * kinds fit without touching the graph layer.
 *
 * A device has memory (allocated with capacity accounting), in-order queues
 * (streams), events (record on a queue, make a queue wait for one, query,
 * host wait through the wait engine), asynchronous copies, kernel launches
 * and completion reports: `notify` calls a function once all work queued on a
 * queue so far has finished (from the device's own thread, or from
 * `progress` for kinds whose completions are found by polling).  The layer
 * calls nothing above it: completions go up through the function given to
 * notify, and sleeping host waiters are woken through the waitset.
 *
 * Kinds: host (device/host.c: CPU cores and ordinary memory; work runs
 * inline), virtual GPUs (device/vgpu.c: simulated GPUs in host memory, each
 * queue served by a thread of its own; the test device of src/testing.h is
 * one with fixed delays), CUDA devices (device/cuda.c, the only file that
 * includes a CUDA header; device/cuda.h is its entry points).
 * device/spec.c parses the device string (weft_config.devices).
 */
#ifndef WEFT_DEVICE_H
#define WEFT_DEVICE_H

#include "internal.h"
#include "wait.h"

/* Devices in one runtime at most: the host and 64 others. */
#define WEFT__MAX_DEVICES 65

typedef struct weft__device weft__device;
typedef struct weft__dqueue weft__dqueue; /* an in-order queue (stream) */
typedef struct weft__devent weft__devent; /* an event */

/* A completion report: status 0, or a negative WEFT_E... code. */
typedef void (*weft__done_fn)(void *cookie, int status);
/* A host-function kernel (run by the device's queue): 0 or an error. */
typedef int (*weft__kernel_fn)(void *arg);

/* A piece of work a queue ran, for the trace (kinds that record them). */
typedef struct weft__span {
    uint64_t t0, t1;          /* weft__now_ns() at its start and end */
    size_t bytes;             /* a copy's size (0 for a kernel) */
    bool copy;
} weft__span;

/* A kernel to queue. */
typedef struct weft__launch {
    weft__kernel_fn fn;
    void *arg;
    uint64_t model_ns;        /* its modelled duration (0: as it runs) */
    const weft_range *rw;     /* the memory it reads and writes (nrw ranges, copied; may be
                                 NULL), which a kind may check (the checking mode) */
    size_t nrw;
    /* Where its failure goes (its non-zero return, or a failed check):
     * on_error(cookie, status), from the queue, before anything queued after
     * it runs; NULL: to the queue's next completion report.  A queue shared
     * by several tasks needs it, or one task's failure would be reported to
     * whichever task's report comes next. */
    weft__done_fn on_error;
    void *cookie;
    /* Asked, when the kernel is about to run, whether its task was
     * cancelled meanwhile (a predecessor whose events its queue waited for
     * failed): true, and fn does not run (NULL: it always runs).  A kind
     * that cannot ask runs it (on CUDA a failure is the context's). */
    bool (*skip)(void *cookie);
    /* Where the queue adds the time the kernel ran on the device (ns),
     * before anything queued after it runs (NULL: not asked).  A kind that
     * cannot time its kernels leaves it: the reader then falls back on
     * elapsed time (sched/eft.c). */
    _Atomic uint64_t *ran_ns;
} weft__launch;

typedef struct weft__device_ops {
    const char *kind;
    int (*start)(weft__device *dev);
    void (*stop)(weft__device *dev);             /* finishes queued work first */
    /* Memory: WEFT_ENOMEM when the capacity would be exceeded. */
    int (*mem_alloc)(weft__device *dev, size_t n, void **out);
    void (*mem_free)(weft__device *dev, void *p, size_t n);
    int (*queue_create)(weft__device *dev, weft__dqueue **out);
    void (*queue_destroy)(weft__dqueue *q);      /* finishes its work first */
    int (*event_create)(weft__device *dev, weft__devent **out);
    void (*event_destroy)(weft__devent *e);
    /* The event fires once the work queued on q so far has finished.  As
     * in CUDA, each record is its own: an event may be recorded again, on
     * any queue, before an earlier record fired, and a wait or a query is
     * about the newest record made before it (never recorded: fired).  A
     * record is made once it is queued: a wait or query made by another
     * thread while this call runs is about the record before. */
    int (*event_record)(weft__devent *e, weft__dqueue *q);
    /* Work queued on q from now on starts after e's newest record fired
     * (a later record does not count).  If e fired with
     * an error (its queue's first error before the record, not yet taken
     * by a report), q takes that error as its own, to give to its next
     * report: the work after the wait relied on the failed work (CUDA's
     * errors are sticky; the virtual GPU passes them on). */
    int (*queue_wait)(weft__dqueue *q, weft__devent *e);
    int (*event_query)(weft__devent *e);         /* 1 fired, 0 pending, < 0 error */
    /* Host wait for e (NULL: through the wait engine, the kind waking key e
     * when it fires); 0 or the error e fired with. */
    int (*event_wait)(weft__devent *e);
    /* Asynchronous copy of n bytes, ordered on q. */
    int (*copy)(weft__dqueue *q, void *dst, const void *src, size_t n);
    /* Asynchronous copy of `rows` rows of `width` bytes, the rows dpitch
     * bytes apart at dst and spitch apart at src (a tile with its halo),
     * ordered on q. */
    int (*copy2d)(weft__dqueue *q, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                  size_t rows);
    /* Queue a kernel (see weft__launch). */
    int (*launch)(weft__dqueue *q, const weft__launch *k);
    /* Call done(cookie, status) once the work queued on q so far finished;
     * status is the first error of that work, or 0.  A kind may call it
     * from within notify when that work has finished already (a virtual
     * GPU's idle queue): callers must not hold a lock done takes. */
    int (*notify)(weft__dqueue *q, weft__done_fn done, void *cookie);
    /* Report completions found by polling; returns how many (NULL: the kind
     * reports them from its own threads). */
    unsigned (*progress)(weft__device *dev);
    /* Whether work queued on q has not finished yet: 1 busy, 0 idle (a
     * hint, which may be stale at once).  NULL: the kind cannot tell. */
    int (*queue_busy)(weft__dqueue *q);
    /* The queue as its kind's own API knows it (a cudaStream_t), or NULL. */
    void *(*native_queue)(weft__dqueue *q);
    /* The work q has run, when the kind records it (NULL: it does not); read
     * once q is idle (the trace, at destroy). */
    size_t (*spans)(weft__dqueue *q, const weft__span **out);
} weft__device_ops;

struct weft__device {
    const weft__device_ops *ops;
    unsigned index;                /* in the runtime's device table; 0 is the host */
    weft_device_kind kind;
    int ordinal;                   /* among its kind (-1: the host) */
    char name[32];
    size_t capacity;               /* bytes; SIZE_MAX for unlimited */
    _Atomic size_t used;
    _Atomic size_t replicas;       /* of used: data replicas, which the data layer may evict
                                      (each counted as weft__device_bytes of its size) */
    weft__waitset *ws;             /* host waiters on this device's events */
    weft__dqueue *default_queue;   /* made by start */
    /* What the scheduler's models see (sched/eft.c): its architecture
     * ("cpu", "vgpu", "cuda:<product name>"), and its links: a copy of n
     * bytes to or from the host takes about link_ns + n / host_bw seconds'
     * worth (host_bw in bytes per second), one from another GPU link_ns +
     * n / peer_bw.  Set by the kind when the device is made (the host: 0). */
    char arch[48];
    uint64_t link_ns;
    double host_bw, peer_bw;
    void *impl;                    /* the kind's own state */
};

/* What an allocation of n bytes takes of a GPU's memory, as the placer
 * counts it: device allocations are 256-byte aligned (cudaMalloc's, the
 * virtual GPUs' arenas). */
static inline size_t weft__device_bytes(size_t n) { return (n + 255) / 256 * 256; }

/* Memory in host RAM, charged against dev's capacity (the host's and the
 * test device's mem_alloc/mem_free). */
int weft__device_host_mem_alloc(weft__device *dev, size_t n, void **out);
void weft__device_host_mem_free(weft__device *dev, void *p, size_t n);

/* Capacity accounting shared by the kinds: 0, or WEFT_ENOMEM. */
int weft__device_charge(weft__device *dev, size_t n);
void weft__device_uncharge(weft__device *dev, size_t n);

/* Queue fn(arg) on q with no ranges, its failure going to q's next report. */
static inline int weft__device_launch(const weft__device_ops *ops, weft__dqueue *q, weft__kernel_fn fn, void *arg,
                                      uint64_t model_ns)
{
    weft__launch k = {fn, arg, model_ns, NULL, 0, NULL, NULL, NULL, NULL};
    return ops->launch(q, &k);
}

/* Host wait for an event, through the wait engine (the kind wakes key e). */
int weft__device_event_wait(weft__device *dev, weft__devent *e);

/* The host device: one per runtime, index 0. */
weft__device *weft__host_device_new(weft__waitset *ws); /* NULL on ENOMEM */
void weft__device_delete(weft__device *dev);           /* stops it first */

/* ---- virtual GPUs (device/vgpu.c) ---- */
typedef struct weft__vgpu_params {
    size_t capacity;          /* bytes of its arena */
    uint64_t latency_ns;      /* copy model: fixed cost of one copy */
    double host_bw;           /* bytes/s between host memory and the device */
    double peer_bw;           /* bytes/s between two virtual GPUs */
    double local_bw;          /* bytes/s within the device */
    bool fixed_timing;        /* test device: each kernel/copy takes fixed_delay_ns (a kernel's
                                 model_ns if given), before it runs; no model */
    uint64_t fixed_delay_ns;
    bool check;               /* checking mode (device/vcheck.h); the default reads WEFT_VGPU_CHECK */
    bool trace;               /* record each kernel and copy (weft__span) for the trace */
    bool scheduled;           /* the seeded schedule (device/vsched.h), from schedule_seed; the
                                 default reads WEFT_VGPU_SCHEDULE */
    uint64_t schedule_seed;
    bool copy_timing_only;    /* copies take their modelled time and move nothing
                                 (WEFT_VGPU_COPIES=timing; never with check) */
} weft__vgpu_params;
void weft__vgpu_params_default(weft__vgpu_params *p);
/* A started virtual GPU (NULL on ENOMEM or if a thread could not start). */
weft__device *weft__vgpu_new(weft__waitset *ws, const weft__vgpu_params *p, const char *name);
/* The virtual GPU whose arena holds p, or NULL (host memory). */
weft__device *weft__vgpu_of(const void *p);
/* The copy model between two virtual GPUs, as dev's: latency and peer
 * bandwidth (the virtual communicator's links). */
void weft__vgpu_link(weft__device *dev, uint64_t *latency_ns, double *peer_bw);
/* The modelled duration of copying n bytes from src to dst, queued on dev. */
uint64_t weft__vgpu_copy_ns(const weft__vgpu_params *p, weft__device *dev, void *dst, const void *src, size_t n);

/* The test device (tests only; see testing.h): a virtual GPU with fixed delays. */
weft__device *weft__test_device_new(weft__waitset *ws, uint64_t delay_ns, size_t capacity);

/* ---- the device string (device/spec.c) ---- */
typedef struct weft__devspec {
    bool cpu;                 /* "cpu" */
    unsigned vgpus;           /* "vgpu[:N]" */
    bool cuda_all;            /* "cuda": every CUDA device found */
    bool cuda_optional;       /* the default: none found is fine */
    unsigned ncuda;           /* "cuda:I[,J...]": these ordinals */
    int cuda[WEFT__MAX_DEVICES - 1];
} weft__devspec;
/* Parse a device string (NULL or blank: the default, every CPU core and
 * every CUDA device found).  0, or WEFT_EINVAL with a message naming the bad
 * part in err. */
int weft__devspec_parse(const char *s, weft__devspec *out, char *err, size_t errlen);
/* Parse a device set of a placement ("cpu", "gpu:1", "2*gpu", "cpu+gpu")
 * into p's cpu, gpus and gpu: 0, or WEFT_EINVAL with the reason in err. */
int weft__placement_parse(const char *s, weft_placement *p, char *err, size_t errlen);

#endif
