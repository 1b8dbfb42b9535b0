/* NCCL communicators for pycoll: NCCL and the CUDA runtime loaded with dlopen, non-blocking communicators
 * polled against a deadline, and ncclCommAbort when it passes, so that a dead peer never hangs the caller. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../common/vendor_common.h"
#include "common/error_format.h"
#include "nccl_api.h"
#include "pycoll/p2p.h"
#include "pycoll/vendor.h"

struct pycoll_nccl_comm {
    vendor_comm_state_t state;
    ncclComm_t nccl;  /* NULL once aborted */
    int32_t device;
    int32_t *scratch; /* one device word for the barrier */
};

static pycoll_nccl_api_t nccl;
static pycoll_cudart_api_t cudart;
static void *nccl_handle, *cudart_handle;

pycoll_status_t pycoll_nccl_load(const char *path, char *error, size_t error_len)
{
    static const char *const names[] = {"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankConfig",
                                        "ncclCommGetAsyncError", "ncclCommAbort", "ncclCommDestroy",
                                        "ncclCommCuDevice", "ncclGetErrorString", "ncclGetLastError",
                                        "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast",
                                        "ncclReduce", "ncclSend", "ncclRecv", "ncclGroupStart",
                                        "ncclGroupEnd"};
    _Static_assert(sizeof names / sizeof names[0] == sizeof(pycoll_nccl_api_t) / sizeof(void (*)(void)),
                   "one name per entry point");
    /* ncclGetLastError (2.13) and non-blocking init (2.14) set the oldest NCCL we accept. */
    return vendor_load(&nccl_handle, path, names, sizeof names / sizeof names[0], (void (**)(void))&nccl,
                       "NCCL 2.14 or newer is needed", error, error_len);
}

pycoll_status_t pycoll_cudart_load(const char *path, char *error, size_t error_len)
{
    static const char *const names[] = {"cudaStreamQuery", "cudaMalloc", "cudaFree", "cudaMemset",
                                        "cudaGetErrorString"};
    _Static_assert(sizeof names / sizeof names[0] == sizeof(pycoll_cudart_api_t) / sizeof(void (*)(void)),
                   "one name per entry point");
    return vendor_load(&cudart_handle, path, names, sizeof names / sizeof names[0], (void (**)(void))&cudart,
                       NULL, error, error_len);
}

int32_t pycoll_nccl_version(void)
{
    int version = 0;
    if (nccl_handle && nccl.GetVersion(&version) != ncclSuccess)
        version = 0;
    return version;
}

static pycoll_status_t not_loaded(char *error, size_t error_len)
{
    return pycoll_format_error(error, error_len, PYCOLL_ERR_UNSUPPORTED,
                     "NCCL or the CUDA runtime is not loaded (pycoll_nccl_load / pycoll_cudart_load)");
}

pycoll_status_t pycoll_nccl_unique_id(uint8_t id[PYCOLL_NCCL_UNIQUE_ID_BYTES], char *error, size_t error_len)
{
    if (!nccl_handle)
        return not_loaded(error, error_len);
    ncclUniqueId uid;
    ncclResult_t r = nccl.GetUniqueId(&uid);
    if (r != ncclSuccess)
        return pycoll_format_error(error, error_len, PYCOLL_ERR_SYSTEM, "nccl: ncclGetUniqueId failed: %s (code %d)",
                         nccl.GetErrorString(r), (int)r);
    memcpy(id, uid.internal, sizeof uid.internal);
    return PYCOLL_OK;
}

static const char *result_name(ncclResult_t r)
{
    static const char *const names[] = {"ncclSuccess",        "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError",  "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",    "ncclInProgress",         "ncclTimeout"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "unknown ncclResult_t";
}

/* What a failed NCCL call means to the caller. */
static pycoll_status_t status_of(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess:
        return PYCOLL_OK;
    case ncclInvalidArgument:
    case ncclInvalidUsage:
        return PYCOLL_ERR_INVALID;
    case ncclRemoteError: /* a peer exited or its network link failed */
        return PYCOLL_ERR_PEER_FAILURE;
    case ncclInProgress:
    case ncclTimeout:
        return PYCOLL_ERR_TIMEOUT;
    default: /* ncclUnhandledCudaError, ncclSystemError, ncclInternalError and codes newer than this file */
        return PYCOLL_ERR_SYSTEM;
    }
}

static pycoll_status_t nccl_fail(pycoll_nccl_comm_t *c, const char *what, ncclResult_t r)
{
    const char *last = c->nccl ? nccl.GetLastError(c->nccl) : NULL;
    return vendor_fail(&c->state, status_of(r), "nccl: %s failed: %s (%s, code %d)%s%s", what, nccl.GetErrorString(r),
                     result_name(r), (int)r, last && *last ? ": " : "", last ? last : "");
}

/* Abort on the deadline: ncclCommAbort stops the kernels waiting for a peer that will never come. */
static pycoll_status_t abort_on_deadline(pycoll_nccl_comm_t *c, const char *what)
{
    if (c->nccl) {
        nccl.CommAbort(c->nccl);
        c->nccl = NULL;
    }
    return vendor_deadline_passed(&c->state, what, "aborted");
}

/* Polling interval: short at first (collectives on a GPU finish in microseconds), capped at 1 ms. */
static void backoff(int64_t *sleep_ns)
{
    struct timespec ts = {0, (long)*sleep_ns};
    nanosleep(&ts, NULL);
    if (*sleep_ns < 1000000)
        *sleep_ns *= 2;
}

/* Until the communicator's asynchronous state leaves ncclInProgress (non-blocking init or enqueue). */
static pycoll_status_t wait_ready(pycoll_nccl_comm_t *c, const char *what, int64_t deadline_ns)
{
    int64_t sleep_ns = 1000;
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t r = nccl.CommGetAsyncError(c->nccl, &state);
        if (r != ncclSuccess)
            return nccl_fail(c, "ncclCommGetAsyncError", r);
        if (state == ncclSuccess)
            return PYCOLL_OK;
        if (state != ncclInProgress)
            return nccl_fail(c, what, state);
        if (pycoll_now_ns() >= deadline_ns)
            return abort_on_deadline(c, what);
        backoff(&sleep_ns);
    }
}

/* Until the work queued on the stream has completed, NCCL reports an asynchronous error, or the deadline. */
static pycoll_status_t wait_stream(pycoll_nccl_comm_t *c, const char *what, void *stream, int64_t deadline_ns)
{
    int64_t sleep_ns = 1000;
    for (;;) {
        int q = cudart.StreamQuery(stream);
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = nccl.CommGetAsyncError(c->nccl, &state);
        if (r != ncclSuccess)
            return nccl_fail(c, "ncclCommGetAsyncError", r);
        if (state != ncclSuccess && state != ncclInProgress)
            return nccl_fail(c, what, state);
        if (q == PYCOLL_CUDA_SUCCESS)
            return PYCOLL_OK;
        if (q != PYCOLL_CUDA_ERROR_NOT_READY)
            return vendor_fail(&c->state, PYCOLL_ERR_SYSTEM,
                               "nccl: cudaStreamQuery after %s failed: %s (cudaError %d)", what,
                               cudart.GetErrorString(q), q);
        if (pycoll_now_ns() >= deadline_ns)
            return abort_on_deadline(c, what);
        backoff(&sleep_ns);
    }
}

pycoll_nccl_comm_t *pycoll_nccl_comm_create(const uint8_t id[PYCOLL_NCCL_UNIQUE_ID_BYTES], int32_t rank,
                                            int32_t size, double timeout_s,
                                            pycoll_status_t *status, char *error, size_t error_len)
{
    if (!nccl_handle || !cudart_handle) {
        *status = not_loaded(error, error_len);
        return NULL;
    }
    pycoll_nccl_comm_t *c = calloc(1, sizeof *c);
    if (!c) {
        *status = pycoll_format_error(error, error_len, PYCOLL_ERR_NOMEM, "nccl: out of memory");
        return NULL;
    }
    vendor_comm_state_init(&c->state, "nccl", rank, size, timeout_s);
    int64_t deadline = vendor_deadline(&c->state);

    ncclUniqueId uid;
    memcpy(uid.internal, id, sizeof uid.internal);
    pycoll_nccl_config_t config = {sizeof config, PYCOLL_NCCL_CONFIG_MAGIC, PYCOLL_NCCL_CONFIG_VERSION, 0,
                                   PYCOLL_NCCL_CONFIG_UNDEF, PYCOLL_NCCL_CONFIG_UNDEF, PYCOLL_NCCL_CONFIG_UNDEF,
                                   NULL};
    ncclResult_t r = nccl.CommInitRankConfig(&c->nccl, size, uid, rank, &config);
    pycoll_status_t st;
    if (r != ncclSuccess && r != ncclInProgress)
        st = nccl_fail(c, "ncclCommInitRankConfig", r);
    else
        st = wait_ready(c, "ncclCommInitRankConfig", deadline);
    int device = 0;
    if (st == PYCOLL_OK && (r = nccl.CommCuDevice(c->nccl, &device)) != ncclSuccess)
        st = nccl_fail(c, "ncclCommCuDevice", r);
    c->device = device;
    if (st != PYCOLL_OK) {
        *status = st;
        snprintf(error, error_len, "%s", c->state.error);
        pycoll_nccl_comm_destroy(c);
        return NULL;
    }
    *status = PYCOLL_OK;
    return c;
}

void pycoll_nccl_comm_destroy(pycoll_nccl_comm_t *c)
{
    if (!c)
        return;
    if (c->scratch)
        cudart.Free(c->scratch);
    if (c->nccl) {
        /* A broken communicator may still have kernels waiting on a peer; only abort is safe then. */
        if (c->state.status == PYCOLL_OK)
            nccl.CommDestroy(c->nccl);
        else
            nccl.CommAbort(c->nccl);
    }
    free(c);
}

const char *pycoll_nccl_comm_error(const pycoll_nccl_comm_t *c)
{
    return c->state.error;
}

int32_t pycoll_nccl_comm_device(const pycoll_nccl_comm_t *c)
{
    return c->device;
}

void pycoll_nccl_comm_set_timeout(pycoll_nccl_comm_t *c, double timeout_s)
{
    vendor_set_timeout(&c->state, timeout_s);
}

static ncclDataType_t nccl_dtype(pycoll_dtype_t dtype)
{
    static const ncclDataType_t map[PYCOLL_NUM_DTYPES] = {
        [PYCOLL_INT8] = ncclInt8,       [PYCOLL_UINT8] = ncclUint8,       [PYCOLL_INT32] = ncclInt32,
        [PYCOLL_INT64] = ncclInt64,     [PYCOLL_FLOAT16] = ncclFloat16,   [PYCOLL_BFLOAT16] = ncclBfloat16,
        [PYCOLL_FLOAT32] = ncclFloat32, [PYCOLL_FLOAT64] = ncclFloat64};
    return map[dtype];
}

static int nccl_op(pycoll_op_t op, ncclRedOp_t *out)
{
    static const ncclRedOp_t map[PYCOLL_NUM_OPS] = {[PYCOLL_SUM] = ncclSum, [PYCOLL_PROD] = ncclProd,
                                                    [PYCOLL_MIN] = ncclMin, [PYCOLL_MAX] = ncclMax,
                                                    [PYCOLL_AVG] = ncclAvg};
    if ((unsigned)op >= PYCOLL_NUM_OPS)
        return 0;
    *out = map[op];
    return 1;
}

/* Everything a collective checks before it calls NCCL. */
static pycoll_status_t begin(pycoll_nccl_comm_t *c, int64_t count, pycoll_dtype_t dtype, ncclDataType_t *nd,
                             int32_t root)
{
    pycoll_status_t st = vendor_check_args(&c->state, count, dtype, root);
    if (st == PYCOLL_OK)
        *nd = nccl_dtype(dtype);
    return st;
}

/* After NCCL accepted (or is still enqueueing) a collective: wait for it to finish, within the deadline. */
static pycoll_status_t finish(pycoll_nccl_comm_t *c, const char *what, ncclResult_t r, void *stream,
                              int64_t deadline)
{
    if (r != ncclSuccess && r != ncclInProgress)
        return nccl_fail(c, what, r);
    pycoll_status_t st = wait_ready(c, what, deadline);
    return st != PYCOLL_OK ? st : wait_stream(c, what, stream, deadline);
}

pycoll_status_t pycoll_nccl_all_reduce(pycoll_nccl_comm_t *c, const void *sendbuf, void *recvbuf, int64_t count,
                                       pycoll_dtype_t dtype, pycoll_op_t op, void *stream)
{
    ncclDataType_t nd = ncclInt8;
    ncclRedOp_t no = ncclSum;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, count, dtype, &nd, -1);
    if (st != PYCOLL_OK)
        return st;
    if (!nccl_op(op, &no))
        return vendor_reject(&c->state, "nccl: unknown op id %d", (int)op);
    return finish(c, "ncclAllReduce", nccl.AllReduce(sendbuf, recvbuf, (size_t)count, nd, no, c->nccl, stream),
                  stream, deadline);
}

pycoll_status_t pycoll_nccl_reduce_scatter(pycoll_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                           int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op, void *stream)
{
    ncclDataType_t nd = ncclInt8;
    ncclRedOp_t no = ncclSum;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, recv_count, dtype, &nd, -1);
    if (st != PYCOLL_OK)
        return st;
    if (!nccl_op(op, &no))
        return vendor_reject(&c->state, "nccl: unknown op id %d", (int)op);
    return finish(c, "ncclReduceScatter",
                  nccl.ReduceScatter(sendbuf, recvbuf, (size_t)recv_count, nd, no, c->nccl, stream), stream,
                  deadline);
}

pycoll_status_t pycoll_nccl_all_gather(pycoll_nccl_comm_t *c, const void *sendbuf, void *recvbuf,
                                       int64_t send_count, pycoll_dtype_t dtype, void *stream)
{
    ncclDataType_t nd = ncclInt8;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, send_count, dtype, &nd, -1);
    if (st != PYCOLL_OK)
        return st;
    return finish(c, "ncclAllGather", nccl.AllGather(sendbuf, recvbuf, (size_t)send_count, nd, c->nccl, stream),
                  stream, deadline);
}

pycoll_status_t pycoll_nccl_broadcast(pycoll_nccl_comm_t *c, void *buf, int64_t count, pycoll_dtype_t dtype,
                                      int32_t root, void *stream)
{
    ncclDataType_t nd = ncclInt8;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, count, dtype, &nd, root);
    if (st != PYCOLL_OK)
        return st;
    return finish(c, "ncclBroadcast", nccl.Broadcast(buf, buf, (size_t)count, nd, root, c->nccl, stream), stream,
                  deadline);
}

pycoll_status_t pycoll_nccl_reduce(pycoll_nccl_comm_t *c, const void *sendbuf, void *recvbuf, int64_t count,
                                   pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, void *stream)
{
    ncclDataType_t nd = ncclInt8;
    ncclRedOp_t no = ncclSum;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, count, dtype, &nd, root);
    if (st != PYCOLL_OK)
        return st;
    if (!nccl_op(op, &no))
        return vendor_reject(&c->state, "nccl: unknown op id %d", (int)op);
    return finish(c, "ncclReduce", nccl.Reduce(sendbuf, recvbuf, (size_t)count, nd, no, root, c->nccl, stream),
                  stream, deadline);
}

static pycoll_status_t check_peer(pycoll_nccl_comm_t *c, const char *what, int32_t peer)
{
    if (peer != -1 && (peer < 0 || peer >= c->state.size || peer == c->state.rank))
        return vendor_reject(&c->state,
                             "nccl: %s peer %d is not another rank of a %d-rank communicator (rank %d)", what,
                             (int)peer, (int)c->state.size, (int)c->state.rank);
    return PYCOLL_OK;
}

/* One NCCL group, so the send and the receive progress together: two ranks that send to each other before
 * receiving would otherwise wait on each other forever. */
pycoll_status_t pycoll_nccl_send_recv(pycoll_nccl_comm_t *c, const void *sendbuf, int64_t send_count,
                                      int32_t send_peer, void *recvbuf, int64_t recv_count, int32_t recv_peer,
                                      pycoll_dtype_t dtype, void *stream)
{
    ncclDataType_t nd = ncclInt8;
    int64_t deadline = vendor_deadline(&c->state);
    pycoll_status_t st = begin(c, send_count, dtype, &nd, -1);
    if (st == PYCOLL_OK)
        st = begin(c, recv_count, dtype, &nd, -1);
    if (st == PYCOLL_OK)
        st = check_peer(c, "send", send_peer);
    if (st == PYCOLL_OK)
        st = check_peer(c, "receive", recv_peer);
    if (st != PYCOLL_OK)
        return st;
    if (send_peer == -1 && recv_peer == -1)
        return PYCOLL_OK;
    ncclResult_t r = nccl.GroupStart();
    if (r != ncclSuccess)
        return nccl_fail(c, "ncclGroupStart", r);
    /* What the deadline message names; a failed call names itself. */
    const char *what = send_peer == -1 ? "ncclRecv" : recv_peer == -1 ? "ncclSend" : "ncclSend/ncclRecv";
    if (send_peer != -1) {
        r = nccl.Send(sendbuf, (size_t)send_count, nd, send_peer, c->nccl, stream);
        if (r != ncclSuccess && r != ncclInProgress)
            what = "ncclSend";
    }
    if (recv_peer != -1 && (r == ncclSuccess || r == ncclInProgress)) {
        r = nccl.Recv(recvbuf, (size_t)recv_count, nd, recv_peer, c->nccl, stream);
        if (r != ncclSuccess && r != ncclInProgress)
            what = "ncclRecv";
    }
    /* The group is closed even after a failed call: NCCL keeps the group depth per thread. */
    ncclResult_t end = nccl.GroupEnd();
    if ((r == ncclSuccess || r == ncclInProgress) && end != ncclSuccess && end != ncclInProgress)
        what = "ncclGroupEnd";
    if (r == ncclSuccess || r == ncclInProgress)
        r = end;
    return finish(c, what, r, stream, deadline);
}

/* NCCL has no barrier: an all-reduce of one device word orders every rank, as torch.distributed does. */
pycoll_status_t pycoll_nccl_barrier(pycoll_nccl_comm_t *c, void *stream)
{
    if (c->state.status == PYCOLL_OK && !c->scratch) {
        int e = cudart.Malloc((void **)&c->scratch, sizeof *c->scratch);
        if (e == PYCOLL_CUDA_SUCCESS)
            e = cudart.Memset(c->scratch, 0, sizeof *c->scratch);
        if (e != PYCOLL_CUDA_SUCCESS)
            return vendor_fail(&c->state, PYCOLL_ERR_NOMEM, "nccl: cudaMalloc for the barrier failed: %s",
                               cudart.GetErrorString(e));
    }
    return pycoll_nccl_all_reduce(c, c->scratch, c->scratch, 1, PYCOLL_INT32, PYCOLL_SUM, stream);
}
