/* One kernel call on one chunk (call.h says what it does). */
#include "call.h"

#include <string.h>
#include <time.h>

static const char *const kern_names[K_N] = {
    "initialise", "generate", "ideal_gas", "viscosity", "calc_dt", "pdv", "revert", "accelerate",
    "flux_calc", "advec_cell", "advec_mom", "reset_field", "field_summary", "halo_reflect", "halo_exchange",
    "halo_unpack"};

const char *clover_kern_name(int k)
{
    return k >= 0 && k < K_N ? kern_names[k] : "unknown";
}

uint64_t clover_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void account(clover_prof *p, int k, uint64_t ns)
{
    if (p == NULL)
        return;
    atomic_fetch_add_explicit(&p->ns[k], ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&p->calls[k], 1, memory_order_relaxed);
}

int clover_call_ranges(const clover_call *c, clover_range out[4])
{
    int dx = c->v.nx, dy = c->v.ny;
    if (c->kern == K_ACCELERATE) { /* over the nodes */
        dx++;
        dy++;
    }
    clover_range p[5];
    if (c->kern == K_ADVEC_CELL || c->kern == K_ADVEC_MOM)
        clover_advec_split(c->v.nx, c->v.ny, c->kern == K_ADVEC_MOM, c->b, p);
    else
        clover_split(dx, dy, 1, p);
    if (c->part == PART_INTERIOR) {
        out[0] = p[0];
        return 1;
    }
    memcpy(out, p + 1, 4 * sizeof *out);
    return 4;
}

int clover_call_run(const clover_call *c)
{
    const clover_view *v = &c->v;
    if (c->kern < 0 || c->kern > K_REFLECT)
        return -1;
    uint64_t t0 = clover_now_ns();
    if (c->unpack) {
        /* a staged update's end: the ghosts from other chunks, then the
         * mesh boundary's (the reference's order) */
        clover_halo_unpack(v, &c->stage, c->chunk, c->fields, c->nfields, c->depth);
        uint64_t t1 = clover_now_ns();
        account(c->prof, K_UNPACK, t1 - t0);
        t0 = t1;
        if (c->chunk->edges) {
            clover_k_reflect(v, c->fields, c->nfields, c->depth, c->chunk->edges);
            t1 = clover_now_ns();
            account(c->prof, K_REFLECT, t1 - t0);
            t0 = t1;
        }
    }
    clover_range rg[4];
    int nrg = c->part == PART_WHOLE ? 0 : clover_call_ranges(c, rg);
    switch (c->kern) {
    case K_INIT: clover_k_initialise(v, c->d, c->chunk); break;
    case K_GENERATE: clover_k_generate(v, c->d); break;
    case K_IDEAL_GAS: clover_k_ideal_gas(v, c->a); break;
    case K_VISCOSITY:
        if (c->part == PART_WHOLE)
            clover_k_viscosity(v);
        for (int i = 0; i < nrg; i++)
            clover_k_viscosity_range(v, &rg[i]);
        break;
    case K_CALC_DT: {
        clover_dt r = clover_k_calc_dt(v, c->d, c->chunk);
        double *m = c->red;
        if (r.dt < *m)
            *m = r.dt;
        break;
    }
    case K_PDV: {
        int32_t *e = c->red;
        if (clover_k_pdv(v, c->a, c->dt))
            *e = 1;
        break;
    }
    case K_REVERT: clover_k_revert(v); break;
    case K_ACCELERATE:
        if (c->part == PART_WHOLE)
            clover_k_accelerate(v, c->dt);
        for (int i = 0; i < nrg; i++)
            clover_k_accelerate_range(v, c->dt, &rg[i]);
        break;
    case K_FLUX_CALC: clover_k_flux_calc(v, c->dt); break;
    case K_ADVEC_CELL:
        if (c->part == PART_WHOLE)
            clover_k_advec_cell(v, c->b, c->c);
        for (int i = 0; i < nrg; i++)
            clover_k_advec_cell_range(v, c->b, c->c, &rg[i], &c->out);
        break;
    case K_ADVEC_MOM:
        if (c->part == PART_WHOLE)
            clover_k_advec_mom(v, c->a, c->b, c->c);
        for (int i = 0; i < nrg; i++)
            clover_k_advec_mom_range(v, c->a, c->b, c->c, &rg[i], &c->out);
        break;
    case K_RESET: clover_k_reset_field(v); break;
    case K_SUMMARY: {
        double part[CS_N], *acc = c->red;
        clover_k_field_summary(v, part);
        for (int i = 0; i < CS_N; i++)
            acc[i] = acc[i] + part[i];
        break;
    }
    case K_REFLECT: clover_k_reflect(v, c->fields, c->nfields, c->depth, c->chunk->edges); break;
    default: return -1;
    }
    account(c->prof, c->kern, clover_now_ns() - t0);
    return 0;
}

void clover_call_bind(clover_call *c, const signed char *what, void *const *ptr, int n)
{
    for (int i = 0; i < n; i++) {
        int w = what[i];
        if (w >= 0)
            c->v.f[w] = ptr[i];
        else if (w <= CALL_OUT)
            c->out.f[CALL_OUT - w] = ptr[i];
        else if (w <= CALL_STAGE)
            c->stage.f[CALL_STAGE - w] = ptr[i];
        else if (w == CALL_GEOM)
            c->v.geom = ptr[i];
        else
            c->red = ptr[i];
    }
}

int clover_bound_get(const clover_bound *b, clover_call *out)
{
    if (b->n < 0 || b->n > CLOVER_CALL_MAX_ACC)
        return -1;
    *out = b->c;
    out->dt = b->dt;
    clover_call_bind(out, b->what, b->ptr, b->n);
    return 0;
}

int clover_call_bound_run(void *arg)
{
    clover_call c;
    return clover_bound_get(arg, &c) == 0 ? clover_call_run(&c) : -1;
}

size_t clover_bound_sizeof(void) { return sizeof(clover_bound); }

size_t clover_prof_sizeof(void) { return sizeof(clover_prof); }

size_t clover_call_sizeof(void) { return sizeof(clover_call); }
