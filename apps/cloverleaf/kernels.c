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
 * anything in a work array that another kernel reads.  viscosity and
 * calc_dt keep their scratch in small blocks on the stack.
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
#include "clover.h"

#include <math.h>
#include <stddef.h>

/* The reference declares these REAL(KIND=8) but gives them single
 * precision literals, so their values are the float's. */
#define G_SMALL ((double)1.0e-16f)
#define G_BIG ((double)1.0e+21f)

/* IVDEP marks a loop whose row pointers gcc cannot prove apart (restrict
 * on block-scope pointers does not reach its vectoriser, which would need
 * more run-time overlap checks than it makes): no array a loop writes is
 * read or written by it at another element, so it may vectorise.
 * CLONES compiles a kernel for AVX-512, AVX2 and plain x86-64, CLONES_256
 * for AVX2 and plain x86-64, chosen when the library is loaded (an
 * ifunc); elsewhere (and under TSan, below) both are empty. */
#if defined(__GNUC__) && !defined(__clang__)
#define IVDEP _Pragma("GCC ivdep")
#else
#define IVDEP
#endif
#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* Not under TSan: an ifunc resolver runs while the program is being
 * relocated, before TSan's run time is up, and crashes there. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) &&                    \
    !defined(__SANITIZE_THREAD__)
#define CLOVER_X86_CLONES 1
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define CLONES_256 __attribute__((target_clones("avx2", "default")))
#include <immintrin.h>
#else
#define CLOVER_X86_CLONES 0
#define CLONES
#define CLONES_256
#endif

/* ---- small helpers ---------------------------------------------------- */

/* Row k of field f, offset so that the result indexed [j] is (j, k). */
static inline double *row(const clover_view *v, int f, int k)
{
    return v->f[f] + (size_t)(k + 2) * v->pitch + 2;
}

/* Row r (r >= -6) of a ring of two or three rows kept in rows -2 .. 0 of
 * field f's array (used where a view v is in scope). */
#define RING2(f, r) row(v, (f), -2 + ((r) + 6) % 2)
#define RING3(f, r) row(v, (f), -2 + ((r) + 6) % 3)

/* Geometry array `which`, offset so that [j] (or [k]) is index j (k). */
static inline double *geo(const clover_view *v, int which)
{
    return v->geom + clover_geom_offset(v->nx, v->ny, which) + 2;
}

static inline double dmin2(double a, double b) { return a < b ? a : b; }
static inline double dmax2(double a, double b) { return a > b ? a : b; }

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

static inline int imax2(int a, int b) { return a > b ? a : b; }
static inline int imin2(int a, int b) { return a < b ? a : b; }

void clover_split(int dx, int dy, int margin, clover_range out[5])
{
    /* the interior, clipped so that it stays inside the domain (and is
     * empty, at the domain's middle, when the domain is too narrow) */
    int j0 = imin2(margin, dx), j1 = imax2(dx - margin, j0);
    int k0 = imin2(margin, dy), k1 = imax2(dy - margin, k0);
    out[0] = (clover_range){j0, j1, k0, k1};
    out[1] = (clover_range){0, dx, 0, k0};      /* bottom rows, whole width */
    out[2] = (clover_range){0, dx, k1, dy};     /* top rows, whole width */
    out[3] = (clover_range){0, j0, k0, k1};     /* left columns between them */
    out[4] = (clover_range){j1, dx, k0, k1};    /* right columns between them */
}

/* r intersected with the domain [0, dx) x [0, dy). */
static clover_range clip(const clover_range *r, int dx, int dy)
{
    clover_range c = {imax2(r->j0, 0), imin2(r->j1, dx), imax2(r->k0, 0), imin2(r->k1, dy)};
    return c;
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

/* The update of one cell row from the old density1/energy1, its pre_vol,
 * the mass, energy and volume fluxes on its two faces (m0, e0, f0 the
 * lower/left face, m1, e1, f1 the upper/right one, each indexed [j]).  The
 * reference's pre_mass, post_mass, post_ener and advec_vol are never read
 * back: they stay in registers. */
#define CELL_UPDATE(n, density1, energy1, pre_vol, m0, m1, e0, e1, f0, f1)           \
    IVDEP                                                                             \
    for (int j = 0; j < (n); j++) {                                                   \
        const double pm = density1[j] * pre_vol[j];                                   \
        const double qm = pm + m0 - m1;                                               \
        const double pe = (energy1[j] * pm + e0 - e1) / qm;                           \
        const double av = pre_vol[j] + f0 - f1;                                       \
        density1[j] = qm / av;                                                        \
        energy1[j] = pe;                                                              \
    }

CLONES void clover_k_advec_cell(const clover_view *v, int dir, int sweep)
{
    const int nx = v->nx, ny = v->ny;
    const double one_by_six = 1.0 / 6.0;

    if (dir == 1) {
        const double *restrict vertexdx = geo(v, CG_VERTEXDX);
        /* vertexdx[j] / vertexdx[dif] for dif = j - 1 (positive flux) and
         * dif = j + 1 (negative), j in [0, nx] */
        double *restrict ratio_pos = row(v, CF_WORK2, -2);
        double *restrict ratio_neg = row(v, CF_WORK2, -1);
        IVDEP
        for (int j = 0; j <= nx; j++) {
            ratio_pos[j] = vertexdx[j] / vertexdx[j - 1];
            ratio_neg[j] = vertexdx[j] / vertexdx[j + 1];
        }
        double *restrict pre_vol = row(v, CF_WORK1, -2); /* of the row being advected */
        double *restrict ener_flux = row(v, CF_WORK7, -2);
        for (int k = 0; k < ny; k++) {
            const double *restrict volume = row(v, CF_VOLUME, k);
            const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
            const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
            const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
            double *restrict density1 = row(v, CF_DENSITY1, k);
            double *restrict energy1 = row(v, CF_ENERGY1, k);
            double *restrict mfx = row(v, CF_MASS_FLUX_X, k);
            /* pre_vol of the donor cells, j in [-1, nx + 1] */
            if (sweep == 1) {
                IVDEP
                for (int j = -1; j <= nx + 1; j++)
                    pre_vol[j] = volume[j] + (vfx[j + 1] - vfx[j] + vfy1[j] - vfy0[j]);
            } else {
                IVDEP
                for (int j = -1; j <= nx + 1; j++)
                    pre_vol[j] = volume[j] + vfx[j + 1] - vfx[j];
            }
            /* Fluxes on faces j in [0, nx + 1]: the upwind, donor and
             * downwind values are selected by the flux's sign, not
             * addressed through it; the last face, whose upwind cell the
             * reference clamps to nx + 1, on its own. */
            IVDEP
            for (int j = 0; j <= nx; j++) {
                const double vf = vfx[j];
                const int pos = vf > 0.0;
                double ef;
                mfx[j] = cell_flux(vf, pos ? density1[j - 2] : density1[j + 1], pos ? density1[j - 1] : density1[j],
                                   pos ? density1[j] : density1[j - 1], pos ? energy1[j - 2] : energy1[j + 1],
                                   pos ? energy1[j - 1] : energy1[j], pos ? energy1[j] : energy1[j - 1],
                                   pos ? pre_vol[j - 1] : pre_vol[j], pos ? ratio_pos[j] : ratio_neg[j], one_by_six,
                                   &ef);
                ener_flux[j] = ef;
            }
            {
                const int j = nx + 1;
                const double vf = vfx[j];
                double ef;
                if (vf > 0.0)
                    mfx[j] = cell_flux(vf, density1[j - 2], density1[j - 1], density1[j], energy1[j - 2],
                                       energy1[j - 1], energy1[j], pre_vol[j - 1], vertexdx[j] / vertexdx[j - 1],
                                       one_by_six, &ef);
                else
                    mfx[j] = cell_flux(vf, density1[nx + 1], density1[j], density1[j - 1], energy1[nx + 1],
                                       energy1[j], energy1[j - 1], pre_vol[j], vertexdx[j] / vertexdx[nx + 1],
                                       one_by_six, &ef);
                ener_flux[j] = ef;
            }
            /* The fluxes of this row read only this row's old values, so
             * the row can be updated at once. */
            CELL_UPDATE(nx, density1, energy1, pre_vol, mfx[j], mfx[j + 1], ener_flux[j], ener_flux[j + 1], vfx[j],
                        vfx[j + 1])
        }
    } else {
        const double *restrict vertexdy = geo(v, CG_VERTEXDY);
        /* pre_vol and ener_flux of cell rows r live in row -2 + (r mod 3)
         * of WORK1 and WORK7: the flux at face k reads pre_vol rows k - 1
         * and k, the update of row k - 2 reads pre_vol row k - 2 and
         * ener_flux rows k - 2 and k - 1. */
        for (int kk = -1; kk <= ny + 1; kk++) {
            const int k = kk;
            {
                /* pre_vol of cell row k, j in [0, nx) */
                const double *restrict volume = row(v, CF_VOLUME, k);
                const double *restrict vfx = row(v, CF_VOL_FLUX_X, k);
                const double *restrict vfy0 = row(v, CF_VOL_FLUX_Y, k);
                const double *restrict vfy1 = row(v, CF_VOL_FLUX_Y, k + 1);
                double *restrict pv = RING3(CF_WORK1, k);
                if (sweep == 1) {
                    IVDEP
                    for (int j = 0; j < nx; j++)
                        pv[j] = volume[j] + (vfy1[j] - vfy0[j] + vfx[j + 1] - vfx[j]);
                } else {
                    IVDEP
                    for (int j = 0; j < nx; j++)
                        pv[j] = volume[j] + vfy1[j] - vfy0[j];
                }
            }
            if (k < 0)
                continue;
            /* Fluxes on faces k = 0 .. ny + 1; the flux at face k reads
             * cell rows k - 2 .. k + 1, so row k - 2 is updated once it
             * exists (a lag of two rows keeps old values for readers). */
            const double *restrict vfy = row(v, CF_VOL_FLUX_Y, k);
            double *restrict mfy = row(v, CF_MASS_FLUX_Y, k);
            double *restrict ener_flux = RING3(CF_WORK7, k);
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
                const double *restrict pv_dop = RING3(CF_WORK1, dn_pos);
                const double *restrict pv_k = RING3(CF_WORK1, k);
                const double ratio_pos = vertexdy[k] / vertexdy[dn_pos];
                const double ratio_neg = vertexdy[k] / vertexdy[up_neg];
                IVDEP
                for (int j = 0; j < nx; j++) {
                    const double vf = vfy[j];
                    const int pos = vf > 0.0;
                    double ef;
                    mfy[j] = cell_flux(vf, pos ? d_upp[j] : d_upn[j], pos ? d_dop[j] : d_k[j],
                                       pos ? d_k[j] : d_dop[j], pos ? e_upp[j] : e_upn[j], pos ? e_dop[j] : e_k[j],
                                       pos ? e_k[j] : e_dop[j], pos ? pv_dop[j] : pv_k[j],
                                       pos ? ratio_pos : ratio_neg, one_by_six, &ef);
                    ener_flux[j] = ef;
                }
            }
            const int ku = k - 2; /* the row that no later flux reads */
            if (ku < 0)
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
            CELL_UPDATE(nx, density1, energy1, pre_vol, mf0[j], mf1[j], ef0[j], ef1[j], vf0[j], vf1[j])
        }
    }
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

/* advec_mom along y, step i of the sweep for 2 <= i <= ny + 1, as one loop
 * over the nodes of the row (every term of this sweep is at column j or
 * j - 1, so nothing crosses between elements): post_vol (pvflux: from the
 * x fluxes, else the volume), node_flux, node_mass_post and node_mass_pre
 * of node row i; the momentum flux of node row i - 1; the update of
 * velocity row i - 2.  The same values as the separate loops of
 * clover_k_advec_mom make; post_vol at j - 1 is recomputed, not reloaded,
 * so that no element reads what another wrote. */
static ALWAYS_INLINE void mom_y_fused(const clover_view *v, int vel, int i, int pvflux)
{
    const int nx = v->nx;
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
    const double *restrict v0 = row(v, vel, i - 1);
    const double *restrict vp = row(v, vel, i);
    const double *restrict vpp = row(v, vel, i + 1);
    const int k = i - 1;
    const double width = celldy[k];
    const double cd_neg = celldy[k + 1]; /* dif = donor = k + 1 */
    const double cd_pos = celldy[k - 1]; /* dif = upwind = k - 1 */
    if (pvflux)
        pv0[-1] = vol0[-1] + vfx0[0] - vfx0[-1];
    IVDEP
    for (int j = 0; j <= nx; j++) {
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
        vel_ku[j] = (vel_ku[j] * pre_ku[j] + mfl_kum[j] - mfl_ku[j]) / post_ku[j];
    }
}

/* advec_mom along x, node row k: post_vol of cell row k (pvflux: from the
 * y fluxes, into the ring of WORK7; else the volume), node_flux,
 * node_mass_post and node_mass_pre, in one loop that streams every new row
 * at once.  The same values as separate loops: node_flux and post_vol at
 * j - 1 are recomputed, not reloaded, so that no element reads what
 * another wrote. */
static ALWAYS_INLINE void mom_x_nodes(const clover_view *v, int k, int pvflux, double *restrict node_flux,
                                      double *restrict nm_post, double *restrict nm_pre)
{
    const int nx = v->nx;
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
        pv0[-2] = vol0[-2] + vfy1[-2] - vfy0[-2];
    IVDEP
    for (int j = -1; j <= nx + 1; j++) {
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

CLONES void clover_k_advec_mom(const clover_view *v, int vel, int dir, int sweep)
{
    const int nx = v->nx, ny = v->ny;
    const int mom_sweep = dir + 2 * (sweep - 1);
    /* post_vol is the volume on second sweeps (mom_sweep 3, 4): its rows
     * are read as they are; otherwise each row is made once, into a ring
     * of two rows of WORK7 (row r in row -2 + (r mod 2)). */
    const int pv_is_volume = mom_sweep > 2;
#define POST_VOL(r) (pv_is_volume ? (const double *)row(v, CF_VOLUME, (r)) : (const double *)RING2(CF_WORK7, (r)))

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
        if (!pv_is_volume)
            mom_post_vol(v, mom_sweep, -1, -2, nx + 1, RING2(CF_WORK7, -1));
        for (int k = 0; k <= ny; k++) {
            if (pv_is_volume)
                mom_x_nodes(v, k, 0, node_flux, nm_post, nm_pre);
            else
                mom_x_nodes(v, k, 1, node_flux, nm_post, nm_pre);
            double *restrict vel1 = row(v, vel, k);
            /* upwind, donor, downwind and dif selected by the flux's sign */
            IVDEP
            for (int j = -1; j <= nx; j++) {
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
            IVDEP
            for (int j = 0; j <= nx; j++)
                vel1[j] = (vel1[j] * nm_pre[j] + mom_flux[j - 1] - mom_flux[j]) / nm_post[j];
        }
    } else {
        const double *restrict celldy = geo(v, CG_CELLDY);
        /* One pass down the node rows.  Step i makes post_vol and
         * node_flux of row i and node_mass_post/_pre of node row i, then
         * the momentum flux of node row i - 1 (it reads node_mass_pre rows
         * i - 1 and i and velocity rows i - 2 .. i + 1) and updates
         * velocity row i - 2 (no later flux reads it).  Rows live in rings
         * (see the top of the file). */
        if (!pv_is_volume)
            mom_post_vol(v, mom_sweep, -2, -1, nx, RING2(CF_WORK7, -2));
        {
            const double *restrict mf0 = row(v, CF_MASS_FLUX_Y, -2);
            const double *restrict mf1 = row(v, CF_MASS_FLUX_Y, -1);
            double *restrict nf = RING2(CF_WORK1, -2);
            IVDEP
            for (int j = 0; j <= nx; j++)
                nf[j] = 0.25 * (mf0[j - 1] + mf0[j] + mf1[j - 1] + mf1[j]);
        }
        for (int i = -1; i <= ny + 2; i++) {
            if (i >= 2 && i <= ny + 1) {
                if (pv_is_volume)
                    mom_y_fused(v, vel, i, 0);
                else
                    mom_y_fused(v, vel, i, 1);
                continue;
            }
            if (i <= ny + 1) {
                if (!pv_is_volume)
                    mom_post_vol(v, mom_sweep, i, -1, nx, RING2(CF_WORK7, i));
                const double *restrict mf0 = row(v, CF_MASS_FLUX_Y, i);
                const double *restrict mf1 = row(v, CF_MASS_FLUX_Y, i + 1);
                double *restrict node_flux = RING2(CF_WORK1, i);
                IVDEP
                for (int j = 0; j <= nx; j++)
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
                for (int j = 0; j <= nx; j++) {
                    const double post = 0.25 * (dm[j] * pvm[j] + d0[j] * pv0[j]
                                                + dm[j - 1] * pvm[j - 1] + d0[j - 1] * pv0[j - 1]);
                    nm_post[j] = post;
                    nm_pre[j] = post - nfm[j] + nf0[j];
                }
            }
            const int k = i - 1;
            if (k >= -1 && k <= ny) {
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
                for (int j = 0; j <= nx; j++) {
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
            if (ku < 0)
                continue;
            const double *restrict mfm = RING3(CF_WORK5, ku - 1);
            const double *restrict mf0 = RING3(CF_WORK5, ku);
            const double *restrict pre = RING3(CF_WORK3, ku);
            const double *restrict post = RING3(CF_WORK2, ku);
            double *restrict vel1 = row(v, vel, ku);
            IVDEP
            for (int j = 0; j <= nx; j++)
                vel1[j] = (vel1[j] * pre[j] + mfm[j] - mf0[j]) / post[j];
        }
    }
#undef POST_VOL
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
