/*
 * internal.h — what every layer of Weft shares (not installed): the panic
 * macros, the one allocator, type-stable handle slots, small atomic helpers,
 * and (base.h) error reporting and the clock.  Nothing here knows any
 * layer's structs: each layer owns its own in its own header (see
 * docs/design.md):
 *
 *   api/      front end: the public functions of weft.h (api/runtime.h: the runtime)
 *   trace.h   observability: an observer of the workers
 *   worker.h  execution: worker threads, running bodies, helping while waiting, observers
 *   graph/    tasks, edges, the per-data access history, task spaces
 *   sched/    ready queues, mapping a task to a device, parking and waking
 *   data/     data handles and their per-device replicas
 *   device/   the device interface and its kinds (host, virtual GPUs, CUDA)
 *   comm/     communicator backends
 *   wait.h    the one wait engine (sleeping until an event, helping, pollers)
 *   alloc.c   the allocator and handle slots (this header)
 *   base.h    errors and the clock
 *
 * Calls run one way: api -> trace -> worker -> graph -> sched/data -> device
 * -> wait -> alloc -> base, and api -> comm -> data; scripts/layers.py holds
 * the table and checks it (the ctest test "layers").
 *
 * Naming: public weft_*, internal non-static weft__*, everything else static.
 */
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#include "weft.h"
#include "base.h" /* errors and the clock */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define WEFT__CACHELINE 64

/* An impossible state: abort with file and line (convention 4). */
#define WEFT__PANIC(msg)                                                                \
    do {                                                                                \
        fprintf(stderr, "weft: internal error at %s:%d: %s\n", __FILE__, __LINE__, msg); \
        abort();                                                                        \
    } while (0)
#define WEFT__CHECK(cond) \
    do {                  \
        if (!(cond))      \
            WEFT__PANIC("check failed: " #cond); \
    } while (0)

#define WEFT__CONTAINER(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* ------------------------------------------------------------------------ */
/* alloc.c: the one allocator, with failure injection for tests              */
/* ------------------------------------------------------------------------ */

void *weft__alloc(size_t n);             /* NULL on (real or injected) failure */
void *weft__alloc_aligned(size_t align, size_t n); /* free with weft__free */
void *weft__realloc(void *p, size_t n);  /* NULL on failure; p is untouched then */
void weft__free(void *p);
char *weft__strdup(const char *s);

/*
 * Type-stable slots for handles.  Every object a user can hold a pointer to
 * (runtime, task, data, task space) lives in a slot that is never returned to
 * the system while the process runs: it goes back to a pool and is reused.  A
 * handle is the slot address with the slot's generation in its low bits, so a
 * stale handle is recognised (generation mismatch) instead of touching freed
 * memory.  Each pool holds one struct type; its owner passes the size.
 */
#define WEFT__SLOT_ALIGN 128u
#define WEFT__GEN_MASK (WEFT__SLOT_ALIGN - 1u)

typedef struct weft__slot {
    _Atomic uint32_t gen;     /* bumped each time the slot is freed */
    uint16_t pool_id;
    uint16_t batch_len;       /* free slots: length of the batch this one heads */
    struct weft__slot *free_next;
    struct weft__slot *batch_next; /* free slots: next batch in the pool */
} weft__slot;

/* Bytes after the header of a task slot that the allocator does not zero:
 * the task's reference count (graph/graph.h checks the layout). */
#define WEFT__TASK_SLOT_KEEP 4

typedef enum weft__pool_id {
    WEFT__POOL_TASK,
    WEFT__POOL_DATA,
    WEFT__POOL_RUNTIME,
    WEFT__POOL_SPACE,
    WEFT__POOL_COMM,
    WEFT__NPOOLS
} weft__pool_id;

/* A slot of `size` bytes (the same size every time for one pool), zeroed
 * except the header for task slots; NULL on failure. */
void *weft__slot_alloc(weft__pool_id pool, size_t size);
void weft__slot_free(void *slot);            /* bumps the generation */
size_t weft__slot_size(weft__pool_id pool);

static inline void *weft__handle_encode(void *slot)
{
    weft__slot *s = slot;
    return (void *)((uintptr_t)slot | (atomic_load_explicit(&s->gen, memory_order_relaxed) & WEFT__GEN_MASK));
}
/* The slot behind a handle, or NULL if the handle is stale or NULL. */
static inline void *weft__handle_decode(const void *h)
{
    if (!h)
        return NULL;
    weft__slot *s = (weft__slot *)((uintptr_t)h & ~(uintptr_t)WEFT__GEN_MASK);
    uint32_t g = atomic_load_explicit(&s->gen, memory_order_acquire);
    return ((uintptr_t)h & WEFT__GEN_MASK) == (g & WEFT__GEN_MASK) ? s : NULL;
}

/* What a progress step found (a poller's result: wait.h, comm/comm.h):
 * nothing in flight, work in flight of which nothing ended, or something
 * ended. */
enum { WEFT__POLL_IDLE = 0, WEFT__POLL_BUSY = 1, WEFT__POLL_ENDED = 2 };

/* relaxed single-writer counter increment (no lock prefix) */
static inline void weft__count(_Atomic uint64_t *c, uint64_t n)
{
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n, memory_order_relaxed);
}

static inline void weft__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
