/*
 * comm/mpi_absent.c — built without MPI (no mpi.h): no communicators across
 * ranks; weft_comm_create_mpi says so.
 */
#include "comm/comm.h"

#include <stdio.h>

const weft__comm_backend *const weft__mpi_backend = NULL;

int weft__mpi_init(char *why, size_t len)
{
    snprintf(why, len, "Weft was built without MPI (no mpi.h)");
    return WEFT_EINVAL;
}

int weft__mpi_finalize(char *why, size_t len) { return weft__mpi_init(why, len); }

const void *weft__mpi_world(void) { return NULL; }

int weft__mpi_allgather_counts(weft__comm *net, unsigned mine, unsigned *all)
{
    (void)net;
    (void)mine;
    (void)all;
    return WEFT_EINVAL;
}
