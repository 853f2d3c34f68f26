/* Virtual GPUs and the device string: which devices a runtime gets
 * (weft_config.devices, WEFT_DEVICES), what weft_device_info reports, bad
 * strings refused naming the bad part; each virtual GPU's arena (aligned,
 * private, capacity, reuse after free), events recorded on two queues (a
 * wait is about the newest record when it was queued; a record is the
 * newest only once it is queued), and the copy model (a copy takes its
 * modelled time and overlaps a kernel on another queue). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "testing.h"
#include "device/device.h"

static int make_with(const char *devices, weft_runtime **rt) {
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 2;
    cfg.devices = devices;
    cfg.vgpu_memory = 8u << 20;
    return weft_runtime_create(&cfg, rt);
}

static void expect_refused(const char *devices, const char *named) {
    weft_runtime *rt = NULL;
    int rc = make_with(devices, &rt);
    CHECKF(rc == WEFT_EINVAL, "devices \"%s\": got %d, expected WEFT_EINVAL", devices, rc);
    CHECKF(strstr(weft_last_error(), named) != NULL, "devices \"%s\": message \"%s\" does not name \"%s\"",
           devices, weft_last_error(), named);
    CHECK(rt == NULL);
}

static void test_device_strings(void) {
    weft_runtime *rt;
    /* good strings */
    struct {
        const char *s;
        unsigned n;
        int cpu;
    } good[] = {{NULL, 1, 1}, {"", 1, 1}, {"cpu", 1, 1}, {"cpu,vgpu:4", 5, 1}, {" cpu , vgpu:2 ", 3, 1},
                {"vgpu", 2, 0}, {"vgpu:3,cpu", 4, 1}};
    /* the default adds every CUDA device found (none here, unless a GPU is) */
    unsigned ngpu = (unsigned)weft__test_cuda_count();
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        unsigned cuda = good[i].s == NULL || good[i].s[0] == '\0' ? ngpu : 0;
        good[i].n += cuda;
        CHECK_OK(make_with(good[i].s, &rt));
        CHECKF(weft_device_count(rt) == good[i].n, "devices \"%s\": %u devices", good[i].s ? good[i].s : "(null)",
               weft_device_count(rt));
        weft_device_info info;
        CHECK_OK(weft_device_info_get(rt, 0, &info));
        CHECK(info.kind == WEFT_DEVICE_CPU && info.index == 0 && info.ordinal == -1 && strcmp(info.name, "cpu") == 0);
        CHECK(info.cpu_tasks == good[i].cpu);
        for (unsigned d = 1; d <= cuda; d++) {
            CHECK_OK(weft_device_info_get(rt, d, &info));
            CHECK(info.kind == WEFT_DEVICE_CUDA);
        }
        for (unsigned d = 1 + cuda; d < good[i].n; d++) {
            CHECK_OK(weft_device_info_get(rt, d, &info));
            char name[32];
            snprintf(name, sizeof name, "vgpu:%u", d - 1);
            CHECK(info.kind == WEFT_DEVICE_VGPU && info.index == d && info.ordinal == (int)d - 1);
            CHECK(strcmp(info.name, name) == 0 && info.memory == 8u << 20 && info.memory_used == 0);
            CHECK(info.cpu_tasks == 0);
        }
        CHECK_ERR(weft_device_info_get(rt, good[i].n, &info), WEFT_EINVAL);
        CHECK_ERR(weft_device_info_get(rt, 0, NULL), WEFT_EINVAL);
        CHECK_OK(weft_runtime_destroy(rt));
        CHECK(weft_device_count(rt) == 0);
        CHECK_ERR(weft_device_info_get(rt, 0, &info), WEFT_ECLOSED);
    }
    /* bad strings: refused, naming what was wrong */
    expect_refused("cpu,gpu:2", "'gpu'");
    expect_refused("vgpu:0", "vgpu:0");
    expect_refused("vgpu:x", "vgpu:x");
    expect_refused("vgpu:65", "vgpu:65");
    expect_refused("cpu,,vgpu", "empty item 2");
    expect_refused("cpu,cpu", "'cpu' given twice");
    expect_refused("vgpu:2,vgpu:1", "'vgpu' given twice");
    expect_refused("cpu:3", "cpu takes no count");
    expect_refused("cuda:0,0", "CUDA device 0 given twice");
    expect_refused("cuda:x", "cuda:x");
    expect_refused("cpu,7", "'7'");
    /* CUDA devices asked for by name must exist */
    if (weft__test_cuda_count() == 0)
        expect_refused("cpu,cuda", "'cuda': no CUDA device found");
    expect_refused("cpu,cuda:63", "'cuda:63'");
    /* WEFT_DEVICES is read by weft_config_init */
    CHECK(setenv("WEFT_DEVICES", "cpu,vgpu:2", 1) == 0);
    CHECK(setenv("WEFT_VGPU_MEMORY", "4194304", 1) == 0);
    weft_config cfg;
    weft_config_init(&cfg);
    cfg.workers = 1;
    CHECK_OK(weft_runtime_create(&cfg, &rt));
    CHECK(weft_device_count(rt) == 3);
    weft_device_info info;
    CHECK_OK(weft_device_info_get(rt, 2, &info));
    CHECK(info.memory == 4u << 20);
    CHECK_OK(weft_runtime_destroy(rt));
    CHECK(setenv("WEFT_DEVICES", "cpu,bogus", 1) == 0);
    CHECK_ERR(weft_runtime_create(NULL, &rt), WEFT_EINVAL);
    CHECK(strstr(weft_last_error(), "'bogus'") != NULL);
    unsetenv("WEFT_DEVICES");
    unsetenv("WEFT_VGPU_MEMORY");
}

static void test_arenas(void) {
    weft__waitset ws;
    weft__waitset_init(&ws);
    weft__vgpu_params p;
    weft__vgpu_params_default(&p);
    p.capacity = 1u << 20;
    weft__device *a = weft__vgpu_new(&ws, &p, "a"), *b = weft__vgpu_new(&ws, &p, "b");
    CHECK(a && b);
    void *pa[16], *pb;
    /* aligned, inside its own arena, capacity enforced */
    for (int i = 0; i < 16; i++) {
        CHECK_OK(a->ops->mem_alloc(a, 65536 - 100, &pa[i]));
        CHECK(((uintptr_t)pa[i] & 255) == 0);
        CHECK(weft__vgpu_of(pa[i]) == a);
        memset(pa[i], i, 65536 - 100);
    }
    CHECK(atomic_load(&a->used) == 16 * 65536);
    void *more;
    CHECK_RC(a->ops->mem_alloc(a, 1, &more), WEFT_ENOMEM);
    CHECK_OK(b->ops->mem_alloc(b, 4096, &pb));
    CHECK(weft__vgpu_of(pb) == b && weft__vgpu_of(&p) == NULL);
    for (int i = 0; i < 16; i++) CHECK(((unsigned char *)pa[i])[100] == i); /* nothing overlaps */
    /* freed out of order, the blocks merge: the whole arena in one piece */
    for (int i = 0; i < 16; i += 2) a->ops->mem_free(a, pa[i], 65536 - 100);
    for (int i = 15; i > 0; i -= 2) a->ops->mem_free(a, pa[i], 65536 - 100);
    CHECK(atomic_load(&a->used) == 0);
    void *whole;
    CHECK_OK(a->ops->mem_alloc(a, 1u << 20, &whole));
    a->ops->mem_free(a, whole, 1u << 20);
    b->ops->mem_free(b, pb, 4096);
    CHECK(atomic_load(&b->used) == 0);
    weft__device_delete(a);
    weft__device_delete(b);
    CHECK(weft__vgpu_of(pb) == NULL); /* the arena is gone */
}

static atomic_int done_count, copy_done;
static void on_done(void *cookie, int status) {
    (void)cookie;
    CHECK(status == 0);
    atomic_fetch_add(&done_count, 1);
}
static void on_copy_done(void *cookie, int status) {
    on_done(cookie, status);
    atomic_store(&copy_done, 1);
}
/* Runs until the copy on the other queue has finished: only queues that run
 * at the same time let it end (wait_flag gives up after 20 s: a failure). */
static int kernel_waits_for_copy(void *arg) {
    (void)arg;
    return wait_flag(&copy_done, 20000) == 0 ? 0 : 1;
}

static void test_copy_model(void) {
    weft__waitset ws;
    weft__waitset_init(&ws);
    weft__vgpu_params p;
    weft__vgpu_params_default(&p);
    p.capacity = 64u << 20;
    p.host_bw = 10e9; /* 10 GB/s: 20 MB in 2 ms */
    weft__device *d = weft__vgpu_new(&ws, &p, "m");
    CHECK(d != NULL);
    const weft__device_ops *o = d->ops;
    size_t n = 20u << 20;
    char *host = malloc(n);
    CHECK(host != NULL);
    memset(host, 5, n);
    void *dev;
    CHECK_OK(o->mem_alloc(d, n, &dev));
    CHECK(weft__vgpu_copy_ns(&p, d, dev, host, n) >= 2000000);
    weft__dqueue *q1, *q2;
    CHECK_OK(o->queue_create(d, &q1));
    CHECK_OK(o->queue_create(d, &q2));
    /* alone: the copy takes its modelled time */
    atomic_store(&done_count, 0);
    uint64_t t0 = now_ns();
    CHECK_OK(o->copy(q1, dev, host, n));
    CHECK_OK(o->notify(q1, on_done, NULL));
    while (atomic_load(&done_count) < 1) sleep_ns(100000);
    uint64_t copy_alone = now_ns() - t0;
    CHECK(copy_alone >= 2000000);
    CHECK(((unsigned char *)dev)[n - 1] == 5);
    /* a kernel on another queue that runs until this copy has finished:
     * the copy overlaps it, or the kernel would never end */
    atomic_store(&done_count, 0);
    atomic_store(&copy_done, 0);
    CHECK_OK(weft__device_launch(o, q2, kernel_waits_for_copy, NULL, 0));
    CHECK_OK(o->notify(q2, on_done, NULL));
    CHECK_OK(o->copy(q1, host, dev, n));
    CHECK_OK(o->notify(q1, on_copy_done, NULL));
    while (atomic_load(&done_count) < 2) sleep_ns(100000);
    o->queue_destroy(q1);
    o->queue_destroy(q2);
    o->mem_free(d, dev, n);
    free(host);
    weft__device_delete(d);
}

/* ---- checking mode: a missing event wait is caught, whatever the timing */

static atomic_int check_reports, check_status;
static void on_check_done(void *cookie, int status) {
    (void)cookie;
    atomic_store(&check_status, status);
    atomic_fetch_add(&check_reports, 1);
}
static atomic_int writer_started;
static int writer_kernel(void *arg) { /* expects its range poisoned first */
    unsigned char *p = arg;
    int ok = p[0] == 0xDB && p[63] == 0xDB;
    atomic_store(&writer_started, 1);
    sleep_ms(2);
    memset(p, 7, 64);
    return ok ? 0 : 5;
}
static int reader_kernel(void *arg) {
    unsigned char *p = arg;
    return p[0] == 7 ? 0 : 6;
}
static int launch_rw(const weft__device_ops *o, weft__dqueue *q, weft__kernel_fn fn, void *arg, const weft_range *rw) {
    weft__launch k = {fn, arg, 0, rw, 1, NULL, NULL, NULL, NULL};
    return o->launch(q, &k);
}
static int report_of(const weft__device_ops *o, weft__dqueue *q) {
    atomic_store(&check_reports, 0);
    CHECK_OK(o->notify(q, on_check_done, NULL));
    CHECK(wait_flag(&check_reports, 20000) == 0);
    return atomic_load(&check_status);
}

/* A virtual GPU of 1 MiB on its own, checking or not. */
static weft__device *small_vgpu(weft__waitset *ws, bool check, const char *name) {
    weft__vgpu_params p;
    weft__vgpu_params_default(&p);
    p.capacity = 1u << 20;
    p.check = check;
    weft__device *d = weft__vgpu_new(ws, &p, name);
    CHECK(d != NULL);
    return d;
}

static void test_check_mode(void) {
    weft__waitset ws;
    weft__waitset_init(&ws);
    weft__device *a = small_vgpu(&ws, true, "a"), *b = small_vgpu(&ws, true, "b");
    const weft__device_ops *o = a->ops;
    weft__dqueue *qa, *qb;
    CHECK_OK(o->queue_create(a, &qa));
    CHECK_OK(o->queue_create(b, &qb));
    weft__devent *e;
    CHECK_OK(o->event_create(a, &e));
    static unsigned char buf[4][64];
    /* ordered by an event: fine, and the written range was poisoned first */
    weft_range w0 = {buf[0], 64, WEFT_W}, r0 = {buf[0], 64, WEFT_R};
    CHECK_OK(launch_rw(o, qa, writer_kernel, buf[0], &w0));
    CHECK_OK(o->event_record(e, qa));
    CHECK_OK(o->queue_wait(qb, e));
    CHECK_OK(launch_rw(o, qb, reader_kernel, buf[0], &r0));
    CHECK(report_of(o, qb) == 0);
    CHECK(report_of(o, qa) == 0);
    /* the planted bug: the same, without the wait.  The reader is queued
     * once the writer has started (seen through a plain flag, which orders
     * nothing); whether the writer is still running when the reader starts
     * or has finished, nothing orders the two on the devices: caught */
    weft_range w1 = {buf[1], 64, WEFT_W}, r1 = {buf[1], 64, WEFT_R};
    atomic_store(&writer_started, 0);
    CHECK_OK(launch_rw(o, qa, writer_kernel, buf[1], &w1));
    CHECK(wait_flag(&writer_started, 20000) == 0);
    CHECK_OK(launch_rw(o, qb, reader_kernel, buf[1], &r1));
    CHECK(report_of(o, qb) == WEFT_EDEVICE);
    char msg[320];
    weft__test_vcheck_last(msg, sizeof msg);
    CHECKF(strstr(msg, "not ordered after") != NULL, "message: %s", msg);
    /* a copy is a read of its source: caught the same way */
    weft_range w2 = {buf[2], 64, WEFT_W};
    CHECK_OK(launch_rw(o, qa, writer_kernel, buf[2], &w2));
    CHECK(report_of(o, qa) == 0); /* the host saw it finish ... */
    CHECK_OK(o->copy(qb, buf[3], buf[2], 64)); /* ... and queued this after: ordered */
    CHECK(report_of(o, qb) == 0);
    CHECK(buf[3][0] == 7);
    atomic_store(&writer_started, 0);
    CHECK_OK(launch_rw(o, qa, writer_kernel, buf[2], &w2));
    CHECK(wait_flag(&writer_started, 20000) == 0);
    CHECK_OK(o->copy(qb, buf[3], buf[2], 64)); /* no wait, no report seen: caught */
    CHECK(report_of(o, qb) == WEFT_EDEVICE);
    CHECK(report_of(o, qa) == 0);
    /* a host that waited for the writer's event orders what it queues next */
    CHECK_OK(launch_rw(o, qa, writer_kernel, buf[2], &w2));
    CHECK_OK(o->event_record(e, qa));
    CHECK_OK(weft__device_event_wait(a, e));
    CHECK_OK(o->copy(qb, buf[3], buf[2], 64));
    CHECK(report_of(o, qb) == 0);
    o->event_destroy(e);
    o->queue_destroy(qa);
    o->queue_destroy(qb);
    weft__device_delete(a);
    weft__device_delete(b);
}

/* ---- an event recorded on two queues: CUDA's semantics ------------------ */

/* A wait or a query is about the event's newest record when it was made:
 * an older record still pending on another queue is not waited for, and a
 * newer record done does not stand for an older one a wait was queued on
 * (were it to, a kernel could run unordered with a prefetch copy, as in
 * test_replicas' checked eviction graphs). */
static atomic_int release_a, a_done, c_saw, c_ran, d_ran;
static int blocked_kernel(void *arg) { /* runs until the test releases it */
    (void)arg;
    int rc = wait_flag(&release_a, 20000) == 0 ? 0 : 1;
    atomic_store(&a_done, 1);
    return rc;
}
static int after_a_kernel(void *arg) { /* queued after a wait on record 1 */
    (void)arg;
    atomic_store(&c_saw, atomic_load(&a_done));
    atomic_store(&c_ran, 1);
    return 0;
}
static int after_b_kernel(void *arg) { /* queued after a wait on record 2 */
    (void)arg;
    atomic_store(&d_ran, 1);
    return 0;
}
static void test_event_records(bool check) {
    weft__waitset ws;
    weft__waitset_init(&ws);
    weft__device *d = small_vgpu(&ws, check, "e");
    const weft__device_ops *o = d->ops;
    weft__dqueue *qa, *qb, *qc, *qd;
    CHECK_OK(o->queue_create(d, &qa));
    CHECK_OK(o->queue_create(d, &qb));
    CHECK_OK(o->queue_create(d, &qc));
    CHECK_OK(o->queue_create(d, &qd));
    weft__devent *e;
    CHECK_OK(o->event_create(d, &e));
    CHECK(o->event_query(e) == 1); /* never recorded: done */
    CHECK_OK(o->queue_wait(qd, e)); /* ... and nothing to wait for */
    atomic_store(&release_a, 0);
    atomic_store(&a_done, 0);
    atomic_store(&c_ran, 0);
    atomic_store(&d_ran, 0);
    CHECK_OK(weft__device_launch(o, qa, blocked_kernel, NULL, 0));
    CHECK_OK(o->event_record(e, qa)); /* record 1: pending behind the blocked kernel */
    CHECK(o->event_query(e) == 0);
    CHECK_OK(o->queue_wait(qc, e));   /* on record 1 */
    CHECK_OK(weft__device_launch(o, qc, after_a_kernel, NULL, 0));
    CHECK_OK(o->event_record(e, qb)); /* record 2, on a queue with nothing before it */
    CHECK_OK(report_of(o, qb));
    CHECK(o->event_query(e) == 1);    /* about record 2: done, record 1 pending or not */
    CHECK_OK(o->queue_wait(qd, e));   /* on record 2: runs now */
    CHECK_OK(weft__device_launch(o, qd, after_b_kernel, NULL, 0));
    CHECK_OK(report_of(o, qd));
    CHECK(atomic_load(&d_ran) == 1);
    CHECK(atomic_load(&c_ran) == 0);  /* still waiting for record 1 */
    atomic_store(&release_a, 1);
    CHECK_OK(report_of(o, qc));
    CHECK(atomic_load(&c_ran) == 1 && atomic_load(&c_saw) == 1);
    CHECK_OK(report_of(o, qa));
    o->event_destroy(e);
    o->queue_destroy(qa);
    o->queue_destroy(qb);
    o->queue_destroy(qc);
    o->queue_destroy(qd);
    weft__device_delete(d);
}

/* ---- a record is the event's newest only once it is queued ------------- */

/* A thread records e on qu and is held up inside the call (the test hook)
 * while the main thread makes qs wait for e, records e2 on qs, and makes
 * qu wait for e2.  Were the record e's newest before it was queued, qs
 * would wait for a record queued on qu behind qu's wait for e2, which
 * itself is queued behind qs's wait: each queue waiting for the other for
 * ever (the placer's pooled events, recorded and waited for on different
 * threads, could do this). */
typedef struct {
    const weft__device_ops *o;
    weft__devent *e;
    weft__dqueue *q;
    int rc;
} late_record;
static void *record_late(void *arg) {
    late_record *a = arg;
    weft__test_vgpu_record_delay(400 * 1000000ull);
    a->rc = a->o->event_record(a->e, a->q);
    return NULL;
}
static void test_record_published_once_queued(bool check) {
    weft__waitset ws;
    weft__waitset_init(&ws);
    weft__device *d = small_vgpu(&ws, check, "w");
    const weft__device_ops *o = d->ops;
    weft__dqueue *qu, *qs;
    CHECK_OK(o->queue_create(d, &qu));
    CHECK_OK(o->queue_create(d, &qs));
    weft__devent *e, *e2;
    CHECK_OK(o->event_create(d, &e));
    CHECK_OK(o->event_create(d, &e2));
    for (int round = 0; round < 2; round++) { /* never recorded before, then recorded before */
        late_record a = {o, e, qu, -1};
        pthread_t t;
        CHECK(pthread_create(&t, NULL, record_late, &a) == 0);
        struct timespec ts = {0, 100 * 1000000L}; /* inside the record's call */
        nanosleep(&ts, NULL);
        CHECK_OK(o->queue_wait(qs, e));
        CHECK_OK(o->event_record(e2, qs));
        CHECK_OK(o->queue_wait(qu, e2));
        CHECK(pthread_join(t, NULL) == 0);
        CHECK_OK(a.rc);
        CHECK_OK(report_of(o, qs)); /* (20 s, then a failure: the queues would wait for ever) */
        CHECK_OK(report_of(o, qu));
        CHECK(o->event_query(e) == 1 && o->event_query(e2) == 1);
    }
    o->event_destroy(e);
    o->event_destroy(e2);
    o->queue_destroy(qu);
    o->queue_destroy(qs);
    weft__device_delete(d);
}


/* The seeded schedule (WEFT_VGPU_SCHEDULE): the order in which two GPUs'
 * queues run their work is the seed's choice — the same for one seed, run
 * after run, and not the same for every seed — and an event wait still
 * orders it.  A gate kernel holds the turn while the host queues the rest,
 * so that every item is offered before the first choice. */
enum { SCHED_ITEMS = 12 };
static _Atomic int sched_gate, sched_gate_in;
static int sched_log[3 * SCHED_ITEMS + 1], sched_nlog;
static int gate_kernel(void *arg) {
    (void)arg;
    atomic_store(&sched_gate_in, 1);
    while (!atomic_load(&sched_gate)) sched_yield();
    return 0;
}
static int log_kernel(void *arg) { /* one at a time: the schedule runs one item at a time */
    sched_log[sched_nlog++] = (int)(intptr_t)arg;
    return 0;
}
static void sched_run(uint64_t seed, int *order) {
    char s[24];
    snprintf(s, sizeof s, "%llu", (unsigned long long)seed);
    setenv("WEFT_VGPU_SCHEDULE", s, 1);
    weft__waitset ws;
    weft__waitset_init(&ws);
    weft__device *a = small_vgpu(&ws, false, "sa"), *b = small_vgpu(&ws, false, "sb");
    unsetenv("WEFT_VGPU_SCHEDULE");
    const weft__device_ops *o = a->ops;
    weft__dqueue *qa, *qb, *qc;
    CHECK_OK(o->queue_create(a, &qa));
    CHECK_OK(o->queue_create(b, &qb));
    CHECK_OK(o->queue_create(b, &qc));
    weft__devent *e;
    CHECK_OK(o->event_create(a, &e));
    atomic_store(&sched_gate, 0);
    atomic_store(&sched_gate_in, 0);
    sched_nlog = 0;
    weft__launch gate = {gate_kernel, NULL, 0, NULL, 0, NULL, NULL, NULL, NULL};
    CHECK_OK(o->launch(qa, &gate));
    CHECK(wait_flag(&sched_gate_in, 20000) == 0); /* holds the turn: what follows is offered meanwhile */
    for (int i = 0; i < SCHED_ITEMS; i++) { /* a: 100+i, b: 200+i, c: 300+i; c waits for a's 6th */
        weft__launch ka = {log_kernel, (void *)(intptr_t)(100 + i), (uint64_t)(i % 3) * 1000, NULL, 0, NULL, NULL, NULL, NULL};
        CHECK_OK(o->launch(qa, &ka));
        if (i == 5) CHECK_OK(o->event_record(e, qa));
    }
    CHECK_OK(o->queue_wait(qc, e));
    for (int i = 0; i < SCHED_ITEMS; i++) {
        weft__launch kb = {log_kernel, (void *)(intptr_t)(200 + i), 1500, NULL, 0, NULL, NULL, NULL, NULL};
        weft__launch kc = {log_kernel, (void *)(intptr_t)(300 + i), 500, NULL, 0, NULL, NULL, NULL, NULL};
        CHECK_OK(o->launch(qb, &kb));
        CHECK_OK(o->launch(qc, &kc));
    }
    atomic_store(&check_reports, 0); /* the reports too are queued before the gate opens */
    atomic_store(&check_status, 0);
    CHECK_OK(o->notify(qa, on_check_done, NULL));
    CHECK_OK(o->notify(qb, on_check_done, NULL));
    CHECK_OK(o->notify(qc, on_check_done, NULL));
    atomic_store(&sched_gate, 1);
    uint64_t t0 = now_ns();
    while (atomic_load(&check_reports) < 3 && now_ns() - t0 < 20000000000ull) sched_yield();
    CHECK(atomic_load(&check_reports) == 3 && atomic_load(&check_status) == 0);
    CHECK(sched_nlog == 3 * SCHED_ITEMS);
    int next[3] = {100, 200, 300}, a5 = -1;
    for (int i = 0; i < sched_nlog; i++) { /* each queue in order; c after a's 6th */
        int v = sched_log[i], k = v / 100 - 1;
        CHECKF(v == next[k], "item %d of the log is %d, expected %d", i, v, next[k]);
        next[k]++;
        if (v == 105) a5 = i;
        if (k == 2) CHECKF(a5 >= 0, "c's first kernel ran before a's 6th, which it waits for");
    }
    memcpy(order, sched_log, sizeof(int) * 3 * SCHED_ITEMS);
    o->event_destroy(e);
    o->queue_destroy(qa);
    o->queue_destroy(qb);
    o->queue_destroy(qc);
    weft__device_delete(a);
    weft__device_delete(b);
}
static void test_seeded_schedule(void) {
    int first[3 * SCHED_ITEMS], again[3 * SCHED_ITEMS];
    int distinct = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        sched_run(seed, first);
        for (int r = 0; r < 3; r++) {
            sched_run(seed, again);
            CHECKF(memcmp(first, again, sizeof first) == 0, "seed %llu ran in another order on run %d",
                   (unsigned long long)seed, r + 2);
        }
        static int prev[3 * SCHED_ITEMS];
        if (seed > 1 && memcmp(prev, first, sizeof first) != 0) distinct++;
        memcpy(prev, first, sizeof first);
    }
    CHECKF(distinct > 0, "six seeds, one order");
}

int main(void) {
    test_watchdog(test_pick(60, 200));
    test_step("device strings");
    test_device_strings();
    test_step("arenas");
    test_arenas();
    test_step("checking mode");
    test_check_mode();
    test_step("an event recorded on two queues");
    test_event_records(false);
    test_event_records(true);
    test_step("a record is the newest only once queued");
    test_record_published_once_queued(false);
    test_record_published_once_queued(true);
    test_step("copy model");
    test_copy_model();
    test_step("the seeded schedule");
    test_seeded_schedule();
    printf("test_vgpu: ok\n");
    return 0;
}
