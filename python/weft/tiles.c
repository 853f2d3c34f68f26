/*
 * tiles.c — partitioning a registered Data into tiles (Data.partition,
 * Runtime.partition) and the tile bookkeeping the registry does.
 *
 * A tile is a weft.Data holding a C tile handle (weft_data_partition) and
 * its parent; the parent holds its tiles in a tuple, set once.  Tiles are
 * never in the registry's objs or spans: the core orders a tile with its
 * family, and the registry refuses a range over a partitioned one
 * (enter_range in data.c).  Partitioning claims the parent under the
 * registry's lock (`partitioning`: no unregister, no other partition, no
 * overlapping range meanwhile), waits for the tasks already on it and
 * partitions in the core with the lock released, then publishes the
 * tiles under the lock.  The registry calls weft_py_tiles_forget when the
 * parent's handle goes (unregistered, or the runtime closed).
 */
#include "_weft.h"

/* ------------------------------------------------------------------------ */
/* Tile bookkeeping                                                          */
/* ------------------------------------------------------------------------ */

/* No tiles, not a tile. */
void
weft_py_tile_fields_init(DataObject *d)
{
    d->tiles = NULL;
    d->grid_rows = d->grid_cols = d->grid_halo = 0;
    d->partitioning = 0;
    d->parent = NULL;
    memset(&d->ti, 0, sizeof d->ti);
    d->tndim = 0;
    d->elem = 0;
    d->format[0] = 0;
}

/* Part of a step: d's tiles went with it (unregistered, or the runtime
 * closed): their handles are no longer valid. */
void
weft_py_tiles_forget(DataObject *d)
{
    if (d->tiles == NULL || !PyTuple_Check(d->tiles)) return;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(d->tiles); i++)
        ((DataObject *)PyTuple_GET_ITEM(d->tiles, i))->d = NULL;
}

/* ------------------------------------------------------------------------ */
/* Partitioning                                                              */
/* ------------------------------------------------------------------------ */

/* A C-contiguous 1-D or 2-D layout of d's memory, from its object's buffer:
 * the tiling's elem, rows, cols (all of a row unless `cols` >= 0) and
 * pitch, with the element's format.  0, or -1 with an exception. */
static int
tiling_of(DataObject *d, Py_ssize_t cols, weft_tiling *t, int *ndim, char format[4])
{
    Py_buffer b;
    if (PyObject_GetBuffer(d->obj, &b, PyBUF_RECORDS_RO) < 0) {
        PyObject *cause = weft_py_fetch_exc();
        PyErr_Format(PyExc_ValueError, "partition(): the '%.100s' object does not describe its items and "
                     "shape (the buffer protocol with strides and format)", Py_TYPE(d->obj)->tp_name);
        if (cause) {
            PyObject *e = weft_py_fetch_exc();
            PyException_SetCause(e, cause);
            weft_py_raise_exc(e);
            Py_DECREF(e);
        }
        return -1;
    }
    int rc = -1;
    char typestr[8];
    const char *fmt = b.format ? b.format : "B";
    if (b.buf != d->view.buf || b.len != d->view.len) {
        PyErr_Format(PyExc_ValueError, "partition(): the '%.100s' object no longer covers the memory it "
                     "was registered with", Py_TYPE(d->obj)->tp_name);
    } else if (strlen(fmt) >= 4 || weft_py_typestr_of(fmt, b.itemsize, typestr) < 0) {
        PyErr_Format(PyExc_TypeError, "partition(): items of struct format '%s' (%zd bytes) cannot be viewed "
                     "as a tile's elements: partition an array of one simple type (a NumPy dtype such as "
                     "float64 or int32)", fmt, b.itemsize);
    } else if (b.ndim != 1 && b.ndim != 2) {
        PyErr_Format(PyExc_ValueError, "partition(): the array has %d dimensions; tiles split a 1-D or 2-D "
                     "array (reshape it first, e.g. a.reshape(rows, -1))", b.ndim);
    } else if (b.ndim == 2 && !PyBuffer_IsContiguous(&b, 'C')) {
        PyErr_SetString(PyExc_ValueError, "partition(): a 2-D array must be C-contiguous (row-major): a "
                        "Fortran-ordered array's rows are not contiguous (use numpy.ascontiguousarray)");
    } else if (b.len == 0) {
        PyErr_SetString(PyExc_ValueError, "partition(): the array is empty");
    } else {
        Py_ssize_t width = b.shape[b.ndim - 1];
        if (cols >= 0 && (cols < 1 || cols > width)) {
            PyErr_Format(PyExc_ValueError, "partition(): cols=%zd: each row has %zd elements (cols= tiles "
                         "the first 1 to %zd of them, the rest being padding)", cols, width, width);
        } else {
            t->elem = (size_t)b.itemsize;
            t->rows = b.ndim == 2 ? (size_t)b.shape[0] : 1;
            t->cols = (size_t)(cols >= 0 ? cols : width);
            t->pitch = (size_t)width * (size_t)b.itemsize;
            *ndim = b.ndim;
            strcpy(format, fmt);
            rc = 0;
        }
    }
    PyBuffer_Release(&b);
    return rc;
}

/* grid= as grid_rows x grid_cols: an int (a 1-D array only) or a pair. */
static int
parse_grid(PyObject *grid, int ndim, unsigned *gr, unsigned *gc)
{
    long a = 1, c;
    if (PyLong_Check(grid)) {
        if (ndim != 1) {
            PyErr_SetString(PyExc_ValueError, "partition(): grid= of a 2-D array is a pair (grid_rows, "
                            "grid_cols)");
            return -1;
        }
        c = PyLong_AsLong(grid);
    } else if (PyTuple_Check(grid) && PyTuple_GET_SIZE(grid) == 2) {
        a = PyLong_AsLong(PyTuple_GET_ITEM(grid, 0));
        if (a == -1 && PyErr_Occurred()) return -1;
        c = PyLong_AsLong(PyTuple_GET_ITEM(grid, 1));
    } else {
        PyErr_Format(PyExc_TypeError, "partition(): grid= expects (grid_rows, grid_cols) or, for a 1-D "
                     "array, an int; got '%.100s'", Py_TYPE(grid)->tp_name);
        return -1;
    }
    if (c == -1 && PyErr_Occurred()) return -1;
    if (a < 0 || c < 0 || a > UINT_MAX || c > UINT_MAX) {
        PyErr_Format(PyExc_ValueError, "partition(): grid of %ld x %ld tiles", a, c);
        return -1;
    }
    *gr = (unsigned)a;
    *gc = (unsigned)c;
    return 0;
}

/* The tile Data for C tile handle h of parent p (not in the registry). */
static DataObject *
tile_new(DataObject *p, weft_data *h, int ndim, Py_ssize_t elem, const char *format, const weft_tiling *tl)
{
    weft_tile_info ti;
    if (weft_data_tile_info(h, &ti) != 0) return (DataObject *)weft_py_err_weft(WEFT_EINVAL, "partition()");
    DataObject *d = PyObject_GC_New(DataObject, Py_TYPE(p));
    if (d == NULL) return NULL;
    WEFT_PY_HANDOFF_ACQUIRE(d);
    d->rt = (RuntimeObject *)Py_NewRef(p->rt);
    d->obj = Py_NewRef(p->obj);
    memset(&d->view, 0, sizeof d->view);
    d->has_view = 0;
    d->readonly = p->readonly;
    d->d = h;
    d->dummy = 0;
    d->lo = d->hi = 0;
    d->closing = 0;
    d->acquired = 0;
    weft_py_tile_fields_init(d);
    d->parent = (DataObject *)Py_NewRef(p);
    d->grid_rows = tl->grid_rows;
    d->grid_cols = tl->grid_cols;
    d->grid_halo = tl->halo;
    d->ti = ti;
    d->tndim = ndim;
    d->elem = elem;
    strcpy(d->format, format);
    PyObject_GC_Track(d);
    WEFT_PY_HANDOFF_RELEASE(d);
    return d;
}

/* Partition with the GIL released; a spawn on another thread may make the
 * core refuse with "pending" again: wait for the tasks on d and retry. */
static int
partition_c(RuntimeObject *r, weft_data *h, const weft_tiling *t, weft_data **tiles)
{
    int rc = 0;
    for (int tries = 0; tries < 64; tries++) {
        /* Wait for the tasks already spawned on it (the core partitions
         * only data no task names): a no-op writer follows them all. */
        weft_access acc = {h, WEFT_RW | WEFT_HOST};
        weft_task *probe = NULL;
        {
            rc = weft_py_spawn_noop(r, &acc, 1, "weft.py partition", &probe);
            if (rc != 0) return rc;
            BEGIN_NOGIL
            rc = weft_task_wait(probe);
            END_NOGIL
            weft_task_release(probe);
            if (rc == WEFT_ETASKFAILED || rc == WEFT_ECANCELLED) rc = 0; /* it finished */
            if (rc != 0) return rc;
        }
        BEGIN_NOGIL
        rc = weft_data_partition(h, t, tiles);
        END_NOGIL
        if (rc != WEFT_EBUSY || strstr(weft_last_error(), "pending") == NULL) return rc;
    }
    return rc;
}

/* The tiling partition() asks of d (not a tile): grid=, halo= and cols=
 * read against its buffer.  0, or -1 with an exception. */
static int
partition_tiling(DataObject *d, PyObject *grid, Py_ssize_t halo, PyObject *colsobj, weft_tiling *t, int *ndim,
                 char format[4])
{
    Py_ssize_t cols = -1;
    if (d->parent) {
        PyErr_SetString(PyExc_ValueError, "partition(): this weft.Data is a tile (tiles are not partitioned "
                        "again)");
        return -1;
    }
    if (halo < 0 || halo > UINT_MAX) {
        PyErr_Format(PyExc_ValueError, "partition(): halo=%zd: a number of elements, 0 or more", halo);
        return -1;
    }
    if (colsobj != Py_None) {
        cols = PyNumber_AsSsize_t(colsobj, PyExc_OverflowError);
        if (cols == -1 && PyErr_Occurred()) return -1;
        if (cols < 0) cols = 0; /* refused below, with the row's width */
    }
    if (tiling_of(d, cols, t, ndim, format) < 0) return -1;
    if (parse_grid(grid, *ndim, &t->grid_rows, &t->grid_cols) < 0) return -1;
    t->halo = (unsigned)halo;
    return 0;
}

/* Claim d for partitioning: no other partition, no unregister, no
 * overlapping range registered meanwhile (enter_range refuses them from
 * now on).  Its handle (the claim keeps it: unregister waits for the
 * claim's end), or NULL with an exception. */
static weft_data *
partition_claim(RuntimeObject *r, DataObject *d)
{
    const char *why = NULL;
    weft_data *h = NULL;
    weft_py_reg_lock(r);
    if (d->d == NULL || r->rt == NULL) why = "this weft.Data was unregistered";
    else if (d->closing) why = "this weft.Data is being unregistered";
    else if (d->tiles != NULL) why = "this weft.Data is partitioned already (its tiles: Data.tiles)";
    else if (d->partitioning) why = "this weft.Data is being partitioned (on another thread)";
    else {
        d->partitioning = 1;
        h = d->d;
    }
    weft_py_reg_unlock(r);
    if (why) {
        PyErr_Format(PyExc_ValueError, "partition(): %s", why);
        return NULL;
    }
    return h;
}

/* Partition h (claimed) in the core: *hsp the tiles' handles (PyMem).  A
 * grid out of bounds gets no array: the core refuses it, saying why.  0,
 * or -1 with an exception. */
static int
partition_handles(RuntimeObject *r, weft_data *h, const weft_tiling *t, weft_data ***hsp)
{
    size_t ntiles = (size_t)t->grid_rows * t->grid_cols;
    weft_data **hs = NULL;
    if (t->grid_rows == 0 || t->grid_cols == 0 || ntiles > 4096) {
        hs = NULL; /* the core says what is wrong with the grid */
    } else if ((hs = PyMem_Malloc(ntiles * sizeof *hs)) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    weft_data *none[1];
    int rc = partition_c(r, h, t, hs ? hs : none);
    if (rc != 0) {
        if (rc == WEFT_EDEADLK || rc == WEFT_EBUSY)
            PyErr_Format(rc == WEFT_EBUSY && strstr(weft_last_error(), "pending") == NULL ? PyExc_ValueError
                                                                                          : PyExc_RuntimeError,
                         "partition(): %s", rc == WEFT_EDEADLK ? "the calling task itself accesses this data "
                         "(or waits for a task that does): partition it from outside that task, or from a "
                         "task that follows it" : weft_last_error());
        else
            weft_py_err_weft(rc, "partition()"); /* a bad tiling: ValueError with the core's reason */
        PyMem_Free(hs);
        return -1;
    }
    *hsp = hs;
    return 0;
}

/* The tile Data of d for the core's tiles hs, in a tuple; NULL with an
 * exception. */
static PyObject *
tiles_tuple(DataObject *d, weft_data **hs, int ndim, const char *format, const weft_tiling *t)
{
    size_t ntiles = (size_t)t->grid_rows * t->grid_cols;
    PyObject *tuple = PyTuple_New((Py_ssize_t)ntiles);
    for (size_t i = 0; tuple && i < ntiles; i++) {
        DataObject *x = tile_new(d, hs[i], ndim, (Py_ssize_t)t->elem, format, t);
        if (x == NULL) Py_CLEAR(tuple);
        else PyTuple_SET_ITEM(tuple, (Py_ssize_t)i, (PyObject *)x);
    }
    return tuple;
}

/* End the claim: d's tiles (tuple) and grid are set.  Without a tuple the
 * core's tiles stay (they go with d); the Data stays whole in Python, and
 * partition() reports it partitioned already. */
static void
partition_publish(RuntimeObject *r, DataObject *d, PyObject *tuple, const weft_tiling *t)
{
    weft_py_reg_lock(r);
    if (tuple == NULL) {
        d->partitioning = 0;
        d->tiles = Py_NewRef(Py_None);
        weft_py_reg_unlock(r);
        return;
    }
    d->tiles = Py_NewRef(tuple);
    d->grid_rows = t->grid_rows;
    d->grid_cols = t->grid_cols;
    d->grid_halo = t->halo;
    d->partitioning = 0;
    weft_py_reg_unlock(r);
}

/* What partition() returns: the tiles as a list (a 1-D array with an int
 * grid=), else a list of rows of them.  NULL with an exception. */
static PyObject *
tiles_result(PyObject *tuple, int ndim, PyObject *grid, const weft_tiling *t)
{
    if (ndim == 1 && PyLong_Check(grid)) return PySequence_List(tuple);
    PyObject *res = PyList_New(t->grid_rows);
    for (unsigned i = 0; res && i < t->grid_rows; i++) {
        PyObject *row = PyTuple_GetSlice(tuple, (Py_ssize_t)i * t->grid_cols, (Py_ssize_t)(i + 1) * t->grid_cols);
        PyObject *lrow = row ? PySequence_List(row) : NULL;
        Py_XDECREF(row);
        if (lrow == NULL) Py_CLEAR(res);
        else PyList_SET_ITEM(res, i, lrow);
    }
    return res;
}

PyObject *
weft_py_data_partition(DataObject *d, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"grid", "halo", "cols", NULL};
    PyObject *grid, *colsobj = Py_None;
    Py_ssize_t halo = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|n$O:partition", kwlist, &grid, &halo, &colsobj)) return NULL;
    WEFT_PY_HANDOFF_ACQUIRE(d);
    RuntimeObject *r = d->rt;
    weft_tiling t;
    int ndim;
    char format[4];
    if (partition_tiling(d, grid, halo, colsobj, &t, &ndim, format) < 0) return NULL;
    weft_data *h = partition_claim(r, d);
    if (h == NULL) return NULL;
    weft_data **hs = NULL;
    if (partition_handles(r, h, &t, &hs) < 0) {
        weft_py_reg_lock(r);
        d->partitioning = 0; /* the claim given back */
        weft_py_reg_unlock(r);
        return NULL;
    }
    PyObject *tuple = tiles_tuple(d, hs, ndim, format, &t);
    partition_publish(r, d, tuple, &t);
    PyObject *res = tuple ? tiles_result(tuple, ndim, grid, &t) : NULL;
    Py_XDECREF(tuple);
    PyMem_Free(hs);
    return res;
}

