/* The adapting spin of waits from threads outside the workers (src/wait.h,
 * weft__spin_adapt), on a waitset of its own: a wait that has to sleep
 * halves the spin, down to WEFT__SPIN_MIN; one that ends while spinning
 * doubles it, up to the wait's spin; every WEFT__SPIN_PROBE_EVERY-th wait
 * spins the whole length, and brings it back when it ends in it; a wait
 * without an adapting spin spins its whole length each time. */
#include "check.h"
#include "testing.h"
#include "wait.h"

static const char key;

/* True from the n-th call on (n == 0: never). */
typedef struct after {
    unsigned calls, n;
} after;

static bool true_after(const void *arg)
{
    after *a = (after *)arg;
    return a->n && ++a->calls >= a->n;
}

/* One wait: its condition true from the n-th check (0: never); sleeps:
 * whether it is to sleep, then ending at a deadline 100 ms away (nobody
 * wakes it), else no deadline.  (The deadline is far enough that the spin
 * ends before it on a loaded machine under ThreadSanitizer: a wait whose
 * deadline comes while it spins never sleeps, and says nothing to the
 * adapting spin.) */
static int wait_once(weft__waitset *ws, weft__spin_adapt *adapt, unsigned n, bool sleeps)
{
    after a = {0, n};
    weft__wait w = {.key = &key, .done = true_after, .arg = &a, .spin = 2000, .adapt = adapt,
                    .deadline = sleeps ? weft__now_ns() + 100000000 : UINT64_MAX};
    return weft__wait_until(ws, &w);
}

int main(void)
{
    test_watchdog(60);
    weft__waitset ws;
    weft__waitset_init(&ws);
    weft__spin_adapt a = {0, 0};

    test_step("a wait that sleeps halves the spin");
    CHECK(wait_once(&ws, &a, 0, true) == WEFT_ETIMEDOUT);
    CHECKF(a.len == 1000, "after one sleep: %u", a.len);
    for (int i = 0; i < 12; i++)
        CHECK(wait_once(&ws, &a, 0, true) == WEFT_ETIMEDOUT);
    CHECKF(a.len == WEFT__SPIN_MIN, "after 13 sleeps: %u", a.len);

    test_step("a wait that ends while spinning doubles it");
    a.waits = 0;
    CHECK(wait_once(&ws, &a, 5, false) == 0);
    CHECKF(a.len == 2 * WEFT__SPIN_MIN, "after a wait ended spinning: %u", a.len);

    test_step("a condition true at once says nothing");
    CHECK(wait_once(&ws, &a, 1, false) == 0);
    CHECKF(a.len == 2 * WEFT__SPIN_MIN, "after a wait ended at once: %u", a.len);

    test_step("a short spin sleeps where the whole one would not");
    CHECK(wait_once(&ws, &a, 200, true) == WEFT_ETIMEDOUT); /* 32 spins, then a sleep */
    CHECKF(a.len == WEFT__SPIN_MIN, "after a wait that slept: %u", a.len);

    test_step("the probe spins the whole length and brings it back");
    a.waits = WEFT__SPIN_PROBE_EVERY - 1;
    CHECK(wait_once(&ws, &a, 200, false) == 0);
    CHECKF(a.len == 2000, "after a probe that ended spinning: %u", a.len);

    test_step("without an adapting spin, every wait spins its whole length");
    after c = {0, 1500};
    weft__wait w = {.key = &key, .done = true_after, .arg = &c, .spin = 2000, .deadline = UINT64_MAX};
    uint64_t sleeps = atomic_load(&ws.n_sleeps);
    CHECK(weft__wait_until(&ws, &w) == 0);
    CHECKF(atomic_load(&ws.n_sleeps) == sleeps, "a wait of 1500 checks slept");
    return 0;
}
