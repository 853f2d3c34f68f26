/*
 * device/spec.c — the device string of weft_config.devices / WEFT_DEVICES:
 * which devices a runtime gets ("cpu,vgpu:4", "cpu,cuda:0,1", ...).  Parsing
 * only; api/runtime.c makes the devices.
 */
#include "device/device.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#define FAIL(...)                                   \
    do {                                            \
        snprintf(err, errlen, __VA_ARGS__);         \
        return WEFT_EINVAL;                         \
    } while (0)

/* An item of the list, without surrounding blanks: [b, e). */
typedef struct span {
    const char *b, *e;
} span;

static bool is(span s, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(s.e - s.b) == n && memcmp(s.b, word, n) == 0;
}

/* A decimal number making up all of s, at most max: its value, or -1. */
static long number(span s, long max)
{
    if (s.b == s.e || s.e - s.b > 9)
        return -1;
    long v = 0;
    for (const char *p = s.b; p < s.e; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (*p - '0');
    }
    return v <= max ? v : -1;
}

static span trim(const char *b, const char *e)
{
    while (b < e && isspace((unsigned char)*b))
        b++;
    while (e > b && isspace((unsigned char)e[-1]))
        e--;
    return (span){b, e};
}

int weft__devspec_parse(const char *str, weft__devspec *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!str || !*trim(str, str + strlen(str)).b) {
        /* The default: every CPU core and every CUDA device found (none is fine). */
        out->cpu = true;
        out->cuda_all = true;
        out->cuda_optional = true;
        return 0;
    }
    bool in_cuda_list = false; /* bare numbers after "cuda:I" are more ordinals */
    const char *p = str;
    for (unsigned item = 1;; item++) {
        const char *comma = strchr(p, ',');
        const char *end = comma ? comma : p + strlen(p);
        span s = trim(p, end);
        if (s.b == s.e)
            FAIL("empty item %u", item);
        const char *colon = memchr(s.b, ':', (size_t)(s.e - s.b));
        span kind = colon ? trim(s.b, colon) : s;
        span arg = colon ? trim(colon + 1, s.e) : (span){s.e, s.e};
        if (in_cuda_list && !colon && number(s, 1 << 20) >= 0) {
            kind = (span){NULL, NULL};
            arg = s;
        } else {
            in_cuda_list = false;
        }
        if (kind.b == NULL || is(kind, "cuda")) {
            if (kind.b && (out->cuda_all || out->ncuda))
                FAIL("'cuda' given twice");
            if (kind.b && !colon) {
                out->cuda_all = true;
            } else {
                long ord = number(arg, WEFT__MAX_DEVICES - 2);
                if (ord < 0)
                    FAIL("'%.*s': a CUDA device ordinal is a number from 0 to %d", (int)(s.e - s.b), s.b,
                         WEFT__MAX_DEVICES - 2);
                for (unsigned i = 0; i < out->ncuda; i++)
                    if (out->cuda[i] == (int)ord)
                        FAIL("CUDA device %ld given twice", ord);
                if (out->ncuda == sizeof out->cuda / sizeof out->cuda[0])
                    FAIL("too many CUDA devices");
                out->cuda[out->ncuda++] = (int)ord;
                in_cuda_list = true;
            }
        } else if (is(kind, "cpu")) {
            if (colon)
                FAIL("'%.*s': cpu takes no count (the workers are the CPU cores)", (int)(s.e - s.b), s.b);
            if (out->cpu)
                FAIL("'cpu' given twice");
            out->cpu = true;
        } else if (is(kind, "vgpu")) {
            if (out->vgpus)
                FAIL("'vgpu' given twice");
            long n = colon ? number(arg, WEFT__MAX_DEVICES - 1) : 1;
            if (n < 1)
                FAIL("'%.*s': the number of virtual GPUs is 1 to %d", (int)(s.e - s.b), s.b,
                     WEFT__MAX_DEVICES - 1);
            out->vgpus = (unsigned)n;
        } else {
            FAIL("unknown device kind '%.*s' (known: cpu, vgpu, cuda)", (int)(kind.e - kind.b), kind.b);
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    if (out->vgpus + out->ncuda + 1 > WEFT__MAX_DEVICES)
        FAIL("more than %d devices", WEFT__MAX_DEVICES - 1);
    return 0;
}

/* A device set: "cpu", "gpu", "gpu:I", "K*gpu" / "Kxgpu", each GPU form
 * optionally after "cpu+". */
int weft__placement_parse(const char *str, weft_placement *p, char *err, size_t errlen)
{
    span all = trim(str, str + strlen(str));
    span s = all;
    p->cpu = 0;
    p->gpus = 0;
    p->gpu = -1;
    if (s.e - s.b >= 3 && memcmp(s.b, "cpu", 3) == 0) {
        span rest = trim(s.b + 3, s.e);
        if (rest.b == rest.e) {
            p->cpu = 1;
            return 0;
        }
        if (*rest.b != '+')
            goto bad;
        p->cpu = 1;
        s = trim(rest.b + 1, rest.e);
    }
    /* [K*|Kx]gpu[:I] */
    const char *g = NULL;
    for (const char *q = s.b; q + 3 <= s.e; q++)
        if (memcmp(q, "gpu", 3) == 0) {
            g = q;
            break;
        }
    if (!g)
        goto bad;
    long k = 1;
    if (g > s.b) {
        span count = trim(s.b, g);
        if (count.e > count.b && (count.e[-1] == '*' || count.e[-1] == 'x'))
            count = trim(count.b, count.e - 1);
        else
            goto bad;
        k = number(count, WEFT__MAX_DEVICES - 1);
        if (k < 1)
            goto bad;
    }
    span after = trim(g + 3, s.e);
    if (after.b < after.e) {
        if (*after.b != ':' || k != 1)
            goto bad;
        long i = number(trim(after.b + 1, after.e), WEFT__MAX_DEVICES - 2);
        if (i < 0)
            goto bad;
        p->gpu = (int)i;
    }
    p->gpus = (unsigned)k;
    return 0;
bad:
    snprintf(err, errlen, "'%.*s' is not a device set (cpu, gpu, gpu:I, K*gpu, cpu+gpu)", (int)(all.e - all.b),
             all.b);
    return WEFT_EINVAL;
}
