/*
 * api/models.c — the performance models as the API shows them
 * (weft_runtime_predict, weft_models_print): the "dmda" policy's models
 * (sched/perfmodel.h), asked about by kind and device.
 */
#include "api/runtime.h"
#include "sched/perfmodel.h"

#include <stdio.h>

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
