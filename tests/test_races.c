/* Calls racing each other from several threads (argv[1] picks one:
 * unregister, reuse, destroy, waiters; default all):
 *   - weft_data_unregister while another thread keeps spawning tasks on the
 *     same data: spawns succeed until the unregister begins, then fail with
 *     WEFT_EINVAL; when unregister returns, every accepted task has run;
 *   - (reuse) the same, the spawner going on naming the stale handle while
 *     new registrations reuse its slot: every such spawn is refused;
 *   - weft_runtime_destroy while other threads keep spawning: each spawn is
 *     either accepted (and its body runs exactly once before destroy returns)
 *     or refused with WEFT_ECLOSED; arg_destroy runs exactly once either way;
 *   - several threads waiting on the same task and on weft_wait_all. */
#include <pthread.h>

#include "check.h"

/* ---- unregister vs spawn ----------------------------------------------------- */

typedef struct unreg_state {
    weft_runtime *rt;
    weft_data *d;
    long *cell;
    atomic_long accepted, refused, ran, bad;
    atomic_int started;
} unreg_state;

static int touch(weft_ctx *ctx, void *arg) {
    unreg_state *u = arg;
    long *c = weft_ctx_data(ctx, 0);
    if (c != u->cell) atomic_fetch_add(&u->bad, 1);
    else *c += 1;
    atomic_fetch_add(&u->ran, 1);
    return 0;
}

static void *unreg_spawner(void *p) {
    unreg_state *u = p;
    weft_access acc = {u->d, WEFT_RW};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = touch;
    desc.arg = u;
    desc.accesses = &acc;
    desc.naccesses = 1;
    for (long i = 0;; i++) {
        int rc = weft_spawn(u->rt, &desc, NULL);
        if (i == 100) atomic_store(&u->started, 1);
        if (rc == 0) {
            atomic_fetch_add(&u->accepted, 1);
        } else if (rc == WEFT_EINVAL) {
            atomic_fetch_add(&u->refused, 1);
            atomic_store(&u->started, 1);
            return NULL;
        } else {
            atomic_fetch_add(&u->bad, 1000);
            atomic_store(&u->started, 1);
            return NULL;
        }
    }
}

static void test_unregister_vs_spawn(unsigned workers) {
    unreg_state *u = calloc(1, sizeof *u);
    CHECK(u);
    u->rt = make_rt(workers);
    u->cell = calloc(1, sizeof *u->cell);
    CHECK(u->cell);
    CHECK_OK(weft_data_register(u->rt, u->cell, sizeof *u->cell, &u->d));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, unreg_spawner, u) == 0);
    CHECK(wait_flag(&u->started, 10000) == 0);
    CHECK_OK(weft_data_unregister(u->d));
    long ran_at_return = atomic_load(&u->ran);
    long cell_at_return = *u->cell;
    free(u->cell); /* the memory need only live until unregister returns */
    u->cell = NULL;
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(atomic_load(&u->bad) == 0);
    CHECK(atomic_load(&u->refused) == 1);
    long acc = atomic_load(&u->accepted);
    CHECKF(ran_at_return == acc && cell_at_return == acc,
           "%u workers: unregister returned when %ld of %ld accepted tasks had run (cell %ld)",
           workers, ran_at_return, acc, cell_at_return);
    CHECK_OK(weft_wait_all(u->rt));
    CHECK(atomic_load(&u->ran) == acc);
    CHECK_OK(weft_runtime_destroy(u->rt));
    free(u);
}

/* ---- stale handle vs a registration reusing its slot --------------------------- */

/* A spawner keeps naming a handle after its unregister began (as the Python
 * front end may: a spawn that looked the handle up before), while this
 * thread registers and unregisters new handles, which reuse the freed slot.
 * Every stale spawn is refused with WEFT_EINVAL, none lands on a new handle,
 * and (under TSan) checking the stale handle races with nothing. */
typedef struct reuse_state {
    unreg_state u;
    atomic_int stop;
    atomic_long stale; /* spawns refused after the first (for a debugger) */
} reuse_state;

static void *reuse_spawner(void *p) {
    reuse_state *s = p;
    unreg_state *u = &s->u;
    weft_access acc = {u->d, WEFT_RW};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = touch;
    desc.arg = u;
    desc.accesses = &acc;
    desc.naccesses = 1;
    int refused = 0;
    for (long i = 0; !(refused && atomic_load(&s->stop)); i++) {
        int rc = weft_spawn(u->rt, &desc, NULL);
        if (i == 100) atomic_store(&u->started, 1);
        if (rc == 0 && !refused) {
            atomic_fetch_add(&u->accepted, 1);
        } else if (rc == WEFT_EINVAL) {
            if (!refused) atomic_fetch_add(&u->refused, 1);
            else atomic_fetch_add(&s->stale, 1);
            refused = 1;
            atomic_store(&u->started, 1);
        } else {
            atomic_fetch_add(&u->bad, 1000); /* accepted after a refusal, or another error */
            atomic_store(&u->started, 1);
            return NULL;
        }
    }
    return NULL;
}

static void test_stale_handle_vs_reuse(unsigned workers) {
    reuse_state *s = calloc(1, sizeof *s);
    CHECK(s);
    unreg_state *u = &s->u;
    u->rt = make_rt(workers);
    u->cell = calloc(1, sizeof *u->cell);
    CHECK(u->cell);
    CHECK_OK(weft_data_register(u->rt, u->cell, sizeof *u->cell, &u->d));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, reuse_spawner, s) == 0);
    CHECK(wait_flag(&u->started, 10000) == 0);
    CHECK_OK(weft_data_unregister(u->d));
    long ran_at_return = atomic_load(&u->ran);
    /* New handles over other memory: the first reuses the slot the spawner
     * still names (this thread freed it, and its slot cache is last in,
     * first out).  Fewer reuses than the generation tag tells apart
     * (WEFT__SLOT_ALIGN): more would make the stale handle valid again. */
    static long other[4];
    for (int k = 0; k < 50; k++) {
        weft_data *n;
        CHECK_OK(weft_data_register(u->rt, &other[k % 4], sizeof other[0], &n));
        CHECK_OK(weft_data_unregister(n));
    }
    atomic_store(&s->stop, 1);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(atomic_load(&u->bad) == 0);
    CHECK(atomic_load(&u->refused) == 1);
    long acc = atomic_load(&u->accepted);
    CHECKF(ran_at_return == acc, "%u workers: unregister returned when %ld of %ld accepted tasks had run",
           workers, ran_at_return, acc);
    CHECK_OK(weft_wait_all(u->rt));
    CHECK(atomic_load(&u->ran) == acc);
    CHECK_OK(weft_runtime_destroy(u->rt));
    free(u->cell);
    free(s);
}

/* ---- destroy vs spawn --------------------------------------------------------- */

#define SPAWNERS 3

typedef struct destroy_state {
    weft_runtime *rt;
    atomic_long accepted, closed, other, ran, destroyed_args;
    atomic_int go;
} destroy_state;

static int count_run(weft_ctx *ctx, void *arg) {
    (void)ctx;
    destroy_state *s = arg;
    atomic_fetch_add(&s->ran, 1);
    return 0;
}

static void count_destroy(void *arg) {
    destroy_state *s = arg;
    atomic_fetch_add(&s->destroyed_args, 1);
}

static void *destroy_spawner(void *p) {
    destroy_state *s = p;
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = count_run;
    desc.arg = s;
    desc.arg_destroy = count_destroy;
    atomic_fetch_add(&s->go, 1);
    for (;;) {
        weft_task *t = NULL;
        int rc = weft_spawn(s->rt, &desc, &t);
        if (rc == 0) {
            atomic_fetch_add(&s->accepted, 1);
            weft_task_release(t);
        } else if (rc == WEFT_ECLOSED) {
            atomic_fetch_add(&s->closed, 1);
            return NULL;
        } else {
            atomic_fetch_add(&s->other, 1);
            return NULL;
        }
    }
}

static void test_destroy_vs_spawn(unsigned workers, unsigned spawn_ms) {
    /* weft_runtime_destroy must return in bounded time even though other
     * threads keep spawning: their spawns get WEFT_ECLOSED ("the runtime was
     * destroyed (or is being destroyed)"). */
    alarm(0);
    test_watchdog(test_pick(10, 40));
    destroy_state *s = calloc(1, sizeof *s);
    CHECK(s);
    s->rt = make_rt(workers);
    pthread_t th[SPAWNERS];
    for (int i = 0; i < SPAWNERS; i++) CHECK(pthread_create(&th[i], NULL, destroy_spawner, s) == 0);
    while (atomic_load(&s->go) < SPAWNERS) sleep_ns(100000);
    sleep_ms(spawn_ms);
    uint64_t t0 = now_ns();
    CHECK_OK(weft_runtime_destroy(s->rt));
    uint64_t el = now_ns() - t0;
    long ran_at_return = atomic_load(&s->ran);
    for (int i = 0; i < SPAWNERS; i++) CHECK(pthread_join(th[i], NULL) == 0);
    long acc = atomic_load(&s->accepted);
    CHECKF(atomic_load(&s->other) == 0, "a spawn racing destroy returned neither 0 nor ECLOSED");
    CHECK(atomic_load(&s->closed) == SPAWNERS);
    sleep_ms(10);
    CHECKF(ran_at_return == acc,
           "%u workers: weft_runtime_destroy returned when %ld of %ld accepted tasks had run "
           "(%ld ran in the end; arg_destroy called %ld times for %ld spawns)",
           workers, ran_at_return, acc, atomic_load(&s->ran), atomic_load(&s->destroyed_args),
           acc + SPAWNERS);
    CHECKF(atomic_load(&s->destroyed_args) == acc + SPAWNERS,
           "arg_destroy called %ld times for %ld accepted and %d refused spawns",
           atomic_load(&s->destroyed_args), acc, SPAWNERS);
    if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "destroy vs spawn, %u workers: %ld accepted, destroy took %.3f s\n",
                workers, acc, (double)el / 1e9);
    (void)el;
    free(s);
}

/* ---- many waiters --------------------------------------------------------------- */

typedef struct waiters_state {
    weft_runtime *rt;
    weft_task *t;
    atomic_int gate;
    atomic_int results[8];
} waiters_state;

static int gated(weft_ctx *ctx, void *arg) {
    (void)ctx;
    waiters_state *w = arg;
    if (wait_flag(&w->gate, 10000) != 0) return 1;
    return 7;
}

static waiters_state *wstate;

static void *waiter(void *p) {
    int i = (int)(intptr_t)p;
    if (i % 2 == 0) {
        /* Concurrent wait_all callers: each returns once nothing is in
         * flight, with 0 or the failure. */
        int rc = weft_wait_all(wstate->rt);
        if (rc != 0 && rc != WEFT_ETASKFAILED) {
            atomic_store(&wstate->results[i], 1000 + rc);
            return NULL;
        }
        weft_task_status st;
        if (weft_task_status_get(wstate->t, &st) != 0 || st != WEFT_TASK_FAILED) {
            atomic_store(&wstate->results[i], 2000);
            return NULL;
        }
    }
    atomic_store(&wstate->results[i], weft_task_wait(wstate->t));
    return NULL;
}

static void test_many_waiters(void) {
    wstate = calloc(1, sizeof *wstate);
    CHECK(wstate);
    wstate->rt = make_rt(2);
    CHECK_OK(weft_spawn_simple(wstate->rt, gated, wstate, &wstate->t));
    pthread_t th[8];
    for (int i = 0; i < 8; i++) CHECK(pthread_create(&th[i], NULL, waiter, (void *)(intptr_t)i) == 0);
    sleep_ms(20);
    atomic_store(&wstate->gate, 1);
    for (int i = 0; i < 8; i++) CHECK(pthread_join(th[i], NULL) == 0);
    for (int i = 0; i < 8; i++)
        CHECKF(atomic_load(&wstate->results[i]) == WEFT_ETASKFAILED, "waiter %d got %d", i,
               atomic_load(&wstate->results[i]));
    weft_task_release(wstate->t);
    CHECK_OK(weft_wait_all(wstate->rt)); /* the failure was reported above */
    CHECK_OK(weft_runtime_destroy(wstate->rt));
    free(wstate);
}

int main(int argc, char **argv) {
    const char *which = argc > 1 ? argv[1] : "all";
    int all = strcmp(which, "all") == 0;
    test_watchdog(test_pick(60, 200));
    int rounds = test_pick(20, 8);
    /* The destroy race shows up mostly under the sanitizers (freed memory):
     * more rounds there. */
    if (strcmp(which, "destroy") == 0) rounds = test_pick(50, 60);
    if (all || strcmp(which, "waiters") == 0) test_many_waiters();
    for (int r = 0; r < rounds; r++) {
        for (unsigned w = 1; w <= 4; w *= 2) {
            if (all || strcmp(which, "unregister") == 0) test_unregister_vs_spawn(w);
            if (all || strcmp(which, "reuse") == 0) test_stale_handle_vs_reuse(w);
            if (all || strcmp(which, "destroy") == 0) test_destroy_vs_spawn(w, r % 2 ? 2 : 20);
        }
    }
    printf("test_races %s: ok\n", which);
    return 0;
}
