/*
 * weft-models — print this machine's performance models: the times the
 * "dmda" policy learned per kind of task, kind of device and size
 * (weft_models_print; the file is named in weft.h, weft_config.policy).
 */
#include <stdio.h>

#include "weft.h"

int main(void)
{
    if (weft_models_print() != 0) {
        fprintf(stderr, "weft-models: %s\n", weft_last_error());
        return 1;
    }
    return 0;
}
