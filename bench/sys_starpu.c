/* sys_starpu.c — StarPU (Debian's libstarpu-dev) with data handles and R/W
 * access modes, the way a StarPU program is written: every output slot is a
 * registered variable handle; a point is a task that reads (STARPU_R) its
 * producers' handles and writes (STARPU_W) its own; StarPU infers the
 * dependencies from the modes (sequential consistency).  CPU workers only,
 * as many as the run's workers; the scheduler is StarPU's default unless
 * STARPU_SCHED says otherwise.  Handles are registered once, outside the timed
 * executions; the main thread submits the tasks and waits with
 * starpu_task_wait_for_all(). */
#include "wb.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WB_HAVE_STARPU
#include <starpu.h>

typedef struct spoint {
    wb_run *run;
    uint32_t g, p;
} spoint;

typedef struct sstate {
    starpu_data_handle_t *h; /* [ngraphs * npoints] */
    spoint *args;
    size_t n;
} sstate;

static void point_cpu(void *buffers[], void *cl_arg)
{
    (void)buffers; /* registered in main RAM: the same addresses as the slots */
    const spoint *a = cl_arg;
    int w = starpu_worker_get_id();
    wb_point(a->run, a->g, a->p, w < 0 ? 0u : (unsigned)w);
}

static struct starpu_codelet point_cl = {
    .cpu_funcs = {point_cpu},
    .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "point",
};

static int starpu_up;

static const char *sp_missing(void)
{
    return NULL;
}

static int sp_init(wb_run *r, void **state, char *err, size_t errn)
{
    setenv("STARPU_SILENT", "1", 0);
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = (int)r->workers;
    conf.ncuda = 0;
    conf.nopencl = 0;
    conf.nmic = 0;
    int rc = starpu_init(&conf);
    if (rc != 0) {
        snprintf(err, errn, "starpu_init failed (%d)", rc);
        return -1;
    }
    starpu_up = 1;
    if (starpu_cpu_worker_get_count() != r->workers) {
        snprintf(err, errn, "StarPU started %u CPU workers, asked for %u",
                 starpu_cpu_worker_get_count(), r->workers);
        starpu_shutdown();
        starpu_up = 0;
        return -1;
    }
    sstate *S = calloc(1, sizeof *S);
    if (!S) goto nomem;
    S->n = (size_t)r->ngraphs * r->graph.npoints;
    S->h = calloc(S->n ? S->n : 1, sizeof *S->h);
    S->args = malloc(sizeof *S->args * (S->n ? S->n : 1));
    if (!S->h || !S->args) {
        free(S->h);
        free(S->args);
        free(S);
        goto nomem;
    }
    for (uint32_t g = 0; g < r->ngraphs; g++)
        for (uint32_t p = 0; p < r->graph.npoints; p++) {
            size_t k = (size_t)g * r->graph.npoints + p;
            S->args[k] = (spoint){r, g, p};
            starpu_variable_data_register(&S->h[k], STARPU_MAIN_RAM,
                                          (uintptr_t)(r->slots[g] + (size_t)p * r->slot_stride),
                                          r->output_bytes);
        }
    *state = S;
    return 0;
nomem:
    snprintf(err, errn, "out of memory");
    starpu_shutdown();
    starpu_up = 0;
    return -1;
}

static int sp_exec(void *state, wb_run *R, char *err, size_t errn)
{
    sstate *S = state;
    const wb_graph *G = &R->graph;
    const uint32_t np = G->npoints;
    for (int t = 0; t < G->shape.steps; t++) {
        for (uint32_t g = 0; g < R->ngraphs; g++) {
            starpu_data_handle_t *hg = S->h + (size_t)g * np;
            for (uint32_t p = G->step_start[t]; p < G->step_start[t + 1]; p++) {
                const uint32_t b = G->dep_start[p];
                const int nd = (int)(G->dep_start[p + 1] - b);
                const int nb = nd + 1;
                struct starpu_task *task = starpu_task_create();
                task->cl = &point_cl;
                task->cl_arg = &S->args[(size_t)g * np + p];
                task->cl_arg_size = sizeof(spoint);
                task->nbuffers = nb;
                if (nb > STARPU_NMAXBUFS) { /* freed by StarPU with the task */
                    task->dyn_handles = malloc(sizeof(starpu_data_handle_t) * (size_t)nb);
                    task->dyn_modes = malloc(sizeof(enum starpu_data_access_mode) * (size_t)nb);
                    if (!task->dyn_handles || !task->dyn_modes) {
                        snprintf(err, errn, "out of memory");
                        return -1;
                    }
                }
                for (int k = 0; k < nd; k++) {
                    STARPU_TASK_SET_HANDLE(task, hg[G->deps[b + (uint32_t)k]], k);
                    STARPU_TASK_SET_MODE(task, STARPU_R, k);
                }
                STARPU_TASK_SET_HANDLE(task, hg[p], nd);
                STARPU_TASK_SET_MODE(task, STARPU_W, nd);
                int rc = starpu_task_submit(task);
                if (rc != 0) {
                    snprintf(err, errn, "starpu_task_submit failed (%d)", rc);
                    starpu_task_wait_for_all();
                    return -1;
                }
            }
        }
    }
    starpu_task_wait_for_all();
    return 0;
}

/* StarPU's idle CPU workers poll for work without ever sleeping; paused
 * workers block.  Paused only while the baseline runs (never while timed). */
static void sp_pause(void *state)
{
    (void)state;
    starpu_pause();
}

static void sp_resume(void *state)
{
    (void)state;
    starpu_resume();
}

static void sp_fini(void *state)
{
    sstate *S = state;
    if (S) {
        for (size_t k = 0; k < S->n; k++) starpu_data_unregister_no_coherency(S->h[k]);
        free(S->h);
        free(S->args);
        free(S);
    }
    if (starpu_up) starpu_shutdown();
    starpu_up = 0;
}

#else /* !WB_HAVE_STARPU */

static const char *sp_missing(void)
{
    return "not built: StarPU not found by pkg-config (apt-get install libstarpu-dev)";
}
static int sp_init(wb_run *r, void **state, char *err, size_t errn)
{
    (void)r;
    (void)state;
    snprintf(err, errn, "%s", sp_missing());
    return -1;
}
static int sp_exec(void *state, wb_run *r, char *err, size_t errn)
{
    (void)state;
    (void)r;
    snprintf(err, errn, "%s", sp_missing());
    return -1;
}
static void sp_fini(void *state)
{
    (void)state;
}
#define sp_pause NULL
#define sp_resume NULL
#endif

const wb_system wb_sys_starpu = {
    .name = "starpu",
    .what = "StarPU, data handles with R/W modes (implicit dependencies), default scheduler",
    .missing = sp_missing,
    .init = sp_init,
    .exec = sp_exec,
    .fini = sp_fini,
    .pause = sp_pause,
    .resume = sp_resume,
    .edge_ordered = 1,
};
