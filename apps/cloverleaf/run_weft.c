/* The C driver over Weft (run_weft.h says what it does). */
#include "run_weft.h"
#include "run_weft_int.h"

#include <weft.h>
#ifdef CLOVER_HAVE_CUDA
#include "call_cuda.h"
#endif

#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- kernels as jobs ----------------------------------------------------- */

/* The kernels' names (tasks, the profile), in enum kern's order. */

/* The fields whose halo updates are staged (sim.split): those of the two
 * updates that viscosity and accelerate follow, then (sim.split_adv) the
 * advection's. */
static const int staged_fields[] = {CF_PRESSURE,   CF_ENERGY0,    CF_DENSITY0,    CF_XVEL0,      CF_YVEL0,
                                    CF_VISCOSITY,  CF_DENSITY1,   CF_ENERGY1,     CF_XVEL1,      CF_YVEL1,
                                    CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y};
#define NSTAGED_VA 6 /* viscosity's and accelerate's */
#define NSTAGED ((int)(sizeof staged_fields / sizeof staged_fields[0]))
/* The fields the advection kernels update (a second array each: chunk_rt.out). */
static const int advected_fields[] = {CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1};
#define NADVECTED ((int)(sizeof advected_fields / sizeof advected_fields[0]))

/* A job's body on the host (a CPU task) or a virtual GPU's stream thread:
 * its call (call.h), which adds its time to the profile. */
static int job_run(void *arg)
{
    return clover_call_run(&((job *)arg)->k);
}

static size_t acc_bytes(const job *j, size_t i)
{
    const chunk_rt *cr = &j->s->ch[j->chunk];
    if (j->what[i] >= 0 || j->what[i] <= W_STAGE) /* a field, its staging array or its second array */
        return cr->fbytes;
    if (j->what[i] == W_GEOM)
        return cr->gbytes;
    void *p;
    size_t n = 0;
    if (weft_data_host(j->acc[i].data, &p, &n) != 0)
        return 0;
    return n;
}

#ifdef CLOVER_HAVE_CUDA
#ifdef CLOVER_CUDA_ON_VGPU
#define CUDA_KIND WEFT_DEVICE_VGPU /* the devices whose chunks run kernels.cu */
/* The tests' build over the CUDA emulation (cuda_emu/; test_clover_cuvgpu):
 * virtual GPUs stand in for CUDA devices, so that clover_cu_call_run, the
 * CUDA unpack and kernels.cu's kernels (parts included) run in the driver here.
 * The emulation runs a launch when it is made, so the job's launches are
 * made by the virtual GPU's stream thread, in the stream's order, as a
 * GPU would run them. */
static int job_cuda_queued(void *arg)
{
    return clover_cu_call_run(&((job *)arg)->k, NULL);
}
#else
#define CUDA_KIND WEFT_DEVICE_CUDA
#endif
#else
#define CUDA_KIND WEFT_DEVICE_CUDA
#endif

static int job_body(weft_ctx *ctx, void *arg)
{
    job *j = arg;
    void *ptr[MAX_ACC];
    for (size_t i = 0; i < j->nacc; i++)
        ptr[i] = weft_ctx_data(ctx, i);
    clover_call_bind(&j->k, j->what, ptr, (int)j->nacc);
    if (weft_ctx_gpu_count(ctx) == 0)
        return job_run(j);
#if defined(CLOVER_HAVE_CUDA) && !defined(CLOVER_CUDA_ON_VGPU)
    if (j->s->ch[j->chunk].cuda)
        return clover_cu_call_run(&j->k, weft_ctx_stream(ctx, 0)); /* call_cuda.h */
#endif
    /* On a GPU: the kernel runs on the chunk's stream, naming what it
     * touches (checked in the virtual GPUs' checking mode). */
    weft_range rg[MAX_ACC];
    for (size_t i = 0; i < j->nacc; i++) {
        rg[i].ptr = weft_ctx_data(ctx, i);
        rg[i].bytes = acc_bytes(j, i);
        rg[i].mode = (j->acc[i].mode & WEFT_REDUCE) ? WEFT_RW : (j->acc[i].mode & WEFT_RW);
    }
#ifdef CLOVER_CUDA_ON_VGPU
    if (j->s->ch[j->chunk].cuda)
        return weft_ctx_queue_rw(ctx, 0, job_cuda_queued, j, 0, rg, j->nacc);
#endif
    return weft_ctx_queue_rw(ctx, 0, job_run, j, 0, rg, j->nacc);
}

static job *job_new(sim *s, int kern, int chunk)
{
    job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    const chunk_rt *cr = &s->ch[chunk];
    j->s = s;
    j->k.kern = kern;
    j->chunk = chunk;
    j->k.v.nx = cr->c.nx;
    j->k.v.ny = cr->c.ny;
    j->k.v.pitch = (size_t)cr->c.nx + 5;
    j->k.out = j->k.stage = j->k.v;
    j->k.d = s->d;
    j->k.chunk = &cr->c;
    j->k.prof = &s->prof;
    return j;
}

/* Name field f with mode (a field named before keeps one access, its
 * modes joined: a border job writes the ghosts of fields its kernel only
 * reads). */
static void job_field(job *j, int f, unsigned mode)
{
    for (size_t i = 0; i < j->nacc; i++)
        if (j->what[i] == f) {
            j->acc[i].mode |= mode;
            return;
        }
    j->acc[j->nacc].data = j->s->ch[j->chunk].f[f];
    j->acc[j->nacc].mode = mode;
    j->what[j->nacc++] = (signed char)f;
}

static void job_fields(job *j, unsigned mode, const int *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        job_field(j, f[i], mode);
}

/* FIELDS(j, mode, CF_A, CF_B, ...): name each field with mode. */
#define FIELDS(j, mode, ...)                                                                       \
    do {                                                                                           \
        static const int fl_[] = {__VA_ARGS__};                                                    \
        job_fields(j, mode, fl_, sizeof fl_ / sizeof fl_[0]);                                      \
    } while (0)

static void job_geom(job *j, unsigned mode)
{
    j->acc[j->nacc].data = j->s->ch[j->chunk].geom;
    j->acc[j->nacc].mode = mode;
    j->what[j->nacc++] = W_GEOM;
}

/* A staged halo update's fields for a border job: each field written (its
 * ghosts), its staging array read. */
static void job_unpack(job *j, const int *fields, int nfields, int depth)
{
    j->k.unpack = 1;
    j->k.part = PART_BORDER;
    j->k.nfields = nfields;
    j->k.depth = depth;
    for (int i = 0; i < nfields; i++) {
        j->k.fields[i] = fields[i];
        job_field(j, fields[i], WEFT_RW);
        j->acc[j->nacc].data = j->s->ch[j->chunk].stage[fields[i]];
        j->acc[j->nacc].mode = WEFT_R;
        j->what[j->nacc++] = (signed char)(W_STAGE - fields[i]);
    }
}

/* A split advection part's second array of field f, which it writes. */
static void job_out(job *j, int f)
{
    j->acc[j->nacc].data = j->s->ch[j->chunk].out[f];
    j->acc[j->nacc].mode = WEFT_RW;
    j->what[j->nacc++] = (signed char)(W_OUT - f);
}

/* After a split advection kernel's last part on chunk c: field f's
 * newest values are in its second array, which becomes the field (the
 * next kernels name it), and the field's array the second. */
static void swap_out(sim *s, int c, int f)
{
    chunk_rt *cr = &s->ch[c];
    weft_data *t = cr->f[f];
    cr->f[f] = cr->out[f];
    cr->out[f] = t;
}

static void job_red(job *j, weft_data *d, unsigned mode)
{
    j->acc[j->nacc].data = d;
    j->acc[j->nacc].mode = mode;
    j->what[j->nacc++] = W_RED;
}

/* Spawn j as a task on its chunk's device (j is the task's: freed when it
 * finishes, or here on failure). */
static int job_spawn(job *j)
{
    sim *s = j->s;
    const chunk_rt *cr = &s->ch[j->chunk];
    char name[40];
    static const char *const part_name[] = {"", ".interior", ".border"};
    snprintf(name, sizeof name, "%s%s.c%d", clover_kern_name(j->k.kern), part_name[j->k.part], j->chunk);
    weft_task_desc td;
    weft_task_desc_init(&td);
    td.body = job_body;
    td.arg = j;
    td.arg_destroy = free;
    td.accesses = j->acc;
    td.naccesses = j->nacc;
    td.name = name;
    weft_placement p;
    if (cr->gpu >= 0) {
        weft_placement_init(&p);
        p.gpu = cr->gpu;
        /* All but the least share of the GPU: one kernel task at a time per
         * GPU as with the whole GPU, and the halo exchange (a communication
         * task takes 1/1024) runs beside it, as a split kernel's interior
         * needs. */
        p.share = 1.0 - 1.0 / 1024;
        td.placements = &p;
        td.nplacements = 1;
    }
    int rc = weft_spawn(s->rt, &td, NULL);
    if (rc != 0)
        fprintf(stderr, "cloverleaf: spawning %s: %s\n", name, weft_last_error());
    return rc;
}

#define NEWJOB(j, s, k, c)       \
    job *j = job_new(s, k, c);   \
    if (!j)                      \
        return WEFT_ENOMEM

/* ---- the kernels' accesses ------------------------------------------------ */

static int k_initialise(sim *s, int c)
{
    NEWJOB(j, s, K_INIT, c);
    job_geom(j, WEFT_RW);
    FIELDS(j, WEFT_RW, CF_VOLUME, CF_XAREA, CF_YAREA);
    return job_spawn(j);
}

static int k_generate(sim *s, int c)
{
    NEWJOB(j, s, K_GENERATE, c);
    job_geom(j, WEFT_R);
    FIELDS(j, WEFT_RW, CF_DENSITY0, CF_ENERGY0, CF_XVEL0, CF_YVEL0);
    return job_spawn(j);
}

static int k_ideal_gas(sim *s, int c, int predict)
{
    NEWJOB(j, s, K_IDEAL_GAS, c);
    j->k.a = predict;
    job_field(j, predict ? CF_DENSITY1 : CF_DENSITY0, WEFT_R);
    job_field(j, predict ? CF_ENERGY1 : CF_ENERGY0, WEFT_R);
    FIELDS(j, WEFT_RW, CF_PRESSURE, CF_SOUNDSPEED);
    return job_spawn(j);
}


/* Before a kernel's accesses: a split kernel's part, the border job's
 * unpack of update u first (u NULL: an update another border job of the
 * chunk unpacks before this one). */
static void job_part(job *j, int part, const halo_upd *u)
{
    j->k.part = part;
    if (part == PART_BORDER && u)
        job_unpack(j, u->fields, u->nfields, u->depth);
}

/* viscosity on chunk c: whole, or a split part (PART_*; the border job
 * unpacks the staged update u first). */
static int k_viscosity(sim *s, int c, int part, const halo_upd *u)
{
    NEWJOB(j, s, K_VISCOSITY, c);
    job_part(j, part, u);
    job_geom(j, WEFT_R);
    FIELDS(j, WEFT_R, CF_DENSITY0, CF_PRESSURE, CF_XVEL0, CF_YVEL0);
    job_field(j, CF_VISCOSITY, WEFT_RW);
    return job_spawn(j);
}

static int k_calc_dt(sim *s, int c)
{
    NEWJOB(j, s, K_CALC_DT, c);
    job_geom(j, WEFT_R);
    FIELDS(j, WEFT_R, CF_VOLUME, CF_XAREA, CF_YAREA, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY,
           CF_SOUNDSPEED, CF_XVEL0, CF_YVEL0);
    job_field(j, CF_WORK1, WEFT_RW);
    job_red(j, s->dt_d, WEFT_REDUCE | WEFT_RED_MIN | WEFT_RED_F64);
    return job_spawn(j);
}

static int k_pdv(sim *s, int c, int predict, double dt)
{
    NEWJOB(j, s, K_PDV, c);
    j->k.a = predict;
    j->k.dt = dt;
    FIELDS(j, WEFT_R, CF_XAREA, CF_YAREA, CF_VOLUME, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY,
           CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1);
    FIELDS(j, WEFT_RW, CF_DENSITY1, CF_ENERGY1, CF_WORK1);
    job_red(j, s->err_d, WEFT_REDUCE | WEFT_RED_MAX | WEFT_RED_I32);
    return job_spawn(j);
}

static int k_revert(sim *s, int c)
{
    NEWJOB(j, s, K_REVERT, c);
    FIELDS(j, WEFT_R, CF_DENSITY0, CF_ENERGY0);
    FIELDS(j, WEFT_RW, CF_DENSITY1, CF_ENERGY1);
    return job_spawn(j);
}

/* accelerate on chunk c, whole or a split part (as k_viscosity). */
static int k_accelerate(sim *s, int c, double dt, int part, const halo_upd *u)
{
    NEWJOB(j, s, K_ACCELERATE, c);
    j->k.dt = dt;
    job_part(j, part, u);
    FIELDS(j, WEFT_R, CF_DENSITY0, CF_VOLUME, CF_XAREA, CF_YAREA, CF_PRESSURE, CF_VISCOSITY, CF_XVEL0,
           CF_YVEL0);
    FIELDS(j, WEFT_RW, CF_XVEL1, CF_YVEL1, CF_WORK1);
    return job_spawn(j);
}

static int k_flux_calc(sim *s, int c, double dt)
{
    NEWJOB(j, s, K_FLUX_CALC, c);
    j->k.dt = dt;
    FIELDS(j, WEFT_R, CF_XAREA, CF_YAREA, CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1);
    FIELDS(j, WEFT_RW, CF_VOL_FLUX_X, CF_VOL_FLUX_Y);
    return job_spawn(j);
}

/* advec_cell on chunk c: whole (in place), or a split part (PART_*, as
 * k_viscosity; out of place: the part writes density1's and energy1's
 * second arrays, and after the border part they become the fields). */
static int k_advec_cell(sim *s, int c, int dir, int sweep, int part, const halo_upd *u)
{
    NEWJOB(j, s, K_ADVEC_CELL, c);
    j->k.b = dir;
    j->k.c = sweep;
    job_part(j, part, u);
    job_geom(j, WEFT_R);
    FIELDS(j, WEFT_R, CF_VOLUME, CF_VOL_FLUX_X, CF_VOL_FLUX_Y);
    if (part == PART_WHOLE) {
        FIELDS(j, WEFT_RW, CF_DENSITY1, CF_ENERGY1);
    } else {
        FIELDS(j, WEFT_R, CF_DENSITY1, CF_ENERGY1);
        job_out(j, CF_DENSITY1);
        job_out(j, CF_ENERGY1);
    }
    job_field(j, dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y, WEFT_RW);
    for (int w = CF_WORK1; w <= CF_WORK7; w++)
        job_field(j, w, WEFT_RW);
    int rc = job_spawn(j);
    if (rc == 0 && part == PART_BORDER) {
        swap_out(s, c, CF_DENSITY1);
        swap_out(s, c, CF_ENERGY1);
    }
    return rc;
}

/* advec_mom of vel on chunk c: whole, or a split part (as k_advec_cell:
 * the parts write vel's second array). */
static int k_advec_mom(sim *s, int c, int vel, int dir, int sweep, int part, const halo_upd *u)
{
    NEWJOB(j, s, K_ADVEC_MOM, c);
    j->k.a = vel;
    j->k.b = dir;
    j->k.c = sweep;
    job_part(j, part, u);
    job_geom(j, WEFT_R);
    FIELDS(j, WEFT_R, CF_VOLUME, CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_DENSITY1);
    if (part == PART_WHOLE) {
        FIELDS(j, WEFT_R, CF_MASS_FLUX_X, CF_MASS_FLUX_Y);
        job_field(j, vel, WEFT_RW);
    } else {
        /* only the sweep's own mass flux: the other's is the next
         * advec_cell's to write, beside this part */
        job_field(j, dir == 1 ? CF_MASS_FLUX_X : CF_MASS_FLUX_Y, WEFT_R);
        job_field(j, vel, WEFT_R);
        job_out(j, vel);
    }
    for (int w = CF_WORK1; w <= CF_WORK7; w++)
        job_field(j, w, WEFT_RW);
    int rc = job_spawn(j);
    if (rc == 0 && part == PART_BORDER)
        swap_out(s, c, vel);
    return rc;
}

static int k_reset(sim *s, int c)
{
    NEWJOB(j, s, K_RESET, c);
    FIELDS(j, WEFT_R, CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1);
    FIELDS(j, WEFT_RW, CF_DENSITY0, CF_ENERGY0, CF_XVEL0, CF_YVEL0);
    return job_spawn(j);
}

static int k_summary(sim *s, int c)
{
    NEWJOB(j, s, K_SUMMARY, c);
    FIELDS(j, WEFT_R, CF_VOLUME, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_XVEL0, CF_YVEL0);
    job_field(j, CF_WORK1, WEFT_RW); /* scratch of the CUDA kernel's partial sums */
    job_red(j, s->sums_d, WEFT_REDUCE | WEFT_RED_SUM | WEFT_RED_F64);
    return job_spawn(j);
}

int cw_k_reflect(sim *s, int c, const int *fields, int nfields, int depth)
{
    NEWJOB(j, s, K_REFLECT, c);
    j->k.nfields = nfields;
    j->k.depth = depth;
    for (int i = 0; i < nfields; i++) {
        j->k.fields[i] = fields[i];
        job_field(j, fields[i], WEFT_RW);
    }
    return job_spawn(j);
}

#define HALO(s, depth, ...)                                                      \
    do {                                                                         \
        static const int fl_[] = {__VA_ARGS__};                                  \
        int rc_ = cw_halo(s, fl_, (int)(sizeof fl_ / sizeof fl_[0]), depth);         \
        if (rc_)                                                                 \
            return rc_;                                                          \
    } while (0)

#define EACH(s, call)                                                            \
    do {                                                                         \
        for (int c = (s)->lo; c < (s)->hi; c++) {                                \
            int rc_ = (call);                                                    \
            if (rc_)                                                             \
                return rc_;                                                      \
        }                                                                        \
    } while (0)

/* ---- host reads of the reductions ----------------------------------------- */

typedef struct readback {
    sim *s;
    double dt;
    int32_t err;
    double sums[CS_N];
    int which;                   /* 0: dt and err; 1: the summary */
} readback;

static int readback_body(weft_ctx *ctx, void *arg)
{
    readback *r = arg;
    sim *s = r->s;
    (void)ctx;
    if (r->which == 0) {
        r->dt = s->dt_min;
        r->err = s->err;
        s->dt_min = INFINITY;
        s->err = 0;
    } else {
        memcpy(r->sums, s->sums, sizeof r->sums);
        for (int i = 0; i < CS_N; i++)
            s->sums[i] = -0.0;
    }
    return 0;
}

/* Across ranks: an all-reduce of d (count elements; type and operator as
 * WEFT_RED_*) in place over the ranks, folded in rank order. */
static int allreduce(sim *s, weft_data *d, unsigned type, size_t count, const char *name)
{
    if (!s->net)
        return 0;
    weft_data **recv = calloc((size_t)s->nranks, sizeof *recv);
    if (!recv)
        return WEFT_ENOMEM;
    recv[s->rank] = d;
    weft_coll c;
    weft_coll_init(&c);
    c.op = WEFT_COLL_ALLREDUCE;
    c.type = type;
    c.count = count;
    c.recv = recv;
    c.name = name;
    int rc = weft_comm_post(s->net, &c, NULL);
    if (rc)
        fprintf(stderr, "cloverleaf: %s across ranks: %s\n", name, weft_last_error());
    free(recv);
    return rc;
}

/* Read (and reset) the dt and error reductions, or the summary, on the host. */
static int read_back(sim *s, readback *r)
{
    int rc = r->which == 0 ? allreduce(s, s->dt_d, WEFT_RED_F64 | WEFT_RED_MIN, 1, "dt_min") : 0;
    if (rc == 0 && r->which == 0)
        rc = allreduce(s, s->err_d, WEFT_RED_I32 | WEFT_RED_MAX, 1, "pdv_check");
    if (rc == 0 && r->which == 1)
        rc = allreduce(s, s->sums_d, WEFT_RED_F64 | WEFT_RED_SUM, CS_N, "field_summary");
    if (rc)
        return rc;
    weft_access acc[2];
    size_t n = 0;
    if (r->which == 0) {
        acc[n++] = (weft_access){s->dt_d, WEFT_RW | WEFT_HOST};
        acc[n++] = (weft_access){s->err_d, WEFT_RW | WEFT_HOST};
    } else {
        acc[n++] = (weft_access){s->sums_d, WEFT_RW | WEFT_HOST};
    }
    r->s = s;
    weft_task_desc td;
    weft_task_desc_init(&td);
    td.body = readback_body;
    td.arg = r;
    td.accesses = acc;
    td.naccesses = n;
    td.name = r->which ? "read_summary" : "read_dt";
    td.priority = 1;
    weft_task *t = NULL;
    rc = weft_spawn(s->rt, &td, &t);
    if (rc == 0) {
        rc = weft_task_wait(t);
        weft_task_release(t);
    }
    if (rc != 0) {
        fprintf(stderr, "cloverleaf: %s failed: %s (a kernel task before it failed)\n", td.name,
                weft_strerror(rc));
        return rc;
    }
    return 0;
}

/* ---- the time step ---------------------------------------------------- */

static int summary(sim *s, FILE *out, int step, double time, double sums[CS_N])
{
    EACH(s, k_ideal_gas(s, c, 0)); /* the pressure of the fields summed, as the reference */
    EACH(s, k_summary(s, c));
    readback r = {.which = 1};
    int rc = read_back(s, &r);
    if (rc)
        return rc;
    memcpy(sums, r.sums, sizeof r.sums);
    if (out)
        clover_print_summary(out, step, time, sums);
    return 0;
}

static int check_err(int32_t err, int step)
{
    if (err) {
        fprintf(stderr, "cloverleaf: step %d: PdV: a cell's volume turned negative\n", step);
        return -1;
    }
    return 0;
}

/* The halo updates before viscosity and accelerate, staged when split:
 * the kernels read the ghosts of these fields only (accelerate also
 * density0's, from the first update, unpacked by viscosity's border). */
static const int upd_visc_fields[] = {CF_PRESSURE, CF_ENERGY0, CF_DENSITY0, CF_XVEL0, CF_YVEL0};
static const int upd_accel_fields[] = {CF_PRESSURE, CF_VISCOSITY};
static const halo_upd upd_visc = {upd_visc_fields, 5, 1};
static const halo_upd upd_accel = {upd_accel_fields, 2, 1};

/* The advection's staged updates (sim.split_adv): before the first
 * sweep's advec_cell, and after each sweep's advec_cell (its mass flux
 * only: the other direction's was exchanged when it was last written and
 * is the next advec_cell's to write, beside the exchange). */
static const int upd_adv_cell_fields[] = {CF_ENERGY1, CF_DENSITY1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y};
static const int upd_adv_mom_x_fields[] = {CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X};
static const int upd_adv_mom_y_fields[] = {CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_Y};
static const halo_upd upd_adv_cell = {upd_adv_cell_fields, 4, 2};
static const halo_upd upd_adv_mom[2] = {{upd_adv_mom_x_fields, 5, 2}, {upd_adv_mom_y_fields, 5, 2}};

/* The advection split, each kernel's interior beside the update before
 * it: the first sweep's advec_cell; both momentum sweeps of the first
 * direction with the second direction's advec_cell (which reads no ghost
 * that their update brings but density1's and energy1's, and writes the
 * other mass flux); the second direction's momentum.  Every part writes
 * second arrays (k_advec_cell, k_advec_mom); each chunk's parts run in
 * this order, as they all use the chunk's work arrays. */
static int advect_split(sim *s, int first, int second)
{
    int rc;
    if ((rc = cw_halo_staged(s, &upd_adv_cell)) != 0)
        return rc;
    EACH(s, k_advec_cell(s, c, first, 1, PART_INTERIOR, NULL));
    EACH(s, k_advec_cell(s, c, first, 1, PART_BORDER, &upd_adv_cell));
    if ((rc = cw_halo_staged(s, &upd_adv_mom[first - 1])) != 0)
        return rc;
    EACH(s, k_advec_mom(s, c, CF_XVEL1, first, 1, PART_INTERIOR, NULL));
    EACH(s, k_advec_mom(s, c, CF_YVEL1, first, 1, PART_INTERIOR, NULL));
    EACH(s, k_advec_cell(s, c, second, 2, PART_INTERIOR, NULL));
    EACH(s, k_advec_mom(s, c, CF_XVEL1, first, 1, PART_BORDER, &upd_adv_mom[first - 1]));
    EACH(s, k_advec_mom(s, c, CF_YVEL1, first, 1, PART_BORDER, NULL));
    EACH(s, k_advec_cell(s, c, second, 2, PART_BORDER, NULL));
    if ((rc = cw_halo_staged(s, &upd_adv_mom[second - 1])) != 0)
        return rc;
    EACH(s, k_advec_mom(s, c, CF_XVEL1, second, 2, PART_INTERIOR, NULL));
    EACH(s, k_advec_mom(s, c, CF_YVEL1, second, 2, PART_INTERIOR, NULL));
    EACH(s, k_advec_mom(s, c, CF_XVEL1, second, 2, PART_BORDER, &upd_adv_mom[second - 1]));
    EACH(s, k_advec_mom(s, c, CF_YVEL1, second, 2, PART_BORDER, NULL));
    return 0;
}

/* The first half of a step, up to the chunks' smallest dt. */
static int step_start(sim *s)
{
    EACH(s, k_ideal_gas(s, c, 0));
    if (s->split) {
        /* every chunk's interior while the ghosts move, then the borders */
        int rc = cw_halo_staged(s, &upd_visc);
        if (rc)
            return rc;
        EACH(s, k_viscosity(s, c, PART_INTERIOR, NULL));
        EACH(s, k_viscosity(s, c, PART_BORDER, &upd_visc));
    } else {
        HALO(s, 1, CF_PRESSURE, CF_ENERGY0, CF_DENSITY0, CF_XVEL0, CF_YVEL0);
        EACH(s, k_viscosity(s, c, PART_WHOLE, NULL));
    }
    EACH(s, k_calc_dt(s, c));
    return 0;
}

static int step_rest(sim *s, double dt, int advect_x)
{
    EACH(s, k_pdv(s, c, 1, dt));
    EACH(s, k_ideal_gas(s, c, 1));
    /* The reference updates viscosity's halo before calc_dt, which reads
     * only its own cells' (so do PdV's, and nothing writes viscosity
     * until the next step); accelerate is the first to read its ghosts.
     * Exchanged with the predicted pressure's, one update (and, on GPUs
     * and across ranks, one exchange: every exchange waits for every
     * chunk) serves both. */
    if (s->split) {
        int rc = cw_halo_staged(s, &upd_accel);
        if (rc)
            return rc;
        EACH(s, k_revert(s, c));
        EACH(s, k_accelerate(s, c, dt, PART_INTERIOR, NULL));
        EACH(s, k_accelerate(s, c, dt, PART_BORDER, &upd_accel));
    } else {
        HALO(s, 1, CF_PRESSURE, CF_VISCOSITY);
        EACH(s, k_revert(s, c));
        EACH(s, k_accelerate(s, c, dt, PART_WHOLE, NULL));
    }
    EACH(s, k_pdv(s, c, 0, dt));
    EACH(s, k_flux_calc(s, c, dt));
    int first = advect_x ? 1 : 2, second = advect_x ? 2 : 1;
    if (s->split_adv) {
        int rc = advect_split(s, first, second);
        if (rc)
            return rc;
    } else {
        HALO(s, 2, CF_ENERGY1, CF_DENSITY1, CF_VOL_FLUX_X, CF_VOL_FLUX_Y);
        EACH(s, k_advec_cell(s, c, first, 1, PART_WHOLE, NULL));
        HALO(s, 2, CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X, CF_MASS_FLUX_Y);
        EACH(s, k_advec_mom(s, c, CF_XVEL1, first, 1, PART_WHOLE, NULL));
        EACH(s, k_advec_mom(s, c, CF_YVEL1, first, 1, PART_WHOLE, NULL));
        EACH(s, k_advec_cell(s, c, second, 2, PART_WHOLE, NULL));
        HALO(s, 2, CF_DENSITY1, CF_ENERGY1, CF_XVEL1, CF_YVEL1, CF_MASS_FLUX_X, CF_MASS_FLUX_Y);
        EACH(s, k_advec_mom(s, c, CF_XVEL1, second, 2, PART_WHOLE, NULL));
        EACH(s, k_advec_mom(s, c, CF_YVEL1, second, 2, PART_WHOLE, NULL));
    }
    EACH(s, k_reset(s, c));
    return 0;
}

static int start(sim *s)
{
    EACH(s, k_initialise(s, c));
    EACH(s, k_generate(s, c));
    EACH(s, k_ideal_gas(s, c, 0));
    HALO(s, 2, CF_DENSITY0, CF_ENERGY0, CF_PRESSURE, CF_VISCOSITY, CF_DENSITY1, CF_ENERGY1, CF_XVEL0,
         CF_YVEL0, CF_XVEL1, CF_YVEL1);
    return 0;
}

static int loop(sim *s, FILE *out, clover_weft_result *res)
{
    const clover_deck *d = s->d;
    clover_clock clk = {0};
    clk.dt = d->dtinit;
    clk.dtold = d->dtinit;
    int advect_x = 1, rc;
    double sums[CS_N] = {0};
    if (out)
        clover_print_summary_header(out);
    if ((rc = summary(s, out, 0, 0.0, sums)) != 0)
        return rc;
    memcpy(res->sums0, sums, sizeof sums);
    uint64_t t0 = now_ns();
    for (;;) {
        clk.step++;
        if ((rc = step_start(s)) != 0)
            return rc;
        readback r = {.which = 0};
        if ((rc = read_back(s, &r)) != 0)
            return rc;
        if ((rc = check_err(r.err, clk.step - 1)) != 0)
            return rc;
        if (clover_next_dt(d, &clk, r.dt) != 0)
            return -1;
        if ((rc = step_rest(s, clk.dt, advect_x)) != 0)
            return rc;
        advect_x = !advect_x;
        clk.time += clk.dt;
        int last = clk.time + 1e-16 > d->end_time || clk.step >= d->end_step;
        if (last || (d->summary_frequency > 0 && clk.step % d->summary_frequency == 0)) {
            if ((rc = summary(s, last ? NULL : out, clk.step, clk.time, sums)) != 0)
                return rc;
            res->summaries++;
        }
        if (last)
            break;
    }
    readback r = {.which = 0};
    if ((rc = read_back(s, &r)) != 0 || (rc = check_err(r.err, clk.step)) != 0)
        return rc;
    res->wall_s = (double)(now_ns() - t0) * 1e-9;
    if (out)
        clover_print_summary(out, clk.step, clk.time, sums);
    memcpy(res->sums, sums, sizeof sums);
    res->steps = clk.step;
    res->time = clk.time;
    return 0;
}

/* ---- set-up and output ------------------------------------------------ */

static int setup(sim *s, const clover_weft_opts *o)
{
    weft_config cfg;
    weft_config_init(&cfg);
    if (o->devices)
        cfg.devices = o->devices;
    if (o->workers)
        cfg.workers = o->workers;
    if (o->trace_path)
        cfg.trace_path = o->trace_path;
    int rc = weft_runtime_create(&cfg, &s->rt);
    if (rc) {
        fprintf(stderr, "cloverleaf: weft_runtime_create: %s\n", weft_last_error());
        return rc;
    }
    unsigned ndev = weft_device_count(s->rt);
    int cuda[65] = {0};
    for (unsigned i = 1; i < ndev && i < 65; i++) {
        weft_device_info di;
        if (weft_device_info_get(s->rt, i, &di) == 0 && di.kind == CUDA_KIND) {
#ifdef CLOVER_HAVE_CUDA
            cuda[i - 1] = 1;
#else
            fprintf(stderr, "cloverleaf: %s: built without the CUDA kernels (no nvcc found)\n", di.name);
            return WEFT_EINVAL;
#endif
        }
    }
    s->ngpu = (int)ndev - 1;
    if (o->split == CLOVER_SPLIT_AUTO && s->ngpu == 0)
        s->split = 0;
    s->nranks = 1;
    if (o->mpi) {
        /* The ranks, for the reductions (and the halos of chunks on the CPU). */
        if ((rc = weft_comm_create_mpi(s->rt, NULL, NULL, &s->net)) != 0) {
            fprintf(stderr, "cloverleaf: weft_comm_create_mpi: %s\n", weft_last_error());
            return rc;
        }
        s->rank = (int)weft_comm_rank(s->net);
        s->nranks = (int)weft_comm_size(s->net);
    }
    /* Every rank has the same devices and options: nloc chunks each, this
     * rank's being rank * nloc .. (rank + 1) * nloc - 1. */
    s->nloc = s->ngpu ? s->ngpu : (o->chunks > 0 ? o->chunks : (int)weft_runtime_workers(s->rt));
    if (o->cpu_chunks > 0 && s->ngpu > 0) {
        /* this rank's first ngpu chunks on the GPUs, the rest on the CPU
         * (every halo update then one host task, and across ranks the
         * ranks' exchange after it, as for CPU chunks alone: not split) */
        s->ncpu = o->cpu_chunks;
        s->split = 0;
        s->nloc = s->ngpu + s->ncpu;
    }
    s->split_adv = s->split && o->split_advection;
    int n = s->nloc * s->nranks;
    s->lo = s->rank * s->nloc;
    s->hi = s->lo + s->nloc;
    s->ch = calloc((size_t)n, sizeof *s->ch);
    clover_chunk *cc = calloc((size_t)n, sizeof *cc);
    if (!s->ch || !cc) {
        free(cc);
        return WEFT_ENOMEM;
    }
    char err[256];
    if (clover_decompose(s->d, n, cc, &s->cx, &s->cy, err, sizeof err) != 0) {
        fprintf(stderr, "cloverleaf: %s\n", err);
        free(cc);
        return WEFT_EINVAL;
    }
    s->n = n;
    for (int c = 0; c < n; c++) {
        chunk_rt *cr = &s->ch[c];
        cr->c = cc[c];
        cr->gpu = s->ngpu && local(s, c) && c - s->lo < s->ngpu ? c - s->lo : -1;
        cr->cuda = cr->gpu >= 0 && local(s, c) && cuda[cr->gpu];
        size_t fc = clover_field_count(cr->c.nx, cr->c.ny), gc = clover_geom_count(cr->c.nx, cr->c.ny);
        cr->fbytes = fc * sizeof(double);
        cr->gbytes = gc * sizeof(double);
        if (!local(s, c))
            continue;
        cr->mem = calloc(fc * CF_NFIELDS + gc, sizeof(double));
        if (!cr->mem) {
            free(cc);
            return WEFT_ENOMEM;
        }
        for (int f = 0; f < CF_NFIELDS; f++)
            if ((rc = weft_data_register(s->rt, cr->mem + (size_t)f * fc, cr->fbytes, &cr->f[f])) != 0)
                break;
        if (rc == 0)
            rc = weft_data_register(s->rt, cr->mem + (size_t)CF_NFIELDS * fc, cr->gbytes, &cr->geom);
        if (rc == 0 && s->split) {
            int nst = s->split_adv ? NSTAGED : NSTAGED_VA;
            if (!(cr->stage_mem = calloc(fc * (size_t)nst, sizeof(double)))) {
                free(cc);
                return WEFT_ENOMEM;
            }
            for (int i = 0; i < nst && rc == 0; i++)
                rc = weft_data_register(s->rt, cr->stage_mem + (size_t)i * fc, cr->fbytes,
                                        &cr->stage[staged_fields[i]]);
        }
        if (rc == 0 && s->split_adv) {
            if (!(cr->out_mem = calloc(fc * NADVECTED, sizeof(double)))) {
                free(cc);
                return WEFT_ENOMEM;
            }
            for (int i = 0; i < NADVECTED && rc == 0; i++)
                rc = weft_data_register(s->rt, cr->out_mem + (size_t)i * fc, cr->fbytes, &cr->out[advected_fields[i]]);
        }
        if (rc) {
            free(cc);
            fprintf(stderr, "cloverleaf: registering chunk %d: %s\n", c, weft_last_error());
            return rc;
        }
    }
    free(cc);
    s->dt_min = INFINITY;
    for (int i = 0; i < CS_N; i++)
        s->sums[i] = -0.0;
    if ((rc = weft_data_register(s->rt, &s->dt_min, sizeof s->dt_min, &s->dt_d)) != 0 ||
        (rc = weft_data_register(s->rt, &s->err, sizeof s->err, &s->err_d)) != 0 ||
        (rc = weft_data_register(s->rt, s->sums, sizeof s->sums, &s->sums_d)) != 0)
        return rc;
    if (s->ngpu > 0 && s->n > 1 && !s->ncpu) {
        /* The chunks' GPUs: this rank's (every GPU of the runtime, in
         * order), and across ranks every rank's, numbered rank by rank as
         * the chunks are. */
        weft_comm_config cc2;
        weft_comm_config_init(&cc2);
        unsigned gpus[64];
        for (int g = 0; g < s->ngpu && g < 64; g++)
            gpus[g] = (unsigned)g;
        cc2.gpus = gpus;
        cc2.ngpus = (unsigned)s->ngpu;
        rc = s->net ? weft_comm_create_mpi(s->rt, NULL, &cc2, &s->comm) : weft_comm_create(s->rt, &cc2, &s->comm);
        if (rc != 0) {
            fprintf(stderr, "cloverleaf: creating the GPUs' communicator: %s\n", weft_last_error());
            return rc;
        }
    }
    return 0;
}

/* Copy field f of every chunk into out (x_cells x y_cells, row-major from
 * the bottom): the chunks' host memory is current after weft_wait_all and
 * the handles' unregistering. */
static void gather(const sim *s, int f, double *out)
{
    for (int c = s->lo; c < s->hi; c++) {
        const chunk_rt *cr = &s->ch[c];
        size_t fc = clover_field_count(cr->c.nx, cr->c.ny), p = (size_t)cr->c.nx + 5;
        const double *src = cr->mem + (size_t)f * fc;
        for (int k = 0; k < cr->c.ny; k++)
            memcpy(out + (size_t)(cr->c.y0 + k) * (size_t)s->d->x_cells + (size_t)cr->c.x0,
                   src + (size_t)(k + 2) * p + 2, (size_t)cr->c.nx * sizeof(double));
    }
}

/* Across ranks: field f of the whole mesh into out (x_cells x y_cells) on
 * every rank.  A host task copies this rank's chunks' cells into an array
 * of -0.0 (the task brings GPU replicas back to the host), an all-reduce
 * SUM over the ranks adds the arrays (-0.0 + x is x bit for bit, signed
 * zeros included: each cell is one rank's alone), and unregistering the
 * array brings the sum back to out.  Collective: every rank calls it. */
typedef struct gather_job {
    sim *s;
    int f;
} gather_job;

static int gather_body(weft_ctx *ctx, void *arg)
{
    gather_job *g = arg;
    const sim *s = g->s;
    double *out = weft_ctx_data(ctx, 0);
    for (int c = s->lo; c < s->hi; c++) {
        const chunk_rt *cr = &s->ch[c];
        const double *src = weft_ctx_data(ctx, (size_t)(c - s->lo) + 1);
        size_t p = (size_t)cr->c.nx + 5;
        for (int k = 0; k < cr->c.ny; k++)
            memcpy(out + (size_t)(cr->c.y0 + k) * (size_t)s->d->x_cells + (size_t)cr->c.x0,
                   src + (size_t)(k + 2) * p + 2, (size_t)cr->c.nx * sizeof(double));
    }
    return 0;
}

static int gather_ranks(sim *s, int f, double *out)
{
    size_t n = (size_t)s->d->x_cells * (size_t)s->d->y_cells;
    for (size_t i = 0; i < n; i++)
        out[i] = -0.0;
    weft_data *gd = NULL;
    int rc = weft_data_register(s->rt, out, n * sizeof(double), &gd);
    weft_access *acc = calloc((size_t)s->nloc + 1, sizeof *acc);
    if (rc == 0 && !acc)
        rc = WEFT_ENOMEM;
    if (rc == 0) {
        acc[0] = (weft_access){gd, WEFT_RW | WEFT_HOST};
        for (int c = s->lo; c < s->hi; c++)
            acc[c - s->lo + 1] = (weft_access){s->ch[c].f[f], WEFT_R | WEFT_HOST};
        gather_job g = {s, f};
        weft_task_desc td;
        weft_task_desc_init(&td);
        td.body = gather_body;
        td.arg = &g;
        td.accesses = acc;
        td.naccesses = (size_t)s->nloc + 1;
        td.name = "gather";
        weft_task *t = NULL;
        rc = weft_spawn(s->rt, &td, &t);
        if (rc == 0) {
            rc = weft_task_wait(t); /* g lives on this stack until the body ran */
            weft_task_release(t);
        }
    }
    if (rc == 0)
        rc = allreduce(s, gd, WEFT_RED_F64 | WEFT_RED_SUM, n, "gather");
    if (rc == 0)
        rc = weft_wait_all(s->rt);
    if (gd && weft_data_unregister(gd) != 0 && rc == 0)
        rc = -1;
    free(acc);
    if (rc != 0)
        fprintf(stderr, "cloverleaf: gathering %s across ranks failed\n", clover_field_name(f));
    return rc;
}

static void profile(const sim *s, FILE *out, double wall)
{
    uint64_t total = 0;
    for (int k = 0; k < K_N; k++)
        total += s->prof.ns[k];
    fprintf(out, "\n Profile (kernel time summed over chunks; wall %.3f s)\n", wall);
    fprintf(out, " %-16s %10s %12s %8s\n", "kernel", "calls", "seconds", "share");
    for (int k = 0; k < K_N; k++) {
        if (!s->prof.calls[k])
            continue;
        double sec = (double)s->prof.ns[k] * 1e-9;
        fprintf(out, " %-16s %10llu %12.4f %7.1f%%\n", clover_kern_name(k), (unsigned long long)s->prof.calls[k], sec,
                total ? 100.0 * (double)s->prof.ns[k] / (double)total : 0.0);
    }
}

static int teardown(sim *s)
{
    int rc = 0;
    if (s->comm && weft_comm_destroy(s->comm) != 0)
        rc = -1;
    s->comm = NULL;
    if (s->net && weft_comm_destroy(s->net) != 0)
        rc = -1;
    s->net = NULL;
    for (int c = 0; s->ch && c < s->n; c++) {
        for (int f = 0; f < CF_NFIELDS; f++) {
            if (s->ch[c].f[f] && weft_data_unregister(s->ch[c].f[f]) != 0)
                rc = -1;
            if (s->ch[c].stage[f] && weft_data_unregister(s->ch[c].stage[f]) != 0)
                rc = -1;
            if (s->ch[c].out[f] && weft_data_unregister(s->ch[c].out[f]) != 0)
                rc = -1;
        }
        if (s->ch[c].geom && weft_data_unregister(s->ch[c].geom) != 0)
            rc = -1;
    }
    weft_data *red[] = {s->dt_d, s->err_d, s->sums_d};
    for (int i = 0; i < 3; i++)
        if (red[i] && weft_data_unregister(red[i]) != 0)
            rc = -1;
    if (s->rt && weft_runtime_destroy(s->rt) != 0)
        rc = -1;
    s->rt = NULL;
    return rc;
}

int clover_weft_run(const clover_deck *d, const clover_weft_opts *o, clover_weft_result *res)
{
    sim *s = calloc(1, sizeof *s);
    if (!s)
        return -1;
    s->d = d;
    s->no_exchange = o->no_exchange;
    s->split = o->split != CLOVER_SPLIT_OFF && !o->no_exchange; /* AUTO: decided in setup, once the GPUs are known */
    memset(res, 0, sizeof *res);
    int rc = setup(s, o);
    if (rc == 0)
        rc = start(s);
    FILE *out = s->rank == 0 ? o->out : NULL; /* across ranks, rank 0 reports */
    if (rc == 0)
        rc = loop(s, out, res);
    if (rc != 0 && s->rt) {
        int crc = weft_cancel_pending(s->rt); /* what was spawned of a failed step need not run */
        (void)crc;
    }
    int wrc = s->rt ? weft_wait_all(s->rt) : 0;
    if (rc == 0 && wrc != 0) {
        fprintf(stderr, "cloverleaf: a task failed: %s\n", weft_strerror(wrc));
        rc = wrc;
    }
    res->nchunks = s->n;
    res->chunks_x = s->cx;
    res->chunks_y = s->cy;
    res->nranks = s->nranks;
    res->rank = s->rank;
    if (rc == 0) {
        res->verified = clover_verify(out, d, res->sums[CS_KE]);
        if (out)
            profile(s, out, res->wall_s);
    }
    /* Across ranks the fields are gathered before the communicators go:
     * every rank gets the whole density and energy, rank 0 draws. */
    int want = o->density || o->energy || o->png_path, ranks = s->net != NULL;
    if (rc == 0 && want && ranks) {
        size_t cells = (size_t)d->x_cells * (size_t)d->y_cells;
        double *dens = o->density ? o->density : malloc(cells * sizeof(double));
        if (!dens)
            rc = -1;
        if (rc == 0)
            rc = gather_ranks(s, CF_DENSITY0, dens);
        if (rc == 0 && o->energy)
            rc = gather_ranks(s, CF_ENERGY0, o->energy);
        if (rc == 0 && s->rank == 0 && o->png_path &&
            clover_write_png(o->png_path, dens, d->x_cells, d->y_cells, (size_t)d->x_cells) != 0)
            fprintf(stderr, "cloverleaf: writing %s failed\n", o->png_path);
        if (dens != o->density)
            free(dens);
    }
    /* Unregistering brings every chunk's newest values back to its host memory. */
    if (teardown(s) != 0 && rc == 0)
        rc = -1;
    if (rc == 0 && want && !ranks) {
        double *tmp = o->density;
        if (!tmp)
            tmp = malloc((size_t)d->x_cells * (size_t)d->y_cells * sizeof(double));
        if (tmp) {
            gather(s, CF_DENSITY0, tmp);
            if (o->png_path && clover_write_png(o->png_path, tmp, d->x_cells, d->y_cells, (size_t)d->x_cells) != 0)
                fprintf(stderr, "cloverleaf: writing %s failed\n", o->png_path);
            if (tmp != o->density)
                free(tmp);
        }
        if (o->energy)
            gather(s, CF_ENERGY0, o->energy);
    }
    for (int c = 0; s->ch && c < s->n; c++) {
        free(s->ch[c].mem);
        free(s->ch[c].stage_mem);
        free(s->ch[c].out_mem);
    }
    free(s->ch);
    free(s);
    return rc == 0 ? 0 : -1;
}
