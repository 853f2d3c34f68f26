/* sys_openmp.c — OpenMP tasks with depend clauses (libgomp), the structure
 * every OpenMP task code uses: `parallel` + `single`, one thread creates every
 * task, each with depend(in:) on its producers' output slots and
 * depend(out:) on its own; the barrier at the end of `single` waits for all.
 * Up to four inputs use plain depend clauses; longer lists use an OpenMP 5.0
 * iterator (all_to_all, wide nearest). */
#include "wb.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef WB_HAVE_OPENMP
#include <omp.h>

typedef struct ostate {
    int dummy;
} ostate;

static const char *omp_missing(void)
{
    return NULL;
}

static int omp_init(wb_run *r, void **state, char *err, size_t errn)
{
    (void)r;
    ostate *S = calloc(1, sizeof *S);
    if (!S) {
        snprintf(err, errn, "out of memory");
        return -1;
    }
    *state = S;
    return 0;
}

#define SLOT(g, q) (*(char *)(R->slots[(g)] + (size_t)(q) * R->slot_stride))

static int omp_exec(void *state, wb_run *R, char *err, size_t errn)
{
    (void)state;
    (void)err;
    (void)errn;
    const wb_graph *G = &R->graph;
    const int T = G->shape.steps;
#pragma omp parallel num_threads((int)R->workers)
#pragma omp single
    {
        char **ptrs = malloc(sizeof(char *) * (G->maxdeps ? G->maxdeps : 1));
        for (int t = 0; t < T; t++) {
            for (uint32_t g = 0; g < R->ngraphs; g++) {
                for (uint32_t p = G->step_start[t]; p < G->step_start[t + 1]; p++) {
                    const uint32_t *d = G->deps + G->dep_start[p];
                    const int nd = (int)(G->dep_start[p + 1] - G->dep_start[p]);
                    switch (nd) {
                    case 0:
#pragma omp task firstprivate(g, p) depend(out : SLOT(g, p))
                        wb_point(R, g, p, (unsigned)omp_get_thread_num());
                        break;
                    case 1:
#pragma omp task firstprivate(g, p) depend(in : SLOT(g, d[0])) depend(out : SLOT(g, p))
                        wb_point(R, g, p, (unsigned)omp_get_thread_num());
                        break;
                    case 2:
#pragma omp task firstprivate(g, p) depend(in : SLOT(g, d[0]), SLOT(g, d[1])) \
    depend(out : SLOT(g, p))
                        wb_point(R, g, p, (unsigned)omp_get_thread_num());
                        break;
                    case 3:
#pragma omp task firstprivate(g, p) depend(in : SLOT(g, d[0]), SLOT(g, d[1]), SLOT(g, d[2])) \
    depend(out : SLOT(g, p))
                        wb_point(R, g, p, (unsigned)omp_get_thread_num());
                        break;
                    case 4:
#pragma omp task firstprivate(g, p) \
    depend(in : SLOT(g, d[0]), SLOT(g, d[1]), SLOT(g, d[2]), SLOT(g, d[3])) \
    depend(out : SLOT(g, p))
                        wb_point(R, g, p, (unsigned)omp_get_thread_num());
                        break;
                    default: {
                        for (int k = 0; k < nd; k++) ptrs[k] = &SLOT(g, d[k]);
                        int n = nd;
                        (void)n; /* GCC 12 wrongly reports n unused when only an iterator uses it */
#pragma omp task firstprivate(g, p) depend(iterator(k = 0 : n), in : *ptrs[k]) \
    depend(out : SLOT(g, p))
                        wb_point(R, g, p, (unsigned)omp_get_thread_num());
                        break;
                    }
                    }
                }
            }
        }
        free(ptrs);
    }
    return 0;
}

static void omp_fini(void *state)
{
    free(state);
}

#else /* !WB_HAVE_OPENMP */

static const char *omp_missing(void)
{
    return "not built: the compiler has no OpenMP (libgomp)";
}
static int omp_init(wb_run *r, void **state, char *err, size_t errn)
{
    (void)r;
    (void)state;
    snprintf(err, errn, "%s", omp_missing());
    return -1;
}
static int omp_exec(void *state, wb_run *r, char *err, size_t errn)
{
    (void)state;
    (void)r;
    snprintf(err, errn, "%s", omp_missing());
    return -1;
}
static void omp_fini(void *state)
{
    (void)state;
}
#endif

const wb_system wb_sys_openmp = {
    .name = "openmp",
    .what = "OpenMP tasks (libgomp), parallel+single, depend(in/out) on output slots",
    .missing = omp_missing,
    .init = omp_init,
    .exec = omp_exec,
    .fini = omp_fini,
    .edge_ordered = 1,
};
