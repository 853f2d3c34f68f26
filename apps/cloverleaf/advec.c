/* CloverLeaf on Weft: the advection kernels of one chunk (host C), whole
 * and over sub-ranges.  kernels.c's rules hold here (the reference's
 * arithmetic in its order, loops that vectorise, one set of bits at every
 * vector width, built with -ffp-contract=off).
 *
 * Memory traffic (traffic.c counts it): intermediate values that the
 * reference keeps in whole work arrays live in registers or in a few
 * reused rows here, so that a kernel streams only the fields it really
 * reads and writes.  Values that the reference stores but never reads
 * back (volume_change, stepbymass, post_vol, pre_mass, post_mass,
 * advec_vol, post_ener, advec_vel) are not stored at all.  Scratch rows:
 *   advec_cell along x: WORK1 row -2 pre_vol of the row, WORK7 row -2
 *                ener_flux of the row, WORK2 rows -2 and -1 the ratios of
 *                vertexdx (per call);
 *   advec_cell along y: WORK1 rows -2 .. 0 pre_vol and WORK7 rows -2 .. 0
 *                ener_flux, each a ring of three cell rows;
 *   advec_mom along x: WORK4 rows -2 .. 1 node_flux, node_mass_post,
 *                node_mass_pre, mom_flux of the node row, WORK7 rows -2
 *                and -1 a ring of two post_vol rows;
 *   advec_mom along y: rings in rows -2 .. 0: WORK7 post_vol and WORK1
 *                node_flux (two rows each), WORK2 node_mass_post, WORK3
 *                node_mass_pre and WORK5 mom_flux (three rows each);
 *   along either direction, on sweeps where post_vol is the volume, the
 *                volume's own rows are read instead.
 * Every other row of the work arrays is left as it was: no kernel leaves
 * anything in a work array that another kernel reads.
 */
#include "kernels_int.h"

#include <math.h>
#include <stddef.h>

/* ---- advection -------------------------------------------------------- */

/* The reference's van Leer limiter of advec_cell for one quantity, with
 * both outcomes computed and one kept (branch-free: vectorises). */
static inline double cell_limiter(double sigma, double sigma3, double sigma4, double diffuw, double diffdw,
                                  double one_by_six)
{
    const double wind = diffdw <= 0.0 ? -1.0 : 1.0;
    const double limiter = (1.0 - sigma) * wind
                         * dmin2(dmin2(fabs(diffuw), fabs(diffdw)),
                                 one_by_six * (sigma3 * fabs(diffuw) + sigma4 * fabs(diffdw)));
    return diffuw * diffdw > 0.0 ? limiter : 0.0;
}

/* The mass flux through one face (returned) and its energy flux (*ef),
 * from the flux of volume vf, the density and energy of the upwind, donor
 * and downwind cells, the donor's pre_vol and the ratio of the face's
 * vertex width to the width at `dif`. */
static inline double cell_flux(double vf, double dup, double ddo, double ddn, double eup, double edo, double edn,
                               double pvd, double ratio, double one_by_six, double *ef)
{
    const double sigmat = fabs(vf) / pvd;
    const double sigma3 = (1.0 + sigmat) * ratio;
    const double sigma4 = 2.0 - sigmat;
    const double mf = vf * (ddo + cell_limiter(sigmat, sigma3, sigma4, ddo - dup, ddn - ddo, one_by_six));
    const double sigmam = fabs(mf) / (ddo * pvd);
    *ef = mf * (edo + cell_limiter(sigmam, sigma3, sigma4, edo - eup, edn - edo, one_by_six));
    return mf;
}

/* The update of cells j in [j0, j1) of one row from the old density1 and
 * energy1 (din, ein), its pre_vol, the mass, energy and volume fluxes on
 * the cells' two faces (m0, e0, f0 the lower/left face, m1, e1, f1 the
 * upper/right one, each indexed [j]), into dout and eout: din and ein
 * themselves in place, other arrays out of place.  The reference's
 * pre_mass, post_mass, post_ener and advec_vol are never read back: they
 * stay in registers. */
#define CELL_UPDATE(j0, j1, din, ein, dout, eout, pre_vol, m0, m1, e0, e1, f0, f1)   \
    IVDEP                                                                             \
    for (int j = (j0); j < (j1); j++) {                                               \
        const double pm = din[j] * pre_vol[j];                                        \
        const double qm = pm + m0 - m1;                                               \
        const double pe = (ein[j] * pm + e0 - e1) / qm;                               \
        const double av = pre_vol[j] + f0 - f1;                                       \
        dout[j] = qm / av;                                                            \
        eout[j] = pe;                                                                 \
    }

/* advec_cell along x over the cells of c (clipped to the chunk), written
 * into out's density1 and energy1, or in place when out is NULL (the
 * whole kernel).  Everything stays within cell row k, so each row is
 * finished before the next: the pre_vol of the donor cells, the fluxes on
 * faces c.j0 .. c.j1 (and on the last face, nx + 1, whose upwind cell
 * the reference clamps to nx + 1, when c.j1 is nx: the whole kernel
 * stores its flux), then the update.  A part's fluxes on the faces it
 * shares with its neighbour parts are computed by each, the same way. */
static ALWAYS_INLINE void advec_cell_x(const clover_view *v, int sweep, clover_range c, const clover_view *out)
{
    const int nx = v->nx;
    const double one_by_six = 1.0 / 6.0;
    const int last = c.j1 == nx;
    const int pv1 = last ? nx + 1 : c.j1; /* pre_vol of the donors j0 - 1 .. pv1 */
    const double *restrict vertexdx = geo(v, CG_VERTEXDX);
    /* vertexdx[j] / vertexdx[dif] for dif = j - 1 (positive flux) and
     * dif = j + 1 (negative), faces j in [j0, j1] */
    double *restrict ratio_pos = row(v, CF_WORK2, -2);
    double *restrict ratio_neg = row(v, CF_WORK2, -1);
    IVDEP
    for (int j = c.j0; j <= c.j1; j++) {
        ratio_pos[j] = vertexdx[j] / vertexdx[j - 1];
        ratio_neg[j] = vertexdx[j] / vertexdx[j + 1];
    }
    double *restrict pre_vol = row(v, CF_WORK1, -2); /* of the row being advected */
    double *restrict ener_flux = row(v, CF_WORK7, -2);
    for (int k = c.k0; k < c.k1; k++) {
        const double *restrict volume = row(v, CF_VOLUME, k);
        const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
        const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
        const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
        double *restrict density1 = row(v, CF_DENSITY1, k);
        double *restrict energy1 = row(v, CF_ENERGY1, k);
        double *restrict mfx = row(v, CF_MASS_FLUX_X, k);
        if (sweep == 1) {
            IVDEP
            for (int j = c.j0 - 1; j <= pv1; j++)
                pre_vol[j] = volume[j] + (vfx[j + 1] - vfx[j] + vfy1[j] - vfy0[j]);
        } else {
            IVDEP
            for (int j = c.j0 - 1; j <= pv1; j++)
                pre_vol[j] = volume[j] + vfx[j + 1] - vfx[j];
        }
        /* the upwind, donor and downwind values are selected by the
         * flux's sign, not addressed through it */
        IVDEP
        for (int j = c.j0; j <= c.j1; j++) {
            const double vf = vfx[j];
            const int pos = vf > 0.0;
            double ef;
            mfx[j] = cell_flux(vf, pos ? density1[j - 2] : density1[j + 1], pos ? density1[j - 1] : density1[j],
                               pos ? density1[j] : density1[j - 1], pos ? energy1[j - 2] : energy1[j + 1],
                               pos ? energy1[j - 1] : energy1[j], pos ? energy1[j] : energy1[j - 1],
                               pos ? pre_vol[j - 1] : pre_vol[j], pos ? ratio_pos[j] : ratio_neg[j], one_by_six, &ef);
            ener_flux[j] = ef;
        }
        if (last) {
            const int j = nx + 1;
            const double vf = vfx[j];
            double ef;
            if (vf > 0.0)
                mfx[j] = cell_flux(vf, density1[j - 2], density1[j - 1], density1[j], energy1[j - 2], energy1[j - 1],
                                   energy1[j], pre_vol[j - 1], vertexdx[j] / vertexdx[j - 1], one_by_six, &ef);
            else
                mfx[j] = cell_flux(vf, density1[nx + 1], density1[j], density1[j - 1], energy1[nx + 1], energy1[j],
                                   energy1[j - 1], pre_vol[j], vertexdx[j] / vertexdx[nx + 1], one_by_six, &ef);
            ener_flux[j] = ef;
        }
        /* The fluxes of this row read only this row's old values, so
         * the row can be updated at once. */
        double *dout = out ? row(out, CF_DENSITY1, k) : density1;
        double *eout = out ? row(out, CF_ENERGY1, k) : energy1;
        CELL_UPDATE(c.j0, c.j1, density1, energy1, dout, eout, pre_vol, mfx[j], mfx[j + 1], ener_flux[j],
                    ener_flux[j + 1], vfx[j], vfx[j + 1])
    }
}

/* advec_cell along y over the cells of c, into out (NULL: in place), as
 * advec_cell_x.  One pass down the cell rows k = c.k0 - 1 .. c.k1 + 1:
 * pre_vol of row k, the fluxes on face k (faces c.k0 .. c.k1, and the
 * last, ny + 1, when c.k1 is ny), and the update of row k - 2, which no
 * later flux reads (in place, a lag of two rows keeps the old values for
 * the fluxes).  pre_vol and ener_flux of cell rows r live in row -2 +
 * (r mod 3) of WORK1 and WORK7: the flux at face k reads pre_vol rows
 * k - 1 and k, the update of row k - 2 reads pre_vol row k - 2 and
 * ener_flux rows k - 2 and k - 1. */
static ALWAYS_INLINE void advec_cell_y(const clover_view *v, int sweep, clover_range c, const clover_view *out)
{
    const int ny = v->ny;
    const double one_by_six = 1.0 / 6.0;
    const int kl = c.k1 == ny ? ny + 1 : c.k1; /* the last face, and the last row of pre_vol */
    const double *restrict vertexdy = geo(v, CG_VERTEXDY);
    for (int k = c.k0 - 1; k <= c.k1 + 1; k++) {
        if (k <= kl) {
            /* pre_vol of cell row k */
            const double *restrict volume = row(v, CF_VOLUME, k);
            const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
            const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
            const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
            double *restrict pv = RING3(CF_WORK1, k);
            if (sweep == 1) {
                IVDEP
                for (int j = c.j0; j < c.j1; j++)
                    pv[j] = volume[j] + (vfy1[j] - vfy0[j] + vfx[j + 1] - vfx[j]);
            } else {
                IVDEP
                for (int j = c.j0; j < c.j1; j++)
                    pv[j] = volume[j] + vfy1[j] - vfy0[j];
            }
        }
        if (k >= c.k0 && k <= kl) {
            /* the flux at face k reads cell rows k - 2 .. k + 1 */
            const double *restrict vfy = row(v, CF_VOL_FLUX_Y, k);
            double *restrict mfy = row(v, CF_MASS_FLUX_Y, k);
            double *restrict ener_flux = RING3(CF_WORK7, k);
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
            const double *restrict pv_dop = RING3(CF_WORK1, dn_pos);
            const double *restrict pv_k = RING3(CF_WORK1, k);
            const double ratio_pos = vertexdy[k] / vertexdy[dn_pos];
            const double ratio_neg = vertexdy[k] / vertexdy[up_neg];
            IVDEP
            for (int j = c.j0; j < c.j1; j++) {
                const double vf = vfy[j];
                const int pos = vf > 0.0;
                double ef;
                mfy[j] = cell_flux(vf, pos ? d_upp[j] : d_upn[j], pos ? d_dop[j] : d_k[j], pos ? d_k[j] : d_dop[j],
                                   pos ? e_upp[j] : e_upn[j], pos ? e_dop[j] : e_k[j], pos ? e_k[j] : e_dop[j],
                                   pos ? pv_dop[j] : pv_k[j], pos ? ratio_pos : ratio_neg, one_by_six, &ef);
                ener_flux[j] = ef;
            }
        }
        const int ku = k - 2; /* the row that no later flux reads */
        if (ku < c.k0)
            continue;
        const double *restrict vf0 = row(v, CF_VOL_FLUX_Y, ku);
        const double *restrict vf1 = row(v, CF_VOL_FLUX_Y, ku + 1);
        const double *restrict mf0 = row(v, CF_MASS_FLUX_Y, ku);
        const double *restrict mf1 = row(v, CF_MASS_FLUX_Y, ku + 1);
        const double *restrict ef0 = RING3(CF_WORK7, ku);
        const double *restrict ef1 = RING3(CF_WORK7, ku + 1);
        const double *restrict pre_vol = RING3(CF_WORK1, ku);
        double *restrict density1 = row(v, CF_DENSITY1, ku);
        double *restrict energy1 = row(v, CF_ENERGY1, ku);
        double *dout = out ? row(out, CF_DENSITY1, ku) : density1;
        double *eout = out ? row(out, CF_ENERGY1, ku) : energy1;
        CELL_UPDATE(c.j0, c.j1, density1, energy1, dout, eout, pre_vol, mf0[j], mf1[j], ef0[j], ef1[j], vf0[j],
                    vf1[j])
    }
}

CLONES void clover_k_advec_cell(const clover_view *v, int dir, int sweep)
{
    const clover_range all = {0, v->nx, 0, v->ny};
    if (dir == 1)
        advec_cell_x(v, sweep, all, NULL);
    else
        advec_cell_y(v, sweep, all, NULL);
}

CLONES void clover_k_advec_cell_range(const clover_view *v, int dir, int sweep, const clover_range *r,
                                      const clover_view *out)
{
    const clover_range c = clip(r, v->nx, v->ny);
    if (c.j1 <= c.j0 || c.k1 <= c.k0)
        return;
    if (dir == 1)
        advec_cell_x(v, sweep, c, out);
    else
        advec_cell_y(v, sweep, c, out);
}

/* The reference's momentum limiter, both outcomes computed and one kept. */
static inline double mom_limiter(double vdiffuw, double vdiffdw, double sigma, double width, double cdif)
{
    const double auw = fabs(vdiffuw), adw = fabs(vdiffdw);
    const double wind = vdiffdw <= 0.0 ? -1.0 : 1.0;
    const double limiter = wind * dmin2(dmin2(width * ((2.0 - sigma) * adw / width + (1.0 + sigma) * auw / cdif) / 6.0,
                                              auw),
                                        adw);
    return vdiffuw * vdiffdw > 0.0 ? limiter : 0.0;
}

/* post_vol of cell row k, j in [j0, j1], into pv, for mom_sweep 1 (x
 * sweep 1: the y fluxes) or 2 (y sweep 1: the x fluxes). */
static inline void mom_post_vol(const clover_view *v, int mom_sweep, int k, int j0, int j1, double *restrict pv)
{
    const double *restrict volume = row(v, CF_VOLUME, k);
    if (mom_sweep == 1) {
        const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
        const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
        IVDEP
        for (int j = j0; j <= j1; j++)
            pv[j] = volume[j] + vfy1[j] - vfy0[j];
    } else {
        const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
        IVDEP
        for (int j = j0; j <= j1; j++)
            pv[j] = volume[j] + vfx[j + 1] - vfx[j];
    }
}

/* advec_mom along y, step i of the sweep for c.k0 + 2 <= i <= c.k1 (see
 * advec_mom_y), as one loop over the nodes j0 .. j1 - 1 of the row (every term of this sweep is at column j or
 * j - 1, so nothing crosses between elements): post_vol (pvflux: from the
 * x fluxes, else the volume), node_flux, node_mass_post and node_mass_pre
 * of node row i; the momentum flux of node row i - 1; the update of
 * velocity row i - 2.  The same values as the separate loops of
 * clover_k_advec_mom make; post_vol at j - 1 is recomputed, not reloaded,
 * so that no element reads what another wrote. */
static ALWAYS_INLINE void mom_y_fused(const clover_view *v, int vel, int i, int pvflux, int j0, int j1,
                                      const clover_view *out)
{
    const double *restrict celldy = geo(v, CG_CELLDY);
    const double *restrict vol0 = row(v, CF_VOLUME, i);
    const double *restrict vfx0 = row(v, CF_VOL_FLUX_X, i);
    const double *restrict mf0 = row(v, CF_MASS_FLUX_Y, i);
    const double *restrict mf1 = row(v, CF_MASS_FLUX_Y, i + 1);
    const double *restrict dm = row(v, CF_DENSITY1, i - 1);
    const double *restrict d0 = row(v, CF_DENSITY1, i);
    const double *restrict pvm = pvflux ? RING2(CF_WORK7, i - 1) : row(v, CF_VOLUME, i - 1);
    double *restrict pv0 = RING2(CF_WORK7, i);      /* written only when pvflux */
    const double *restrict nfm = RING2(CF_WORK1, i - 1); /* node_flux of node row k = i - 1 */
    double *restrict nf0 = RING2(CF_WORK1, i);
    double *restrict post_i = RING3(CF_WORK2, i);
    double *restrict pre_i = RING3(CF_WORK3, i);
    const double *restrict pre_k = RING3(CF_WORK3, i - 1);
    const double *restrict pre_ku = RING3(CF_WORK3, i - 2);
    const double *restrict post_ku = RING3(CF_WORK2, i - 2);
    double *restrict mom_flux_k = RING3(CF_WORK5, i - 1);
    const double *restrict mfl_kum = RING3(CF_WORK5, i - 3);
    const double *restrict mfl_ku = RING3(CF_WORK5, i - 2);
    double *restrict vel_ku = row(v, vel, i - 2); /* velocity row k - 1: read by the flux, then updated */
    double *vout = out ? row(out, vel, i - 2) : vel_ku;
    const double *restrict v0 = row(v, vel, i - 1);
    const double *restrict vp = row(v, vel, i);
    const double *restrict vpp = row(v, vel, i + 1);
    const int k = i - 1;
    const double width = celldy[k];
    const double cd_neg = celldy[k + 1]; /* dif = donor = k + 1 */
    const double cd_pos = celldy[k - 1]; /* dif = upwind = k - 1 */
    if (pvflux)
        pv0[j0 - 1] = vol0[j0 - 1] + vfx0[j0] - vfx0[j0 - 1];
    IVDEP
    for (int j = j0; j < j1; j++) {
        const double pvj = pvflux ? vol0[j] + vfx0[j + 1] - vfx0[j] : vol0[j];
        const double pvjm = pvflux ? vol0[j - 1] + vfx0[j] - vfx0[j - 1] : vol0[j - 1];
        if (pvflux)
            pv0[j] = pvj;
        const double nfi = 0.25 * (mf0[j - 1] + mf0[j] + mf1[j - 1] + mf1[j]);
        nf0[j] = nfi;
        const double post = 0.25 * (dm[j] * pvm[j] + d0[j] * pvj + dm[j - 1] * pvm[j - 1] + d0[j - 1] * pvjm);
        post_i[j] = post;
        const double prei = post - nfm[j] + nfi;
        pre_i[j] = prei;
        /* momentum flux of node row k */
        const double nf = nfm[j];
        const int neg = nf < 0.0;
        const double vup = neg ? vpp[j] : vel_ku[j];
        const double vdo = neg ? vp[j] : v0[j];
        const double vdn = neg ? v0[j] : vp[j];
        const double pre = neg ? prei : pre_k[j];
        const double cdif = neg ? cd_neg : cd_pos;
        const double sigma = fabs(nf) / pre;
        const double vdiffuw = vdo - vup;
        const double vdiffdw = vdn - vdo;
        const double limiter = mom_limiter(vdiffuw, vdiffdw, sigma, width, cdif);
        const double advec_vel = vdo + (1.0 - sigma) * limiter;
        mom_flux_k[j] = advec_vel * nf;
        /* update of velocity row k - 1 (its old value was read above) */
        vout[j] = (vel_ku[j] * pre_ku[j] + mfl_kum[j] - mfl_ku[j]) / post_ku[j];
    }
}

/* advec_mom along x, nodes ja .. jb of node row k: post_vol of cell row k
 * (pvflux: from the y fluxes, into the ring of WORK7, from ja - 1; else
 * the volume), node_flux, node_mass_post and node_mass_pre, in one loop that streams every new row
 * at once.  The same values as separate loops: node_flux and post_vol at
 * j - 1 are recomputed, not reloaded, so that no element reads what
 * another wrote. */
static ALWAYS_INLINE void mom_x_nodes(const clover_view *v, int k, int pvflux, int ja, int jb,
                                      double *restrict node_flux, double *restrict nm_post, double *restrict nm_pre)
{
    const double *restrict mfm = row(v, CF_MASS_FLUX_X, k - 1);
    const double *restrict mf0 = row(v, CF_MASS_FLUX_X, k);
    const double *restrict dm = row(v, CF_DENSITY1, k - 1);
    const double *restrict d0 = row(v, CF_DENSITY1, k);
    const double *restrict vol0 = row(v, CF_VOLUME, k);
    const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
    const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
    const double *restrict pvm = pvflux ? RING2(CF_WORK7, k - 1) : row(v, CF_VOLUME, k - 1);
    double *restrict pv0 = RING2(CF_WORK7, k); /* written only when pvflux */
    if (pvflux)
        pv0[ja - 1] = vol0[ja - 1] + vfy1[ja - 1] - vfy0[ja - 1];
    IVDEP
    for (int j = ja; j <= jb; j++) {
        const double pvj = pvflux ? vol0[j] + vfy1[j] - vfy0[j] : vol0[j];
        const double pvjm = pvflux ? vol0[j - 1] + vfy1[j - 1] - vfy0[j - 1] : vol0[j - 1];
        if (pvflux)
            pv0[j] = pvj;
        const double nfj = 0.25 * (mfm[j] + mf0[j] + mfm[j + 1] + mf0[j + 1]);
        const double nfjm = 0.25 * (mfm[j - 1] + mf0[j - 1] + mfm[j] + mf0[j]);
        node_flux[j] = nfj;
        const double post = 0.25 * (dm[j] * pvm[j] + d0[j] * pvj + dm[j - 1] * pvm[j - 1] + d0[j - 1] * pvjm);
        nm_post[j] = post;
        nm_pre[j] = post - nfjm + nfj;
    }
}

/* advec_mom along x over the nodes of c (clipped to the chunk's nodes),
 * into out's velocity vel, or in place when out is NULL (the whole
 * kernel).  Everything in an x sweep stays within node row k (cell rows
 * k - 1 and k), so each row is finished before the next: the node
 * quantities of nodes j0 - 1 .. j1, the momentum fluxes j0 - 1 .. j1 - 1,
 * then the update of nodes j0 .. j1 - 1.  The node quantities of a row
 * are never needed again, so they live in four rows of WORK4 (the
 * reference's advec_vel, unused here) that every row reuses and that stay
 * in cache, instead of whole arrays written back to memory. */
static ALWAYS_INLINE void advec_mom_x(const clover_view *v, int vel, int mom_sweep, clover_range c,
                                      const clover_view *out)
{
    /* post_vol is the volume on second sweeps (mom_sweep 3, 4): its rows
     * are read as they are; otherwise each row is made once, into a ring
     * of two rows of WORK7 (row r in row -2 + (r mod 2)). */
    const int pv_is_volume = mom_sweep > 2;
    const double *restrict celldx = geo(v, CG_CELLDX);
    double *restrict node_flux = row(v, CF_WORK4, -2);
    double *restrict nm_post = row(v, CF_WORK4, -1);
    double *restrict nm_pre = row(v, CF_WORK4, 0);
    double *restrict mom_flux = row(v, CF_WORK4, 1);
    if (!pv_is_volume)
        mom_post_vol(v, mom_sweep, c.k0 - 1, c.j0 - 2, c.j1, RING2(CF_WORK7, c.k0 - 1));
    for (int k = c.k0; k < c.k1; k++) {
        if (pv_is_volume)
            mom_x_nodes(v, k, 0, c.j0 - 1, c.j1, node_flux, nm_post, nm_pre);
        else
            mom_x_nodes(v, k, 1, c.j0 - 1, c.j1, node_flux, nm_post, nm_pre);
        double *restrict vel1 = row(v, vel, k);
        /* upwind, donor, downwind and dif selected by the flux's sign */
        IVDEP
        for (int j = c.j0 - 1; j < c.j1; j++) {
            const double nf = node_flux[j];
            const int neg = nf < 0.0;
            const double vup = neg ? vel1[j + 2] : vel1[j - 1];
            const double vdo = neg ? vel1[j + 1] : vel1[j];
            const double vdn = neg ? vel1[j] : vel1[j + 1];
            const double pre = neg ? nm_pre[j + 1] : nm_pre[j];
            const double cdif = neg ? celldx[j + 1] : celldx[j - 1];
            const double sigma = fabs(nf) / pre;
            const double width = celldx[j];
            const double vdiffuw = vdo - vup;
            const double vdiffdw = vdn - vdo;
            const double limiter = mom_limiter(vdiffuw, vdiffdw, sigma, width, cdif);
            const double advec_vel = vdo + (1.0 - sigma) * limiter;
            mom_flux[j] = advec_vel * nf;
        }
        double *vout = out ? row(out, vel, k) : vel1;
        IVDEP
        for (int j = c.j0; j < c.j1; j++)
            vout[j] = (vel1[j] * nm_pre[j] + mom_flux[j - 1] - mom_flux[j]) / nm_post[j];
    }
}

/* advec_mom along y over the nodes of c, into out (NULL: in place), as
 * advec_mom_x.  One pass down the node rows, i = c.k0 - 1 .. c.k1 + 1:
 * step i makes post_vol and node_flux of row i and node_mass_post/_pre
 * of node row i (rows up to c.k1), then the momentum flux of node row
 * i - 1 (rows c.k0 - 1 .. c.k1 - 1: it reads node_mass_pre rows i - 1 and
 * i and velocity rows i - 2 .. i + 1) and updates velocity row i - 2 (no
 * later flux reads it).  Rows live in rings (see the top of the file). */
static ALWAYS_INLINE void advec_mom_y(const clover_view *v, int vel, int mom_sweep, clover_range c,
                                      const clover_view *out)
{
    const int pv_is_volume = mom_sweep > 2;
#define POST_VOL(r) (pv_is_volume ? (const double *)row(v, CF_VOLUME, (r)) : (const double *)RING2(CF_WORK7, (r)))
    const double *restrict celldy = geo(v, CG_CELLDY);
    if (!pv_is_volume)
        mom_post_vol(v, mom_sweep, c.k0 - 2, c.j0 - 1, c.j1 - 1, RING2(CF_WORK7, c.k0 - 2));
    {
        const double *restrict mf0 = row(v, CF_MASS_FLUX_Y, c.k0 - 2);
        const double *restrict mf1 = row(v, CF_MASS_FLUX_Y, c.k0 - 1);
        double *restrict nf = RING2(CF_WORK1, c.k0 - 2);
        IVDEP
        for (int j = c.j0; j < c.j1; j++)
            nf[j] = 0.25 * (mf0[j - 1] + mf0[j] + mf1[j - 1] + mf1[j]);
    }
    for (int i = c.k0 - 1; i <= c.k1 + 1; i++) {
        if (i >= c.k0 + 2 && i <= c.k1) {
            if (pv_is_volume)
                mom_y_fused(v, vel, i, 0, c.j0, c.j1, out);
            else
                mom_y_fused(v, vel, i, 1, c.j0, c.j1, out);
            continue;
        }
        if (i <= c.k1) {
            if (!pv_is_volume)
                mom_post_vol(v, mom_sweep, i, c.j0 - 1, c.j1 - 1, RING2(CF_WORK7, i));
            const double *restrict mf0 = row(v, CF_MASS_FLUX_Y, i);
            const double *restrict mf1 = row(v, CF_MASS_FLUX_Y, i + 1);
            double *restrict node_flux = RING2(CF_WORK1, i);
            IVDEP
            for (int j = c.j0; j < c.j1; j++)
                node_flux[j] = 0.25 * (mf0[j - 1] + mf0[j] + mf1[j - 1] + mf1[j]);
            const double *restrict dm = row(v, CF_DENSITY1, i - 1);
            const double *restrict d0 = row(v, CF_DENSITY1, i);
            const double *restrict pvm = POST_VOL(i - 1);
            const double *restrict pv0 = POST_VOL(i);
            const double *restrict nfm = RING2(CF_WORK1, i - 1);
            const double *restrict nf0 = RING2(CF_WORK1, i);
            double *restrict nm_post = RING3(CF_WORK2, i);
            double *restrict nm_pre = RING3(CF_WORK3, i);
            IVDEP
            for (int j = c.j0; j < c.j1; j++) {
                const double post = 0.25 * (dm[j] * pvm[j] + d0[j] * pv0[j]
                                            + dm[j - 1] * pvm[j - 1] + d0[j - 1] * pv0[j - 1]);
                nm_post[j] = post;
                nm_pre[j] = post - nfm[j] + nf0[j];
            }
        }
        const int k = i - 1;
        if (k >= c.k0 - 1 && k <= c.k1 - 1) {
            const double *restrict nf = RING2(CF_WORK1, k);
            const double *restrict pre_k = RING3(CF_WORK3, k);
            const double *restrict pre_k1 = RING3(CF_WORK3, k + 1);
            const double *restrict vm = row(v, vel, k - 1);
            const double *restrict v0 = row(v, vel, k);
            const double *restrict vp = row(v, vel, k + 1);
            const double *restrict vpp = row(v, vel, k + 2);
            double *restrict mom_flux = RING3(CF_WORK5, k);
            const double width = celldy[k];
            const double cd_neg = celldy[k + 1]; /* dif = donor = k + 1 */
            const double cd_pos = celldy[k - 1]; /* dif = upwind = k - 1 */
            IVDEP
            for (int j = c.j0; j < c.j1; j++) {
                const int neg = nf[j] < 0.0;
                const double vup = neg ? vpp[j] : vm[j];
                const double vdo = neg ? vp[j] : v0[j];
                const double vdn = neg ? v0[j] : vp[j];
                const double pre = neg ? pre_k1[j] : pre_k[j];
                const double cdif = neg ? cd_neg : cd_pos;
                const double sigma = fabs(nf[j]) / pre;
                const double vdiffuw = vdo - vup;
                const double vdiffdw = vdn - vdo;
                const double limiter = mom_limiter(vdiffuw, vdiffdw, sigma, width, cdif);
                const double advec_vel = vdo + (1.0 - sigma) * limiter;
                mom_flux[j] = advec_vel * nf[j];
            }
        }
        const int ku = i - 2;
        if (ku < c.k0)
            continue;
        const double *restrict mfm = RING3(CF_WORK5, ku - 1);
        const double *restrict mf0 = RING3(CF_WORK5, ku);
        const double *restrict pre = RING3(CF_WORK3, ku);
        const double *restrict post = RING3(CF_WORK2, ku);
        double *restrict vel1 = row(v, vel, ku);
        double *vout = out ? row(out, vel, ku) : vel1;
        IVDEP
        for (int j = c.j0; j < c.j1; j++)
            vout[j] = (vel1[j] * pre[j] + mfm[j] - mf0[j]) / post[j];
    }
#undef POST_VOL
}

CLONES void clover_k_advec_mom(const clover_view *v, int vel, int dir, int sweep)
{
    const clover_range all = {0, v->nx + 1, 0, v->ny + 1};
    const int mom_sweep = dir + 2 * (sweep - 1);
    if (dir == 1)
        advec_mom_x(v, vel, mom_sweep, all, NULL);
    else
        advec_mom_y(v, vel, mom_sweep, all, NULL);
}

CLONES void clover_k_advec_mom_range(const clover_view *v, int vel, int dir, int sweep, const clover_range *r,
                                     const clover_view *out)
{
    const clover_range c = clip(r, v->nx + 1, v->ny + 1);
    if (c.j1 <= c.j0 || c.k1 <= c.k0)
        return;
    const int mom_sweep = dir + 2 * (sweep - 1);
    if (dir == 1)
        advec_mom_x(v, vel, mom_sweep, c, out);
    else
        advec_mom_y(v, vel, mom_sweep, c, out);
}
