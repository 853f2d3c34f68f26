/*
 * scratch.c — the C handles of spawn's scratch= buffers.
 *
 * A scratch buffer is memory the core gives a task for its run (an access
 * WEFT_SCRATCH); a size in bytes names a handle registered with no memory
 * (weft_data_register(rt, NULL, n)), one per size asked for, made on first
 * use and listed in the registry (r->reg.scratch) while the runtime is
 * open: the C runtime's destroy unregisters them, and
 * weft_py_data_forget_all forgets the list.  The list changes under the
 * registry's lock, in steps of plain C; a handle is registered with the
 * lock released.
 */
#include "_weft.h"

/* Step: r's scratch handle of n bytes, or NULL if it has none yet. */
static weft_data *
scratch_find(RuntimeObject *r, size_t n)
{
    for (size_t i = 0; i < r->reg.nscratch; i++)
        if (r->reg.scratch[i].n == n) return r->reg.scratch[i].h;
    return NULL;
}

/* Step: list h as r's scratch handle of n bytes (malloc); 0, or -1 out of
 * memory (nothing changed). */
static int
scratch_add(RuntimeObject *r, size_t n, weft_data *h)
{
    weft_py_registry *g = &r->reg;
    if (g->nscratch == g->capscratch) {
        size_t cap = g->capscratch ? 2 * g->capscratch : 8;
        struct weft_py_scratch_size *a = realloc(g->scratch, cap * sizeof *a);
        if (a == NULL) return -1;
        g->scratch = a;
        g->capscratch = cap;
    }
    g->scratch[g->nscratch].n = n;
    g->scratch[g->nscratch].h = h;
    g->nscratch++;
    return 0;
}

weft_data *
weft_py_scratch_handle(RuntimeObject *r, size_t n, const char *what)
{
    /* Looked up; else registered (never blocks) with the lock released,
     * then listed, unless another thread listed one meanwhile: that one is
     * used, and this one unregistered (no task names it: never blocks). */
    weft_py_reg_lock(r);
    weft_data *h = r->rt ? scratch_find(r, n) : NULL;
    int closed = r->rt == NULL;
    weft_py_reg_unlock(r);
    if (h || closed) {
        if (closed) PyErr_Format(PyExc_RuntimeError, "%s: the weft runtime is closed", what);
        return h;
    }
    weft_runtime *rt = r->rt;
    weft_data *mine = NULL;
    int rc = rt ? weft_data_register(rt, NULL, n, &mine) : WEFT_ECLOSED;
    if (rc != 0) {
        weft_py_err_weft(rc, what);
        return NULL;
    }
    int nomem = 0;
    weft_py_reg_lock(r);
    closed = r->rt == NULL;
    h = closed ? NULL : scratch_find(r, n);
    if (!closed && h == NULL) {
        nomem = scratch_add(r, n, mine) < 0;
        h = nomem ? NULL : mine;
    }
    weft_py_reg_unlock(r);
    if (h != mine && !closed) (void)weft_data_unregister(mine);
    if (closed) PyErr_Format(PyExc_RuntimeError, "%s: the weft runtime is closed", what);
    if (nomem) PyErr_NoMemory();
    return h;
}

