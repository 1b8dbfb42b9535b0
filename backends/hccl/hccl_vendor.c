/* HCCL as a pycoll vendor (pycoll/vendor.h): the vendor struct, filled from libhccl and AscendCL when they are
 * dlopen'ed. HCCL's calls block (no "in progress"); its streams are waited on in slices with
 * aclrtSynchronizeStreamWithTimeout, and at the deadline the communicator is destroyed (HCCL has no abort
 * call: destroying it releases the peers' links, so their waits fail too). HCCL has no average and no
 * grouped send/recv that pycoll uses: those entries stay empty. HCCL refuses a NULL stream, so each
 * communicator has a stream of its own (aclrtCreateStream) for calls given none (a barrier). */
#define _POSIX_C_SOURCE 200809L

#include "../common/vendor_common.h"
#include "hccl_api.h"

/* HCCL's init takes its arguments in another order than the vendor struct's. */
static HcclResult (*comm_init_root_info)(uint32_t nranks, const HcclRootInfo *info, uint32_t rank, HcclComm *comm);

static int comm_init(void **comm, int32_t size, const void *id, int32_t rank)
{
    return comm_init_root_info((uint32_t)size, id, (uint32_t)rank, comm);
}

/* AscendCL's allocator takes a policy (ACL_MEM_MALLOC_HUGE_FIRST = 0: huge pages where there are some). */
static int (*acl_malloc)(void **ptr, size_t size, int policy);
static int scratch_alloc(void **ptr, size_t bytes)
{
    return acl_malloc(ptr, bytes, 0);
}

/* HCCL checks its arguments before it enqueues anything (a NULL stream or buffer: HCCL_E_PTR; a count or
 * root out of range: HCCL_E_PARA; a dtype or op this device's HCCL lacks: HCCL_E_NOT_SUPPORT, hccl_types.h):
 * such a result leaves the communicator as it was. pycoll checks the same before calling; this is the
 * backstop for a rule pycoll's tables miss. */
static int refused(int r)
{
    return r == HCCL_E_PARA || r == HCCL_E_PTR || r == HCCL_E_NOT_SUPPORT;
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

static const char *const result_names[] = {
    "HCCL_SUCCESS",        "HCCL_E_PARA",         "HCCL_E_PTR",           "HCCL_E_MEMORY",
    "HCCL_E_INTERNAL",     "HCCL_E_NOT_SUPPORT",  "HCCL_E_NOT_FOUND",     "HCCL_E_UNAVAIL",
    "HCCL_E_SYSCALL",      "HCCL_E_TIMEOUT",      "HCCL_E_OPEN_FILE_FAILURE", "HCCL_E_TCP_CONNECT",
    "HCCL_E_ROCE_CONNECT", "HCCL_E_TCP_TRANSFER", "HCCL_E_ROCE_TRANSFER", "HCCL_E_RUNTIME",
    "HCCL_E_DRV",          "HCCL_E_PROFILING",    "HCCL_E_CCE",           "HCCL_E_NETWORK",
    "HCCL_E_AGAIN",        "HCCL_E_REMOTE",       "HCCL_E_SUSPENDING"};

#define V pycoll_hccl_vendor
static const pycoll_vendor_symbol_t hccl_symbols[] = {
    VENDOR_SHARED_SYMBOLS("Hccl", V, V.broadcast),
    {PYCOLL_VENDOR_CALL_UNIQUE_ID, "HcclGetRootInfo", VENDOR_SLOT(V.unique_id)},
    {PYCOLL_VENDOR_CALL_INIT, "HcclCommInitRootInfo", VENDOR_SLOT(comm_init_root_info)},
    {PYCOLL_VENDOR_CALL_NONE, "HcclCommDestroy", VENDOR_SLOT(V.abort)}, /* HCCL has no abort */
    {PYCOLL_VENDOR_CALL_ASYNC_ERROR, "HcclGetCommAsyncError", VENDOR_SLOT(V.async_error)},
    {PYCOLL_VENDOR_CALL_BARRIER, "HcclBarrier", VENDOR_SLOT(V.barrier)},
};
static const pycoll_vendor_symbol_t acl_symbols[] = {
    {PYCOLL_VENDOR_CALL_STREAM_WAIT, "aclrtSynchronizeStreamWithTimeout", VENDOR_SLOT(V.stream_wait)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtCreateStream", VENDOR_SLOT(V.stream_create)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtDestroyStream", VENDOR_SLOT(V.stream_destroy)},
    {PYCOLL_VENDOR_CALL_SCRATCH_ALLOC, "aclrtMalloc", VENDOR_SLOT(acl_malloc)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtFree", VENDOR_SLOT(V.scratch_free)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtGetSocName", VENDOR_SLOT(V.device_name)},
};
#undef V

pycoll_vendor_t pycoll_hccl_vendor = {
    .version = PYCOLL_VENDOR_VERSION,
    .name = "hccl",
    .unique_id_bytes = sizeof(HcclRootInfo),
    .in_progress = -1,
    .dtypes = {[PYCOLL_INT8] = HCCL_DATA_TYPE_INT8,       [PYCOLL_UINT8] = HCCL_DATA_TYPE_UINT8,
               [PYCOLL_INT32] = HCCL_DATA_TYPE_INT32,     [PYCOLL_INT64] = HCCL_DATA_TYPE_INT64,
               [PYCOLL_FLOAT16] = HCCL_DATA_TYPE_FP16,    [PYCOLL_BFLOAT16] = HCCL_DATA_TYPE_BFP16,
               [PYCOLL_FLOAT32] = HCCL_DATA_TYPE_FP32,    [PYCOLL_FLOAT64] = HCCL_DATA_TYPE_FP64},
    /* No average: the Python layer sums, then divides on the device. */
    .ops = {[PYCOLL_SUM] = HCCL_REDUCE_SUM, [PYCOLL_PROD] = HCCL_REDUCE_PROD, [PYCOLL_MIN] = HCCL_REDUCE_MIN,
            [PYCOLL_MAX] = HCCL_REDUCE_MAX, [PYCOLL_AVG] = -1},
    .deadline_action = "destroyed",
    .code_label = "HcclResult",
    .num_libraries = 2,
    .libraries = {{"HCCL", NULL, hccl_symbols, sizeof hccl_symbols / sizeof hccl_symbols[0], NULL},
                  {"AscendCL", NULL, acl_symbols, sizeof acl_symbols / sizeof acl_symbols[0], NULL}},
    .status_of = status_of,
    .result_names = result_names,
    .num_result_names = sizeof result_names / sizeof result_names[0],
    .comm_init = comm_init,
    .stream_busy = PYCOLL_ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
    .scratch_alloc = scratch_alloc,
    .refused = refused,
    /* HCCL's reduce may write the receive buffer off the root too (its ring leaves partials there). */
    .reduce_writes_every_rank = 1,
};
