/* Ghost layers: what the mesh's boundary puts in them (clover_k_reflect)
 * and which strips neighbouring chunks give each other (clover_halo_strip).
 *
 * Four kinds of field, by where their values sit:
 *   cells    j in [0, nx),  k in [0, ny)
 *   nodes    j in [0, nx],  k in [0, ny]   (xvel, yvel)
 *   x faces  j in [0, nx],  k in [0, ny)   (vol_flux_x, mass_flux_x, xarea)
 *   y faces  j in [0, nx),  k in [0, ny]   (vol_flux_y, mass_flux_y, yarea)
 * A kind's "extra" index along x (nodes, x faces) or y (nodes, y faces)
 * is the line a chunk shares with its neighbour on that side. */
#include "clover.h"

#include <stddef.h>
#include <string.h>

enum { KIND_CELL, KIND_NODE, KIND_XFACE, KIND_YFACE };

static int field_kind(int f)
{
    switch (f) {
    case CF_XVEL0:
    case CF_XVEL1:
    case CF_YVEL0:
    case CF_YVEL1:
        return KIND_NODE;
    case CF_VOL_FLUX_X:
    case CF_MASS_FLUX_X:
    case CF_XAREA:
        return KIND_XFACE;
    case CF_VOL_FLUX_Y:
    case CF_MASS_FLUX_Y:
    case CF_YAREA:
        return KIND_YFACE;
    default:
        return KIND_CELL;
    }
}

/* ---- the mesh's boundary ------------------------------------------------ */

/* How one field is mirrored at the mesh's faces, for ghost layer k = 1,
 * 2 (the k-th row below / above the chunk, the k-th column left / right):
 *   bottom  row -k              <- sy * row lo_y - 1 + k
 *   top     row top_y - 1 + k   <- sy * row hi_y - k
 *   left    column -k           <- sx * column lo_x - 1 + k
 *   right   column top_x - 1 + k <- sx * column hi_x - k
 * The bottom/top loops cover columns -depth .. nx - 1 + jext + depth, the
 * left/right loops rows -depth .. ny - 1 + kext + depth.  The offsets are
 * the reference's, including its treatment of the fluxes along the face
 * they do not sit on: the x fluxes at a bottom or top face and the y
 * fluxes at a left or right face mirror about the first line of values
 * inside, as nodes do, not about the face as cells do. */
typedef struct mirror {
    int sy, sx;
    int lo_y, hi_y, top_y;
    int lo_x, hi_x, top_x;
    int jext, kext;
} mirror;

static mirror mirror_of(int f, int nx, int ny)
{
    mirror m;
    m.sx = 1;
    m.sy = 1;
    switch (field_kind(f)) {
    case KIND_NODE:
        /* Mirror about the boundary node line: node -k <- node k,
         * node n + k <- node n - k. */
        m.lo_y = 1;
        m.top_y = ny + 1;
        m.hi_y = ny;
        m.lo_x = 1;
        m.top_x = nx + 1;
        m.hi_x = nx;
        m.jext = 1;
        m.kext = 1;
        if (f == CF_XVEL0 || f == CF_XVEL1)
            m.sx = -1;
        else
            m.sy = -1;
        break;
    case KIND_XFACE:
        /* Along x: about the boundary face (face -k <- face k, sign
         * flipped).  Along y, the reference's node-like offsets: row -k <-
         * row k, row ny - 1 + k <- row ny - 1 - k. */
        m.lo_y = 1;
        m.top_y = ny;
        m.hi_y = ny - 1;
        m.lo_x = 1;
        m.top_x = nx + 1;
        m.hi_x = nx;
        m.jext = 1;
        m.kext = 0;
        m.sx = -1;
        break;
    case KIND_YFACE:
        m.lo_y = 1;
        m.top_y = ny + 1;
        m.hi_y = ny;
        m.lo_x = 1;
        m.top_x = nx;
        m.hi_x = nx - 1;
        m.jext = 0;
        m.kext = 1;
        m.sy = -1;
        break;
    default:
        /* Cells: about the face between the last cell and the first ghost:
         * cell -k <- cell k - 1, cell n - 1 + k <- cell n - k. */
        m.lo_y = 0;
        m.top_y = ny;
        m.hi_y = ny;
        m.lo_x = 0;
        m.top_x = nx;
        m.hi_x = nx;
        m.jext = 0;
        m.kext = 0;
        break;
    }
    return m;
}

void clover_k_reflect(const clover_view *v, const int *fields, int nfields, int depth, unsigned edges)
{
    const int nx = v->nx, ny = v->ny;
    const ptrdiff_t p = (ptrdiff_t)v->pitch;
    if (depth < 1)
        return;
    if (depth > 2)
        depth = 2;
    for (int i = 0; i < nfields; i++) {
        int f = fields[i];
        if (f < 0 || f >= CF_NFIELDS || !v->f[f])
            continue;
        double *a = v->f[f] + 2 * p + 2; /* a[k * p + j] is element (j, k) */
        const mirror m = mirror_of(f, nx, ny);
        const double sy = (double)m.sy, sx = (double)m.sx;
        /* bottom and top over the full width, then left and right over the
         * full height (ghost rows included), the reference's order */
        if (edges & CLOVER_BOTTOM)
            for (int k = 1; k <= depth; k++) {
                double *dst = a - (ptrdiff_t)k * p;
                const double *src = a + (ptrdiff_t)(m.lo_y - 1 + k) * p;
                for (int j = -depth; j <= nx - 1 + m.jext + depth; j++)
                    dst[j] = sy * src[j];
            }
        if (edges & CLOVER_TOP)
            for (int k = 1; k <= depth; k++) {
                double *dst = a + (ptrdiff_t)(m.top_y - 1 + k) * p;
                const double *src = a + (ptrdiff_t)(m.hi_y - k) * p;
                for (int j = -depth; j <= nx - 1 + m.jext + depth; j++)
                    dst[j] = sy * src[j];
            }
        if (edges & CLOVER_LEFT)
            for (int k = -depth; k <= ny - 1 + m.kext + depth; k++) {
                double *row = a + (ptrdiff_t)k * p;
                for (int j = 1; j <= depth; j++)
                    row[-j] = sx * row[m.lo_x - 1 + j];
            }
        if (edges & CLOVER_RIGHT)
            for (int k = -depth; k <= ny - 1 + m.kext + depth; k++) {
                double *row = a + (ptrdiff_t)k * p;
                for (int j = 1; j <= depth; j++)
                    row[m.top_x - 1 + j] = sx * row[m.hi_x - j];
            }
    }
}

/* ---- between chunks ------------------------------------------------------ */

void clover_halo_strip(const clover_chunk *c, int f, int depth, unsigned edge, clover_strip *out)
{
    const int kind = field_kind(f);
    const int xi = (kind == KIND_NODE || kind == KIND_XFACE) ? 1 : 0;
    const int yi = (kind == KIND_NODE || kind == KIND_YFACE) ? 1 : 0;
    const size_t pitch = (size_t)c->nx + 5;
    int sj = 0, sk = 0, rj = 0, rk = 0, rows = 0, cols = 0;

    out->send_off = out->recv_off = 0;
    out->rows = out->cols = 0;
    if (depth < 1 || depth > 2)
        return;
    switch (edge) {
    case CLOVER_LEFT:
    case CLOVER_RIGHT:
        /* phase 1: depth columns over the chunk's rows and depth more
         * above and below (those are refreshed again in phase 2 or by the
         * reflection); a shared node or face column is not sent */
        rows = c->ny + yi + 2 * depth;
        cols = depth;
        sk = rk = -depth;
        if (edge == CLOVER_LEFT) {
            sj = xi;         /* the first columns past the shared line */
            rj = -depth;     /* the ghost columns on the left */
        } else {
            sj = c->nx - depth;
            rj = c->nx + xi;
        }
        break;
    case CLOVER_BOTTOM:
    case CLOVER_TOP:
        /* phase 2: depth rows across the whole stored width, so the
         * corner ghosts come from the diagonal chunk by way of the x
         * neighbour's phase-1 strips */
        rows = depth;
        cols = c->nx + xi + 2 * depth;
        sj = rj = -depth;
        if (edge == CLOVER_BOTTOM) {
            sk = yi;
            rk = -depth;
        } else {
            sk = c->ny - depth;
            rk = c->ny + yi;
        }
        break;
    default:
        return;
    }
    out->send_off = (size_t)(sk + 2) * pitch + (size_t)(sj + 2);
    out->recv_off = (size_t)(rk + 2) * pitch + (size_t)(rj + 2);
    out->rows = (size_t)rows;
    out->cols = (size_t)cols;
}

/* ---- between chunks, in one phase ------------------------------------------ */

/* The columns of an x face's block (cols, first sent, first received), or
 * with no x face the chunk's own columns; the same for rows and a y face.
 * Each rule is clover_halo_strip's along its own axis; along a face in
 * `ghost` the lines sent are the ghost lines received. */
static void block_axis(unsigned lo_edge, unsigned hi_edge, unsigned edges, unsigned ghost, int n, int extra,
                       int depth, int *cnt, int *s, int *r)
{
    if (edges & lo_edge) {
        *cnt = depth;
        *r = -depth;
        *s = (ghost & lo_edge) ? *r : extra; /* the first line past the shared one */
    } else if (edges & hi_edge) {
        *cnt = depth;
        *r = n + extra;
        *s = (ghost & hi_edge) ? *r : n - depth;
    } else {
        *cnt = n + extra;    /* the chunk's own lines, the shared one included */
        *s = *r = 0;
    }
}

void clover_halo_block_ghost(const clover_chunk *c, int f, int depth, unsigned edges, unsigned ghost,
                             clover_strip *out)
{
    const int kind = field_kind(f);
    const int xi = (kind == KIND_NODE || kind == KIND_XFACE) ? 1 : 0;
    const int yi = (kind == KIND_NODE || kind == KIND_YFACE) ? 1 : 0;
    const size_t pitch = (size_t)c->nx + 5;
    const unsigned xe = edges & (CLOVER_LEFT | CLOVER_RIGHT), ye = edges & (CLOVER_BOTTOM | CLOVER_TOP);
    int cols, sj, rj, rows, sk, rk;

    out->send_off = out->recv_off = 0;
    out->rows = out->cols = 0;
    if (depth < 1 || depth > 2 || (!xe && !ye) || xe == (CLOVER_LEFT | CLOVER_RIGHT) ||
        ye == (CLOVER_BOTTOM | CLOVER_TOP) || (edges & ~(xe | ye)) || (ghost & ~edges) || ghost == edges)
        return;
    block_axis(CLOVER_LEFT, CLOVER_RIGHT, xe, ghost, c->nx, xi, depth, &cols, &sj, &rj);
    block_axis(CLOVER_BOTTOM, CLOVER_TOP, ye, ghost, c->ny, yi, depth, &rows, &sk, &rk);
    out->send_off = (size_t)(sk + 2) * pitch + (size_t)(sj + 2);
    out->recv_off = (size_t)(rk + 2) * pitch + (size_t)(rj + 2);
    out->rows = (size_t)rows;
    out->cols = (size_t)cols;
}

void clover_halo_block(const clover_chunk *c, int f, int depth, unsigned edges, clover_strip *out)
{
    clover_halo_block_ghost(c, f, depth, edges, 0, out);
}

/* ---- the other way round: received blocks, then the reflection --------- */

int clover_halo_recv_blocks(const clover_chunk *c, int f, int depth, clover_strip out[8], unsigned edges_out[8])
{
    static const unsigned dirs[8] = {CLOVER_LEFT, CLOVER_RIGHT, CLOVER_BOTTOM, CLOVER_TOP,
                                     CLOVER_LEFT | CLOVER_BOTTOM, CLOVER_RIGHT | CLOVER_BOTTOM,
                                     CLOVER_LEFT | CLOVER_TOP, CLOVER_RIGHT | CLOVER_TOP};
    int n = 0;
    for (int e = 0; e < 8; e++) {
        unsigned d = dirs[e];
        int ok = 1;
        if (d & CLOVER_LEFT)
            ok &= c->left >= 0;
        if (d & CLOVER_RIGHT)
            ok &= c->right >= 0;
        if (d & CLOVER_BOTTOM)
            ok &= c->bottom >= 0;
        if (d & CLOVER_TOP)
            ok &= c->top >= 0;
        if (!ok)
            continue;
        clover_halo_block(c, f, depth, d, &out[n]);
        if (out[n].rows == 0 || out[n].cols == 0)
            continue;
        if (edges_out)
            edges_out[n] = d;
        n++;
    }
    return n;
}

void clover_halo_unpack(const clover_view *v, const clover_view *stage, const clover_chunk *c, const int *fields,
                        int nfields, int depth)
{
    for (int i = 0; i < nfields; i++) {
        int f = fields[i];
        if (f < 0 || f >= CF_NFIELDS || !v->f[f] || !stage->f[f])
            continue;
        clover_strip b[8];
        int n = clover_halo_recv_blocks(c, f, depth, b, NULL);
        for (int k = 0; k < n; k++)
            for (size_t r = 0; r < b[k].rows; r++)
                memcpy(v->f[f] + b[k].recv_off + r * v->pitch, stage->f[f] + b[k].recv_off + r * v->pitch,
                       b[k].cols * sizeof(double));
    }
}
