/*
 * env.c — the WEFT_* environment variables: what each accepts, parsed one
 * way for the readers and for weft_runtime_create's check (env.h).
 */
#include "env.h"
#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef enum { ENV_UINT, ENV_FLAG, ENV_NUMBER, ENV_WORDS } env_kind;

typedef struct {
    const char *name;
    env_kind kind;
    uint64_t lo, hi;        /* ENV_UINT: the range, inclusive */
    int base;               /* ENV_UINT: 10, or 0 where hex is natural (a seed) */
    const char *words[10];  /* ENV_WORDS: the accepted words, NULL-terminated */
    const char *means;      /* what the value sets, for the message */
} env_var;

/* Every variable weft.h names whose value has a form.  The ones that take
 * free text (WEFT_TRACE, WEFT_DEVICES, WEFT_POLICY, WEFT_PERFMODEL_DIR) are
 * checked where they are used, with the configuration's own fields. */
static const env_var VARS[] = {
    {"WEFT_WORKERS", ENV_UINT, 0, 4096, 10, {NULL}, "the number of worker threads; 0: one per CPU core"},
    {"WEFT_SPIN_NS", ENV_UINT, 0, UINT64_MAX, 10, {NULL}, "how long an idle worker spins, in nanoseconds"},
    {"WEFT_MAX_INFLIGHT", ENV_UINT, 1, SIZE_MAX, 10, {NULL}, "the most tasks spawned and not finished"},
    {"WEFT_MAX_NESTING", ENV_UINT, 1, 1u << 20, 10, {NULL}, "the deepest nesting of bodies"},
    {"WEFT_STALL_WARN_MS", ENV_UINT, 0, UINT64_MAX, 10, {NULL}, "when a stalled wait warns, in milliseconds"},
    {"WEFT_VGPU_MEMORY", ENV_UINT, 1, SIZE_MAX, 10, {NULL}, "each virtual GPU's memory, in bytes"},
    {"WEFT_VGPU_SCHEDULE", ENV_UINT, 0, UINT64_MAX, 0, {NULL}, "the seed of the virtual GPUs' schedule"},
    {"WEFT_BOUND", ENV_FLAG, 0, 0, 0, {NULL}, "print the makespan's lower bound at destroy"},
    {"WEFT_PREFETCH", ENV_FLAG, 0, 0, 0, {NULL}, "copies into GPUs on their copy queues"},
    {"WEFT_VGPU_CHECK", ENV_FLAG, 0, 0, 0, {NULL}, "the virtual GPUs' checking mode"},
    {"WEFT_PERFMODEL", ENV_FLAG, 0, 0, 0, {NULL}, "keep performance models in a file"},
    {"WEFT_VGPU_LATENCY_US", ENV_NUMBER, 0, 0, 0, {NULL}, "a virtual GPU copy's latency, in microseconds"},
    {"WEFT_VGPU_HOST_GBPS", ENV_NUMBER, 0, 0, 0, {NULL}, "host <-> virtual GPU bandwidth, in GB/s"},
    {"WEFT_VGPU_PEER_GBPS", ENV_NUMBER, 0, 0, 0, {NULL}, "virtual GPU <-> GPU bandwidth, in GB/s"},
    /* (PIN_WORKERS: auto, then a flag's words for yes and for no, in the
     * order runtime.c reads them.) */
    {"WEFT_PIN_WORKERS", ENV_WORDS, 0, 0, 0, {"auto", "1", "on", "yes", "true", "0", "off", "no", "false", NULL},
     "how workers are pinned to CPUs"},
    {"WEFT_VGPU_COPIES", ENV_WORDS, 0, 0, 0, {"timing", NULL}, "copies that take time and move no bytes"},
};

static const env_var *find(const char *name, env_kind kind)
{
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++)
        if (strcmp(VARS[i].name, name) == 0 && VARS[i].kind == kind)
            return &VARS[i];
    return NULL; /* a caller naming a variable the table lacks: a bug, read as unset */
}

/* The variable's value without surrounding blanks, in buf; false when
 * unset, empty or too long to be any accepted value. */
static bool value(const char *name, char *buf, size_t len)
{
    const char *s = getenv(name);
    if (!s)
        return false;
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    if (n == 0)
        return false;
    if (n >= len) { /* longer than any accepted value: "" is malformed for every kind */
        buf[0] = '\0';
        return true;
    }
    memcpy(buf, s, n);
    buf[n] = '\0';
    return true;
}

/* Parse s as v's kind: 1 with *out (uint64_t, bool, double or unsigned)
 * set, 0 when malformed. */
static int parse(const env_var *v, const char *s, void *out)
{
    switch (v->kind) {
    case ENV_UINT: {
        if (!isdigit((unsigned char)s[0]))
            return 0;
        char *end;
        errno = 0;
        unsigned long long x = strtoull(s, &end, v->base);
        if (errno || *end || x < v->lo || x > v->hi)
            return 0;
        *(uint64_t *)out = x;
        return 1;
    }
    case ENV_FLAG: {
        static const char *const yes[] = {"1", "on", "yes", "true"}, *const no[] = {"0", "off", "no", "false"};
        for (unsigned i = 0; i < 4; i++) {
            if (strcasecmp(s, yes[i]) == 0)
                return *(bool *)out = true, 1;
            if (strcasecmp(s, no[i]) == 0)
                return *(bool *)out = false, 1;
        }
        return 0;
    }
    case ENV_NUMBER: {
        char *end;
        errno = 0;
        double x = strtod(s, &end);
        if (errno || *end || !(x > 0 && x < 1e12))
            return 0;
        *(double *)out = x;
        return 1;
    }
    case ENV_WORDS:
        for (unsigned i = 0; v->words[i]; i++)
            if (strcasecmp(s, v->words[i]) == 0)
                return *(unsigned *)out = i, 1;
        return 0;
    }
    return 0;
}

static int get(const char *name, env_kind kind, void *out)
{
    const env_var *v = find(name, kind);
    char buf[64];
    if (!v || !value(name, buf, sizeof buf))
        return 0;
    return parse(v, buf, out);
}

int weft__env_uint(const char *name, uint64_t *out) { return get(name, ENV_UINT, out); }
int weft__env_flag(const char *name, bool *out) { return get(name, ENV_FLAG, out); }
int weft__env_number(const char *name, double *out) { return get(name, ENV_NUMBER, out); }
int weft__env_word(const char *name, unsigned *out) { return get(name, ENV_WORDS, out); }

/* What v accepts, for the message. */
static void accepted(const env_var *v, char *buf, size_t len)
{
    switch (v->kind) {
    case ENV_UINT:
        if (v->hi >= SIZE_MAX)
            snprintf(buf, len, "a whole number of at least %llu", (unsigned long long)v->lo);
        else
            snprintf(buf, len, "a whole number from %llu to %llu", (unsigned long long)v->lo,
                     (unsigned long long)v->hi);
        return;
    case ENV_FLAG:
        snprintf(buf, len, "1 or 0 (or on/off, yes/no, true/false)");
        return;
    case ENV_NUMBER:
        snprintf(buf, len, "a positive number");
        return;
    case ENV_WORDS: {
        size_t at = (size_t)snprintf(buf, len, "one of:");
        for (unsigned i = 0; v->words[i] && at < len; i++)
            at += (size_t)snprintf(buf + at, len - at, "%s %s", i ? "," : "", v->words[i]);
        return;
    }
    }
}

int weft__env_check(const char *fn)
{
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) {
        const env_var *v = &VARS[i];
        char buf[64];
        union { uint64_t u; bool b; double d; unsigned w; } out;
        if (!value(v->name, buf, sizeof buf) || parse(v, buf, &out))
            continue;
        char what[96];
        accepted(v, what, sizeof what);
        return weft__error(WEFT_EINVAL,
                           "%s: the environment sets %s=\"%.60s\", which is not %s (%s); write a value it "
                           "accepts, or unset it (it is checked even where the configuration overrides it)",
                           fn, v->name, getenv(v->name), what, v->means);
    }
    return 0;
}
