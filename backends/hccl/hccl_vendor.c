/* HCCL as a pycoll vendor (pycoll/vendor.h): libhccl and AscendCL loaded with dlopen, and the vendor struct
 * filled from them. HCCL's calls block (no "in progress"); its streams are waited on in slices with
 * aclrtSynchronizeStreamWithTimeout, and at the deadline the communicator is destroyed (HCCL has no abort
 * call: destroying it releases the peers' links, so their waits fail too). */
#define _POSIX_C_SOURCE 200809L

#include "../common/vendor_common.h"
#include "hccl_api.h"

static pycoll_hccl_api_t hccl;
static pycoll_acl_api_t acl;
static void *hccl_handle, *acl_handle;

static pycoll_status_t load(int32_t library, const char *path, char *error, size_t error_len)
{
    static const char *const hccl_names[] = {"HcclGetRootInfo",       "HcclCommInitRootInfo", "HcclCommDestroy",
                                             "HcclGetCommAsyncError", "HcclGetErrorString",   "HcclAllReduce",
                                             "HcclReduceScatter",     "HcclAllGather",        "HcclBroadcast",
                                             "HcclReduce",            "HcclBarrier"};
    static const char *const acl_names[] = {"aclrtSynchronizeStreamWithTimeout"};
    _Static_assert(sizeof hccl_names / sizeof hccl_names[0] == sizeof hccl / sizeof(void (*)(void)), "one name each");
    _Static_assert(sizeof acl_names / sizeof acl_names[0] == sizeof acl / sizeof(void (*)(void)), "one name each");
    if (library == 0)
        return vendor_load(&hccl_handle, path, hccl_names, sizeof hccl_names / sizeof hccl_names[0],
                           (void (**)(void))&hccl, NULL, error, error_len);
    return vendor_load(&acl_handle, path, acl_names, sizeof acl_names / sizeof acl_names[0], (void (**)(void))&acl,
                       NULL, error, error_len);
}

static int loaded(void)
{
    return hccl_handle && acl_handle;
}

static int unique_id(void *id)
{
    return hccl.GetRootInfo(id);
}

static int comm_init(void **comm, int32_t size, const void *id, int32_t rank)
{
    return hccl.CommInitRootInfo((uint32_t)size, id, (uint32_t)rank, comm);
}

static int async_error(void *comm, int *state)
{
    HcclResult s = HCCL_SUCCESS;
    HcclResult r = hccl.GetCommAsyncError(comm, &s);
    *state = s;
    return r;
}

static void comm_destroy(void *comm)
{
    hccl.CommDestroy(comm);
}

/* What a failed HCCL call means to the caller. */
static pycoll_status_t status_of(int r)
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

static const char *error_string(int r)
{
    return hccl.GetErrorString(r);
}

static const char *result_name(int r)
{
    static const char *const names[] = {
        "HCCL_SUCCESS",       "HCCL_E_PARA",         "HCCL_E_PTR",          "HCCL_E_MEMORY",
        "HCCL_E_INTERNAL",    "HCCL_E_NOT_SUPPORT",  "HCCL_E_NOT_FOUND",    "HCCL_E_UNAVAIL",
        "HCCL_E_SYSCALL",     "HCCL_E_TIMEOUT",      "HCCL_E_OPEN_FILE_FAILURE", "HCCL_E_TCP_CONNECT",
        "HCCL_E_ROCE_CONNECT", "HCCL_E_TCP_TRANSFER", "HCCL_E_ROCE_TRANSFER", "HCCL_E_RUNTIME",
        "HCCL_E_DRV",         "HCCL_E_PROFILING",    "HCCL_E_CCE",          "HCCL_E_NETWORK",
        "HCCL_E_AGAIN",       "HCCL_E_REMOTE",       "HCCL_E_SUSPENDING"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "unknown HcclResult";
}

/* HCCL's calls take non-const send buffers; they do not write them. */
static int all_reduce(const void *send, void *recv, uint64_t count, int dtype, int op, void *comm, void *stream)
{
    return hccl.AllReduce((void *)send, recv, count, dtype, op, comm, stream);
}

static int reduce_scatter(const void *send, void *recv, uint64_t count, int dtype, int op, void *comm, void *stream)
{
    return hccl.ReduceScatter((void *)send, recv, count, dtype, op, comm, stream);
}

static int all_gather(const void *send, void *recv, uint64_t count, int dtype, void *comm, void *stream)
{
    return hccl.AllGather((void *)send, recv, count, dtype, comm, stream);
}

static int broadcast(void *buf, uint64_t count, int dtype, int32_t root, void *comm, void *stream)
{
    return hccl.Broadcast(buf, count, dtype, (uint32_t)root, comm, stream);
}

static int reduce(const void *send, void *recv, uint64_t count, int dtype, int op, int32_t root, void *comm,
                  void *stream)
{
    return hccl.Reduce((void *)send, recv, count, dtype, op, (uint32_t)root, comm, stream);
}

static int barrier(void *comm, void *stream)
{
    return hccl.Barrier(comm, stream);
}

static int stream_wait(void *stream, int32_t slice_ms, int *code)
{
    *code = acl.SynchronizeStreamWithTimeout(stream, slice_ms);
    return *code == PYCOLL_ACL_SUCCESS ? PYCOLL_VENDOR_STREAM_DONE
           : *code == PYCOLL_ACL_ERROR_RT_STREAM_SYNC_TIMEOUT ? PYCOLL_VENDOR_STREAM_BUSY
                                                              : PYCOLL_VENDOR_STREAM_ERROR;
}

const pycoll_vendor_t pycoll_hccl_vendor = {
    .version = PYCOLL_VENDOR_VERSION,
    .name = "hccl",
    .unique_id_bytes = sizeof(HcclRootInfo),
    .in_progress = -1,
    .dtypes = {[PYCOLL_INT8] = HCCL_DATA_TYPE_INT8,       [PYCOLL_UINT8] = HCCL_DATA_TYPE_UINT8,
               [PYCOLL_INT32] = HCCL_DATA_TYPE_INT32,     [PYCOLL_INT64] = HCCL_DATA_TYPE_INT64,
               [PYCOLL_FLOAT16] = HCCL_DATA_TYPE_FP16,    [PYCOLL_BFLOAT16] = HCCL_DATA_TYPE_BFP16,
               [PYCOLL_FLOAT32] = HCCL_DATA_TYPE_FP32,    [PYCOLL_FLOAT64] = HCCL_DATA_TYPE_FP64},
    /* No average in HCCL: the Python layer sums, then divides on the device. */
    .ops = {[PYCOLL_SUM] = HCCL_REDUCE_SUM, [PYCOLL_PROD] = HCCL_REDUCE_PROD, [PYCOLL_MIN] = HCCL_REDUCE_MIN,
            [PYCOLL_MAX] = HCCL_REDUCE_MAX, [PYCOLL_AVG] = -1},
    .calls = {[PYCOLL_VENDOR_CALL_UNIQUE_ID] = "HcclGetRootInfo",
              [PYCOLL_VENDOR_CALL_INIT] = "HcclCommInitRootInfo",
              [PYCOLL_VENDOR_CALL_ASYNC_ERROR] = "HcclGetCommAsyncError",
              [PYCOLL_VENDOR_CALL_DEVICE] = "",
              [PYCOLL_VENDOR_CALL_ALL_REDUCE] = "HcclAllReduce",
              [PYCOLL_VENDOR_CALL_REDUCE_SCATTER] = "HcclReduceScatter",
              [PYCOLL_VENDOR_CALL_ALL_GATHER] = "HcclAllGather",
              [PYCOLL_VENDOR_CALL_BROADCAST] = "HcclBroadcast",
              [PYCOLL_VENDOR_CALL_REDUCE] = "HcclReduce",
              [PYCOLL_VENDOR_CALL_BARRIER] = "HcclBarrier",
              [PYCOLL_VENDOR_CALL_SEND] = "",
              [PYCOLL_VENDOR_CALL_RECV] = "",
              [PYCOLL_VENDOR_CALL_GROUP_START] = "",
              [PYCOLL_VENDOR_CALL_GROUP_END] = "",
              [PYCOLL_VENDOR_CALL_STREAM_WAIT] = "aclrtSynchronizeStreamWithTimeout",
              [PYCOLL_VENDOR_CALL_SCRATCH_ALLOC] = ""},
    .deadline_action = "destroyed",
    .num_libraries = 2,
    .libraries = {"HCCL", "AscendCL"},
    .load = load,
    .loaded = loaded,
    .unique_id = unique_id,
    .comm_init = comm_init,
    .async_error = async_error,
    .abort = comm_destroy,
    .destroy = comm_destroy,
    .status_of = status_of,
    .error_string = error_string,
    .result_name = result_name,
    .code_label = "HcclResult",
    .all_reduce = all_reduce,
    .reduce_scatter = reduce_scatter,
    .all_gather = all_gather,
    .broadcast = broadcast,
    .reduce = reduce,
    .barrier = barrier,
    .stream_wait = stream_wait,
};
