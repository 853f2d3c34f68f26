/*
 * device/cuda.h — the CUDA device kind's entry points (device/cuda.c when the
 * CUDA toolkit was found at build time, device/cuda_absent.c otherwise).  No
 * CUDA header is included here: the rest of Weft never sees CUDA's types.
 */
#ifndef WEFT_DEVICE_CUDA_H
#define WEFT_DEVICE_CUDA_H

#include "device/device.h"

/* Whether this build has the CUDA kind (the toolkit was found). */
bool weft__cuda_compiled(void);

/* CUDA devices visible to this process: 0 without a driver or a GPU (or in
 * a build without the kind).  Thread-safe. */
int weft__cuda_count(void);

/* Start the CUDA device of this ordinal (its streams, pool, peer access and
 * completion poller) into *out; the caller sets index.  0, or WEFT_ENOMEM,
 * WEFT_ESYSTEM (its thread), WEFT_EDEVICE or WEFT_EINVAL (no CUDA in this
 * build), with the reason in the thread's error message. */
int weft__cuda_new(weft__waitset *ws, int ordinal, weft__device **out);

#endif
