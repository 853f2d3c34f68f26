/* Splitting the mesh into chunks, the way the reference code splits it
 * over its ranks.
 *
 * The grid of chunks: the first divisor c of n (counting up from 1) for
 * which (n / c) / c is no larger than the mesh's width / height gives
 * cy = c rows of cx = n / c chunks.  When no divisor fits, or the only
 * one that fits puts every chunk in one column, the chunks form a single
 * row (a mesh at least as wide as high) or a single column.  The ratios
 * are formed in single precision first, as the reference does, so that
 * the choice agrees with it in the borderline cases too.
 *
 * Cells: each column of chunks gets x_cells / cx cells, and the first
 * x_cells % cx columns one more (likewise for the rows).  Chunks are
 * numbered row by row from the bottom-left. */
#include "clover.h"

#include <stdio.h>

#define SAY(...)                                                                                         \
    do {                                                                                                 \
        if (err && errlen)                                                                               \
            snprintf(err, errlen, __VA_ARGS__);                                                          \
    } while (0)

int clover_decompose(const clover_deck *d, int n, clover_chunk *out, int *cx, int *cy, char *err, size_t errlen)
{
    if (n < 1) {
        SAY("clover_decompose: %d chunks: need at least one", n);
        return -1;
    }
    if (d->x_cells < 1 || d->y_cells < 1) {
        SAY("clover_decompose: a mesh of %d x %d cells has nothing to split", d->x_cells, d->y_cells);
        return -1;
    }

    /* REAL(x)/REAL(y) in the reference: single precision, then widened. */
    double mesh_ratio = (double)((float)d->x_cells / (float)d->y_cells);
    int gx = n, gy = 1, found = 0;
    for (int c = 1; c <= n; c++) {
        if (n % c != 0)
            continue;
        double fx = (double)((float)n / (float)c);
        double fy = (double)c;
        if (fx / fy <= mesh_ratio) {
            gy = c;
            gx = n / c;
            found = 1;
            break;
        }
    }
    if (!found || gy == n) {
        if (mesh_ratio >= 1.0) {
            gx = n;
            gy = 1;
        } else {
            gx = 1;
            gy = n;
        }
    }

    /* A chunk narrower than the halo (2 cells) across a split would need
     * cells from beyond its neighbour. */
    if ((gx > 1 && d->x_cells < 2 * gx) || (gy > 1 && d->y_cells < 2 * gy)) {
        SAY("clover_decompose: %d chunks as %d x %d would leave a chunk narrower than the halo (2 cells): the "
            "mesh is %d x %d cells",
            n, gx, gy, d->x_cells, d->y_cells);
        return -1;
    }

    int dx = d->x_cells / gx, rx = d->x_cells % gx;
    int dy = d->y_cells / gy, ry = d->y_cells % gy;
    int y0 = 0;
    for (int j = 0; j < gy; j++) {
        int ny = dy + (j < ry ? 1 : 0);
        int x0 = 0;
        for (int i = 0; i < gx; i++) {
            int nx = dx + (i < rx ? 1 : 0);
            int id = j * gx + i;
            clover_chunk *c = &out[id];
            c->x0 = x0;
            c->y0 = y0;
            c->nx = nx;
            c->ny = ny;
            c->edges = 0;
            c->left = i > 0 ? id - 1 : -1;
            c->right = i < gx - 1 ? id + 1 : -1;
            c->bottom = j > 0 ? id - gx : -1;
            c->top = j < gy - 1 ? id + gx : -1;
            if (c->left < 0)
                c->edges |= CLOVER_LEFT;
            if (c->right < 0)
                c->edges |= CLOVER_RIGHT;
            if (c->bottom < 0)
                c->edges |= CLOVER_BOTTOM;
            if (c->top < 0)
                c->edges |= CLOVER_TOP;
            x0 += nx;
        }
        y0 += ny;
    }
    if (cx)
        *cx = gx;
    if (cy)
        *cy = gy;
    return 0;
}
