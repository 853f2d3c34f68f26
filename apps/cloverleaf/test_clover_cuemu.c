/* kernels.cu run on the host, where no GPU is, by the emulation of CUDA in
 * cuda_emu/ (a launch calls the kernel once per thread of every block; a
 * reduction's threads run as fibers that meet at each __syncthreads), and
 * checked against the host kernels (kernels.c, advec.c) bit for bit.
 *
 *   test_clover_cuemu kernels      every CUDA kernel against its host
 *                                  kernel on made-up fields, meshes from
 *                                  1 x 1 to 130 x 97 (partial blocks, more
 *                                  rows than a grid covers): every field
 *                                  but the work arrays, ghosts included,
 *                                  and the geometry bit for bit; calc_dt's
 *                                  minimum and PdV's flag equal; the field
 *                                  summary to 1e-12 (its tree's order),
 *                                  the same bits with and without a
 *                                  scratch array; the range kernels part by
 *                                  part equal to the whole
 *   test_clover_cuemu loop DECKS   plain_cuda.c's time-step loop (the
 *                                  hand-written CUDA baseline, one chunk,
 *                                  one stream) on clover_tp1.in and on the
 *                                  bm deck cut to 136 x 72 and 65 x 130:
 *                                  the oracle's density and energy bit for
 *                                  bit, its summary to 1e-12, PASS for tp1,
 *                                  nothing left allocated
 * Each is run twice: the blocks and threads in order, then in reverse
 * order (a kernel whose result depends on its threads' order fails one).
 *
 * What this does not check: streams and their order (every emulated call
 * is done when it returns), the GPU's own arithmetic (the host's IEEE
 * double, as nvcc's with -fmad=false), memory models.  scripts/gpu-check.sh
 * runs the same kernels on a GPU. */
#include "clover.h"
#include "kernels_cuda.h"
#include "plain_cuda.h"
#include "serial.h"

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CLOVER_CUDA_EMU
#error "build with cuda_emu/ first on the include path"
#endif

static int failures;

#include "test_check.h"

static const char *order_name(int rev) { return rev ? "reverse order" : "in order"; }

static double rel(double a, double b)
{
    double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
    return m == 0.0 ? 0.0 : fabs(a - b) / m;
}

/* ---- one chunk on the host and on the emulated device --------------------- */

/* A chunk's arrays twice: on the host (h, the host kernels' view) and on
 * the device (d: cudaMalloc'd, the CUDA kernels' view). */
typedef struct pair {
    int nx, ny;
    size_t fc, gc;
    clover_view h, d;
} pair;

static int pair_init(pair *p, int nx, int ny)
{
    memset(p, 0, sizeof *p);
    p->nx = nx;
    p->ny = ny;
    p->fc = clover_field_count(nx, ny);
    p->gc = clover_geom_count(nx, ny);
    p->h = (clover_view){.nx = nx, .ny = ny, .pitch = (size_t)nx + 5};
    p->d = p->h;
    for (int f = 0; f < CF_NFIELDS; f++) {
        p->h.f[f] = calloc(p->fc, sizeof(double));
        if (!p->h.f[f] || cudaMalloc((void **)&p->d.f[f], p->fc * sizeof(double)) != cudaSuccess)
            return -1;
    }
    p->h.geom = calloc(p->gc, sizeof(double));
    if (!p->h.geom || cudaMalloc((void **)&p->d.geom, p->gc * sizeof(double)) != cudaSuccess)
        return -1;
    return 0;
}

static void pair_free(pair *p)
{
    for (int f = 0; f < CF_NFIELDS; f++) {
        free(p->h.f[f]);
        cudaFree(p->d.f[f]);
    }
    free(p->h.geom);
    cudaFree(p->d.geom);
}

/* The host's arrays onto the device. */
static void upload(pair *p)
{
    for (int f = 0; f < CF_NFIELDS; f++)
        cudaMemcpyAsync(p->d.f[f], p->h.f[f], p->fc * sizeof(double), cudaMemcpyHostToDevice, NULL);
    cudaMemcpyAsync(p->d.geom, p->h.geom, p->gc * sizeof(double), cudaMemcpyHostToDevice, NULL);
}

/* Elements of the device's arrays (every field but the work arrays, and
 * the geometry) whose bits differ from the host's; the first one named. */
static int differ(const pair *p, char *first, size_t len)
{
    double *buf = malloc((p->fc > p->gc ? p->fc : p->gc) * sizeof(double));
    int bad = 0;
    first[0] = 0;
    if (!buf)
        return -1;
    for (int f = 0; f <= CF_NFIELDS; f++) {
        if (f < CF_NFIELDS && f >= CF_WORK1)
            continue;
        const int geom = f == CF_NFIELDS;
        const size_t n = geom ? p->gc : p->fc;
        const double *h = geom ? p->h.geom : p->h.f[f];
        cudaMemcpyAsync(buf, geom ? p->d.geom : p->d.f[f], n * sizeof(double), cudaMemcpyDeviceToHost, NULL);
        for (size_t i = 0; i < n; i++)
            if (memcmp(&buf[i], &h[i], sizeof(double)) != 0) {
                if (!bad++) {
                    if (geom)
                        snprintf(first, len, "geometry[%zu]: %.17g on the device, %.17g on the host", i, buf[i],
                                 h[i]);
                    else
                        snprintf(first, len, "%s (%d, %d): %.17g on the device, %.17g on the host",
                                 clover_field_name(f), (int)(i % p->h.pitch) - 2, (int)(i / p->h.pitch) - 2, buf[i],
                                 h[i]);
                }
            }
    }
    free(buf);
    return bad;
}

static double lcg(unsigned long long *x, double lo, double hi)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(*x >> 11) / 9007199254740992.0;
}

/* Made-up fields: positive densities, energies, volumes, areas and cell
 * sizes; signed velocities; fluxes small beside the volumes. */
static void fill(pair *p, unsigned long long seed)
{
    unsigned long long x = seed;
    for (int f = 0; f < CF_NFIELDS; f++) {
        const int sgn = (f >= CF_XVEL0 && f <= CF_MASS_FLUX_Y);
        const double s = f >= CF_VOL_FLUX_X && f <= CF_MASS_FLUX_Y ? 0.1 : 1.0;
        for (size_t i = 0; i < p->fc; i++)
            p->h.f[f][i] = sgn ? lcg(&x, -s, s) : lcg(&x, 0.5, 1.5);
    }
    for (size_t i = 0; i < p->gc; i++)
        p->h.geom[i] = lcg(&x, 0.5, 1.5);
}

/* ---- kernels: each CUDA kernel against its host kernel ------------------ */

enum {
    K_IDEAL0, K_IDEAL1, K_VISC, K_VISC_PARTS, K_PDV1, K_PDV0, K_REVERT, K_ACCEL, K_ACCEL_PARTS, K_FLUX,
    K_CELL_X1, K_CELL_X2, K_CELL_Y1, K_CELL_Y2,
    K_MOM, /* then 8: vel x/y, dir 1/2, sweep 1/2 */
    K_RESET = K_MOM + 8, K_REFLECT1, K_REFLECT2, K_COPY2D, K_N
};

static const char *kname(int k, char *buf, size_t len)
{
    static const char *names[] = {"ideal_gas(0)", "ideal_gas(1)", "viscosity", "viscosity by parts", "pdv(1)",
                                  "pdv(0)", "revert", "accelerate", "accelerate by parts", "flux_calc",
                                  "advec_cell x sweep 1", "advec_cell x sweep 2", "advec_cell y sweep 1",
                                  "advec_cell y sweep 2"};
    if (k < K_MOM)
        return names[k];
    if (k < K_RESET) {
        const int m = k - K_MOM;
        snprintf(buf, len, "advec_mom %s along %s sweep %d", (m & 1) ? "yvel1" : "xvel1", (m & 2) ? "y" : "x",
                 (m & 4) ? 2 : 1);
        return buf;
    }
    return k == K_RESET ? "reset_field" : k == K_REFLECT1 ? "reflect depth 1" : k == K_REFLECT2 ? "reflect depth 2"
                                                                                            : "copy2d";
}

static const int all_fields[] = {CF_DENSITY0, CF_DENSITY1, CF_ENERGY0, CF_ENERGY1,    CF_PRESSURE,   CF_VISCOSITY,
                                 CF_SOUNDSPEED, CF_XVEL0,  CF_XVEL1,   CF_YVEL0,      CF_YVEL1,      CF_VOL_FLUX_X,
                                 CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y};

/* Kernel k on both sides of p; returns the CUDA call's result. */
static int run_kernel(pair *p, int k, int32_t *err_d, int *err_h)
{
    const double dt = 0.004;
    const unsigned edges = CLOVER_LEFT | CLOVER_RIGHT | CLOVER_BOTTOM | CLOVER_TOP;
    const int nfields = (int)(sizeof all_fields / sizeof all_fields[0]);
    clover_range r[5];
    int rc = 0;
    *err_h = 0;
    switch (k) {
    case K_IDEAL0:
    case K_IDEAL1:
        clover_k_ideal_gas(&p->h, k == K_IDEAL1);
        return clover_cu_ideal_gas(&p->d, k == K_IDEAL1, NULL);
    case K_VISC:
        clover_k_viscosity(&p->h);
        return clover_cu_viscosity(&p->d, NULL);
    case K_VISC_PARTS:
        clover_k_viscosity(&p->h);
        clover_split(p->nx, p->ny, 1, r);
        for (int i = 0; i < 5 && !rc; i++)
            rc = clover_cu_viscosity_range(&p->d, &r[i], NULL);
        return rc;
    case K_PDV1:
    case K_PDV0:
        *err_h = clover_k_pdv(&p->h, k == K_PDV1, dt);
        return clover_cu_pdv(&p->d, k == K_PDV1, dt, err_d, NULL);
    case K_REVERT:
        clover_k_revert(&p->h);
        return clover_cu_revert(&p->d, NULL);
    case K_ACCEL:
        clover_k_accelerate(&p->h, dt);
        return clover_cu_accelerate(&p->d, dt, NULL);
    case K_ACCEL_PARTS:
        clover_k_accelerate(&p->h, dt);
        clover_split(p->nx + 1, p->ny + 1, 1, r);
        for (int i = 0; i < 5 && !rc; i++)
            rc = clover_cu_accelerate_range(&p->d, dt, &r[i], NULL);
        return rc;
    case K_FLUX:
        clover_k_flux_calc(&p->h, dt);
        return clover_cu_flux_calc(&p->d, dt, NULL);
    case K_CELL_X1:
    case K_CELL_X2:
    case K_CELL_Y1:
    case K_CELL_Y2: {
        const int dir = k >= K_CELL_Y1 ? 2 : 1, sweep = (k - K_CELL_X1) % 2 + 1;
        clover_k_advec_cell(&p->h, dir, sweep);
        return clover_cu_advec_cell(&p->d, dir, sweep, NULL);
    }
    case K_RESET:
        clover_k_reset_field(&p->h);
        return clover_cu_reset_field(&p->d, NULL);
    case K_REFLECT1:
    case K_REFLECT2:
        clover_k_reflect(&p->h, all_fields, nfields, k == K_REFLECT1 ? 1 : 2, edges);
        return clover_cu_reflect(&p->d, all_fields, nfields, k == K_REFLECT1 ? 1 : 2, edges, NULL);
    case K_COPY2D: {
        /* a block of energy0's cells into pressure's ghost rows, pitch to pitch */
        const size_t P = p->h.pitch, rows = 2, cols = (size_t)p->nx;
        for (size_t i = 0; i < rows; i++)
            memcpy(p->h.f[CF_PRESSURE] + i * P, p->h.f[CF_ENERGY0] + (i + 2) * P + 2, cols * sizeof(double));
        return clover_cu_copy2d(p->d.f[CF_PRESSURE], P, p->d.f[CF_ENERGY0] + 2 * P + 2, P, cols, rows, NULL);
    }
    default: {
        const int m = k - K_MOM, vel = (m & 1) ? CF_YVEL1 : CF_XVEL1, dir = (m & 2) ? 2 : 1, sweep = (m & 4) ? 2 : 1;
        clover_k_advec_mom(&p->h, vel, dir, sweep);
        return clover_cu_advec_mom(&p->d, vel, dir, sweep, NULL);
    }
    }
}

static void kernels_case(int nx, int ny, int rev)
{
    pair p;
    if (pair_init(&p, nx, ny) != 0) {
        CHECK(0, "%d x %d: out of memory", nx, ny);
        pair_free(&p);
        return;
    }
    int32_t *err_d = NULL;
    double *scalars_d = NULL; /* dt_min, then CS_N sums twice */
    CHECK(cudaMalloc((void **)&err_d, sizeof *err_d) == cudaSuccess, "cudaMalloc");
    CHECK(cudaMalloc((void **)&scalars_d, (1 + 2 * CS_N) * sizeof(double)) == cudaSuccess, "cudaMalloc");
    char first[200], nb[64];
    for (int k = 0; k < K_N; k++) {
        fill(&p, (unsigned long long)(nx * 1000003 + ny * 7919 + k));
        upload(&p);
        const int32_t zero = 0;
        cudaMemcpyAsync(err_d, &zero, sizeof zero, cudaMemcpyHostToDevice, NULL);
        int err_h;
        const int rc = run_kernel(&p, k, err_d, &err_h);
        CHECK(rc == 0, "%d x %d, %s: %s: cudaError %d", nx, ny, order_name(rev), kname(k, nb, sizeof nb), rc);
        const int bad = differ(&p, first, sizeof first);
        CHECK(bad == 0, "%d x %d, %s: %s: %d values differ from the host kernel's, the first %s", nx, ny,
              order_name(rev), kname(k, nb, sizeof nb), bad, first);
        if (k == K_PDV0 || k == K_PDV1) {
            int32_t e = -1;
            cudaMemcpyAsync(&e, err_d, sizeof e, cudaMemcpyDeviceToHost, NULL);
            CHECK(e == err_h, "%d x %d: %s: the error flag is %d on the device, %d on the host", nx, ny,
                  kname(k, nb, sizeof nb), (int)e, err_h);
        }
    }

    /* calc_dt: the minimum, with WORK1 (blocks' minima, then a fold) and
     * without it (one block) */
    fill(&p, (unsigned long long)(nx * 31 + ny));
    upload(&p);
    {
        clover_deck d = {.dtc_safe = 0.7, .dtu_safe = 0.5, .dtv_safe = 0.5, .dtdiv_safe = 0.7};
        clover_chunk c = {.nx = nx, .ny = ny};
        const double want = clover_k_calc_dt(&p.h, &d, &c).dt;
        for (int with_work = 1; with_work >= 0; with_work--) {
            clover_view v = p.d;
            if (!with_work)
                v.f[CF_WORK1] = NULL;
            const double inf = INFINITY;
            double got = 0;
            cudaMemcpyAsync(scalars_d, &inf, sizeof inf, cudaMemcpyHostToDevice, NULL);
            CHECK(clover_cu_calc_dt(&v, &d, scalars_d, NULL) == 0, "%d x %d: calc_dt failed", nx, ny);
            cudaMemcpyAsync(&got, scalars_d, sizeof got, cudaMemcpyDeviceToHost, NULL);
            CHECK(memcmp(&got, &want, sizeof got) == 0, "%d x %d, %s: calc_dt%s: %.17g on the device, %.17g on the host",
                  nx, ny, order_name(rev), with_work ? "" : " in one block", got, want);
        }
    }
    /* field_summary: to 1e-12, and the same bits both ways */
    {
        double want[CS_N], got[2][CS_N];
        clover_k_field_summary(&p.h, want);
        for (int with_work = 1; with_work >= 0; with_work--) {
            clover_view v = p.d;
            if (!with_work)
                v.f[CF_WORK1] = NULL;
            double *sums = scalars_d + 1 + (size_t)with_work * CS_N;
            cudaMemsetAsync(sums, 0, CS_N * sizeof(double), NULL);
            CHECK(clover_cu_field_summary(&v, sums, NULL) == 0, "%d x %d: field_summary failed", nx, ny);
            cudaMemcpyAsync(got[with_work], sums, sizeof got[0], cudaMemcpyDeviceToHost, NULL);
            for (int i = 0; i < CS_N; i++)
                CHECK(rel(got[with_work][i], want[i]) < 1e-12,
                      "%d x %d, %s: field_summary[%d]%s: %.17g on the device, %.17g on the host", nx, ny,
                      order_name(rev), i, with_work ? "" : " in one block", got[with_work][i], want[i]);
        }
        CHECK(!memcmp(got[0], got[1], sizeof got[0]), "%d x %d: field_summary: one block and many differ", nx, ny);
    }
    /* a view missing a field the kernel needs: refused, nothing queued */
    {
        clover_view v = p.d;
        v.f[CF_VISCOSITY] = NULL;
        const unsigned long long before = clover_emu_launches();
        CHECK(clover_cu_viscosity(&v, NULL) == cudaErrorInvalidValue, "viscosity without its field: not refused");
        CHECK(clover_emu_launches() == before, "viscosity without its field: a kernel was launched");
    }
    cudaFree(err_d);
    cudaFree(scalars_d);
    pair_free(&p);
}

/* Whether (j, k) is a ghost of field f of an nx x ny chunk. */
static int ghost_of(int f, int j, int k, int nx, int ny)
{
    const int xn = f == CF_XVEL1 || f == CF_YVEL1 || f == CF_VOL_FLUX_X || f == CF_MASS_FLUX_X;
    const int yn = f == CF_XVEL1 || f == CF_YVEL1 || f == CF_VOL_FLUX_Y || f == CF_MASS_FLUX_Y;
    return j < 0 || k < 0 || j >= nx + xn || k >= ny + yn;
}

/* Field f's ghosts on the device: set from src (a host array of the
 * field's shape), or (src NULL) made up. */
static void set_ghosts(const pair *p, int f, const double *src, unsigned long long *x)
{
    double *buf = malloc(p->fc * sizeof(double));
    if (!buf) {
        CHECK(0, "out of memory");
        return;
    }
    cudaMemcpyAsync(buf, p->d.f[f], p->fc * sizeof(double), cudaMemcpyDeviceToHost, NULL);
    for (int k = -2; k <= p->ny + 2; k++)
        for (int j = -2; j <= p->nx + 2; j++)
            if (ghost_of(f, j, k, p->nx, p->ny)) {
                const size_t i = (size_t)(k + 2) * p->h.pitch + (size_t)(j + 2);
                buf[i] = src ? src[i] : lcg(x, 2.0, 3.0);
            }
    cudaMemcpyAsync(p->d.f[f], buf, p->fc * sizeof(double), cudaMemcpyHostToDevice, NULL);
    free(buf);
}

/* One advection kernel (mom 0: advec_cell; 1: advec_mom of vel) over
 * clover_advec_split's parts on the device, out of place, against the
 * host's whole kernel: the interior while the ghosts of every field a
 * halo update brings hold other values, the border strips after they are
 * back (as test_clover split does for the host parts). */
static void advec_parts_case(int nx, int ny, int mom, int vel, int dir, int sweep)
{
    pair p;
    double *out_d = NULL;
    if (pair_init(&p, nx, ny) != 0 || cudaMalloc((void **)&out_d, 3 * p.fc * sizeof(double)) != cudaSuccess) {
        CHECK(0, "%d x %d: out of memory", nx, ny);
        pair_free(&p);
        return;
    }
    fill(&p, (unsigned long long)(nx * 7919 + ny * 31 + mom * 7 + dir * 3 + sweep));
    upload(&p);
    clover_view out = p.d; /* density1, energy1 and vel into arrays of their own */
    out.f[CF_DENSITY1] = out_d;
    out.f[CF_ENERGY1] = out_d + p.fc;
    out.f[vel ? vel : CF_XVEL1] = out_d + 2 * p.fc;
    static const int halo_fields[] = {CF_DENSITY1,   CF_ENERGY1,    CF_XVEL1,       CF_YVEL1,
                                      CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y};
    const size_t nh = sizeof halo_fields / sizeof halo_fields[0];
    unsigned long long x = (unsigned long long)(nx + 3 * ny);
    for (size_t h = 0; h < nh; h++)
        set_ghosts(&p, halo_fields[h], NULL, &x);
    clover_range r[5];
    clover_advec_split(nx, ny, mom, dir, r);
    int rc = mom ? clover_cu_advec_mom_range(&p.d, vel, dir, sweep, &r[0], &out, NULL)
                 : clover_cu_advec_cell_range(&p.d, dir, sweep, &r[0], &out, NULL);
    CHECK(rc == 0, "%d x %d: the interior part failed: %d", nx, ny, rc);
    for (size_t h = 0; h < nh; h++)
        set_ghosts(&p, halo_fields[h], p.h.f[halo_fields[h]], NULL);
    for (int i = 1; i < 5; i++) {
        rc = mom ? clover_cu_advec_mom_range(&p.d, vel, dir, sweep, &r[i], &out, NULL)
                 : clover_cu_advec_cell_range(&p.d, dir, sweep, &r[i], &out, NULL);
        CHECK(rc == 0, "%d x %d: border part %d failed: %d", nx, ny, i, rc);
    }
    if (mom)
        clover_k_advec_mom(&p.h, vel, dir, sweep);
    else
        clover_k_advec_cell(&p.h, dir, sweep);
    /* the updated fields over the kernel's domain, and every element of the mass flux */
    double *buf = malloc(p.fc * sizeof(double));
    int bad = 0;
    const int upd[2] = {mom ? vel : CF_DENSITY1, mom ? vel : CF_ENERGY1};
    const int dj = mom ? nx + 1 : nx, dk = mom ? ny + 1 : ny;
    for (int u = 0; u < 2 && buf; u++) {
        cudaMemcpyAsync(buf, out.f[upd[u]], p.fc * sizeof(double), cudaMemcpyDeviceToHost, NULL);
        for (int k = 0; k < dk; k++)
            for (int j = 0; j < dj; j++) {
                const size_t i = (size_t)(k + 2) * p.h.pitch + (size_t)(j + 2);
                bad += memcmp(&buf[i], &p.h.f[upd[u]][i], sizeof(double)) != 0;
            }
    }
    if (!mom && buf) {
        const int mf = dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y;
        cudaMemcpyAsync(buf, p.d.f[mf], p.fc * sizeof(double), cudaMemcpyDeviceToHost, NULL);
        for (int k = -2; k <= ny + 2; k++)
            for (int j = -2; j <= nx + 2; j++) {
                const size_t i = (size_t)(k + 2) * p.h.pitch + (size_t)(j + 2);
                /* the whole kernel also stores the flux on the face past the last (a ghost face) */
                if (!ghost_of(mf, j, k, nx, ny) || (dir == 1 ? j == nx + 1 && k >= 0 && k < ny
                                                             : k == ny + 1 && j >= 0 && j < nx))
                    bad += memcmp(&buf[i], &p.h.f[mf][i], sizeof(double)) != 0;
            }
    }
    CHECK(buf && bad == 0, "%d x %d: %s%s along %s, sweep %d: on the device part by part, %d values differ from "
                           "the host's whole kernel",
          nx, ny, mom ? "advec_mom of " : "advec_cell", mom ? clover_field_name(vel) : "", dir == 1 ? "x" : "y",
          sweep, bad);
    free(buf);
    cudaFree(out_d);
    pair_free(&p);
}

static int test_kernels(void)
{
    static const int shapes[][2] = {{1, 1}, {2, 3}, {10, 2}, {64, 4}, {65, 5}, {3, 70}, {130, 97}};
    for (int rev = 0; rev < 2; rev++) {
        clover_emu_set_reverse(rev);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            kernels_case(shapes[i][0], shapes[i][1], rev);
        static const int adv_shapes[][2] = {{1, 1}, {3, 2}, {4, 4}, {5, 9}, {12, 7}, {66, 5}, {31, 40}};
        for (size_t i = 0; i < sizeof adv_shapes / sizeof adv_shapes[0]; i++)
            for (int dir = 1; dir <= 2; dir++)
                for (int sweep = 1; sweep <= 2; sweep++) {
                    advec_parts_case(adv_shapes[i][0], adv_shapes[i][1], 0, 0, dir, sweep);
                    advec_parts_case(adv_shapes[i][0], adv_shapes[i][1], 1, CF_XVEL1, dir, sweep);
                    advec_parts_case(adv_shapes[i][0], adv_shapes[i][1], 1, CF_YVEL1, dir, sweep);
                }
    }
    clover_emu_set_reverse(0);
    CHECK(clover_emu_live_bytes() == 0, "%zu bytes left allocated", clover_emu_live_bytes());
    return failures;
}

/* ---- loop: plain_cuda.c's time step against the oracle -------------------- */

static void loop_case(const clover_deck *d, const char *what, int rev)
{
    const size_t n = (size_t)d->x_cells * (size_t)d->y_cells;
    double *od = malloc(n * sizeof(double)), *oe = malloc(n * sizeof(double));
    double *gd = malloc(n * sizeof(double)), *ge = malloc(n * sizeof(double));
    if (!od || !oe || !gd || !ge) {
        CHECK(0, "out of memory");
        goto out;
    }
    double want[CS_N];
    clover_serial_out so = {.density = od, .energy = oe};
    if (clover_serial_run(d, 1, NULL, want, &so) != 0) {
        CHECK(0, "%s: the oracle failed", what);
        goto out;
    }
    clover_emu_set_reverse(rev);
    clover_plain_result res = {.density = gd, .energy = ge};
    const int rc = clover_plain_cuda_run(d, NULL, &res);
    clover_emu_set_reverse(0);
    CHECK(rc == 0, "%s, %s: the CUDA loop failed", what, order_name(rev));
    if (rc != 0)
        goto out;
    CHECK(res.steps == so.steps, "%s: %d steps, the oracle %d", what, res.steps, so.steps);
    CHECK(res.time == so.time, "%s: time %.17g, the oracle %.17g", what, res.time, so.time);
    int bd = 0, be = 0;
    for (size_t i = 0; i < n; i++) {
        bd += memcmp(&gd[i], &od[i], sizeof(double)) != 0;
        be += memcmp(&ge[i], &oe[i], sizeof(double)) != 0;
    }
    CHECK(bd == 0 && be == 0, "%s, %s: %d densities and %d energies differ from the oracle's", what, order_name(rev),
          bd, be);
    for (int i = 0; i < CS_N; i++)
        CHECK(rel(res.sums[i], want[i]) < 1e-12, "%s: summary[%d] %.17g, the oracle %.17g", what, i, res.sums[i],
              want[i]);
    if (d->test_problem)
        CHECK(res.verified, "%s: no PASS (kinetic energy %.17g)", what, res.sums[CS_KE]);
    CHECK(clover_emu_live_bytes() == 0, "%s: %zu bytes left allocated", what, clover_emu_live_bytes());
    printf("  %s, %s: %d steps, kinetic energy %.15g, fields the oracle's\n", what, order_name(rev), res.steps,
           res.sums[CS_KE]);
out:
    free(od);
    free(oe);
    free(gd);
    free(ge);
}

static int load(const char *dir, const char *name, clover_deck *d)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (clover_deck_load(path, d, err, sizeof err) != 0) {
        CHECK(0, "%s", err);
        return -1;
    }
    return 0;
}

static int test_loop(const char *dir)
{
    clover_deck d;
    if (load(dir, "clover_tp1.in", &d) == 0)
        for (int rev = 0; rev < 2; rev++)
            loop_case(&d, "clover_tp1.in", rev);
    if (load(dir, "clover_bm_short.in", &d) == 0) {
        d.end_step = 6;
        d.test_problem = 0; /* cut: the reference energy is not its */
        d.x_cells = 136;
        d.y_cells = 72;
        for (int rev = 0; rev < 2; rev++)
            loop_case(&d, "clover_bm_short.in at 136 x 72, 6 steps", rev);
        d.x_cells = 65;
        d.y_cells = 130;
        loop_case(&d, "clover_bm_short.in at 65 x 130, 6 steps", 0);
    }
    return failures;
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "kernels")) {
        int rc = test_kernels();
        if (!rc)
            printf("test_clover_cuemu kernels: all passed\n");
        return rc ? 1 : 0;
    }
    if (argc == 3 && !strcmp(argv[1], "loop")) {
        int rc = test_loop(argv[2]);
        if (!rc)
            printf("test_clover_cuemu loop: all passed\n");
        return rc ? 1 : 0;
    }
    fprintf(stderr, "usage: test_clover_cuemu kernels | loop DECKS\n");
    return 2;
}
