/*
 * device/cuda_absent.c — the CUDA kind's entry points in a build made
 * without the CUDA toolkit: no devices, ever.
 */
#include "device/cuda.h"

bool weft__cuda_compiled(void) { return false; }

int weft__cuda_count(void) { return 0; }

int weft__cuda_new(weft__waitset *ws, int ordinal, weft__device **out)
{
    (void)ws;
    *out = NULL;
    return weft__error(WEFT_EINVAL, "CUDA device %d: this build of Weft has no CUDA support (no toolkit was found)",
                       ordinal);
}
