/* Chrome trace: written at destroy to config.trace_path (copied) or
 * WEFT_TRACE; valid JSON with "X" events named after the tasks, one tid per
 * worker; trace_max_events bounds the events and counts the rest as dropped.
 *
 * Usage: test_trace OUTDIR CHECK_TRACE_PY   (exit 77 without python3) */
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h"

static const char *script;

static atomic_int meet_count;

/* Both workers must run one of these at the same time (bounded wait), so that
 * each worker has task events. */
static int meet(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    atomic_fetch_add(&meet_count, 1);
    uint64_t end = now_ns() + 5000000000ull;
    while (atomic_load(&meet_count) < 2 && now_ns() < end) sleep_ns(50000);
    return 0;
}

static int work(weft_ctx *ctx, void *arg) {
    (void)ctx;
    (void)arg;
    uint64_t end = now_ns() + 100000;
    while (now_ns() < end) {
    }
    return 0;
}

static void spawn_named(weft_runtime *rt, weft_body_fn body, const char *name) {
    weft_task_desc d;
    weft_task_desc_init(&d);
    d.body = body;
    d.name = name;
    CHECK_OK(weft_spawn(rt, &d, NULL));
}

static void run_checker(const char *path, unsigned workers, const char *names, long max_x) {
    char cmd[8192];
    if (max_x >= 0)
        snprintf(cmd, sizeof cmd, "python3 '%s' '%s' %u '%s' %ld", script, path, workers, names,
                 max_x);
    else
        snprintf(cmd, sizeof cmd, "python3 '%s' '%s' %u '%s'", script, path, workers, names);
    fflush(stdout);
    int st = system(cmd);
    CHECKF(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "trace check failed: %s", cmd);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && sb.st_size > 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_trace OUTDIR CHECK_TRACE_PY\n");
        return 2;
    }
    if (system("command -v python3 >/dev/null 2>&1") != 0) {
        printf("test_trace: python3 not found, skipped\n");
        return TEST_SKIP;
    }
    script = argv[2];
    test_watchdog(test_pick(60, 150));
    unsetenv("WEFT_TRACE");
    unsetenv("WEFT_WORKERS");

    /* 1. config.trace_path, two workers, named tasks. */
    char path[4096], buf[4096];
    snprintf(path, sizeof path, "%s/trace-test-1.json", argv[1]);
    remove(path);
    strcpy(buf, path);
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.trace_path = buf;
    weft_runtime *rt;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    strcpy(buf, "/nonexistent-dir/overwritten.json"); /* the path was copied */
    atomic_store(&meet_count, 0);
    spawn_named(rt, meet, "meet");
    spawn_named(rt, meet, "meet");
    static const char *names[] = {"alpha", "beta", "gamma"};
    for (int i = 0; i < 30; i++) spawn_named(rt, work, names[i % 3]);
    CHECK_OK(weft_wait_all(rt));
    CHECK(atomic_load(&meet_count) == 2);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(file_exists(path), "no trace written to %s", path);
    run_checker(path, 2, "meet,alpha,beta,gamma", -1);

    /* 2. WEFT_TRACE with a NULL config (and WEFT_WORKERS=1). */
    snprintf(path, sizeof path, "%s/trace-test-2.json", argv[1]);
    remove(path);
    setenv("WEFT_TRACE", path, 1);
    setenv("WEFT_WORKERS", "1", 1);
    CHECK_OK(weft_runtime_create(NULL, &rt));
    unsetenv("WEFT_TRACE");
    unsetenv("WEFT_WORKERS");
    CHECK(weft_runtime_workers(rt) == 1);
    for (int i = 0; i < 5; i++) spawn_named(rt, work, "solo");
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(file_exists(path), "WEFT_TRACE: no trace written to %s", path);
    run_checker(path, 1, "solo", -1);

    /* 3. trace_max_events: events beyond the limit are dropped and counted. */
    snprintf(path, sizeof path, "%s/trace-test-3.json", argv[1]);
    remove(path);
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.trace_path = path;
    cfg.trace_max_events = 4;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    atomic_store(&meet_count, 0);
    spawn_named(rt, meet, "meet");
    spawn_named(rt, meet, "meet");
    CHECK_OK(weft_wait_all(rt));
    for (int i = 0; i < 200; i++) spawn_named(rt, work, "many");
    CHECK_OK(weft_wait_all(rt));
    weft_stats st;
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECKF(st.trace_dropped >= 200 - 2 * 4,
           "trace_dropped %" PRIu64 " with 202 tasks and room for 4 events per worker",
           st.trace_dropped);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(file_exists(path), "no trace written to %s", path);
    run_checker(path, 2, "meet", 2 * 4);

    /* 4. No trace configured: nothing written, stats count nothing dropped. */
    weft_config_init(&cfg);
    cfg.workers = 1;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    for (int i = 0; i < 10; i++) spawn_named(rt, work, "untraced");
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_stats(rt, &st));
    CHECK(st.trace_dropped == 0);
    CHECK_OK(weft_runtime_destroy(rt));

    /* 5. Names that need escaping, and non-ASCII (UTF-8) names: the JSON is
     * valid and the names read back as given. */
    snprintf(path, sizeof path, "%s/trace-test-5.json", argv[1]);
    remove(path);
    weft_config_init(&cfg);
    cfg.workers = 1;
    cfg.trace_path = path;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    spawn_named(rt, work, "q\"uote\\back\tslash");
    spawn_named(rt, work, "caf\xc3\xa9 \xe2\x9c\x93");
    CHECK_OK(weft_wait_all(rt));
    CHECK_OK(weft_runtime_destroy(rt));
    CHECKF(file_exists(path), "no trace written to %s", path);
    /* check_trace.py takes the names as UTF-8 arguments. */
    run_checker(path, 1, "q\"uote\\back\tslash,caf\xc3\xa9 \xe2\x9c\x93", -1);

    printf("test_trace: ok\n");
    return 0;
}
