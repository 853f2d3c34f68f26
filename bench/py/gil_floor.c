/*
 * gil_floor.c — the floor under bench/py/gil.py's GIL-contention figures:
 * the same bodies (f*T us holding a lock or the GIL, (1-f)*T us without)
 * run with the least machinery that can run them, so that Weft's figures
 * can be set beside what CPython and the OS allow on this machine.
 * bench/py/gil_floor.py builds it (cc -shared, with Python's headers) and
 * loads it with ctypes; no Weft code is involved.
 *
 * Three groups of entry points:
 *
 *   floor_pingpong()  two threads pass a token back and forth, through a
 *                     mutex and condition variable (the waiter sleeps) or an
 *                     atomic flag (the waiter spins): the one-way cost of a
 *                     hand-off between two cores.
 *   floor_c_bodies()  the bodies in pure C: two pthreads (or one, for the
 *                     sequential figure), a lock in place of the GIL, taken
 *                     for the first f*T us of each body.  The lock is either
 *                     a mutex, condition variable and flag (the shape of
 *                     CPython's GIL: a taker that finds it held sleeps in
 *                     the condition variable, the dropper signals it), or
 *                     a spin lock.
 *   floor_capi_bodies()  the bodies in CPython: pthreads made here, each
 *                     attaching to the interpreter once (PyGILState_Ensure)
 *                     and then, per body, calling a Python function (the
 *                     f*T us part, the GIL held), PyEval_SaveThread, a busy
 *                     loop of (1-f)*T us, PyEval_RestoreThread: one release
 *                     and one take of the GIL per body, the least CPython's
 *                     public API allows for a body that releases it once.
 *                     With spin != 0 a thread first spins while the GIL is
 *                     held (reading CPython's internal GIL state, as
 *                     python/weft/gil_state.c does), then takes it: what the
 *                     take would cost if CPython's waiter did not sleep.
 *
 * floor_set_pin(1) pins the body threads of the later runs one per CPU
 * (the scheduler may otherwise put both on one CPU: on this project's
 * 2-vCPU VM it often does, leaving the other idle).
 *
 * Either group optionally runs "keep-awake" threads (SCHED_IDLE, one per
 * CPU, each spinning on its own CPU while a run lasts): a CPU that would
 * otherwise go idle stays running, so a wake-up preempts a spinner instead
 * of waking a halted virtual CPU; it tells how much of a sleeping hand-off's
 * cost is the idle CPU's wake-up.
 */
#define _GNU_SOURCE
#include <patchlevel.h>
#include <pyconfig.h>
#if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000
#define FLOOR_GIL_LAYOUT_KNOWN 1
#define Py_BUILD_CORE 1
#endif
#include <Python.h>
#ifdef FLOOR_GIL_LAYOUT_KNOWN
#if PY_VERSION_HEX < 0x030C0000
#include "internal/pycore_runtime.h"
#else
#include "internal/pycore_interp.h"
#endif
#endif

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

static uint64_t
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void
cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Busy for ns nanoseconds (the same loop as gil.py's C part). */
void
floor_spin(uint64_t ns)
{
    uint64_t t0 = now_ns();
    while (now_ns() - t0 < ns) {
    }
}

/* ------------------------------------------------------------------------ */
/* Pinning                                                                   */
/* ------------------------------------------------------------------------ */

static int pin_on;           /* floor_set_pin: body threads pinned, one per CPU */
static atomic_int pin_next;  /* the next body thread's index (reset per run) */

/* Pin body threads to distinct CPUs (on != 0) or leave them to the
 * scheduler (0, the default). */
void
floor_set_pin(int on)
{
    pin_on = on;
}

/* Pin the calling body thread to the CPU its index names (pinning on). */
static void
pin_self(void)
{
    if (!pin_on) return;
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all) != 0) return;
    int k = atomic_fetch_add(&pin_next, 1) % CPU_COUNT(&all);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &all) && k-- == 0) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            pthread_setaffinity_np(pthread_self(), sizeof one, &one);
            return;
        }
}

/* ------------------------------------------------------------------------ */
/* Keep-awake threads                                                        */
/* ------------------------------------------------------------------------ */

#define MAX_CPUS 64

static atomic_int awake_stop;
static pthread_t awake_thr[MAX_CPUS];
static int awake_n;

static void *
awake_main(void *arg)
{
    int cpu = (int)(intptr_t)arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
    while (!atomic_load_explicit(&awake_stop, memory_order_relaxed)) cpu_relax();
    return NULL;
}

static void
awake_start(int on)
{
    awake_n = 0;
    if (!on) return;
    atomic_store(&awake_stop, 0);
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    for (int c = 0; c < MAX_CPUS && c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set) && pthread_create(&awake_thr[awake_n], NULL, awake_main, (void *)(intptr_t)c) == 0)
            awake_n++;
}

static void
awake_stop_all(void)
{
    atomic_store(&awake_stop, 1);
    for (int i = 0; i < awake_n; i++) pthread_join(awake_thr[i], NULL);
    awake_n = 0;
}

/* ------------------------------------------------------------------------ */
/* Ping-pong                                                                 */
/* ------------------------------------------------------------------------ */

struct pingpong {
    pthread_mutex_t m; /* protects turn (condvar mode) */
    pthread_cond_t c;
    atomic_int turn; /* whose turn: 0 or 1 */
    long iters;
    int spin;
};

static void
pp_wait_turn(struct pingpong *p, int me)
{
    if (p->spin) {
        while (atomic_load_explicit(&p->turn, memory_order_acquire) != me) cpu_relax();
        return;
    }
    pthread_mutex_lock(&p->m);
    while (atomic_load_explicit(&p->turn, memory_order_relaxed) != me) pthread_cond_wait(&p->c, &p->m);
    pthread_mutex_unlock(&p->m);
}

static void
pp_give_turn(struct pingpong *p, int to)
{
    if (p->spin) {
        atomic_store_explicit(&p->turn, to, memory_order_release);
        return;
    }
    pthread_mutex_lock(&p->m);
    atomic_store_explicit(&p->turn, to, memory_order_relaxed);
    pthread_cond_broadcast(&p->c);
    pthread_mutex_unlock(&p->m);
}

static void *
pp_partner(void *arg)
{
    struct pingpong *p = arg;
    for (long i = 0; i < p->iters; i++) {
        pp_wait_turn(p, 1);
        pp_give_turn(p, 0);
    }
    return NULL;
}

/* Nanoseconds per one-way hand-off (half a round trip), over iters round
 * trips; spin: the waiter spins instead of sleeping; awake: keep-awake
 * threads run meanwhile.  -1 if a thread could not be made. */
double
floor_pingpong(long iters, int spin, int awake)
{
    struct pingpong p = {.iters = iters, .spin = spin};
    pthread_mutex_init(&p.m, NULL);
    pthread_cond_init(&p.c, NULL);
    atomic_init(&p.turn, 0);
    awake_start(awake);
    pthread_t t;
    double r = -1;
    if (pthread_create(&t, NULL, pp_partner, &p) == 0) {
        uint64_t t0 = now_ns();
        for (long i = 0; i < iters; i++) {
            pp_wait_turn(&p, 0);
            pp_give_turn(&p, 1);
        }
        pp_wait_turn(&p, 0);
        r = (double)(now_ns() - t0) / (2.0 * (double)iters);
        pthread_join(t, NULL);
    }
    awake_stop_all();
    pthread_mutex_destroy(&p.m);
    pthread_cond_destroy(&p.c);
    return r;
}

/* ------------------------------------------------------------------------ */
/* Bodies in pure C, a lock in place of the GIL                              */
/* ------------------------------------------------------------------------ */

struct clock_gil {
    pthread_mutex_t m; /* protects locked (sleeping mode) */
    pthread_cond_t c;
    atomic_int locked;
    int spin;
};

static void
cgil_take(struct clock_gil *g)
{
    if (g->spin) {
        for (;;) {
            int exp = 0;
            if (atomic_load_explicit(&g->locked, memory_order_relaxed) == 0 &&
                atomic_compare_exchange_weak_explicit(&g->locked, &exp, 1, memory_order_acquire,
                                                      memory_order_relaxed))
                return;
            cpu_relax();
        }
    }
    pthread_mutex_lock(&g->m);
    while (atomic_load_explicit(&g->locked, memory_order_relaxed)) pthread_cond_wait(&g->c, &g->m);
    atomic_store_explicit(&g->locked, 1, memory_order_relaxed);
    pthread_mutex_unlock(&g->m);
}

static void
cgil_drop(struct clock_gil *g)
{
    if (g->spin) {
        atomic_store_explicit(&g->locked, 0, memory_order_release);
        return;
    }
    pthread_mutex_lock(&g->m);
    atomic_store_explicit(&g->locked, 0, memory_order_relaxed);
    pthread_cond_signal(&g->c);
    pthread_mutex_unlock(&g->m);
}

struct cbodies {
    struct clock_gil *g;
    atomic_long next; /* the next body to run */
    long n;
    uint64_t held_ns, free_ns;
};

static void *
cbodies_main(void *arg)
{
    struct cbodies *b = arg;
    pin_self();
    while (atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed) < b->n) {
        cgil_take(b->g);
        floor_spin(b->held_ns);
        cgil_drop(b->g);
        floor_spin(b->free_ns);
    }
    return NULL;
}

/* Wall nanoseconds for n bodies of held_ns (the lock held) + free_ns on
 * `threads` pthreads (1 or 2); spin: a spin lock, else a sleeping one;
 * awake: keep-awake threads run meanwhile.  0 on failure. */
uint64_t
floor_c_bodies(long n, uint64_t held_ns, uint64_t free_ns, int threads, int spin, int awake)
{
    struct clock_gil g = {.spin = spin};
    pthread_mutex_init(&g.m, NULL);
    pthread_cond_init(&g.c, NULL);
    atomic_init(&g.locked, 0);
    struct cbodies b = {.g = &g, .n = n, .held_ns = held_ns, .free_ns = free_ns};
    atomic_init(&b.next, 0);
    if (threads < 1) threads = 1;
    if (threads > 8) threads = 8;
    pthread_t t[8];
    int made = 0;
    atomic_store(&pin_next, 0);
    awake_start(awake);
    uint64_t t0 = now_ns();
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[made], NULL, cbodies_main, &b) == 0) made++;
    for (int i = 0; i < made; i++) pthread_join(t[i], NULL);
    uint64_t wall = now_ns() - t0;
    awake_stop_all();
    pthread_mutex_destroy(&g.m);
    pthread_cond_destroy(&g.c);
    return made == threads ? wall : 0;
}

/* ------------------------------------------------------------------------ */
/* Bodies in CPython through its public API                                  */
/* ------------------------------------------------------------------------ */

struct capi {
    PyObject *py; /* the Python part: called with no arguments */
    atomic_long next;
    long n;
    uint64_t free_ns;
    int spin;
    atomic_int failed;
};

#ifdef FLOOR_GIL_LAYOUT_KNOWN
static _Atomic int *gil_locked; /* CPython's GIL's `locked`, read without its mutex */
#endif

/* Spin while the GIL is held (at most 1 ms), then take it. */
static void
capi_take(struct capi *c, PyThreadState *ts)
{
#ifdef FLOOR_GIL_LAYOUT_KNOWN
    if (c->spin && gil_locked) {
        uint64_t t0 = now_ns();
        for (unsigned k = 1; atomic_load_explicit(gil_locked, memory_order_relaxed); k++) {
            cpu_relax();
            if ((k & 63) == 0 && now_ns() - t0 > 1000000) break;
        }
    }
#endif
    PyEval_RestoreThread(ts);
}

static void *
capi_main(void *arg)
{
    struct capi *c = arg;
    pin_self();
    PyGILState_STATE st = PyGILState_Ensure();
    PyThreadState *ts = PyThreadState_Get();
    while (atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed) < c->n) {
        PyObject *r = PyObject_CallNoArgs(c->py);
        if (r == NULL) {
            PyErr_Clear();
            atomic_store(&c->failed, 1);
            break;
        }
        Py_DECREF(r);
        PyEval_SaveThread();
        floor_spin(c->free_ns);
        capi_take(c, ts);
    }
    PyGILState_Release(st);
    return NULL;
}

/* Look up the GIL's `locked` field, checked against the caller (which
 * holds the GIL: it must read 1). */
static int
capi_gil_view(void)
{
#ifdef FLOOR_GIL_LAYOUT_KNOWN
#if PY_VERSION_HEX < 0x030C0000
    struct _gil_runtime_state *g = &_PyRuntime.ceval.gil;
#else
    struct _gil_runtime_state *g = PyInterpreterState_Get()->ceval.gil;
#endif
    gil_locked = g ? (_Atomic int *)(void *)&g->locked : NULL;
    if (gil_locked && atomic_load(gil_locked) != 1) gil_locked = NULL;
    return gil_locked != NULL;
#else
    return 0;
#endif
}

/* Whether floor_capi_bodies(spin=1) can spin on this interpreter (call
 * with the GIL held: ctypes.PyDLL). */
int
floor_capi_can_spin(void)
{
    return capi_gil_view();
}

/* Call with the GIL held (ctypes.PyDLL).  Wall nanoseconds for n bodies:
 * py() then free_ns without the GIL, on `threads` pthreads made here (the
 * caller releases the GIL and waits); awake: keep-awake threads run
 * meanwhile.  0 on failure (a thread not made, or py() raised). */
uint64_t
floor_capi_bodies(PyObject *py, long n, uint64_t free_ns, int threads, int spin, int awake)
{
    if (spin && !capi_gil_view()) spin = 0;
    struct capi c = {.py = py, .n = n, .free_ns = free_ns, .spin = spin};
    atomic_init(&c.next, 0);
    atomic_init(&c.failed, 0);
    if (threads < 1) threads = 1;
    if (threads > 8) threads = 8;
    pthread_t t[8];
    int made = 0;
    uint64_t wall;
    Py_BEGIN_ALLOW_THREADS
    atomic_store(&pin_next, 0);
    awake_start(awake);
    uint64_t t0 = now_ns();
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[made], NULL, capi_main, &c) == 0) made++;
    for (int i = 0; i < made; i++) pthread_join(t[i], NULL);
    wall = now_ns() - t0;
    awake_stop_all();
    Py_END_ALLOW_THREADS
    return made == threads && !atomic_load(&c.failed) ? wall : 0;
}
