/* mpi_check.h — the start the MPI tests share: MPI with
 * MPI_THREAD_MULTIPLE (Weft's communicators need it), this rank and the
 * number of ranks, a watchdog, and a skip (exit code 77) where there are
 * not two ranks or the thread level is lower. */
#ifndef WEFT_TEST_MPI_CHECK_H
#define WEFT_TEST_MPI_CHECK_H

#include "check.h"

#include <mpi.h>

static int rank, nranks;

/* Returns 0 to go on, or TEST_SKIP (MPI finalized) for main to return. */
static int test_mpi_start(int *argc, char ***argv, int watchdog_s) {
    int provided = 0;
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    test_watchdog(watchdog_s);
    if (provided < MPI_THREAD_MULTIPLE || nranks != 2) {
        if (rank == 0)
            printf("skipped: needs 2 ranks and MPI_THREAD_MULTIPLE (have %d ranks, level %d)\n", nranks, provided);
        MPI_Finalize();
        return TEST_SKIP;
    }
    return 0;
}

#endif
