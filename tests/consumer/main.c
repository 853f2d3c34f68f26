/* Consumer of an installed Weft: spawn a few dependent tasks through a data
 * handle and check the result. */
#include <stdio.h>
#include <weft.h>

static int add(weft_ctx *ctx, void *arg) {
    int *x = weft_ctx_data(ctx, 0);
    *x += (int)(size_t)arg;
    return 0;
}

int main(void) {
    weft_runtime *rt;
    if (weft_runtime_create(NULL, &rt) != 0) {
        fprintf(stderr, "create: %s\n", weft_last_error());
        return 1;
    }
    int x = 0;
    weft_data *d;
    if (weft_data_register(rt, &x, sizeof x, &d) != 0) return 1;
    weft_access acc = {d, WEFT_RW};
    for (size_t i = 1; i <= 10; i++) {
        weft_task_desc desc;
        weft_task_desc_init(&desc);
        desc.body = add;
        desc.arg = (void *)i;
        desc.accesses = &acc;
        desc.naccesses = 1;
        if (weft_spawn(rt, &desc, NULL) != 0) return 1;
    }
    if (weft_wait_all(rt) != 0) return 1;
    if (weft_data_unregister(d) != 0) return 1;
    if (weft_runtime_destroy(rt) != 0) return 1;
    if (x != 55) {
        fprintf(stderr, "consumer: got %d, want 55\n", x);
        return 1;
    }
    printf("consumer: ok (weft %d.%d.%d)\n", WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR,
           WEFT_VERSION_PATCH);
    return 0;
}
