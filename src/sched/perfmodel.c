/*
 * sched/perfmodel.c — performance models (sched/perfmodel.h): histories per
 * size, a log-log fit across sizes, and the file they persist in.
 *
 * The file is text, one history per line:
 *   kind <TAB> arch <TAB> bytes <TAB> count <TAB> mean_ns <TAB> m2
 * (count: observations, up to PM_WINDOW; m2: the sum of squared deviations
 * from the mean, Welford's, then its moving form), after a
 * first line "# weft performance models 1".  Names hold no tab or newline
 * (those are replaced by '_' when a model is made).
 */
#include "sched/perfmodel.h"
#include "env.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PM_HEADER "# weft performance models 1"
/* A history's mean is every observation's up to this many, then a moving
 * average of about as many (each new one weighs 1/PM_WINDOW): a machine's
 * slow day, or a run with too many BLAS threads, does not stay in a model
 * for good. */
#define PM_WINDOW 50.0

struct weft__pm_model {
    struct weft__pm_model *next;
    char kind[WEFT__PM_NAME], arch[WEFT__PM_NAME];
    uint64_t seen;               /* observations, all sizes */
    uint64_t pending;            /* tasks sent to calibrate it, not observed yet */
    /* The fit's sums over the sizes with a history (one point each: ln
     * size, ln mean): n, Σx, Σy, Σxx, Σxy. */
    double n, sx, sy, sxx, sxy;
    uint64_t one_size;           /* the size of the first history (the one-point case) */
    double one_mean;
};

struct weft__pm_hist {
    struct weft__pm_hist *next;  /* in its bucket */
    weft__pm_model *m;
    uint64_t size, count;
    double mean, m2;
};

static uint64_t hash_of(const weft__pm_model *m, uint64_t size)
{
    uint64_t h = (uint64_t)(uintptr_t)m * 0x9E3779B97F4A7C15ull ^ size * 0xC2B2AE3D27D4EB4Full;
    return h ^ h >> 29;
}

static weft__pm_hist *hist_find(const weft__perfmodel *pm, const weft__pm_model *m, uint64_t size)
{
    for (weft__pm_hist *h = pm->table[hash_of(m, size) & (pm->nbucket - 1)]; h; h = h->next)
        if (h->m == m && h->size == size)
            return h;
    return NULL;
}

/* Double the table when it is as full as it is long (the lock held). */
static void grow(weft__perfmodel *pm)
{
    size_t nb = pm->nbucket * 2;
    weft__pm_hist **t = calloc(nb, sizeof *t);
    if (!t)
        return; /* (longer chains, still right) */
    for (size_t i = 0; i < pm->nbucket; i++)
        while (pm->table[i]) {
            weft__pm_hist *h = pm->table[i];
            pm->table[i] = h->next;
            size_t b = hash_of(h->m, h->size) & (nb - 1);
            h->next = t[b];
            t[b] = h;
        }
    free(pm->table);
    pm->table = t;
    pm->nbucket = nb;
}

/* A point of the fit in or out (sign +1 / -1). */
static void fit_point(weft__pm_model *m, uint64_t size, double mean, double sign)
{
    if (size == 0 || !(mean > 0))
        return;
    double x = log((double)size), y = log(mean);
    m->n += sign;
    m->sx += sign * x;
    m->sy += sign * y;
    m->sxx += sign * x * x;
    m->sxy += sign * x * y;
}

static weft__pm_hist *hist_new(weft__perfmodel *pm, weft__pm_model *m, uint64_t size)
{
    if (pm->nhist >= pm->nbucket)
        grow(pm);
    weft__pm_hist *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->m = m;
    h->size = size;
    size_t b = hash_of(m, size) & (pm->nbucket - 1);
    h->next = pm->table[b];
    pm->table[b] = h;
    pm->nhist++;
    if (!m->one_size)
        m->one_size = size;
    return h;
}

void weft__kind_fold(char *buf, size_t len, const char *name)
{
    size_t n = strlen(name);
    if (n < len || len < 18) {
        snprintf(buf, len, "%s", name);
        return;
    }
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)name[i]) * 0x100000001b3u;
    snprintf(buf, len, "%.*s~%016llx", (int)(len - 18), name, (unsigned long long)h);
}

static void copy_name(char dst[WEFT__PM_NAME], const char *src)
{
    size_t i = 0;
    for (; src && src[i] && i < WEFT__PM_NAME - 1; i++)
        dst[i] = src[i] == '\t' || src[i] == '\n' || src[i] == '\r' ? '_' : src[i];
    dst[i] = '\0';
}

/* The model of (kind, arch), as names k and a already cut, or NULL. */
static weft__pm_model *model_find(const weft__perfmodel *pm, const char *k, const char *a)
{
    for (weft__pm_model *m = pm->models; m; m = m->next)
        if (strcmp(m->kind, k) == 0 && strcmp(m->arch, a) == 0)
            return m;
    return NULL;
}

static weft__pm_model *model_get(weft__perfmodel *pm, const char *kind, const char *arch)
{
    char k[WEFT__PM_NAME], a[WEFT__PM_NAME];
    copy_name(k, kind);
    copy_name(a, arch);
    weft__pm_model *m = model_find(pm, k, a);
    if (m)
        return m;
    m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    memcpy(m->kind, k, sizeof k);
    memcpy(m->arch, a, sizeof a);
    m->next = pm->models;
    pm->models = m;
    return m;
}

weft__pm_model *weft__pm_model_get(weft__perfmodel *pm, const char *kind, const char *arch)
{
    pthread_mutex_lock(&pm->lock);
    weft__pm_model *m = model_get(pm, kind, arch);
    pthread_mutex_unlock(&pm->lock);
    return m;
}

weft__pm_model *weft__pm_model_find(weft__perfmodel *pm, const char *kind, const char *arch)
{
    char k[WEFT__PM_NAME], a[WEFT__PM_NAME];
    copy_name(k, kind);
    copy_name(a, arch);
    pthread_mutex_lock(&pm->lock);
    weft__pm_model *m = model_find(pm, k, a);
    pthread_mutex_unlock(&pm->lock);
    return m;
}

/* ------------------------------------------------------------------------ */
/* Predictions and observations                                              */
/* ------------------------------------------------------------------------ */

int weft__pm_predict(weft__perfmodel *pm, weft__pm_model *m, uint64_t size, double *ns, uint64_t *seen)
{
    int how = WEFT__PM_NONE;
    pthread_mutex_lock(&pm->lock);
    *seen = m->seen + m->pending;
    weft__pm_hist *h = hist_find(pm, m, size);
    double var = m->n * m->sxx - m->sx * m->sx;
    if (h && h->count) {
        *ns = h->mean;
        how = WEFT__PM_HISTORY;
    } else if (m->n >= 2 && var > 1e-9 * m->n * m->sxx && size) {
        double b = (m->n * m->sxy - m->sx * m->sy) / var, a = (m->sy - b * m->sx) / m->n;
        *ns = exp(a + b * log((double)size));
        how = WEFT__PM_FIT;
    } else if (m->one_size && m->one_mean > 0) {
        *ns = m->one_mean * (double)size / (double)m->one_size;
        how = WEFT__PM_FIT;
    }
    pthread_mutex_unlock(&pm->lock);
    return how;
}

void weft__pm_pending(weft__perfmodel *pm, weft__pm_model *m, int delta)
{
    pthread_mutex_lock(&pm->lock);
    if (delta > 0 || m->pending > 0)
        m->pending += (uint64_t)(int64_t)delta;
    pthread_mutex_unlock(&pm->lock);
}

void weft__pm_observe(weft__perfmodel *pm, weft__pm_model *m, uint64_t size, double ns)
{
    if (!(ns > 0))
        return;
    pthread_mutex_lock(&pm->lock);
    weft__pm_hist *h = hist_find(pm, m, size);
    if (!h)
        h = hist_new(pm, m, size);
    if (h) {
        if (h->count)
            fit_point(m, size, h->mean, -1);
        double d = ns - h->mean;
        if (h->count < PM_WINDOW) { /* Welford's running mean and spread */
            h->count++;
            h->mean += d / (double)h->count;
            h->m2 += d * (ns - h->mean);
        } else { /* then weighted to the last PM_WINDOW or so: old runs fade */
            h->mean += d / PM_WINDOW;
            h->m2 += (d * (ns - h->mean) - h->m2 / (PM_WINDOW - 1)) * (PM_WINDOW - 1) / PM_WINDOW;
        }
        fit_point(m, size, h->mean, +1);
        if (h->size == m->one_size)
            m->one_mean = h->mean;
        m->seen++;
        pm->dirty = true;
    }
    pthread_mutex_unlock(&pm->lock);
}

/* ------------------------------------------------------------------------ */
/* The file                                                                  */
/* ------------------------------------------------------------------------ */

bool weft__pm_path(char *buf, size_t len)
{
    buf[0] = '\0';
    bool on;
    if (weft__env_flag("WEFT_PERFMODEL", &on) && !on)
        return false;
    const char *dir = getenv("WEFT_PERFMODEL_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char d[900];
    if (dir && *dir)
        snprintf(d, sizeof d, "%s", dir);
    else if (xdg && *xdg)
        snprintf(d, sizeof d, "%s/weft/perfmodels", xdg);
    else if (home && *home)
        snprintf(d, sizeof d, "%s/.cache/weft/perfmodels", home);
    else
        return false;
    /* Make the directory and its parents (those that exist are fine). */
    for (char *p = d + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            (void)mkdir(d, 0755);
            *p = '/';
        }
    if (mkdir(d, 0755) != 0 && errno != EEXIST)
        return false;
    char host[128] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0 || !host[0])
        snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    int n = snprintf(buf, len, "%s/%s.models", d, host);
    if (n < 0 || (size_t)n >= len) {
        buf[0] = '\0';
        return false;
    }
    return true;
}

/* Parse one line into the store (the lock held): false if it is not a
 * model line. */
static bool load_line(weft__perfmodel *pm, char *line)
{
    char *f[6];
    int nf = 0;
    for (char *p = line; nf < 6; nf++) {
        f[nf] = p;
        char *tab = strchr(p, '\t');
        if (!tab) {
            nf++;
            break;
        }
        *tab = '\0';
        p = tab + 1;
    }
    if (nf != 6 || !f[0][0] || !f[1][0])
        return false;
    char *end;
    errno = 0;
    unsigned long long size = strtoull(f[2], &end, 10), count;
    if (*end || errno)
        return false;
    count = strtoull(f[3], &end, 10);
    if (*end || errno || count == 0)
        return false;
    double mean = strtod(f[4], &end);
    if (*end || !(mean > 0) || !isfinite(mean))
        return false;
    double m2 = strtod(f[5], &end);
    if (*end || !(m2 >= 0) || !isfinite(m2))
        return false;
    weft__pm_model *m = model_get(pm, f[0], f[1]);
    if (!m || hist_find(pm, m, size))
        return m != NULL; /* (a repeated line: the first counts) */
    weft__pm_hist *h = hist_new(pm, m, size);
    if (!h)
        return true;
    h->count = count;
    h->mean = mean;
    h->m2 = m2;
    fit_point(m, size, mean, +1);
    if (m->one_size == size)
        m->one_mean = mean;
    m->seen += count;
    return true;
}

static void free_all(weft__perfmodel *pm)
{
    for (size_t i = 0; i < pm->nbucket; i++)
        while (pm->table[i]) {
            weft__pm_hist *h = pm->table[i];
            pm->table[i] = h->next;
            free(h);
        }
    pm->nhist = 0;
    while (pm->models) {
        weft__pm_model *m = pm->models;
        pm->models = m->next;
        free(m);
    }
}

static void load(weft__perfmodel *pm)
{
    FILE *f = fopen(pm->path, "r");
    if (!f)
        return; /* (none yet) */
    char line[512];
    unsigned lineno = 0;
    bool ok = true;
    while (ok && fgets(line, sizeof line, f)) {
        lineno++;
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n')
            line[--n] = '\0';
        else if (!feof(f))
            ok = false; /* a line too long for a model */
        if (ok && lineno == 1)
            ok = strcmp(line, PM_HEADER) == 0;
        else if (ok && line[0] != '#' && n)
            ok = load_line(pm, line);
    }
    if (ok && lineno == 0)
        ok = false;
    fclose(f);
    if (!ok) {
        fprintf(stderr,
                "weft: warning: the performance model file %s is not one Weft wrote (line %u does not parse); "
                "ignoring it: the models are learned again and the file is written over (delete it, or set "
                "WEFT_PERFMODEL_DIR elsewhere, to keep it)\n",
                pm->path, lineno);
        free_all(pm);
    }
    pm->dirty = false;
}

int weft__pm_open(weft__perfmodel *pm, const char *path)
{
    memset(pm, 0, sizeof *pm);
    pm->nbucket = 64;
    pm->table = calloc(pm->nbucket, sizeof *pm->table);
    if (!pm->table)
        return WEFT_ENOMEM;
    pthread_mutex_init(&pm->lock, NULL);
    if (path && *path) {
        snprintf(pm->path, sizeof pm->path, "%s", path);
        load(pm);
    }
    return 0;
}

static void save(weft__perfmodel *pm)
{
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.%ld.tmp", pm->path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return; /* (a cache: not written is only not learned) */
    fprintf(f, "%s\n", PM_HEADER);
    for (size_t i = 0; i < pm->nbucket; i++)
        for (weft__pm_hist *h = pm->table[i]; h; h = h->next)
            fprintf(f, "%s\t%s\t%llu\t%llu\t%.17g\t%.17g\n", h->m->kind, h->m->arch, (unsigned long long)h->size,
                    (unsigned long long)h->count, h->mean, h->m2);
    bool ok = fflush(f) == 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, pm->path) != 0)
        (void)unlink(tmp);
}

void weft__pm_close(weft__perfmodel *pm)
{
    if (!pm->table)
        return;
    if (pm->path[0] && pm->dirty)
        save(pm);
    free_all(pm);
    free(pm->table);
    pm->table = NULL;
    pthread_mutex_destroy(&pm->lock);
}

void weft__pm_print(weft__perfmodel *pm, FILE *f)
{
    pthread_mutex_lock(&pm->lock);
    fprintf(f, "%-24s %-20s %12s %8s %14s %10s\n", "kind", "arch", "bytes", "count", "mean_us", "stddev_%");
    for (weft__pm_model *m = pm->models; m; m = m->next) {
        for (size_t i = 0; i < pm->nbucket; i++)
            for (weft__pm_hist *h = pm->table[i]; h; h = h->next) {
                if (h->m != m)
                    continue;
                double sd = h->count > 1 ? sqrt(h->m2 / (double)(h->count - 1)) : 0;
                fprintf(f, "%-24s %-20s %12llu %8llu %14.3f %10.1f\n", m->kind, m->arch,
                        (unsigned long long)h->size, (unsigned long long)h->count, h->mean / 1e3,
                        h->mean > 0 ? 100 * sd / h->mean : 0);
            }
        double var = m->n * m->sxx - m->sx * m->sx;
        if (m->n >= 2 && var > 0) {
            double b = (m->n * m->sxy - m->sx * m->sy) / var, a = (m->sy - b * m->sx) / m->n;
            fprintf(f, "%-24s %-20s fit: t = %.4g ns * bytes^%.3f over %.0f sizes\n", m->kind, m->arch, exp(a), b,
                    m->n);
        }
    }
    pthread_mutex_unlock(&pm->lock);
}
