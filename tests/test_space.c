/* Task spaces from C: keys depended on before they are spawned, cycles
 * refused at spawn, unspawned keys cancelled at close with a message naming
 * the key, one spawn per key under concurrency, misuse. */
#include <pthread.h>

#include "check.h"

#include <sched.h>
#include <sys/wait.h>

static atomic_int seq;
static atomic_int order[64];

static int record(weft_ctx *ctx, void *arg) {
    (void)ctx;
    atomic_store(&order[(intptr_t)arg], atomic_fetch_add(&seq, 1) + 1);
    return 0;
}

static int fail_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    return 5;
}

static int sspawn(weft_space *s, int64_t k, weft_body_fn fn, intptr_t arg, weft_task *const *deps, size_t ndeps,
                  const char *name, weft_task **out) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = fn;
    d.arg = (void *)arg;
    d.deps = deps;
    d.ndeps = ndeps;
    d.name = name;
    return weft_space_spawn(s, &k, 1, &d, out);
}

static weft_task *key(weft_space *s, int64_t k) {
    weft_task *t = NULL;
    CHECK_OK(weft_space_task(s, &k, 1, &t));
    return t;
}

static void test_out_of_order(void) {
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "T", &s));
    atomic_store(&seq, 0);
    for (int i = 0; i < 64; i++) atomic_store(&order[i], 0);
    /* T[3] after T[2] after T[1], spawned in reverse. */
    weft_task *d2 = key(s, 2), *d1 = key(s, 1);
    weft_task_status st;
    CHECK_OK(weft_task_status_get(d2, &st));
    CHECK(st == WEFT_TASK_WAITING);
    CHECK_OK(sspawn(s, 3, record, 3, &d2, 1, "t3", NULL));
    CHECK_OK(sspawn(s, 2, record, 2, &d1, 1, "t2", NULL));
    sleep_ms(20);
    CHECK(atomic_load(&seq) == 0); /* nothing can run before T[1] */
    CHECK_OK(sspawn(s, 1, record, 1, NULL, 0, "t1", NULL));
    CHECK_OK(weft_task_wait(key(s, 3)));
    CHECK(atomic_load(&order[1]) == 1 && atomic_load(&order[2]) == 2 && atomic_load(&order[3]) == 3);
    /* The handle of a spawned key is its task. */
    weft_task_info info;
    CHECK_OK(weft_task_info_get(key(s, 2), &info));
    CHECK(strcmp(info.name, "t2") == 0 && info.status == WEFT_TASK_COMPLETED);
    /* Spawning a key twice is refused. */
    CHECK_ERR(sspawn(s, 2, record, 2, NULL, 0, "again", NULL), WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), "T[2]") != NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_space_destroy(s));
    CHECK_ERR(weft_space_destroy(s), WEFT_EINVAL);
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_failure_through_key(void) {
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "F", &s));
    weft_task *k1 = key(s, 1), *t2;
    CHECK_OK(sspawn(s, 2, record, 2, &k1, 1, "after", &t2));
    CHECK_OK(sspawn(s, 1, fail_body, 0, NULL, 0, "boom", NULL));
    CHECK_ERR(weft_task_wait(t2), WEFT_ECANCELLED);
    CHECK(strstr(weft_last_error(), "boom") != NULL);
    weft_task_info info;
    CHECK_OK(weft_task_info_get(t2, &info));
    CHECK(strcmp(info.cause_name, "boom") == 0);
    CHECK_RC(weft_wait_all(rt), WEFT_ETASKFAILED);
    weft_task_release(t2);
    CHECK_OK(weft_space_destroy(s));
    CHECK_OK(weft_runtime_destroy(rt));
}

static void test_cycles(void) {
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "C", &s));
    /* T[1] follows T[2]; T[2] following T[1] would close a cycle. */
    weft_task *k2 = key(s, 2), *t1;
    CHECK_OK(sspawn(s, 1, record, 1, &k2, 1, "one", &t1));
    CHECK_ERR(sspawn(s, 2, record, 2, &t1, 1, "two", NULL), WEFT_EDEADLK);
    CHECK(strstr(weft_last_error(), "C[2]") != NULL);
    /* Longer: T[3] -> T[4] -> T[5] -> key 3. */
    weft_task *k3 = key(s, 3), *t5, *t4;
    CHECK_OK(sspawn(s, 5, record, 5, &k3, 1, "five", &t5));
    CHECK_OK(sspawn(s, 4, record, 4, &t5, 1, "four", &t4));
    CHECK_ERR(sspawn(s, 3, record, 3, &t4, 1, "three", NULL), WEFT_EDEADLK);
    /* A key following itself. */
    weft_task *k6 = key(s, 6);
    CHECK_ERR(sspawn(s, 6, record, 6, &k6, 1, "six", NULL), WEFT_EDEADLK);
    /* Through data: W (key 7) writes d after key 8; key 8 reading d would
     * follow W. */
    long cell = 0;
    weft_data *d;
    CHECK_OK(weft_data_register(rt, &cell, sizeof cell, &d));
    weft_task *k8 = key(s, 8);
    weft_access wa = {d, WEFT_RW};
    weft_task_desc desc;
    weft_task_desc_init(&desc);
    desc.body = record;
    desc.arg = (void *)(intptr_t)7;
    desc.deps = &k8;
    desc.ndeps = 1;
    desc.accesses = &wa;
    desc.naccesses = 1;
    int64_t k = 7;
    CHECK_OK(weft_space_spawn(s, &k, 1, &desc, NULL));
    weft_access ra = {d, WEFT_R};
    desc.deps = NULL;
    desc.ndeps = 0;
    desc.accesses = &ra;
    k = 8;
    CHECK_ERR(weft_space_spawn(s, &k, 1, &desc, NULL), WEFT_EDEADLK);
    /* The refused keys can still be spawned correctly: everything runs. */
    CHECK_OK(sspawn(s, 2, record, 2, NULL, 0, "two", NULL));
    CHECK_OK(sspawn(s, 3, record, 3, NULL, 0, "three", NULL));
    CHECK_OK(sspawn(s, 6, record, 6, NULL, 0, "six", NULL));
    desc.accesses = NULL;
    desc.naccesses = 0;
    CHECK_OK(weft_space_spawn(s, &k, 1, &desc, NULL));
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_task_wait(t1));
    CHECK_OK(weft_task_wait(t4));
    weft_task_release(t1);
    weft_task_release(t4);
    weft_task_release(t5);
    CHECK_OK(weft_data_unregister(d));
    CHECK_OK(weft_space_destroy(s));
    CHECK_OK(weft_runtime_destroy(rt));
}

static atomic_int destroyed;
static void count_destroy(void *arg) {
    (void)arg;
    atomic_fetch_add(&destroyed, 1);
}

static void test_unspawned(void) {
    weft_task_info info_unspawned;
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "U", &s));
    int64_t k2[2] = {4, 2};
    weft_task *missing;
    CHECK_OK(weft_space_task(s, k2, 2, &missing));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = record;
    d.arg = (void *)(intptr_t)9;
    d.deps = &missing;
    d.ndeps = 1;
    d.name = "waits-for-U42";
    d.arg_destroy = count_destroy;
    atomic_store(&destroyed, 0);
    weft_task *t;
    int64_t k = 9;
    CHECK_OK(weft_space_spawn(s, &k, 1, &d, &t));
    weft_task_status st;
    CHECK_OK(weft_task_status_get(t, &st));
    CHECK(st == WEFT_TASK_WAITING);
    CHECK_OK(weft_space_destroy(s));
    CHECK_ERR(weft_task_wait(t), WEFT_ECANCELLED);
    CHECKF(strstr(weft_last_error(), "U[4,2]") != NULL && strstr(weft_last_error(), "never spawned") != NULL,
           "message: %s", weft_last_error());
    CHECK(atomic_load(&destroyed) == 1);
    CHECK_OK(weft_task_info_get(t, &info_unspawned));
    CHECK(info_unspawned.cause_id == 0 && strcmp(info_unspawned.cause_name, "U[4,2]") == 0);
    CHECK_OK(weft_wait_all(rt)); /* cancellation is not a failure */
    weft_task_release(t);
    /* Destroying the runtime closes what is left: no hang, and it says
     * what it cancelled (a key asked for but not waited for is no news). */
    CHECK_OK(weft_space_create(rt, "V", &s));
    CHECK_OK(weft_space_task(s, &k, 1, &missing));
    int64_t idle = 77;
    weft_task *asked;
    CHECK_OK(weft_space_task(s, &idle, 1, &asked));
    d.deps = &missing;
    k = 10;
    CHECK_OK(weft_space_spawn(s, &k, 1, &d, &t));
    CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECANCELLED);
    CHECKF(strstr(weft_last_error(), "(V[9])") != NULL, "message: %s", weft_last_error());
    CHECK_RC(weft_task_wait(t), WEFT_ECANCELLED);
    CHECK(atomic_load(&destroyed) == 2);
    weft_task_release(t);
    CHECK_ERR(weft_space_destroy(s), WEFT_EINVAL);
}

typedef struct race {
    weft_space *s;
    atomic_int *go, *ok, *ran;
} race;

static int count_run(weft_ctx *ctx, void *arg) {
    (void)ctx;
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

static void *race_thread(void *p) {
    race *r = p;
    while (!atomic_load(r->go)) {
    }
    for (int64_t k = 0; k < 200; k++) {
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = count_run;
        d.arg = r->ran;
        int rc = weft_space_spawn(r->s, &k, 1, &d, NULL);
        if (rc == 0) atomic_fetch_add(r->ok, 1);
        else CHECK_RC(rc, WEFT_EINVAL);
    }
    return NULL;
}

static void test_race(void) {
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "R", &s));
    atomic_int go = 0, ok = 0, ran = 0;
    race r = {s, &go, &ok, &ran};
    pthread_t th[4];
    for (int i = 0; i < 4; i++) CHECK(pthread_create(&th[i], NULL, race_thread, &r) == 0);
    atomic_store(&go, 1);
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ok) == 200 && atomic_load(&ran) == 200);
    CHECK_OK(weft_space_destroy(s));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A long chain spawned in reverse: every dependency is a key not spawned
 * yet; the cycle checks cost O(1) each (a quadratic check would not finish
 * within the watchdog). */
static void test_reverse_chain(void) {
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "L", &s));
    int n = test_pick(50000, 5000);
    atomic_int ran = 0;
    for (int64_t i = n - 1; i >= 0; i--) {
        weft_task *prev = NULL;
        int64_t pk = i - 1;
        if (i) CHECK_OK(weft_space_task(s, &pk, 1, &prev));
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = count_run;
        d.arg = &ran;
        d.deps = i ? &prev : NULL;
        d.ndeps = i ? 1 : 0;
        CHECK_OK(weft_space_spawn(s, &i, 1, &d, NULL));
    }
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&ran) == n);
    CHECK_OK(weft_space_destroy(s));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Cancelling a key's handle before the key is spawned: the task spawned for
 * it never runs, and its dependents are cancelled. */
static void test_cancel_unspawned(void) {
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "K", &s));
    atomic_int ran = 0;
    weft_task *k0 = key(s, 0), *after;
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = count_run;
    d.arg = &ran;
    d.deps = &k0;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, &after));
    CHECK_OK(weft_task_cancel(k0));
    d.deps = NULL;
    d.ndeps = 0;
    int64_t k = 0;
    weft_task *t0;
    CHECK_OK(weft_space_spawn(s, &k, 1, &d, &t0));
    CHECK_RC(weft_task_wait(t0), WEFT_ECANCELLED);
    CHECK_RC(weft_task_wait(after), WEFT_ECANCELLED);
    CHECK(atomic_load(&ran) == 0);
    weft_task_release(t0);
    weft_task_release(after);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_space_destroy(s));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* weft_space_cancel racing weft_space_spawn of the same key, many times:
 * whenever the cancel answers 1 ("will not run"), the body never runs and
 * the key's dependent is cancelled; when it answers 0, the body ran.  Plus
 * its answers on a finished key and its errors. */
typedef struct cancel_race {
    weft_space *s;
    int64_t key;
    atomic_int phase; /* 0 idle, 1 spawner ready, 2 go, 3 spawned */
    atomic_int ran;
} cancel_race;

static void *cancel_race_spawner(void *p) {
    cancel_race *c = p;
    atomic_store(&c->phase, 1);
    while (atomic_load(&c->phase) != 2) /* yield: on a busy 2-core machine the other side needs the core */
        sched_yield();
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = count_run;
    d.arg = &c->ran;
    CHECK_OK(weft_space_spawn(c->s, &c->key, 1, &d, NULL));
    atomic_store(&c->phase, 3);
    return NULL;
}

static void test_cancel_racing_spawn(void) {
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "C", &s));
    int rounds = test_pick(2000, 300), stopped = 0;
    for (int i = 0; i < rounds; i++) {
        cancel_race c = {.s = s, .key = i};
        atomic_init(&c.phase, 0);
        atomic_init(&c.ran, 0);
        weft_task *k = key(s, i), *after;
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = count_run;
        d.arg = &c.ran;
        d.deps = &k;
        d.ndeps = 1;
        CHECK_OK(weft_spawn(rt, &d, &after));
        pthread_t th;
        CHECK(pthread_create(&th, NULL, cancel_race_spawner, &c) == 0);
        while (atomic_load(&c.phase) != 1)
            sched_yield();
        atomic_store(&c.phase, 2);
        for (volatile int spin = 0; spin < (i % 16) * 100; spin++) {
        }
        int rc = weft_space_cancel(s, &c.key, 1);
        CHECK(rc == 0 || rc == 1);
        pthread_join(th, NULL);
        int64_t kk = i;
        weft_task *t;
        CHECK_OK(weft_space_task(s, &kk, 1, &t));
        int wt = weft_task_wait(t), wa = weft_task_wait(after);
        if (rc == 1) {
            stopped++;
            CHECK_RC(wt, WEFT_ECANCELLED);
            CHECK_RC(wa, WEFT_ECANCELLED);
            CHECK(atomic_load(&c.ran) == 0);
        } else {
            CHECK_OK(wt);
            CHECK_OK(wa);
            CHECK(atomic_load(&c.ran) == 2);
        }
        weft_task_release(after);
        /* Asked again once it is final: the same answer. */
        CHECK(weft_space_cancel(s, &c.key, 1) == rc);
    }
    printf("cancel racing spawn: %d of %d keys stopped\n", stopped, rounds);
    int64_t bad[17] = {0};
    CHECK_ERR(weft_space_cancel(s, bad, 0), WEFT_EINVAL);
    CHECK_ERR(weft_space_cancel(s, bad, 17), WEFT_EINVAL);
    CHECK_ERR(weft_space_cancel(s, NULL, 1), WEFT_EINVAL);
    CHECK_ERR(weft_space_cancel(NULL, bad, 1), WEFT_EINVAL);
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_space_destroy(s));
    CHECK_ERR(weft_space_cancel(s, bad, 1), WEFT_EINVAL);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* Destroying the runtime lets running tasks spawn keys that others wait
 * for; only what is left waiting once nothing runs is cancelled.  And
 * weft_wait_settled returns at that point, with the waiting tasks still in
 * flight. */
static weft_space *late_space;
static atomic_int late_ran;

static int late_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

static int spawns_key_later(weft_ctx *ctx, void *arg) {
    (void)ctx;
    sleep_ms(50);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = late_body;
    d.arg = &late_ran;
    int64_t k = (intptr_t)arg;
    return weft_space_spawn(late_space, &k, 1, &d, NULL) == 0 ? 0 : 1;
}

static void test_destroy_and_settled(void) {
    weft_runtime *rt = make_rt(2);
    CHECK_OK(weft_space_create(rt, "D", &late_space));
    atomic_store(&late_ran, 0);
    weft_task *k1 = key(late_space, 1), *k2 = key(late_space, 2);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = late_body;
    d.arg = &late_ran;
    d.deps = &k1;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, NULL)); /* runs once key 1 is spawned, during destroy */
    d.deps = &k2;
    weft_task *never;
    CHECK_OK(weft_spawn(rt, &d, &never)); /* key 2 is never spawned */
    CHECK_OK(weft_spawn_simple(rt, spawns_key_later, (void *)(intptr_t)1, NULL));
    CHECK_OK(weft_wait_settled_timed(rt, 60ull * 1000000000u));
    /* What is left is the task waiting for key 2 (the last task to finish
     * may still be dropping its in-flight count as the wait returns). */
    weft_stats st;
    for (int i = 0; i < 5000; i++) {
        CHECK_OK(weft_runtime_stats(rt, &st));
        if (st.inflight == 1) break;
        sleep_ms(1);
    }
    CHECK(st.inflight == 1);
    CHECK(atomic_load(&late_ran) == 2);
    /* Destroy at once: the running task still spawns key 3, whose
     * dependent runs; the one waiting for key 2 is cancelled. */
    weft_task *k3 = key(late_space, 3);
    d.deps = &k3;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK_OK(weft_spawn_simple(rt, spawns_key_later, (void *)(intptr_t)3, NULL));
    CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECANCELLED); /* (the one waiting for D[2]) */
    CHECKF(strstr(weft_last_error(), "(D[2])") != NULL, "message: %s", weft_last_error());
    CHECK(atomic_load(&late_ran) == 4);
    CHECK_RC(weft_task_wait(never), WEFT_ECANCELLED);
    weft_task_release(never);
}

static void test_misuse(void) {
    weft_runtime *rt = make_rt(1);
    weft_space *s;
    CHECK_ERR(weft_space_create(rt, "x", NULL), WEFT_EINVAL);
    CHECK_OK(weft_space_create(rt, NULL, &s));
    weft_task *t;
    int64_t k[17] = {0};
    CHECK_ERR(weft_space_task(s, k, 0, &t), WEFT_EINVAL);
    CHECK_ERR(weft_space_task(s, k, 17, &t), WEFT_EINVAL);
    CHECK_ERR(weft_space_task(s, NULL, 1, &t), WEFT_EINVAL);
    CHECK_ERR(weft_space_task(NULL, k, 1, &t), WEFT_EINVAL);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = count_run;
    atomic_int ran = 0;
    d.arg = &ran;
    d.arg_destroy = count_destroy;
    atomic_store(&destroyed, 0);
    CHECK_ERR(weft_space_spawn(s, k, 1, NULL, NULL), WEFT_EINVAL);
    CHECK_ERR(weft_space_spawn(NULL, k, 1, &d, NULL), WEFT_EINVAL);
    CHECK(atomic_load(&destroyed) == 1); /* arg_destroy ran for the failed spawn */
    CHECK_OK(weft_space_task(s, k, 1, &t));
    CHECK_OK(weft_space_destroy(s));
    CHECK_ERR(weft_space_task(s, k, 1, &t), WEFT_EINVAL);
    CHECK_ERR(weft_space_spawn(s, k, 1, &d, NULL), WEFT_EINVAL);
    CHECK(atomic_load(&destroyed) == 2);
    CHECK_OK(weft_space_destroy(NULL));
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A wait for the whole runtime says, once, when it has nothing left to wait
 * for but tasks behind a key nobody has spawned (stderr is captured in a
 * file); it is quiet while a body still runs, and when told never to speak. */
typedef struct late_spawn {
    weft_space *s;
    int64_t key;
    uint64_t after_ns;
} late_spawn;

static void *spawn_late(void *arg) {
    late_spawn *l = arg;
    sleep_ns(l->after_ns);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = record;
    d.arg = (void *)(intptr_t)1;
    CHECK_OK(weft_space_spawn(l->s, &l->key, 1, &d, NULL));
    return NULL;
}

static int sleepy(weft_ctx *ctx, void *arg) {
    (void)ctx;
    sleep_ns((uint64_t)(uintptr_t)arg);
    return 0;
}

/* Run weft_wait_all (or weft_task_wait of t) with stderr sent to a file;
 * what it wrote goes to out. */
static void wait_capturing(weft_runtime *rt, weft_task *t, char *out, size_t n) {
    fflush(stderr);
    FILE *f = tmpfile();
    CHECK(f != NULL);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fileno(f), 2) == 2);
    int rc = t ? weft_task_wait(t) : weft_wait_all(rt);
    fflush(stderr);
    CHECK(dup2(saved, 2) == 2);
    close(saved);
    CHECK_OK(rc);
    rewind(f);
    size_t got = fread(out, 1, n - 1, f);
    out[got] = '\0';
    fclose(f);
}

static void test_stall_word(void) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = "cpu";
    cfg.stall_warn_ms = 30;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "S", &s));
    weft_task *missing;
    int64_t k = 5;
    CHECK_OK(weft_space_task(s, &k, 1, &missing));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = record;
    d.arg = (void *)(intptr_t)2;
    d.deps = &missing;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK_OK(weft_wait_settled_timed(rt, 30ull * 1000000000ull));
    char key[32] = "";
    CHECK(weft_runtime_stalled(rt, key) == 1);
    CHECKF(strcmp(key, "S[5]") == 0, "key: %s", key);
    CHECK(weft_runtime_stalled(NULL, key) == 0 && weft_runtime_stalled(rt, NULL) == 0);
    late_spawn l = {s, 5, 400 * 1000000ull};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, spawn_late, &l) == 0);
    char said[2048];
    wait_capturing(rt, NULL, said, sizeof said);
    pthread_join(th, NULL);
    CHECKF(strstr(said, "S[5]") && strstr(said, "nobody has spawned"), "stderr: %s", said);
    char *second = strstr(said, "nobody has spawned");
    CHECKF(!strstr(second + 1, "nobody has spawned"), "said twice: %s", said);
    CHECKF(strstr(said, "weft_wait_all"), "stderr: %s", said);

    /* The same from weft_task_wait. */
    k = 6;
    CHECK_OK(weft_space_task(s, &k, 1, &missing));
    d.deps = &missing;
    weft_task *t;
    CHECK_OK(weft_spawn(rt, &d, &t));
    l.key = 6;
    CHECK(pthread_create(&th, NULL, spawn_late, &l) == 0);
    wait_capturing(rt, t, said, sizeof said);
    pthread_join(th, NULL);
    weft_task_release(t);
    CHECKF(strstr(said, "weft_task_wait") && strstr(said, "S[6]"), "stderr: %s", said);

    /* A body that runs long is not a stall. */
    weft_task_desc_init(&d);
    d.body = sleepy;
    d.arg = (void *)(uintptr_t)(300 * 1000000ull);
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK(weft_runtime_stalled(rt, key) == 0); /* (a body runs) */
    wait_capturing(rt, NULL, said, sizeof said);
    CHECKF(said[0] == '\0', "stderr: %s", said);
    CHECK_OK(weft_space_destroy(s));
    CHECK_OK(weft_runtime_destroy(rt));

    /* UINT64_MAX: never a word. */
    cfg.stall_warn_ms = UINT64_MAX;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    CHECK_OK(weft_space_create(rt, "Q", &s));
    CHECK_OK(weft_space_task(s, &k, 1, &missing));
    weft_task_desc_init(&d);
    d.body = record;
    d.arg = (void *)(intptr_t)3;
    d.deps = &missing;
    d.ndeps = 1;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    l.s = s;
    l.after_ns = 200 * 1000000ull;
    CHECK(pthread_create(&th, NULL, spawn_late, &l) == 0);
    wait_capturing(rt, NULL, said, sizeof said);
    pthread_join(th, NULL);
    CHECKF(said[0] == '\0', "stderr: %s", said);
    CHECK_OK(weft_runtime_destroy(rt));
}

/* A body that waits (weft_task_wait) for a key nobody spawns is left only
 * a spawn to end its wait, as a task that depends on the key is: destroy
 * cancels the key, the wait returns WEFT_ECANCELLED, and destroy says so
 * rather than waiting for the body for ever.  A key another body spawns
 * while destroy waits is not cancelled. */
typedef struct late_key {
    weft_space *s;
    int64_t k;
} late_key;

static int spawn_key_late(weft_ctx *ctx, void *arg) {
    (void)ctx;
    late_key *l = arg;
    struct timespec ts = {0, 100 * 1000000L};
    nanosleep(&ts, NULL);
    return sspawn(l->s, l->k, record, 5, NULL, 0, "late", NULL);
}

/* A body that waits for `on` (a task), its wait's result in *rc; with
 * `inner` set, it first spawns a task running inner's body and waits for
 * that instead (a body nested under this one on the same worker, when
 * the worker helps). */
typedef struct waiter {
    weft_runtime *rt;
    weft_task *on;
    atomic_int rc;
    struct waiter *inner;
} waiter;

static int wait_in_body(weft_ctx *ctx, void *arg);

static weft_task *spawn_waiter(weft_runtime *rt, waiter *w, const char *name) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = wait_in_body;
    d.arg = w;
    d.name = name;
    weft_task *t = NULL;
    CHECK_OK(weft_spawn(rt, &d, &t));
    return t;
}

static int wait_in_body(weft_ctx *ctx, void *arg) {
    (void)ctx;
    waiter *w = arg;
    weft_task *on = w->on;
    if (w->inner)
        on = spawn_waiter(w->rt, w->inner, "inner");
    atomic_store(&w->rc, weft_task_wait(on));
    if (w->inner)
        weft_task_release(on);
    return 0;
}

/* Bodies waiting for a key nobody spawns through another task: one that
 * depends on the key, a body that waits for it, a body nested under the
 * waiting one on the same worker.  Destroy cancels the key, and every
 * wait returns. */
static void test_body_waits_indirectly_for_unspawned(void) {
    for (unsigned workers = 1; workers <= 2; workers++) {
        /* Through a dependency: A waits for X, which depends on I[1]. */
        weft_runtime *rt = make_rt(workers);
        weft_space *s;
        CHECK_OK(weft_space_create(rt, "I", &s));
        weft_task *missing = key(s, 1);
        weft_task_desc d;
        weft_task_desc_init(&d);
        d.body = record;
        d.arg = (void *)(intptr_t)1;
        d.deps = &missing;
        d.ndeps = 1;
        weft_task *x = NULL;
        CHECK_OK(weft_spawn(rt, &d, &x));
        waiter a = {rt, x, -1, NULL};
        weft_task_release(spawn_waiter(rt, &a, "A"));
        CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECANCELLED);
        CHECKF(strstr(weft_last_error(), "I[1]") != NULL, "message: %s", weft_last_error());
        CHECKF(atomic_load(&a.rc) == WEFT_ECANCELLED, "A's wait gave %d", atomic_load(&a.rc));
        weft_task_release(x);
        weft_task_release(missing);

        /* Through a body: A waits for B, whose body waits for J[2]; then
         * C waits for A too.  On one worker A is queued behind B, on two
         * C is queued behind A and B (or runs A nested in its wait): tasks
         * that none of the stuck waits can run. */
        for (int levels = 2; levels <= 3; levels++) {
            rt = make_rt(workers);
            CHECK_OK(weft_space_create(rt, "J", &s));
            missing = key(s, 2);
            waiter b = {rt, missing, -1, NULL};
            weft_task *tb = spawn_waiter(rt, &b, "B");
            waiter wa = {rt, tb, -1, NULL};
            weft_task *ta = spawn_waiter(rt, &wa, "A");
            waiter c = {rt, ta, -1, NULL};
            if (levels == 3)
                weft_task_release(spawn_waiter(rt, &c, "C"));
            CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECANCELLED);
            CHECKF(strstr(weft_last_error(), "J[2]") != NULL, "message: %s", weft_last_error());
            CHECKF(atomic_load(&b.rc) == WEFT_ECANCELLED, "B's wait gave %d", atomic_load(&b.rc));
            CHECKF(atomic_load(&wa.rc) == 0, "A's wait gave %d (B completed)", atomic_load(&wa.rc));
            CHECKF(levels < 3 || atomic_load(&c.rc) == 0, "C's wait gave %d", atomic_load(&c.rc));
            weft_task_release(ta);
            weft_task_release(tb);
            weft_task_release(missing);
        }

        /* Nested: A spawns B and waits for it, B spawns C and waits for
         * it, C's body waits for N[3] (on one worker, B runs nested under
         * A's wait and C under B's). */
        rt = make_rt(workers);
        CHECK_OK(weft_space_create(rt, "N", &s));
        missing = key(s, 3);
        waiter nc = {rt, missing, -1, NULL};
        waiter nb = {rt, NULL, -1, &nc};
        waiter na = {rt, NULL, -1, &nb};
        weft_task_release(spawn_waiter(rt, &na, "A"));
        CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECANCELLED);
        CHECKF(strstr(weft_last_error(), "N[3]") != NULL, "message: %s", weft_last_error());
        CHECKF(atomic_load(&nc.rc) == WEFT_ECANCELLED, "C's wait gave %d", atomic_load(&nc.rc));
        CHECKF(atomic_load(&nb.rc) == 0, "B's wait gave %d", atomic_load(&nb.rc));
        CHECKF(atomic_load(&na.rc) == 0, "A's wait gave %d", atomic_load(&na.rc));
        weft_task_release(missing);
    }
}

static void test_body_waits_for_unspawned(void) {
    weft_runtime *rt = make_rt(2);
    weft_space *s;
    CHECK_OK(weft_space_create(rt, "W", &s));
    weft_task *missing = key(s, 3);
    waiter w = {rt, missing, -1, NULL};
    weft_task_release(spawn_waiter(rt, &w, "waits-in-body"));
    CHECK_ERR(weft_runtime_destroy(rt), WEFT_ECANCELLED);
    CHECKF(strstr(weft_last_error(), "W[3]") != NULL, "message: %s", weft_last_error());
    CHECKF(atomic_load(&w.rc) == WEFT_ECANCELLED, "the body's wait gave %d", atomic_load(&w.rc));
    weft_task_release(missing);

    /* The key is spawned by a body still running when destroy begins. */
    rt = make_rt(2);
    CHECK_OK(weft_space_create(rt, "L", &s));
    missing = key(s, 4);
    waiter l_w = {rt, missing, -1, NULL};
    weft_task_release(spawn_waiter(rt, &l_w, "waits-in-body"));
    late_key l = {s, 4};
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = spawn_key_late;
    d.arg = &l;
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(atomic_load(&l_w.rc) == 0, "the body's wait gave %d", atomic_load(&l_w.rc));
    weft_task_release(missing);
}

/* Bodies that wait for each other without a timeout: A for B, B for A,
 * each on a worker of its own (both running before either waits: a body
 * that ran B nested in A's wait would have B's wait for A refused). */
static weft_task *_Atomic cycle_a, *_Atomic cycle_b;
static atomic_int cycle_started;

static int wait_for_other(weft_ctx *ctx, void *arg) {
    (void)ctx;
    weft_task *_Atomic *other = arg;
    atomic_fetch_add(&cycle_started, 1);
    weft_task *t;
    while (atomic_load(&cycle_started) < 2 || !(t = atomic_load(other)))
        sched_yield();
    return weft_task_wait(t);
}

/* In a child process (the deadlock it makes never ends): a wait_all beside
 * bodies in a cycle of waits says so once on stderr, naming the tasks
 * waited for; the wait goes on (timed here, so that the child can look). */
static void deadlock_word_child(void) {
    unsigned workers = 2;
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = workers;
    cfg.devices = "cpu";
    cfg.stall_warn_ms = 30;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = wait_for_other;
    d.name = "A";
    d.arg = (void *)&cycle_b;
    weft_task *a, *b;
    CHECK_OK(weft_spawn(rt, &d, &a));
    d.name = "B";
    d.arg = (void *)&cycle_a;
    CHECK_OK(weft_spawn(rt, &d, &b));
    atomic_store(&cycle_a, a);
    atomic_store(&cycle_b, b);
    fflush(stderr);
    FILE *f = tmpfile();
    CHECK(f != NULL);
    int saved = dup(2);
    CHECK(saved >= 0 && dup2(fileno(f), 2) == 2);
    int rc = weft_wait_all_timed(rt, 1500ull * 1000000ull);
    fflush(stderr);
    CHECK(dup2(saved, 2) == 2);
    CHECK_RC(rc, WEFT_ETIMEDOUT);
    char said[2048];
    rewind(f);
    size_t got = fread(said, 1, sizeof said - 1, f);
    said[got] = '\0';
    CHECKF(strstr(said, "deadlock") && strstr(said, "weft_wait_all"), "stderr: %s", said);
    CHECKF(strstr(said, "task 'A'") || strstr(said, "task 'B'"), "no task named: %s", said);
    char *second = strstr(said, "deadlock");
    CHECKF(!strstr(second + 1, "no task can move"), "said twice: %s", said);
    char what[96] = "x";
    CHECK(weft_runtime_deadlocked(rt, what, sizeof what) == 2);
    CHECKF(strstr(what, "task 'A' (id ") && strstr(what, "task 'B' (id "), "what: %s", what);
    CHECK(weft_runtime_deadlocked(rt, what, 12) == 2 && strlen(what) == 11); /* cut to len */
    strcpy(what, "x");
    CHECK(weft_runtime_deadlocked(rt, NULL, 8) == 0 && weft_runtime_deadlocked(rt, what, 0) == 0);
    CHECK(weft_runtime_deadlocked(NULL, what, sizeof what) == 0 && strcmp(what, "x") == 0);
    fflush(stdout);
    _exit(0);
}

static void test_deadlock_word(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0)
        deadlock_word_child();
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ended with status %d", status);
    /* A runtime with nothing stuck: no deadlock, even while a body runs. */
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = "cpu";
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    char what[64] = "x";
    CHECK(weft_runtime_deadlocked(rt, what, sizeof what) == 0 && strcmp(what, "x") == 0);
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = sleepy;
    d.arg = (void *)(uintptr_t)(100 * 1000000ull);
    CHECK_OK(weft_spawn(rt, &d, NULL));
    CHECK(weft_runtime_deadlocked(rt, what, sizeof what) == 0);
    CHECK_OK(weft_runtime_destroy(rt));
}

int main(void) {
    test_watchdog(test_pick(60, 200));
    test_step("out of order");
    test_out_of_order();
    test_step("failure through a key");
    test_failure_through_key();
    test_step("cycles");
    test_cycles();
    test_step("unspawned keys");
    test_unspawned();
    test_step("race");
    test_race();
    test_step("reverse chain");
    test_reverse_chain();
    test_step("cancel an unspawned key");
    test_cancel_unspawned();
    test_step("cancel racing spawn");
    test_cancel_racing_spawn();
    test_step("destroy and settled");
    test_destroy_and_settled();
    test_step("misuse");
    test_misuse();
    test_step("a wait that only a spawn can end says so");
    test_stall_word();
    test_step("a wait beside bodies waiting for each other says so");
    test_deadlock_word();
    test_step("a body waiting for an unspawned key");
    test_body_waits_for_unspawned();
    test_step("bodies waiting for an unspawned key through other tasks");
    test_body_waits_indirectly_for_unspawned();
    printf("test_space: ok\n");
    return 0;
}
