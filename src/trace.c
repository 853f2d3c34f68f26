/*
 * trace.c — Chrome-trace JSON (opens in Perfetto and chrome://tracing): one
 * track per worker, one complete ("X") event per task, named, and the
 * runtime's notes about its workers as instant ("i") events.
 *
 * An observer of the workers (worker.h): each worker's bodies go to a
 * chunked buffer of the trace's own that only that worker appends to,
 * without locks; the file is written after the workers have been joined.
 */
#include "trace.h"
#include "api/runtime.h"
#include "data/tile.h"

#include <string.h>

#define EVENTS_PER_CHUNK 1024
#define TRACE_NOTES 8 /* notes kept (the runtime makes one or two in its life) */

typedef struct trace_event {
    uint64_t start_ns, end_ns, id;
    char name[32];
    int variant;               /* the alternative run, -1: a task without placements */
    char devices[40];          /* its GPUs' names joined by '+' ("" for none) */
    char data[96];             /* its data where it ran: replica state and copies (see data_note) */
    /* The "dmda" policy's decision (how < -1: none): its predicted
     * execution and copies (ns), its predicted finish (weft__now_ns's
     * clock), and what the prediction rested on (WEFT__PM_*, -1
     * calibrating).  What happened: the span itself for a CPU task, the
     * stream tracks' spans for a GPU task's work. */
    double pred_exec, pred_xfer, pred_fin;
    int how;
} trace_event;

/* What t's data looked like when it started, as "d2.t1@vgpu:1 M<-vgpu:3
 * +2 halo; d4@host S": each access's handle (d<n>, a tile d<parent>.t<i>),
 * the device, the replica's state after the acquire (S shared, M modified:
 * the only valid copy), where it was copied from, the halo parts copied;
 * "scratch" for a scratch buffer (WEFT_SCRATCH). */
static void data_note(const weft__rt *rt, const weft__task *t, char *out, size_t n)
{
    static const char state[] = "ISM";
    size_t at = 0;
    out[0] = '\0';
    for (uint32_t i = 0; i < t->naccess && at + 1 < n; i++) {
        const weft__task_access *a = &t->access[i];
        if (a->mode & WEFT__ORDER_ONLY)
            break;
        const weft__data *d = a->data;
        unsigned dev = weft__task_access_dev(t, a, NULL);
        if (dev >= rt->ndev)
            dev = 0;
        char name[24];
        if (d->tile)
            snprintf(name, sizeof name, "d%u.t%u", d->tile->fam->parent_id, d->tile->index);
        else
            snprintf(name, sizeof name, "d%u", d->id);
        if (a->mode & WEFT_SCRATCH) { /* a buffer of its own: no replica, no copy */
            int k = snprintf(out + at, n - at, "%s%s@%s scratch", i ? "; " : "", name,
                             dev ? rt->dev[dev]->name : "host");
            if (k > 0)
                at += (size_t)k;
            continue;
        }
        int k = snprintf(out + at, n - at, "%s%s@%s %c", i ? "; " : "", name, dev ? rt->dev[dev]->name : "host",
                         a->hold.state <= 2 ? state[a->hold.state] : '?');
        if (k > 0)
            at += (size_t)k;
        if (a->hold.src >= 0 && at + 1 < n && (unsigned)a->hold.src < rt->ndev) {
            k = snprintf(out + at, n - at, "<-%s", a->hold.src ? rt->dev[a->hold.src]->name : "host");
            if (k > 0)
                at += (size_t)k;
        }
        if (a->hold.nhalo && at + 1 < n) {
            k = snprintf(out + at, n - at, " +%u halo", a->hold.nhalo);
            if (k > 0)
                at += (size_t)k;
        }
    }
    if (at >= n)
        out[n - 1] = '\0';
}

typedef struct trace_chunk {
    struct trace_chunk *next;
    size_t n;
    trace_event ev[EVENTS_PER_CHUNK];
} trace_chunk;

/* One worker's spans: written by that worker only, read after the join. */
typedef struct trace_buf {
    trace_chunk *head, *tail;
    size_t count;
    _Atomic uint64_t dropped;          /* also read by weft_runtime_stats */
} __attribute__((aligned(WEFT__CACHELINE))) trace_buf;

struct weft__tracer {
    weft__rt *rt;                      /* its device table names devices and streams */
    uint64_t t0_ns;                    /* the trace's time origin */
    size_t max_events;                 /* per worker */
    unsigned nworkers;
    trace_buf *buf;                    /* [nworkers] */
    /* comm_lock protects comm_spans: the communication track (operations
     * that complete off the streams, such as MPI's, from start to end),
     * and notes: the runtime's notes about its workers (observers'
     * on_note: the automatic pinning), instant events on the noting
     * worker's track.  Taken alone. */
    pthread_mutex_t comm_lock;
    weft__comm_span *comm_spans;
    size_t ncomm_spans, capcomm_spans;
    struct {
        uint64_t at_ns;
        unsigned worker;
        char name[32];
        char detail[256];
    } notes[TRACE_NOTES];
    unsigned nnotes;
};

static void body_ran(void *self, unsigned worker, const weft__task *t, uint64_t start_ns, uint64_t end_ns)
{
    weft__tracer *tr = self;
    weft__rt *rt = tr->rt;
    trace_buf *b = &tr->buf[worker];
    if (b->count >= tr->max_events) {
        weft__count(&b->dropped, 1);
        return;
    }
    trace_chunk *c = b->tail;
    if (!c || c->n == EVENTS_PER_CHUNK) {
        c = weft__alloc(sizeof *c);
        if (!c) {
            weft__count(&b->dropped, 1);
            return;
        }
        c->next = NULL;
        c->n = 0;
        if (b->tail)
            b->tail->next = c;
        else
            b->head = c;
        b->tail = c;
    }
    trace_event *e = &c->ev[c->n++];
    e->start_ns = start_ns;
    e->end_ns = end_ns;
    e->id = t->id;
    memcpy(e->name, t->name, sizeof e->name);
    e->variant = t->place ? t->place->chosen : -1;
    e->devices[0] = '\0';
    size_t at = 0;
    for (unsigned k = 0; t->place && k < t->place->ngpu && at < sizeof e->devices; k++)
        at += (size_t)snprintf(e->devices + at, sizeof e->devices - at, "%s%s", k ? "+" : "",
                               rt->placer.gpu[t->place->gpu[k]]->name);
    data_note(rt, t, e->data, sizeof e->data);
    e->how = -2;
    if (t->place && t->place->target >= 0 && rt->placer.policy->eft) { /* (decided before it was queued) */
        e->how = t->place->pred_how;
        e->pred_exec = t->place->pred_exec;
        e->pred_xfer = t->place->pred_xfer;
        e->pred_fin = t->place->pred_fin;
    }
    b->count++;
}

static void noted(void *self, unsigned worker, uint64_t at_ns, const char *name, const char *detail)
{
    weft__tracer *tr = self;
    pthread_mutex_lock(&tr->comm_lock);
    if (tr->nnotes < TRACE_NOTES) {
        tr->notes[tr->nnotes].at_ns = at_ns;
        tr->notes[tr->nnotes].worker = worker;
        snprintf(tr->notes[tr->nnotes].name, sizeof tr->notes[0].name, "%s", name);
        snprintf(tr->notes[tr->nnotes].detail, sizeof tr->notes[0].detail, "%s", detail);
        tr->nnotes++;
    }
    pthread_mutex_unlock(&tr->comm_lock);
}

static const weft__observer_ops trace_observer = {"trace", body_ran, noted};

weft__tracer *weft__trace_new(weft__rt *rt, uint64_t t0_ns)
{
    weft__tracer *tr = weft__alloc(sizeof *tr);
    if (!tr)
        return NULL;
    memset(tr, 0, sizeof *tr);
    tr->rt = rt;
    tr->t0_ns = t0_ns;
    tr->max_events = rt->cfg.trace_max_events;
    tr->nworkers = rt->nworkers;
    size_t bytes = sizeof(trace_buf) * rt->nworkers;
    tr->buf = weft__alloc_aligned(WEFT__CACHELINE, bytes);
    if (!tr->buf || weft__observer_add(&rt->observers, &trace_observer, tr) != 0) {
        weft__free(tr->buf);
        weft__free(tr);
        return NULL;
    }
    memset(tr->buf, 0, bytes);
    pthread_mutex_init(&tr->comm_lock, NULL);
    return tr;
}

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one. */
static size_t utf8_len(const unsigned char *s)
{
    size_t n = s[0] >= 0xF0 && s[0] <= 0xF4 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC2 && s[0] < 0xE0 ? 2 : 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

static void write_json_string(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    while (*s) {
        unsigned char c = *s;
        size_t n;
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
            s++;
        } else if (c < 0x20 || c == 0x7f) {
            fprintf(f, "\\u%04x", c);
            s++;
        } else if (c < 0x80) {
            fputc(c, f);
            s++;
        } else if ((n = utf8_len(s)) != 0) {
            fwrite(s, 1, n, f);
            s += n;
        } else {
            fputs("\\ufffd", f); /* not UTF-8: the replacement character */
            s++;
        }
    }
    fputc('"', f);
}

/* A track (tid) named `name` with the kernels and copies queue q of dev ran. */
static void write_track(FILE *f, uint64_t t0_ns, unsigned tid, const char *name, const weft__device *dev,
                        weft__dqueue *q)
{
    const weft__span *sp;
    size_t n = dev->ops->spans(q, &sp);
    fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"args\":{\"name\":", tid);
    write_json_string(f, name);
    fputs("}}", f);
    for (size_t k = 0; k < n; k++) {
        uint64_t ts = sp[k].t0 - t0_ns, dur = sp[k].t1 - sp[k].t0;
        fprintf(f,
                ",\n{\"name\":\"%s\",\"cat\":\"device\",\"ph\":\"X\",\"pid\":1,\"tid\":%u,"
                "\"ts\":%llu.%03llu,\"dur\":%llu.%03llu,\"args\":{\"bytes\":%zu}}",
                sp[k].copy ? "copy" : "kernel", tid, (unsigned long long)(ts / 1000), (unsigned long long)(ts % 1000),
                (unsigned long long)(dur / 1000), (unsigned long long)(dur % 1000), sp[k].bytes);
    }
}

int weft__trace_write(weft__tracer *tr)
{
    const weft__rt *rt = tr->rt;
    FILE *f = fopen(rt->trace_path, "w");
    if (!f)
        return -1;
    fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n", f);
    fputs("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"weft\"}}", f);
    for (unsigned i = 0; i < tr->nworkers; i++)
        fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"args\":{\"name\":\"worker %u\"}}",
                i, i);
    for (unsigned i = 0; i < tr->nworkers; i++) {
        for (const trace_chunk *c = tr->buf[i].head; c; c = c->next) {
            for (size_t k = 0; k < c->n; k++) {
                const trace_event *e = &c->ev[k];
                fputs(",\n{\"name\":", f);
                if (e->name[0])
                    write_json_string(f, e->name);
                else
                    fprintf(f, "\"task %llu\"", (unsigned long long)e->id);
                uint64_t ts = e->start_ns - tr->t0_ns, dur = e->end_ns - e->start_ns;
                fprintf(f,
                        ",\"cat\":\"task\",\"ph\":\"X\",\"pid\":1,\"tid\":%u,\"ts\":%llu.%03llu,"
                        "\"dur\":%llu.%03llu,\"args\":{\"id\":%llu",
                        i, (unsigned long long)(ts / 1000), (unsigned long long)(ts % 1000),
                        (unsigned long long)(dur / 1000), (unsigned long long)(dur % 1000),
                        (unsigned long long)e->id);
                if (e->variant >= 0) {
                    fprintf(f, ",\"variant\":%d,\"devices\":", e->variant);
                    write_json_string(f, e->devices[0] ? e->devices : "cpu");
                }
                if (e->data[0]) {
                    fputs(",\"data\":", f);
                    write_json_string(f, e->data);
                }
                if (e->how >= -1) {
                    static const char *const how[] = {"calibrating", "none", "history", "fit"};
                    double fin = e->pred_fin - (double)tr->t0_ns;
                    fprintf(f, ",\"model\":\"%s\",\"predicted_us\":%.1f,\"copies_us\":%.1f,"
                               "\"predicted_finish_us\":%.1f",
                            how[e->how + 1 < 4 ? e->how + 1 : 1], e->pred_exec / 1e3, e->pred_xfer / 1e3,
                            fin > 0 ? fin / 1e3 : 0);
                }
                fputs("}}", f);
            }
        }
    }
    /* The runtime's notes: instant events on the noting worker's track. */
    for (unsigned k = 0; k < tr->nnotes; k++) {
        uint64_t ts = tr->notes[k].at_ns > tr->t0_ns ? tr->notes[k].at_ns - tr->t0_ns : 0;
        fputs(",\n{\"name\":", f);
        write_json_string(f, tr->notes[k].name);
        fprintf(f, ",\"cat\":\"runtime\",\"ph\":\"i\",\"s\":\"p\",\"pid\":1,\"tid\":%u,\"ts\":%llu.%03llu,"
                   "\"args\":{\"detail\":",
                tr->notes[k].worker, (unsigned long long)(ts / 1000), (unsigned long long)(ts % 1000));
        write_json_string(f, tr->notes[k].detail);
        fputs("}}", f);
    }
    /* One track per stream of each GPU that records its work (virtual
     * GPUs): its kernels and copies as spans; and one per copy queue of
     * the data layer there (copies in ahead of their tasks, copies to the
     * host, write-backs of evicted replicas). */
    const weft__placer *pl = &rt->placer;
    for (unsigned g = 0; g < pl->ngpu; g++) {
        const weft__device *dev = pl->gpu[g];
        if (!dev->ops->spans)
            continue;
        char track[64];
        for (unsigned s = 0; s < WEFT__STREAMS; s++) {
            snprintf(track, sizeof track, "%s stream %u", dev->name, s);
            write_track(f, tr->t0_ns, 1000 + g * WEFT__STREAMS + s, track, dev, pl->streams[g][s]);
        }
        const weft__mnode *m = &rt->mnodes[dev->index];
        for (unsigned k = 0; k < 2 + WEFT__PREFETCH_QUEUES; k++)
            if (m->copyq[k]) { /* (made on first use; the queues are idle now) */
                if (k < 2)
                    snprintf(track, sizeof track, "%s %s", dev->name, k ? "write-backs" : "copies to the host");
                else
                    snprintf(track, sizeof track, "%s copies in %u", dev->name, k - 2);
                write_track(f, tr->t0_ns, 5000 + g * (2 + WEFT__PREFETCH_QUEUES) + k, track, dev, m->copyq[k]);
            }
    }
    /* The communication track (operations across ranks, start to end). */
    if (tr->ncomm_spans) {
        fputs(",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":2000,\"args\":{\"name\":"
              "\"communication\"}}", f);
        for (size_t k = 0; k < tr->ncomm_spans; k++) {
            const weft__comm_span *c = &tr->comm_spans[k];
            uint64_t ts = c->t0 - tr->t0_ns, dur = c->t1 - c->t0;
            fputs(",\n{\"name\":", f);
            write_json_string(f, c->name);
            fprintf(f,
                    ",\"cat\":\"comm\",\"ph\":\"X\",\"pid\":1,\"tid\":2000,\"ts\":%llu.%03llu,"
                    "\"dur\":%llu.%03llu,\"args\":{\"bytes\":%zu}}",
                    (unsigned long long)(ts / 1000), (unsigned long long)(ts % 1000),
                    (unsigned long long)(dur / 1000), (unsigned long long)(dur % 1000), c->bytes);
        }
    }
    fputs("\n]}\n", f);
    return fclose(f) == 0 ? 0 : -1;
}

void weft__trace_comm(weft__rt *rt, const char *name, uint64_t t0, uint64_t t1, size_t bytes)
{
    weft__tracer *tr = rt->tracer;
    if (!tr)
        return;
    pthread_mutex_lock(&tr->comm_lock);
    if (tr->ncomm_spans == tr->capcomm_spans && tr->capcomm_spans < ((size_t)1 << 20)) {
        size_t cap = tr->capcomm_spans ? tr->capcomm_spans * 2 : 256;
        weft__comm_span *n = weft__alloc(cap * sizeof *n);
        if (n) {
            if (tr->ncomm_spans)
                memcpy(n, tr->comm_spans, tr->ncomm_spans * sizeof *n);
            weft__free(tr->comm_spans);
            tr->comm_spans = n;
            tr->capcomm_spans = cap;
        }
    }
    if (tr->ncomm_spans < tr->capcomm_spans) {
        weft__comm_span *c = &tr->comm_spans[tr->ncomm_spans++];
        snprintf(c->name, sizeof c->name, "%s", name);
        c->t0 = t0;
        c->t1 = t1;
        c->bytes = bytes;
    }
    pthread_mutex_unlock(&tr->comm_lock);
}

uint64_t weft__trace_dropped(weft__tracer *tr)
{
    uint64_t n = 0;
    for (unsigned i = 0; tr && i < tr->nworkers; i++)
        n += atomic_load_explicit(&tr->buf[i].dropped, memory_order_relaxed);
    return n;
}

void weft__trace_free(weft__tracer *tr)
{
    if (!tr)
        return;
    for (unsigned i = 0; i < tr->nworkers; i++) {
        trace_chunk *c = tr->buf[i].head;
        while (c) {
            trace_chunk *next = c->next;
            weft__free(c);
            c = next;
        }
    }
    weft__free(tr->buf);
    weft__free(tr->comm_spans);
    pthread_mutex_destroy(&tr->comm_lock);
    weft__free(tr);
}
