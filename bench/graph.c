/* graph.c — the dependence patterns of Task Bench (Slaughter et al., SC20),
 * eleven of them (trivial to random_nearest), precomputed into a CSR graph. */
#include "wb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const pattern_names[WB_PATTERN_COUNT] = {
    "trivial", "no_comm", "stencil_1d", "stencil_1d_periodic", "dom", "tree",
    "fft", "all_to_all", "nearest", "spread", "random_nearest",
};

const char *wb_pattern_name(wb_pattern p)
{
    return (unsigned)p < WB_PATTERN_COUNT ? pattern_names[p] : "?";
}

int wb_pattern_parse(const char *s, wb_pattern *out)
{
    for (int p = 0; p < WB_PATTERN_COUNT; p++) {
        if (strcmp(s, pattern_names[p]) == 0) {
            *out = (wb_pattern)p;
            return 0;
        }
    }
    return -1;
}

int wb_shape_width(const wb_shape *s, int t)
{
    int W = s->width, T = s->steps;
    switch (s->pattern) {
    case WB_DOM: {
        int w = W;
        if (t + 1 < w) w = t + 1;
        if (T - t < w) w = T - t;
        return w;
    }
    case WB_TREE:
        if (t >= 30) return W;
        return (1 << t) < W ? (1 << t) : W;
    default:
        return W;
    }
}

int wb_shape_offset(const wb_shape *s, int t)
{
    if (s->pattern == WB_DOM) {
        int o = t + s->width - s->steps;
        return o > 0 ? o : 0;
    }
    return 0;
}

static int ceil_log2(int w)
{
    int l = 0;
    while ((1 << l) < w) l++;
    return l;
}

/* Producers of (t, i) in step t-1 before filtering: appended to out, count
 * returned.  out has room for 2*W+8 entries. */
static int raw_deps(const wb_shape *s, int t, int i, int *out)
{
    int W = s->width, n = 0;
    int r = s->radix;
    switch (s->pattern) {
    case WB_TRIVIAL:
        break;
    case WB_NO_COMM:
        out[n++] = i;
        break;
    case WB_STENCIL_1D:
        out[n++] = i - 1;
        out[n++] = i;
        out[n++] = i + 1;
        break;
    case WB_STENCIL_1D_PERIODIC:
        out[n++] = (i - 1 + W) % W;
        out[n++] = i;
        out[n++] = (i + 1) % W;
        break;
    case WB_DOM:
        out[n++] = i - 1;
        out[n++] = i;
        break;
    case WB_TREE:
        out[n++] = i / 2;
        break;
    case WB_FFT: {
        int L = ceil_log2(W);
        out[n++] = i;
        if (L > 0) {
            int d = (t + L - 1) % L;
            out[n++] = i - (1 << d);
            out[n++] = i + (1 << d);
        }
        break;
    }
    case WB_ALL_TO_ALL:
        for (int j = 0; j < W; j++) out[n++] = j;
        break;
    case WB_NEAREST:
        for (int j = i - r / 2; j <= i + (r - 1) / 2; j++) out[n++] = j;
        break;
    case WB_SPREAD:
        for (int k = 0; k < r; k++) {
            long j = (long)i + (long)k * W / r + (k > 0 ? t % s->period : 0);
            out[n++] = (int)(j % W);
        }
        break;
    case WB_RANDOM_NEAREST:
        out[n++] = i;
        for (int j = i - r / 2; j <= i + (r - 1) / 2; j++) {
            if (j == i) continue;
            uint64_t h = wb_mix64(((uint64_t)(uint32_t)t << 40) ^ ((uint64_t)(uint32_t)i << 20) ^
                                  (uint64_t)(uint32_t)j ^ 0x5eedULL);
            if ((h & 3) == 0) out[n++] = j; /* probability 0.25 */
        }
        break;
    default:
        break;
    }
    return n;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void wb_graph_free(wb_graph *g)
{
    free(g->step_start);
    free(g->point_i);
    free(g->point_t);
    free(g->in_start);
    free(g->inputs);
    free(g->dep_start);
    free(g->deps);
    memset(g, 0, sizeof *g);
}

int wb_graph_build(wb_graph *g, const wb_shape *s, int drop_t, int drop_i, int drop_j,
                   char *err, size_t errn)
{
    memset(g, 0, sizeof *g);
    g->shape = *s;
    int W = s->width, T = s->steps;
    if (W < 1 || T < 1) {
        snprintf(err, errn, "width and steps must be >= 1");
        return -1;
    }
    if ((s->pattern == WB_NEAREST || s->pattern == WB_SPREAD || s->pattern == WB_RANDOM_NEAREST) &&
        s->radix < 1) {
        snprintf(err, errn, "radix must be >= 1");
        return -1;
    }
    if (s->pattern == WB_SPREAD && s->period < 1) {
        snprintf(err, errn, "period must be >= 1");
        return -1;
    }
    g->step_start = malloc(sizeof(uint32_t) * ((size_t)T + 1));
    if (!g->step_start) goto nomem;
    uint64_t np = 0;
    for (int t = 0; t < T; t++) {
        g->step_start[t] = (uint32_t)np;
        np += (uint64_t)wb_shape_width(s, t);
    }
    if (np > UINT32_MAX / 2) {
        snprintf(err, errn, "graph too large");
        wb_graph_free(g);
        return -1;
    }
    g->step_start[T] = (uint32_t)np;
    g->npoints = (uint32_t)np;
    g->point_i = malloc(sizeof(int32_t) * np);
    g->point_t = malloc(sizeof(int32_t) * np);
    g->in_start = malloc(sizeof(uint32_t) * (np + 1));
    g->dep_start = malloc(sizeof(uint32_t) * (np + 1));
    int *tmp = malloc(sizeof(int) * (2 * (size_t)W + 8 + (size_t)(s->radix > 0 ? s->radix : 0)));
    if (!g->point_i || !g->point_t || !g->in_start || !g->dep_start || !tmp) {
        free(tmp);
        goto nomem;
    }
    /* Two passes: count, then fill. */
    size_t cap = 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t e = 0;
        for (int t = 0; t < T; t++) {
            int w = wb_shape_width(s, t), o = wb_shape_offset(s, t);
            int pw = t > 0 ? wb_shape_width(s, t - 1) : 0;
            int po = t > 0 ? wb_shape_offset(s, t - 1) : 0;
            for (int i = o; i < o + w; i++) {
                uint32_t p = g->step_start[t] + (uint32_t)(i - o);
                int n = t > 0 ? raw_deps(s, t, i, tmp) : 0;
                int m = 0;
                for (int k = 0; k < n; k++) /* keep the producers that exist at t-1 */
                    if (tmp[k] >= po && tmp[k] < po + pw) tmp[m++] = tmp[k];
                qsort(tmp, (size_t)m, sizeof(int), cmp_int);
                int u = 0;
                for (int k = 0; k < m; k++) /* dedupe (periodic/spread with small W) */
                    if (u == 0 || tmp[u - 1] != tmp[k]) tmp[u++] = tmp[k];
                if (pass == 0) {
                    if ((uint32_t)u > g->maxdeps) g->maxdeps = (uint32_t)u;
                } else {
                    g->point_i[p] = i;
                    g->point_t[p] = t;
                    g->in_start[p] = (uint32_t)e;
                    for (int k = 0; k < u; k++)
                        g->inputs[e + (uint64_t)k] = g->step_start[t - 1] + (uint32_t)(tmp[k] - po);
                }
                e += (uint64_t)u;
            }
        }
        if (pass == 0) {
            cap = (size_t)e;
            g->nedges = e;
            g->inputs = malloc(sizeof(uint32_t) * (cap ? cap : 1));
            g->deps = malloc(sizeof(uint32_t) * (cap ? cap : 1));
            if (!g->inputs || !g->deps) {
                free(tmp);
                goto nomem;
            }
        } else {
            g->in_start[np] = (uint32_t)e;
        }
    }
    free(tmp);

    /* deps = inputs, minus the planted wrong dependency. */
    int64_t drop_p = -1, drop_q = -1;
    if (drop_t >= 0) {
        if (drop_t < 1 || drop_t >= T) {
            snprintf(err, errn, "--drop-dep: step %d has no dependencies (1..%d)", drop_t, T - 1);
            wb_graph_free(g);
            return -1;
        }
        int o = wb_shape_offset(s, drop_t), w = wb_shape_width(s, drop_t);
        if (drop_i < o || drop_i >= o + w) {
            snprintf(err, errn, "--drop-dep: point (%d,%d) does not exist", drop_t, drop_i);
            wb_graph_free(g);
            return -1;
        }
        drop_p = g->step_start[drop_t] + (uint32_t)(drop_i - o);
        uint32_t b = g->in_start[drop_p], en = g->in_start[drop_p + 1];
        for (uint32_t k = b; k < en; k++) {
            if (drop_j < 0 || g->point_i[g->inputs[k]] == drop_j) {
                drop_q = g->inputs[k];
                break;
            }
        }
        if (drop_q < 0) {
            snprintf(err, errn, "--drop-dep: point (%d,%d) has no dependency on (%d,%d)", drop_t,
                     drop_i, drop_t - 1, drop_j);
            wb_graph_free(g);
            return -1;
        }
        g->dropped = 1;
        g->drop_point = (uint32_t)drop_p;
        g->drop_input = (uint32_t)drop_q;
    }
    uint64_t d = 0;
    for (uint32_t p = 0; p < np; p++) {
        g->dep_start[p] = (uint32_t)d;
        for (uint32_t k = g->in_start[p]; k < g->in_start[p + 1]; k++) {
            if ((int64_t)p == drop_p && (int64_t)g->inputs[k] == drop_q) continue;
            g->deps[d++] = g->inputs[k];
        }
    }
    g->dep_start[np] = (uint32_t)d;
    return 0;

nomem:
    snprintf(err, errn, "out of memory building the graph");
    wb_graph_free(g);
    return -1;
}
