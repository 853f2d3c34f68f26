/* The device interface (src/device/device.h) on its two kinds: the host
 * and the test device whose queues are served by threads.  Memory with
 * capacity accounting, in-order queues, events ordering one queue after
 * another, asynchronous copies, completion reports from the device's
 * thread, and host waits through the wait engine. */
#include "check.h"
#include "device/device.h"

static atomic_int trace_pos;
static atomic_int trace_log[16];

typedef struct step {
    int id;
    atomic_int *gate; /* wait for it first (NULL: none) */
} step;

static int kernel(void *arg) {
    step *s = arg;
    if (s->gate && wait_flag(s->gate, 20000) != 0) return 99;
    atomic_store(&trace_log[atomic_fetch_add(&trace_pos, 1)], s->id);
    return s->id == 13 ? -13 : 0;
}

static atomic_int reports, report_status;
static void on_done(void *cookie, int status) {
    (void)cookie;
    atomic_store(&report_status, status);
    atomic_fetch_add(&reports, 1);
}

static void exercise(weft__device *dev, int threaded) {
    const weft__device_ops *o = dev->ops;
    /* memory: capacity 1 MiB for the test device */
    void *a = NULL, *b = NULL, *big = NULL;
    CHECK_OK(o->mem_alloc(dev, 4096, &a));
    CHECK_OK(o->mem_alloc(dev, 4096, &b));
    CHECK(atomic_load(&dev->used) == 8192);
    if (threaded) CHECK_RC(o->mem_alloc(dev, 2u << 20, &big), WEFT_ENOMEM);
    CHECK(atomic_load(&dev->used) == 8192);

    /* two queues; q2's work must wait for an event recorded on q1 */
    weft__dqueue *q1, *q2;
    weft__devent *e;
    CHECK_OK(o->queue_create(dev, &q1));
    CHECK_OK(o->queue_create(dev, &q2));
    CHECK_OK(o->event_create(dev, &e));
    atomic_store(&trace_pos, 0);
    atomic_int gate1 = !threaded; /* the host runs inline: never hold it back */
    step s1 = {1, &gate1}, s2 = {2, NULL}, s3 = {3, NULL};
    memset(a, 7, 4096);
    memset(b, 0, 4096);
    CHECK_OK(weft__device_launch(o, q1, kernel, &s1, 0));
    CHECK_OK(o->copy(q1, b, a, 4096));
    CHECK_OK(o->event_record(e, q1));
    if (threaded) CHECK(o->event_query(e) == 0); /* q1 is held by its gate */
    CHECK_OK(o->queue_wait(q2, e));
    CHECK_OK(weft__device_launch(o, q2, kernel, &s2, 0));
    CHECK_OK(weft__device_launch(o, q2, kernel, &s3, 0));
    atomic_store(&reports, 0);
    CHECK_OK(o->notify(q2, on_done, NULL));
    if (threaded) {
        sleep_ms(20);
        CHECK(atomic_load(&trace_pos) == 0); /* nothing ran: q2 waits for q1's event */
        CHECK(atomic_load(&reports) == 0);
        atomic_store(&gate1, 1);
    }
    CHECK_OK(weft__device_event_wait(dev, e));
    CHECK(o->event_query(e) == 1);
    CHECK(((unsigned char *)b)[4095] == 7); /* the copy is visible once the event fired */
    while (atomic_load(&reports) == 0) sleep_ns(100000);
    CHECK(atomic_load(&report_status) == 0);
    CHECK(atomic_load(&trace_pos) == 3);
    CHECK(trace_log[0] == 1 && trace_log[1] == 2 && trace_log[2] == 3);

    /* a failing kernel is reported by the next completion report, once */
    step s13 = {13, NULL};
    atomic_store(&reports, 0);
    CHECK_OK(weft__device_launch(o, q1, kernel, &s13, 0));
    CHECK_OK(o->notify(q1, on_done, NULL));
    while (atomic_load(&reports) == 0) sleep_ns(100000);
    CHECK(atomic_load(&report_status) == -13);
    atomic_store(&reports, 0);
    CHECK_OK(o->notify(q1, on_done, NULL));
    while (atomic_load(&reports) == 0) sleep_ns(100000);
    CHECK(atomic_load(&report_status) == 0);

    o->event_destroy(e);
    o->queue_destroy(q1);
    o->queue_destroy(q2);
    o->mem_free(dev, a, 4096);
    o->mem_free(dev, b, 4096);
    CHECK(atomic_load(&dev->used) == 0);
}

int main(void) {
    test_watchdog(test_pick(60, 200));
    weft__waitset ws;
    weft__waitset_init(&ws);
    test_step("host device");
    weft__device *host = weft__host_device_new(&ws);
    CHECK(host != NULL);
    exercise(host, 0);
    weft__device_delete(host);
    test_step("test device");
    weft__device *dev = weft__test_device_new(&ws, 1000, 1u << 20);
    CHECK(dev != NULL);
    exercise(dev, 1);
    weft__device_delete(dev);
    printf("test_device: ok\n");
    return 0;
}
