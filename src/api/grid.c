/*
 * api/grid.c — 2-D decompositions for halo exchanges (weft.h: weft_grid):
 * where each block lies, how its owner stores it, and the transfers that
 * fill every block's halo from its neighbours.  Geometry only: no runtime.
 */
#include "internal.h"
#include "weft.h"

#include <string.h>

/* Block b's span along one axis: n cells split in k near-equal parts. */
static void split(size_t n, unsigned k, unsigned i, size_t *lo, size_t *len)
{
    size_t q = n / k, r = n % k;
    *lo = i * q + (i < r ? i : r);
    *len = q + (i < r);
}

static int check(const weft_grid *g, const char *fn)
{
    if (!g)
        return weft__error(WEFT_EINVAL, "%s: grid is NULL", fn);
    if (!g->rows || !g->cols || !g->elem || !g->brows || !g->bcols)
        return weft__error(WEFT_EINVAL, "%s: a zero size (rows %zu, cols %zu, elem %zu, blocks %u x %u)", fn,
                           g->rows, g->cols, g->elem, g->brows, g->bcols);
    if (g->brows > g->rows || g->bcols > g->cols)
        return weft__error(WEFT_EINVAL, "%s: %u x %u blocks of a %zu x %zu grid", fn, g->brows, g->bcols, g->rows,
                           g->cols);
    if (g->halo && (g->rows / g->brows < g->halo || g->cols / g->bcols < g->halo))
        return weft__error(WEFT_EINVAL, "%s: blocks of %zu x %zu cells are narrower than the halo (%zu)", fn,
                           g->rows / g->brows, g->cols / g->bcols, g->halo);
    size_t w, h, bytes;
    if (__builtin_add_overflow(g->cols / g->bcols + 1, 2 * g->halo, &w) ||
        __builtin_add_overflow(g->rows / g->brows + 1, 2 * g->halo, &h) || __builtin_mul_overflow(w, g->elem, &w) ||
        __builtin_mul_overflow(w, h, &bytes))
        return weft__error(WEFT_EINVAL, "%s: the blocks' sizes overflow", fn);
    return 0;
}

static void block_of(const weft_grid *g, unsigned b, weft_grid_block *o)
{
    split(g->rows, g->brows, b / g->bcols, &o->row0, &o->rows);
    split(g->cols, g->bcols, b % g->bcols, &o->col0, &o->cols);
    o->pitch = (o->cols + 2 * g->halo) * g->elem;
    o->bytes = (o->rows + 2 * g->halo) * o->pitch;
}

int weft_grid_block_get(const weft_grid *g, unsigned b, weft_grid_block *out)
{
    weft__clear_error();
    int rc = check(g, "weft_grid_block_get");
    if (rc)
        return rc;
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_grid_block_get: out is NULL");
    if (b >= g->brows * g->bcols)
        return weft__error(WEFT_EINVAL, "weft_grid_block_get: block %u of %u", b, g->brows * g->bcols);
    block_of(g, b, out);
    return 0;
}

/* Along one axis, the cells of the source (span [s0, s0 + sn) of the grid,
 * stored from index h) that lie in the target's halo: the target's interior
 * [t0, t0 + tn) widened by h, clipped to the source.  Returns the count and
 * sets the first cell's stored index in the source and in the target. */
static size_t overlap(size_t s0, size_t sn, size_t t0, size_t tn, size_t h, size_t *si, size_t *ti)
{
    size_t lo = t0 > h ? t0 - h : 0, hi = t0 + tn + h;
    if (lo < s0)
        lo = s0;
    if (hi > s0 + sn)
        hi = s0 + sn;
    if (hi <= lo)
        return 0;
    *si = lo - s0 + h;
    *ti = lo + h - t0; /* lo >= t0 - h */
    return hi - lo;
}

int weft_grid_exchange(const weft_grid *g, const int *member, weft_data *const *data, weft_xfer *out, size_t max,
                       size_t *n)
{
    weft__clear_error();
    int rc = check(g, "weft_grid_exchange");
    if (rc)
        return rc;
    if (!member || !n || (max && !out))
        return weft__error(WEFT_EINVAL, "weft_grid_exchange: %s is NULL", !member ? "member" : !n ? "n" : "out");
    unsigned nb = g->brows * g->bcols;
    size_t k = 0;
    for (unsigned s = 0; s < nb; s++) {
        if (member[s] < 0)
            continue;
        weft_grid_block sb;
        block_of(g, s, &sb);
        for (unsigned t = 0; t < nb; t++) {
            if (t == s || member[t] < 0 || member[t] == member[s])
                continue;
            int dr = (int)(t / g->bcols) - (int)(s / g->bcols), dc = (int)(t % g->bcols) - (int)(s % g->bcols);
            if (dr < -1 || dr > 1 || dc < -1 || dc > 1)
                continue; /* not neighbours */
            weft_grid_block tb;
            block_of(g, t, &tb);
            size_t sr, tr, sc, tc;
            size_t nr = overlap(sb.row0, sb.rows, tb.row0, tb.rows, g->halo, &sr, &tr);
            size_t nc = overlap(sb.col0, sb.cols, tb.col0, tb.cols, g->halo, &sc, &tc);
            /* only the part in the target's halo: not its interior */
            if (!nr || !nc || (dr == 0 && dc == 0))
                continue;
            if (k < max) {
                weft_xfer *x = &out[k];
                memset(x, 0, sizeof *x);
                x->from = (unsigned)member[s];
                x->to = (unsigned)member[t];
                x->src = data ? data[s] : NULL;
                x->dst = data ? data[t] : NULL;
                x->src_off = sr * sb.pitch + sc * g->elem;
                x->dst_off = tr * tb.pitch + tc * g->elem;
                x->src_pitch = sb.pitch;
                x->dst_pitch = tb.pitch;
                x->bytes = nc * g->elem;
                x->rows = nr;
            }
            k++;
        }
    }
    *n = k;
    return 0;
}
