/*
 * api/models.c — the performance models as the API shows them: the policy
 * in use (weft_runtime_policy); the "dmda" policy's models
 * (sched/perfmodel.h), asked about by kind and device (weft_runtime_predict,
 * weft_models_print); and the makespan's lower bound from them over the
 * recorded task graph (weft_runtime_bound, sched/bound.h).
 */
#include "api/runtime.h"
#include "sched/bound.h"
#include "sched/perfmodel.h"

#include <stdio.h>

int weft_runtime_policy(weft_runtime *h, const char **name)
{
    weft__clear_error();
    if (!name)
        return weft__error(WEFT_EINVAL, "weft_runtime_policy: name is NULL");
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft_runtime_policy", &err, 1, true);
    if (!rt)
        return err;
    *name = rt->placer.policy->name; /* (fixed at create: the policy table's) */
    weft__rt_leave(rt, 1);
    return 0;
}

int weft_runtime_predict(weft_runtime *h, const char *kind, unsigned device, size_t bytes, double *ns)
{
    weft__clear_error();
    if (!kind || !ns)
        return weft__error(WEFT_EINVAL, "weft_runtime_predict: %s is NULL", kind ? "ns" : "kind");
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft_runtime_predict", &err, 1, true);
    if (!rt)
        return err;
    int rc = 0;
    pthread_mutex_lock(&rt->data_lock);
    unsigned ndev = rt->ndev;
    const char *arch = device < ndev ? rt->dev[device]->arch : NULL;
    pthread_mutex_unlock(&rt->data_lock);
    if (!rt->models_ready) {
        rc = weft__error(WEFT_EINVAL, "weft_runtime_predict: the runtime's policy is \"%s\"; models are kept under "
                                      "\"dmda\" (weft_config.policy)", rt->placer.policy->name);
    } else if (!arch) {
        rc = weft__error(WEFT_EINVAL, "weft_runtime_predict: device %u of %u", device, ndev);
    } else {
        weft__pm_model *m = weft__pm_model_get(&rt->models, kind, arch);
        uint64_t seen;
        rc = m ? weft__pm_predict(&rt->models, m, bytes, ns, &seen) : WEFT__PM_NONE;
    }
    weft__rt_leave(rt, 1);
    return rc;
}

int weft_models_print(void)
{
    weft__clear_error();
    char path[1024];
    if (!weft__pm_path(path, sizeof path))
        return weft__error(WEFT_EINVAL, "weft_models_print: no model file (WEFT_PERFMODEL is off, or neither "
                                        "WEFT_PERFMODEL_DIR, XDG_CACHE_HOME nor HOME is set)");
    weft__perfmodel pm;
    if (weft__pm_open(&pm, path) != 0)
        return weft__error(WEFT_ENOMEM, "weft_models_print: out of memory");
    printf("models of this machine: %s\n", path);
    weft__pm_print(&pm, stdout);
    pm.dirty = false; /* (only read) */
    weft__pm_close(&pm);
    return 0;
}

int weft__bound_of(weft__rt *rt, weft_bound *out, const char *fn)
{
    if (!rt->graph.blog)
        return weft__error(WEFT_EINVAL, "%s: the runtime records no task graph: create it with weft_config.bound = "
                                        "WEFT_BOUND_RECORD (or WEFT_BOUND_PRINT), or with WEFT_BOUND=1 in the "
                                        "environment", fn);
    /* The CPU's slots as the policy uses them ("dmda" keeps a worker for
     * the GPUs' bodies: weft__placer_models), the GPUs, and the archs the
     * models know them by (under "dmda" only). */
    const weft__placer *p = &rt->placer;
    weft__bound_machine m = {
        .pm = rt->models_ready ? &rt->models : NULL,
        .narch = rt->models_ready ? p->narch : 0,
        .arch = (const char(*)[WEFT__PM_NAME])p->arch,
        .cpu_slots = rt->models_ready && p->eft[0].slots ? p->eft[0].slots : rt->nworkers,
        .gpus = p->ngpu,
    };
    return weft__bound_compute(rt->graph.blog, &m, out, fn);
}

void weft__bound_print(weft__rt *rt)
{
    weft_bound b;
    if (weft__bound_of(rt, &b, "WEFT_BOUND") != 0) {
        fprintf(stderr, "weft: %s\n", weft_last_error());
        return;
    }
    char ratio[32] = "(no bound)";
    if (b.bound > 0)
        snprintf(ratio, sizeof ratio, "%.3f", b.makespan / b.bound);
    fprintf(stderr, "weft: WEFT_BOUND: makespan %.6f s, critical path %.6f s, area %.6f s (%u CPU slot%s, %u GPU%s), "
                    "bound %.6f s: makespan / bound %s (%llu task%s, %llu without a model)\n",
            b.makespan, b.path, b.area, b.cpu_slots, b.cpu_slots == 1 ? "" : "s", b.gpus, b.gpus == 1 ? "" : "s",
            b.bound, ratio, (unsigned long long)b.tasks, b.tasks == 1 ? "" : "s", (unsigned long long)b.no_model);
}

int weft_runtime_bound(weft_runtime *h, weft_bound *out)
{
    weft__clear_error();
    if (!out)
        return weft__error(WEFT_EINVAL, "weft_runtime_bound: out is NULL");
    int err;
    weft__rt *rt = weft__rt_enter(h, "weft_runtime_bound", &err, 1, true);
    if (!rt)
        return err;
    int rc = weft__bound_of(rt, out, "weft_runtime_bound");
    weft__rt_leave(rt, 1);
    return rc;
}
