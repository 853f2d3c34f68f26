/*
 * comm/nccl_absent.c — built without NCCL (no nccl.h): the engine for CUDA
 * communicators serves none; weft_comm_create says so.
 */
#include "comm/comm.h"

const weft__comm_engine weft__nccl_engine = {
    .name = "nccl",
    .kind = "cuda",
    .absent = "no communicator for cuda devices (Weft was built without NCCL)",
};
