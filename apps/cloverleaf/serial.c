/* The sequential oracle (see serial.h).  The step follows the reference's
 * hydro cycle:
 *
 *   timestep    ideal gas; halo pressure, energy0, density0, xvel0, yvel0
 *               (depth 1); viscosity; halo viscosity (depth 1); the
 *               smallest dt of all chunks; the dt rules (clover_next_dt)
 *   PdV predict PdV (check); ideal gas on the predicted fields; halo
 *               pressure (depth 1); revert
 *   accelerate
 *   PdV         PdV (check)
 *   flux_calc
 *   advection   halo energy1, density1, vol_flux_x, vol_flux_y (depth 2);
 *               cell sweep 1; halo density1, energy1, xvel1, yvel1,
 *               mass_flux_x, mass_flux_y (depth 2); momentum sweep 1 of
 *               xvel1 then yvel1; cell sweep 2; the same halo; momentum
 *               sweep 2; the first sweep along x on odd steps, along y on
 *               even ones
 *   reset_field
 *
 * then time += dt, a field summary every summary_frequency steps, and the
 * end at the first step past end_time (within 1e-16) or at end_step.
 * Before the first step: initialise, generate, ideal gas, a depth-2 halo
 * of every field the step reads, and the step-0 summary. */
#include "serial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct schunk {
    clover_chunk c;
    double *mem;                 /* CF_NFIELDS arrays of clover_field_count doubles */
    double *geom;
    clover_view v;
} schunk;

typedef struct ssim {
    const clover_deck *d;
    int n, cx, cy;
    schunk *ch;
} ssim;

/* ---- halo updates ---------------------------------------------------------- */

static void copy_block(double *dst, size_t dpitch, size_t doff, const double *src, size_t spitch, size_t soff,
                       size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        memcpy(dst + doff + r * dpitch, src + soff + r * spitch, cols * sizeof(double));
}

/* Swap the strips of field f between chunk a and its neighbour b across
 * a's face `edge` (b's face `back`). */
static void swap_strips(schunk *a, schunk *b, int f, int depth, unsigned edge, unsigned back)
{
    clover_strip sa, sb;
    clover_halo_strip(&a->c, f, depth, edge, &sa);
    clover_halo_strip(&b->c, f, depth, back, &sb);
    if (sa.rows != sb.rows || sa.cols != sb.cols) {
        /* chunks in one row (column) of the grid share their height
         * (width), so this cannot happen with clover_decompose's chunks */
        fprintf(stderr, "clover serial: strips of %s do not match (%zu x %zu against %zu x %zu)\n",
                clover_field_name(f), sa.rows, sa.cols, sb.rows, sb.cols);
        abort();
    }
    copy_block(b->v.f[f], b->v.pitch, sb.recv_off, a->v.f[f], a->v.pitch, sa.send_off, sa.rows, sa.cols);
    copy_block(a->v.f[f], a->v.pitch, sa.recv_off, b->v.f[f], b->v.pitch, sb.send_off, sb.rows, sb.cols);
}

/* The exchange between chunks, left/right then bottom/top, and then the
 * mesh's boundary.  Within a phase a strip is read only from a chunk's own
 * cells (not the ghosts that phase writes), so the chunks can go in any
 * order. */
static void halo(ssim *s, const int *fields, int nfields, int depth)
{
    for (int i = 0; i < s->n; i++) {
        schunk *a = &s->ch[i];
        if (a->c.right >= 0)
            for (int q = 0; q < nfields; q++)
                swap_strips(a, &s->ch[a->c.right], fields[q], depth, CLOVER_RIGHT, CLOVER_LEFT);
    }
    for (int i = 0; i < s->n; i++) {
        schunk *a = &s->ch[i];
        if (a->c.top >= 0)
            for (int q = 0; q < nfields; q++)
                swap_strips(a, &s->ch[a->c.top], fields[q], depth, CLOVER_TOP, CLOVER_BOTTOM);
    }
    for (int i = 0; i < s->n; i++)
        if (s->ch[i].c.edges)
            clover_k_reflect(&s->ch[i].v, fields, nfields, depth, s->ch[i].c.edges);
}

#define HALO(s, depth, ...)                                                                              \
    do {                                                                                                 \
        const int fl_[] = {__VA_ARGS__};                                                                 \
        halo((s), fl_, (int)(sizeof fl_ / sizeof fl_[0]), (depth));                                      \
    } while (0)

#define EACH(s, call)                                                                                    \
    for (int i_ = 0; i_ < (s)->n; i_++) {                                                                \
        const clover_view *v = &(s)->ch[i_].v;                                                           \
        (void)v;                                                                                         \
        call;                                                                                            \
    }

/* ---- set-up -------------------------------------------------------------- */

static void sim_free(ssim *s)
{
    if (s->ch)
        for (int i = 0; i < s->n; i++) {
            free(s->ch[i].mem);
            free(s->ch[i].geom);
        }
    free(s->ch);
    s->ch = NULL;
}

static int sim_init(ssim *s, const clover_deck *d, int n)
{
    memset(s, 0, sizeof *s);
    s->d = d;
    s->n = n;
    if (n < 1) {
        fprintf(stderr, "clover serial: %d chunks: need at least one\n", n);
        return -1;
    }
    clover_chunk *cc = calloc((size_t)n, sizeof *cc);
    s->ch = calloc((size_t)n, sizeof *s->ch);
    if (!cc || !s->ch) {
        free(cc);
        fprintf(stderr, "clover serial: out of memory\n");
        return -1;
    }
    char err[256];
    if (clover_decompose(d, n, cc, &s->cx, &s->cy, err, sizeof err) != 0) {
        fprintf(stderr, "clover serial: %s\n", err);
        free(cc);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        schunk *k = &s->ch[i];
        k->c = cc[i];
        size_t fc = clover_field_count(k->c.nx, k->c.ny);
        k->mem = calloc(fc * CF_NFIELDS, sizeof(double));
        k->geom = calloc(clover_geom_count(k->c.nx, k->c.ny), sizeof(double));
        if (!k->mem || !k->geom) {
            free(cc);
            fprintf(stderr, "clover serial: out of memory for chunk %d (%d x %d cells)\n", i, k->c.nx, k->c.ny);
            return -1;
        }
        k->v.nx = k->c.nx;
        k->v.ny = k->c.ny;
        k->v.pitch = (size_t)k->c.nx + 5;
        for (int f = 0; f < CF_NFIELDS; f++)
            k->v.f[f] = k->mem + (size_t)f * fc;
        k->v.geom = k->geom;
    }
    free(cc);
    return 0;
}

/* ---- the step ---------------------------------------------------------------- */

static void field_summary(ssim *s, double sums[CS_N])
{
    for (int q = 0; q < CS_N; q++)
        sums[q] = 0.0;
    for (int i = 0; i < s->n; i++) {
        double part[CS_N] = {0};
        clover_k_ideal_gas(&s->ch[i].v, 0);
        clover_k_field_summary(&s->ch[i].v, part);
        for (int q = 0; q < CS_N; q++)
            sums[q] += part[q];
    }
}

static int pdv(ssim *s, int predict, double dt, int step)
{
    int bad = 0;
    for (int i = 0; i < s->n; i++)
        if (clover_k_pdv(&s->ch[i].v, predict, dt)) {
            fprintf(stderr, "clover serial: step %d: PdV%s: a cell's volume turns negative in chunk %d\n", step,
                    predict ? " (predictor)" : "", i);
            bad = 1;
        }
    return bad ? -1 : 0;
}

/* The timestep routine: returns the smallest dt of all chunks. */
static double timestep(ssim *s)
{
    EACH(s, clover_k_ideal_gas(v, 0));
    HALO(s, 1, CF_PRESSURE, CF_ENERGY0, CF_DENSITY0, CF_XVEL0, CF_YVEL0);
    EACH(s, clover_k_viscosity(v));
    HALO(s, 1, CF_VISCOSITY);
    double dt = 0.0;
    for (int i = 0; i < s->n; i++) {
        clover_dt r = clover_k_calc_dt(&s->ch[i].v, s->d, &s->ch[i].c);
        if (i == 0 || r.dt <= dt)
            dt = r.dt;
    }
    return dt;
}

static void advection(ssim *s, int advect_x)
{
    int dir = advect_x ? 1 : 2;
    HALO(s, 2, CF_ENERGY1, CF_DENSITY1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y);
    EACH(s, clover_k_advec_cell(v, dir, 1));
    HALO(s, 2, CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X, CF_MASS_FLUX_Y);
    EACH(s, clover_k_advec_mom(v, CF_XVEL1, dir, 1));
    EACH(s, clover_k_advec_mom(v, CF_YVEL1, dir, 1));
    dir = advect_x ? 2 : 1;
    EACH(s, clover_k_advec_cell(v, dir, 2));
    HALO(s, 2, CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X, CF_MASS_FLUX_Y);
    EACH(s, clover_k_advec_mom(v, CF_XVEL1, dir, 2));
    EACH(s, clover_k_advec_mom(v, CF_YVEL1, dir, 2));
}

static void gather(const ssim *s, int f, double *dst)
{
    const int w = s->d->x_cells;
    for (int i = 0; i < s->n; i++) {
        const schunk *k = &s->ch[i];
        for (int y = 0; y < k->c.ny; y++)
            memcpy(dst + (size_t)(k->c.y0 + y) * (size_t)w + (size_t)k->c.x0,
                   &CLOVER_AT(&k->v, f, 0, y), (size_t)k->c.nx * sizeof(double));
    }
}

static int run(ssim *s, FILE *out, double final_sums[CS_N], clover_serial_out *so)
{
    const clover_deck *d = s->d;

    for (int i = 0; i < s->n; i++) {
        clover_k_initialise(&s->ch[i].v, d, &s->ch[i].c);
        clover_k_generate(&s->ch[i].v, d);
    }
    EACH(s, clover_k_ideal_gas(v, 0));
    HALO(s, 2, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY, CF_DENSITY1, CF_ENERGY1, CF_XVEL0, CF_YVEL0,
         CF_XVEL1, CF_YVEL1);

    clover_clock clk = {.step = 0, .time = 0.0, .dt = d->dtinit, .dtold = d->dtinit};
    double sums[CS_N];
    field_summary(s, sums);
    if (out) {
        fprintf(out, " Serial oracle: %d x %d cells in %d chunks (%d x %d)\n", d->x_cells, d->y_cells, s->n, s->cx,
                s->cy);
        clover_print_summary_header(out);
        clover_print_summary(out, clk.step, clk.time, sums);
    }

    int advect_x = 1;
    for (;;) {
        clk.step++;
        double dt_chunks = timestep(s);
        if (clover_next_dt(d, &clk, dt_chunks) != 0)
            return -1;
        const double dt = clk.dt;

        if (pdv(s, 1, dt, clk.step) != 0)
            return -1;
        EACH(s, clover_k_ideal_gas(v, 1));
        HALO(s, 1, CF_PRESSURE);
        EACH(s, clover_k_revert(v));

        EACH(s, clover_k_accelerate(v, dt));

        if (pdv(s, 0, dt, clk.step) != 0)
            return -1;

        EACH(s, clover_k_flux_calc(v, dt));

        advection(s, advect_x);

        EACH(s, clover_k_reset_field(v));

        advect_x = !advect_x;
        clk.time += dt;

        const int last = clk.time + 1e-16 > d->end_time || clk.step >= d->end_step;
        const int periodic = d->summary_frequency > 0 && clk.step % d->summary_frequency == 0;
        if (periodic || last) {
            /* the reference summarises a last step that is also a
             * periodic one twice; the same row is printed once here */
            field_summary(s, sums);
            if (out)
                clover_print_summary(out, clk.step, clk.time, sums);
        }
        if (last)
            break;
    }

    if (out) {
        clover_verify(out, d, sums[CS_KE]);
        fflush(out);
    }
    if (final_sums)
        memcpy(final_sums, sums, sizeof sums);
    if (so) {
        so->steps = clk.step;
        so->time = clk.time;
        so->chunks_x = s->cx;
        so->chunks_y = s->cy;
        if (so->density)
            gather(s, CF_DENSITY0, so->density);
        if (so->energy)
            gather(s, CF_ENERGY0, so->energy);
    }
    return 0;
}

int clover_serial_run(const clover_deck *d, int nchunks, FILE *out, double final_sums[CS_N], clover_serial_out *so)
{
    ssim s;
    int rc = sim_init(&s, d, nchunks);
    if (rc == 0)
        rc = run(&s, out, final_sums, so);
    sim_free(&s);
    return rc;
}

#ifdef CLOVER_SERIAL_MAIN
/* clover-serial deck.in [nchunks]: exit 0 on PASS or when the deck has no
 * test problem (or none with a known answer), 1 on FAIL, 2 on an error. */
int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s deck.in [nchunks]\n", argv[0]);
        return 2;
    }
    int n = 1;
    if (argc == 3) {
        char *end;
        long v = strtol(argv[2], &end, 10);
        if (*argv[2] == '\0' || *end != '\0' || v < 1 || v > 65536) {
            fprintf(stderr, "%s: nchunks: not a count from 1 to 65536: '%s'\n", argv[0], argv[2]);
            return 2;
        }
        n = (int)v;
    }
    clover_deck d;
    char err[512];
    if (clover_deck_load(argv[1], &d, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", argv[0], err);
        return 2;
    }
    double sums[CS_N];
    if (clover_serial_run(&d, n, stdout, sums, NULL) != 0)
        return 2;
    return clover_verify(NULL, &d, sums[CS_KE]) == 0 ? 1 : 0;
}
#endif
