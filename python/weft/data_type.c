/*
 * data_type.c — the weft.Data Python type: its methods (partition,
 * unregister, wont_use, the context manager), its getters (a tile's
 * geometry among them), repr, and the collector's and dealloc's hooks.
 *
 * A Data is made by the registry (data.c, for a range of memory) or by
 * partition (tiles.c, for a tile); this file holds only what Python sees
 * of one.  The fields the registry keeps (d, has_view, closing, tiles,
 * grid) are read under its lock (weft_py_reg_lock), in plain C.
 */
#include "_weft.h"

static PyObject *
Data_unregister(DataObject *d, PyObject *Py_UNUSED(ignored))
{
    if (weft_py_data_unregister(d) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Data_wont_use(DataObject *d, PyObject *Py_UNUSED(ignored))
{
    RuntimeObject *r = d->rt;
    weft_py_reg_lock(r);
    int rc = d->d ? weft_data_wont_use(d->d) : WEFT_EINVAL; /* (brief locks of its own: none of Python's) */
    weft_py_reg_unlock(r);
    if (rc != 0) {
        PyErr_SetString(PyExc_ValueError, "wont_use(): the data was unregistered");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Data_enter(DataObject *d, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(d);
}

static PyObject *
Data_exit(DataObject *d, PyObject *args)
{
    (void)args;
    if (weft_py_data_unregister(d) < 0) return NULL;
    Py_RETURN_FALSE;
}

static int
Data_traverse(DataObject *d, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(d));
    Py_VISIT(d->rt);
    Py_VISIT(d->obj);
    Py_VISIT(d->tiles);
    Py_VISIT((PyObject *)d->parent);
    return 0;
}

/* Only an unreachable Data is cleared: a partitioned one and its tiles
 * (each holds the parent) form a cycle, broken here. */
static int
Data_clear(DataObject *d)
{
    Py_CLEAR(d->tiles);
    return 0;
}

static void
Data_dealloc(DataObject *d)
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    PyTypeObject *tp = Py_TYPE(d);
    PyObject_GC_UnTrack(d);
    /* Registered data is held by its runtime's registry, so reaching here
     * means it was unregistered, the runtime closed, or it never entered.
     * Taking the lock orders this thread after every change other threads
     * made to d under it (the reference count orders them too, but TSan
     * cannot see that). */
    RuntimeObject *r = d->rt;
    weft_py_reg_lock(r);
    weft_py_reg_unlock(r);
    if (d->has_view) PyBuffer_Release(&d->view);
    Py_CLEAR(d->tiles);
    Py_CLEAR(d->parent);
    Py_CLEAR(d->obj);
    Py_CLEAR(d->rt);
    WEFT_PY_HANDOFF_RELEASE(d); /* to the next object made in this memory */
    tp->tp_free(d);
    Py_DECREF(tp);
}

static PyObject *
Data_get_obj(DataObject *d, void *Py_UNUSED(c))
{
    return Py_NewRef(d->obj);
}

static PyObject *
Data_get_nbytes(DataObject *d, void *Py_UNUSED(c))
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    if (d->parent) /* its span, halo included */
        return PyLong_FromSize_t(d->ti.rows * d->ti.cols * (size_t)d->elem);
    weft_py_reg_lock(d->rt);
    Py_ssize_t len = d->has_view ? d->view.len : 0;
    weft_py_reg_unlock(d->rt);
    return PyLong_FromSsize_t(len);
}

static PyObject *
Data_get_registered(DataObject *d, void *Py_UNUSED(c))
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    weft_py_reg_lock(d->rt);
    int on = d->d != NULL && d->rt->rt != NULL && (d->parent == NULL || d->parent->d != NULL);
    weft_py_reg_unlock(d->rt);
    return PyBool_FromLong(on);
}

static PyObject *
Data_get_readonly(DataObject *d, void *Py_UNUSED(c))
{
    return PyBool_FromLong(d->readonly);
}

static PyObject *
Data_repr(DataObject *d)
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    if (d->parent) {
        weft_py_reg_lock(d->rt);
        const char *state = d->d == NULL ? ", unregistered" : "";
        weft_py_reg_unlock(d->rt);
        const weft_tile_info *t = &d->ti;
        if (d->tndim == 1)
            return PyUnicode_FromFormat("<weft.Data tile %u of '%s': elements %zu-%zu, interior %zu-%zu%s>",
                                        t->index, Py_TYPE(d->obj)->tp_name, t->col0, t->col0 + t->cols - 1,
                                        t->in_col0, t->in_col0 + t->in_cols - 1, state);
        return PyUnicode_FromFormat("<weft.Data tile %u of '%s': rows %zu-%zu, cols %zu-%zu, interior rows "
                                    "%zu-%zu, cols %zu-%zu%s>", t->index, Py_TYPE(d->obj)->tp_name, t->row0,
                                    t->row0 + t->rows - 1, t->col0, t->col0 + t->cols - 1, t->in_row0,
                                    t->in_row0 + t->in_rows - 1, t->in_col0, t->in_col0 + t->in_cols - 1, state);
    }
    weft_py_reg_lock(d->rt); /* d, closing and has_view are the registry's */
    const char *state = d->d == NULL ? ", unregistered" : d->closing ? ", being unregistered" : "";
    Py_ssize_t len = d->has_view ? d->view.len : (Py_ssize_t)0;
    weft_py_reg_unlock(d->rt);
    return PyUnicode_FromFormat("<weft.Data of '%s', %zd bytes%s>", Py_TYPE(d->obj)->tp_name, len, state);
}

static PyObject *
Data_new_err(PyTypeObject *tp, PyObject *a, PyObject *k)
{
    (void)tp;
    (void)a;
    (void)k;
    PyErr_SetString(PyExc_TypeError, "weft.Data objects come from Runtime.data(obj) or weft.data(obj)");
    return NULL;
}

/* Tiles' geometry: None for a Data that is not a tile. */
static PyObject *
Data_get_parent(DataObject *d, void *Py_UNUSED(c))
{
    return Py_NewRef(d->parent ? (PyObject *)d->parent : Py_None);
}

static PyObject *
Data_get_index(DataObject *d, void *Py_UNUSED(c))
{
    if (!d->parent) Py_RETURN_NONE;
    unsigned gc = d->grid_cols ? d->grid_cols : 1;
    return Py_BuildValue("(II)", d->ti.index / gc, d->ti.index % gc);
}

/* (row0, col0, rows, cols) of the span (which = 0) or of the interior. */
static PyObject *
tile_rect(DataObject *d, int interior)
{
    if (!d->parent) Py_RETURN_NONE;
    const weft_tile_info *t = &d->ti;
    if (interior) return Py_BuildValue("(nnnn)", t->in_row0, t->in_col0, t->in_rows, t->in_cols);
    return Py_BuildValue("(nnnn)", t->row0, t->col0, t->rows, t->cols);
}

static PyObject *Data_get_span(DataObject *d, void *c) { (void)c; return tile_rect(d, 0); }
static PyObject *Data_get_interior(DataObject *d, void *c) { (void)c; return tile_rect(d, 1); }

/* Slices: of the parent array covering the span (window), or of the span
 * covering the interior (inner); one per dimension of the array. */
static PyObject *
slice_of(size_t a, size_t n)
{
    PyObject *x = PyLong_FromSize_t(a), *y = PyLong_FromSize_t(a + n);
    PyObject *sl = x && y ? PySlice_New(x, y, NULL) : NULL;
    Py_XDECREF(x);
    Py_XDECREF(y);
    return sl;
}

static PyObject *
tile_slices(DataObject *d, int inner)
{
    if (!d->parent) Py_RETURN_NONE;
    const weft_tile_info *t = &d->ti;
    size_t r0 = inner ? t->in_row0 - t->row0 : t->row0, c0 = inner ? t->in_col0 - t->col0 : t->col0;
    size_t nr = inner ? t->in_rows : t->rows, nc = inner ? t->in_cols : t->cols;
    PyObject *s1 = slice_of(c0, nc);
    if (d->tndim == 1 || s1 == NULL) {
        PyObject *res = s1 ? PyTuple_Pack(1, s1) : NULL;
        Py_XDECREF(s1);
        return res;
    }
    PyObject *s0 = slice_of(r0, nr);
    PyObject *res = s0 ? PyTuple_Pack(2, s0, s1) : NULL;
    Py_XDECREF(s0);
    Py_DECREF(s1);
    return res;
}

static PyObject *Data_get_window(DataObject *d, void *c) { (void)c; return tile_slices(d, 0); }
static PyObject *Data_get_inner(DataObject *d, void *c) { (void)c; return tile_slices(d, 1); }

static PyObject *
Data_get_halo(DataObject *d, void *Py_UNUSED(c))
{
    if (!d->parent) Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(d->grid_halo);
}

static PyObject *
Data_get_tiles(DataObject *d, void *Py_UNUSED(c))
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    weft_py_reg_lock(d->rt);
    PyObject *t = d->tiles && PyTuple_Check(d->tiles) ? d->tiles : Py_None;
    Py_INCREF(t); /* plain C: the registry holds d's tiles, set once */
    weft_py_reg_unlock(d->rt);
    return t;
}

static PyObject *
Data_get_grid(DataObject *d, void *Py_UNUSED(c))
{
    WEFT_PY_HANDOFF_ACQUIRE(d);
    weft_py_reg_lock(d->rt);
    unsigned gr = d->grid_rows, gc = d->grid_cols;
    weft_py_reg_unlock(d->rt);
    if (gc == 0) Py_RETURN_NONE;
    return Py_BuildValue("(II)", gr, gc);
}

static PyObject *
Data_partition(DataObject *d, PyObject *args, PyObject *kwds)
{
    return weft_py_data_partition(d, args, kwds);
}

static PyMethodDef Data_methods[] = {
    {"partition", (PyCFunction)(void (*)(void))Data_partition, METH_VARARGS | METH_KEYWORDS,
     "partition(grid, halo=0, *, cols=None) -> tiles\n\n"
     "Split this registered 1-D or C-contiguous 2-D array into grid = (grid_rows, grid_cols) tiles (an "
     "int for a 1-D array), each a weft.Data of its own for reads=/writes=/readwrites=, spanning `halo` "
     "elements of its neighbours on each side (read-only: a reader sees their newest values).  The "
     "element type and shape come from the buffer; cols= tiles only the first cols elements of each "
     "row (the rest is padding, never touched).  Returns a list of lists of tiles (a list for an int "
     "grid).  Waits for the tasks already spawned on the data.  Once only; the tiles live as long as "
     "the data (unregister the whole array)."},
    {"unregister", (PyCFunction)Data_unregister, METH_NOARGS,
     "Wait for the tasks that use it, then release the buffer."},
    {"wont_use", (PyCFunction)Data_wont_use, METH_NOARGS,
     "A hint (StarPU's starpu_data_wont_use): it will not be used again soon, so its copies on GPUs "
     "are the first evicted when a GPU needs room.  Never blocks."},
    {"__enter__", (PyCFunction)Data_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Data_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef Data_getset[] = {
    {"obj", (getter)Data_get_obj, NULL, "the registered object", NULL},
    {"nbytes", (getter)Data_get_nbytes, NULL, "size of its buffer", NULL},
    {"registered", (getter)Data_get_registered, NULL, "True while registered", NULL},
    {"readonly", (getter)Data_get_readonly, NULL, "True for a read-only buffer", NULL},
    {"tiles", (getter)Data_get_tiles, NULL, "its tiles (a tuple, row-major) once partitioned, else None", NULL},
    {"grid", (getter)Data_get_grid, NULL, "(grid_rows, grid_cols) once partitioned (a tile: its parent's "
     "grid), else None", NULL},
    {"parent", (getter)Data_get_parent, NULL, "a tile: the weft.Data it was partitioned from (else None)", NULL},
    {"index", (getter)Data_get_index, NULL, "a tile: its (row, col) in the grid (else None)", NULL},
    {"span", (getter)Data_get_span, NULL,
     "a tile: (row0, col0, rows, cols) of what it spans in the parent, halo included, in elements "
     "(a 1-D array: row0 0, rows 1)", NULL},
    {"interior", (getter)Data_get_interior, NULL,
     "a tile: (row0, col0, rows, cols) of its interior in the parent (what a writer writes)", NULL},
    {"window", (getter)Data_get_window, NULL,
     "a tile: the slices of the parent array it spans (a[t.window] is the tile, halo included)", NULL},
    {"inner", (getter)Data_get_inner, NULL,
     "a tile: the slices of its span that are its interior (ctx.array(t)[t.inner])", NULL},
    {"halo", (getter)Data_get_halo, NULL, "a tile: the halo width of its tiling", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot Data_slots[] = {
    {Py_tp_doc, "The memory a buffer-protocol object covers, registered with a runtime (one "
                "weft.Data per range: every object over the same bytes names it).  Tasks that "
                "name it, or any object over memory overlapping it, in reads=/writes=/"
                "readwrites=/commutes= are ordered by their access modes; disjoint ranges are "
                "independent.  The buffer of obj, the first object named for this memory, "
                "stays exported (its memory pinned) until unregistered.  Safe to use from "
                "several threads (the runtime's registry has a lock of its own)."},
    {Py_tp_new, Data_new_err},
    {Py_tp_dealloc, Data_dealloc},
    {Py_tp_traverse, Data_traverse},
    {Py_tp_clear, Data_clear},
    {Py_tp_methods, Data_methods},
    {Py_tp_getset, Data_getset},
    {Py_tp_repr, Data_repr},
    {0, NULL}};

PyType_Spec weft_py_data_spec = {"weft.Data", sizeof(DataObject), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, Data_slots};
