/* HCCL communicators for pycoll: HCCL and AscendCL loaded with dlopen; every collective waits for its stream
 * in slices, checking HCCL's asynchronous error between them, and destroys the communicator at the deadline
 * (HCCL has no abort call: destroying it releases the peers' links, so their waits fail too). */
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hccl_api.h"
#include "pycoll/p2p.h"
#include "pycoll/vendor.h"

/* Longest single stream wait, so that remote errors are noticed while a collective is stuck. */
#define SYNC_SLICE_MS 200

struct pycoll_hccl_comm {
    HcclComm hccl; /* NULL once destroyed on an error */
    int32_t rank;
    int32_t size;
    int64_t timeout_ns;
    pycoll_status_t status;
    char error[PYCOLL_ERROR_LEN];
};

static pycoll_hccl_api_t hccl;
static pycoll_acl_api_t acl;
static void *hccl_handle, *acl_handle;
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static pycoll_status_t format_error(char *error, size_t len, pycoll_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static pycoll_status_t format_error(char *error, size_t len, pycoll_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error, len, fmt, ap);
    va_end(ap);
    return status;
}

static pycoll_status_t load_library(void **handle, const char *path, const char *const *names, size_t n,
                                    void (**table)(void), char *error, size_t error_len)
{
    pycoll_status_t st = PYCOLL_OK;
    pthread_mutex_lock(&load_lock);
    if (!*handle) {
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            st = format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s", dlerror());
        for (size_t i = 0; h && i < n; i++) {
            *(void **)&table[i] = dlsym(h, names[i]);
            if (!table[i]) {
                st = format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED, "%s lacks %s", path, names[i]);
                dlclose(h);
                h = NULL;
            }
        }
        *handle = h;
    }
    pthread_mutex_unlock(&load_lock);
    return st;
}

pycoll_status_t pycoll_hccl_load(const char *path, char *error, size_t error_len)
{
    static const char *const names[] = {"HcclGetRootInfo",   "HcclCommInitRootInfo", "HcclCommDestroy",
                                        "HcclGetCommAsyncError", "HcclGetErrorString", "HcclAllReduce",
                                        "HcclReduceScatter", "HcclAllGather",        "HcclBroadcast",
                                        "HcclReduce",        "HcclBarrier"};
    static pycoll_hccl_api_t api;
    _Static_assert(sizeof names / sizeof names[0] == sizeof api / sizeof(void (*)(void)), "one name per entry");
    pycoll_status_t st = load_library(&hccl_handle, path, names, sizeof names / sizeof names[0],
                                      (void (**)(void))&api, error, error_len);
    if (st == PYCOLL_OK)
        hccl = api;
    return st;
}

pycoll_status_t pycoll_acl_load(const char *path, char *error, size_t error_len)
{
    static const char *const names[] = {"aclrtSynchronizeStreamWithTimeout"};
    static pycoll_acl_api_t api;
    _Static_assert(sizeof names / sizeof names[0] == sizeof api / sizeof(void (*)(void)), "one name per entry");
    pycoll_status_t st = load_library(&acl_handle, path, names, sizeof names / sizeof names[0],
                                      (void (**)(void))&api, error, error_len);
    if (st == PYCOLL_OK)
        acl = api;
    return st;
}

static pycoll_status_t not_loaded(char *error, size_t error_len)
{
    return format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED,
                        "HCCL or AscendCL is not loaded (pycoll_hccl_load / pycoll_acl_load)");
}

pycoll_status_t pycoll_hccl_root_info(uint8_t info[PYCOLL_HCCL_ROOT_INFO_BYTES], char *error, size_t error_len)
{
    if (!hccl_handle)
        return not_loaded(error, error_len);
    HcclRootInfo root;
    HcclResult r = hccl.GetRootInfo(&root);
    if (r != HCCL_SUCCESS)
        return format_error(error, error_len, PYCOLL_ERR_SYSTEM, "hccl: HcclGetRootInfo failed: %s (HcclResult %d)",
                            hccl.GetErrorString(r), (int)r);
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

static pycoll_status_t comm_fail(pycoll_hccl_comm_t *c, pycoll_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static pycoll_status_t comm_fail(pycoll_hccl_comm_t *c, pycoll_status_t status, const char *fmt, ...)
{
    if (c->status != PYCOLL_OK)
        return c->status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    c->status = status;
    return status;
}

static pycoll_status_t hccl_fail(pycoll_hccl_comm_t *c, const char *what, HcclResult r)
{
    return comm_fail(c, status_of(r), "hccl: %s failed: %s (HcclResult %d)", what, hccl.GetErrorString(r), (int)r);
}

static int64_t seconds_to_ns(double s)
{
    return s > 9e9 ? INT64_MAX / 2 : (int64_t)(s * 1e9);
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
        *status = format_error(error, error_len, PYCOLL_ERR_NOMEM, "hccl: out of memory");
        return NULL;
    }
    c->rank = rank;
    c->size = size;
    c->timeout_ns = seconds_to_ns(timeout_s);
    HcclRootInfo root;
    memcpy(root.internal, info, sizeof root.internal);
    HcclResult r = hccl.CommInitRootInfo((uint32_t)size, &root, (uint32_t)rank, &c->hccl);
    if (r != HCCL_SUCCESS) {
        *status = hccl_fail(c, "HcclCommInitRootInfo", r);
        snprintf(error, error_len, "%s", c->error);
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
    return c->error;
}

void pycoll_hccl_comm_set_timeout(pycoll_hccl_comm_t *c, double timeout_s)
{
    c->timeout_ns = seconds_to_ns(timeout_s);
}

static pycoll_status_t destroy_on_deadline(pycoll_hccl_comm_t *c, const char *what)
{
    hccl.CommDestroy(c->hccl);
    c->hccl = NULL;
    return comm_fail(c, PYCOLL_ERR_TIMEOUT,
                     "hccl: %s did not complete within %.3f s on rank %d of %d (a peer may be dead or behind); "
                     "the communicator was destroyed",
                     what, (double)c->timeout_ns / 1e9, (int)c->rank, (int)c->size);
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
            return comm_fail(c, PYCOLL_ERR_SYSTEM, "hccl: aclrtSynchronizeStreamWithTimeout after %s failed (aclError %d)",
                             what, e);
    }
}

static pycoll_status_t reject(pycoll_hccl_comm_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static pycoll_status_t reject(pycoll_hccl_comm_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->error, sizeof c->error, fmt, ap);
    va_end(ap);
    return PYCOLL_ERR_INVALID;
}

static pycoll_status_t begin(pycoll_hccl_comm_t *c, int64_t count, pycoll_dtype_t dtype, HcclDataType *hd,
                             int32_t root)
{
    static const HcclDataType map[PYCOLL_NUM_DTYPES] = {
        [PYCOLL_INT8] = HCCL_DATA_TYPE_INT8,       [PYCOLL_UINT8] = HCCL_DATA_TYPE_UINT8,
        [PYCOLL_INT32] = HCCL_DATA_TYPE_INT32,     [PYCOLL_INT64] = HCCL_DATA_TYPE_INT64,
        [PYCOLL_FLOAT16] = HCCL_DATA_TYPE_FP16,    [PYCOLL_BFLOAT16] = HCCL_DATA_TYPE_BFP16,
        [PYCOLL_FLOAT32] = HCCL_DATA_TYPE_FP32,    [PYCOLL_FLOAT64] = HCCL_DATA_TYPE_FP64};
    if (c->status != PYCOLL_OK)
        return PYCOLL_ERR_CLOSED; /* c->error still says why it broke */
    if (count < 0)
        return reject(c, "hccl: count must be >= 0, got %lld", (long long)count);
    if ((unsigned)dtype >= PYCOLL_NUM_DTYPES)
        return reject(c, "hccl: unknown dtype id %d", (int)dtype);
    if (root != -1 && (root < 0 || root >= c->size))
        return reject(c, "hccl: root %d is not a rank of a %d-rank communicator", (int)root, (int)c->size);
    *hd = map[dtype];
    return PYCOLL_OK;
}

static pycoll_status_t hccl_op(pycoll_hccl_comm_t *c, pycoll_op_t op, HcclReduceOp *out)
{
    static const HcclReduceOp map[PYCOLL_AVG] = {[PYCOLL_SUM] = HCCL_REDUCE_SUM, [PYCOLL_PROD] = HCCL_REDUCE_PROD,
                                                 [PYCOLL_MIN] = HCCL_REDUCE_MIN, [PYCOLL_MAX] = HCCL_REDUCE_MAX};
    if (op == PYCOLL_AVG) {
        snprintf(c->error, sizeof c->error, "hccl: HCCL has no average; sum, then divide by the world size");
        return PYCOLL_ERR_UNSUPPORTED;
    }
    if ((unsigned)op >= PYCOLL_AVG)
        return reject(c, "hccl: unknown op id %d", (int)op);
    *out = map[op];
    return PYCOLL_OK;
}

pycoll_status_t pycoll_hccl_all_reduce(pycoll_hccl_comm_t *c, const void *sendbuf, void *recvbuf, int64_t count,
                                       pycoll_dtype_t dtype, pycoll_op_t op, void *stream)
{
    HcclDataType hd = HCCL_DATA_TYPE_INT8;
    HcclReduceOp ho = HCCL_REDUCE_SUM;
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
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
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
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
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
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
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
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
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
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
    int64_t deadline = pycoll_now_ns() + c->timeout_ns;
    if (c->status != PYCOLL_OK)
        return PYCOLL_ERR_CLOSED;
    return finish(c, "HcclBarrier", hccl.Barrier(c->hccl, stream), stream, deadline);
}
