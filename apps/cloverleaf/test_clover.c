/* CloverLeaf runs checked against the sequential oracle.
 *
 *   test_clover tp1 DECKS     clover_tp1.in: the oracle PASSes; the Weft
 *                             driver on cpu (1 and 2 chunks) and on
 *                             cpu,vgpu:4 (in the virtual GPUs' checking mode
 *                             too) PASSes with the oracle's density and
 *                             energy fields bit for bit and kinetic energies
 *                             equal to 1e-12 relative; so does cpu,vgpu:2
 *                             with 2 more chunks on the CPU (checking mode);
 *                             and so do cpu (2 chunks) and cpu,vgpu:4
 *                             (checking mode) with --no-split
 *   test_clover decomp DECKS  clover_bm_short.in cut to a few steps on a
 *                             480 x 480 mesh (120 x 120 under the
 *                             sanitizers): the step-0
 *                             summary is the deck's (volume 100, mass 28,
 *                             density 0.28, pressure 0.172, internal energy
 *                             43, kinetic energy 0); every decomposition (2
 *                             and 4 chunks on the CPU, cpu,vgpu:4, 3 virtual
 *                             GPUs, and GPU chunks beside CPU chunks:
 *                             cpu,vgpu:2 with 2 chunks on the CPU, 2 x 2,
 *                             and cpu,vgpu:1 with 2, 3 x 1) gives the single
 *                             chunk's fields bit for bit and its summary to
 *                             1e-12 relative
 *   test_clover mpi DECKS     under mpiexec (2 ranks): clover_tp1.in PASSes
 *                             with the oracle's summary to 1e-12 relative
 *                             and every rank gets the oracle's whole
 *                             density and energy fields bit for bit, on cpu
 *                             (1 and 2 chunks a rank), on cpu,vgpu:2, and on
 *                             cpu,vgpu:1 with a chunk on the CPU beside the
 *                             GPU's; the cut bm deck likewise (2 x 2 chunks:
 *                             corners across ranks), and its picture (--png, rank 0)
 *                             is byte for byte the one of the oracle's
 *                             density; and with the advection split
 *                             (cpu, 2 x 2, and cpu,vgpu:2)
 *   test_clover split         clover_split's five parts cover a kernel's
 *                             domain once, and viscosity and accelerate
 *                             computed part by part give the whole
 *                             kernel's fields bit for bit (meshes down to
 *                             1 x 1, interiors empty); so do the
 *                             advection kernels out of place over
 *                             clover_advec_split's parts, the interior
 *                             computed while every exchanged field's
 *                             ghosts hold other values */
#include "clover.h"
#include "run_weft.h"
#include "serial.h"

#include <weft.h>

#ifdef CLOVER_CUDA_ON_VGPU
#include <cuda_runtime_api.h> /* the emulation's (cuda_emu/) */
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
static int split_mode; /* the runs' clover_weft_opts.split */
static int split_adv;  /* and .split_advection */

#include "test_check.h"

/* Whether this build runs slowly: under a sanitizer, or on the CUDA
 * emulation (a launch is a loop calling the kernel per thread). */
static int slow_build(void)
{
#ifdef CLOVER_CUDA_ON_VGPU
    return 1;
#else
    const char *s = getenv("WEFT_TEST_SCALE");
    return s && !strcmp(s, "sanitizer");
#endif
}

static void load(const char *dir, const char *name, clover_deck *d)
{
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (clover_deck_load(path, d, err, sizeof err) != 0) {
        fprintf(stderr, "FAIL: %s\n", err);
        exit(1);
    }
}

static double rel(double a, double b)
{
    double m = fmax(fabs(a), fabs(b));
    return m == 0 ? 0 : fabs(a - b) / m;
}

typedef struct outcome {
    double sums[CS_N];
    double *density, *energy;
} outcome;

static void outcome_init(outcome *o, const clover_deck *d)
{
    size_t n = (size_t)d->x_cells * (size_t)d->y_cells;
    o->density = calloc(n, sizeof(double));
    o->energy = calloc(n, sizeof(double));
    if (!o->density || !o->energy) {
        fprintf(stderr, "FAIL: out of memory\n");
        exit(1);
    }
}

static void outcome_free(outcome *o)
{
    free(o->density);
    free(o->energy);
}

/* One run of the Weft driver, compared with the oracle's. */
static void weft_case_cpu(const clover_deck *d, const outcome *want, const char *devices, int chunks,
                          int cpu_chunks, int check_mode, int need_pass)
{
    outcome got;
    outcome_init(&got, d);
    if (check_mode)
        setenv("WEFT_VGPU_CHECK", "1", 1);
    clover_weft_opts o = {.devices = devices, .chunks = chunks, .cpu_chunks = cpu_chunks, .density = got.density,
                          .energy = got.energy, .split = split_mode,
                          .split_advection = split_adv};
    clover_weft_result r;
    int rc = clover_weft_run(d, &o, &r);
    unsetenv("WEFT_VGPU_CHECK");
    char what[160];
    snprintf(what, sizeof what, "%s, %d chunk(s)%s%s%s%s", devices, chunks ? chunks : r.nchunks,
             cpu_chunks ? " (some on the CPU beside the GPUs')" : "", check_mode ? ", checking mode" : "",
             split_mode == CLOVER_SPLIT_ON ? ", split" : split_mode == CLOVER_SPLIT_OFF ? ", no split" : "",
             split_adv ? ", advection split" : "");
    CHECK(rc == 0, "%s: the run failed", what);
    if (rc == 0) {
        memcpy(got.sums, r.sums, sizeof got.sums);
        for (int i = 0; i < CS_N; i++)
            CHECK(rel(got.sums[i], want->sums[i]) <= 1e-12, "%s: summary %d: %.17g, oracle %.17g", what, i,
                  got.sums[i], want->sums[i]);
        size_t n = (size_t)d->x_cells * (size_t)d->y_cells, bad = 0;
        for (size_t i = 0; i < n; i++)
            if (memcmp(&got.density[i], &want->density[i], sizeof(double)) ||
                memcmp(&got.energy[i], &want->energy[i], sizeof(double)))
                bad++;
        CHECK(bad == 0, "%s: %zu cells differ from the oracle's", what, bad);
        if (need_pass)
            CHECK(clover_verify(NULL, d, got.sums[CS_KE]) == 1, "%s: kinetic energy %.15g does not PASS", what,
                  got.sums[CS_KE]);
        printf("ok %s: %d chunks (%d x %d), ke %.15g\n", what, r.nchunks, r.chunks_x, r.chunks_y,
               got.sums[CS_KE]);
    }
    outcome_free(&got);
}

static void weft_case(const clover_deck *d, const outcome *want, const char *devices, int chunks, int check_mode,
                      int need_pass)
{
    weft_case_cpu(d, want, devices, chunks, 0, check_mode, need_pass);
}

static void oracle(const clover_deck *d, int chunks, outcome *o)
{
    outcome_init(o, d);
    clover_serial_out so = {.density = o->density, .energy = o->energy};
    if (clover_serial_run(d, chunks, NULL, o->sums, &so) != 0) {
        fprintf(stderr, "FAIL: the sequential oracle failed\n");
        exit(1);
    }
}

static int test_tp1(const char *dir)
{
    clover_deck d;
    load(dir, "clover_tp1.in", &d);
    outcome want;
    oracle(&d, 1, &want);
    CHECK(clover_verify(stdout, &d, want.sums[CS_KE]) == 1, "the oracle does not PASS test problem 1");
    weft_case(&d, &want, "cpu", 1, 0, 1);
    weft_case(&d, &want, "cpu", 2, 0, 1);
    weft_case(&d, &want, "cpu,vgpu:4", 0, 0, 1);
    weft_case(&d, &want, "cpu,vgpu:2", 0, 1, 1);
    weft_case_cpu(&d, &want, "cpu,vgpu:2", 0, 2, 1, 1); /* 2 chunks on GPUs, 2 on the CPU */
    /* the default splits on GPUs only: the other way round as well */
    split_mode = CLOVER_SPLIT_ON;
    weft_case(&d, &want, "cpu", 2, 0, 1);
    split_adv = 1; /* the advection kernels split too */
    weft_case(&d, &want, "cpu", 2, 0, 1);
    split_mode = CLOVER_SPLIT_AUTO;
    weft_case(&d, &want, "cpu,vgpu:4", 0, 0, 1);
    weft_case(&d, &want, "cpu,vgpu:2", 0, 1, 1);
    split_adv = 0;
    split_mode = CLOVER_SPLIT_OFF;
    weft_case(&d, &want, "cpu,vgpu:4", 0, 1, 1);
    split_mode = CLOVER_SPLIT_AUTO;
    outcome_free(&want);
    return failures ? 1 : 0;
}

/* A value in [lo, hi) from a small linear congruential generator. */
static double lcg(unsigned long long *x, double lo, double hi)
{
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return lo + (hi - lo) * (double)(*x >> 11) / 9007199254740992.0;
}

/* One mesh of nx x ny cells: viscosity and accelerate whole and part by
 * part over made-up fields, compared bit for bit. */
static void split_case(int nx, int ny)
{
    size_t fc = clover_field_count(nx, ny), gc = clover_geom_count(nx, ny);
    double *whole = malloc((CF_NFIELDS * fc + gc) * sizeof(double));
    double *parts = malloc((CF_NFIELDS * fc + gc) * sizeof(double));
    if (!whole || !parts) {
        CHECK(0, "out of memory");
        free(whole);
        free(parts);
        return;
    }
    unsigned long long x = (unsigned long long)(nx * 131 + ny);
    for (size_t i = 0; i < CF_NFIELDS * fc + gc; i++)
        whole[i] = lcg(&x, 0.5, 1.5); /* densities, volumes, areas, cell sizes: positive */
    for (int f = CF_XVEL0; f <= CF_YVEL1; f++)
        for (size_t i = 0; i < fc; i++)
            whole[(size_t)f * fc + i] = lcg(&x, -1.0, 1.0);
    memcpy(parts, whole, (CF_NFIELDS * fc + gc) * sizeof(double));
    clover_view vw = {.nx = nx, .ny = ny, .pitch = (size_t)nx + 5, .geom = whole + CF_NFIELDS * fc};
    clover_view vp = {.nx = nx, .ny = ny, .pitch = (size_t)nx + 5, .geom = parts + CF_NFIELDS * fc};
    for (int f = 0; f < CF_NFIELDS; f++) {
        vw.f[f] = whole + (size_t)f * fc;
        vp.f[f] = parts + (size_t)f * fc;
    }
    clover_k_viscosity(&vw);
    clover_k_accelerate(&vw, 0.04);
    clover_range r[5];
    clover_split(nx, ny, 1, r);
    for (int i = 0; i < 5; i++)
        clover_k_viscosity_range(&vp, &r[i]);
    clover_split(nx + 1, ny + 1, 1, r);
    for (int i = 0; i < 5; i++)
        clover_k_accelerate_range(&vp, 0.04, &r[i]);
    CHECK(!memcmp(whole, parts, (CF_NFIELDS * fc + gc) * sizeof(double)),
          "%d x %d: viscosity or accelerate part by part differ from the whole kernels", nx, ny);
    free(whole);
    free(parts);
}

/* Whether (j, k) is a ghost of field f (beyond the cells, nodes or faces
 * the chunk holds) for a chunk of nx x ny cells. */
static int is_ghost(int f, int j, int k, int nx, int ny)
{
    int jn = nx, kn = ny; /* the last index held */
    if (f == CF_XVEL1 || f == CF_YVEL1 || f == CF_VOL_FLUX_X || f == CF_MASS_FLUX_X)
        jn = nx + 1;
    if (f == CF_XVEL1 || f == CF_YVEL1 || f == CF_VOL_FLUX_Y || f == CF_MASS_FLUX_Y)
        kn = ny + 1;
    return j < 0 || j >= jn || k < 0 || k >= kn;
}

/* One advection kernel (mom 0: advec_cell, 1: advec_mom of vel) on a mesh
 * of nx x ny cells over made-up fields, whole in place and out of place
 * part by part (clover_advec_split): the interior first, with the ghosts
 * of every field a halo update brings replaced by other values, then the
 * border strips with the ghosts back (as the drivers' split runs them,
 * across a halo update).  The updated fields, and the mass flux, must be
 * the whole kernel's bit for bit. */
static void advec_split_case(int nx, int ny, int mom, int vel, int dir, int sweep)
{
    size_t fc = clover_field_count(nx, ny), gc = clover_geom_count(nx, ny), all = CF_NFIELDS * fc + gc;
    double *base = malloc(all * sizeof(double)), *whole = malloc(all * sizeof(double));
    double *parts = malloc(all * sizeof(double)), *out = malloc(CF_NFIELDS * fc * sizeof(double));
    if (!base || !whole || !parts || !out) {
        CHECK(0, "out of memory");
        free(base);
        free(whole);
        free(parts);
        free(out);
        return;
    }
    unsigned long long x = (unsigned long long)(nx * 7919 + ny * 31 + mom * 7 + dir * 3 + sweep);
    for (size_t i = 0; i < all; i++)
        base[i] = lcg(&x, 0.5, 1.5); /* densities, energies, volumes, cell sizes: positive */
    static const int signed_fields[] = {CF_XVEL1, CF_YVEL1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X,
                                        CF_MASS_FLUX_Y};
    for (size_t s = 0; s < sizeof signed_fields / sizeof signed_fields[0]; s++) {
        int f = signed_fields[s];
        double scale = f >= CF_VOL_FLUX_X ? 0.1 : 1.0; /* fluxes small beside the volumes */
        for (size_t i = 0; i < fc; i++)
            base[(size_t)f * fc + i] = lcg(&x, -scale, scale);
    }
    for (size_t i = 0; i < CF_NFIELDS * fc; i++)
        out[i] = lcg(&x, -9.0, 9.0);
    memcpy(whole, base, all * sizeof(double));
    memcpy(parts, base, all * sizeof(double));
    clover_view vw = {.nx = nx, .ny = ny, .pitch = (size_t)nx + 5, .geom = whole + CF_NFIELDS * fc};
    clover_view vp = vw, vo = vw;
    vp.geom = parts + CF_NFIELDS * fc;
    vo.geom = NULL;
    for (int f = 0; f < CF_NFIELDS; f++) {
        vw.f[f] = whole + (size_t)f * fc;
        vp.f[f] = parts + (size_t)f * fc;
        vo.f[f] = out + (size_t)f * fc;
    }
    /* the ghosts a halo update brings: other values until it "arrives" */
    static const int halo_fields[] = {CF_DENSITY1,   CF_ENERGY1,    CF_XVEL1,       CF_YVEL1,
                                      CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y};
    const size_t nh = sizeof halo_fields / sizeof halo_fields[0];
    for (size_t h = 0; h < nh; h++)
        for (int k = -2; k <= ny + 2; k++)
            for (int j = -2; j <= nx + 2; j++)
                if (is_ghost(halo_fields[h], j, k, nx, ny))
                    CLOVER_AT(&vp, halo_fields[h], j, k) = lcg(&x, 2.0, 3.0);
    clover_range r[5];
    clover_advec_split(nx, ny, mom, dir, r);
    if (mom) {
        clover_k_advec_mom(&vw, vel, dir, sweep);
        clover_k_advec_mom_range(&vp, vel, dir, sweep, &r[0], &vo);
    } else {
        clover_k_advec_cell(&vw, dir, sweep);
        clover_k_advec_cell_range(&vp, dir, sweep, &r[0], &vo);
    }
    for (size_t h = 0; h < nh; h++)
        for (int k = -2; k <= ny + 2; k++)
            for (int j = -2; j <= nx + 2; j++)
                if (is_ghost(halo_fields[h], j, k, nx, ny))
                    CLOVER_AT(&vp, halo_fields[h], j, k) = CLOVER_AT(&vw, halo_fields[h], j, k);
    if (!mom) /* the whole kernel's flux on the face past the last (a ghost face) is the border's to make */
        for (int k = -2; k <= ny + 2; k++)
            for (int j = -2; j <= nx + 2; j++)
                if (is_ghost(dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y, j, k, nx, ny))
                    CLOVER_AT(&vp, dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y, j, k) =
                        base[(size_t)(dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y) * fc +
                             (size_t)(k + 2) * vp.pitch + (size_t)(j + 2)];
    for (int i = 1; i < 5; i++) {
        if (mom)
            clover_k_advec_mom_range(&vp, vel, dir, sweep, &r[i], &vo);
        else
            clover_k_advec_cell_range(&vp, dir, sweep, &r[i], &vo);
    }
    /* the updated fields over the kernel's domain, and every element of the mass flux */
    int bad = 0;
    const int upd[2] = {mom ? vel : CF_DENSITY1, mom ? vel : CF_ENERGY1};
    const int dj = mom ? nx + 1 : nx, dk = mom ? ny + 1 : ny;
    for (int u = 0; u < 2; u++)
        for (int k = 0; k < dk; k++)
            for (int j = 0; j < dj; j++)
                bad += memcmp(&CLOVER_AT(&vo, upd[u], j, k), &CLOVER_AT(&vw, upd[u], j, k), sizeof(double)) != 0;
    if (!mom) {
        int mf = dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y;
        bad += memcmp(vp.f[mf], vw.f[mf], fc * sizeof(double)) != 0;
    }
    CHECK(bad == 0, "%d x %d: %s%s along %s, sweep %d: part by part, %d values differ from the whole kernel's", nx,
          ny, mom ? "advec_mom of " : "advec_cell", mom ? clover_field_name(vel) : "", dir == 1 ? "x" : "y", sweep,
          bad);
    free(base);
    free(whole);
    free(parts);
    free(out);
}

static int test_split(void)
{
    /* every index of a domain in exactly one part, the interior at least
     * `margin` from every side */
    for (int dx = 0; dx <= 7; dx++)
        for (int dy = 0; dy <= 7; dy++)
            for (int m = 1; m <= 2; m++) {
                clover_range r[5];
                clover_split(dx, dy, m, r);
                int bad = 0;
                for (int j = 0; j < dx; j++)
                    for (int k = 0; k < dy; k++) {
                        int n = 0;
                        for (int i = 0; i < 5; i++)
                            n += j >= r[i].j0 && j < r[i].j1 && k >= r[i].k0 && k < r[i].k1;
                        bad += n != 1;
                    }
                for (int i = 0; i < 5; i++)
                    bad += r[i].j0 < 0 || r[i].j1 > dx || r[i].k0 < 0 || r[i].k1 > dy;
                if (r[0].j1 > r[0].j0 && r[0].k1 > r[0].k0)
                    bad += r[0].j0 < m || r[0].j1 > dx - m || r[0].k0 < m || r[0].k1 > dy - m;
                CHECK(bad == 0, "clover_split(%d, %d, %d): %d indices or bounds wrong", dx, dy, m, bad);
            }
    static const int shapes[][2] = {{1, 1}, {1, 5}, {2, 2}, {3, 2}, {5, 7}, {17, 9}, {300, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        split_case(shapes[i][0], shapes[i][1]);
    static const int adv_shapes[][2] = {{2, 2}, {3, 5}, {4, 4}, {5, 7}, {17, 9}, {9, 17}, {64, 6}};
    for (size_t i = 0; i < sizeof adv_shapes / sizeof adv_shapes[0]; i++)
        for (int dir = 1; dir <= 2; dir++)
            for (int sweep = 1; sweep <= 2; sweep++) {
                advec_split_case(adv_shapes[i][0], adv_shapes[i][1], 0, 0, dir, sweep);
                advec_split_case(adv_shapes[i][0], adv_shapes[i][1], 1, CF_XVEL1, dir, sweep);
                advec_split_case(adv_shapes[i][0], adv_shapes[i][1], 1, CF_YVEL1, dir, sweep);
            }
    return failures ? 1 : 0;
}

static int test_decomp(const char *dir)
{
    clover_deck d;
    load(dir, "clover_bm_short.in", &d);
    /* A few steps on a coarser mesh (the same problem): 480 x 480 still
     * gives every chunk of the decompositions below interior cells, halo
     * cells and corners, at a quarter of the deck's cells; 120 x 120 under
     * the sanitizers. */
    d.end_step = 4;
    d.x_cells = slow_build() ? 120 : 480;
    d.y_cells = d.x_cells;
    outcome want;
    oracle(&d, 1, &want);
    /* The deck's step-0 field summary, from the run on cpu,vgpu:4. */
    double s0[CS_N];
    {
        outcome got;
        outcome_init(&got, &d);
        clover_weft_opts o = {.devices = "cpu,vgpu:4", .density = got.density, .energy = got.energy};
        clover_weft_result r;
        CHECK(clover_weft_run(&d, &o, &r) == 0, "cpu,vgpu:4: the run failed");
        memcpy(s0, r.sums0, sizeof s0);
        outcome_free(&got);
    }
    CHECK(fabs(s0[CS_VOL] - 100.0) < 1e-9, "step 0: volume %.17g, not 100", s0[CS_VOL]);
    CHECK(fabs(s0[CS_MASS] - 28.0) < 1e-9, "step 0: mass %.17g, not 28", s0[CS_MASS]);
    CHECK(fabs(s0[CS_MASS] / s0[CS_VOL] - 0.28) < 1e-12, "step 0: density %.17g, not 0.28", s0[CS_MASS] / s0[CS_VOL]);
    CHECK(fabs(s0[CS_PRESS] / s0[CS_VOL] - 0.172) < 1e-12, "step 0: pressure %.17g, not 0.172",
          s0[CS_PRESS] / s0[CS_VOL]);
    CHECK(fabs(s0[CS_IE] - 43.0) < 1e-9, "step 0: internal energy %.17g, not 43", s0[CS_IE]);
    CHECK(s0[CS_KE] == 0.0, "step 0: kinetic energy %.17g, not 0", s0[CS_KE]);
    printf("ok step 0: volume %g mass %g density %g pressure %g internal energy %g kinetic energy %g\n", s0[CS_VOL],
           s0[CS_MASS], s0[CS_MASS] / s0[CS_VOL], s0[CS_PRESS] / s0[CS_VOL], s0[CS_IE], s0[CS_KE]);
    /* The oracle split into chunks gives its single chunk's fields. */
    outcome split;
    oracle(&d, 4, &split);
    size_t n = (size_t)d.x_cells * (size_t)d.y_cells, bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += memcmp(&split.density[i], &want.density[i], sizeof(double)) != 0;
    CHECK(bad == 0, "the oracle on 4 chunks: %zu cells differ from 1 chunk", bad);
    outcome_free(&split);
    weft_case(&d, &want, "cpu", 2, 0, 0);
    weft_case(&d, &want, "cpu", 4, 0, 0);
    weft_case(&d, &want, "cpu,vgpu:4", 0, 0, 0);
    weft_case(&d, &want, "vgpu:3", 0, 0, 0);
    /* the split kernels (advection's too) across chunk corners: 2 x 2 on
     * the CPU (gather tasks) and on 4 virtual GPUs in the checking mode */
    split_mode = CLOVER_SPLIT_ON;
    split_adv = 1;
    weft_case(&d, &want, "cpu", 4, 0, 0);
    split_mode = CLOVER_SPLIT_AUTO;
    weft_case(&d, &want, "cpu,vgpu:4", 0, 1, 0);
    split_adv = 0;
    weft_case_cpu(&d, &want, "cpu,vgpu:2", 0, 2, 0, 0); /* 2 x 2: GPU and CPU chunks side by side and diagonal */
    weft_case_cpu(&d, &want, "cpu,vgpu:1", 0, 2, 0, 0); /* 3 x 1 */
    outcome_free(&want);
    return failures ? 1 : 0;
}

/* A file's bytes (*n of them), or NULL. */
static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    unsigned char *buf = NULL;
    size_t cap = 0;
    *n = 0;
    for (;;) {
        if (*n == cap) {
            unsigned char *nb = realloc(buf, cap ? 2 * cap : 65536);
            if (!nb)
                break;
            buf = nb;
            cap = cap ? 2 * cap : 65536;
        }
        size_t got = fread(buf + *n, 1, cap - *n, f);
        *n += got;
        if (got == 0)
            break;
    }
    fclose(f);
    return buf;
}

/* Across ranks: the summaries, and the fields every rank gathers (the
 * oracle's bit for bit); with png, rank 0's picture against the one drawn
 * from the oracle's density. */
static void mpi_case(const clover_deck *d, const outcome *want, const char *devices, int chunks, int cpu_chunks,
                     int need_pass, int png)
{
    outcome got;
    outcome_init(&got, d);
    char png_path[256] = "", ref_path[256] = "";
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    if (png) {
        /* rank 0's name (only rank 0 writes): the same on both ranks is not needed */
        snprintf(png_path, sizeof png_path, "%s/test_clover_mpi_%ld.png", tmp, (long)getpid());
        snprintf(ref_path, sizeof ref_path, "%s/test_clover_ref_%ld.png", tmp, (long)getpid());
    }
    clover_weft_opts o = {.devices = devices, .chunks = chunks, .cpu_chunks = cpu_chunks, .workers = 1, .mpi = 1,
                          .density = got.density, .energy = got.energy, .png_path = png ? png_path : NULL,
                          .split = split_mode, .split_advection = split_adv};
    clover_weft_result r;
    int rc = clover_weft_run(d, &o, &r);
    char what[200];
    snprintf(what, sizeof what, "rank %d of %d: %s, %d chunk(s) a rank%s%s%s", r.rank, r.nranks, devices,
             rc == 0 && r.nranks > 0 ? r.nchunks / r.nranks : 0, cpu_chunks ? " (GPU and CPU chunks)" : "",
             split_mode == CLOVER_SPLIT_ON ? ", split" : "", split_adv ? ", advection split" : "");
    CHECK(rc == 0, "%s: the run failed", what);
    if (rc != 0) {
        outcome_free(&got);
        return;
    }
    CHECK(r.nranks == 2, "%s: not 2 ranks", what);
    for (int i = 0; i < CS_N; i++)
        CHECK(rel(r.sums[i], want->sums[i]) <= 1e-12, "%s: summary %d: %.17g, oracle %.17g", what, i, r.sums[i],
              want->sums[i]);
    if (need_pass)
        CHECK(r.verified == 1, "%s: kinetic energy %.15g does not PASS", what, r.sums[CS_KE]);
    size_t n = (size_t)d->x_cells * (size_t)d->y_cells, bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got.density[i], &want->density[i], sizeof(double)) ||
            memcmp(&got.energy[i], &want->energy[i], sizeof(double)))
            bad++;
    CHECK(bad == 0, "%s: %zu cells of the gathered fields differ from the oracle's", what, bad);
    if (png && r.rank == 0) {
        CHECK(clover_write_png(ref_path, want->density, d->x_cells, d->y_cells, (size_t)d->x_cells) == 0,
              "writing %s failed", ref_path);
        size_t na = 0, nb = 0;
        unsigned char *a = slurp(png_path, &na), *b = slurp(ref_path, &nb);
        CHECK(a != NULL && na > 8 && !memcmp(a, "\x89PNG", 4), "%s: no picture in %s", what, png_path);
        CHECK(a && b && na == nb && !memcmp(a, b, na), "%s: the picture (%zu bytes) is not the oracle's (%zu bytes)",
              what, na, nb);
        free(a);
        free(b);
        remove(png_path);
        remove(ref_path);
    }
    printf("ok %s: %d chunks (%d x %d), ke %.15g, fields gathered%s\n", what, r.nchunks, r.chunks_x, r.chunks_y,
           r.sums[CS_KE], png && r.rank == 0 ? ", picture" : "");
    outcome_free(&got);
}

static int test_mpi(const char *dir)
{
    if (weft_mpi_init() != 0) {
        fprintf(stderr, "test_clover mpi: %s\n", weft_last_error());
        return 77;
    }
    clover_deck d;
    load(dir, "clover_tp1.in", &d);
    outcome want;
    oracle(&d, 1, &want);
    mpi_case(&d, &want, "cpu", 1, 0, 1, 0);
    mpi_case(&d, &want, "cpu", 2, 0, 1, 0);
    mpi_case(&d, &want, "cpu,vgpu:2", 0, 0, 1, 0);
    mpi_case(&d, &want, "cpu,vgpu:1", 0, 1, 1, 0);
    outcome_free(&want);
    load(dir, "clover_bm_short.in", &d);
    d.end_step = 3;
    d.x_cells = d.y_cells = 120;
    oracle(&d, 1, &want);
    mpi_case(&d, &want, "cpu", 2, 0, 0, 1);
    mpi_case(&d, &want, "cpu,vgpu:2", 0, 0, 0, 1);
    mpi_case(&d, &want, "cpu,vgpu:1", 0, 1, 0, 0); /* a GPU chunk and a CPU chunk a rank: 2 x 2 */
    /* the advection kernels split too, across ranks: CPU chunks (2 x 2)
     * and virtual GPUs */
    split_mode = CLOVER_SPLIT_ON;
    split_adv = 1;
    mpi_case(&d, &want, "cpu", 2, 0, 0, 0);
    mpi_case(&d, &want, "cpu,vgpu:2", 0, 0, 0, 0);
    split_mode = CLOVER_SPLIT_AUTO;
    split_adv = 0;
    outcome_free(&want);
    if (weft_mpi_finalize() != 0)
        CHECK(0, "MPI_Finalize: %s", weft_last_error());
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
#ifdef CLOVER_CUDA_ON_VGPU
    /* test_clover_cuvgpu: the virtual GPUs' chunks run kernels.cu on the
     * CUDA emulation, over the virtual GPUs' replicas */
    clover_emu_set_any_memory(1);
#endif
    if (argc == 2 && !strcmp(argv[1], "split")) {
        int rc = test_split();
        if (rc == 0)
            printf("test_clover split: all passed\n");
        return rc;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: test_clover tp1|decomp|mpi DECKS, or test_clover split\n");
        return 2;
    }
    int rc;
    if (!strcmp(argv[1], "tp1"))
        rc = test_tp1(argv[2]);
    else if (!strcmp(argv[1], "decomp"))
        rc = test_decomp(argv[2]);
    else if (!strcmp(argv[1], "mpi"))
        rc = test_mpi(argv[2]);
    else {
        fprintf(stderr, "test_clover: unknown part '%s'\n", argv[1]);
        return 2;
    }
#ifdef CLOVER_CUDA_ON_VGPU
    if (clover_emu_launches() == 0) {
        fprintf(stderr, "FAIL test_clover_cuvgpu %s: no chunk ran kernels.cu\n", argv[1]);
        rc = 1;
    }
#endif
    if (rc == 0)
        printf("test_clover %s: all passed\n", argv[1]);
    return rc;
}
