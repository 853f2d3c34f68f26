/*
 * comm/mpi_absent.c — built without MPI (no mpi.h): no communicators across
 * ranks; weft_comm_create_mpi says so.
 */
#include "comm/comm.h"

const weft__comm_backend *const weft__mpi_backend = NULL;
