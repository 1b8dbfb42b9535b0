/* NCCL as a pycoll vendor (vendor_ops.h): the vendor struct, filled from libnccl and the CUDA runtime when
 * they are dlopen'ed. Communicators are non-blocking (ncclCommInitRankConfig with blocking = 0), so the generic
 * layer polls them against the deadline and calls ncclCommAbort when it passes. Most entries are NCCL's own
 * functions (their C signatures are the struct's); the adapters below cover where NCCL's differ. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <string.h>

#include "../common/vendor_common.h"
#include "nccl_api.h"

/* NCCL and CUDA runtime calls whose signature is not the vendor struct's, reached through the adapters (their
 * types, pycoll_nccl_fn_<name>, are checked against nccl.h and cuda_runtime_api.h by the tests). */
static pycoll_nccl_fn_comm_init_rank_config comm_init_rank_config;
static pycoll_nccl_fn_nccl_broadcast nccl_broadcast;
static pycoll_nccl_fn_cuda_stream_query cuda_stream_query;
static pycoll_nccl_fn_cuda_malloc cuda_malloc;
static pycoll_nccl_fn_cuda_memset cuda_memset;
static pycoll_nccl_fn_cuda_pointer_get_attributes cuda_pointer_get_attributes;
static pycoll_nccl_fn_cuda_set_device cuda_set_device;

/* A thread pycoll starts (the watchdog) has no current device: its first runtime call would make device 0's
 * primary context current -- an extra context on GPU 0 for every rank of a node -- so it sets the
 * communicator's device first, as ProcessGroupNCCL's watchdog does. */
static int bind_thread(int32_t device, void *comm)
{
    (void)comm;
    return device >= 0 && cuda_set_device ? cuda_set_device(device) : 0;
}

static int comm_init(void **comm, int32_t size, const void *id, int32_t rank)
{
    ncclUniqueId uid;
    memcpy(uid.internal, id, sizeof uid.internal);
    pycoll_nccl_config_t config = PYCOLL_NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    return comm_init_rank_config((ncclComm_t *)comm, size, uid, rank, &config);
}

/* In place: NCCL's broadcast takes a send and a receive buffer. */
static int broadcast(void *buf, uint64_t count, int dtype, int root, void *comm, void *stream)
{
    return nccl_broadcast(buf, buf, count, (ncclDataType_t)dtype, root, comm, stream);
}

/* Surviving a lost rank: optional, as NCCL before 2.27 lacks them; looked up once, after loading. */
static pycoll_nccl_fn_comm_shrink comm_shrink;
static pycoll_nccl_fn_comm_revoke comm_revoke;
static pycoll_nccl_fn_comm_grow comm_grow;
static pthread_once_t fault_tolerance_once = PTHREAD_ONCE_INIT;

static void resolve_fault_tolerance(void)
{
    *(void (**)(void))&comm_shrink = vendor_optional_symbol(&pycoll_nccl_vendor.libraries[0], "ncclCommShrink");
    *(void (**)(void))&comm_revoke = vendor_optional_symbol(&pycoll_nccl_vendor.libraries[0], "ncclCommRevoke");
    *(void (**)(void))&comm_grow = vendor_optional_symbol(&pycoll_nccl_vendor.libraries[0], "ncclCommGrow");
}

static int32_t fault_tolerance(void)
{
    pthread_once(&fault_tolerance_once, resolve_fault_tolerance);
    return (comm_shrink ? PYCOLL_VENDOR_HAS_SHRINK : 0) | (comm_revoke ? PYCOLL_VENDOR_HAS_REVOKE : 0) |
           (comm_grow ? PYCOLL_VENDOR_HAS_GROW : 0);
}

/* A NULL config: the new communicator inherits the parent's, non-blocking included. */
static int shrink(void *comm, const int32_t *exclude, int32_t n, int abort_in_flight, void **newcomm)
{
    int ranks[n > 0 ? n : 1]; /* NCCL takes them as int *, unwritten */
    for (int32_t i = 0; i < n; i++)
        ranks[i] = exclude[i];
    return comm_shrink(comm, ranks, n, (ncclComm_t *)newcomm, NULL,
                       abort_in_flight ? PYCOLL_NCCL_SHRINK_ABORT : PYCOLL_NCCL_SHRINK_DEFAULT);
}

static int revoke(void *comm)
{
    return comm_revoke(comm, PYCOLL_NCCL_REVOKE_DEFAULT);
}

static const char *const late_call_names[PYCOLL_VENDOR_NUM_CALLS] = {
    [PYCOLL_VENDOR_CALL_SHRINK] = "ncclCommShrink",
    [PYCOLL_VENDOR_CALL_REVOKE] = "ncclCommRevoke",
};

/* The events behind collectives that return once enqueued (vendor_async.c): without timing, the cheapest kind
 * (cudaEventDisableTiming, 2), as torch's ProcessGroupNCCL records them. */
static pycoll_nccl_fn_cuda_event_create_with_flags cuda_event_create_with_flags;
static int event_create(void **event)
{
    return cuda_event_create_with_flags(event, 2);
}

/* The stream NCCL's collectives run on: non-blocking (cudaStreamNonBlocking, 1), as torch's pool streams are,
 * so that it never waits for the legacy default stream's unrelated work nor it for the collective. */
static pycoll_nccl_fn_cuda_stream_create_with_flags cuda_stream_create_with_flags;
static int comm_stream_create(void **stream)
{
    return cuda_stream_create_with_flags(stream, 1);
}

static pycoll_nccl_fn_cuda_stream_wait_event cuda_stream_wait_event;
static int stream_wait_event(void *stream, void *event)
{
    return cuda_stream_wait_event(stream, event, 0);
}

/* cudaStreamQuery only looks; the generic layer sleeps between looks. */
static int stream_wait(void *stream, int32_t slice_ms)
{
    (void)slice_ms;
    return cuda_stream_query(stream);
}

static int scratch_alloc(void **ptr, size_t bytes)
{
    int e = cuda_malloc(ptr, bytes);
    if (e == PYCOLL_CUDA_SUCCESS && (e = cuda_memset(*ptr, 0, bytes)) != PYCOLL_CUDA_SUCCESS) {
        pycoll_nccl_vendor.scratch_free(*ptr);
        *ptr = NULL;
    }
    return e;
}

/* Host, pinned host and managed memory are host-accessible; a pointer CUDA does not know is host memory. */
static int host_memory(const void *ptr)
{
    pycoll_cuda_pointer_attributes_t attributes = {{0, -1, NULL, NULL}};
    return cuda_pointer_get_attributes(&attributes, ptr) != PYCOLL_CUDA_SUCCESS ||
           attributes.head.type != PYCOLL_CUDA_MEMORY_TYPE_DEVICE;
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

static const char *const result_names[] = {
    "ncclSuccess",      "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError", "ncclInvalidArgument",
    "ncclInvalidUsage", "ncclRemoteError",        "ncclInProgress",  "ncclTimeout"};

#define V pycoll_nccl_vendor
static const pycoll_vendor_symbol_t nccl_symbols[] = {
    VENDOR_SHARED_SYMBOLS("nccl", V, nccl_broadcast),
    {PYCOLL_VENDOR_CALL_NONE, "ncclGetVersion", VENDOR_SLOT(V.library_version)},
    {PYCOLL_VENDOR_CALL_NONE, "ncclGetLastError", VENDOR_SLOT(V.last_error)},
    {PYCOLL_VENDOR_CALL_UNIQUE_ID, "ncclGetUniqueId", VENDOR_SLOT(V.unique_id)},
    {PYCOLL_VENDOR_CALL_INIT, "ncclCommInitRankConfig", VENDOR_SLOT(comm_init_rank_config)},
    {PYCOLL_VENDOR_CALL_ASYNC_ERROR, "ncclCommGetAsyncError", VENDOR_SLOT(V.async_error)},
    {PYCOLL_VENDOR_CALL_NONE, "ncclCommAbort", VENDOR_SLOT(V.abort)},
    {PYCOLL_VENDOR_CALL_FINALIZE, "ncclCommFinalize", VENDOR_SLOT(V.finalize)},
    {PYCOLL_VENDOR_CALL_DEVICE, "ncclCommCuDevice", VENDOR_SLOT(V.device)},
    {PYCOLL_VENDOR_CALL_SEND, "ncclSend", VENDOR_SLOT(V.send)},
    {PYCOLL_VENDOR_CALL_RECV, "ncclRecv", VENDOR_SLOT(V.recv)},
    {PYCOLL_VENDOR_CALL_GROUP_START, "ncclGroupStart", VENDOR_SLOT(V.group_start)},
    {PYCOLL_VENDOR_CALL_GROUP_END, "ncclGroupEnd", VENDOR_SLOT(V.group_end)},
};
static const pycoll_vendor_symbol_t cudart_symbols[] = {
    {PYCOLL_VENDOR_CALL_STREAM_WAIT, "cudaStreamQuery", VENDOR_SLOT(cuda_stream_query)},
    {PYCOLL_VENDOR_CALL_SCRATCH_ALLOC, "cudaMalloc", VENDOR_SLOT(cuda_malloc)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaMemset", VENDOR_SLOT(cuda_memset)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaFree", VENDOR_SLOT(V.scratch_free)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaGetErrorString", VENDOR_SLOT(V.runtime_error)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaPointerGetAttributes", VENDOR_SLOT(cuda_pointer_get_attributes)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaEventCreateWithFlags", VENDOR_SLOT(cuda_event_create_with_flags)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaEventRecord", VENDOR_SLOT(V.event_record)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaEventQuery", VENDOR_SLOT(V.event_query)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaEventDestroy", VENDOR_SLOT(V.event_destroy)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaSetDevice", VENDOR_SLOT(cuda_set_device)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaStreamCreateWithFlags", VENDOR_SLOT(cuda_stream_create_with_flags)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaStreamDestroy", VENDOR_SLOT(V.comm_stream_destroy)},
    {PYCOLL_VENDOR_CALL_NONE, "cudaStreamWaitEvent", VENDOR_SLOT(cuda_stream_wait_event)},
};
#undef V

_Static_assert(sizeof(ncclUniqueId) <= PYCOLL_VENDOR_MAX_ID_BYTES, "ncclUniqueId outgrew PYCOLL_VENDOR_MAX_ID_BYTES");

pycoll_vendor_t pycoll_nccl_vendor = {
    .name = "nccl",
    .unique_id_bytes = sizeof(ncclUniqueId),
    .in_progress = ncclInProgress,
    .dtypes = {[PYCOLL_INT8] = ncclInt8,       [PYCOLL_UINT8] = ncclUint8,       [PYCOLL_INT32] = ncclInt32,
               [PYCOLL_INT64] = ncclInt64,     [PYCOLL_FLOAT16] = ncclFloat16,   [PYCOLL_BFLOAT16] = ncclBfloat16,
               [PYCOLL_FLOAT32] = ncclFloat32, [PYCOLL_FLOAT64] = ncclFloat64},
    .ops = {[PYCOLL_SUM] = ncclSum, [PYCOLL_PROD] = ncclProd, [PYCOLL_MIN] = ncclMin, [PYCOLL_MAX] = ncclMax,
            [PYCOLL_AVG] = ncclAvg},
    .deadline_action = "aborted",
    .num_libraries = 2,
    /* ncclGetLastError (2.13), non-blocking init and ncclCommFinalize (2.14) set the oldest NCCL we accept. */
    .libraries = {VENDOR_LIBRARY("NCCL", "NCCL 2.14 or newer is needed", nccl_symbols),
                  VENDOR_LIBRARY("the CUDA runtime", NULL, cudart_symbols)},
    VENDOR_RESULTS(status_of, result_names, "code"),
    .comm_init = comm_init,
    .broadcast = broadcast,
    .stream_wait = stream_wait,
    .stream_busy = PYCOLL_CUDA_ERROR_NOT_READY,
    .scratch_alloc = scratch_alloc,
    .host_memory = host_memory,
    .event_create = event_create,
    .comm_stream_create = comm_stream_create,
    .stream_wait_event = stream_wait_event,
    .fault_tolerance = fault_tolerance,
    .shrink = shrink,
    .revoke = revoke,
    .late_call_names = late_call_names,
    .bind_thread = bind_thread,
    /* NCCL's device memory is CUDA memory: pycoll's CUDA kernels, on the collective's stream. */
    .device_kernels = cuda_kernels_bind,
};
