/*
 * comm/mpi_absent.c — built without MPI (no mpi.h): the engine across
 * ranks serves none; weft_comm_create_mpi, weft_mpi_init and
 * weft_mpi_finalize say so.
 */
#include "comm/comm.h"

const weft__comm_engine weft__mpi_engine = {
    .name = "mpi",
    .kind = "mpi",
    .absent = "Weft was built without MPI (no mpi.h)",
};
