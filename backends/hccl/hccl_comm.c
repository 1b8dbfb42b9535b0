/* HCCL communicators for pycoll: HCCL and AscendCL loaded with dlopen; every collective waits for its stream
 * in slices, checking HCCL's asynchronous error between them, and destroys the communicator at the deadline
 * (HCCL has no abort call: destroying it releases the peers' links, so their waits fail too). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/vendor_common.h"
#include "common/error_format.h"
#include "hccl_api.h"
#include "pycoll/p2p.h"
#include "pycoll/vendor.h"

/* Longest single stream wait, so that remote errors are noticed while a collective is stuck. */
#define SYNC_SLICE_MS 200

struct pycoll_hccl_comm {
    vendor_comm_state_t state;
    HcclComm hccl; /* NULL once destroyed on an error */
};

static pycoll_hccl_api_t hccl;
static pycoll_acl_api_t acl;
static void *hccl_handle, *acl_handle;

pycoll_status_t pycoll_hccl_load(const char *path, char *error, size_t error_len)
{
    static const char *const names[] = {"HcclGetRootInfo",   "HcclCommInitRootInfo", "HcclCommDestroy",
                                        "HcclGetCommAsyncError", "HcclGetErrorString", "HcclAllReduce",
                                        "HcclReduceScatter", "HcclAllGather",        "HcclBroadcast",
                                        "HcclReduce",        "HcclBarrier"};
    _Static_assert(sizeof names / sizeof names[0] == sizeof hccl / sizeof(void (*)(void)), "one name per entry");
    return vendor_load(&hccl_handle, path, names, sizeof names / sizeof names[0], (void (**)(void))&hccl, NULL,
                       error, error_len);
}

pycoll_status_t pycoll_acl_load(const char *path, char *error, size_t error_len)
{
    static const char *const names[] = {"aclrtSynchronizeStreamWithTimeout"};
    _Static_assert(sizeof names / sizeof names[0] == sizeof acl / sizeof(void (*)(void)), "one name per entry");
    return vendor_load(&acl_handle, path, names, sizeof names / sizeof names[0], (void (**)(void))&acl, NULL,
                       error, error_len);
}

static pycoll_status_t not_loaded(char *error, size_t error_len)
{
    return pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED,
                               "HCCL or AscendCL is not loaded (pycoll_hccl_load / pycoll_acl_load)");
}

pycoll_status_t pycoll_hccl_root_info(uint8_t info[PYCOLL_HCCL_ROOT_INFO_BYTES], char *error, size_t error_len)
{
    if (!hccl_handle)
        return not_loaded(error, error_len);
    HcclRootInfo root;
    HcclResult r = hccl.GetRootInfo(&root);
    if (r != HCCL_SUCCESS)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM,
                                   "hccl: HcclGetRootInfo failed: %s (HcclResult %d)", hccl.GetErrorString(r), (int)r);
    memcpy(info, root.internal, sizeof root.internal);
    return PYCOLL_OK;
}

/* What a failed HCCL call means to the caller. */
static pycoll_status_t status_of(HcclResult r)
{
    switch (r) {
    case HCCL_SUCCESS:
        return PYCOLL_OK;
    case HCCL_E_PARA:
    case HCCL_E_PTR:
        return PYCOLL_ERR_INVALID;
    case HCCL_E_NOT_SUPPORT:
        return PYCOLL_ERR_UNSUPPORTED;
    case HCCL_E_MEMORY:
        return PYCOLL_ERR_NOMEM;
    case HCCL_E_TIMEOUT:
        return PYCOLL_ERR_TIMEOUT;
    case HCCL_E_TCP_CONNECT:
    case HCCL_E_ROCE_CONNECT:
    case HCCL_E_TCP_TRANSFER:
    case HCCL_E_ROCE_TRANSFER:
    case HCCL_E_NETWORK:
    case HCCL_E_REMOTE: /* the peer reported an error completion */
        return PYCOLL_ERR_PEER_FAILURE;
    case HCCL_E_SUSPENDING:
        return PYCOLL_ERR_CLOSED;
    default:
        return PYCOLL_ERR_SYSTEM;
    }
}

static pycoll_status_t hccl_fail(pycoll_hccl_comm_t *c, const char *what, HcclResult r)
{
    return vendor_fail(&c->state, status_of(r), "hccl: %s failed: %s (HcclResult %d)", what, hccl.GetErrorString(r),
                       (int)r);
}

pycoll_hccl_comm_t *pycoll_hccl_comm_create(const uint8_t info[PYCOLL_HCCL_ROOT_INFO_BYTES], int32_t rank,
                                            int32_t size, double timeout_s, pycoll_status_t *status, char *error,
                                            size_t error_len)
{
    if (!hccl_handle || !acl_handle) {
        *status = not_loaded(error, error_len);
        return NULL;
    }
    pycoll_hccl_comm_t *c = calloc(1, sizeof *c);
    if (!c) {
        *status = pycoll_format_error(error, error_len, PYCOLL_ERR_NOMEM, "hccl: out of memory");
        return NULL;
    }
    vendor_comm_state_init(&c->state, "hccl", rank, size, timeout_s);
    HcclRootInfo root;
    memcpy(root.internal, info, sizeof root.internal);
    HcclResult r = hccl.CommInitRootInfo((uint32_t)size, &root, (uint32_t)rank, &c->hccl);
    if (r != HCCL_SUCCESS) {
        *status = hccl_fail(c, "HcclCommInitRootInfo", r);
        snprintf(error, error_len, "%s", c->state.error);
        free(c);
        return NULL;
    }
    *status = PYCOLL_OK;
    return c;
}

void pycoll_hccl_comm_destroy(pycoll_hccl_comm_t *c)
{
    if (!c)
        return;
    if (c->hccl)
        hccl.CommDestroy(c->hccl);
    free(c);
}

const char *pycoll_hccl_comm_error(const pycoll_hccl_comm_t *c)
{
    return c->state.error;
}

void pycoll_hccl_comm_set_timeout(pycoll_hccl_comm_t *c, double timeout_s)
{
    vendor_set_timeout(&c->state, timeout_s);
}

static pycoll_status_t destroy_on_deadline(pycoll_hccl_comm_t *c, const char *what)
{
    hccl.CommDestroy(c->hccl);
    c->hccl = NULL;
    return vendor_deadline_passed(&c->state, what, "destroyed");
}

/* Wait for the stream in slices; between slices, HCCL's asynchronous error says whether a peer failed. */
static pycoll_status_t finish(pycoll_hccl_comm_t *c, const char *what, HcclResult r, void *stream,
                              int64_t deadline)
{
    if (r != HCCL_SUCCESS)
        return hccl_fail(c, what, r);
    for (;;) {
        int64_t left_ms = (deadline - pycoll_now_ns()) / 1000000;
        if (left_ms <= 0)
            return destroy_on_deadline(c, what);
        int e = acl.SynchronizeStreamWithTimeout(stream, (int32_t)(left_ms < SYNC_SLICE_MS ? left_ms : SYNC_SLICE_MS));
        HcclResult async = HCCL_SUCCESS;
        HcclResult q = hccl.GetCommAsyncError(c->hccl, &async);
        if (q != HCCL_SUCCESS)
            return hccl_fail(c, "HcclGetCommAsyncError", q);
        if (async != HCCL_SUCCESS)
            return hccl_fail(c, what, async);
        if (e == PYCOLL_ACL_SUCCESS)
            return PYCOLL_OK;
        if (e != PYCOLL_ACL_ERROR_RT_STREAM_SYNC_TIMEOUT)
            return vendor_fail(&c->state, PYCOLL_ERR_SYSTEM,
                               "hccl: aclrtSynchronizeStreamWithTimeout after %s failed (aclError %d)", what, e);
    }
}

static pycoll_status_t begin(pycoll_hccl_comm_t *c, int64_t count, pycoll_dtype_t dtype, HcclDataType *hd,
                             int32_t root)
{
    static const HcclDataType map[PYCOLL_NUM_DTYPES] = {
        [PYCOLL_INT8] = HCCL_DATA_TYPE_INT8,       [PYCOLL_UINT8] = HCCL_DATA_TYPE_UINT8,
        [PYCOLL_INT32] = HCCL_DATA_TYPE_INT32,     [PYCOLL_INT64] = HCCL_DATA_TYPE_INT64,
        [PYCOLL_FLOAT16] = HCCL_DATA_TYPE_FP16,    [PYCOLL_BFLOAT16] = HCCL_DATA_TYPE_BFP16,
        [PYCOLL_FLOAT32] = HCCL_DATA_TYPE_FP32,    [PYCOLL_FLOAT64] = HCCL_DATA_TYPE_FP64};
    pycoll_status_t st = vendor_check_args(&c->state, count, dtype, root);
    if (st == PYCOLL_OK)
        *hd = map[dtype];
    return st;
}

static pycoll_status_t hccl_op(pycoll_hccl_comm_t *c, pycoll_op_t op, HcclReduceOp *out)
{
    static const HcclReduceOp map[PYCOLL_AVG] = {[PYCOLL_SUM] = HCCL_REDUCE_SUM, [PYCOLL_PROD] = HCCL_REDUCE_PROD,
                                                 [PYCOLL_MIN] = HCCL_REDUCE_MIN, [PYCOLL_MAX] = HCCL_REDUCE_MAX};
    if (op == PYCOLL_AVG)
        return pycoll_format_error(c->state.error, sizeof c->state.error, PYCOLL_ERR_UNSUPPORTED,
                                   "hccl: HCCL has no average; sum, then divide by the world size");
    if ((unsigned)op >= PYCOLL_AVG)
        return vendor_reject(&c->state, "hccl: unknown op id %d", (int)op);
    *out = map[op];
    return PYCOLL_OK;
}

pycoll_status_t pycoll_hccl_all_reduce(pycoll_hccl_comm_t *c, const void *sendbuf, void *recvbuf, int64_t count,
                                       pycoll_dtype_t dtype, pycoll_op_t op, void *stream)
{
    HcclDataType hd = HCCL_DATA_TYPE_INT8;
    HcclReduceOp ho = HCCL_REDUCE_SUM;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, count, dtype, &hd, -1);
    if (st == PYCOLL_OK)
        st = hccl_op(c, op, &ho);
    if (st != PYCOLL_OK)
        return st;
    return finish(c, "HcclAllReduce",
                  hccl.AllReduce((void *)sendbuf, recvbuf, (uint64_t)count, hd, ho, c->hccl, stream), stream,
                  deadline);
}

pycoll_status_t pycoll_hccl_reduce_scatter(pycoll_hccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                           int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op, void *stream)
{
    HcclDataType hd = HCCL_DATA_TYPE_INT8;
    HcclReduceOp ho = HCCL_REDUCE_SUM;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, recv_count, dtype, &hd, -1);
    if (st == PYCOLL_OK)
        st = hccl_op(c, op, &ho);
    if (st != PYCOLL_OK)
        return st;
    return finish(c, "HcclReduceScatter",
                  hccl.ReduceScatter((void *)sendbuf, recvbuf, (uint64_t)recv_count, hd, ho, c->hccl, stream),
                  stream, deadline);
}

pycoll_status_t pycoll_hccl_all_gather(pycoll_hccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                       int64_t send_count, pycoll_dtype_t dtype, void *stream)
{
    HcclDataType hd = HCCL_DATA_TYPE_INT8;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, send_count, dtype, &hd, -1);
    if (st != PYCOLL_OK)
        return st;
    return finish(c, "HcclAllGather",
                  hccl.AllGather((void *)sendbuf, recvbuf, (uint64_t)send_count, hd, c->hccl, stream), stream,
                  deadline);
}

pycoll_status_t pycoll_hccl_broadcast(pycoll_hccl_comm_t *c, void *buf, int64_t count, pycoll_dtype_t dtype,
                                      int32_t root, void *stream)
{
    HcclDataType hd = HCCL_DATA_TYPE_INT8;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, count, dtype, &hd, root);
    if (st != PYCOLL_OK)
        return st;
    return finish(c, "HcclBroadcast", hccl.Broadcast(buf, (uint64_t)count, hd, (uint32_t)root, c->hccl, stream),
                  stream, deadline);
}

pycoll_status_t pycoll_hccl_reduce(pycoll_hccl_comm_t *c, const void *sendbuf, void *recvbuf, int64_t count,
                                   pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, void *stream)
{
    HcclDataType hd = HCCL_DATA_TYPE_INT8;
    HcclReduceOp ho = HCCL_REDUCE_SUM;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, count, dtype, &hd, root);
    if (st == PYCOLL_OK)
        st = hccl_op(c, op, &ho);
    if (st != PYCOLL_OK)
        return st;
    return finish(c, "HcclReduce",
                  hccl.Reduce((void *)sendbuf, recvbuf, (uint64_t)count, hd, ho, (uint32_t)root, c->hccl, stream),
                  stream, deadline);
}

pycoll_status_t pycoll_hccl_barrier(pycoll_hccl_comm_t *c, void *stream)
{
    int64_t deadline = vendor_deadline(&c->state);
    if (c->state.status != PYCOLL_OK)
        return PYCOLL_ERR_CLOSED;
    return finish(c, "HcclBarrier", hccl.Barrier(c->hccl, stream), stream, deadline);
}
