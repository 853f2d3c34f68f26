/*
 * accesses.c — the C accesses of a spawn (spawn.c, acquire.c, comm.c): for
 * each object a task names, its Data's handle and mode, the Data held
 * until the spawn is done with it.
 *
 * Naming a Data is one step under the registry's lock (data_use): it is
 * refused if the Data was unregistered or is being unregistered, and, for
 * device views and communication buffers, if other registered ranges
 * overlap its memory (the core orders the rest).  An object's Data found
 * as another thread's unregister of it ended is looked up again (it
 * registers anew).  The arrays come from malloc, since they grow inside
 * the step.
 */
#include "_weft.h"

void
weft_py_accs_init(weft_py_accs *a)
{
    a->acc = a->acc_small;
    a->dat = a->dat_small;
    a->n = 0;
    a->cap = WEFT_PY_ACCS_SMALL;
}

/* Room for need accesses (malloc: called in data_use's step); 0, or -1
 * (nothing changed). */
static int
accs_reserve(weft_py_accs *a, size_t need)
{
    if (need <= a->cap) return 0;
    size_t c = a->cap * 2;
    while (c < need) c *= 2;
    weft_access *acc = malloc(c * sizeof *acc);
    DataObject **dat = malloc(c * sizeof *dat);
    if (acc == NULL || dat == NULL) {
        free(acc);
        free(dat);
        return -1;
    }
    memcpy(acc, a->acc, a->n * sizeof *acc);
    memcpy(dat, a->dat, a->n * sizeof *dat);
    if (a->acc != a->acc_small) free(a->acc);
    if (a->dat != a->dat_small) free(a->dat);
    a->acc = acc;
    a->dat = dat;
    a->cap = c;
    return 0;
}

static void
accs_push(weft_py_accs *a, DataObject *d, unsigned mode)
{
    a->acc[a->n].data = d->d;
    a->acc[a->n].mode = mode; /* (a user reduction's operator included: its number in bits 20-30) */
    a->dat[a->n] = (DataObject *)Py_NewRef(d);
    a->n++;
}

/* Step: name d for a spawn with mode (its own handle, in a).  The core
 * orders it with every handle over overlapping memory and refuses what
 * such a handle cannot do (a reduction: weft_spawn's message); two
 * refusals are made here, where the message names Python's terms: device
 * views (device_data=True) and communication buffers, of memory other
 * registered ranges overlap.  0, or -1 with *err. */
static int
data_use(RuntimeObject *r, DataObject *d, unsigned mode, weft_py_accs *a, reg_err *err)
{
    if (d->d == NULL || r->rt == NULL || (d->parent && d->parent->d == NULL)) {
        err->kind = REG_UNREGISTERED;
        return -1;
    }
    /* A tile goes as its parent goes (which overlaps nothing: partition
     * refuses overlapping ranges, and so does registering one later). */
    const DataObject *range = d->parent ? d->parent : d;
    err->lo = range->lo;
    err->hi = range->hi;
    if (range->closing) {
        err->kind = REG_CLOSING;
        return -1;
    }
    int shared = (mode & WEFT_PY_COMM_ACCESS || !(mode & WEFT_HOST)) && !d->parent
                 && weft_py_registry_overlaps(&r->reg, d);
    if (shared) {
        err->kind = mode & WEFT_PY_COMM_ACCESS ? REG_COMM_OVERLAP : REG_DEVICE_OVERLAP;
        return -1;
    }
    if (accs_reserve(a, a->n + 1) < 0) {
        err->kind = REG_NOMEM;
        return -1;
    }
    accs_push(a, d, mode & ~WEFT_PY_COMM_ACCESS);
    return 0;
}

int
weft_py_data_accesses(RuntimeObject *r, PyObject *obj, const char *what, unsigned mode, weft_py_accs *a)
{
    DataObject *d;
    int given = Py_IS_TYPE(obj, r->st->Data_T);
    if (given) {
        d = (DataObject *)obj;
        WEFT_PY_HANDOFF_ACQUIRE(d);
        if (d->rt != r) {
            PyErr_Format(PyExc_ValueError, "%s: this weft.Data belongs to another runtime", what);
            return -1;
        }
        if ((mode & (WEFT_W | WEFT_REDUCE)) && d->readonly) {
            weft_py_err_read_only(d->obj, what);
            return -1;
        }
        Py_INCREF(d);
    }
    for (int tries = 0;; tries++) {
        if (!given && (d = weft_py_data_of_object(r, obj, what, (mode & (WEFT_W | WEFT_REDUCE)) != 0, 1)) == NULL)
            return -1;
        reg_err err = {REG_OK, 0, 0, 0, 0};
        weft_py_reg_lock(r);
        int rc = data_use(r, d, mode, a, &err);
        int again = rc < 0 && !given && err.kind == REG_UNREGISTERED && r->rt != NULL && tries < 1000;
        weft_py_reg_unlock(r);
        Py_DECREF(d);
        /* An object's data found as another thread's unregister of it
         * ended (between the lookup and the use): not the caller's doing,
         * and no longer there: look it up again (it registers anew). */
        if (again) continue;
        if (rc < 0) weft_py_reg_raise(&err, what, given);
        return rc;
    }
}

int
weft_py_accs_stale(const weft_py_accs *a)
{
    if (a->n == 0) return 0;
    RuntimeObject *r = a->dat[0]->rt; /* a spawn names one runtime's data only */
    int stale = 0;
    weft_py_reg_lock(r);
    for (size_t i = 0; i < a->n && !stale; i++) {
        const DataObject *x = a->dat[i], *range = x->parent ? x->parent : x;
        stale = range->closing || range->d == NULL || x->d == NULL;
    }
    weft_py_reg_unlock(r);
    return stale;
}

void
weft_py_accs_clear(weft_py_accs *a)
{
    size_t n = a->n;
    a->n = 0;
    for (size_t i = 0; i < n; i++) Py_DECREF(a->dat[i]);
}

void
weft_py_accs_free(weft_py_accs *a)
{
    if (a->acc != a->acc_small) free(a->acc);
    if (a->dat != a->dat_small) free(a->dat);
    weft_py_accs_init(a);
}
