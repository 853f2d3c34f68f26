#include <pthread.h>
#include <sched.h>

/* weft_config.pin_workers = WEFT_PIN_AUTO (src/autopin.h).
 *
 *   test_autopin decide   the decision, a pure function of the scans'
 *                         counts, the workers' samples and /proc/stat's
 *                         idle figures, on synthetic ones: when workers
 *                         count as packed; pins when most scans of a
 *                         window found them packed and the CPUs had idle
 *                         time to spare, not when they had none, not when
 *                         too few scans were packed, not with more workers
 *                         than CPUs; and whom it puts where.
 *   test_autopin e2e      end to end: two workers forced onto one CPU of
 *                         two (their affinity set behind the runtime's
 *                         back, as a scheduler packing them would leave
 *                         them) while they run tasks; the runtime must pin
 *                         them apart, say so in weft_stats and the trace,
 *                         and must not under WEFT_PIN_OFF.  Skipped (exit
 *                         77, with the reason) where the process may use
 *                         fewer than 2 CPUs, or where no pinning came while
 *                         the other CPUs were busy (the runtime rightly does
 *                         not pin then: a busy CI machine).  Then the same
 *                         in bursts of 6 ms with pauses between them, where
 *                         the machine has cpuidle's figures. */
#include "check.h"
#include "testing.h"
#include "autopin.h"

#define MS 1000000ull

static weft__pin_sample S(int cpu, uint64_t seen) {
    weft__pin_sample s = {cpu, seen};
    return s;
}

static const char *verdict(int r) {
    switch (r) {
    case WEFT__PIN_GO: return "GO";
    case WEFT__PIN_NOT_PACKED: return "NOT_PACKED";
    case WEFT__PIN_NO_IDLE: return "NO_IDLE";
    case WEFT__PIN_TOO_MANY: return "TOO_MANY";
    default: return "?";
    }
}

#define TICK (10 * MS) /* /proc/stat's at 100 Hz */

/* The decision on idle figures in ticks of /proc/stat, one segment (each
 * CPU's idle counted a tick short). */
static int plan_ticks(const weft__pin_sample *s, unsigned nw, const int *cpus, unsigned ncpus,
                      const uint64_t *idle_ticks, double elapsed_ticks, unsigned scans, unsigned packed,
                      uint64_t now, int *assign) {
    uint64_t idle[8];
    CHECK(ncpus <= 8);
    for (unsigned k = 0; k < ncpus; k++) idle[k] = idle_ticks[k] * TICK;
    return weft__autopin_plan(s, nw, cpus, ncpus, idle, (uint64_t)(elapsed_ticks * (double)TICK), TICK, scans,
                              packed, now, assign);
}

#define PLAN(want, s, nw, cpus, idle, elapsed, scans, packed, assign)                                  \
    do {                                                                                               \
        int r_ = plan_ticks(s, nw, cpus, sizeof cpus / sizeof cpus[0], idle, elapsed, scans, packed,   \
                            now, assign);                                                              \
        CHECKF(r_ == (want), "line %d: plan gave %s, want %s", __LINE__, verdict(r_), verdict(want)); \
    } while (0)

static void test_decide(void) {
    const uint64_t now = 1000 * MS;
    int assign[4];

    /* Packed now: two busy workers' latest samples on one CPU; not when
     * apart, when one is stale (no sample in 10 ms: idle), or has none. */
    weft__pin_sample packed[] = {S(0, now - MS / 2), S(0, now - 9 * MS)};
    CHECK(weft__autopin_packed(packed, 2, now) == 0);
    weft__pin_sample apart[] = {S(0, now), S(1, now)};
    CHECK(weft__autopin_packed(apart, 2, now) == -1);
    weft__pin_sample stale[] = {S(0, now), S(0, now - 11 * MS)};
    CHECK(weft__autopin_packed(stale, 2, now) == -1);
    weft__pin_sample none[] = {S(0, now), S(-1, 0)};
    CHECK(weft__autopin_packed(none, 2, now) == -1);
    weft__pin_sample later[] = {S(1, now + MS), S(1, now)}; /* (another worker's clock read later) */
    CHECK(weft__autopin_packed(later, 2, now) == 1);
    /* Two packings: the lower CPU. */
    weft__pin_sample two_packs[] = {S(3, now), S(1, now), S(3, now), S(1, now)};
    CHECK(weft__autopin_packed(two_packs, 4, now) == 1);

    /* A window of 30 scans, all packed, over 4 ticks; CPU 1 idle all of
     * them: pin, worker 0 keeping CPU 0 (its samples' order decides). */
    int two[] = {0, 1};
    uint64_t idle_free[] = {0, 4}, idle_busy[] = {0, 1};
    PLAN(WEFT__PIN_GO, packed, 2, two, idle_free, 4.0, 30, 30, assign);
    CHECKF(assign[0] == 0 && assign[1] == 1, "assign %d %d", assign[0], assign[1]);
    /* The same, the CPUs busy (other processes, other ranks): no. */
    PLAN(WEFT__PIN_NO_IDLE, packed, 2, two, idle_busy, 4.0, 30, 30, assign);
    /* Each CPU's idle counted a tick short, half the window needed: 2 of
     * 4 ticks shown is not enough, 3 is; so are 2 + 2 on two CPUs (the
     * packed pair moved between them), not 2 + 1. */
    uint64_t idle_half[] = {0, 2}, idle_enough[] = {0, 3}, idle_split[] = {2, 2}, idle_split_less[] = {2, 1};
    PLAN(WEFT__PIN_NO_IDLE, packed, 2, two, idle_half, 4.0, 30, 30, assign);
    PLAN(WEFT__PIN_GO, packed, 2, two, idle_enough, 4.0, 30, 30, assign);
    PLAN(WEFT__PIN_GO, packed, 2, two, idle_split, 4.0, 30, 30, assign);
    PLAN(WEFT__PIN_NO_IDLE, packed, 2, two, idle_split_less, 4.0, 30, 30, assign);

    /* The packing must have held: three quarters of at least 5 scans. */
    PLAN(WEFT__PIN_GO, packed, 2, two, idle_free, 4.0, 8, 6, assign);
    PLAN(WEFT__PIN_NOT_PACKED, packed, 2, two, idle_free, 4.0, 8, 5, assign);
    PLAN(WEFT__PIN_GO, packed, 2, two, idle_free, 4.0, 5, 4, assign);
    PLAN(WEFT__PIN_NOT_PACKED, packed, 2, two, idle_free, 4.0, 4, 4, assign);
    PLAN(WEFT__PIN_NOT_PACKED, packed, 2, two, idle_free, 4.0, 0, 0, assign);

    /* More workers than CPUs: never. */
    weft__pin_sample three[] = {packed[0], packed[1], S(1, now)};
    PLAN(WEFT__PIN_TOO_MANY, three, 3, two, idle_free, 4.0, 30, 30, assign);

    /* Four CPUs of a sparse set, three workers: 0 and 2 packed on CPU 5,
     * 1 alone on CPU 2; CPUs 0 and 7 idle, 7 the idlest: worker 0 keeps 5,
     * 1 keeps 2, 2 goes to 7. */
    int sparse[] = {0, 2, 5, 7};
    weft__pin_sample mixed[] = {S(5, now), S(2, now), S(5, now - 2 * MS)};
    uint64_t idle_sparse[] = {3, 0, 0, 4};
    PLAN(WEFT__PIN_GO, mixed, 3, sparse, idle_sparse, 4.0, 30, 28, assign);
    CHECKF(assign[0] == 5 && assign[1] == 2 && assign[2] == 7, "assign %d %d %d", assign[0], assign[1],
           assign[2]);

    /* An idle worker (stale sample) keeps its CPU after the busy ones;
     * the packed one left over takes the free CPU. */
    int three_cpus[] = {0, 1, 2};
    weft__pin_sample with_idle[] = {S(0, now), S(0, now), S(2, now - 400 * MS)};
    uint64_t idle3[] = {0, 4, 4};
    PLAN(WEFT__PIN_GO, with_idle, 3, three_cpus, idle3, 4.0, 30, 30, assign);
    CHECKF(assign[0] == 0 && assign[1] == 1 && assign[2] == 2, "assign %d %d %d", assign[0], assign[1],
           assign[2]);

    /* Four workers, two packed pairs: each pair's first keeps its CPU, the
     * others take the free ones, idlest first (ties: the lower). */
    int four[] = {0, 1, 2, 3};
    uint64_t idle4[] = {4, 0, 4, 0};
    PLAN(WEFT__PIN_GO, two_packs, 4, four, idle4, 4.0, 30, 30, assign);
    CHECKF(assign[0] == 3 && assign[1] == 1 && assign[2] == 0 && assign[3] == 2, "assign %d %d %d %d",
           assign[0], assign[1], assign[2], assign[3]);

    /* cpuidle's figures (microseconds): 8 ms of busy time in 3 segments
     * (bursts of tasks with pauses between them, left out), CPU 1 idle
     * 4.1 ms of it: half a CPU to spare, pin; 4.002 ms, counted 3 us short
     * (1 per segment): no. */
    uint64_t us_enough[] = {0, 4100 * 1000}, us_short[] = {0, 4002 * 1000};
    int r = weft__autopin_plan(packed, 2, two, 2, us_enough, 8 * MS, 3 * 1000, 10, 9, now, assign);
    CHECKF(r == WEFT__PIN_GO, "cpuidle, 4.1 of 8 ms idle: %s", verdict(r));
    r = weft__autopin_plan(packed, 2, two, 2, us_short, 8 * MS, 3 * 1000, 10, 9, now, assign);
    CHECKF(r == WEFT__PIN_NO_IDLE, "cpuidle, 4.002 of 8 ms idle, 3 segments: %s", verdict(r));
    printf("test_autopin decide: ok\n");
}

/* ---- end to end -------------------------------------------------------- */

/* Idle ticks (idle + iowait) of the CPUs in set, from /proc/stat: their
 * sum, or -1. */
static long long idle_ticks_of(const cpu_set_t *set) {
    FILE *f = fopen("/proc/stat", "r");
    if (!f) return -1;
    char line[512];
    long long sum = 0;
    int found = 0;
    while (fgets(line, sizeof line, f) && strncmp(line, "cpu", 3) == 0) {
        if (line[3] < '0' || line[3] > '9') continue;
        char *p;
        long cpu = strtol(line + 3, &p, 10);
        unsigned long long v[5];
        for (int i = 0; i < 5; i++) v[i] = strtoull(p, &p, 10);
        if (cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(cpu, set)) {
            sum += (long long)(v[3] + v[4]);
            found++;
        }
    }
    fclose(f);
    return found ? sum : -1;
}

static atomic_int e2e_stop;

/* A chain: spin 200 us, spawn the next. */
static int chain_link(weft_ctx *ctx, void *arg) {
    uint64_t until = now_ns() + 200000;
    while (now_ns() < until) {
    }
    if (atomic_load(&e2e_stop)) return 0;
    return weft_spawn_simple(weft_ctx_runtime(ctx), chain_link, arg, NULL);
}

/* Two workers forced onto CPU `c0` while two chains run, for up to
 * `limit_ms`, stopping as soon as the runtime pins; its stats after.
 * burst_ms > 0: the chains run in bursts that long, a pause of 25 ms
 * (the workers idle) after each. */
static weft_stats run_packed(unsigned pin, int c0, unsigned limit_ms, unsigned burst_ms, const char *trace,
                             int cpus[2]) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.pin_workers = pin;
    cfg.trace_path = trace;
    cfg.trace_max_events = 1000;
    weft_runtime *rt = NULL;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    CHECKF(weft__test_workers_affinity(rt, &c0, 1) == 0, "could not force the workers onto CPU %d", c0);
    weft_stats st;
    uint64_t end = now_ns() + (uint64_t)limit_ms * MS;
    atomic_store(&e2e_stop, 0);
    for (int k = 0; k < 2; k++) CHECK_OK(weft_spawn_simple(rt, chain_link, NULL, NULL));
    do {
        if (burst_ms) /* the program thread wakes each ms of a burst (see test_e2e) */
            for (unsigned ms = 0; ms < burst_ms; ms++) sleep_ms(1);
        else
            sleep_ms(5);
        if (burst_ms) { /* the burst ends; a pause; the next starts */
            atomic_store(&e2e_stop, 1);
            CHECK_OK(weft_wait_all(rt));
            sleep_ms(25);
            atomic_store(&e2e_stop, 0);
            for (int k = 0; k < 2; k++) CHECK_OK(weft_spawn_simple(rt, chain_link, NULL, NULL));
        }
        CHECK_OK(weft_runtime_stats(rt, &st));
    } while (st.autopins == 0 && now_ns() < end);
    atomic_store(&e2e_stop, 1);
    CHECK_OK(weft_wait_all(rt));
    for (unsigned w = 0; w < 2; w++) {
        int got[4];
        int n = weft__test_worker_cpus(rt, w, got, 4);
        CHECKF(n >= 1, "worker %u's CPUs unreadable", w);
        cpus[w] = n == 1 ? got[0] : -1; /* -1: more than one */
    }
    CHECK_OK(weft_runtime_destroy(rt));
    return st;
}

static void test_e2e(const char *dir) {
    cpu_set_t mine;
    CHECK(sched_getaffinity(0, sizeof mine, &mine) == 0);
    if (CPU_COUNT(&mine) < 2) {
        printf("test_autopin e2e: skipped: this process may run on %d CPU (packing needs two)\n",
               CPU_COUNT(&mine));
        exit(TEST_SKIP);
    }
    int c0 = -1;
    for (int c = 0; c < CPU_SETSIZE && c0 < 0; c++)
        if (CPU_ISSET(c, &mine)) c0 = c;
    cpu_set_t others = mine;
    CPU_CLR(c0, &others);
    int cpus[2];

    /* Off: never pinned, whatever it looks like. */
    weft_stats st = run_packed(WEFT_PIN_OFF, c0, 300, 0, NULL, cpus);
    CHECKF(st.autopins == 0, "WEFT_PIN_OFF: autopins %" PRIu64, st.autopins);
    CHECKF(cpus[0] == c0 && cpus[1] == c0, "WEFT_PIN_OFF moved the workers: CPUs %d %d", cpus[0], cpus[1]);

    /* Auto: pinned apart, one keeping c0. */
    char trace[512];
    snprintf(trace, sizeof trace, "%s/autopin-trace.json", dir);
    unlink(trace);
    long long idle0 = idle_ticks_of(&others);
    uint64_t t0 = now_ns();
    st = run_packed(WEFT_PIN_AUTO, c0, 10000, 0, trace, cpus);
    double secs = (double)(now_ns() - t0) / 1e9;
    long long idle1 = idle_ticks_of(&others);
    if (st.autopins == 0) {
        long hz = sysconf(_SC_CLK_TCK);
        double idle = idle0 >= 0 && idle1 >= 0 && hz > 0
                          ? (double)(idle1 - idle0) / ((double)hz * secs * CPU_COUNT(&others)) : -1;
        CHECKF(idle >= 0, "no pinning in %.1f s, and /proc/stat unreadable", secs);
        if (idle < 0.9) {
            printf("test_autopin e2e: skipped: no pinning in %.1f s while the other CPUs were busy (idle %.0f%% "
                   "of the time; the runtime pins only when they have time to spare)\n", secs, idle * 100);
            exit(TEST_SKIP);
        }
        CHECKF(st.autopins == 1, "no pinning in %.1f s, two workers packed on CPU %d while the other CPUs "
               "idled %.0f%% of the time", secs, c0, idle * 100);
    }
    CHECKF(st.autopins == 1, "autopins %" PRIu64, st.autopins);
    CHECKF(cpus[0] >= 0 && cpus[1] >= 0 && cpus[0] != cpus[1] && CPU_ISSET(cpus[0], &mine) &&
               CPU_ISSET(cpus[1], &mine) && (cpus[0] == c0 || cpus[1] == c0),
           "after pinning: worker CPUs %d and %d (packed on %d)", cpus[0], cpus[1], c0);
    FILE *f = fopen(trace, "r");
    CHECKF(f != NULL, "no trace at %s", trace);
    char buf[4096];
    bool found = false;
    while (!found && fgets(buf, sizeof buf, f)) found = strstr(buf, "\"workers pinned\"") != NULL;
    fclose(f);
    CHECKF(found, "the trace %s has no \"workers pinned\" event", trace);
    unlink(trace);
    printf("test_autopin e2e: ok (pinned within %.2f s: workers on CPUs %d and %d)\n", secs, cpus[0], cpus[1]);

    /* Bursts of 6 ms with pauses of 25 ms (a program that spawns some
     * tasks, waits for them, and does something else): the busy time adds
     * up over bursts, where cpuidle's figures make 6 ms measurable.
     * The program thread wakes every millisecond of a burst, as one that
     * polls or works beside its tasks does: cpuidle adds an idle period
     * when it ends (autopin.h), so a CPU asleep through a whole burst and
     * woken only in the pause shows its idle too late for that burst, and
     * such bursts are pinned only once some burst finds the CPU woken
     * during it (0.1 s to over 10 s here: the rule errs towards not
     * pinning). */
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/cpuidle/state0/time", c0);
    if (access(path, R_OK) != 0) {
        printf("test_autopin e2e: bursts: skipped: no cpuidle figures here (%s), and /proc/stat's ticks are "
               "longer than a burst\n", path);
        return;
    }
    idle0 = idle_ticks_of(&others);
    t0 = now_ns();
    st = run_packed(WEFT_PIN_AUTO, c0, 10000, 6, NULL, cpus);
    secs = (double)(now_ns() - t0) / 1e9;
    idle1 = idle_ticks_of(&others);
    if (st.autopins == 0) {
        long hz = sysconf(_SC_CLK_TCK);
        double idle = idle0 >= 0 && idle1 >= 0 && hz > 0
                          ? (double)(idle1 - idle0) / ((double)hz * secs * CPU_COUNT(&others)) : -1;
        if (idle >= 0 && idle < 0.9) {
            printf("test_autopin e2e: bursts: skipped: no pinning in %.1f s while the other CPUs were busy (idle "
                   "%.0f%% of the time)\n", secs, idle * 100);
            exit(TEST_SKIP);
        }
        CHECKF(st.autopins == 1, "bursts: no pinning in %.1f s, two workers packed on CPU %d in bursts of 6 ms "
               "while the other CPUs idled %.0f%% of the time", secs, c0, idle * 100);
    }
    CHECKF(cpus[0] >= 0 && cpus[1] >= 0 && cpus[0] != cpus[1], "bursts: after pinning: worker CPUs %d and %d",
           cpus[0], cpus[1]);
    printf("test_autopin e2e: bursts: ok (pinned within %.2f s)\n", secs);
}

int main(int argc, char **argv) {
    test_watchdog(test_pick(60, 150));
    if (argc >= 2 && strcmp(argv[1], "decide") == 0) {
        test_decide();
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "e2e") == 0) {
        test_e2e(argv[2]);
        return 0;
    }
    fprintf(stderr, "usage: test_autopin decide | e2e DIR\n");
    return 2;
}
