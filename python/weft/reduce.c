/*
 * reduce.c — the element type of a reduction's buffer (spawn's reduces=,
 * the communication reductions of comm.c).
 *
 * A reduction combines elements of one type, which the core must be told:
 * a built-in operator's WEFT_RED_* type comes from the buffer's struct
 * format (weft_py_reduce_type), and a user reduction's element size is
 * checked against it (weft_py_reduce_user_check).  A tile's elements are
 * its parent's, recorded when it was made (tiles.c).  Nothing here touches
 * the registry.
 */
#include "_weft.h"

/* The element a reduction over obj combines (obj a buffer object or a
 * weft.Data; a tile's is its parent's): its struct format and size.  The
 * format points into e (a tile's) or into the buffer e holds; elem_release
 * lets the buffer go.  0, or -1 with an exception. */
typedef struct {
    const char *fmt;
    Py_ssize_t itemsize;
    char fmtbuf[4];
    Py_buffer b;
    int held;
} elem_info;

static int
elem_of(modstate *st, PyObject *obj, const char *what, elem_info *e)
{
    e->held = 0;
    if (Py_IS_TYPE(obj, st->Data_T) && ((DataObject *)obj)->parent) {
        DataObject *x = (DataObject *)obj;
        strcpy(e->fmtbuf, x->format);
        e->fmt = e->fmtbuf;
        e->itemsize = x->elem;
        return 0;
    }
    PyObject *o = Py_IS_TYPE(obj, st->Data_T) ? ((DataObject *)obj)->obj : obj;
    if (!PyObject_CheckBuffer(o)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a weft.Data or an object supporting the buffer "
                     "protocol (a NumPy array, array.array...), got '%.100s'", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(o, &e->b, PyBUF_RECORDS_RO) < 0) {
        PyErr_Clear();
        if (PyObject_GetBuffer(o, &e->b, PyBUF_FORMAT | PyBUF_ANY_CONTIGUOUS) < 0) return -1;
    }
    e->held = 1;
    e->fmt = e->b.format ? e->b.format : "B";
    e->itemsize = e->b.itemsize;
    return 0;
}

static void
elem_release(elem_info *e)
{
    if (e->held) PyBuffer_Release(&e->b);
    e->held = 0;
}

int
weft_py_reduce_type(modstate *st, PyObject *obj, const char *what, unsigned *type)
{
    elem_info e;
    if (elem_of(st, obj, what, &e) < 0) return -1;
    const char *fmt = e.fmt;
    Py_ssize_t itemsize = e.itemsize;
    /* The byte order: native only. */
    const union { uint16_t u; uint8_t c[2]; } probe = {1};
    int little = probe.c[0] == 1;
    const char *f = fmt;
    int ok = 1;
    if (*f == '<') ok = little, f++;
    else if (*f == '>' || *f == '!') ok = !little, f++;
    else if (*f == '@' || *f == '=') f++;
    unsigned ty = 0;
    if (ok && f[0] && !f[1]) {
        switch (f[0]) {
        case 'i': case 'l': case 'q': case 'n':
            ty = itemsize == 4 ? WEFT_RED_I32 : itemsize == 8 ? WEFT_RED_I64 : 0;
            break;
        case 'I': case 'L': case 'Q': case 'N':
            ty = itemsize == 4 ? WEFT_RED_U32 : itemsize == 8 ? WEFT_RED_U64 : 0;
            break;
        case 'f':
            ty = itemsize == 4 ? WEFT_RED_F32 : 0;
            break;
        case 'd':
            ty = itemsize == 8 ? WEFT_RED_F64 : 0;
            break;
        default:
            break;
        }
    }
    if (ty == 0) {
        char ts[8];
        if (weft_py_typestr_of(fmt, itemsize, ts) < 0) strcpy(ts, "?");
        PyErr_Format(PyExc_TypeError, "%s: a reduction needs elements of type int32, int64, uint32, uint64, "
                     "float32 or float64 (native byte order); this buffer's are '%s' (struct format '%s', "
                     "%zd bytes)", what, ts, fmt, itemsize);
    }
    elem_release(&e);
    if (ty == 0) return -1;
    *type = ty;
    return 0;
}

int
weft_py_reduce_user_check(modstate *st, PyObject *obj, const char *what, Py_ssize_t itemsize, PyObject *name)
{
    elem_info e;
    if (elem_of(st, obj, what, &e) < 0) return -1;
    /* Bytes are any elements (the core checks that the size is a whole
     * number of them). */
    if (e.itemsize == itemsize || e.itemsize == 1) {
        elem_release(&e);
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s: reduction %R combines %zd-byte elements, but this buffer's are %zd bytes "
                 "(struct format '%.40s'): reduce a buffer of the reduction's dtype (or of bytes)",
                 what, name, itemsize, e.itemsize, e.fmt);
    elem_release(&e);
    return -1;
}
