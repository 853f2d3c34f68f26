/*
 * device/host.c — the host device: CPU cores and ordinary memory.
 *
 * Every device kind provides one weft__device_ops table; the virtual GPU and
 * CUDA kinds (later issues) add their own files here, and only
 * device/cuda.c will include a CUDA header.
 */
#include "internal.h"

static void *host_replica(weft__data *d) { return d->replica[0]; }

const weft__device_ops weft__host_device = {
    .name = "host",
    .replica = host_replica,
};
