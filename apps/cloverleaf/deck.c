/* deck.c: the input deck reader.
 *
 * A deck is plain text.  Only the lines inside a top-level block opened by
 * `*clover` and closed by `*endclover` are read (markers case-insensitive;
 * other `*name ... *endname` blocks, nested or not, are skipped).  On each
 * line `!` or `;` starts a comment, `=` and `,` separate words like blanks,
 * and words compare without regard to case.  A line is a run of keywords,
 * each followed by its value where it takes one; `state N` takes the rest of
 * its line for the state's own keywords.  A lone `\` continues a line on the
 * next one.
 *
 * Everything lives on the caller's stack: two parses may run at once. */
#include "clover.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest file clover_deck_load reads, and the largest mesh side. */
#define DECK_MAX_BYTES ((size_t)16 << 20)
#define DECK_MAX_CELLS 100000000
#define DECK_MAX_DEPTH 16
#define DECK_END_STEP_NONE INT_MAX

/* ---- words ------------------------------------------------------------ */

typedef struct word {
    const char *p;
    size_t n;
} word;

static int lower(int c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

static int is_sep(unsigned char c) { return c <= ' ' || c == '=' || c == ',' || c == 127; }

/* w equals the lower-case string s, ignoring case. */
static int word_is(word w, const char *s)
{
    size_t i;
    for (i = 0; i < w.n; i++)
        if (s[i] == '\0' || lower((unsigned char)w.p[i]) != s[i])
            return 0;
    return s[i] == '\0';
}

/* a and b are the same word, ignoring case. */
static int word_same(word a, word b)
{
    size_t i;
    if (a.n != b.n)
        return 0;
    for (i = 0; i < a.n; i++)
        if (lower((unsigned char)a.p[i]) != lower((unsigned char)b.p[i]))
            return 0;
    return 1;
}

static int word_starts(word w, const char *s)
{
    size_t i;
    for (i = 0; s[i] != '\0'; i++)
        if (i >= w.n || lower((unsigned char)w.p[i]) != s[i])
            return 0;
    return 1;
}

/* A printable copy of w for messages, cut short when long. */
static void word_show(word w, char *buf, size_t len)
{
    size_t i, o = 0, keep = w.n;
    const size_t most = 40;
    if (len == 0)
        return;
    if (keep > most)
        keep = most;
    for (i = 0; i < keep && o + 1 < len; i++) {
        unsigned char c = (unsigned char)w.p[i];
        buf[o++] = (c >= 32 && c < 127) ? (char)c : '?';
    }
    if (keep < w.n)
        for (i = 0; i < 3 && o + 1 < len; i++)
            buf[o++] = '.';
    buf[o] = '\0';
}

/* One edit (insert, delete, change, or swap two neighbours) turns w into
 * the lower-case keyword k, and w is not k. */
static int one_edit(word w, const char *k)
{
    size_t kn = strlen(k), i = 0;
    while (i < w.n && i < kn && lower((unsigned char)w.p[i]) == k[i])
        i++;
    if (w.n == kn) {
        size_t j;
        if (i == kn)
            return 0;
        /* a change at i */
        for (j = i + 1; j < kn && lower((unsigned char)w.p[j]) == k[j]; j++)
            ;
        if (j == kn)
            return 1;
        /* a swap of i and i + 1 */
        if (i + 1 < kn && lower((unsigned char)w.p[i]) == k[i + 1] && lower((unsigned char)w.p[i + 1]) == k[i]) {
            for (j = i + 2; j < kn && lower((unsigned char)w.p[j]) == k[j]; j++)
                ;
            return j == kn;
        }
        return 0;
    }
    if (w.n == kn + 1) { /* w has one letter too many, at i */
        size_t j;
        for (j = i; j < kn && lower((unsigned char)w.p[j + 1]) == k[j]; j++)
            ;
        return j == kn;
    }
    if (w.n + 1 == kn) { /* w lacks k[i] */
        size_t j;
        for (j = i; j < w.n && lower((unsigned char)w.p[j]) == k[j + 1]; j++)
            ;
        return j == w.n;
    }
    return 0;
}

/* ---- numbers ---------------------------------------------------------- */

enum { NUM_OK = 0, NUM_BAD = 1, NUM_RANGE = 2, NUM_FRACTION = 3 };

/* A real in Fortran's spelling too (1.0d-3).  No hex, inf or nan. */
static int word_real(word w, double *out)
{
    char buf[80];
    char *end;
    size_t i;
    int digits = 0;
    double v;
    if (w.n == 0 || w.n >= sizeof buf)
        return NUM_BAD;
    for (i = 0; i < w.n; i++) {
        char c = w.p[i];
        if (c >= '0' && c <= '9')
            digits++;
        else if (c == 'd' || c == 'D')
            c = 'e';
        else if (!(c == '+' || c == '-' || c == '.' || c == 'e' || c == 'E'))
            return NUM_BAD;
        buf[i] = c;
    }
    buf[w.n] = '\0';
    if (digits == 0)
        return NUM_BAD;
    errno = 0;
    v = strtod(buf, &end);
    if (end == buf || *end != '\0')
        return NUM_BAD;
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1.0))
        return NUM_RANGE;
    *out = v;
    return NUM_OK;
}

static int word_int(word w, int *out)
{
    size_t i = 0;
    long long v = 0;
    int neg = 0, digits = 0;
    if (w.n > 0 && (w.p[0] == '+' || w.p[0] == '-')) {
        neg = w.p[0] == '-';
        i = 1;
    }
    for (; i < w.n; i++) {
        char c = w.p[i];
        if (c < '0' || c > '9') {
            double d;
            return word_real(w, &d) == NUM_OK ? NUM_FRACTION : NUM_BAD;
        }
        if (v <= (long long)INT_MAX + 1)
            v = v * 10 + (c - '0');
        digits++;
    }
    if (digits == 0)
        return NUM_BAD;
    if (neg)
        v = -v;
    if (v > INT_MAX || v < INT_MIN)
        return NUM_RANGE;
    *out = (int)v;
    return NUM_OK;
}

/* ---- reading the text ---------------------------------------------------- */

typedef struct cursor {
    const char *s;
    size_t len;
    size_t lstart, lend, cend; /* this line: start, end, end before a comment */
    size_t pos;                /* next byte of this line to read */
    int line;                  /* its number, from 1 */
} cursor;

static void cursor_line(cursor *c, size_t start)
{
    size_t i;
    const char *nl = start < c->len ? memchr(c->s + start, '\n', c->len - start) : NULL;
    c->lstart = start;
    c->lend = nl ? (size_t)(nl - c->s) : c->len;
    c->cend = c->lend;
    for (i = start; i < c->lend; i++)
        if (c->s[i] == '!' || c->s[i] == ';') {
            c->cend = i;
            break;
        }
    c->pos = start;
}

static int cursor_next_line(cursor *c)
{
    if (c->lend >= c->len)
        return 0;
    cursor_line(c, c->lend + 1);
    c->line++;
    return 1;
}

/* The next word on this line, not following `\`. */
static int raw_word(cursor *c, word *w)
{
    while (c->pos < c->cend && is_sep((unsigned char)c->s[c->pos]))
        c->pos++;
    if (c->pos >= c->cend)
        return 0;
    w->p = c->s + c->pos;
    while (c->pos < c->cend && !is_sep((unsigned char)c->s[c->pos]))
        c->pos++;
    w->n = (size_t)(c->s + c->pos - w->p);
    return 1;
}

/* The next word of this statement: a lone `\` carries on to the next line. */
static int next_word(cursor *c, word *w)
{
    for (;;) {
        if (!raw_word(c, w))
            return 0;
        if (!(w->n == 1 && w->p[0] == '\\'))
            return 1;
        if (!cursor_next_line(c))
            return 0;
    }
}

/* ---- keywords ------------------------------------------------------------ */

enum kw {
    KW_STATE, KW_X_CELLS, KW_Y_CELLS, KW_XMIN, KW_YMIN, KW_XMAX, KW_YMAX,
    KW_DTINIT, KW_DTMAX, KW_DTRISE, KW_END_TIME, KW_END_STEP, KW_TEST_PROBLEM,
    KW_SUMMARY, KW_VISIT, KW_PROFILER, KW_TILES,
    KW_N
};

static const char *const kw_name[KW_N] = {
    "state", "x_cells", "y_cells", "xmin", "ymin", "xmax", "ymax",
    "initial_timestep", "max_timestep", "timestep_rise", "end_time", "end_step", "test_problem",
    "summary_frequency", "visit_frequency", "profiler_on", "tiles_per_chunk",
};

enum skw { SK_DENSITY, SK_ENERGY, SK_XVEL, SK_YVEL, SK_XMIN, SK_XMAX, SK_YMIN, SK_YMAX, SK_RADIUS, SK_GEOMETRY, SK_N };

static const char *const skw_name[SK_N] = {
    "density", "energy", "xvel", "yvel", "xmin", "xmax", "ymin", "ymax", "radius", "geometry",
};

static int kw_find(word w, const char *const *names, int n)
{
    int i;
    for (i = 0; i < n; i++)
        if (word_is(w, names[i]))
            return i;
    return -1;
}

/* A known keyword that w looks like a slip of, or NULL. */
static const char *kw_near(word w, const char *const *names, int n)
{
    int i;
    if (w.n < 5 || word_starts(w, "use_"))
        return NULL;
    for (i = 0; i < n; i++)
        if (one_edit(w, names[i]))
            return names[i];
    return NULL;
}

static int looks_numeric(word w)
{
    double d;
    return word_real(w, &d) != NUM_BAD;
}

/* ---- the parse ----------------------------------------------------------- */

typedef struct parser {
    cursor c;
    const char *name;
    char *err;
    size_t errlen;
    clover_deck d;
    int kw_line[KW_N];             /* line each keyword was last given on, 0: never */
    unsigned given[CLOVER_MAX_STATES]; /* SK_ bits each state gave */
    int state_line[CLOVER_MAX_STATES];
} parser;

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int fail(parser *p, int line, const char *key, const char *fmt, ...)
{
    va_list ap;
    size_t o;
    int k;
    if (p->err == NULL || p->errlen == 0)
        return -1;
    if (key)
        k = snprintf(p->err, p->errlen, "%s:%d: '%s': ", p->name, line, key);
    else
        k = snprintf(p->err, p->errlen, "%s:%d: ", p->name, line);
    o = k < 0 ? 0 : (size_t)k;
    if (o >= p->errlen)
        return -1;
    va_start(ap, fmt);
    vsnprintf(p->err + o, p->errlen - o, fmt, ap);
    va_end(ap);
    return -1;
}

static int num_fail(parser *p, const char *key, word w, int why, int want_int)
{
    char shown[64];
    word_show(w, shown, sizeof shown);
    if (why == NUM_RANGE)
        return fail(p, p->c.line, key, "number out of range: '%s'", shown);
    if (why == NUM_FRACTION)
        return fail(p, p->c.line, key, "not a whole number: '%s'", shown);
    return fail(p, p->c.line, key, "not a number: '%s'%s", shown, want_int ? " (a whole number is needed)" : "");
}

static int get_value(parser *p, const char *key, word *w)
{
    if (!next_word(&p->c, w))
        return fail(p, p->c.line, key, "a value must follow on the same line");
    return 0;
}

static int get_real(parser *p, const char *key, double *out)
{
    word w;
    int r;
    if (get_value(p, key, &w))
        return -1;
    r = word_real(w, out);
    return r == NUM_OK ? 0 : num_fail(p, key, w, r, 0);
}

static int get_int(parser *p, const char *key, int *out)
{
    word w;
    int r;
    if (get_value(p, key, &w))
        return -1;
    r = word_int(w, out);
    return r == NUM_OK ? 0 : num_fail(p, key, w, r, 1);
}

/* A flag may be followed by on/off, true/false, yes/no, 1/0. */
static int get_flag(parser *p)
{
    static const char *const yes[] = { "on", "true", "yes", "1", ".true." };
    static const char *const no[] = { "off", "false", "no", "0", ".false." };
    cursor save = p->c;
    word w;
    size_t i;
    if (!next_word(&p->c, &w))
        return 1;
    for (i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (word_is(w, yes[i]))
            return 1;
        if (word_is(w, no[i]))
            return 0;
    }
    p->c = save;
    return 1;
}

static int positive(parser *p, const char *key, double v)
{
    return v > 0.0 ? 0 : fail(p, p->c.line, key, "must be positive, not %g", v);
}

static int not_negative(parser *p, const char *key, double v)
{
    return v >= 0.0 ? 0 : fail(p, p->c.line, key, "must not be negative, not %g", v);
}

/* A word where a keyword should be that is none: allowed after an unknown
 * keyword (as the reference reader skips both), else an error when it is a
 * stray number or a slip of a known keyword. */
static int unknown_word(parser *p, word w, int *after_unknown, int in_state)
{
    char shown[64];
    const char *near;
    if (looks_numeric(w)) {
        if (*after_unknown)
            return 0;
        word_show(w, shown, sizeof shown);
        return fail(p, p->c.line, shown, "a value with no keyword before it");
    }
    near = in_state ? kw_near(w, skw_name, SK_N) : kw_near(w, kw_name, KW_N);
    if (near) {
        word_show(w, shown, sizeof shown);
        return fail(p, p->c.line, shown, "unknown keyword (did you mean '%s'?)", near);
    }
    if (in_state && kw_find(w, kw_name, KW_N) >= 0) {
        word_show(w, shown, sizeof shown);
        return fail(p, p->c.line, shown, "not a state keyword; give it on a line of its own");
    }
    *after_unknown = 1;
    return 0;
}

static int parse_state(parser *p)
{
    clover_deck *d = &p->d;
    clover_state *s;
    int n, after_unknown = 0;
    word w;
    if (get_int(p, "state", &n))
        return -1;
    if (n < 1 || n > CLOVER_MAX_STATES)
        return fail(p, p->c.line, "state", "state number %d out of range 1..%d", n, CLOVER_MAX_STATES);
    if (n <= d->nstates)
        return fail(p, p->c.line, "state", "state %d defined twice (first on line %d)", n, p->state_line[n - 1]);
    if (n != d->nstates + 1) {
        if (d->nstates == 0)
            return fail(p, p->c.line, "state", "state %d before state 1 (states are numbered 1, 2, ... in order)", n);
        return fail(p, p->c.line, "state", "state %d follows state %d (states are numbered 1, 2, ... in order)", n,
                    d->nstates);
    }
    d->nstates = n;
    s = &d->state[n - 1];
    memset(s, 0, sizeof *s);
    s->defined = 1;
    p->state_line[n - 1] = p->c.line;
    p->given[n - 1] = 0;

    while (next_word(&p->c, &w)) {
        int k = kw_find(w, skw_name, SK_N);
        double v = 0.0;
        if (k < 0) {
            if (unknown_word(p, w, &after_unknown, 1))
                return -1;
            continue;
        }
        after_unknown = 0;
        if (k == SK_GEOMETRY) {
            word g;
            char shown[64];
            if (get_value(p, "geometry", &g))
                return -1;
            if (word_is(g, "rectangle"))
                s->geometry = CLOVER_GEOM_RECTANGLE;
            else if (word_is(g, "circle"))
                s->geometry = CLOVER_GEOM_CIRCLE;
            else if (word_is(g, "point"))
                s->geometry = CLOVER_GEOM_POINT;
            else {
                word_show(g, shown, sizeof shown);
                return fail(p, p->c.line, "geometry", "unknown geometry '%s' (rectangle, circle or point)", shown);
            }
            p->given[n - 1] |= 1u << k;
            continue;
        }
        if (get_real(p, skw_name[k], &v))
            return -1;
        switch (k) {
        case SK_DENSITY: s->density = v; break;
        case SK_ENERGY: s->energy = v; break;
        case SK_XVEL: s->xvel = v; break;
        case SK_YVEL: s->yvel = v; break;
        case SK_XMIN: s->xmin = v; break;
        case SK_XMAX: s->xmax = v; break;
        case SK_YMIN: s->ymin = v; break;
        case SK_YMAX: s->ymax = v; break;
        case SK_RADIUS:
            if (not_negative(p, "radius", v))
                return -1;
            s->radius = v;
            break;
        default: break;
        }
        p->given[n - 1] |= 1u << k;
    }
    return 0;
}

/* One line inside the *clover block (and the lines `\` joins to it). */
static int parse_statement(parser *p)
{
    clover_deck *d = &p->d;
    int after_unknown = 0;
    word w;
    while (next_word(&p->c, &w)) {
        int k = kw_find(w, kw_name, KW_N), line = p->c.line;
        double v;
        int iv;
        if (k < 0) {
            if (word_starts(w, "use_")) { /* use_fortran_kernels, use_c_kernels, ...: which kernels; ignored */
                (void)get_flag(p);
                after_unknown = 0;
                continue;
            }
            if (unknown_word(p, w, &after_unknown, 0))
                return -1;
            continue;
        }
        after_unknown = 0;
        p->kw_line[k] = line;
        switch (k) {
        case KW_STATE:
            if (parse_state(p))
                return -1;
            break;
        case KW_X_CELLS:
        case KW_Y_CELLS:
            if (get_int(p, kw_name[k], &iv))
                return -1;
            if (iv <= 0)
                return fail(p, p->c.line, kw_name[k], "must be positive, not %d", iv);
            if (iv > DECK_MAX_CELLS)
                return fail(p, p->c.line, kw_name[k], "%d cells is more than %d", iv, DECK_MAX_CELLS);
            *(k == KW_X_CELLS ? &d->x_cells : &d->y_cells) = iv;
            break;
        case KW_XMIN:
        case KW_YMIN:
        case KW_XMAX:
        case KW_YMAX:
            if (get_real(p, kw_name[k], &v))
                return -1;
            *(k == KW_XMIN ? &d->xmin : k == KW_YMIN ? &d->ymin : k == KW_XMAX ? &d->xmax : &d->ymax) = v;
            break;
        case KW_DTINIT:
        case KW_DTMAX:
        case KW_DTRISE:
            if (get_real(p, kw_name[k], &v) || positive(p, kw_name[k], v))
                return -1;
            *(k == KW_DTINIT ? &d->dtinit : k == KW_DTMAX ? &d->dtmax : &d->dtrise) = v;
            break;
        case KW_END_TIME:
            if (get_real(p, kw_name[k], &v) || not_negative(p, kw_name[k], v))
                return -1;
            d->end_time = v;
            break;
        case KW_END_STEP:
        case KW_TEST_PROBLEM:
        case KW_SUMMARY:
        case KW_VISIT:
            if (get_int(p, kw_name[k], &iv))
                return -1;
            if (iv < 0)
                return fail(p, p->c.line, kw_name[k], "must not be negative, not %d", iv);
            *(k == KW_END_STEP ? &d->end_step : k == KW_TEST_PROBLEM ? &d->test_problem
                                                : k == KW_SUMMARY ? &d->summary_frequency : &d->visit_frequency) = iv;
            break;
        case KW_PROFILER:
            d->profiler_on = get_flag(p);
            break;
        case KW_TILES: /* tiles within a chunk: not used here */
            if (get_int(p, kw_name[k], &iv))
                return -1;
            if (iv < 1)
                return fail(p, p->c.line, kw_name[k], "must be positive, not %d", iv);
            break;
        default:
            break;
        }
        if (k == KW_STATE)
            break; /* the state took the rest of the line */
    }
    return 0;
}

/* The checks that need the whole deck. */
static int check_deck(parser *p, int clover_line)
{
    clover_deck *d = &p->d;
    int i;
    if (d->nstates == 0)
        return fail(p, clover_line, "state", "no states defined (state 1, the background, is needed)");
    for (i = 0; i < d->nstates; i++) {
        const clover_state *s = &d->state[i];
        unsigned g = p->given[i];
        int line = p->state_line[i];
        if (!(g & (1u << SK_DENSITY)))
            return fail(p, line, "state", "state %d has no density", i + 1);
        if (!(g & (1u << SK_ENERGY)))
            return fail(p, line, "state", "state %d has no energy", i + 1);
        if (i == 0)
            continue;
        if (!(g & (1u << SK_GEOMETRY)))
            return fail(p, line, "state", "state %d has no geometry (rectangle, circle or point)", i + 1);
        if (!(g & (1u << SK_XMIN)) || !(g & (1u << SK_YMIN)))
            return fail(p, line, "state", "state %d has no %s", i + 1,
                        s->geometry == CLOVER_GEOM_RECTANGLE ? "xmin and ymin" : "centre (xmin and ymin)");
        if (s->geometry == CLOVER_GEOM_RECTANGLE) {
            if (!(g & (1u << SK_XMAX)) || !(g & (1u << SK_YMAX)))
                return fail(p, line, "state", "state %d is a rectangle without xmax and ymax", i + 1);
            if (!(s->xmax > s->xmin))
                return fail(p, line, "state", "state %d: xmax %g is not above xmin %g", i + 1, s->xmax, s->xmin);
            if (!(s->ymax > s->ymin))
                return fail(p, line, "state", "state %d: ymax %g is not above ymin %g", i + 1, s->ymax, s->ymin);
        } else if (s->geometry == CLOVER_GEOM_CIRCLE) {
            if (!(g & (1u << SK_RADIUS)))
                return fail(p, line, "state", "state %d is a circle without a radius", i + 1);
        }
    }
    if (!p->kw_line[KW_X_CELLS])
        return fail(p, clover_line, "x_cells", "not given (the mesh size is needed)");
    if (!p->kw_line[KW_Y_CELLS])
        return fail(p, clover_line, "y_cells", "not given (the mesh size is needed)");
    if (!(d->xmax > d->xmin)) {
        int line = p->kw_line[KW_XMAX] ? p->kw_line[KW_XMAX] : p->kw_line[KW_XMIN] ? p->kw_line[KW_XMIN] : clover_line;
        return fail(p, line, "xmax", "xmax %g is not above xmin %g", d->xmax, d->xmin);
    }
    if (!(d->ymax > d->ymin)) {
        int line = p->kw_line[KW_YMAX] ? p->kw_line[KW_YMAX] : p->kw_line[KW_YMIN] ? p->kw_line[KW_YMIN] : clover_line;
        return fail(p, line, "ymax", "ymax %g is not above ymin %g", d->ymax, d->ymin);
    }
    if (!p->kw_line[KW_END_TIME] && !p->kw_line[KW_END_STEP])
        return fail(p, clover_line, "end_time", "neither end_time nor end_step given: the run would not end");
    return 0;
}

static void deck_defaults(clover_deck *d)
{
    memset(d, 0, sizeof *d);
    d->xmin = 0.0;
    d->ymin = 0.0;
    d->xmax = 100.0;
    d->ymax = 100.0;
    d->x_cells = 10;
    d->y_cells = 10;
    d->dtinit = 0.1;
    d->dtmax = 1.0;
    d->dtmin = 0.0000001;
    d->dtrise = 1.5;
    d->dtc_safe = 0.7;
    d->dtu_safe = 0.5;
    d->dtv_safe = 0.5;
    d->dtdiv_safe = 0.7;
    d->end_time = 10.0;
    d->end_step = DECK_END_STEP_NONE;
    d->test_problem = 0;
    d->summary_frequency = 10;
    d->visit_frequency = 0;
    d->profiler_on = 0;
}

static int deck_parse(const char *text, size_t len, const char *name, clover_deck *out, char *err, size_t errlen)
{
    parser *p;
    word stack[DECK_MAX_DEPTH];
    int depth = 0, found = 0, clover_line = 0, rc = 0, i;

    if (err && errlen)
        err[0] = '\0';
    if (name == NULL)
        name = "deck";
    if (text == NULL || out == NULL) {
        if (err && errlen)
            snprintf(err, errlen, "%s: no deck given", name);
        return -1;
    }
    /* the parser is a few kilobytes; keep it off small thread stacks */
    p = calloc(1, sizeof *p);
    if (p == NULL) {
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", name);
        return -1;
    }
    p->name = name;
    p->err = err;
    p->errlen = errlen;
    deck_defaults(&p->d);
    p->c.s = text;
    p->c.len = len;
    p->c.line = 1;
    cursor_line(&p->c, 0);

    for (;;) {
        cursor at = p->c;
        word w;
        if (raw_word(&p->c, &w) && w.p[0] == '*') {
            /* a block marker; the rest of its line is not read */
            word nm = { w.p + 1, w.n - 1 };
            if (word_starts(w, "*select:")) {
                /* a selection line: not used */
            } else if (word_starts(w, "*end")) {
                word ew = { w.p + 4, w.n - 4 };
                char shown[64];
                word_show(w, shown, sizeof shown);
                if (depth == 0) {
                    rc = fail(p, p->c.line, shown, "no block open to end");
                    break;
                }
                if (!word_same(ew, stack[depth - 1])) {
                    char open[64];
                    word_show(stack[depth - 1], open, sizeof open);
                    rc = fail(p, p->c.line, shown, "does not end the open block '*%s'", open);
                    break;
                }
                depth--;
            } else {
                if (depth == DECK_MAX_DEPTH) {
                    char shown[64];
                    word_show(w, shown, sizeof shown);
                    rc = fail(p, p->c.line, shown, "blocks nested more than %d deep", DECK_MAX_DEPTH);
                    break;
                }
                stack[depth++] = nm;
                if (depth == 1 && word_is(nm, "clover")) {
                    if (!found)
                        clover_line = p->c.line;
                    found = 1;
                }
            }
        } else if (depth == 1 && word_is(stack[0], "clover")) {
            p->c = at;
            if (parse_statement(p)) {
                rc = -1;
                break;
            }
        }
        if (!cursor_next_line(&p->c))
            break;
    }

    if (rc == 0) {
        for (i = 0; i < depth; i++)
            if (word_is(stack[i], "clover")) {
                rc = fail(p, clover_line, "*clover", "no '*endclover' before the end of the file");
                break;
            }
    }
    if (rc == 0 && !found)
        rc = fail(p, p->c.line, "*clover", "no '*clover' ... '*endclover' block in the deck");
    if (rc == 0)
        rc = check_deck(p, clover_line);
    if (rc == 0) {
        /* As the reference reader does: pull each placed state's edges a
         * hundredth of a cell inwards, so that an edge on a cell boundary
         * does not leave the state one cell wider through rounding. */
        clover_deck *d = &p->d;
        double dx = (d->xmax - d->xmin) / (double)d->x_cells;
        double dy = (d->ymax - d->ymin) / (double)d->y_cells;
        d->state[0].geometry = 0;
        for (i = 1; i < d->nstates; i++) {
            d->state[i].xmin += dx / 100.0;
            d->state[i].ymin += dy / 100.0;
            d->state[i].xmax -= dx / 100.0;
            d->state[i].ymax -= dy / 100.0;
        }
        *out = *d;
    }
    free(p);
    return rc;
}

int clover_deck_parse(const char *text, const char *name, clover_deck *out, char *err, size_t errlen)
{
    return deck_parse(text, text ? strlen(text) : 0, name, out, err, errlen);
}

int clover_deck_load(const char *path, clover_deck *out, char *err, size_t errlen)
{
    FILE *f;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc;
    if (err && errlen)
        err[0] = '\0';
    if (path == NULL) {
        if (err && errlen)
            snprintf(err, errlen, "deck: no file named");
        return -1;
    }
    f = fopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -1;
    }
    for (;;) {
        size_t got;
        if (len == cap) {
            char *nb;
            if (cap >= DECK_MAX_BYTES) {
                if (err && errlen)
                    snprintf(err, errlen, "%s: larger than %zu bytes: not a deck", path, DECK_MAX_BYTES);
                free(buf);
                fclose(f);
                return -1;
            }
            cap = cap ? cap * 2 : 4096;
            nb = realloc(buf, cap);
            if (nb == NULL) {
                if (err && errlen)
                    snprintf(err, errlen, "%s: out of memory", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        int e = errno;
        if (err && errlen)
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror(e));
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    rc = deck_parse(buf ? buf : "", len, path, out, err, errlen);
    free(buf);
    return rc;
}
