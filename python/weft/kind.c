/*
 * kind.c — the names a Python task goes by: its label in messages (the
 * body's function name), its kind for the performance models (kind=, or
 * the one its function gives, with the warning when two functions of
 * different code give one kind), a continuation's kind, and the name a
 * weft_task_desc carries.
 */
#include "_weft.h"

/* n's UTF-8 (cached in the str: valid while n lives), or NULL if n is not
 * a str (no exception left). */
static const char *
str_utf8(PyObject *n)
{
    const char *s = n && PyUnicode_Check(n) ? PyUnicode_AsUTF8(n) : NULL;
    if (s == NULL) PyErr_Clear();
    return s;
}

const char *
weft_py_fn_label(PyObject *fn)
{
    if (PyMethod_Check(fn)) fn = PyMethod_GET_FUNCTION(fn);
    if (PyFunction_Check(fn)) return str_utf8(((PyFunctionObject *)fn)->func_name);
    if (PyCFunction_Check(fn)) return ((PyCFunctionObject *)fn)->m_ml->ml_name;
    if (PyType_Check(fn)) {
        const char *s = ((PyTypeObject *)fn)->tp_name, *dot = strrchr(s, '.');
        return dot ? dot + 1 : s;
    }
    if (PyCoro_CheckExact(fn)) {
        /* An async body failing after an await (its function is gone by
         * then): its function's name, a string the coroutine holds. */
        PyObject *n = PyObject_GetAttrString(fn, "__name__");
        const char *s = str_utf8(n);
        if (n == NULL) PyErr_Clear();
        Py_XDECREF(n);
        return s;
    }
    return NULL;
}

/* s as a kind Weft accepts (weft_task_desc.kind), into buf when it must
 * change: a name longer than WEFT_KIND_MAX bytes keeps its start (whole
 * UTF-8 characters), '~' and a hash of the whole, so that long qualified
 * names stay apart. */
static const char *
kind_fit(const char *s, char buf[WEFT_KIND_MAX + 1])
{
    size_t n = s ? strlen(s) : 0;
    if (n <= WEFT_KIND_MAX) return s;
    uint64_t h = 0xcbf29ce484222325u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3u;
    int keep = WEFT_KIND_MAX - 17;
    while (keep > 0 && ((unsigned char)s[keep] & 0xC0) == 0x80) keep--; /* (not inside a character) */
    snprintf(buf, WEFT_KIND_MAX + 1, "%.*s~%016llx", keep, s, (unsigned long long)h);
    return buf;
}

/* The name under which the core's models keep their rate per unit of cost
 * (its WEFT__PM_PER_COST, src/sched/perfmodel.h): no kind of work may take
 * it. */
#define KIND_PER_COST "(time per unit of cost)"

/* fn with what only passes its calls on taken off (a new reference): a
 * bound method's function, a functools.partial's func, in turn. */
static PyObject *
fn_unwrap(modstate *st, PyObject *fn)
{
    Py_INCREF(fn);
    for (int i = 0; i < 16; i++) {
        PyObject *next;
        if (PyMethod_Check(fn)) {
            next = Py_NewRef(PyMethod_GET_FUNCTION(fn));
        } else if (PyObject_TypeCheck(fn, (PyTypeObject *)st->Partial_T)) {
            if ((next = PyObject_GetAttrString(fn, "func")) == NULL) {
                PyErr_Clear();
                break;
            }
        } else {
            break;
        }
        Py_SETREF(fn, next);
    }
    return fn;
}

/* kind as a str the core accepts: itself when it fits, else kind_fit's
 * (a new reference); NULL (no exception) for none or "". */
static PyObject *
kind_str(PyObject *kind)
{
    Py_ssize_t n;
    const char *s = kind && PyUnicode_Check(kind) ? PyUnicode_AsUTF8AndSize(kind, &n) : NULL;
    if (s == NULL || n == 0) {
        PyErr_Clear();
        return NULL;
    }
    if (n <= WEFT_KIND_MAX) return Py_NewRef(kind);
    char buf[WEFT_KIND_MAX + 1];
    PyObject *k = PyUnicode_FromString(kind_fit(s, buf));
    if (k == NULL) PyErr_Clear();
    return k;
}

/* The kind fn gives (weft_task_desc.kind where kind= is not), a new str, or
 * NULL (no exception) where it gives none (the core then names the C
 * function that runs it, which every Python body shares): a function's
 * qualified name (a bound method's, a functools.partial's func's); a
 * callable's own __qualname__ (functools.wraps, weft.variants); a
 * builtin's or a class's name; a callable object's class's qualified
 * name.  A weft.Native gives none.  Shortened as kind_fit says. */
static PyObject *
fn_kind(modstate *st, PyObject *fn)
{
    if (weft_py_is_native(st, fn)) return NULL;
    PyObject *u = fn_unwrap(st, fn), *k = NULL;
    if (PyFunction_Check(u)) {
        k = kind_str(((PyFunctionObject *)u)->func_qualname);
    } else {
        PyObject *d = PyType_Check(u) ? NULL : PyObject_GenericGetDict(u, NULL);
        if (d == NULL) PyErr_Clear();
        PyObject *q = d ? PyDict_GetItemString(d, "__qualname__") : NULL; /* borrowed, from u's dict */
        k = kind_str(q);
        Py_XDECREF(d);
        const char *label = k ? NULL : weft_py_fn_label(u);
        if (label && (k = PyUnicode_FromString(label)) == NULL) PyErr_Clear();
        if (k == NULL && !PyType_Check(u) && Py_TYPE(u)->tp_call != NULL) {
            PyObject *tq = PyType_GetQualName(Py_TYPE(u));
            k = kind_str(tq);
            Py_XDECREF(tq);
        }
        if (k) {
            PyObject *fit = kind_str(k);
            Py_SETREF(k, fit);
        }
    }
    Py_DECREF(u);
    if (PyErr_Occurred()) PyErr_Clear();
    return k;
}

/* What a wrapper made by functools.wraps (or weft.variants) wraps: its
 * __wrapped__ (a new reference), or NULL (no exception). */
static PyObject *
wrapped_of(PyObject *u)
{
    if (PyFunction_Check(u) && ((PyFunctionObject *)u)->func_dict == NULL) return NULL;
    if (PyCFunction_Check(u) || PyType_Check(u)) return NULL;
    PyObject *w = PyObject_GetAttrString(u, "__wrapped__");
    if (w == NULL) PyErr_Clear();
    return w;
}

/* The code a task of fn runs, for telling apart what shares a kind (a new
 * reference into *code), through bound methods, functools.partial and
 * functools.wraps: a function's code object (closures made from one def
 * share it); a builtin's C function (as an int); a class itself; a
 * callable object's class's __call__, or that class.  *at: what it was
 * found in (a new reference), for code_where.  0, or -1 (no exception) if
 * not found. */
static int
fn_code(modstate *st, PyObject *fn, PyObject **code, PyObject **at)
{
    PyObject *u = fn_unwrap(st, fn);
    for (int i = 0; i < 16; i++) {
        PyObject *w = wrapped_of(u);
        if (w == NULL) break;
        Py_SETREF(u, fn_unwrap(st, w));
        Py_DECREF(w);
    }
    if (!PyFunction_Check(u) && !PyCFunction_Check(u) && !PyType_Check(u)) {
        /* A callable object: its class's __call__. */
        PyObject *call = PyObject_GetAttrString((PyObject *)Py_TYPE(u), "__call__");
        if (call == NULL) PyErr_Clear();
        if (call && PyFunction_Check(call)) {
            Py_SETREF(u, call);
        } else {
            Py_XDECREF(call);
            Py_SETREF(u, Py_NewRef((PyObject *)Py_TYPE(u)));
        }
    }
    if (PyFunction_Check(u)) *code = Py_NewRef(PyFunction_GET_CODE(u));
    else if (PyCFunction_Check(u)) *code = PyLong_FromVoidPtr(((PyCFunctionObject *)u)->m_ml);
    else *code = Py_NewRef(u);
    if (*code == NULL) {
        PyErr_Clear();
        Py_DECREF(u);
        return -1;
    }
    *at = u;
    return 0;
}

/* Where fn_code's code is, for messages: "qualname (file:line)" of a
 * function, "the built-in name()", "the class name" (a new str), or NULL
 * (no exception). */
static PyObject *
code_where(PyObject *at)
{
    PyObject *w;
    if (PyFunction_Check(at)) {
        PyCodeObject *c = (PyCodeObject *)PyFunction_GET_CODE(at);
        w = PyUnicode_FromFormat("%U (%U:%d)", c->co_qualname, c->co_filename, c->co_firstlineno);
    } else if (PyCFunction_Check(at)) {
        w = PyUnicode_FromFormat("the built-in %s()", ((PyCFunctionObject *)at)->m_ml->ml_name);
    } else {
        w = PyUnicode_FromFormat("the class %s", ((PyTypeObject *)at)->tp_name);
    }
    if (w == NULL) PyErr_Clear();
    return w;
}

/* Whether two codes of fn_code are one. */
static int
same_code(PyObject *a, PyObject *b)
{
    if (a == b) return 1;
    if (!PyLong_CheckExact(a) || !PyLong_CheckExact(b)) return 0;
    int eq = PyObject_RichCompareBool(a, b, Py_EQ);
    if (eq < 0) PyErr_Clear();
    return eq > 0;
}

/* A task of fn takes the kind fn gives (kind, in r->models' runtime):
 * record the code of the first function to give it, and tell once per
 * kind (weft.TaskWarning) when another's code differs.  0, or -1 with the
 * warning's exception (warnings as errors). */
static int
kind_code_check(RuntimeObject *r, PyObject *kind, PyObject *fn)
{
    PyObject *code, *at;
    if (r->kinds == NULL || fn_code(r->st, fn, &code, &at) < 0) return 0;
    PyObject *kinds = r->kinds, *first = NULL, *where = NULL;
    WEFT_PY_CS_BEGIN(kinds)
    PyObject *v = PyDict_GetItemWithError(kinds, kind); /* (borrowed: the dict's lock is held) */
    if (v == NULL && !PyErr_Occurred()) {
        PyObject *w = code_where(at);
        PyObject *e = w ? PyTuple_Pack(2, code, w) : NULL;
        if (e == NULL || PyDict_SetItem(kinds, kind, e) < 0) PyErr_Clear();
        Py_XDECREF(e);
        Py_XDECREF(w);
    } else if (v && v != Py_None && !same_code(PyTuple_GET_ITEM(v, 0), code)) {
        /* (One place compiled twice — a module imported again, source run
         * twice — is one function.) */
        where = code_where(at);
        if (where && PyUnicode_Compare(PyTuple_GET_ITEM(v, 1), where) != 0) {
            first = Py_NewRef(PyTuple_GET_ITEM(v, 1));
            if (PyDict_SetItem(kinds, kind, Py_None) < 0) PyErr_Clear();
        }
    }
    if (PyErr_Occurred()) PyErr_Clear();
    WEFT_PY_CS_END();
    int rc = 0;
    if (first) {
        rc = PyErr_WarnFormat(r->st->TaskWarning, 1,
                              "weft: tasks of kind %R run different code: %U and %U; the \"dmda\" policy keeps "
                              "one performance model per kind, which predicts them alike: pass kind=\"...\" to "
                              "spawn() to keep them apart (a name for each kind of work)",
                              kind, first, where);
        Py_DECREF(first);
    }
    Py_XDECREF(where);
    Py_DECREF(code);
    Py_DECREF(at);
    return rc;
}

/* kind= as given to a spawn: a str the core takes as a kind, checked as
 * the core checks a weft_task_desc.kind.  0, or -1 with TypeError or
 * ValueError. */
static int
kind_given_check(PyObject *k)
{
    if (!PyUnicode_Check(k)) {
        PyErr_Format(PyExc_TypeError, "spawn(): kind= expects a str (the kind of work, such as \"gemm\", whose "
                     "performance model the task's time goes into), got '%.100s'", Py_TYPE(k)->tp_name);
        return -1;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(k, &n);
    if (s == NULL) return -1;
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "spawn(): kind=\"\": name the kind of work (kind=\"gemm\"), or leave "
                        "kind= out to have the function's qualified name used");
        return -1;
    }
    if (n > WEFT_KIND_MAX) {
        PyErr_Format(PyExc_ValueError, "spawn(): kind=%R is %zd bytes in UTF-8, more than the %d a model's name "
                     "keeps (kinds that differ only after that would share one model): shorten it", k, n,
                     WEFT_KIND_MAX);
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyUnicode_GET_LENGTH(k); i++) {
        Py_UCS4 ch = PyUnicode_READ_CHAR(k, i);
        if (ch < 0x20 || ch == 0x7f) {
            char code[8];
            snprintf(code, sizeof code, "U+%04X", (unsigned)ch);
            PyErr_Format(PyExc_ValueError, "spawn(): kind=%R has a control character (%s) at index %zd: a kind is "
                         "a name of printable characters", k, code, i);
            return -1;
        }
    }
    if (strcmp(s, KIND_PER_COST) == 0) {
        PyErr_Format(PyExc_ValueError, "spawn(): kind=%R is the name the models keep their own rate per unit "
                     "of cost under: name the kind of work", k);
        return -1;
    }
    return 0;
}

int
weft_py_spawn_kind(RuntimeObject *r, PyObject *fn, PyObject *given, size_t npl, PyObject **kind)
{
    *kind = NULL;
    if (given && given != Py_None) {
        if (kind_given_check(given) < 0) return -1;
        *kind = Py_NewRef(given);
        return 0;
    }
    if (!npl || !r->models || fn == NULL || (*kind = fn_kind(r->st, fn)) == NULL) return 0;
    if (kind_code_check(r, *kind, fn) < 0) {
        Py_CLEAR(*kind);
        return -1;
    }
    return 0;
}

const char *
weft_py_resumed_kind(PyObject *kind, char buf[WEFT_KIND_MAX + 1])
{
    const char *s = PyUnicode_AsUTF8(kind);
    if (s == NULL) {
        PyErr_Clear();
        return NULL;
    }
    char whole[WEFT_KIND_MAX + 16];
    snprintf(whole, sizeof whole, "%s (resumed)", s);
    const char *k = kind_fit(whole, buf);
    if (k == whole) snprintf(buf, WEFT_KIND_MAX + 1, "%s", whole);
    return buf;
}

const char *
weft_py_desc_name(TaskObject *t, char buf[WEFT_PY_DESC_NAME])
{
    if (t->name == NULL) return NULL;
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(t->name, &len);
    if (s == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (len > WEFT_PY_DESC_NAME - 1) len = WEFT_PY_DESC_NAME - 1;
    memcpy(buf, s, (size_t)len);
    buf[len] = 0;
    return buf;
}
