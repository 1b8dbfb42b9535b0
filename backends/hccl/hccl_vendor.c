/* HCCL as a pycoll vendor (vendor_ops.h): the vendor struct, filled from libhccl and AscendCL when they are
 * dlopen'ed. HCCL's calls block (no "in progress"); its streams are waited on in slices with
 * aclrtSynchronizeStreamWithTimeout, and at the deadline the communicator is destroyed (HCCL has no abort
 * call: destroying it releases the peers' links, so their waits fail too). HCCL has no average. Its
 * point-to-point is HcclBatchSendRecv, whose items progress together: the vendor struct's group (start, sends
 * and receives, end) is collected here and issued as one batch. HCCL refuses a NULL stream, so each
 * communicator has a stream of its own (aclrtCreateStream) for calls given none (a barrier).
 * HcclGetErrorString, HcclGetCommAsyncError and HcclBatchSendRecv are weak symbols or absent in older CANN:
 * they are looked up after loading, and their absence is handled where they are used. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/vendor_common.h"
#include "hccl_api.h"

#define V pycoll_hccl_vendor

/* ---- the symbols older CANN lacks ---- */

static const char *(*hccl_error_string)(int code);
static int (*hccl_async_error)(void *comm, int *error);
static int (*hccl_batch_send_recv)(HcclSendRecvItem *items, uint32_t n, void *comm, void *stream);
static pthread_once_t optional_once = PTHREAD_ONCE_INIT;

static void resolve_optional(void)
{
    *(void (**)(void))&hccl_error_string = vendor_optional_symbol(&V.libraries[0], "HcclGetErrorString");
    *(void (**)(void))&hccl_async_error = vendor_optional_symbol(&V.libraries[0], "HcclGetCommAsyncError");
    *(void (**)(void))&hccl_batch_send_recv = vendor_optional_symbol(&V.libraries[0], "HcclBatchSendRecv");
}

/* Every entry that uses them runs after init, so the library is loaded by then. */
static void optional_symbols(void)
{
    pthread_once(&optional_once, resolve_optional);
}

static const char *error_string(int code)
{
    optional_symbols();
    return hccl_error_string ? hccl_error_string(code) : "(this CANN has no HcclGetErrorString)";
}

/* Without HcclGetCommAsyncError, a collective's failure shows only as a stream that never finishes: the
 * deadline then destroys the communicator. */
static int async_error(void *comm, int *error)
{
    optional_symbols();
    if (!hccl_async_error) {
        *error = HCCL_SUCCESS;
        return HCCL_SUCCESS;
    }
    return hccl_async_error(comm, error);
}

/* ---- events, for collectives that return once enqueued (vendor_async.c) ---- */

/* AscendCL's events (acl_rt.h): looked up after loading like the optional HCCL symbols, so a runtime without
 * them leaves every call completing before it returns (event_create fails: vendor_async.c completes it now). */
static int (*acl_create_event)(void **event);
static int (*acl_record_event)(void *event, void *stream);
static int (*acl_query_event_status)(void *event, int *status); /* aclrtEventRecordedStatus: 1 complete */
static int (*acl_destroy_event)(void *event);
static int (*acl_stream_wait_event)(void *stream, void *event);
static pthread_once_t events_once = PTHREAD_ONCE_INIT;

static void resolve_events(void)
{
    *(void (**)(void))&acl_create_event = vendor_optional_symbol(&V.libraries[1], "aclrtCreateEvent");
    *(void (**)(void))&acl_record_event = vendor_optional_symbol(&V.libraries[1], "aclrtRecordEvent");
    *(void (**)(void))&acl_query_event_status = vendor_optional_symbol(&V.libraries[1], "aclrtQueryEventStatus");
    *(void (**)(void))&acl_destroy_event = vendor_optional_symbol(&V.libraries[1], "aclrtDestroyEvent");
    *(void (**)(void))&acl_stream_wait_event = vendor_optional_symbol(&V.libraries[1], "aclrtStreamWaitEvent");
}

static int event_create(void **event)
{
    pthread_once(&events_once, resolve_events);
    if (!acl_create_event || !acl_record_event || !acl_query_event_status || !acl_destroy_event)
        return HCCL_E_NOT_SUPPORT;
    return acl_create_event(event);
}

static int event_record(void *event, void *stream)
{
    return acl_record_event(event, stream);
}

static int event_query(void *event)
{
    int status = 0;
    int r = acl_query_event_status(event, &status);
    return r != PYCOLL_ACL_SUCCESS ? r : status == 1 ? 0 : PYCOLL_ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
}

static int event_destroy(void *event)
{
    return acl_destroy_event(event);
}

/* The stream HCCL's collectives run on (vendor_ops.h: comm_stream_create), ordered by aclrtStreamWaitEvent; a
 * runtime without it leaves them on the caller's stream (the failed create says so to the generic layer). */
static int comm_stream_create(void **stream)
{
    pthread_once(&events_once, resolve_events);
    if (!acl_stream_wait_event || !acl_create_event || !acl_record_event || !acl_query_event_status ||
        !acl_destroy_event)
        return HCCL_E_NOT_SUPPORT;
    return V.stream_create(stream);
}

static int comm_stream_destroy(void *stream)
{
    return V.stream_destroy(stream);
}

static int stream_wait_event(void *stream, void *event)
{
    return acl_stream_wait_event(stream, event);
}

/* ---- the ACL context of teardown threads ---- */

/* pycoll runs every destroy on a thread of its own (bounded: vendor_comm.c), and an AscendCL call on a thread
 * with no current context fails (ACL_ERROR_RT_CONTEXT_NULL), HcclCommDestroy's own runtime calls too: the
 * thread first sets the context that was current when the communicator was created, as torch_npu's
 * ProcessGroupHCCL sets the device on its own threads. */
static int (*acl_get_context)(aclrtContext *context);
static int (*acl_set_context)(aclrtContext context);
static int (*comm_destroy)(void *comm);

typedef struct comm_context {
    void *comm;
    aclrtContext context;
    struct comm_context *next;
} comm_context_t;
static comm_context_t *contexts;
static pthread_mutex_t contexts_lock = PTHREAD_MUTEX_INITIALIZER;

static void remember_context(void *comm)
{
    aclrtContext context = NULL;
    comm_context_t *entry = malloc(sizeof *entry);
    if (!entry || acl_get_context(&context) != PYCOLL_ACL_SUCCESS) {
        free(entry);
        return; /* no context to hand on: the destroy runs as before */
    }
    pthread_mutex_lock(&contexts_lock);
    *entry = (comm_context_t){comm, context, contexts};
    contexts = entry;
    pthread_mutex_unlock(&contexts_lock);
}

/* The context current when comm was created, set on the calling thread (a thread pycoll starts: the watchdog,
 * whose event and async-error queries need one); 0 where none was remembered. */
static int bind_thread(int32_t device, void *comm)
{
    (void)device;
    aclrtContext context = NULL;
    pthread_mutex_lock(&contexts_lock);
    for (comm_context_t *e = contexts; e; e = e->next)
        if (e->comm == comm)
            context = e->context;
    pthread_mutex_unlock(&contexts_lock);
    return comm && context ? acl_set_context(context) : 0;
}

static int destroy(void *comm)
{
    pthread_mutex_lock(&contexts_lock);
    comm_context_t *found = NULL;
    for (comm_context_t **p = &contexts; *p; p = &(*p)->next)
        if ((*p)->comm == comm) {
            found = *p;
            *p = found->next;
            break;
        }
    pthread_mutex_unlock(&contexts_lock);
    if (found) {
        acl_set_context(found->context);
        free(found);
    }
    return comm_destroy(comm);
}

/* ---- point-to-point: the vendor struct's group as one HcclBatchSendRecv ---- */

/* Per thread, as NCCL's groups are: the items of the open group, and the communicator and stream they go to
 * (vendor_p2p.c issues a group's operations on one communicator and stream). */
static _Thread_local struct {
    HcclSendRecvItem *items;
    uint32_t count, capacity;
    int depth;
    void *comm, *stream;
} batch;

static int group_start(void)
{
    optional_symbols();
    if (!hccl_batch_send_recv)
        return HCCL_E_NOT_SUPPORT; /* older CANN: the vendor transport says the call failed, and why */
    batch.depth++;
    return HCCL_SUCCESS;
}

static int add_item(HcclSendRecvType type, const void *buf, uint64_t count, int dtype, int peer, void *comm,
                    void *stream)
{
    if (batch.depth == 0 || (batch.count > 0 && (comm != batch.comm || stream != batch.stream)))
        return HCCL_E_PARA; /* outside a group, or a second communicator or stream in one */
    if (batch.count == batch.capacity) {
        uint32_t capacity = batch.capacity ? 2 * batch.capacity : 16;
        HcclSendRecvItem *items = realloc(batch.items, capacity * sizeof *items);
        if (!items)
            return HCCL_E_MEMORY;
        batch.items = items;
        batch.capacity = capacity;
    }
    batch.items[batch.count++] = (HcclSendRecvItem){type, (void *)buf, count, (HcclDataType)dtype, (uint32_t)peer};
    batch.comm = comm;
    batch.stream = stream;
    return HCCL_SUCCESS;
}

static int send(const void *buf, uint64_t count, int dtype, int peer, void *comm, void *stream)
{
    return add_item(HCCL_SEND, buf, count, dtype, peer, comm, stream);
}

static int recv(void *buf, uint64_t count, int dtype, int peer, void *comm, void *stream)
{
    return add_item(HCCL_RECV, buf, count, dtype, peer, comm, stream);
}

static int group_end(void)
{
    if (batch.depth == 0 || --batch.depth > 0)
        return HCCL_SUCCESS;
    uint32_t n = batch.count;
    batch.count = 0;
    return n ? hccl_batch_send_recv(batch.items, n, batch.comm, batch.stream) : HCCL_SUCCESS;
}

/* HCCL's init takes its arguments in another order than the vendor struct's. */
static HcclResult (*comm_init_root_info)(uint32_t nranks, const HcclRootInfo *info, uint32_t rank, HcclComm *comm);

static int comm_init(void **comm, int32_t size, const void *id, int32_t rank)
{
    int r = comm_init_root_info((uint32_t)size, id, (uint32_t)rank, comm);
    if (r == HCCL_SUCCESS)
        remember_context(*comm);
    return r;
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
    case HCCL_E_OOM:
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
    "HCCL_E_AGAIN",        "HCCL_E_REMOTE",       "HCCL_E_SUSPENDING",    "HCCL_E_OPRETRY_FAIL",
    "HCCL_E_OOM",          [HCCL_E_IN_STATUS] = "HCCL_E_IN_STATUS"};

/* Point-to-point is looked up after loading (older CANN lacks it), and one call serves the whole group. */
static const char *const late_call_names[PYCOLL_VENDOR_NUM_CALLS] = {
    [PYCOLL_VENDOR_CALL_SEND] = "HcclBatchSendRecv",
    [PYCOLL_VENDOR_CALL_RECV] = "HcclBatchSendRecv",
    [PYCOLL_VENDOR_CALL_GROUP_START] = "HcclBatchSendRecv",
    [PYCOLL_VENDOR_CALL_GROUP_END] = "HcclBatchSendRecv",
};

/* HcclSend and HcclRecv are named in messages: HcclBatchSendRecv issues both. */
static const pycoll_vendor_symbol_t hccl_symbols[] = {
    VENDOR_COLLECTIVE_SYMBOLS("Hccl", V, comm_destroy, V.broadcast),
    {PYCOLL_VENDOR_CALL_UNIQUE_ID, "HcclGetRootInfo", VENDOR_SLOT(V.unique_id)},
    {PYCOLL_VENDOR_CALL_INIT, "HcclCommInitRootInfo", VENDOR_SLOT(comm_init_root_info)},
    {PYCOLL_VENDOR_CALL_BARRIER, "HcclBarrier", VENDOR_SLOT(V.barrier)},
};
static const pycoll_vendor_symbol_t acl_symbols[] = {
    {PYCOLL_VENDOR_CALL_STREAM_WAIT, "aclrtSynchronizeStreamWithTimeout", VENDOR_SLOT(V.stream_wait)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtCreateStream", VENDOR_SLOT(V.stream_create)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtDestroyStream", VENDOR_SLOT(V.stream_destroy)},
    {PYCOLL_VENDOR_CALL_SCRATCH_ALLOC, "aclrtMalloc", VENDOR_SLOT(acl_malloc)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtFree", VENDOR_SLOT(V.scratch_free)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtGetSocName", VENDOR_SLOT(V.device_name)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtGetCurrentContext", VENDOR_SLOT(acl_get_context)},
    {PYCOLL_VENDOR_CALL_NONE, "aclrtSetCurrentContext", VENDOR_SLOT(acl_set_context)},
};

_Static_assert(sizeof(HcclRootInfo) <= PYCOLL_VENDOR_MAX_ID_BYTES, "HcclRootInfo outgrew PYCOLL_VENDOR_MAX_ID_BYTES");

pycoll_vendor_t pycoll_hccl_vendor = {
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
    .num_libraries = 2,
    .libraries = {VENDOR_LIBRARY("HCCL", NULL, hccl_symbols), VENDOR_LIBRARY("AscendCL", NULL, acl_symbols)},
    VENDOR_RESULTS(status_of, result_names, "HcclResult"),
    .error_string = error_string,
    .async_error = async_error,
    .destroy = destroy,
    .abort = destroy, /* HCCL has no abort: destroying releases the peers' links */
    .send = send,
    .recv = recv,
    .group_start = group_start,
    .group_end = group_end,
    .comm_init = comm_init,
    .stream_busy = PYCOLL_ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
    .scratch_alloc = scratch_alloc,
    .refused = refused,
    /* HCCL's reduce may write the receive buffer off the root too (its ring leaves partials there). */
    .reduce_writes_every_rank = 1,
    .event_create = event_create,
    .event_record = event_record,
    .event_query = event_query,
    .event_destroy = event_destroy,
    .comm_stream_create = comm_stream_create,
    .comm_stream_destroy = comm_stream_destroy,
    .stream_wait_event = stream_wait_event,
    .bind_thread = bind_thread,
    .late_call_names = late_call_names,
};
#undef V
