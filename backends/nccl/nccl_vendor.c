/* NCCL as a pycoll vendor (pycoll/vendor.h): libnccl and the CUDA runtime loaded with dlopen, and the vendor
 * struct filled from them. Communicators are non-blocking (ncclCommInitRankConfig with blocking = 0), so the
 * generic layer polls them against the deadline and calls ncclCommAbort when it passes. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "../common/vendor_common.h"
#include "nccl_api.h"

static pycoll_nccl_api_t nccl;
static pycoll_cudart_api_t cudart;
static void *nccl_handle, *cudart_handle;

static pycoll_status_t load(int32_t library, const char *path, char *error, size_t error_len)
{
    static const char *const nccl_names[] = {"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRankConfig",
                                             "ncclCommGetAsyncError", "ncclCommAbort", "ncclCommDestroy",
                                             "ncclCommCuDevice", "ncclGetErrorString", "ncclGetLastError",
                                             "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast",
                                             "ncclReduce", "ncclSend", "ncclRecv", "ncclGroupStart",
                                             "ncclGroupEnd"};
    static const char *const cudart_names[] = {"cudaStreamQuery", "cudaMalloc", "cudaFree", "cudaMemset",
                                               "cudaGetErrorString"};
    _Static_assert(sizeof nccl_names / sizeof nccl_names[0] == sizeof nccl / sizeof(void (*)(void)),
                   "one name per entry point");
    _Static_assert(sizeof cudart_names / sizeof cudart_names[0] == sizeof cudart / sizeof(void (*)(void)),
                   "one name per entry point");
    if (library == 0) /* ncclGetLastError (2.13) and non-blocking init (2.14) set the oldest NCCL we accept. */
        return vendor_load(&nccl_handle, path, nccl_names, sizeof nccl_names / sizeof nccl_names[0],
                           (void (**)(void))&nccl, "NCCL 2.14 or newer is needed", error, error_len);
    return vendor_load(&cudart_handle, path, cudart_names, sizeof cudart_names / sizeof cudart_names[0],
                       (void (**)(void))&cudart, NULL, error, error_len);
}

static int loaded(void)
{
    return nccl_handle && cudart_handle;
}

static int32_t library_version(void)
{
    int version = 0;
    return nccl.GetVersion(&version) == ncclSuccess ? version : 0;
}

static int unique_id(void *id)
{
    return nccl.GetUniqueId(id);
}

static int comm_init(void **comm, int32_t size, const void *id, int32_t rank)
{
    ncclUniqueId uid;
    memcpy(uid.internal, id, sizeof uid.internal);
    pycoll_nccl_config_t config = {sizeof config, PYCOLL_NCCL_CONFIG_MAGIC, PYCOLL_NCCL_CONFIG_VERSION, 0,
                                   PYCOLL_NCCL_CONFIG_UNDEF, PYCOLL_NCCL_CONFIG_UNDEF, PYCOLL_NCCL_CONFIG_UNDEF,
                                   NULL};
    return nccl.CommInitRankConfig((ncclComm_t *)comm, size, uid, rank, &config);
}

static int async_error(void *comm, int *state)
{
    ncclResult_t s = ncclSuccess;
    ncclResult_t r = nccl.CommGetAsyncError(comm, &s);
    *state = s;
    return r;
}

static void comm_abort(void *comm)
{
    nccl.CommAbort(comm);
}

static void comm_destroy(void *comm)
{
    nccl.CommDestroy(comm);
}

static int device(void *comm, int32_t *out)
{
    int d = 0;
    ncclResult_t r = nccl.CommCuDevice(comm, &d);
    *out = d;
    return r;
}

/* What a failed NCCL call means to the caller. */
static pycoll_status_t status_of(int r)
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

static const char *error_string(int r)
{
    return nccl.GetErrorString(r);
}

static const char *result_name(int r)
{
    static const char *const names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                        "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                        "ncclRemoteError",   "ncclInProgress",         "ncclTimeout"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "unknown ncclResult_t";
}

static const char *last_error(void *comm)
{
    return nccl.GetLastError(comm);
}

static int all_reduce(const void *send, void *recv, uint64_t count, int dtype, int op, void *comm, void *stream)
{
    return nccl.AllReduce(send, recv, count, dtype, op, comm, stream);
}

static int reduce_scatter(const void *send, void *recv, uint64_t count, int dtype, int op, void *comm, void *stream)
{
    return nccl.ReduceScatter(send, recv, count, dtype, op, comm, stream);
}

static int all_gather(const void *send, void *recv, uint64_t count, int dtype, void *comm, void *stream)
{
    return nccl.AllGather(send, recv, count, dtype, comm, stream);
}

static int broadcast(void *buf, uint64_t count, int dtype, int32_t root, void *comm, void *stream)
{
    return nccl.Broadcast(buf, buf, count, dtype, root, comm, stream);
}

static int reduce(const void *send, void *recv, uint64_t count, int dtype, int op, int32_t root, void *comm,
                  void *stream)
{
    return nccl.Reduce(send, recv, count, dtype, op, root, comm, stream);
}

static int send(const void *buf, uint64_t count, int dtype, int32_t peer, void *comm, void *stream)
{
    return nccl.Send(buf, count, dtype, peer, comm, stream);
}

static int recv(void *buf, uint64_t count, int dtype, int32_t peer, void *comm, void *stream)
{
    return nccl.Recv(buf, count, dtype, peer, comm, stream);
}

static int group_start(void)
{
    return nccl.GroupStart();
}

static int group_end(void)
{
    return nccl.GroupEnd();
}

/* cudaStreamQuery only looks; the generic layer sleeps between looks. */
static int stream_wait(void *stream, int32_t slice_ms, int *code)
{
    (void)slice_ms;
    *code = cudart.StreamQuery(stream);
    return *code == PYCOLL_CUDA_SUCCESS ? PYCOLL_VENDOR_STREAM_DONE
           : *code == PYCOLL_CUDA_ERROR_NOT_READY ? PYCOLL_VENDOR_STREAM_BUSY : PYCOLL_VENDOR_STREAM_ERROR;
}

static const char *runtime_error(int code)
{
    return cudart.GetErrorString(code);
}

static int scratch_alloc(void **ptr, size_t bytes)
{
    int e = cudart.Malloc(ptr, bytes);
    if (e == PYCOLL_CUDA_SUCCESS && (e = cudart.Memset(*ptr, 0, bytes)) != PYCOLL_CUDA_SUCCESS) {
        cudart.Free(*ptr);
        *ptr = NULL;
    }
    return e;
}

static void scratch_free(void *ptr)
{
    cudart.Free(ptr);
}

const pycoll_vendor_t pycoll_nccl_vendor = {
    .version = PYCOLL_VENDOR_VERSION,
    .name = "nccl",
    .unique_id_bytes = sizeof(ncclUniqueId),
    .in_progress = ncclInProgress,
    .dtypes = {[PYCOLL_INT8] = ncclInt8,       [PYCOLL_UINT8] = ncclUint8,       [PYCOLL_INT32] = ncclInt32,
               [PYCOLL_INT64] = ncclInt64,     [PYCOLL_FLOAT16] = ncclFloat16,   [PYCOLL_BFLOAT16] = ncclBfloat16,
               [PYCOLL_FLOAT32] = ncclFloat32, [PYCOLL_FLOAT64] = ncclFloat64},
    .ops = {[PYCOLL_SUM] = ncclSum, [PYCOLL_PROD] = ncclProd, [PYCOLL_MIN] = ncclMin, [PYCOLL_MAX] = ncclMax,
            [PYCOLL_AVG] = ncclAvg},
    .calls = {[PYCOLL_VENDOR_CALL_UNIQUE_ID] = "ncclGetUniqueId",
              [PYCOLL_VENDOR_CALL_INIT] = "ncclCommInitRankConfig",
              [PYCOLL_VENDOR_CALL_ASYNC_ERROR] = "ncclCommGetAsyncError",
              [PYCOLL_VENDOR_CALL_DEVICE] = "ncclCommCuDevice",
              [PYCOLL_VENDOR_CALL_ALL_REDUCE] = "ncclAllReduce",
              [PYCOLL_VENDOR_CALL_REDUCE_SCATTER] = "ncclReduceScatter",
              [PYCOLL_VENDOR_CALL_ALL_GATHER] = "ncclAllGather",
              [PYCOLL_VENDOR_CALL_BROADCAST] = "ncclBroadcast",
              [PYCOLL_VENDOR_CALL_REDUCE] = "ncclReduce",
              [PYCOLL_VENDOR_CALL_BARRIER] = "ncclAllReduce (barrier)",
              [PYCOLL_VENDOR_CALL_SEND] = "ncclSend",
              [PYCOLL_VENDOR_CALL_RECV] = "ncclRecv",
              [PYCOLL_VENDOR_CALL_GROUP_START] = "ncclGroupStart",
              [PYCOLL_VENDOR_CALL_GROUP_END] = "ncclGroupEnd",
              [PYCOLL_VENDOR_CALL_STREAM_WAIT] = "cudaStreamQuery",
              [PYCOLL_VENDOR_CALL_SCRATCH_ALLOC] = "cudaMalloc"},
    .deadline_action = "aborted",
    .num_libraries = 2,
    .libraries = {"NCCL", "the CUDA runtime"},
    .load = load,
    .loaded = loaded,
    .library_version = library_version,
    .unique_id = unique_id,
    .comm_init = comm_init,
    .async_error = async_error,
    .abort = comm_abort,
    .destroy = comm_destroy,
    .device = device,
    .status_of = status_of,
    .error_string = error_string,
    .result_name = result_name,
    .code_label = "code",
    .last_error = last_error,
    .all_reduce = all_reduce,
    .reduce_scatter = reduce_scatter,
    .all_gather = all_gather,
    .broadcast = broadcast,
    .reduce = reduce,
    .send = send,
    .recv = recv,
    .group_start = group_start,
    .group_end = group_end,
    .stream_wait = stream_wait,
    .runtime_error = runtime_error,
    .scratch_alloc = scratch_alloc,
    .scratch_free = scratch_free,
};
