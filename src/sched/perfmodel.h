/*
 * sched/perfmodel.h — performance models: how long a kind of task takes on
 * a kind of device, learned from the times the runtime observes.
 *
 * A model is kept per (kind, arch): the task's kind (weft_task_desc.kind,
 * or its body's name), the device's architecture ("cpu", "vgpu", "cuda:<its
 * product name>").  Within it, a history per size (the bytes of the task's
 * accesses): the count, mean and spread of the times observed at exactly
 * that size (every observation's up to 50, then a moving average that
 * weighs the last 50 or so); and a fit over the sizes seen, ln t = a + b ln size, for
 * sizes not seen yet.  A prediction is the history's mean where it has
 * one (a hit), else the fit's value (two sizes or more), else the one size
 * seen scaled linearly, else none.
 *
 * Models persist between runs in one text file per machine (see
 * weft__pm_path): read when the store opens, written back (atomically, by
 * rename) when it closes if anything was learned.  A file that does not
 * parse is ignored, with a warning on stderr naming it and its bad line.
 *
 * The store's lock protects everything in it; nothing nests under it (the
 * placer calls in with its own lock held).
 */
#ifndef WEFT_SCHED_PERFMODEL_H
#define WEFT_SCHED_PERFMODEL_H

#include "internal.h"

#include <stdio.h>

#define WEFT__PM_NAME 64   /* a kind's or arch's name, with its NUL */
/* The model of each arch's time per unit of cost (weft_task_desc.cost),
 * kept as a kind of its own, at size 0 (a name no task's kind may take). */
#define WEFT__PM_PER_COST "(time per unit of cost)"

typedef struct weft__pm_hist weft__pm_hist;
typedef struct weft__pm_model weft__pm_model;

typedef struct weft__perfmodel {
    pthread_mutex_t lock;
    weft__pm_model *models;      /* every (kind, arch), newest first */
    weft__pm_hist **table;       /* histories by hash of (model, size); nbucket of them */
    size_t nbucket, nhist;
    char path[1024];             /* the file ("" : not persisted) */
    bool dirty;                  /* learned since it was read */
} weft__perfmodel;

/* What a prediction rests on. */
enum { WEFT__PM_NONE = 0, WEFT__PM_HISTORY = 1, WEFT__PM_FIT = 2 };

/* Open a store, reading path's models if the file exists (NULL or "": a
 * store kept in memory only).  0 or WEFT_ENOMEM; a file that does not
 * parse leaves the store empty, with a warning. */
int weft__pm_open(weft__perfmodel *pm, const char *path);
/* Write the models back (if persisted and anything was learned) and free
 * the store. */
void weft__pm_close(weft__perfmodel *pm);

/* The file of this machine's models: $WEFT_PERFMODEL_DIR, else
 * $XDG_CACHE_HOME/weft/perfmodels, else $HOME/.cache/weft/perfmodels, then
 * /<hostname>.models.  "" (and false) when WEFT_PERFMODEL is "0" or "off",
 * or no directory is known.  The directory is made if it is missing. */
bool weft__pm_path(char *buf, size_t len);

/* name as a kind of at most len - 1 bytes, into buf: itself when it fits,
 * else its start, '~' and a hash of the whole (16 hex digits), so that
 * derived names that differ only past the limit stay apart. */
void weft__kind_fold(char *buf, size_t len, const char *name);

/* The model of (kind, arch), made if new: a handle for the calls below, or
 * NULL when out of memory.  Names longer than WEFT__PM_NAME - 1 bytes are
 * cut. */
weft__pm_model *weft__pm_model_get(weft__perfmodel *pm, const char *kind, const char *arch);

/* The model of (kind, arch) if there is one (none is made): NULL when no
 * task of that kind was observed or predicted on that arch. */
weft__pm_model *weft__pm_model_find(weft__perfmodel *pm, const char *kind, const char *arch);

/* Predict m's time at `size` bytes: WEFT__PM_HISTORY, WEFT__PM_FIT or
 * WEFT__PM_NONE (*ns unset).  *seen: the observations m has in all, and
 * those on their way (weft__pm_pending). */
int weft__pm_predict(weft__perfmodel *pm, weft__pm_model *m, uint64_t size, double *ns, uint64_t *seen);

/* Count a task sent to calibrate m (delta +1), or one that observed or
 * gave up (-1): calibration spreads over the devices by what is on its
 * way, not only by what came back. */
void weft__pm_pending(weft__perfmodel *pm, weft__pm_model *m, int delta);

/* Record an observation of m at `size` bytes (ns > 0). */
void weft__pm_observe(weft__perfmodel *pm, weft__pm_model *m, uint64_t size, double ns);

/* Print every model (kind, arch, size, count, mean and spread, and each
 * model's fit) to f: the readable form of the store. */
void weft__pm_print(weft__perfmodel *pm, FILE *f);

#endif
