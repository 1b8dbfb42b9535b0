#define _POSIX_C_SOURCE 200809L
/* A fake libhccl.so + libascendcl for pycoll's binding tests: the same C symbols and values as hccl.h /
 * hccl_types.h, backed by fake_vendor.c and fake_collectives.c. Calls are logged to FAKE_COLL_LOG;
 * FAKE_COLL_FAIL injects HcclResult codes ("HcclAllReduce=5", "async=21", ...). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fake_vendor.h"

enum { SUCCESS = 0, E_PARA = 1 };

typedef struct { char internal[4108]; } root_info_t;
typedef fake_vendor_comm_t comm_t;

EXPORT const char *HcclGetErrorString(int code)
{
    static char text[64];
    snprintf(text, sizeof text, "fake hccl error %d", code);
    return code == 0 ? "success" : text;
}

EXPORT int HcclGetRootInfo(root_info_t *info)
{
    int injected = fake_injected("HcclGetRootInfo");
    if (injected)
        return injected;
    memset(info, 0, sizeof *info);
    fake_new_id(info->internal, 128);
    memcpy(info->internal + sizeof info->internal - 4, "END", 4); /* the whole 4108 bytes must arrive */
    return SUCCESS;
}

/* Blocking, as HCCL's is. */
EXPORT int HcclCommInitRootInfo(uint32_t nranks, const root_info_t *info, uint32_t rank, comm_t **out)
{
    const char *algo = getenv("HCCL_ALGO");
    fake_log("HcclCommInitRootInfo rank=%u nranks=%u algo=%s", rank, nranks, algo ? algo : "");
    int injected = fake_injected("HcclCommInitRootInfo");
    if (injected)
        return injected;
    if (rank >= nranks || memcmp(info->internal + sizeof info->internal - 4, "END", 4) != 0)
        return E_PARA;
    comm_t *c = fake_vendor_comm_new(info->internal, (int)rank, (int)nranks);
    while (!fake_comm_ready(c->fake)) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    *out = c;
    return SUCCESS;
}

/* Stops at once: HCCL has no abort, pycoll destroys a communicator that missed its deadline. */
EXPORT int HcclCommDestroy(comm_t *c)
{
    fake_vendor_comm_end(c, "HcclCommDestroy", 1);
    return SUCCESS;
}

EXPORT int HcclGetCommAsyncError(comm_t *c, int *error)
{
    *error = fake_vendor_async_error(c);
    return SUCCESS;
}

/* HcclDataType -> fake dtype (-1: int16, uint16, which the fake does not reduce); HcclReduceOp -> fake op. */
static const int dtypes[] = {FAKE_I8, -1, FAKE_I32, FAKE_F16, FAKE_F32, FAKE_I64, FAKE_U64, FAKE_U8, -1, FAKE_U32,
                             FAKE_F64, FAKE_BF16};
static const int ops[] = {FAKE_SUM, FAKE_PROD, FAKE_MAX, FAKE_MIN};
static const fake_vendor_t hccl = {dtypes, sizeof dtypes / sizeof dtypes[0], ops, sizeof ops / sizeof ops[0],
                                   E_PARA};

EXPORT int HcclAllReduce(void *send, void *recv, uint64_t count, int dtype, int op, comm_t *c, void *stream)
{
    return fake_vendor_collective(&hccl, "HcclAllReduce", FAKE_ALL_REDUCE, send, recv, count, dtype, op, -1, c, stream);
}

EXPORT int HcclReduceScatter(void *send, void *recv, uint64_t count, int dtype, int op, comm_t *c, void *stream)
{
    return fake_vendor_collective(&hccl, "HcclReduceScatter", FAKE_REDUCE_SCATTER, send, recv, count, dtype, op, -1, c,
                                  stream);
}

EXPORT int HcclAllGather(void *send, void *recv, uint64_t count, int dtype, comm_t *c, void *stream)
{
    return fake_vendor_collective(&hccl, "HcclAllGather", FAKE_ALL_GATHER, send, recv, count, dtype, 0, -1, c, stream);
}

EXPORT int HcclBroadcast(void *buf, uint64_t count, int dtype, uint32_t root, comm_t *c, void *stream)
{
    return fake_vendor_collective(&hccl, "HcclBroadcast", FAKE_BROADCAST, buf, buf, count, dtype, 0, (int)root, c,
                                  stream);
}

EXPORT int HcclReduce(void *send, void *recv, uint64_t count, int dtype, int op, uint32_t root, comm_t *c,
                      void *stream)
{
    return fake_vendor_collective(&hccl, "HcclReduce", FAKE_REDUCE, send, recv, count, dtype, op, (int)root, c, stream);
}

EXPORT int HcclBarrier(comm_t *c, void *stream)
{
    static int32_t word;
    return fake_vendor_collective(&hccl, "HcclBarrier", FAKE_ALL_REDUCE, &word, &word, 1, 2, 0, -1, c, stream);
}

/* ---- the AscendCL piece pycoll uses ---- */

EXPORT int aclrtSynchronizeStreamWithTimeout(void *stream, int32_t timeout_ms)
{
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (!fake_stream_busy(stream))
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (timeout_ms >= 0 &&
            (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 >= timeout_ms)
            return 507046;
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}
