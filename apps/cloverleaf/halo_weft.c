/* The C driver's halo updates between its chunks (run_weft_int.h; the
 * time step that calls them is run_weft.c's). */
#include "run_weft_int.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- halo updates -------------------------------------------------------- */

/* A halo update: the chunks on the mesh's boundary reflect first (each
 * alone, on its own cells), then every block a chunk takes from the
 * chunks around it moves in one phase: across its four faces and its four
 * corners, from the diagonal chunk or, on the mesh's boundary, from the
 * face neighbour's reflected ghosts (clover_halo_block: no block is read
 * from cells the exchange writes, so they can all move at once).  The
 * ghosts end up as the reference's two phases (x faces, then y faces over
 * the whole width) and reflection leave them, bit for bit, with one
 * exchange per update instead of two, and the next kernel waits for the
 * exchange alone. */
static const unsigned halo_dirs[8] = {
    CLOVER_LEFT, CLOVER_RIGHT, CLOVER_BOTTOM, CLOVER_TOP,
    CLOVER_LEFT | CLOVER_BOTTOM, CLOVER_RIGHT | CLOVER_BOTTOM, CLOVER_LEFT | CLOVER_TOP, CLOVER_RIGHT | CLOVER_TOP};

static int neighbour(const clover_chunk *c, unsigned edge)
{
    switch (edge) {
    case CLOVER_LEFT: return c->left;
    case CLOVER_RIGHT: return c->right;
    case CLOVER_BOTTOM: return c->bottom;
    default: return c->top;
    }
}

/* The chunk across `edges` (a face or a corner) from chunk c, or -1. */
static int across(const sim *s, int c, unsigned edges)
{
    unsigned xe = edges & (CLOVER_LEFT | CLOVER_RIGHT), ye = edges & (CLOVER_BOTTOM | CLOVER_TOP);
    int n = xe ? neighbour(&s->ch[c].c, xe) : c;
    if (n >= 0 && ye)
        n = neighbour(&s->ch[n].c, ye);
    return n;
}

/* The same faces seen from the other side. */
static unsigned flip(unsigned edges)
{
    unsigned out = 0;
    if (edges & CLOVER_LEFT)
        out |= CLOVER_RIGHT;
    if (edges & CLOVER_RIGHT)
        out |= CLOVER_LEFT;
    if (edges & CLOVER_BOTTOM)
        out |= CLOVER_TOP;
    if (edges & CLOVER_TOP)
        out |= CLOVER_BOTTOM;
    return out;
}

/* Where chunk c's ghosts across `edges` (a face or a corner) come from:
 * the chunk returned (-1: its own reflection), *ghost the faces along
 * which that chunk sends its reflected ghost lines (a corner on the mesh's
 * boundary; clover_halo_block_ghost). */
static int source(const sim *s, int c, unsigned edges, unsigned *ghost)
{
    unsigned xe = edges & (CLOVER_LEFT | CLOVER_RIGHT), ye = edges & (CLOVER_BOTTOM | CLOVER_TOP);
    *ghost = 0;
    int n = across(s, c, edges);
    if (n >= 0 || !xe || !ye)
        return n;
    if ((n = across(s, c, xe)) >= 0) {
        *ghost = ye;
        return n;
    }
    if ((n = across(s, c, ye)) >= 0)
        *ghost = xe;
    return n;
}

/* Where the block of field f that chunk `to` takes across `edges` from
 * chunk `from` (source's, with its ghost faces) lies in the two arrays:
 * the transfer's offsets, pitches and sizes, and no handle (a host task's
 * body, which must not read chunk_rt's handles: the driver may swap them
 * meanwhile). */
static void block_place(const sim *s, int to, int from, unsigned edges, unsigned ghost, int f, int depth,
                        weft_xfer *t)
{
    const chunk_rt *me = &s->ch[to], *other = &s->ch[from];
    clover_strip mine, theirs;
    clover_halo_block_ghost(&me->c, f, depth, edges, ghost, &mine);
    clover_halo_block_ghost(&other->c, f, depth, flip(edges & ~ghost) | ghost, ghost, &theirs);
    t->src_off = theirs.send_off * sizeof(double);
    t->src_pitch = ((size_t)other->c.nx + 5) * sizeof(double);
    t->dst_off = mine.recv_off * sizeof(double);
    t->dst_pitch = ((size_t)me->c.nx + 5) * sizeof(double);
    t->bytes = mine.cols * sizeof(double);
    t->rows = mine.rows;
}

/* That block as a transfer between the handles (NULL for chunks of other
 * ranks: their side is not read here); staged: into `to`'s staging array
 * of f, at the same offsets.  Called when the exchange is spawned. */
static void strip_xfer(const sim *s, int to, int from, unsigned edges, unsigned ghost, int f, int depth,
                       int staged, weft_xfer *t)
{
    block_place(s, to, from, edges, ghost, f, depth, t);
    t->src = s->ch[from].f[f];
    t->dst = staged ? s->ch[to].stage[f] : s->ch[to].f[f];
}

/* In host memory (chunks on the CPU): the block of field f that chunk
 * `to` takes from chunk `from` across `edges` (block_place's offsets),
 * copied row by row from the sender's array src into dst (to's field, or
 * its staging array).  The arrays are the task's own (weft_ctx_data of
 * the handles named when it was spawned): the driver may have swapped a
 * chunk's handles since (split advection). */
static void copy_block_host(sim *s, int to, int from, unsigned edges, unsigned ghost, int f, int depth, double *dst,
                            const double *src)
{
    weft_xfer t;
    block_place(s, to, from, edges, ghost, f, depth, &t);
    for (size_t r = 0; r < t.rows; r++)
        memcpy((char *)dst + t.dst_off + r * t.dst_pitch, (const char *)src + t.src_off + r * t.src_pitch, t.bytes);
}

/* Chunks on the CPU: a host task fills the mesh boundary's ghosts and
 * then copies the blocks between this rank's chunks; across ranks the
 * exchange with other ranks follows it. */
enum { DO_COPY = 1, DO_REFLECT = 4 };

typedef struct host_halo {
    sim *s;
    int fields[MAX_HALO_FIELDS], nfields, depth;
    unsigned what;
    weft_access *acc;
} host_halo;

static void host_halo_free(void *arg)
{
    host_halo *h = arg;
    free(h->acc);
    free(h);
}

/* The host task's body.  Its accesses are the fields' handles, field by
 * field, this rank's chunks in order within each. */
static int host_halo_body(weft_ctx *ctx, void *arg)
{
    host_halo *h = arg;
    sim *s = h->s;
    const int nloc = s->hi - s->lo;
#define FIELD_OF(fi, c) ((double *)weft_ctx_data(ctx, (size_t)(fi) * (size_t)nloc + (size_t)((c) - s->lo)))
    uint64_t t0 = now_ns();
    for (int c = s->lo; c < s->hi && (h->what & DO_REFLECT); c++) {
        const chunk_rt *me = &s->ch[c];
        if (!me->c.edges)
            continue;
        clover_view v = {.nx = me->c.nx, .ny = me->c.ny, .pitch = (size_t)me->c.nx + 5};
        for (int fi = 0; fi < h->nfields; fi++)
            v.f[h->fields[fi]] = FIELD_OF(fi, c);
        clover_k_reflect(&v, h->fields, h->nfields, h->depth, me->c.edges);
    }
    uint64_t t1 = now_ns();
    if (h->what & DO_REFLECT) {
        atomic_fetch_add_explicit(&s->prof.ns[K_REFLECT], t1 - t0, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->prof.calls[K_REFLECT], 1, memory_order_relaxed);
    }
    if (!(h->what & DO_COPY))
        return 0;
    for (int c = s->lo; c < s->hi; c++)
        for (int e = 0; e < 8; e++) {
            unsigned ghost;
            int nb = source(s, c, halo_dirs[e], &ghost);
            if (nb < 0 || !local(s, nb))
                continue;
            for (int fi = 0; fi < h->nfields; fi++)
                copy_block_host(s, c, nb, halo_dirs[e], ghost, h->fields[fi], h->depth, FIELD_OF(fi, c),
                                FIELD_OF(fi, nb));
        }
#undef FIELD_OF
    atomic_fetch_add_explicit(&s->prof.ns[K_HALO], now_ns() - t1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->prof.calls[K_HALO], 1, memory_order_relaxed);
    return 0;
}

static int halo_host(sim *s, const int *fields, int nfields, int depth, unsigned what)
{
    int nloc = s->hi - s->lo;
    host_halo *h = calloc(1, sizeof *h);
    weft_access *acc = calloc((size_t)nloc * (size_t)nfields, sizeof *acc);
    if (!h || !acc) {
        free(h);
        free(acc);
        return WEFT_ENOMEM;
    }
    h->s = s;
    h->nfields = nfields;
    h->depth = depth;
    h->what = what;
    h->acc = acc;
    size_t n = 0;
    for (int i = 0; i < nfields; i++) {
        h->fields[i] = fields[i];
        for (int c = s->lo; c < s->hi; c++) {
            acc[n].data = s->ch[c].f[fields[i]];
            acc[n++].mode = WEFT_RW;
        }
    }
    weft_task_desc td;
    weft_task_desc_init(&td);
    td.body = host_halo_body;
    td.arg = h;
    td.arg_destroy = host_halo_free;
    td.accesses = acc;
    td.naccesses = n;
    td.name = what == DO_REFLECT ? "halo_reflect" : "halo";
    int rc = weft_spawn(s->rt, &td, NULL);
    if (rc != 0)
        fprintf(stderr, "cloverleaf: spawning a halo update: %s\n", weft_last_error());
    return rc;
}

/* A halo update's blocks between chunks whose members differ (member_of:
 * the chunk's member) as one exchange on communicator c, in one order
 * every rank derives alike.  staged: a staged update's (no corner from
 * reflected ghosts: the receiver's reflection makes it later; into the
 * receivers' staging arrays). */
static int halo_exchange(sim *s, weft_comm *c, int (*member_of)(const sim *, int), const int *fields, int nfields,
                         int depth, int staged)
{
    size_t max = (size_t)s->n * 8 * (size_t)nfields, n = 0;
    weft_xfer *x = calloc(max ? max : 1, sizeof *x);
    if (!x)
        return WEFT_ENOMEM;
    for (int to = 0; to < s->n; to++)
        for (int e = 0; e < 8; e++) {
            unsigned ghost;
            int from = source(s, to, halo_dirs[e], &ghost);
            if (staged && ghost) /* staged: the receiver's reflection makes that corner */
                continue;
            if (from < 0 || member_of(s, from) == member_of(s, to))
                continue;
            for (int fi = 0; fi < nfields; fi++) {
                weft_xfer *t = &x[n++];
                strip_xfer(s, to, from, halo_dirs[e], ghost, fields[fi], depth, staged, t);
                t->from = (unsigned)member_of(s, from);
                t->to = (unsigned)member_of(s, to);
            }
        }
    int rc = 0;
    if (n > 0 && (rc = weft_comm_exchange(c, x, n, "halo", NULL)) != 0)
        fprintf(stderr, "cloverleaf: halo exchange: %s\n", weft_last_error());
    free(x);
    return rc;
}

/* A chunk's member: on the GPUs' communicator (one GPU a chunk), on the ranks'. */
static int member_gpu(const sim *s, int c) { (void)s; return c; }
static int member_rank(const sim *s, int c) { return c / s->nloc; }

/* Chunks on GPUs (one each): each chunk on the mesh boundary fills its
 * ghosts there on its stream, then the blocks go as one exchange over the
 * chunks' communicator (GPU to GPU within a rank, through host memory
 * across ranks). */
static int halo_gpu(sim *s, const int *fields, int nfields, int depth)
{
    for (int c = s->lo; c < s->hi; c++)
        if (s->ch[c].c.edges) {
            int rc = cw_k_reflect(s, c, fields, nfields, depth);
            if (rc)
                return rc;
        }
    if (s->comm && !s->no_exchange)
        return halo_exchange(s, s->comm, member_gpu, fields, nfields, depth, 0);
    return 0;
}

/* A halo update into the fields' ghosts (run_weft_int.h): on GPUs
 * halo_gpu; on the CPU the host task, and across ranks the exchange on
 * the ranks' communicator after it; --no-exchange: the reflection alone. */
int cw_halo(sim *s, const int *fields, int nfields, int depth)
{
    if (s->no_exchange)
        return s->ngpu && !s->ncpu ? halo_gpu(s, fields, nfields, depth)
                                   : halo_host(s, fields, nfields, depth, DO_REFLECT);
    /* CPU chunks beside GPU chunks: the host task does the whole update,
     * the GPU chunks' fields brought to the host for it (weft's data
     * layer) and back to their GPUs for the next kernel. */
    if (s->ngpu && !s->ncpu)
        return halo_gpu(s, fields, nfields, depth);
    if (!s->net)
        return halo_host(s, fields, nfields, depth, DO_COPY | DO_REFLECT);
    int rc = halo_host(s, fields, nfields, depth, s->nloc > 1 ? DO_REFLECT | DO_COPY : DO_REFLECT);
    return rc ? rc : halo_exchange(s, s->net, member_rank, fields, nfields, depth, 0);
}

/* ---- staged halo updates (sim.split) ------------------------------------ */

/* A staged update moves the ghost blocks that come from other chunks
 * (faces, and corners from the diagonal chunk) into the receiving chunk's
 * staging arrays (chunk_rt.stage), reading only the senders' own cells
 * from their fields, so that it runs beside the next kernel's interior
 * tasks, which only read the fields too, and waits for nothing but the
 * kernels that wrote those fields.  The kernel's border task then copies
 * the staged blocks into the fields' ghost cells (clover_call_run, or
 * clover_cu_call_run on CUDA), reflects on the mesh's boundary, and computes the border
 * ring.  That is the reference's order, exchange then reflection
 * (clover_halo_recv_blocks says why it gives the same ghosts): no corner
 * from a neighbour's reflected ghosts is needed, so the exchange does
 * not wait for the neighbours' reflections, and nothing the interior
 * reads is written before the border task.  On GPUs the blocks
 * go as one exchange over the chunks' communicator, as halo_gpu's; on the
 * CPU one gather task per chunk copies the blocks from this rank's
 * chunks, and the exchange with other ranks follows as halo's. */

/* Chunks on the CPU: the task copying into chunk c's staging arrays the
 * blocks it takes from this rank's chunks (their fields read); the
 * task's argument, freed with it. */
typedef struct gather_halo {
    sim *s;
    int c;                       /* the receiving chunk */
    halo_upd u;                  /* the update (its field list is static: step_start's, step_rest's) */
    int nb[8], nnb;              /* the chunks it takes blocks from, each once */
    weft_access *acc;            /* the task's accesses: per field, c's staging array, then nb's fields */
} gather_halo;

/* The task's arg_destroy. */
static void gather_halo_free(void *arg)
{
    gather_halo *g = arg;
    free(g->acc);
    free(g);
}

/* The gather task's body: every block from this rank's chunks into the
 * receiving chunk's staging arrays (host memory: chunks on the CPU). */
static int gather_halo_body(weft_ctx *ctx, void *arg)
{
    gather_halo *g = arg;
    sim *s = g->s;
    uint64_t t0 = now_ns();
    for (int e = 0; e < 8; e++) {
        int nb = across(s, g->c, halo_dirs[e]);
        if (nb < 0 || !local(s, nb))
            continue;
        int i = 0;
        while (g->nb[i] != nb)
            i++;
        for (int fi = 0; fi < g->u.nfields; fi++) {
            size_t base = (size_t)fi * (size_t)(g->nnb + 1);
            copy_block_host(s, g->c, nb, halo_dirs[e], 0, g->u.fields[fi], g->u.depth, weft_ctx_data(ctx, base),
                            weft_ctx_data(ctx, base + 1 + (size_t)i));
        }
    }
    atomic_fetch_add_explicit(&s->prof.ns[K_HALO], now_ns() - t0, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->prof.calls[K_HALO], 1, memory_order_relaxed);
    return 0;
}

/* Spawn chunk c's gather task for update u (none when no neighbour of c
 * is this rank's): it writes c's staging arrays of u's fields and reads
 * the fields of each of this rank's chunks c takes a block from, each
 * named once. */
static int halo_gather(sim *s, int c, const halo_upd *u)
{
    int nb[8], nnb = 0;
    for (int e = 0; e < 8; e++) {
        int n = across(s, c, halo_dirs[e]), seen = 0;
        if (n < 0 || !local(s, n))
            continue;
        for (int i = 0; i < nnb; i++)
            seen |= nb[i] == n;
        if (!seen)
            nb[nnb++] = n;
    }
    if (nnb == 0)
        return 0;
    gather_halo *g = calloc(1, sizeof *g);
    weft_access *acc = calloc((size_t)(nnb + 1) * (size_t)u->nfields, sizeof *acc);
    if (!g || !acc) {
        free(g);
        free(acc);
        return WEFT_ENOMEM;
    }
    *g = (gather_halo){.s = s, .c = c, .u = *u, .nnb = nnb, .acc = acc};
    memcpy(g->nb, nb, sizeof nb);
    size_t n = 0;
    for (int fi = 0; fi < u->nfields; fi++) {
        acc[n++] = (weft_access){s->ch[c].stage[u->fields[fi]], WEFT_RW};
        for (int i = 0; i < nnb; i++)
            acc[n++] = (weft_access){s->ch[nb[i]].f[u->fields[fi]], WEFT_R};
    }
    char name[32];
    snprintf(name, sizeof name, "halo_gather.c%d", c);
    weft_task_desc td;
    weft_task_desc_init(&td);
    td.body = gather_halo_body;
    td.arg = g;
    td.arg_destroy = gather_halo_free;
    td.accesses = acc;
    td.naccesses = n;
    td.name = name;
    int rc = weft_spawn(s->rt, &td, NULL);
    if (rc != 0)
        fprintf(stderr, "cloverleaf: spawning %s: %s\n", name, weft_last_error());
    return rc;
}

/* A staged halo update of u's fields (the blocks into the staging
 * arrays); the next kernel's border jobs unpack it and reflect. */
int cw_halo_staged(sim *s, const halo_upd *u)
{
    int rc;
    if (s->ngpu)
        return s->comm ? halo_exchange(s, s->comm, member_gpu, u->fields, u->nfields, u->depth, 1) : 0;
    for (int c = s->lo; c < s->hi; c++)
        if ((rc = halo_gather(s, c, u)) != 0)
            return rc;
    return s->net ? halo_exchange(s, s->net, member_rank, u->fields, u->nfields, u->depth, 1) : 0;
}
