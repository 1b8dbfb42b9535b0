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

enum { SUCCESS = 0, E_PARA = 1, E_PTR = 2, E_NOT_SUPPORT = 5 };
enum { DT_INT8, DT_INT16, DT_INT32, DT_FP16, DT_FP32, DT_INT64, DT_UINT64, DT_UINT8, DT_UINT16, DT_UINT32, DT_FP64,
       DT_BFP16 };
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN };

/* The rules of the real HCCL this fake enforces (hccl.h, hccl_types.h and src/ops of Ascend's HCCL), each
 * checked before anything is enqueued, so a refusal leaves the communicator as it was:
 * - every collective and HcclBarrier take an aclrtStream that must not be NULL: HCCL_E_PTR;
 * - reductions (HcclAllReduce, HcclReduceScatter, HcclReduce) refuse uint8 on every part, float64 on all but
 *   the Ascend 950 parts ("Ascend950*": CANN 9.0's HCCL reduces float64 there, within a node), bfloat16 on the
 *   Atlas 910 generation (aclrtGetSocName "Ascend910A", "Ascend910ProB", ...: only
 *   "Ascend910B*" and "Ascend910_93*" have it), and prod on bfloat16: HCCL_E_NOT_SUPPORT. The device is
 *   FAKE_HCCL_SOC (default "Ascend910B1");
 * - HCCL_ALGO and HCCL_CONNECT_TIMEOUT are read once per process, at the first communicator's creation: a
 *   later value is ignored; HCCL_CONNECT_TIMEOUT must be within [120, 7200] seconds: HCCL_E_PARA at init
 *   otherwise;
 * - HcclReduce may write recvBuf on every rank, not only the root (here it writes the result there);
 * - HcclCommDestroy, HCCL's only way to stop a communicator, releases its links and device memory after its
 *   streams' tasks: behind a task waiting on a dead peer it never returns (here: FAKE_DEADLOCK_S, then
 *   "HcclCommDestroy deadlocked" is logged), as aclrtFree synchronises the device;
 * - AscendCL calls need a current context on the calling thread (aclrtSetDevice or aclrtSetCurrentContext on
 *   that thread; ACL_ERROR_RT_CONTEXT_NULL otherwise): here the thread that creates a communicator has one (the
 *   framework set its device), any other thread has none until it sets one, and HcclCommDestroy,
 *   HcclGetCommAsyncError (HCCL_E_RUNTIME), aclrtQueryEventStatus and aclrtMemcpyAsync
 *   (ACL_ERROR_RT_CONTEXT_NULL) on a thread without one fail ("without an ACL context" logged) and do nothing;
 * - streams run their work asynchronously, in order, each on a thread of its own (fake_collectives.c); no stream
 *   waits for another's work but through an event (aclrtStreamWaitEvent); aclrtMemcpy is synchronous and waits
 *   for no stream;
 * - HcclBatchSendRecv's items progress together, as an NCCL group's; HcclSend and HcclRecv each run alone. A
 *   send waits, past the per-peer buffer (FAKE_P2P_BUFFER_BYTES), for its receive; a receive of another count
 *   than its send's is an asynchronous HCCL_E_PARA (hccl.h: the peer's count and dataType must match);
 * - built with -DFAKE_HCCL_OLD_CANN, it lacks what older CANN lacks or has only as weak symbols:
 *   HcclGetErrorString, HcclGetCommAsyncError, HcclBatchSendRecv. */
static const char *soc_name(void)
{
    const char *soc = getenv("FAKE_HCCL_SOC");
    return soc ? soc : "Ascend910B1";
}

static int reduction_supported(int dtype, int op)
{
    const char *soc = soc_name();
    int atlas_910 = strncmp(soc, "Ascend910B", 10) != 0 && strncmp(soc, "Ascend910_93", 12) != 0;
    if (dtype == DT_UINT8 || (dtype == DT_FP64 && strncmp(soc, "Ascend950", 9) != 0))
        return 0;
    if (dtype == DT_BFP16 && (atlas_910 || op == OP_PROD))
        return 0;
    return 1;
}

static char process_algorithm[256];
static int algorithm_read;
static char process_connect[32];
static int connect_read;

typedef struct { char internal[4108]; } root_info_t;
typedef fake_vendor_comm_t comm_t;

#ifndef FAKE_HCCL_OLD_CANN
EXPORT const char *HcclGetErrorString(int code)
{
    static char text[64];
    snprintf(text, sizeof text, "fake hccl error %d", code);
    return code == 0 ? "success" : text;
}
#endif

/* The AscendCL context current on this thread (see the rules above). */
static char primary_context;
static _Thread_local void *current_context;

EXPORT int aclrtGetCurrentContext(void **context)
{
    *context = current_context;
    return current_context ? 0 : 107002; /* ACL_ERROR_RT_CONTEXT_NULL */
}

EXPORT int aclrtSetCurrentContext(void *context)
{
    fake_log("aclrtSetCurrentContext %s", context == &primary_context ? "primary" : "other");
    current_context = context;
    return 0;
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
    if (!algorithm_read) { /* once per process */
        const char *algo = getenv("HCCL_ALGO");
        snprintf(process_algorithm, sizeof process_algorithm, "%s", algo ? algo : "");
        algorithm_read = 1;
    }
    /* HCCL reads HCCL_CONNECT_TIMEOUT once per process, as HCCL_ALGO. */
    if (!connect_read) {
        const char *value = getenv("HCCL_CONNECT_TIMEOUT");
        snprintf(process_connect, sizeof process_connect, "%s", value ? value : "");
        connect_read = 1;
    }
    const char *connect = process_connect[0] ? process_connect : NULL;
    fake_log("HcclCommInitRootInfo rank=%u nranks=%u algo=%s connect_timeout=%s", rank, nranks, process_algorithm,
             connect ? connect : "");
    int injected = fake_injected("HcclCommInitRootInfo");
    if (injected)
        return injected;
    if (connect && (atoi(connect) < 120 || atoi(connect) > 7200)) {
        fake_log("HcclCommInitRootInfo rank=%u: HCCL_CONNECT_TIMEOUT=%s is outside [120, 7200]", rank, connect);
        return E_PARA;
    }
    if (rank >= nranks || memcmp(info->internal + sizeof info->internal - 4, "END", 4) != 0)
        return E_PARA;
    current_context = &primary_context; /* the framework set this thread's device */
    comm_t *c = fake_vendor_comm_new(info->internal, (int)rank, (int)nranks, E_PARA);
    while (!fake_comm_ready(c->fake)) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    *out = c;
    return SUCCESS;
}

static int tasks_pending(void *unused)
{
    (void)unused;
    return fake_any_stream_busy();
}

/* HCCL has no abort: pycoll destroys a communicator that missed its deadline, and that destroy waits for the
 * stuck task (the rule above) until FAKE_DEADLOCK_S. */
EXPORT int HcclCommDestroy(comm_t *c)
{
    fake_log("HcclCommDestroy begins rank=%d", c->rank);
    if (!current_context) {
        fake_log("HcclCommDestroy rank=%d without an ACL context: HCCL_E_RUNTIME", c->rank);
        return 15;
    }
    int deadlocked = fake_wait_or_deadlock(tasks_pending, NULL, "HcclCommDestroy");
    fake_vendor_comm_end(c, deadlocked ? "HcclCommDestroy (after a deadlock)" : "HcclCommDestroy", 1);
    return SUCCESS;
}

#ifndef FAKE_HCCL_OLD_CANN
EXPORT int HcclGetCommAsyncError(comm_t *c, int *error)
{
    if (!current_context) {
        fake_log("HcclGetCommAsyncError rank=%d without an ACL context: HCCL_E_RUNTIME", c->rank);
        return 15;
    }
    *error = fake_vendor_async_error(c);
    return SUCCESS;
}
#endif

/* HcclDataType -> fake dtype (-1: int16, uint16, which the fake does not reduce); HcclReduceOp -> fake op. */
static const int dtypes[] = {FAKE_I8, -1, FAKE_I32, FAKE_F16, FAKE_F32, FAKE_I64, FAKE_U64, FAKE_U8, -1, FAKE_U32,
                             FAKE_F64, FAKE_BF16};
static const int ops[] = {FAKE_SUM, FAKE_PROD, FAKE_MAX, FAKE_MIN};
static const fake_vendor_t hccl = {dtypes, sizeof dtypes / sizeof dtypes[0], ops, sizeof ops / sizeof ops[0],
                                   E_PARA};

/* The checks HCCL makes before it enqueues (see the rules above); reduction: whether dtype and op must be
 * ones this device reduces. */
static int collective(const char *name, int kind, int reduction, void *send, void *recv, uint64_t count, int dtype,
                      int op, int root, comm_t *c, void *stream)
{
    if (!stream) {
        fake_log("%s rank=%d: NULL stream: HCCL_E_PTR", name, c->rank);
        return E_PTR;
    }
    if (reduction && (unsigned)dtype <= DT_BFP16 && !reduction_supported(dtype, op)) {
        fake_log("%s rank=%d: dtype %d op %d not supported on %s: HCCL_E_NOT_SUPPORT", name, c->rank, dtype, op,
                 soc_name());
        return E_NOT_SUPPORT;
    }
    return fake_vendor_collective(&hccl, name, kind, send, recv, count, dtype, op, root, c, stream);
}

EXPORT int HcclAllReduce(void *send, void *recv, uint64_t count, int dtype, int op, comm_t *c, void *stream)
{
    return collective("HcclAllReduce", FAKE_ALL_REDUCE, 1, send, recv, count, dtype, op, -1, c, stream);
}

EXPORT int HcclReduceScatter(void *send, void *recv, uint64_t count, int dtype, int op, comm_t *c, void *stream)
{
    return collective("HcclReduceScatter", FAKE_REDUCE_SCATTER, 1, send, recv, count, dtype, op, -1, c, stream);
}

EXPORT int HcclAllGather(void *send, void *recv, uint64_t count, int dtype, comm_t *c, void *stream)
{
    return collective("HcclAllGather", FAKE_ALL_GATHER, 0, send, recv, count, dtype, 0, -1, c, stream);
}

EXPORT int HcclBroadcast(void *buf, uint64_t count, int dtype, uint32_t root, comm_t *c, void *stream)
{
    return collective("HcclBroadcast", FAKE_BROADCAST, 0, buf, buf, count, dtype, 0, (int)root, c, stream);
}

EXPORT int HcclReduce(void *send, void *recv, uint64_t count, int dtype, int op, uint32_t root, comm_t *c,
                      void *stream)
{
    return collective("HcclReduce", FAKE_REDUCE_EVERY_RANK, 1, send, recv, count, dtype, op, (int)root, c, stream);
}

EXPORT int HcclBarrier(comm_t *c, void *stream)
{
    static int32_t word;
    return collective("HcclBarrier", FAKE_ALL_REDUCE, 0, &word, &word, 1, DT_INT32, OP_SUM, -1, c, stream);
}

/* ---- point-to-point ---- */

typedef struct {
    int type; /* HCCL_SEND 0, HCCL_RECV 1 */
    void *buf;
    uint64_t count;
    int dtype;
    uint32_t remote;
} send_recv_item_t;

static int p2p(const char *name, int send, void *buf, uint64_t count, int dtype, uint32_t peer, comm_t *c,
               void *stream)
{
    fake_log("%s rank=%d peer=%u count=%llu dtype=%d stream=%#lx", name, c->rank, peer, (unsigned long long)count,
             dtype, (unsigned long)(uintptr_t)stream);
    int injected = fake_injected(name);
    if (injected)
        return injected;
    if (!stream)
        return E_PTR;
    if ((unsigned)dtype > DT_BFP16 || dtypes[dtype] < 0 || (int)peer >= c->nranks || (int)peer == c->rank)
        return E_PARA;
    fake_comm_enqueue(c->fake, send ? FAKE_SEND : FAKE_RECV, send ? buf : NULL, send ? NULL : buf, count,
                      dtypes[dtype], 0, (int)peer, stream, fake_injected("async"));
    return SUCCESS;
}

EXPORT int HcclSend(void *buf, uint64_t count, int dtype, uint32_t peer, comm_t *c, void *stream)
{
    return p2p("HcclSend", 1, buf, count, dtype, peer, c, stream);
}

EXPORT int HcclRecv(void *buf, uint64_t count, int dtype, uint32_t peer, comm_t *c, void *stream)
{
    return p2p("HcclRecv", 0, buf, count, dtype, peer, c, stream);
}

#ifndef FAKE_HCCL_OLD_CANN
EXPORT int HcclBatchSendRecv(send_recv_item_t *items, uint32_t n, comm_t *c, void *stream)
{
    fake_log("HcclBatchSendRecv rank=%d items=%u", c->rank, n);
    int injected = fake_injected("HcclBatchSendRecv");
    if (injected)
        return injected;
    fake_group_start();
    int r = SUCCESS;
    for (uint32_t i = 0; i < n && r == SUCCESS; i++)
        r = items[i].type > 1 ? E_PARA
                              : p2p(items[i].type == 0 ? "HcclBatchSendRecv send" : "HcclBatchSendRecv recv",
                                    items[i].type == 0, items[i].buf, items[i].count, items[i].dtype,
                                    items[i].remote, c, stream);
    fake_group_end();
    return r;
}
#endif

/* ---- the AscendCL pieces pycoll uses ---- */

EXPORT const char *aclrtGetSocName(void)
{
    return soc_name();
}

EXPORT int aclrtCreateStream(void **stream)
{
    *stream = malloc(1);
    fake_log("aclrtCreateStream stream=%#lx", (unsigned long)(uintptr_t)*stream);
    return *stream ? 0 : 207001;
}

EXPORT int aclrtDestroyStream(void *stream)
{
    free(stream);
    return 0;
}

/* Events: complete once the work queued on their stream before aclrtRecordEvent has. */
EXPORT int aclrtCreateEvent(fake_event_t **event)
{
    *event = fake_event_new();
    return *event ? 0 : 207001;
}

EXPORT int aclrtRecordEvent(fake_event_t *event, void *stream)
{
    fake_event_record(event, stream, "aclrtRecordEvent");
    return 0;
}

/* An AscendCL call on a thread with no current context (see the rules above): logged, ACL_ERROR_RT_CONTEXT_NULL. */
static int without_context(const char *call)
{
    if (current_context)
        return 0;
    fake_log("%s without an ACL context: ACL_ERROR_RT_CONTEXT_NULL", call);
    return 107002;
}

EXPORT int aclrtQueryEventStatus(fake_event_t *event, int *status)
{
    int r = without_context("aclrtQueryEventStatus");
    if (r)
        return r;
    *status = fake_event_done(event); /* 1: ACL_EVENT_RECORDED_STATUS_COMPLETE */
    return 0;
}

EXPORT int aclrtDestroyEvent(fake_event_t *event)
{
    free(event);
    return 0;
}

EXPORT int aclrtMalloc(void **ptr, size_t size, int policy)
{
    (void)policy;
    *ptr = malloc(size);
    return *ptr ? 0 : 207001;
}

EXPORT int aclrtFree(void *ptr)
{
    free(ptr);
    return 0;
}

/* aclrtMemcpy(dst, destMax, src, count, kind): synchronous; the fake's "device" memory is host memory, so every
 * kind (host to device 1, device to host 2, device to device 3) is a memmove, refused past destMax as ACL does. */
EXPORT int aclrtMemcpy(void *dst, size_t dest_max, const void *src, size_t count, int kind)
{
    if (count > dest_max || kind < 0 || kind > 4)
        return 107000; /* ACL_ERROR_INVALID_PARAM */
    memmove(dst, src, count);
    return 0;
}

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

/* aclrtMemcpyAsync: queued on stream (the fake's streams run their work in order, off the caller's thread); a
 * host source (kind 1) is read when the call is made, as the runtime stages it. */
EXPORT int aclrtMemcpyAsync(void *dst, size_t dest_max, const void *src, size_t count, int kind, void *stream)
{
    int r = without_context("aclrtMemcpyAsync");
    if (r)
        return r;
    if (count > dest_max || kind < 0 || kind > 4)
        return 107000;
    return fake_copy_async(stream, dst, src, count, kind == 1) < 0 ? 207001 : 0;
}

EXPORT int aclrtSynchronizeStream(void *stream)
{
    return fake_stream_sync(stream, "aclrtSynchronizeStream") ? 507046 : 0;
}

EXPORT int aclrtStreamWaitEvent(void *stream, fake_event_t *event)
{
    return fake_stream_submit(stream, NULL, NULL, event->stream, event->mark) < 0 ? 207001 : 0;
}
