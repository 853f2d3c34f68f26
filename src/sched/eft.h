/*
 * sched/eft.h — the earliest-finish-time policy's decision (sched/eft.c),
 * as the placer (sched/place.c) calls it.
 */
#ifndef WEFT_SCHED_EFT_H
#define WEFT_SCHED_EFT_H

#include "sched/place.h"

/* Decide pl's target (the placer's lock held): over its possible
 * alternatives and the device sets they allow, the one where it would
 * finish first, given xfer (ns to bring its data to each device: 0 the
 * CPU, 1 + g GPU g), each device's backlog and pl's models (calibrating
 * first: sched/eft.c).  Its predicted work is charged to the target's
 * backlog.  pl->target stays -1 if no alternative can run. */
void weft__eft_decide(weft__placer *p, weft__place *pl, const double *xfer);

#endif
