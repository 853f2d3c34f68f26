/*
 * check.h — tiny helpers shared by Weft's C tests.
 *
 * Each test is one process.  A failed CHECK prints file:line and the
 * expression and ends the process with status 1 (status 77 means "skipped").
 * _exit is used so that a failure inside a worker thread ends the process at
 * once and leak checkers do not bury the message under the leaked runtime.
 */
#ifndef WEFT_TEST_CHECK_H
#define WEFT_TEST_CHECK_H

#include <dirent.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

#define TEST_SKIP 77

static inline void check_fail_(const char *file, int line, const char *what) {
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, what);
    fflush(stderr);
    fflush(stdout);
    _exit(1);
}

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) check_fail_(__FILE__, __LINE__, #cond);                        \
    } while (0)

/* CHECK with a printf-style explanation printed on failure. */
#define CHECKF(cond, ...)                                                           \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fprintf(stderr, "\n");                                                  \
            fflush(stderr);                                                         \
            _exit(1);                                                               \
        }                                                                           \
    } while (0)

static inline void check_rc_fail_(const char *file, int line, const char *expr, int got,
                                  int want) {
    fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d (%s); weft_last_error: \"%s\"\n",
            file, line, expr, got, weft_strerror(got), want, weft_strerror(want),
            weft_last_error());
    fflush(stderr);
    _exit(1);
}

/* Evaluate expr once; it must return code. */
#define CHECK_RC(expr, code)                                                        \
    do {                                                                            \
        int check_rc_got_ = (expr);                                                 \
        int check_rc_want_ = (code);                                                \
        if (check_rc_got_ != check_rc_want_)                                        \
            check_rc_fail_(__FILE__, __LINE__, #expr, check_rc_got_, check_rc_want_); \
    } while (0)

#define CHECK_OK(expr) CHECK_RC(expr, 0)

/* A failing call must also leave a message for weft_last_error(). */
#define CHECK_ERR(expr, code)                                                       \
    do {                                                                            \
        CHECK_RC(expr, code);                                                       \
        const char *check_msg_ = weft_last_error();                                 \
        if (check_msg_ == NULL || check_msg_[0] == '\0')                            \
            check_fail_(__FILE__, __LINE__,                                         \
                        "weft_last_error() is empty after failing " #expr);         \
    } while (0)

/* ------------------------------------------------------------------------ */

/* WEFT_TEST_SCALE=sanitizer (set by `make test` for sanitizer builds), or a
 * sanitizer compiled in: tests shrink their sizes. */
static inline int test_small(void) {
    const char *s = getenv("WEFT_TEST_SCALE");
    if (s && strcmp(s, "sanitizer") == 0) return 1;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return 1;
#endif
#endif
    return 0;
}

static inline int test_pick(int release, int sanitizer) {
    return test_small() ? sanitizer : release;
}

/* What the test is doing now, named in the watchdog's message. */
static const char *volatile test_step_name_;

static inline void test_step(const char *name) { test_step_name_ = name; }

static inline void test_alarm_handler_(int sig) {
    (void)sig;
    static const char msg[] = "watchdog: test did not finish in time (hang?)";
    ssize_t r = write(2, msg, sizeof msg - 1);
    const char *step = test_step_name_;
    if (step) {
        r = write(2, " during: ", 9);
        r = write(2, step, strlen(step));
    }
    r = write(2, "\n", 1);
    (void)r;
    _exit(1);
}

/* A hang fails the test (exit 1) instead of waiting for the CTest timeout.
 * Calling it again re-arms the alarm. */
static inline void test_watchdog(unsigned seconds) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = test_alarm_handler_;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm(seconds);
}

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline void sleep_ns(uint64_t ns) {
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static inline void sleep_ms(unsigned ms) { sleep_ns((uint64_t)ms * 1000000u); }

/* Threads of this process (entries of /proc/self/task), or -1. */
static inline int thread_count(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') n++;
    closedir(d);
    return n;
}

/* A joined thread can linger in /proc/self/task for a moment after
 * pthread_join returns (the kernel reaps it asynchronously): poll up to 2 s
 * for the count to come down to want; returns the last count seen. */
static inline int thread_count_settled(int want) {
    int n = thread_count();
    for (int i = 0; i < 2000 && n > want; i++) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        n = thread_count();
    }
    return n;
}

/* The thread count once it has stopped changing (same value for 20 ms). */
static inline int thread_count_stable(void) {
    int n = thread_count(), same = 0;
    for (int i = 0; i < 400 && same < 4; i++) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
        int m = thread_count();
        same = m == n ? same + 1 : 0;
        n = m;
    }
    return n;
}

/* Wait (polling) until *flag becomes non-zero; 0 on success, -1 after
 * timeout_ms. */
static inline int wait_flag(atomic_int *flag, unsigned timeout_ms) {
    uint64_t end = now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (!atomic_load(flag)) {
        if (now_ns() > end) return -1;
        sleep_ns(100000);
    }
    return 0;
}

/* A body that occupies a worker until the test opens the gate: lets a test
 * hold tasks back (queued or waiting) deterministically. */
__attribute__((unused)) static atomic_int gate;       /* blocker bodies spin until it is set */
__attribute__((unused)) static atomic_int blocker_in; /* set when a blocker body has started */

static inline void block_workers_reset(void) {
    atomic_store(&gate, 0);
    atomic_store(&blocker_in, 0);
}

/* A body that does nothing. */
static inline int test_noop(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 0;
}

static inline int blocker(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_store(&blocker_in, 1);
    if (wait_flag(&gate, 20000) != 0) {
        fprintf(stderr, "blocker: gate never opened\n");
        _exit(1);
    }
    return 0;
}

/* A runtime with n workers, no trace, the CPU only (so that the core's
 * tests do not depend on the GPUs a machine has), everything else default. */
static inline weft_runtime *make_rt(unsigned workers) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.trace_path = NULL;
    cfg.devices = "cpu";
    weft_runtime *rt = NULL;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    CHECK(rt != NULL);
    CHECK(weft_runtime_workers(rt) == workers);
    return rt;
}

/* Deterministic pseudo-random numbers (splitmix64). */
typedef struct test_rng {
    uint64_t s;
} test_rng;

static inline uint64_t rng_next(test_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). */
static inline uint32_t rng_below(test_rng *r, uint32_t n) {
    return (uint32_t)(rng_next(r) % n);
}

static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}


/* A runtime with `workers` workers on `devices` (vgpu_memory: each virtual
 * GPU's bytes, 0 for the default), in the checking mode if check. */
static inline weft_runtime *test_make_devices(const char *devices, unsigned workers, size_t vgpu_memory, bool check) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.devices = devices;
    cfg.vgpu_memory = vgpu_memory;
    if (check) CHECK(setenv("WEFT_VGPU_CHECK", "1", 1) == 0);
    weft_runtime *rt = NULL;
    CHECKF(weft_runtime_create(&cfg, &rt) == 0, "%s: %s", devices, weft_last_error());
    if (check) unsetenv("WEFT_VGPU_CHECK");
    return rt;
}

/* Spawn body(arg) placed on `where` (a device-set string) with that share
 * of a GPU and the accesses given; the task's handle if want (else NULL).
 * A failed spawn fails the test. */
static inline weft_task *test_spawn_at(weft_runtime *rt, const char *where, double share, weft_body_fn body,
                                       void *arg, const weft_access *acc, size_t nacc, bool want) {
    weft_placement p;
    CHECK_OK(weft_placement_parse(where, &p));
    p.share = share;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.arg = arg;
    d.accesses = acc;
    d.naccesses = nacc;
    d.placements = &p;
    d.nplacements = 1;
    weft_task *t = NULL;
    CHECKF(weft_spawn(rt, &d, want ? &t : NULL) == 0, "%s", weft_last_error());
    return t;
}

#endif
