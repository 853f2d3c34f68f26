/*
 * comm/nccl_absent.c — built without NCCL (no nccl.h): no backend for CUDA
 * communicators; weft_comm_create says so.
 */
#include "comm/comm.h"

const weft__comm_backend *const weft__nccl_backend = NULL;
