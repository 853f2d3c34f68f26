/*
 * matrix.c — the test matrix and the checks of a factor.
 */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "chol.h"

/* splitmix64's finaliser: a well-mixed 64-bit hash of x. */
static uint64_t mix64(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void chol_matrix_fill(double *a, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            double v = (double)(mix64(seed ^ (i * n + j)) >> 11) * 0x1p-53;
            if (i == j)
                v += (double)n;
            a[i * n + j] = v;
            a[j * n + i] = v;
        }
}

int chol_check(const double *a, const double *l, const double *ref, size_t n, double *residual,
               double *ref_diff)
{
    /* r = the lower triangle of A; then r = L L^T - r by DSYRK over a copy
     * of L with its upper triangle zeroed. */
    double *lz = calloc(n * n, sizeof *lz);
    double *r = calloc(n * n, sizeof *r);
    if (!lz || !r) {
        free(lz);
        free(r);
        return WEFT_ENOMEM;
    }
    double na = 0, nd = 0, nr = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            lz[i * n + j] = j <= i ? l[i * n + j] : 0.0;
            r[i * n + j] = j <= i ? a[i * n + j] : 0.0;
        }
        if (ref)
            for (size_t j = 0; j <= i; j++) {
                double d = l[i * n + j] - ref[i * n + j];
                nd += d * d;
                nr += ref[i * n + j] * ref[i * n + j];
            }
    }
    cblas_dsyrk(CblasRowMajor, CblasLower, CblasNoTrans, (int)n, (int)n, 1.0, lz, (int)n, -1.0, r, (int)n);
    double nres = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j <= i; j++) {
            double w = i == j ? 1.0 : 2.0; /* the upper triangle mirrors the lower */
            nres += w * r[i * n + j] * r[i * n + j];
            na += w * a[i * n + j] * a[i * n + j];
        }
    free(lz);
    free(r);
    *residual = na > 0 ? sqrt(nres / na) : sqrt(nres);
    if (ref && ref_diff)
        *ref_diff = nr > 0 ? sqrt(nd / nr) : sqrt(nd);
    return 0;
}
