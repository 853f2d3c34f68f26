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
 * Work arrays keep the reference's roles:
 *   PdV:         WORK1 volume_change
 *   advec_cell:  WORK1 pre_vol, WORK2 post_vol, WORK3 pre_mass,
 *                WORK4 post_mass, WORK5 advec_vol, WORK6 post_ener,
 *                WORK7 ener_flux
 *   advec_mom:   WORK7 post_vol; along y WORK1 node_flux, WORK2
 *                node_mass_post, WORK3 node_mass_pre, WORK5 mom_flux; along
 *                x those four are row-sized scratch in rows -2 .. 1 of WORK4
 *                (advec_vel in the reference).  advec_vel and pre_vol (WORK6)
 *                are never read back in the reference, so they are not
 *                stored.
 *   accelerate:  WORK1 stepbymass
 *   calc_dt:     no array (the reference's dt_min array is not needed).
 */
#include "clover.h"

#include <math.h>
#include <stddef.h>

/* The reference declares these REAL(KIND=8) but gives them single
 * precision literals, so their values are the float's. */
#define G_SMALL ((double)1.0e-16f)
#define G_BIG ((double)1.0e+21f)

/* ---- small helpers ---------------------------------------------------- */

/* Row k of field f, offset so that the result indexed [j] is (j, k). */
static inline double *row(const clover_view *v, int f, int k)
{
    return v->f[f] + (size_t)(k + 2) * v->pitch + 2;
}

/* Geometry array `which`, offset so that [j] (or [k]) is index j (k). */
static inline double *geo(const clover_view *v, int which)
{
    return v->geom + clover_geom_offset(v->nx, v->ny, which) + 2;
}

static inline double dmin2(double a, double b) { return a < b ? a : b; }
static inline double dmax2(double a, double b) { return a > b ? a : b; }

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

void clover_k_ideal_gas(const clover_view *v, int predict)
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
        for (int j = 0; j < nx; j++) {
            const double dn = density[j];
            const double vv = 1.0 / dn;
            const double p = gm1 * dn * energy[j];
            const double pbe = gm1 * dn;
            const double pbv = -dn * p;
            const double ss2 = vv * vv * (p * pbe - pbv);
            pressure[j] = p;
            soundspeed[j] = sqrt(ss2);
        }
    }
}

void clover_k_viscosity(const clover_view *v)
{
    const int nx = v->nx, ny = v->ny;
    const double *restrict celldx = geo(v, CG_CELLDX);
    const double *restrict celldy = geo(v, CG_CELLDY);
    for (int k = 0; k < ny; k++) {
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
        for (int j = 0; j < nx; j++) {
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
            if (limiter > 0.0 || div >= 0.0) {
                visc[j] = 0.0;
            } else {
                /* Only magnitudes matter below: the signs cancel in the
                 * absolute values the reference takes. */
                const double ax = dmax2(1.0e-16, fabs(pgradx));
                const double ay = dmax2(1.0e-16, fabs(pgrady));
                const double pgrad = sqrt(ax * ax + ay * ay);
                const double xgrad = fabs(cdx * pgrad / ax);
                const double ygrad = fabs(cdy * pgrad / ay);
                const double grad = dmin2(xgrad, ygrad);
                const double grad2 = grad * grad;
                visc[j] = 2.0 * density0[j] * grad2 * limiter * limiter;
            }
        }
    }
}

clover_dt clover_k_calc_dt(const clover_view *v, const clover_deck *d, const clover_chunk *c)
{
    const int nx = v->nx, ny = v->ny;
    const double *restrict celldx = geo(v, CG_CELLDX);
    const double *restrict celldy = geo(v, CG_CELLDY);
    const double dtc_safe = d->dtc_safe, dtu_safe = d->dtu_safe;
    const double dtv_safe = d->dtv_safe, dtdiv_safe = d->dtdiv_safe;
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
        /* Row minimum first (vectorisable), then locate it only when it
         * beats the best so far. */
        double rmin = G_BIG;
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
            rmin = dmin2(rmin, m);
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

int clover_k_pdv(const clover_view *v, int predict, double dt)
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
        /* The predictor uses the start-of-step velocities twice. */
        const double *restrict xb0 = predict ? xa0 : row(v, CF_XVEL1, k);
        const double *restrict xb1 = predict ? xa1 : row(v, CF_XVEL1, k + 1);
        const double *restrict yb0 = predict ? ya_0 : row(v, CF_YVEL1, k);
        const double *restrict yb1 = predict ? ya_1 : row(v, CF_YVEL1, k + 1);
        double *restrict density1 = row(v, CF_DENSITY1, k);
        double *restrict energy1 = row(v, CF_ENERGY1, k);
        double *restrict volchg = row(v, CF_WORK1, k);
        int rowbad = 0;
        if (predict) {
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
                volchg[j] = vc;
                energy1[j] = energy0[j] - echg;
                density1[j] = density0[j] * vc;
            }
        } else {
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
                volchg[j] = vc;
                energy1[j] = energy0[j] - echg;
                density1[j] = density0[j] * vc;
            }
        }
        bad |= rowbad;
    }
    return bad ? 1 : 0;
}

void clover_k_revert(const clover_view *v)
{
    const int nx = v->nx, ny = v->ny;
    for (int k = 0; k < ny; k++) {
        const double *restrict d0 = row(v, CF_DENSITY0, k);
        const double *restrict e0 = row(v, CF_ENERGY0, k);
        double *restrict d1 = row(v, CF_DENSITY1, k);
        double *restrict e1 = row(v, CF_ENERGY1, k);
        for (int j = 0; j < nx; j++) {
            d1[j] = d0[j];
            e1[j] = e0[j];
        }
    }
}

void clover_k_accelerate(const clover_view *v, double dt)
{
    const int nx = v->nx, ny = v->ny;
    const double halfdt = 0.5 * dt;
    for (int k = 0; k <= ny; k++) {
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
        double *restrict sbm = row(v, CF_WORK1, k);
        for (int j = 0; j <= nx; j++) {
            const double nodal_mass = (dm[j - 1] * vm[j - 1] + dm[j] * vm[j] + d0[j] * v0[j]
                                       + d0[j - 1] * v0[j - 1]) * 0.25;
            const double s = halfdt / nodal_mass;
            double xv = xvel0[j] - s * (xa0[j] * (p0[j] - p0[j - 1]) + xam[j] * (pm[j] - pm[j - 1]));
            double yv = yvel0[j] - s * (ya0[j] * (p0[j] - pm[j]) + ya0[j - 1] * (p0[j - 1] - pm[j - 1]));
            xv = xv - s * (xa0[j] * (q0[j] - q0[j - 1]) + xam[j] * (qm[j] - qm[j - 1]));
            yv = yv - s * (ya0[j] * (q0[j] - qm[j]) + ya0[j - 1] * (q0[j - 1] - qm[j - 1]));
            sbm[j] = s;
            xvel1[j] = xv;
            yvel1[j] = yv;
        }
    }
}

void clover_k_flux_calc(const clover_view *v, double dt)
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
            for (int j = 0; j <= nx; j++)
                vfx[j] = qdt * xarea[j] * (xa0[j] + xa1[j] + xb0[j] + xb1[j]);
        }
        for (int j = 0; j < nx; j++)
            vfy[j] = qdt * yarea[j] * (yv0[j] + yv0[j + 1] + yv1[j] + yv1[j + 1]);
    }
}

/* ---- advection -------------------------------------------------------- */

void clover_k_advec_cell(const clover_view *v, int dir, int sweep)
{
    const int nx = v->nx, ny = v->ny;
    const double one_by_six = 1.0 / 6.0;

    if (dir == 1) {
        const double *restrict vertexdx = geo(v, CG_VERTEXDX);
        for (int k = -2; k <= ny + 1; k++) {
            const double *restrict volume = row(v, CF_VOLUME, k);
            const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
            const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
            const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
            double *restrict pre_vol = row(v, CF_WORK1, k);
            double *restrict post_vol = row(v, CF_WORK2, k);
            if (sweep == 1) {
                for (int j = -2; j <= nx + 1; j++) {
                    const double pv = volume[j] + (vfx[j + 1] - vfx[j] + vfy1[j] - vfy0[j]);
                    pre_vol[j] = pv;
                    post_vol[j] = pv - (vfx[j + 1] - vfx[j]);
                }
            } else {
                for (int j = -2; j <= nx + 1; j++) {
                    pre_vol[j] = volume[j] + vfx[j + 1] - vfx[j];
                    post_vol[j] = volume[j];
                }
            }
        }
        for (int k = 0; k < ny; k++) {
            const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
            const double *restrict pre_vol = row(v, CF_WORK1, k);
            double *restrict density1 = row(v, CF_DENSITY1, k);
            double *restrict energy1 = row(v, CF_ENERGY1, k);
            double *restrict mfx = row(v, CF_MASS_FLUX_X, k);
            double *restrict ener_flux = row(v, CF_WORK7, k);
            double *restrict pre_mass = row(v, CF_WORK3, k);
            double *restrict post_mass = row(v, CF_WORK4, k);
            double *restrict advec_vol = row(v, CF_WORK5, k);
            double *restrict post_ener = row(v, CF_WORK6, k);
            for (int j = 0; j <= nx + 1; j++) {
                int upwind, donor, downwind, dif;
                if (vfx[j] > 0.0) {
                    upwind = j - 2;
                    donor = j - 1;
                    downwind = j;
                    dif = donor;
                } else {
                    upwind = j + 1 < nx + 1 ? j + 1 : nx + 1;
                    donor = j;
                    downwind = j - 1;
                    dif = upwind;
                }
                const double sigmat = fabs(vfx[j]) / pre_vol[donor];
                const double sigma3 = (1.0 + sigmat) * (vertexdx[j] / vertexdx[dif]);
                const double sigma4 = 2.0 - sigmat;
                double diffuw = density1[donor] - density1[upwind];
                double diffdw = density1[downwind] - density1[donor];
                double limiter = 0.0;
                if (diffuw * diffdw > 0.0) {
                    const double wind = diffdw <= 0.0 ? -1.0 : 1.0;
                    limiter = (1.0 - sigmat) * wind
                            * dmin2(dmin2(fabs(diffuw), fabs(diffdw)),
                                    one_by_six * (sigma3 * fabs(diffuw) + sigma4 * fabs(diffdw)));
                }
                const double mf = vfx[j] * (density1[donor] + limiter);
                mfx[j] = mf;
                const double sigmam = fabs(mf) / (density1[donor] * pre_vol[donor]);
                diffuw = energy1[donor] - energy1[upwind];
                diffdw = energy1[downwind] - energy1[donor];
                limiter = 0.0;
                if (diffuw * diffdw > 0.0) {
                    const double wind = diffdw <= 0.0 ? -1.0 : 1.0;
                    limiter = (1.0 - sigmam) * wind
                            * dmin2(dmin2(fabs(diffuw), fabs(diffdw)),
                                    one_by_six * (sigma3 * fabs(diffuw) + sigma4 * fabs(diffdw)));
                }
                ener_flux[j] = mf * (energy1[donor] + limiter);
            }
            /* The fluxes of this row read only this row's old values, so
             * the row can be updated at once. */
            for (int j = 0; j < nx; j++) {
                const double pm = density1[j] * pre_vol[j];
                const double qm = pm + mfx[j] - mfx[j + 1];
                const double pe = (energy1[j] * pm + ener_flux[j] - ener_flux[j + 1]) / qm;
                const double av = pre_vol[j] + vfx[j] - vfx[j + 1];
                pre_mass[j] = pm;
                post_mass[j] = qm;
                post_ener[j] = pe;
                advec_vol[j] = av;
                density1[j] = qm / av;
                energy1[j] = pe;
            }
        }
    } else {
        const double *restrict vertexdy = geo(v, CG_VERTEXDY);
        for (int k = -2; k <= ny + 1; k++) {
            const double *restrict volume = row(v, CF_VOLUME, k);
            const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
            const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
            const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
            double *restrict pre_vol = row(v, CF_WORK1, k);
            double *restrict post_vol = row(v, CF_WORK2, k);
            if (sweep == 1) {
                for (int j = -2; j <= nx + 1; j++) {
                    const double pv = volume[j] + (vfy1[j] - vfy0[j] + vfx[j + 1] - vfx[j]);
                    pre_vol[j] = pv;
                    post_vol[j] = pv - (vfy1[j] - vfy0[j]);
                }
            } else {
                for (int j = -2; j <= nx + 1; j++) {
                    pre_vol[j] = volume[j] + vfy1[j] - vfy0[j];
                    post_vol[j] = volume[j];
                }
            }
        }
        /* Fluxes on faces k = 0 .. ny + 1; the flux at face k reads cell
         * rows k - 2 .. k + 1, so row k is updated once the flux of face
         * k + 2 exists (a lag of two rows keeps old values for readers). */
        for (int kk = 0; kk <= ny + 1; kk++) {
            const int k = kk;
            const double *restrict vfy = row(v, CF_VOL_FLUX_Y, k);
            double *restrict mfy = row(v, CF_MASS_FLUX_Y, k);
            double *restrict ener_flux = row(v, CF_WORK7, k);
            {
                const int up_pos = k - 2, dn_pos = k - 1;
                const int up_neg = k + 1 < ny + 1 ? k + 1 : ny + 1;
                const double *restrict d_upp = row(v, CF_DENSITY1, up_pos);
                const double *restrict d_dop = row(v, CF_DENSITY1, dn_pos);
                const double *restrict d_k = row(v, CF_DENSITY1, k);
                const double *restrict d_upn = row(v, CF_DENSITY1, up_neg);
                const double *restrict e_upp = row(v, CF_ENERGY1, up_pos);
                const double *restrict e_dop = row(v, CF_ENERGY1, dn_pos);
                const double *restrict e_k = row(v, CF_ENERGY1, k);
                const double *restrict e_upn = row(v, CF_ENERGY1, up_neg);
                const double *restrict pv_dop = row(v, CF_WORK1, dn_pos);
                const double *restrict pv_k = row(v, CF_WORK1, k);
                const double ratio_pos = vertexdy[k] / vertexdy[dn_pos];
                const double ratio_neg = vertexdy[k] / vertexdy[up_neg];
                for (int j = 0; j < nx; j++) {
                    double dup, ddo, ddn, eup, edo, edn, pvd, ratio;
                    if (vfy[j] > 0.0) {
                        dup = d_upp[j]; ddo = d_dop[j]; ddn = d_k[j];
                        eup = e_upp[j]; edo = e_dop[j]; edn = e_k[j];
                        pvd = pv_dop[j]; ratio = ratio_pos;
                    } else {
                        dup = d_upn[j]; ddo = d_k[j]; ddn = d_dop[j];
                        eup = e_upn[j]; edo = e_k[j]; edn = e_dop[j];
                        pvd = pv_k[j]; ratio = ratio_neg;
                    }
                    const double sigmat = fabs(vfy[j]) / pvd;
                    const double sigma3 = (1.0 + sigmat) * ratio;
                    const double sigma4 = 2.0 - sigmat;
                    double diffuw = ddo - dup;
                    double diffdw = ddn - ddo;
                    double limiter = 0.0;
                    if (diffuw * diffdw > 0.0) {
                        const double wind = diffdw <= 0.0 ? -1.0 : 1.0;
                        limiter = (1.0 - sigmat) * wind
                                * dmin2(dmin2(fabs(diffuw), fabs(diffdw)),
                                        one_by_six * (sigma3 * fabs(diffuw) + sigma4 * fabs(diffdw)));
                    }
                    const double mf = vfy[j] * (ddo + limiter);
                    mfy[j] = mf;
                    const double sigmam = fabs(mf) / (ddo * pvd);
                    diffuw = edo - eup;
                    diffdw = edn - edo;
                    limiter = 0.0;
                    if (diffuw * diffdw > 0.0) {
                        const double wind = diffdw <= 0.0 ? -1.0 : 1.0;
                        limiter = (1.0 - sigmam) * wind
                                * dmin2(dmin2(fabs(diffuw), fabs(diffdw)),
                                        one_by_six * (sigma3 * fabs(diffuw) + sigma4 * fabs(diffdw)));
                    }
                    ener_flux[j] = mf * (edo + limiter);
                }
            }
            const int ku = kk - 2; /* the row that no later flux reads */
            if (ku < 0)
                continue;
            const double *restrict vf0 = row(v, CF_VOL_FLUX_Y, ku);
            const double *restrict vf1 = row(v, CF_VOL_FLUX_Y, ku + 1);
            const double *restrict mf0 = row(v, CF_MASS_FLUX_Y, ku);
            const double *restrict mf1 = row(v, CF_MASS_FLUX_Y, ku + 1);
            const double *restrict ef0 = row(v, CF_WORK7, ku);
            const double *restrict ef1 = row(v, CF_WORK7, ku + 1);
            const double *restrict pre_vol = row(v, CF_WORK1, ku);
            double *restrict density1 = row(v, CF_DENSITY1, ku);
            double *restrict energy1 = row(v, CF_ENERGY1, ku);
            double *restrict pre_mass = row(v, CF_WORK3, ku);
            double *restrict post_mass = row(v, CF_WORK4, ku);
            double *restrict advec_vol = row(v, CF_WORK5, ku);
            double *restrict post_ener = row(v, CF_WORK6, ku);
            for (int j = 0; j < nx; j++) {
                const double pm = density1[j] * pre_vol[j];
                const double qm = pm + mf0[j] - mf1[j];
                const double pe = (energy1[j] * pm + ef0[j] - ef1[j]) / qm;
                const double av = pre_vol[j] + vf0[j] - vf1[j];
                pre_mass[j] = pm;
                post_mass[j] = qm;
                post_ener[j] = pe;
                advec_vol[j] = av;
                density1[j] = qm / av;
                energy1[j] = pe;
            }
        }
    }
}

void clover_k_advec_mom(const clover_view *v, int vel, int dir, int sweep)
{
    const int nx = v->nx, ny = v->ny;
    const int mom_sweep = dir + 2 * (sweep - 1);

    /* post_vol (WORK7) over the whole cell range. */
    for (int k = -2; k <= ny + 1; k++) {
        const double *restrict volume = row(v, CF_VOLUME, k);
        const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
        const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
        const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
        double *restrict post_vol = row(v, CF_WORK7, k);
        if (mom_sweep == 1) {
            for (int j = -2; j <= nx + 1; j++)
                post_vol[j] = volume[j] + vfy1[j] - vfy0[j];
        } else if (mom_sweep == 2) {
            for (int j = -2; j <= nx + 1; j++)
                post_vol[j] = volume[j] + vfx[j + 1] - vfx[j];
        } else {
            for (int j = -2; j <= nx + 1; j++)
                post_vol[j] = volume[j];
        }
    }

    if (dir == 1) {
        const double *restrict celldx = geo(v, CG_CELLDX);
        /* Everything in an x sweep stays within node row k (cell rows
         * k - 1 and k), so each row is finished before the next.  The
         * node quantities of a row are never needed again, so they live in
         * four rows of WORK4 (the reference's advec_vel, unused here) that
         * every row reuses and that stay in cache, instead of whole
         * arrays written back to memory. */
        double *restrict node_flux = row(v, CF_WORK4, -2);
        double *restrict nm_post = row(v, CF_WORK4, -1);
        double *restrict nm_pre = row(v, CF_WORK4, 0);
        double *restrict mom_flux = row(v, CF_WORK4, 1);
        for (int k = 0; k <= ny; k++) {
            const double *restrict mfm = row(v, CF_MASS_FLUX_X, k - 1);
            const double *restrict mf0 = row(v, CF_MASS_FLUX_X, k);
            const double *restrict dm = row(v, CF_DENSITY1, k - 1);
            const double *restrict d0 = row(v, CF_DENSITY1, k);
            const double *restrict pvm = row(v, CF_WORK7, k - 1);
            const double *restrict pv0 = row(v, CF_WORK7, k);
            double *restrict vel1 = row(v, vel, k);
            for (int j = -2; j <= nx + 1; j++)
                node_flux[j] = 0.25 * (mfm[j] + mf0[j] + mfm[j + 1] + mf0[j + 1]);
            for (int j = -1; j <= nx + 1; j++) {
                const double post = 0.25 * (dm[j] * pvm[j] + d0[j] * pv0[j]
                                            + dm[j - 1] * pvm[j - 1] + d0[j - 1] * pv0[j - 1]);
                nm_post[j] = post;
                nm_pre[j] = post - node_flux[j - 1] + node_flux[j];
            }
            for (int j = -1; j <= nx; j++) {
                const double nf = node_flux[j];
                int upwind, donor, downwind, dif;
                if (nf < 0.0) {
                    upwind = j + 2;
                    donor = j + 1;
                    downwind = j;
                    dif = donor;
                } else {
                    upwind = j - 1;
                    donor = j;
                    downwind = j + 1;
                    dif = upwind;
                }
                const double sigma = fabs(nf) / nm_pre[donor];
                const double width = celldx[j];
                const double vdiffuw = vel1[donor] - vel1[upwind];
                const double vdiffdw = vel1[downwind] - vel1[donor];
                double limiter = 0.0;
                if (vdiffuw * vdiffdw > 0.0) {
                    const double auw = fabs(vdiffuw), adw = fabs(vdiffdw);
                    const double wind = vdiffdw <= 0.0 ? -1.0 : 1.0;
                    limiter = wind * dmin2(dmin2(width * ((2.0 - sigma) * adw / width
                                                          + (1.0 + sigma) * auw / celldx[dif]) / 6.0,
                                                 auw),
                                           adw);
                }
                const double advec_vel = vel1[donor] + (1.0 - sigma) * limiter;
                mom_flux[j] = advec_vel * nf;
            }
            for (int j = 0; j <= nx; j++)
                vel1[j] = (vel1[j] * nm_pre[j] + mom_flux[j - 1] - mom_flux[j]) / nm_post[j];
        }
    } else {
        const double *restrict celldy = geo(v, CG_CELLDY);
        for (int k = -2; k <= ny + 1; k++) {
            const double *restrict mf0 = row(v, CF_MASS_FLUX_Y, k);
            const double *restrict mf1 = row(v, CF_MASS_FLUX_Y, k + 1);
            double *restrict node_flux = row(v, CF_WORK1, k);
            for (int j = 0; j <= nx; j++)
                node_flux[j] = 0.25 * (mf0[j - 1] + mf0[j] + mf1[j - 1] + mf1[j]);
        }
        for (int k = -1; k <= ny + 1; k++) {
            const double *restrict dm = row(v, CF_DENSITY1, k - 1);
            const double *restrict d0 = row(v, CF_DENSITY1, k);
            const double *restrict pvm = row(v, CF_WORK7, k - 1);
            const double *restrict pv0 = row(v, CF_WORK7, k);
            const double *restrict nfm = row(v, CF_WORK1, k - 1);
            const double *restrict nf0 = row(v, CF_WORK1, k);
            double *restrict nm_post = row(v, CF_WORK2, k);
            double *restrict nm_pre = row(v, CF_WORK3, k);
            for (int j = 0; j <= nx; j++) {
                const double post = 0.25 * (dm[j] * pvm[j] + d0[j] * pv0[j]
                                            + dm[j - 1] * pvm[j - 1] + d0[j - 1] * pv0[j - 1]);
                nm_post[j] = post;
                nm_pre[j] = post - nfm[j] + nf0[j];
            }
        }
        /* The momentum flux at node row k reads velocity rows k - 1 .. k + 2;
         * velocity row k - 1 is updated as soon as row k's flux exists. */
        for (int k = -1; k <= ny + 1; k++) {
            if (k <= ny) {
                const double *restrict nf = row(v, CF_WORK1, k);
                const double *restrict pre_k = row(v, CF_WORK3, k);
                const double *restrict pre_k1 = row(v, CF_WORK3, k + 1);
                const double *restrict vm = row(v, vel, k - 1);
                const double *restrict v0 = row(v, vel, k);
                const double *restrict vp = row(v, vel, k + 1);
                const double *restrict vpp = row(v, vel, k + 2);
                double *restrict mom_flux = row(v, CF_WORK5, k);
                const double width = celldy[k];
                const double cd_neg = celldy[k + 1]; /* dif = donor = k + 1 */
                const double cd_pos = celldy[k - 1]; /* dif = upwind = k - 1 */
                for (int j = 0; j <= nx; j++) {
                    double vup, vdo, vdn, pre, cdif;
                    if (nf[j] < 0.0) {
                        vup = vpp[j]; vdo = vp[j]; vdn = v0[j];
                        pre = pre_k1[j]; cdif = cd_neg;
                    } else {
                        vup = vm[j]; vdo = v0[j]; vdn = vp[j];
                        pre = pre_k[j]; cdif = cd_pos;
                    }
                    const double sigma = fabs(nf[j]) / pre;
                    const double vdiffuw = vdo - vup;
                    const double vdiffdw = vdn - vdo;
                    double limiter = 0.0;
                    if (vdiffuw * vdiffdw > 0.0) {
                        const double auw = fabs(vdiffuw), adw = fabs(vdiffdw);
                        const double wind = vdiffdw <= 0.0 ? -1.0 : 1.0;
                        limiter = wind * dmin2(dmin2(width * ((2.0 - sigma) * adw / width
                                                              + (1.0 + sigma) * auw / cdif) / 6.0,
                                                     auw),
                                               adw);
                    }
                    const double advec_vel = vdo + (1.0 - sigma) * limiter;
                    mom_flux[j] = advec_vel * nf[j];
                }
            }
            const int ku = k - 1;
            if (ku < 0)
                continue;
            const double *restrict mfm = row(v, CF_WORK5, ku - 1);
            const double *restrict mf0 = row(v, CF_WORK5, ku);
            const double *restrict pre = row(v, CF_WORK3, ku);
            const double *restrict post = row(v, CF_WORK2, ku);
            double *restrict vel1 = row(v, vel, ku);
            for (int j = 0; j <= nx; j++)
                vel1[j] = (vel1[j] * pre[j] + mfm[j] - mf0[j]) / post[j];
        }
    }
}

void clover_k_reset_field(const clover_view *v)
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
