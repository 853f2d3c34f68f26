/*
 * base.c — error reporting (weft_last_error, weft_strerror) and the clock:
 * the bottom layer, which every other may call (base.h).
 */
#include "base.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* The calling thread's message about its last failed call. */
static _Thread_local char last_error[1024];

int weft__error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return code;
}

void weft__clear_error(void) { last_error[0] = '\0'; }

const char *weft_last_error(void) { return last_error; }

const char *weft_strerror(int code)
{
    switch (code) {
    case WEFT_OK: return "WEFT_OK: success";
    case WEFT_EINVAL: return "WEFT_EINVAL: invalid argument or handle";
    case WEFT_ENOMEM: return "WEFT_ENOMEM: out of memory";
    case WEFT_ECLOSED: return "WEFT_ECLOSED: the runtime was destroyed";
    case WEFT_EBUSY: return "WEFT_EBUSY: busy: the call would wait for what the caller itself holds, or the data is in use";
    case WEFT_ETASKFAILED: return "WEFT_ETASKFAILED: a task body returned an error";
    case WEFT_ECANCELLED: return "WEFT_ECANCELLED: the task was cancelled";
    case WEFT_ETIMEDOUT: return "WEFT_ETIMEDOUT: the wait timed out";
    case WEFT_EDEADLK: return "WEFT_EDEADLK: the wait could never finish";
    case WEFT_ESYSTEM: return "WEFT_ESYSTEM: the operating system refused";
    case WEFT_EAGAIN: return "WEFT_EAGAIN: the spawn would block (backpressure)";
    case WEFT_EDEVICE: return "WEFT_EDEVICE: a device failed";
    case WEFT_ENODEV: return "WEFT_ENODEV: no device of this runtime can do it";
    default: return "unknown Weft error code";
    }
}

/* ------------------------------------------------------------------------ */
/* The clock                                                                 */
/* ------------------------------------------------------------------------ */

uint64_t weft__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t weft__deadline(uint64_t timeout_ns)
{
    uint64_t now = weft__now_ns();
    return timeout_ns >= UINT64_MAX - now ? UINT64_MAX : now + timeout_ns;
}
