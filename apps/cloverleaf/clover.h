/* CloverLeaf on Weft: what the deck reader, the kernels, the sequential
 * oracle and the drivers share.
 *
 * Layers, calls running downward only:
 *   drivers (run_weft.c: tasks over Weft; serial.c: one chunk, no Weft;
 *            the Python driver, cloverleaf.py, through ctypes)
 *     -> control.c (time-step rules, field summary table, verification)
 *     -> kernels.c (one chunk's arithmetic, host C; kernels.cu on CUDA)
 *     -> deck.c (input), decomp.c (chunks), png.c (picture)
 *
 * Mesh: x_cells x y_cells cells split into chunks (2-D, as the reference
 * code splits it over ranks).  A chunk of nx x ny cells stores every field
 * as its own array with two ghost layers around it, all of one shape:
 * rows ny + 5 of pitch nx + 5 doubles, element (j, k) at
 *     [(k + 2) * pitch + (j + 2)],   j in [-2, nx + 2], k in [-2, ny + 2].
 * Cells are j in [0, nx), k in [0, ny); nodes (cell corners) j in [0, nx],
 * k in [0, ny] (node j is the lower-left corner of cell j); x faces (left
 * face of cell j) j in [0, nx], k in [0, ny); y faces (bottom face of cell
 * k) j in [0, nx), k in [0, ny].  The reference code's Fortran index
 * x_min + i is j = i here.  A node or face on the line between two chunks
 * is stored (and computed, identically) by both. */
#ifndef CLOVER_H
#define CLOVER_H

#include <stddef.h>
#include <stdio.h>

/* ---- deck ------------------------------------------------------------- */

#define CLOVER_MAX_STATES 64

enum clover_geometry { CLOVER_GEOM_RECTANGLE = 1, CLOVER_GEOM_CIRCLE = 2, CLOVER_GEOM_POINT = 3 };

typedef struct clover_state {
    int defined;
    double density, energy, xvel, yvel;
    int geometry;                /* clover_geometry; state 1 (the background) has none */
    double xmin, xmax, ymin, ymax, radius;
} clover_state;

typedef struct clover_deck {
    /* states 1..nstates are state[0..nstates-1]; as the reference's reader
     * does, the parser pulls each state's xmin, xmax, ymin, ymax in by a
     * hundredth of a cell (dx/100, dy/100), so that a state's edge on a
     * cell boundary never takes the cell beyond it: clover_k_generate uses
     * the values as they are */
    int nstates;
    clover_state state[CLOVER_MAX_STATES];
    int x_cells, y_cells;
    double xmin, ymin, xmax, ymax;
    double dtinit, dtmax, dtmin, dtrise;          /* initial_timestep, max_timestep, ..., timestep_rise */
    double dtc_safe, dtu_safe, dtv_safe, dtdiv_safe;
    double end_time;
    int end_step;                /* INT_MAX when the deck gives none */
    int test_problem;            /* 0: none */
    int summary_frequency;       /* steps between field summaries (0: only the last) */
    int visit_frequency;         /* read, not used */
    int profiler_on;
} clover_deck;

/* Parse a deck (text is the whole file, name is used in messages).  On an
 * error returns -1 with a message in err naming the line and the keyword
 * ("clover_bad.in:4: 'x_cells': not a number: 'ten'"); nothing is run.
 * Checks after parsing: states numbered 1..n without gaps, every state
 * with a density and an energy, states > 1 with a geometry and its
 * extent, positive mesh sizes and extents, end_time or end_step given and
 * not negative, timestep settings positive. */
int clover_deck_parse(const char *text, const char *name, clover_deck *out, char *err, size_t errlen);
/* Read a file and parse it; the same errors, and one for a file that cannot be read. */
int clover_deck_load(const char *path, clover_deck *out, char *err, size_t errlen);

/* ---- chunks ------------------------------------------------------------ */

enum clover_edge { CLOVER_LEFT = 1, CLOVER_RIGHT = 2, CLOVER_BOTTOM = 4, CLOVER_TOP = 8 };

typedef struct clover_chunk {
    int x0, y0;                  /* global index of its first cell */
    int nx, ny;                  /* its cells */
    unsigned edges;              /* clover_edge faces that lie on the mesh's boundary */
    int left, right, bottom, top;/* neighbouring chunk (index), -1 at the boundary */
} clover_chunk;

/* Split the mesh into n chunks as a cx x cy grid (cx * cy == n, chosen as
 * the reference code does: the factor pair whose chunks are closest to
 * square for this mesh), numbered row-major from the bottom-left.  Returns
 * -1 (err says why) when a chunk would be narrower than the halo (2 cells)
 * along a side the mesh is split across. */
int clover_decompose(const clover_deck *d, int n, clover_chunk *out, int *cx, int *cy, char *err, size_t errlen);

/* ---- fields -------------------------------------------------------------- */

enum clover_field {
    CF_DENSITY0, CF_DENSITY1, CF_ENERGY0, CF_ENERGY1,
    CF_PRESSURE, CF_VISCOSITY, CF_SOUNDSPEED,
    CF_XVEL0, CF_XVEL1, CF_YVEL0, CF_YVEL1,
    CF_VOL_FLUX_X, CF_VOL_FLUX_Y, CF_MASS_FLUX_X, CF_MASS_FLUX_Y,
    CF_VOLUME, CF_XAREA, CF_YAREA,
    CF_WORK1, CF_WORK2, CF_WORK3, CF_WORK4, CF_WORK5, CF_WORK6, CF_WORK7,
    CF_NFIELDS
};

/* The field's name ("density0"). */
const char *clover_field_name(int f);

/* Geometry of a chunk: one array of doubles holding, each indexed [j + 2]
 * (or [k + 2]) over the whole stored width, cellx, celldx, vertexx,
 * vertexdx (nx + 5 each), then celly, celldy, vertexy, vertexdy (ny + 5
 * each). */
enum { CG_CELLX, CG_CELLDX, CG_VERTEXX, CG_VERTEXDX, CG_CELLY, CG_CELLDY, CG_VERTEXY, CG_VERTEXDY };
size_t clover_geom_count(int nx, int ny);                 /* doubles in the geometry array */
size_t clover_geom_offset(int nx, int ny, int which);     /* where array `which` starts */

/* One chunk's arrays where a kernel runs (host memory, or one device's). */
typedef struct clover_view {
    int nx, ny;
    size_t pitch;                /* nx + 5 */
    double *f[CF_NFIELDS];       /* NULL for fields a kernel does not touch */
    double *geom;
} clover_view;

static inline size_t clover_field_count(int nx, int ny) { return (size_t)(nx + 5) * (size_t)(ny + 5); }
#define CLOVER_AT(v, fld, j, k) ((v)->f[fld][((size_t)((k) + 2)) * (v)->pitch + (size_t)((j) + 2)])

/* ---- kernels (kernels.c; one chunk each, sequential C) ------------------- */

/* Fill the geometry array, volume, xarea and yarea of chunk c. */
void clover_k_initialise(const clover_view *v, const clover_deck *d, const clover_chunk *c);
/* Set density0, energy0, xvel0, yvel0 from the deck's states (ghosts included). */
void clover_k_generate(const clover_view *v, const clover_deck *d);
/* pressure and soundspeed from density and energy (predict: the *1 fields, else *0). */
void clover_k_ideal_gas(const clover_view *v, int predict);
void clover_k_viscosity(const clover_view *v);

/* A rectangle of a kernel's own index space (cells for viscosity, nodes
 * for accelerate): j in [j0, j1), k in [k0, k1), half-open; empty when
 * j1 <= j0 or k1 <= k0. */
typedef struct clover_range {
    int j0, j1, k0, k1;
} clover_range;

/* A kernel's domain of dx x dy indices split for overlapping a halo
 * update: out[0] the interior, the indices at least `margin` from every
 * side (whose stencil, for margin 1, touches no ghost), then out[1..4]
 * the border ring around it as four disjoint strips (bottom and top rows
 * over the whole width, then the left and right columns between them).
 * The five cover the domain exactly once; some may be empty (a domain
 * narrower than 2 * margin has an empty interior).  The drivers split
 * viscosity (dx, dy = nx, ny) and accelerate (nx + 1, ny + 1), margin 1. */
void clover_split(int dx, int dy, int margin, clover_range out[5]);
/* The same with a margin of its own along each direction: the interior at
 * least mx indices from the left and right sides, my from the bottom and
 * top (a margin of 0: the interior spans that direction, and the strips
 * across it are empty). */
void clover_split_xy(int dx, int dy, int mx, int my, clover_range out[5]);

/* The kernels over a sub-range of their domain only (intersected with
 * it): every index computed exactly as the whole kernel computes it, so
 * that calling one on the five parts of clover_split gives the whole
 * kernel's values bit for bit. */
void clover_k_viscosity_range(const clover_view *v, const clover_range *r);
void clover_k_accelerate_range(const clover_view *v, double dt, const clover_range *r);

typedef struct clover_dt {
    double dt;                   /* the chunk's smallest stable step */
    int control;                 /* 1 sound, 2 xvel, 3 yvel, 4 div */
    int j, k;                    /* global cell where it was found */
} clover_dt;
clover_dt clover_k_calc_dt(const clover_view *v, const clover_deck *d, const clover_chunk *c);

/* Returns 1 when a cell's volume would turn negative, else 0. */
int clover_k_pdv(const clover_view *v, int predict, double dt);
void clover_k_revert(const clover_view *v);
void clover_k_accelerate(const clover_view *v, double dt);
void clover_k_flux_calc(const clover_view *v, double dt);
/* dir 1: x, 2: y; sweep 1 or 2 (the first or second sweep of the step). */
void clover_k_advec_cell(const clover_view *v, int dir, int sweep);
/* vel: CF_XVEL1 or CF_YVEL1. */
void clover_k_advec_mom(const clover_view *v, int vel, int dir, int sweep);
void clover_k_reset_field(const clover_view *v);

/* The advection kernels over a sub-range of their domain (cells for
 * advec_cell, nodes for advec_mom; intersected with it), out of place:
 * they read v's fields as the whole kernels do and write the updated
 * density1 and energy1 (advec_cell) or velocity vel (advec_mom) into the
 * arrays of those fields in out, never v's own (a part reads old values
 * of cells that another part updates).  advec_cell also writes the mass
 * flux of the range's faces into v's, as the whole kernel does (a face
 * between two parts by both, the same value); both use v's work arrays.
 * Every index is computed exactly as the whole kernel computes it, so
 * the five parts of clover_advec_split give the whole kernel's values bit
 * for bit, and the interior part reads no ghost of v's fields (nor of the
 * volume fluxes and mass fluxes it reads): it may run before the halo
 * update that the whole kernel follows, the border strips after it. */
void clover_k_advec_cell_range(const clover_view *v, int dir, int sweep, const clover_range *r,
                               const clover_view *out);
void clover_k_advec_mom_range(const clover_view *v, int vel, int dir, int sweep, const clover_range *r,
                              const clover_view *out);
/* clover_split_xy for advection (mom 0: advec_cell over the nx x ny
 * cells; 1: advec_mom over the nodes) along dir (1: x, 2: y), with the
 * margins that keep the interior's stencil off the ghosts: 2 along the
 * sweep's direction, across it 0 for advec_cell and 1 for advec_mom. */
void clover_advec_split(int nx, int ny, int mom, int dir, clover_range out[5]);

/* Sums over the chunk's cells: volume, mass, internal energy, kinetic
 * energy, pressure * volume. */
enum { CS_VOL, CS_MASS, CS_IE, CS_KE, CS_PRESS, CS_N };
void clover_k_field_summary(const clover_view *v, double sums[CS_N]);

/* Fill the ghost layers (depth 1 or 2) of the listed fields on the faces in
 * `edges` by reflection, as the reference's boundary condition does (sign
 * flipped for the velocity and flux normal to the face).  Runs after the
 * exchange between chunks, over the whole stored width (corners included). */
void clover_k_reflect(const clover_view *v, const int *fields, int nfields, int depth, unsigned edges);

/* The cells of field f's array that a neighbour's ghost layers of the given
 * depth take from this chunk across face `edge` (one clover_edge), and the
 * cells of its own ghost layers it takes from that neighbour: a block of
 * `rows` rows of `cols` doubles at element offsets send_off / recv_off
 * (rows pitch apart).  phase 1 (x faces) covers the chunk's rows plus
 * depth; phase 2 (y faces) the whole stored width, so that corners come
 * through the x neighbour.  Node and face fields skip the line both
 * chunks hold. */
typedef struct clover_strip {
    size_t send_off, recv_off;   /* elements from the array's start */
    size_t rows, cols;
} clover_strip;
void clover_halo_strip(const clover_chunk *c, int f, int depth, unsigned edge, clover_strip *out);

/* The same exchange in one phase, as the drivers do it, after the chunks
 * on the mesh's boundary reflected: no block is read from cells the
 * exchange writes (its sender's own cells, or ghosts the reflection
 * filled before), so all of an update's blocks can move at once.  `edges` is one face, or a corner (one x face | one y
 * face).  A face's block covers the chunk's own extent along the face
 * (rows 0 .. ny - 1 + the shared line for x faces, columns 0 .. nx - 1 +
 * it for y faces) and `depth` lines across it; a corner's is depth x
 * depth, its columns as the x face's, its rows as the y face's.  A
 * corner comes from the diagonal chunk; where there is none but a face
 * neighbour (both chunks then lie on the mesh's boundary on the corner's
 * other face, `ghost`), from that neighbour's ghost lines along `ghost`,
 * which its reflection filled: clover_halo_block_ghost, where along the
 * faces in `ghost` the block sent is the ghost lines received.  A corner
 * with neither is the chunk's own reflection's.  The ghosts end up as
 * clover_halo_strip's two phases, then the reflection, leave them, bit
 * for bit.  Chunk a takes from chunk b across `edges` the block
 * clover_halo_block(b, f, depth, edges with each face flipped) sends into
 * its own recv_off (with ghost: the faces not in ghost flipped).  Sizes
 * are 0 for anything else than a face or a corner (ghost: a corner and
 * one of its faces). */
void clover_halo_block(const clover_chunk *c, int f, int depth, unsigned edges, clover_strip *out);
void clover_halo_block_ghost(const clover_chunk *c, int f, int depth, unsigned edges, unsigned ghost,
                             clover_strip *out);

/* A halo update the other way round (the drivers' staged updates, which
 * overlap the next kernel's interior): the blocks that come from other
 * chunks first, the reflection on the mesh's boundary after them, as the
 * reference orders them.  Then a corner comes from the diagonal chunk
 * only; one without (a chunk on the mesh's boundary) is made by the
 * reflection from the face neighbour's cells just received, which gives
 * the same ghosts bit for bit, and no block is read from another chunk's
 * ghosts.  clover_halo_recv_blocks lists the blocks chunk c receives of
 * field f: across each face with a neighbour, and each corner whose two
 * faces both have one (the chunks are a full grid: the diagonal chunk is
 * there), clover_halo_block's, in the order of dirs (the faces, then the
 * corners); returns how many (up to 8, every one non-empty), their
 * directions in edges_out when it is not NULL.  clover_halo_unpack copies
 * the blocks of the listed fields from stage->f[f] (an array of the
 * field's shape holding the blocks received at their own offsets) into
 * v->f[f]; the reflection is the caller's, after it. */
int clover_halo_recv_blocks(const clover_chunk *c, int f, int depth, clover_strip out[8], unsigned edges_out[8]);
void clover_halo_unpack(const clover_view *v, const clover_view *stage, const clover_chunk *c, const int *fields,
                        int nfields, int depth);

/* ---- control and report (control.c) ------------------------------------ */

typedef struct clover_clock {
    int step;
    double time, dt, dtold;
} clover_clock;

/* The next step's dt from the smallest chunk dt, as the reference's
 * timestep routine: ... returns -1 (message on stderr) if dt < dtmin. */
int clover_next_dt(const clover_deck *d, clover_clock *clk, double dt_chunks);

/* Print the field summary table's header and one row (reference format). */
void clover_print_summary_header(FILE *out);
void clover_print_summary(FILE *out, int step, double time, const double sums[CS_N]);
/* The verification line for a deck with a test_problem; returns 1 PASS,
 * 0 FAIL, -1 no reference for it.  Prints nothing when out is NULL. */
int clover_verify(FILE *out, const clover_deck *d, double ke);
/* Reference kinetic energy of a test problem (0 if none is known). */
double clover_reference_ke(int test_problem);

/* ---- text for other drivers (control.c; the Python driver's) --------- */
/* The same text clover_print_summary_header, clover_print_summary and
 * clover_verify print, written into buf (len bytes, always terminated):
 * return snprintf's count (the verify form: clover_verify's result, and
 * an empty text when there is nothing to print). */
int clover_format_summary_header(char *buf, size_t len);
int clover_format_summary(char *buf, size_t len, int step, double time, const double sums[CS_N]);
int clover_format_verify(char *buf, size_t len, const clover_deck *d, double ke);
/* ---- end of the text for other drivers ------------------------------- */

/* ---- picture (png.c) -------------------------------------------------- */

/* Write a w x h field (row 0 at the bottom, row-major doubles, rows
 * `pitch` doubles apart) as a colour PNG, scaled between its minimum and
 * maximum.  Returns 0, or -1 with errno set. */
int clover_write_png(const char *path, const double *field, int w, int h, size_t pitch);

/* ---- memory bandwidth (stream.c) -------------------------------------- */

/* STREAM triad a[i] = b[i] + s * c[i] over n doubles on `threads`
 * threads, best of `reps`: bytes per second (3 * 8 * n per pass), or -1.0
 * (bad arguments, no memory, a thread that would not start). */
double clover_triad_bw(size_t n, int threads, int reps);

#endif /* CLOVER_H */
