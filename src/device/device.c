/*
 * device/device.c — what every device kind shares: capacity accounting,
 * memory in host RAM (the host's and the test device's), the host wait for
 * an event (through the wait engine), and deleting a device.
 */
#include "device/device.h"

int weft__device_charge(weft__device *dev, size_t n)
{
    size_t used = atomic_load(&dev->used);
    do {
        if (n > dev->capacity || used > dev->capacity - n)
            return WEFT_ENOMEM;
    } while (!atomic_compare_exchange_weak(&dev->used, &used, used + n));
    return 0;
}

void weft__device_uncharge(weft__device *dev, size_t n) { atomic_fetch_sub(&dev->used, n); }

typedef struct event_arg {
    weft__device *dev;
    weft__devent *e;
} event_arg;

static bool event_fired(const void *arg)
{
    const event_arg *a = arg;
    return a->dev->ops->event_query(a->e) != 0;
}

int weft__device_event_wait(weft__device *dev, weft__devent *e)
{
    if (dev->ops->event_wait)
        return dev->ops->event_wait(e);
    event_arg a = {dev, e};
    weft__wait w = {.key = e, .done = event_fired, .arg = &a, .deadline = UINT64_MAX, .spin = 2000};
    weft__wait_until(dev->ws, &w);
    int r = dev->ops->event_query(e);
    return r < 0 ? r : 0;
}

int weft__device_host_mem_alloc(weft__device *dev, size_t n, void **out)
{
    if (weft__device_charge(dev, n) != 0)
        return WEFT_ENOMEM;
    void *p = weft__alloc(n);
    if (!p) {
        weft__device_uncharge(dev, n);
        return WEFT_ENOMEM;
    }
    *out = p;
    return 0;
}

void weft__device_host_mem_free(weft__device *dev, void *p, size_t n)
{
    if (!p)
        return;
    weft__free(p);
    weft__device_uncharge(dev, n);
}

void weft__device_delete(weft__device *dev)
{
    if (!dev)
        return;
    dev->ops->stop(dev);
    weft__free(dev);
}
