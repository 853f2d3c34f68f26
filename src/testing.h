/*
 * testing.h — hooks for Weft's own tests (not installed, not public API).
 * Tests link the static library, so these internal symbols resolve there.
 */
#ifndef WEFT_TESTING_H
#define WEFT_TESTING_H

#include <stdint.h>

/* Make the n-th internal allocation from now on fail (n >= 1), once.
 * n == 0 disables injection.  Thread-safe. */
void weft__alloc_fail_at(long n);

/* Number of internal allocations performed since the process started. */
long weft__alloc_count(void);

/* Blocks currently allocated through the internal allocator (type-stable
 * handle slots are counted while they are in use, not while pooled). */
long weft__alloc_live(void);

/* ---- the test device (a virtual GPU with fixed delays: device/vgpu.c) -----
 * Attach a test device to rt (before registering data that should have a
 * replica on it): its queue is served by a thread of its own, each kernel
 * after delay_ns.  *index receives its device index (1, 2, ...).  Errors:
 * WEFT_EINVAL (bad runtime, too many devices), WEFT_ENOMEM, WEFT_ESYSTEM. */
#include "weft.h"
int weft__test_device_add(weft_runtime *rt, uint64_t delay_ns, size_t capacity, unsigned *index);

/* From a body: queue fn(arg) on device `device`'s queue (model_ns: its delay,
 * 0 for the device's).  The task completes only once fn has run, from the
 * device's thread, after the body returned; a non-zero return of fn fails
 * the task with that value.  Errors: WEFT_EINVAL, WEFT_ENOMEM. */
int weft__test_launch(weft_ctx *ctx, unsigned device, int (*fn)(void *), void *arg, uint64_t model_ns);

/* From a body: the device's default queue as its kind's API knows it (a
 * cudaStream_t for CUDA), or NULL; and a completion report on that queue
 * for the task, so that it completes only after the work queued on the queue
 * so far (by the body, on the native queue).  Errors: WEFT_EINVAL,
 * WEFT_ENOMEM, WEFT_EDEVICE. */
void *weft__test_native_queue(weft_ctx *ctx, unsigned device);
int weft__test_enqueued(weft_ctx *ctx, unsigned device);

/* The device's capacity accounting: bytes allocated now. */
size_t weft__test_device_used(weft_runtime *rt, unsigned device);

/* The virtual GPUs' checking mode (WEFT_VGPU_CHECK): the last violation it
 * reported, "" if none. */
void weft__test_vcheck_last(char *buf, size_t len);
/* Forget it (the next weft__test_vcheck_last gives "" until another). */
void weft__test_vcheck_clear(void);
/* d's number in its runtime (the checking mode's and the trace's d<id>),
 * 0 for a bad handle. */
unsigned weft__test_data_id(weft_data *d);
/* The replica a copy of d to device dev would come from now (the data
 * layer's choice: weft__data_source_for), or -1 for a bad handle. */
int weft__test_data_source(weft_data *d, unsigned dev);
/* Make the next n copies of any virtual GPU fail (WEFT_EDEVICE, nothing
 * copied): fault injection for the data layer's tests. */
void weft__test_vgpu_fail_copies(int n);
/* Make the next event record on a virtual GPU sleep ns between queueing
 * the record and making it the event's newest (a recorder held up there,
 * for test_vgpu). */
void weft__test_vgpu_record_delay(uint64_t ns);

/* Make the next n tasks released early on GPUs skip the waits for their
 * predecessors' events (a planted missing dependency on the device, for
 * the checking mode's tests: sched/place.c). */
void weft__test_skip_event_waits(int n);

/* The automatic pinning (weft_config.pin_workers = WEFT_PIN_AUTO,
 * autopin.h), end to end: set every worker's affinity to the n CPUs
 * cpus[0..n) behind the runtime's back (as an operating system packing
 * them would leave them), and read the CPUs worker `worker` may run on now
 * into cpus[0..max) (returns how many: more than max means some were left
 * out).  0 / a count, or -1 for a bad runtime or worker, or an error
 * number from the operating system. */
int weft__test_workers_affinity(weft_runtime *rt, const int *cpus, int n);
int weft__test_worker_cpus(weft_runtime *rt, unsigned worker, int *cpus, int max);

/* CUDA devices this process sees (0 without a GPU, a driver, or CUDA support
 * in this build), and whether the build has the CUDA kind. */
int weft__test_cuda_count(void);
int weft__test_cuda_compiled(void);

#endif
