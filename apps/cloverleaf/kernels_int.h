/* CloverLeaf on Weft: what the host kernels' files (kernels.c, advec.c)
 * share: the build's vector and inlining switches, row pointers into a
 * view, and small arithmetic helpers.  Private to those files: not part
 * of clover.h's interface. */
#ifndef CLOVER_KERNELS_INT_H
#define CLOVER_KERNELS_INT_H

#include "clover.h"

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
static inline int imax2(int a, int b) { return a > b ? a : b; }
static inline int imin2(int a, int b) { return a < b ? a : b; }

/* r intersected with the domain [0, dx) x [0, dy). */
static inline clover_range clip(const clover_range *r, int dx, int dy)
{
    clover_range c = {imax2(r->j0, 0), imin2(r->j1, dx), imax2(r->k0, 0), imin2(r->k1, dy)};
    return c;
}

#endif /* CLOVER_KERNELS_INT_H */
