/* CloverLeaf on Weft: one chunk's arithmetic (host C).
 *
 * Every kernel is a pure function of the view it is given: no globals, no
 * static state, so chunks may run concurrently on different threads.
 *
 * The arithmetic follows the CloverLeaf reference kernels (loop ranges,
 * operand order inside each expression, constants), translated to the
 * storage of clover.h: the reference's Fortran index x_min + i is j = i here.
 * Loops run over rows k with a contiguous inner loop over j on row pointers
 * that are offset so that p[j] is element (j, k) for j in [-2, nx + 2].
 *
 * Memory traffic (traffic.c counts it): intermediate values that the
 * reference keeps in whole work arrays live in registers or in a few
 * reused rows here (the advection kernels' rows: advec.c), so that a
 * kernel streams only the fields it really reads and writes.  viscosity
 * and calc_dt keep their scratch in small blocks on the stack.
 *
 * Vectorising: every hot loop is written so that gcc vectorises it (no
 * branches: where the reference branches, both outcomes are computed and
 * one is selected; no index that depends on data: upwind/donor values are
 * selected, not addressed).  Each element still goes through exactly the
 * reference's operations in the reference's order, so results do not
 * change by a bit; reductions (calc_dt's minimum) stay sequential.  On
 * x86-64 each kernel is compiled more than once and the version the CPU
 * runs is chosen at load time: viscosity, calc_dt, pdv and the advection
 * kernels (bound by division throughput, and with selects that gcc 12
 * vectorises only with AVX-512's masks) for AVX-512, AVX2 and SSE2; the
 * streaming kernels for AVX2 and SSE2 only (AVX-512's 64-byte loads,
 * never aligned on rows of odd pitch, each span two cache lines: slower
 * there, measured).  IEEE division, square root, add and multiply round
 * the same at every vector width, and kernels.c is built with
 * -ffp-contract=off, so no version fuses a multiply and add: every
 * version gives the same bits.  (The AVX2 and SSE2 versions run the loops
 * with selects element by element.)
 */
#include "kernels_int.h"

#include <math.h>
#include <stddef.h>


/* x[j] = sqrt(x[j]) for j in [0, n).  sqrt() in a loop keeps gcc from
 * vectorising it (sqrt may set errno: gcc's default -fmath-errno), so the
 * loops that need a square root store its argument in a row and take the
 * roots here, with the CPU's vector square root (correctly rounded, as
 * sqrt() is: the same values). */
#if CLOVER_X86_CLONES
__attribute__((target("avx512f"))) static void sqrt_row_avx512(double *x, int n)
{
    int j = 0;
    for (; j + 8 <= n; j += 8)
        _mm512_storeu_pd(x + j, _mm512_sqrt_pd(_mm512_loadu_pd(x + j)));
    for (; j < n; j++)
        x[j] = sqrt(x[j]);
}

__attribute__((target("avx"))) static void sqrt_row_avx(double *x, int n)
{
    int j = 0;
    for (; j + 4 <= n; j += 4)
        _mm256_storeu_pd(x + j, _mm256_sqrt_pd(_mm256_loadu_pd(x + j)));
    for (; j < n; j++)
        x[j] = sqrt(x[j]);
}

static void sqrt_row_sse2(double *x, int n)
{
    int j = 0;
    for (; j + 2 <= n; j += 2)
        _mm_storeu_pd(x + j, _mm_sqrt_pd(_mm_loadu_pd(x + j)));
    for (; j < n; j++)
        x[j] = sqrt(x[j]);
}

static void sqrt_row(double *x, int n)
{
    if (__builtin_cpu_supports("avx512f"))
        sqrt_row_avx512(x, n);
    else if (__builtin_cpu_supports("avx"))
        sqrt_row_avx(x, n);
    else
        sqrt_row_sse2(x, n);
}
#else
static void sqrt_row(double *x, int n)
{
    for (int j = 0; j < n; j++)
        x[j] = sqrt(x[j]);
}
#endif

/* Scratch blocks on the stack (viscosity, calc_dt): a row is done in
 * pieces of at most SBLK cells. */
enum { SBLK = 256 };

/* ---- names and geometry layout ---------------------------------------- */

const char *clover_field_name(int f)
{
    static const char *const names[CF_NFIELDS] = {
        "density0", "density1", "energy0", "energy1",
        "pressure", "viscosity", "soundspeed",
        "xvel0", "xvel1", "yvel0", "yvel1",
        "vol_flux_x", "vol_flux_y", "mass_flux_x", "mass_flux_y",
        "volume", "xarea", "yarea",
        "work_array1", "work_array2", "work_array3", "work_array4",
        "work_array5", "work_array6", "work_array7",
    };
    if (f < 0 || f >= CF_NFIELDS)
        return "unknown";
    return names[f];
}

size_t clover_geom_count(int nx, int ny)
{
    return 4 * (size_t)(nx + 5) + 4 * (size_t)(ny + 5);
}

size_t clover_geom_offset(int nx, int ny, int which)
{
    if (which < CG_CELLY)
        return (size_t)which * (size_t)(nx + 5);
    return 4 * (size_t)(nx + 5) + (size_t)(which - CG_CELLY) * (size_t)(ny + 5);
}

/* ---- initialise and generate ------------------------------------------ */

void clover_k_initialise(const clover_view *v, const clover_deck *d, const clover_chunk *c)
{
    const int nx = v->nx, ny = v->ny;
    const double dx = (d->xmax - d->xmin) / (double)d->x_cells;
    const double dy = (d->ymax - d->ymin) / (double)d->y_cells;
    double *restrict cellx = geo(v, CG_CELLX), *restrict celldx = geo(v, CG_CELLDX);
    double *restrict vertexx = geo(v, CG_VERTEXX), *restrict vertexdx = geo(v, CG_VERTEXDX);
    double *restrict celly = geo(v, CG_CELLY), *restrict celldy = geo(v, CG_CELLDY);
    double *restrict vertexy = geo(v, CG_VERTEXY), *restrict vertexdy = geo(v, CG_VERTEXDY);

    /* Vertex positions from the global index, so that a line two chunks
     * share has the same coordinate in both. */
    for (int j = -2; j <= nx + 2; j++) {
        double x = d->xmin + dx * (double)(c->x0 + j);
        double xr = d->xmin + dx * (double)(c->x0 + j + 1);
        vertexx[j] = x;
        vertexdx[j] = dx;
        cellx[j] = 0.5 * (x + xr);
        celldx[j] = dx;
    }
    for (int k = -2; k <= ny + 2; k++) {
        double y = d->ymin + dy * (double)(c->y0 + k);
        double yt = d->ymin + dy * (double)(c->y0 + k + 1);
        vertexy[k] = y;
        vertexdy[k] = dy;
        celly[k] = 0.5 * (y + yt);
        celldy[k] = dy;
    }
    const double vol = dx * dy;
    for (int k = -2; k <= ny + 2; k++) {
        double *restrict volume = row(v, CF_VOLUME, k);
        double *restrict xarea = row(v, CF_XAREA, k);
        double *restrict yarea = row(v, CF_YAREA, k);
        const double cdy = celldy[k];
        for (int j = -2; j <= nx + 2; j++) {
            volume[j] = vol;
            xarea[j] = cdy;
            yarea[j] = celldx[j];
        }
    }
}

static void set_node_block(const clover_view *v, int j, int k, double xv, double yv)
{
    for (int kt = k; kt <= k + 1; kt++) {
        double *xvel0 = row(v, CF_XVEL0, kt);
        double *yvel0 = row(v, CF_YVEL0, kt);
        xvel0[j] = xv;
        xvel0[j + 1] = xv;
        yvel0[j] = yv;
        yvel0[j + 1] = yv;
    }
}

void clover_k_generate(const clover_view *v, const clover_deck *d)
{
    const int nx = v->nx, ny = v->ny;
    const clover_state *s1 = &d->state[0];
    const double *cellx = geo(v, CG_CELLX), *celly = geo(v, CG_CELLY);
    const double *vertexx = geo(v, CG_VERTEXX), *vertexy = geo(v, CG_VERTEXY);

    for (int k = -2; k <= ny + 2; k++) {
        double *restrict density0 = row(v, CF_DENSITY0, k);
        double *restrict energy0 = row(v, CF_ENERGY0, k);
        double *restrict xvel0 = row(v, CF_XVEL0, k);
        double *restrict yvel0 = row(v, CF_YVEL0, k);
        for (int j = -2; j <= nx + 2; j++) {
            density0[j] = s1->density;
            energy0[j] = s1->energy;
            xvel0[j] = s1->xvel;
            yvel0[j] = s1->yvel;
        }
    }

    /* Later states overwrite earlier ones; each covers the cells (ghosts
     * included, up to the reference's last ghost cell nx + 1) that its
     * geometry selects, and the four nodes of each such cell. */
    for (int s = 1; s < d->nstates; s++) {
        const clover_state *st = &d->state[s];
        const double xc = st->xmin, yc = st->ymin;
        for (int k = -2; k <= ny + 1; k++) {
            double *density0 = row(v, CF_DENSITY0, k);
            double *energy0 = row(v, CF_ENERGY0, k);
            for (int j = -2; j <= nx + 1; j++) {
                int hit = 0;
                if (st->geometry == CLOVER_GEOM_RECTANGLE) {
                    hit = vertexx[j + 1] >= st->xmin && vertexx[j] < st->xmax &&
                          vertexy[k + 1] >= st->ymin && vertexy[k] < st->ymax;
                } else if (st->geometry == CLOVER_GEOM_CIRCLE) {
                    double r = sqrt((cellx[j] - xc) * (cellx[j] - xc) + (celly[k] - yc) * (celly[k] - yc));
                    hit = r <= st->radius;
                } else if (st->geometry == CLOVER_GEOM_POINT) {
                    hit = vertexx[j] == xc && vertexy[k] == yc;
                }
                if (hit) {
                    energy0[j] = st->energy;
                    density0[j] = st->density;
                    set_node_block(v, j, k, st->xvel, st->yvel);
                }
            }
        }
    }
}

/* ---- equation of state, viscosity, time step -------------------------- */

CLONES_256 void clover_k_ideal_gas(const clover_view *v, int predict)
{
    const int nx = v->nx, ny = v->ny;
    const int fd = predict ? CF_DENSITY1 : CF_DENSITY0;
    const int fe = predict ? CF_ENERGY1 : CF_ENERGY0;
    const double gm1 = 1.4 - 1.0;
    for (int k = 0; k < ny; k++) {
        const double *restrict density = row(v, fd, k);
        const double *restrict energy = row(v, fe, k);
        double *restrict pressure = row(v, CF_PRESSURE, k);
        double *restrict soundspeed = row(v, CF_SOUNDSPEED, k);
        IVDEP
        for (int j = 0; j < nx; j++) {
            const double dn = density[j];
            const double vv = 1.0 / dn;
            const double p = gm1 * dn * energy[j];
            const double pbe = gm1 * dn;
            const double pbv = -dn * p;
            const double ss2 = vv * vv * (p * pbe - pbv);
            pressure[j] = p;
            soundspeed[j] = ss2;
        }
        sqrt_row(soundspeed, nx); /* the row is still in cache */
    }
}

/* ---- sub-ranges (clover_split) ------------------------------------------ */

void clover_split_xy(int dx, int dy, int mx, int my, clover_range out[5])
{
    /* the interior, clipped so that it stays inside the domain (and is
     * empty, at the domain's middle, when the domain is too narrow) */
    int j0 = imin2(mx, dx), j1 = imax2(dx - mx, j0);
    int k0 = imin2(my, dy), k1 = imax2(dy - my, k0);
    out[0] = (clover_range){j0, j1, k0, k1};
    out[1] = (clover_range){0, dx, 0, k0};      /* bottom rows, whole width */
    out[2] = (clover_range){0, dx, k1, dy};     /* top rows, whole width */
    out[3] = (clover_range){0, j0, k0, k1};     /* left columns between them */
    out[4] = (clover_range){j1, dx, k0, k1};    /* right columns between them */
}

void clover_split(int dx, int dy, int margin, clover_range out[5]) { clover_split_xy(dx, dy, margin, margin, out); }

void clover_advec_split(int nx, int ny, int mom, int dir, clover_range out[5])
{
    /* advec_cell reads cells up to 2 away along its direction (the
     * upwind of a face's flux) and only its own row or column across it;
     * advec_mom reads velocities up to 2 away along it and, across it,
     * the cells on both sides of a node row: 1 */
    const int along = 2, across = mom ? 1 : 0;
    if (mom)
        clover_split_xy(nx + 1, ny + 1, dir == 1 ? along : across, dir == 1 ? across : along, out);
    else
        clover_split_xy(nx, ny, dir == 1 ? along : across, dir == 1 ? across : along, out);
}

void clover_k_viscosity(const clover_view *v)
{
    const clover_range all = {0, v->nx, 0, v->ny};
    clover_k_viscosity_range(v, &all);
}

/* Each cell's value depends on nothing but its own stencil (the blocks of
 * SBLK cells only stage values: the same operations, whatever the block's
 * start), so any range gives the whole kernel's values. */
CLONES void clover_k_viscosity_range(const clover_view *v, const clover_range *r)
{
    const clover_range c = clip(r, v->nx, v->ny);
    if (c.j1 <= c.j0)
        return;
    const double *restrict celldx = geo(v, CG_CELLDX);
    const double *restrict celldy = geo(v, CG_CELLDY);
    /* the part before the square root of a block of cells, then the rest */
    double lim_b[SBLK], div_b[SBLK], ax_b[SBLK], ay_b[SBLK], pgrad_b[SBLK];
    for (int k = c.k0; k < c.k1; k++) {
        const double *restrict density0 = row(v, CF_DENSITY0, k);
        const double *restrict pm = row(v, CF_PRESSURE, k - 1);
        const double *restrict p0 = row(v, CF_PRESSURE, k);
        const double *restrict pp = row(v, CF_PRESSURE, k + 1);
        const double *restrict xv0 = row(v, CF_XVEL0, k);
        const double *restrict xv1 = row(v, CF_XVEL0, k + 1);
        const double *restrict yv0 = row(v, CF_YVEL0, k);
        const double *restrict yv1 = row(v, CF_YVEL0, k + 1);
        double *restrict visc = row(v, CF_VISCOSITY, k);
        const double cdy = celldy[k];
        const double cdy2 = celldy[k] + celldy[k + 1];
        for (int j0 = c.j0; j0 < c.j1; j0 += SBLK) {
            const int n = c.j1 - j0 < SBLK ? c.j1 - j0 : SBLK;
            IVDEP
            for (int i = 0; i < n; i++) {
                const int j = j0 + i;
                const double cdx = celldx[j];
                const double ugrad = (xv0[j + 1] + xv1[j + 1]) - (xv0[j] + xv1[j]);
                const double vgrad = (yv1[j] + yv1[j + 1]) - (yv0[j] + yv0[j + 1]);
                const double div = cdx * ugrad + cdy * vgrad;
                const double strain2 = 0.5 * (xv1[j] + xv1[j + 1] - xv0[j] - xv0[j + 1]) / cdy
                                     + 0.5 * (yv0[j + 1] + yv1[j + 1] - yv0[j] - yv1[j]) / cdx;
                double pgradx = (p0[j + 1] - p0[j - 1]) / (cdx + celldx[j + 1]);
                double pgrady = (pp[j] - pm[j]) / cdy2;
                const double pgradx2 = pgradx * pgradx;
                const double pgrady2 = pgrady * pgrady;
                const double limiter = ((0.5 * ugrad / cdx) * pgradx2 + (0.5 * vgrad / cdy) * pgrady2
                                        + strain2 * pgradx * pgrady)
                                     / dmax2(pgradx2 + pgrady2, 1.0e-16);
                /* Only magnitudes matter below: the signs cancel in the
                 * absolute values the reference takes. */
                const double ax = dmax2(1.0e-16, fabs(pgradx));
                const double ay = dmax2(1.0e-16, fabs(pgrady));
                lim_b[i] = limiter;
                div_b[i] = div;
                ax_b[i] = ax;
                ay_b[i] = ay;
                pgrad_b[i] = ax * ax + ay * ay;
            }
            sqrt_row(pgrad_b, n);
            /* The viscous value is computed for every cell and kept where
             * the reference computes it (no branch, so it vectorises). */
            IVDEP
            for (int i = 0; i < n; i++) {
                const int j = j0 + i;
                const double cdx = celldx[j];
                const double limiter = lim_b[i];
                const double pgrad = pgrad_b[i];
                const double xgrad = fabs(cdx * pgrad / ax_b[i]);
                const double ygrad = fabs(cdy * pgrad / ay_b[i]);
                const double grad = dmin2(xgrad, ygrad);
                const double grad2 = grad * grad;
                const double q = 2.0 * density0[j] * grad2 * limiter * limiter;
                visc[j] = (limiter > 0.0) | (div_b[i] >= 0.0) ? 0.0 : q;
            }
        }
    }
}

CLONES clover_dt clover_k_calc_dt(const clover_view *v, const clover_deck *d, const clover_chunk *c)
{
    const int nx = v->nx, ny = v->ny;
    const double *restrict celldx = geo(v, CG_CELLDX);
    const double *restrict celldy = geo(v, CG_CELLDY);
    const double dtc_safe = d->dtc_safe, dtu_safe = d->dtu_safe;
    const double dtv_safe = d->dtv_safe, dtdiv_safe = d->dtdiv_safe;
    double m_b[SBLK]; /* cc, then its root, then each cell's dt */
    clover_dt out;
    out.dt = G_BIG;
    out.control = 1;
    out.j = c->x0 + 1;
    out.k = c->y0 + 1;
    for (int k = 0; k < ny; k++) {
        const double *restrict xarea = row(v, CF_XAREA, k);
        const double *restrict ya0 = row(v, CF_YAREA, k);
        const double *restrict ya1 = row(v, CF_YAREA, k + 1);
        const double *restrict volume = row(v, CF_VOLUME, k);
        const double *restrict density0 = row(v, CF_DENSITY0, k);
        const double *restrict visc = row(v, CF_VISCOSITY, k);
        const double *restrict ss = row(v, CF_SOUNDSPEED, k);
        const double *restrict xv0 = row(v, CF_XVEL0, k);
        const double *restrict xv1 = row(v, CF_XVEL0, k + 1);
        const double *restrict yv0 = row(v, CF_YVEL0, k);
        const double *restrict yv1 = row(v, CF_YVEL0, k + 1);
        const double dsy = celldy[k];
        /* Row minimum first (vectorised, the minimum taken in the
         * reference's order), then locate it only when it beats the best
         * so far. */
        double rmin = G_BIG;
        for (int j0 = 0; j0 < nx; j0 += SBLK) {
            const int n = nx - j0 < SBLK ? nx - j0 : SBLK;
            IVDEP
            for (int i = 0; i < n; i++) {
                const int j = j0 + i;
                double cc = ss[j] * ss[j];
                cc = cc + 2.0 * visc[j] / density0[j];
                m_b[i] = cc;
            }
            sqrt_row(m_b, n);
            IVDEP
            for (int i = 0; i < n; i++) {
                const int j = j0 + i;
                const double dsx = celldx[j];
                const double cc = dmax2(m_b[i], G_SMALL);
                const double dtct = dtc_safe * dmin2(dsx, dsy) / cc;
                double dv1 = (xv0[j] + xv1[j]) * xarea[j];
                double dv2 = (xv0[j + 1] + xv1[j + 1]) * xarea[j + 1];
                double div = dv2 - dv1;
                const double dtut = dtu_safe * 2.0 * volume[j]
                                  / dmax2(dmax2(fabs(dv1), fabs(dv2)), G_SMALL * volume[j]);
                dv1 = (yv0[j] + yv0[j + 1]) * ya0[j];
                dv2 = (yv1[j] + yv1[j + 1]) * ya1[j];
                div = div + dv2 - dv1;
                const double dtvt = dtv_safe * 2.0 * volume[j]
                                  / dmax2(dmax2(fabs(dv1), fabs(dv2)), G_SMALL * volume[j]);
                div = div / (2.0 * volume[j]);
                const double dtdiv = dtdiv_safe * (-1.0 / div); /* kept only where div < -G_SMALL */
                const double dtdivt = div < -G_SMALL ? dtdiv : G_BIG;
                m_b[i] = dmin2(dmin2(dtct, dtut), dmin2(dtvt, dtdivt));
            }
            for (int i = 0; i < n; i++)
                rmin = dmin2(rmin, m_b[i]);
        }
        if (!(rmin < out.dt))
            continue;
        /* Recompute this row to find the first cell holding the minimum
         * and which limit set it (sound, xvel, yvel, div, in that order). */
        for (int j = 0; j < nx; j++) {
            const double dsx = celldx[j];
            double cc = ss[j] * ss[j];
            cc = cc + 2.0 * visc[j] / density0[j];
            cc = dmax2(sqrt(cc), G_SMALL);
            const double dtct = dtc_safe * dmin2(dsx, dsy) / cc;
            double dv1 = (xv0[j] + xv1[j]) * xarea[j];
            double dv2 = (xv0[j + 1] + xv1[j + 1]) * xarea[j + 1];
            double div = dv2 - dv1;
            const double dtut = dtu_safe * 2.0 * volume[j]
                              / dmax2(dmax2(fabs(dv1), fabs(dv2)), G_SMALL * volume[j]);
            dv1 = (yv0[j] + yv0[j + 1]) * ya0[j];
            dv2 = (yv1[j] + yv1[j + 1]) * ya1[j];
            div = div + dv2 - dv1;
            const double dtvt = dtv_safe * 2.0 * volume[j]
                              / dmax2(dmax2(fabs(dv1), fabs(dv2)), G_SMALL * volume[j]);
            div = div / (2.0 * volume[j]);
            const double dtdivt = div < -G_SMALL ? dtdiv_safe * (-1.0 / div) : G_BIG;
            const double m = dmin2(dmin2(dtct, dtut), dmin2(dtvt, dtdivt));
            if (m == rmin) {
                out.dt = m;
                out.control = m == dtct ? 1 : m == dtut ? 2 : m == dtvt ? 3 : 4;
                out.j = c->x0 + j + 1;
                out.k = c->y0 + k + 1;
                break;
            }
        }
    }
    return out;
}

/* ---- Lagrangian step -------------------------------------------------- */

/* The reference's volume_change (WORK1) is never read back: not stored. */
CLONES int clover_k_pdv(const clover_view *v, int predict, double dt)
{
    const int nx = v->nx, ny = v->ny;
    int bad = 0;
    for (int k = 0; k < ny; k++) {
        const double *restrict xarea = row(v, CF_XAREA, k);
        const double *restrict ya0 = row(v, CF_YAREA, k);
        const double *restrict ya1 = row(v, CF_YAREA, k + 1);
        const double *restrict volume = row(v, CF_VOLUME, k);
        const double *restrict density0 = row(v, CF_DENSITY0, k);
        const double *restrict energy0 = row(v, CF_ENERGY0, k);
        const double *restrict pressure = row(v, CF_PRESSURE, k);
        const double *restrict visc = row(v, CF_VISCOSITY, k);
        const double *restrict xa0 = row(v, CF_XVEL0, k);
        const double *restrict xa1 = row(v, CF_XVEL0, k + 1);
        const double *restrict ya_0 = row(v, CF_YVEL0, k);
        const double *restrict ya_1 = row(v, CF_YVEL0, k + 1);
        double *restrict density1 = row(v, CF_DENSITY1, k);
        double *restrict energy1 = row(v, CF_ENERGY1, k);
        int rowbad = 0;
        if (predict) {
            /* The predictor uses the start-of-step velocities twice. */
            const double *restrict xb0 = xa0, *restrict xb1 = xa1;
            const double *restrict yb0 = ya_0, *restrict yb1 = ya_1;
            IVDEP
            for (int j = 0; j < nx; j++) {
                const double left = (xarea[j] * (xa0[j] + xa1[j] + xb0[j] + xb1[j])) * 0.25 * dt * 0.5;
                const double right = (xarea[j + 1] * (xa0[j + 1] + xa1[j + 1] + xb0[j + 1] + xb1[j + 1])) * 0.25 * dt * 0.5;
                const double bottom = (ya0[j] * (ya_0[j] + ya_0[j + 1] + yb0[j] + yb0[j + 1])) * 0.25 * dt * 0.5;
                const double top = (ya1[j] * (ya_1[j] + ya_1[j + 1] + yb1[j] + yb1[j + 1])) * 0.25 * dt * 0.5;
                const double total = right - left + top - bottom;
                const double vol = volume[j];
                const double vc = vol / (vol + total);
                const double minvol = dmin2(dmin2(vol + right - left + top - bottom, vol + right - left),
                                            vol + top - bottom);
                rowbad |= minvol <= 0.0;
                const double recip = 1.0 / vol;
                const double echg = (pressure[j] / density0[j] + visc[j] / density0[j]) * total * recip;
                energy1[j] = energy0[j] - echg;
                density1[j] = density0[j] * vc;
            }
        } else {
            const double *restrict xb0 = row(v, CF_XVEL1, k);
            const double *restrict xb1 = row(v, CF_XVEL1, k + 1);
            const double *restrict yb0 = row(v, CF_YVEL1, k);
            const double *restrict yb1 = row(v, CF_YVEL1, k + 1);
            IVDEP
            for (int j = 0; j < nx; j++) {
                const double left = (xarea[j] * (xa0[j] + xa1[j] + xb0[j] + xb1[j])) * 0.25 * dt;
                const double right = (xarea[j + 1] * (xa0[j + 1] + xa1[j + 1] + xb0[j + 1] + xb1[j + 1])) * 0.25 * dt;
                const double bottom = (ya0[j] * (ya_0[j] + ya_0[j + 1] + yb0[j] + yb0[j + 1])) * 0.25 * dt;
                const double top = (ya1[j] * (ya_1[j] + ya_1[j + 1] + yb1[j] + yb1[j + 1])) * 0.25 * dt;
                const double total = right - left + top - bottom;
                const double vol = volume[j];
                const double vc = vol / (vol + total);
                const double minvol = dmin2(dmin2(vol + right - left + top - bottom, vol + right - left),
                                            vol + top - bottom);
                rowbad |= minvol <= 0.0;
                const double recip = 1.0 / vol;
                const double echg = (pressure[j] / density0[j] + visc[j] / density0[j]) * total * recip;
                energy1[j] = energy0[j] - echg;
                density1[j] = density0[j] * vc;
            }
        }
        bad |= rowbad;
    }
    return bad ? 1 : 0;
}

CLONES_256 void clover_k_revert(const clover_view *v)
{
    const int nx = v->nx, ny = v->ny;
    for (int k = 0; k < ny; k++) {
        const double *restrict d0 = row(v, CF_DENSITY0, k);
        const double *restrict e0 = row(v, CF_ENERGY0, k);
        double *restrict d1 = row(v, CF_DENSITY1, k);
        double *restrict e1 = row(v, CF_ENERGY1, k);
        IVDEP
        for (int j = 0; j < nx; j++) {
            d1[j] = d0[j];
            e1[j] = e0[j];
        }
    }
}

void clover_k_accelerate(const clover_view *v, double dt)
{
    const clover_range all = {0, v->nx + 1, 0, v->ny + 1};
    clover_k_accelerate_range(v, dt, &all);
}

/* The reference's stepbymass (WORK1) is never read back: not stored.  The
 * domain is the nodes, j in [0, nx], k in [0, ny]. */
CLONES_256 void clover_k_accelerate_range(const clover_view *v, double dt, const clover_range *r)
{
    const clover_range c = clip(r, v->nx + 1, v->ny + 1);
    const double halfdt = 0.5 * dt;
    for (int k = c.k0; k < c.k1; k++) {
        const double *restrict dm = row(v, CF_DENSITY0, k - 1);
        const double *restrict d0 = row(v, CF_DENSITY0, k);
        const double *restrict vm = row(v, CF_VOLUME, k - 1);
        const double *restrict v0 = row(v, CF_VOLUME, k);
        const double *restrict xam = row(v, CF_XAREA, k - 1);
        const double *restrict xa0 = row(v, CF_XAREA, k);
        const double *restrict ya0 = row(v, CF_YAREA, k);
        const double *restrict pm = row(v, CF_PRESSURE, k - 1);
        const double *restrict p0 = row(v, CF_PRESSURE, k);
        const double *restrict qm = row(v, CF_VISCOSITY, k - 1);
        const double *restrict q0 = row(v, CF_VISCOSITY, k);
        const double *restrict xvel0 = row(v, CF_XVEL0, k);
        const double *restrict yvel0 = row(v, CF_YVEL0, k);
        double *restrict xvel1 = row(v, CF_XVEL1, k);
        double *restrict yvel1 = row(v, CF_YVEL1, k);
        IVDEP
        for (int j = c.j0; j < c.j1; j++) {
            const double nodal_mass = (dm[j - 1] * vm[j - 1] + dm[j] * vm[j] + d0[j] * v0[j]
                                       + d0[j - 1] * v0[j - 1]) * 0.25;
            const double s = halfdt / nodal_mass;
            double xv = xvel0[j] - s * (xa0[j] * (p0[j] - p0[j - 1]) + xam[j] * (pm[j] - pm[j - 1]));
            double yv = yvel0[j] - s * (ya0[j] * (p0[j] - pm[j]) + ya0[j - 1] * (p0[j - 1] - pm[j - 1]));
            xv = xv - s * (xa0[j] * (q0[j] - q0[j - 1]) + xam[j] * (qm[j] - qm[j - 1]));
            yv = yv - s * (ya0[j] * (q0[j] - qm[j]) + ya0[j - 1] * (q0[j - 1] - qm[j - 1]));
            xvel1[j] = xv;
            yvel1[j] = yv;
        }
    }
}

CLONES_256 void clover_k_flux_calc(const clover_view *v, double dt)
{
    const int nx = v->nx, ny = v->ny;
    const double qdt = 0.25 * dt;
    for (int k = 0; k <= ny; k++) {
        const double *restrict xarea = row(v, CF_XAREA, k);
        const double *restrict yarea = row(v, CF_YAREA, k);
        const double *restrict xa0 = row(v, CF_XVEL0, k);
        const double *restrict xa1 = row(v, CF_XVEL0, k + 1);
        const double *restrict xb0 = row(v, CF_XVEL1, k);
        const double *restrict xb1 = row(v, CF_XVEL1, k + 1);
        const double *restrict yv0 = row(v, CF_YVEL0, k);
        const double *restrict yv1 = row(v, CF_YVEL1, k);
        double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
        double *restrict vfy = row(v, CF_VOL_FLUX_Y, k);
        if (k < ny) {
            IVDEP
            for (int j = 0; j <= nx; j++)
                vfx[j] = qdt * xarea[j] * (xa0[j] + xa1[j] + xb0[j] + xb1[j]);
        }
        IVDEP
        for (int j = 0; j < nx; j++)
            vfy[j] = qdt * yarea[j] * (yv0[j] + yv0[j + 1] + yv1[j] + yv1[j + 1]);
    }
}


CLONES_256 void clover_k_reset_field(const clover_view *v)
{
    const int nx = v->nx, ny = v->ny;
    for (int k = 0; k <= ny; k++) {
        if (k < ny) {
            const double *restrict d1 = row(v, CF_DENSITY1, k);
            const double *restrict e1 = row(v, CF_ENERGY1, k);
            double *restrict d0 = row(v, CF_DENSITY0, k);
            double *restrict e0 = row(v, CF_ENERGY0, k);
            for (int j = 0; j < nx; j++) {
                d0[j] = d1[j];
                e0[j] = e1[j];
            }
        }
        const double *restrict x1 = row(v, CF_XVEL1, k);
        const double *restrict y1 = row(v, CF_YVEL1, k);
        double *restrict x0 = row(v, CF_XVEL0, k);
        double *restrict y0 = row(v, CF_YVEL0, k);
        for (int j = 0; j <= nx; j++) {
            x0[j] = x1[j];
            y0[j] = y1[j];
        }
    }
}

/* ---- summary ---------------------------------------------------------- */

/* Neumaier's compensated sum: acc[0] the running sum, acc[1] the error
 * it has dropped so far. */
static inline void csum_add(double acc[2], double x)
{
    double t = acc[0] + x;
    if (fabs(acc[0]) >= fabs(x))
        acc[1] += (acc[0] - t) + x;
    else
        acc[1] += (x - t) + acc[0];
    acc[0] = t;
}

/* The cells' terms are the reference's; they are added with compensation
 * (the reference adds them one after another), so that the sums are
 * correct to a rounding or two whatever the chunks: every decomposition
 * of the mesh gives the same summary to about 1e-15 relative, where a
 * plain running sum over 10^6 cells differs by 1e-11. */
void clover_k_field_summary(const clover_view *v, double sums[CS_N])
{
    const int nx = v->nx, ny = v->ny;
    double vol[2] = {0.0, 0.0}, mass[2] = {0.0, 0.0}, ie[2] = {0.0, 0.0}, ke[2] = {0.0, 0.0},
           press[2] = {0.0, 0.0};
    for (int k = 0; k < ny; k++) {
        const double *restrict volume = row(v, CF_VOLUME, k);
        const double *restrict density0 = row(v, CF_DENSITY0, k);
        const double *restrict energy0 = row(v, CF_ENERGY0, k);
        const double *restrict pressure = row(v, CF_PRESSURE, k);
        const double *restrict xa = row(v, CF_XVEL0, k);
        const double *restrict xb = row(v, CF_XVEL0, k + 1);
        const double *restrict ya = row(v, CF_YVEL0, k);
        const double *restrict yb = row(v, CF_YVEL0, k + 1);
        for (int j = 0; j < nx; j++) {
            double vsqrd = 0.0;
            vsqrd = vsqrd + 0.25 * (xa[j] * xa[j] + ya[j] * ya[j]);
            vsqrd = vsqrd + 0.25 * (xa[j + 1] * xa[j + 1] + ya[j + 1] * ya[j + 1]);
            vsqrd = vsqrd + 0.25 * (xb[j] * xb[j] + yb[j] * yb[j]);
            vsqrd = vsqrd + 0.25 * (xb[j + 1] * xb[j + 1] + yb[j + 1] * yb[j + 1]);
            const double cell_vol = volume[j];
            const double cell_mass = cell_vol * density0[j];
            csum_add(vol, cell_vol);
            csum_add(mass, cell_mass);
            csum_add(ie, cell_mass * energy0[j]);
            csum_add(ke, cell_mass * 0.5 * vsqrd);
            csum_add(press, cell_vol * pressure[j]);
        }
    }
    sums[CS_VOL] = vol[0] + vol[1];
    sums[CS_MASS] = mass[0] + mass[1];
    sums[CS_IE] = ie[0] + ie[1];
    sums[CS_KE] = ke[0] + ke[1];
    sums[CS_PRESS] = press[0] + press[1];
}
