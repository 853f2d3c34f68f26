/* A kernel call on a CUDA device (call_cuda.h). */
#include "call_cuda.h"

#include "kernels_cuda.h"

#include <stdio.h>

/* A border job's staged update: the blocks received into the staging
 * arrays copied into the fields (clover_halo_unpack's, on the device). */
static int unpack(const clover_call *k, void *stream)
{
    size_t p = k->v.pitch;
    for (int fi = 0; fi < k->nfields; fi++) {
        int f = k->fields[fi];
        clover_strip b[8];
        int n = clover_halo_recv_blocks(k->chunk, f, k->depth, b, NULL);
        for (int i = 0; i < n; i++) {
            int rc = clover_cu_copy2d(k->v.f[f] + b[i].recv_off, p, k->stage.f[f] + b[i].recv_off, p, b[i].cols,
                                      b[i].rows, stream);
            if (rc != 0)
                return rc;
        }
    }
    return 0;
}

/* The kernel's launches: the whole kernel, or each range of a split part. */
static int launch(const clover_call *k, void *stream)
{
    const clover_view *v = &k->v;
    clover_range rg[4];
    int nrg = k->part == PART_WHOLE ? 0 : clover_call_ranges(k, rg), rc = 0;
    switch (k->kern) {
    case K_INIT: return clover_cu_initialise(v, k->d, k->chunk, stream);
    case K_GENERATE: return clover_cu_generate(v, k->d, stream);
    case K_IDEAL_GAS: return clover_cu_ideal_gas(v, k->a, stream);
    case K_VISCOSITY:
        rc = k->part == PART_WHOLE ? clover_cu_viscosity(v, stream) : 0;
        for (int i = 0; i < nrg && rc == 0; i++)
            rc = clover_cu_viscosity_range(v, &rg[i], stream);
        return rc;
    case K_CALC_DT: return clover_cu_calc_dt(v, k->d, k->red, stream);
    case K_PDV: return clover_cu_pdv(v, k->a, k->dt, k->red, stream);
    case K_REVERT: return clover_cu_revert(v, stream);
    case K_ACCELERATE:
        rc = k->part == PART_WHOLE ? clover_cu_accelerate(v, k->dt, stream) : 0;
        for (int i = 0; i < nrg && rc == 0; i++)
            rc = clover_cu_accelerate_range(v, k->dt, &rg[i], stream);
        return rc;
    case K_FLUX_CALC: return clover_cu_flux_calc(v, k->dt, stream);
    case K_ADVEC_CELL:
        rc = k->part == PART_WHOLE ? clover_cu_advec_cell(v, k->b, k->c, stream) : 0;
        for (int i = 0; i < nrg && rc == 0; i++)
            rc = clover_cu_advec_cell_range(v, k->b, k->c, &rg[i], &k->out, stream);
        return rc;
    case K_ADVEC_MOM:
        rc = k->part == PART_WHOLE ? clover_cu_advec_mom(v, k->a, k->b, k->c, stream) : 0;
        for (int i = 0; i < nrg && rc == 0; i++)
            rc = clover_cu_advec_mom_range(v, k->a, k->b, k->c, &rg[i], &k->out, stream);
        return rc;
    case K_RESET: return clover_cu_reset_field(v, stream);
    case K_SUMMARY: return clover_cu_field_summary(v, k->red, stream);
    case K_REFLECT: return clover_cu_reflect(v, k->fields, k->nfields, k->depth, k->chunk->edges, stream);
    default: return -1;
    }
}

int clover_cu_call_run(const clover_call *k, void *stream)
{
    const clover_chunk *ch = k->chunk;
    int rc = k->unpack ? unpack(k, stream) : 0;
    if (rc == 0 && k->unpack && ch->edges) /* then the mesh boundary's ghosts, as clover_call_run */
        rc = clover_cu_reflect(&k->v, k->fields, k->nfields, k->depth, ch->edges, stream);
    if (rc != 0) {
        fprintf(stderr, "cloverleaf: halo_unpack on the chunk at (%d, %d): CUDA error %d\n", ch->x0, ch->y0, rc);
        return rc;
    }
    if (k->unpack && k->prof) {
        atomic_fetch_add_explicit(&k->prof->calls[K_UNPACK], 1, memory_order_relaxed);
        if (ch->edges)
            atomic_fetch_add_explicit(&k->prof->calls[K_REFLECT], 1, memory_order_relaxed);
    }
    rc = launch(k, stream);
    if (rc != 0)
        fprintf(stderr, "cloverleaf: %s on the chunk at (%d, %d): %s %d\n", clover_kern_name(k->kern), ch->x0,
                ch->y0, rc < 0 ? "no such kernel" : "CUDA error", rc);
    else if (k->prof)
        atomic_fetch_add_explicit(&k->prof->calls[k->kern], 1, memory_order_relaxed);
    return rc;
}

int clover_cu_bound_run(const void *b, void *stream)
{
    clover_call c;
    return clover_bound_get(b, &c) == 0 ? clover_cu_call_run(&c, stream) : -1;
}

int clover_cu_bound_run_now(void *b)
{
    return clover_cu_bound_run(b, NULL);
}
