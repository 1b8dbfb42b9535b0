/* A fake libnccl.so.2 + libcudart for pycoll's binding tests: the same C symbols and values as NCCL's nccl.h
 * (typed here as plain ints), backed by fake_vendor.c and fake_collectives.c. Every call is logged to FAKE_COLL_LOG
 * so tests can check what pycoll passed; FAKE_COLL_FAIL injects result codes ("ncclAllReduce=4", "async=6", ...). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "fake_vendor.h"

static int thread_current_device(const char *call);

enum { SUCCESS = 0, INVALID_ARGUMENT = 4, INVALID_USAGE = 5, IN_PROGRESS = 7 };

/* The rules of the real NCCL this fake enforces (nccl.h.in and src/ of NVIDIA/nccl 2.30):
 * - NCCL_ALGO is read when a communicator is created. Each collective runs only some algorithms (src/enqueue.cc's
 *   algorithm table): broadcast and reduce Ring only; all_gather and reduce_scatter Ring, PAT, NVLS,
 *   CollNetDirect; all_reduce Ring, Tree, CollNetDirect, CollNetChain, NVLS, NVLSTree. NVLS needs NVLink SHARP
 *   and CollNet a CollNet plugin, which this "machine" has neither of. A collective left with no algorithm it
 *   can run fails with ncclInvalidUsage.
 * - On a non-blocking communicator (config.blocking = 0) an error is sticky: ncclCommGetAsyncError reports it
 *   from then on (nccl.h: "ncclCommGetAsyncError ... returns the asynchronous error").
 * - ncclCommFinalize flushes and leaves the peers: on a non-blocking communicator it returns ncclInProgress
 *   until every rank has finalized. ncclCommDestroy without a completed finalize finalizes first, blocking:
 *   with a peer gone it never returns (here: FAKE_DEADLOCK_S, then "ncclCommDestroy deadlocked" is logged).
 * - cudaFree synchronises the device: it waits for every running kernel, so behind a kernel waiting on a dead
 *   peer it never returns (here: "cudaFree deadlocked" is logged).
 * - On a non-blocking communicator, a collective called outside a group, and ncclGroupEnd, may return
 *   ncclInProgress while NCCL still enqueues; "the application must then query ncclCommGetAsyncError until it
 *   no longer returns ncclInProgress" before the next call on that communicator (nccl.h; the user guide's
 *   "Fault Tolerance"). Here they always do, for LAUNCH_POLLS polls, and a call made before is refused
 *   (ncclInvalidUsage, "called while ncclInProgress" logged).
 * - Sends and receives (fake_collectives.c says how they are modelled): a send waits, past the per-peer buffer
 *   (NCCL_BUFFSIZE; FAKE_P2P_BUFFER_BYTES here), for its receive; a receive of another count than its send's is
 *   an asynchronous ncclInvalidUsage.
 * - ncclCommRevoke (2.27; nccl.h: "stops all in-flight operations and marks communicator state as
 *   ncclInProgress. The state will change to ncclSuccess when the communicator is quiescent"): revokeFlags must
 *   be NCCL_REVOKE_DEFAULT (0), a second revoke is ncclInvalidArgument, and on a revoked communicator every
 *   collective, send/recv and ncclCommFinalize is ncclInvalidUsage; it stays the parent of a shrink, and destroy
 *   or abort free it.
 * - ncclCommShrink (2.27): only the ranks that remain call it, each with the same ascending list of the ranks
 *   to exclude (a caller in it, or a rank out of range, is ncclInvalidArgument); NCCL_SHRINK_DEFAULT needs a
 *   parent with no work in flight or one revoked (here: work in flight or a recorded error on a parent never
 *   revoked is ncclInvalidUsage, where the real library would hang), NCCL_SHRINK_ABORT stops that work first;
 *   other flags are ncclInvalidArgument. The new communicator numbers the remaining ranks in their order, takes
 *   the parent's configuration where config is NULL (non-blocking: ncclInProgress until ready), and is
 *   independent of the parent. -DFAKE_NCCL_NO_SHRINK builds a library from before 2.27, without either. */
enum { ALGO_TREE = 1, ALGO_RING = 2, ALGO_COLLNET_DIRECT = 4, ALGO_COLLNET_CHAIN = 8, ALGO_NVLS = 16,
       ALGO_NVLS_TREE = 32, ALGO_PAT = 64, ALGO_ALL = 127 };
static const struct { const char *name; unsigned bit; } algorithm_names[] = {
    {"Tree", ALGO_TREE}, {"Ring", ALGO_RING}, {"CollNetDirect", ALGO_COLLNET_DIRECT},
    {"CollNetChain", ALGO_COLLNET_CHAIN}, {"NVLS", ALGO_NVLS}, {"NVLSTree", ALGO_NVLS_TREE}, {"PAT", ALGO_PAT}};
#define ALGO_RUNNABLE_HERE (ALGO_TREE | ALGO_RING | ALGO_PAT)

/* NCCL_ALGO: a comma-separated list of algorithms, or "^" and the ones to exclude; unset: all. */
static unsigned parse_algorithms(const char *setting)
{
    if (!setting || !*setting)
        return ALGO_ALL;
    int exclude = setting[0] == '^';
    unsigned bits = 0;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", setting + exclude);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        for (size_t i = 0; i < sizeof algorithm_names / sizeof algorithm_names[0]; i++)
            if (strcasecmp(tok, algorithm_names[i].name) == 0)
                bits |= algorithm_names[i].bit;
    return exclude ? ALGO_ALL & ~bits : bits;
}

/* The algorithms each collective (fake_kind) can run. */
static unsigned collective_algorithms(int kind)
{
    switch (kind) {
    case FAKE_ALL_REDUCE:
        return ALGO_RING | ALGO_TREE | ALGO_COLLNET_DIRECT | ALGO_COLLNET_CHAIN | ALGO_NVLS | ALGO_NVLS_TREE;
    case FAKE_ALL_GATHER:
    case FAKE_REDUCE_SCATTER:
        return ALGO_RING | ALGO_PAT | ALGO_NVLS | ALGO_COLLNET_DIRECT;
    default:
        return ALGO_RING;
    }
}

enum { LAUNCH_POLLS = 2 };

/* The communicators called inside the current group (per thread, as NCCL's groups are): each is "in
 * progress" after ncclGroupEnd. */
static _Thread_local int group_depth;
static _Thread_local fake_vendor_comm_t *group_comms[64];
static _Thread_local int group_comm_count;

typedef struct { char internal[128]; } unique_id_t;
typedef struct {
    size_t size;
    unsigned int magic, version;
    int blocking;
} config_head_t;
typedef fake_vendor_comm_t comm_t;

static const char *const result_strings[] = {"no error", "unhandled cuda error", "unhandled system error",
                                              "internal error", "invalid argument", "invalid usage",
                                              "remote process exited or there was a network error",
                                              "NCCL operation in progress", "timeout"};

EXPORT const char *ncclGetErrorString(int r)
{
    return (unsigned)r < sizeof result_strings / sizeof result_strings[0] ? result_strings[r] : "unknown result";
}

EXPORT const char *ncclGetLastError(comm_t *comm)
{
    (void)comm;
    return getenv("FAKE_COLL_FAIL") ? "fake nccl: error injected by FAKE_COLL_FAIL" : "";
}

EXPORT int ncclGetVersion(int *version)
{
    *version = 22304;
    return SUCCESS;
}

EXPORT int ncclGetUniqueId(unique_id_t *id)
{
    int injected = fake_injected("ncclGetUniqueId");
    if (injected)
        return injected;
    memset(id, 0, sizeof *id);
    fake_new_id(id->internal, sizeof id->internal);
    return SUCCESS;
}

EXPORT int ncclCommInitRankConfig(comm_t **out, int nranks, unique_id_t id, int rank, config_head_t *config)
{
    const char *algo = getenv("NCCL_ALGO");
    fake_log("ncclCommInitRankConfig rank=%d nranks=%d blocking=%d version=%u magic=%#x algo=%s", rank, nranks,
             config->blocking, config->version, config->magic, algo ? algo : "");
    int injected = fake_injected("ncclCommInitRankConfig");
    if (injected)
        return injected;
    if (config->magic != 0xcafebeef || config->version < 21400 || rank < 0 || rank >= nranks)
        return INVALID_ARGUMENT;
    *out = fake_vendor_comm_new(id.internal, rank, nranks, INVALID_USAGE);
    (*out)->device = thread_current_device(NULL) < 0 ? 0 : thread_current_device(NULL);
    (*out)->algorithms = parse_algorithms(algo);
    (*out)->blocking = config->blocking;
    return config->blocking == 0 ? IN_PROGRESS : SUCCESS;
}

static int finalize_busy(void *c)
{
    return fake_stream_busy(&((comm_t *)c)->finalize_stream);
}

/* A call on c: refused while a non-blocking call of c is still in progress (see the rules above). */
static int busy_launching(comm_t *c, const char *name)
{
    if (!c->launching)
        return 0;
    fake_log("%s rank=%d called while ncclInProgress: ncclInvalidUsage", name, c->rank);
    return 1;
}

/* A call on a revoked communicator: refused (see the rules above). */
static int revoked(comm_t *c, const char *name)
{
    if (c->revoked)
        fake_log("%s rank=%d called on a revoked communicator: ncclInvalidUsage", name, c->rank);
    return c->revoked;
}

/* What every launch of c checks first: revoked, a sticky error, a non-blocking call still in progress (the
 * result to return), else 0. */
static int launch_refusal(comm_t *c, const char *name)
{
    if (revoked(c, name))
        return INVALID_USAGE;
    if (c->sticky)
        return c->sticky;
    return busy_launching(c, name) ? INVALID_USAGE : 0;
}

/* A call that enqueued work on c: on a non-blocking communicator, "in progress" outside a group, and the
 * group's end inside one. */
static int launched(comm_t *c)
{
    if (c->blocking)
        return SUCCESS;
    if (group_depth > 0) {
        int known = 0;
        for (int i = 0; i < group_comm_count; i++)
            known |= group_comms[i] == c;
        if (!known && group_comm_count < (int)(sizeof group_comms / sizeof group_comms[0]))
            group_comms[group_comm_count++] = c;
        return SUCCESS;
    }
    c->launching = LAUNCH_POLLS;
    return IN_PROGRESS;
}

EXPORT int ncclCommGetAsyncError(comm_t *c, int *state)
{
    if (c->launching > 0 && !c->sticky && !fake_vendor_async_error(c)) {
        c->launching--;
        *state = IN_PROGRESS;
        return SUCCESS;
    }
    *state = !fake_comm_ready(c->fake) ? IN_PROGRESS
             : c->sticky               ? c->sticky
             : fake_vendor_async_error(c) ? fake_vendor_async_error(c)
             : c->finalizing && finalize_busy(c) ? IN_PROGRESS
                                                 : SUCCESS;
    return SUCCESS;
}

EXPORT int ncclCommFinalize(comm_t *c)
{
    fake_log("ncclCommFinalize rank=%d", c->rank);
    if (c->revoked)
        return INVALID_USAGE;
    if (c->sticky)
        return c->sticky;
    c->finalizing = 1;
    fake_stream_set_flags(&c->finalize_stream, FAKE_STREAM_NON_BLOCKING); /* NCCL's own, not the legacy's */
    fake_comm_enqueue(c->fake, FAKE_BARRIER, NULL, NULL, 0, FAKE_U8, 0, -1, &c->finalize_stream, 0);
    if (c->blocking)
        return fake_wait_or_deadlock(finalize_busy, c, "ncclCommFinalize") ? INVALID_USAGE : SUCCESS;
    return IN_PROGRESS;
}

#ifndef FAKE_NCCL_NO_SHRINK
enum { SHRINK_DEFAULT = 0, SHRINK_ABORT = 1 };

EXPORT int ncclCommRevoke(comm_t *c, int flags)
{
    fake_log("ncclCommRevoke rank=%d flags=%d", c->rank, flags);
    if (flags != 0 || c->revoked)
        return INVALID_ARGUMENT;
    fake_comm_cancel(c->fake);
    c->revoked = 1;
    c->finalizing = 0;
    if (c->blocking)
        return SUCCESS;
    c->launching = LAUNCH_POLLS;
    return IN_PROGRESS;
}

EXPORT int ncclCommShrink(comm_t *c, int *exclude, int n, comm_t **out, config_head_t *config, int flags)
{
    char list[256] = "";
    for (int i = 0, at = 0; i < n && exclude && at < (int)sizeof list - 12; i++)
        at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", i ? "," : "", exclude[i]);
    fake_log("ncclCommShrink rank=%d exclude=%s flags=%d config=%s", c->rank, list, flags, config ? "set" : "null");
    int injected = fake_injected("ncclCommShrink");
    if (injected)
        return injected;
    if (busy_launching(c, "ncclCommShrink"))
        return INVALID_USAGE;
    if ((flags != SHRINK_DEFAULT && flags != SHRINK_ABORT) || n < 0 || n >= c->nranks || (n && !exclude))
        return INVALID_ARGUMENT;
    int below = 0;
    for (int i = 0; i < n; i++) {
        if (exclude[i] < 0 || exclude[i] >= c->nranks || exclude[i] == c->rank || (i && exclude[i] <= exclude[i - 1]))
            return INVALID_ARGUMENT;
        below += exclude[i] < c->rank;
    }
    if (flags == SHRINK_DEFAULT && !c->revoked &&
        (fake_comm_busy(c->fake) || c->sticky || fake_vendor_async_error(c))) {
        fake_log("ncclCommShrink rank=%d: NCCL_SHRINK_DEFAULT with work in flight: ncclInvalidUsage", c->rank);
        return INVALID_USAGE;
    }
    if (flags == SHRINK_ABORT)
        fake_comm_cancel(c->fake);
    char id[160];
    snprintf(id, sizeof id, "%.80s.s%d-%.40s", fake_comm_id(c->fake), c->shrinks++, list);
    *out = fake_vendor_comm_new(id, c->rank - below, c->nranks - n, INVALID_USAGE);
    (*out)->algorithms = c->algorithms;
    (*out)->device = c->device;
    (*out)->blocking = config ? config->blocking : c->blocking;
    return (*out)->blocking == 0 ? IN_PROGRESS : SUCCESS;
}
#endif

EXPORT int ncclCommAbort(comm_t *c)
{
    fake_vendor_comm_end(c, "ncclCommAbort", 1);
    return SUCCESS;
}

EXPORT int ncclCommDestroy(comm_t *c)
{
    if (c->revoked) { /* its work was stopped: nothing to finish */
        fake_vendor_comm_end(c, "ncclCommDestroy", 1);
        return SUCCESS;
    }
    if (!c->finalizing) { /* finalizes first, blocking: waits for every peer */
        c->finalizing = 1;
        fake_stream_set_flags(&c->finalize_stream, FAKE_STREAM_NON_BLOCKING);
        fake_comm_enqueue(c->fake, FAKE_BARRIER, NULL, NULL, 0, FAKE_U8, 0, -1, &c->finalize_stream, 0);
    }
    if (fake_wait_or_deadlock(finalize_busy, c, "ncclCommDestroy")) {
        fake_vendor_comm_end(c, "ncclCommDestroy (after a deadlock)", 1);
        return SUCCESS;
    }
    fake_vendor_comm_end(c, "ncclCommDestroy", 0);
    return SUCCESS;
}

/* The device current on the thread that created it (as NCCL's), or FAKE_COLL_DEVICE. */
EXPORT int ncclCommCuDevice(comm_t *c, int *device)
{
    const char *d = getenv("FAKE_COLL_DEVICE");
    *device = d ? atoi(d) : c->device;
    return SUCCESS;
}

/* ncclDataType_t -> fake dtype (NCCL: int8 uint8 int32 uint32 int64 uint64 f16 f32 f64 bf16). */
static const int dtypes[] = {FAKE_I8, FAKE_U8, FAKE_I32, FAKE_U32, FAKE_I64, FAKE_U64, FAKE_F16, FAKE_F32, FAKE_F64,
                             FAKE_BF16};
/* ncclRedOp_t -> fake op (NCCL: sum prod max min avg). */
static const int ops[] = {FAKE_SUM, FAKE_PROD, FAKE_MAX, FAKE_MIN, FAKE_AVG};

static const fake_vendor_t nccl = {dtypes, sizeof dtypes / sizeof dtypes[0], ops, sizeof ops / sizeof ops[0],
                                   INVALID_ARGUMENT};

/* The checks NCCL makes before it enqueues: a sticky error first, then an algorithm the collective can run. */
static int collective(const char *name, int kind, const void *send, void *recv, size_t count, int dtype, int op,
                      int root, comm_t *c, void *stream)
{
    int refusal = launch_refusal(c, name);
    if (refusal)
        return refusal;
    if (!(c->algorithms & collective_algorithms(kind) & ALGO_RUNNABLE_HERE)) {
        fake_log("%s rank=%d: no algorithm NCCL_ALGO allows can run it: ncclInvalidUsage", name, c->rank);
        if (!c->blocking)
            c->sticky = INVALID_USAGE;
        return INVALID_USAGE;
    }
    int r = fake_vendor_collective(&nccl, name, kind, send, recv, count, dtype, op, root, c, stream);
    return r == SUCCESS ? launched(c) : r;
}

EXPORT int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, comm_t *c, void *stream)
{
    return collective("ncclAllReduce", FAKE_ALL_REDUCE, send, recv, count, dtype, op, -1, c, stream);
}

EXPORT int ncclReduceScatter(const void *send, void *recv, size_t count, int dtype, int op, comm_t *c, void *stream)
{
    return collective("ncclReduceScatter", FAKE_REDUCE_SCATTER, send, recv, count, dtype, op, -1, c,
                                  stream);
}

EXPORT int ncclAllGather(const void *send, void *recv, size_t count, int dtype, comm_t *c, void *stream)
{
    return collective("ncclAllGather", FAKE_ALL_GATHER, send, recv, count, dtype, 0, -1, c, stream);
}

EXPORT int ncclBroadcast(const void *send, void *recv, size_t count, int dtype, int root, comm_t *c, void *stream)
{
    return collective("ncclBroadcast", FAKE_BROADCAST, send, recv, count, dtype, 0, root, c, stream);
}

EXPORT int ncclReduce(const void *send, void *recv, size_t count, int dtype, int op, int root, comm_t *c,
                      void *stream)
{
    return collective("ncclReduce", FAKE_REDUCE, send, recv, count, dtype, op, root, c, stream);
}

static int p2p(const char *name, int kind, const void *send, void *recv, size_t count, int dtype, int peer,
               comm_t *c, void *stream)
{
    fake_log("%s rank=%d peer=%d count=%zu dtype=%d stream=%#lx", name, c->rank, peer, count, dtype,
             (unsigned long)(uintptr_t)stream);
    int injected = fake_injected(name);
    if (injected)
        return injected;
    int refusal = launch_refusal(c, name);
    if (refusal)
        return refusal;
    if ((unsigned)dtype >= sizeof dtypes / sizeof dtypes[0] || peer < 0 || peer >= c->nranks || peer == c->rank)
        return INVALID_ARGUMENT;
    fake_comm_enqueue(c->fake, kind, send, recv, count, dtypes[dtype], 0, peer, stream, fake_injected("async"));
    return launched(c);
}

EXPORT int ncclSend(const void *send, size_t count, int dtype, int peer, comm_t *c, void *stream)
{
    return p2p("ncclSend", FAKE_SEND, send, NULL, count, dtype, peer, c, stream);
}

EXPORT int ncclRecv(void *recv, size_t count, int dtype, int peer, comm_t *c, void *stream)
{
    return p2p("ncclRecv", FAKE_RECV, NULL, recv, count, dtype, peer, c, stream);
}

EXPORT int ncclGroupStart(void)
{
    group_depth++;
    fake_group_start();
    return SUCCESS;
}

EXPORT int ncclGroupEnd(void)
{
    fake_group_end();
    int injected = fake_injected("ncclGroupEnd");
    if (group_depth == 0 || --group_depth > 0)
        return injected;
    if (injected) {
        group_comm_count = 0;
        return injected;
    }
    int in_progress = 0;
    for (int i = 0; i < group_comm_count; i++) {
        group_comms[i]->launching = LAUNCH_POLLS;
        in_progress = 1;
    }
    group_comm_count = 0;
    return in_progress ? IN_PROGRESS : SUCCESS;
}

/* ---- the CUDA runtime pieces pycoll uses ----
 *
 * Streams run their work asynchronously, in order, each on a thread of its own (fake_collectives.c), with CUDA's
 * legacy default stream: NULL and cudaStreamLegacy (0x1) synchronise with every blocking stream, a stream made
 * with cudaStreamNonBlocking (1) does not. cudaMemcpy is synchronous: queued on the legacy stream, so it waits
 * for that stream's earlier work (and, through it, the blocking streams'), never for a non-blocking stream's;
 * cudaMemcpyAsync is queued on its stream -- a pageable host source is read when the call is made, and a copy to
 * pageable host memory returns once done, as the real runtime stages them; memory from cudaMallocHost is pinned:
 * copies to and from it stay asynchronous. The "device" is host memory, so the direction is the `kind` given
 * (cudaMemcpyDefault, 4: device to device).
 *
 * Every thread has a current device: none until it calls cudaSetDevice (the process's main thread starts with
 * FAKE_CUDA_CURRENT_DEVICE where that is set, as if the framework had set it). A call that needs a context on a
 * thread with none makes device 0's primary context current, as the real runtime does -- an extra context on
 * GPU 0 on a real node -- and logs "<call>: no device set on this thread" so a test sees it. */

static _Thread_local int thread_device = -2; /* -2: not looked at yet; -1: none */

static int device_count(void)
{
    const char *n = getenv("FAKE_CUDA_DEVICE_COUNT");
    return n ? atoi(n) : 1;
}

/* This thread's device; call: a call that needs a context (then none current is logged and becomes 0). */
static int thread_current_device(const char *call)
{
    if (thread_device == -2) {
        const char *d = getenv("FAKE_CUDA_CURRENT_DEVICE");
        thread_device = d && syscall(SYS_gettid) == getpid() ? atoi(d) : -1;
    }
    if (thread_device < 0 && call) {
        fake_log("%s: no device set on this thread (tid %ld): the runtime made device 0's primary context current",
                 call, (long)syscall(SYS_gettid));
        thread_device = 0;
    }
    return thread_device;
}

__attribute__((constructor)) static void cuda_streams(void)
{
    fake_legacy_default_stream = 1;
}

/* One device, or FAKE_CUDA_DEVICE_COUNT (0: the runtime's answer on a machine without a GPU). */
EXPORT int cudaGetDeviceCount(int *count)
{
    *count = device_count();
    return *count ? 0 : 100; /* cudaErrorNoDevice */
}

/* The device this thread uses: the one it set, else 0 (what a thread that never set one gets). */
EXPORT int cudaGetDevice(int *device)
{
    int d = thread_current_device(NULL);
    *device = d < 0 ? 0 : d;
    return 0;
}

EXPORT int cudaSetDevice(int device)
{
    fake_log("cudaSetDevice device=%d tid=%ld", device, (long)syscall(SYS_gettid));
    int injected = fake_injected("cudaSetDevice");
    if (injected)
        return injected;
    if (device < 0 || device >= device_count())
        return 101; /* cudaErrorInvalidDevice */
    thread_current_device(NULL);
    thread_device = device;
    return 0;
}

/* How many times this process called cudaStreamQuery, cudaEventQuery and cudaStreamSynchronize, for tests of
 * what the host waits on (fake_cuda_wait_calls(0, 1, 2)); 3: the cudaEventQuery calls that found their event
 * complete -- one per host wait that ended, however often it polled. */
static _Atomic long long wait_calls[4];

EXPORT long long fake_cuda_wait_calls(int which)
{
    return which >= 0 && which < 4 ? wait_calls[which] : -1;
}

/* Logs how late the caller noticed a completion ("cudaStreamQuery noticed_after_us=N"): what polling costs. */
EXPORT int cudaStreamQuery(void *stream)
{
    wait_calls[0]++;
    thread_current_device("cudaStreamQuery");
    if (fake_stream_busy(stream))
        return 600;
    long long idle = fake_stream_idle_for_ns(stream);
    if (idle)
        fake_log("cudaStreamQuery noticed_after_us=%lld", idle / 1000);
    return 0;
}

EXPORT int cudaStreamCreateWithFlags(void **stream, unsigned flags)
{
    thread_current_device("cudaStreamCreateWithFlags");
    *stream = malloc(1);
    if (!*stream)
        return 2;
    fake_stream_set_flags(*stream, flags & 1 ? FAKE_STREAM_NON_BLOCKING : 0);
    return 0;
}

EXPORT int cudaStreamCreate(void **stream)
{
    return cudaStreamCreateWithFlags(stream, 0);
}

EXPORT int cudaStreamDestroy(void *stream)
{
    (void)stream; /* kept: its slot's counts stay valid for events recorded on it */
    return 0;
}

EXPORT int cudaStreamSynchronize(void *stream)
{
    wait_calls[2]++;
    thread_current_device("cudaStreamSynchronize");
    return fake_stream_sync(stream, "cudaStreamSynchronize") ? 6 : 0; /* cudaErrorLaunchTimeout */
}

/* Events: complete once the work queued on their stream before cudaEventRecord has (cudaErrorNotReady, 600,
 * before). "cudaEventRecord" is logged, so a test can see that a call enqueued instead of waiting. */
EXPORT int cudaEventCreateWithFlags(fake_event_t **event, unsigned flags)
{
    (void)flags;
    thread_current_device("cudaEventCreateWithFlags");
    *event = fake_event_new();
    return *event ? 0 : 2;
}

EXPORT int cudaEventRecord(fake_event_t *event, void *stream)
{
    thread_current_device("cudaEventRecord");
    fake_event_record(event, stream, "cudaEventRecord");
    return 0;
}

/* Logs how late the caller noticed a completion, as cudaStreamQuery does, where the event's stream went idle
 * with it. */
EXPORT int cudaEventQuery(fake_event_t *event)
{
    wait_calls[1]++;
    thread_current_device("cudaEventQuery");
    if (!fake_event_done(event))
        return 600;
    wait_calls[3]++;
    long long idle = fake_stream_idle_for_ns(event->stream);
    if (idle)
        fake_log("cudaEventQuery noticed_after_us=%lld", idle / 1000);
    return 0;
}

EXPORT int cudaEventSynchronize(fake_event_t *event)
{
    thread_current_device("cudaEventSynchronize");
    return event->mark && fake_wait_mark(event->stream, event->mark, "cudaEventSynchronize") ? 6 : 0;
}

/* The stream's later work waits for the event's (a marker queued on stream). */
EXPORT int cudaStreamWaitEvent(void *stream, fake_event_t *event, unsigned flags)
{
    (void)flags;
    thread_current_device("cudaStreamWaitEvent");
    fake_log("cudaStreamWaitEvent stream=%#lx on=%#lx", (unsigned long)(uintptr_t)stream,
             (unsigned long)(uintptr_t)event->stream);
    return fake_stream_submit(stream, NULL, NULL, event->stream, event->mark) < 0 ? 2 : 0;
}

EXPORT int cudaEventDestroy(fake_event_t *event)
{
    free(event);
    return 0;
}

EXPORT int cudaMalloc(void **ptr, size_t size)
{
    thread_current_device("cudaMalloc");
    *ptr = malloc(size);
    return *ptr ? 0 : 2;
}

static int device_busy(void *unused)
{
    (void)unused;
    return fake_any_stream_busy();
}

EXPORT int cudaFree(void *ptr)
{
    thread_current_device("cudaFree");
    fake_wait_or_deadlock(device_busy, NULL, "cudaFree");
    free(ptr);
    return 0;
}

EXPORT int cudaMemset(void *ptr, int value, size_t count)
{
    thread_current_device("cudaMemset");
    memset(ptr, value, count);
    return 0;
}

/* Pinned host memory (cudaMallocHost): copies to and from it are not staged. */
enum { MAX_PINNED = 32 };
static struct { char *start; size_t bytes; } pinned[MAX_PINNED];
static pthread_mutex_t pinned_lock = PTHREAD_MUTEX_INITIALIZER;

static int is_pinned(const void *ptr)
{
    int found = 0;
    pthread_mutex_lock(&pinned_lock);
    for (int i = 0; i < MAX_PINNED && !found; i++)
        found = pinned[i].start && (const char *)ptr >= pinned[i].start &&
                (const char *)ptr < pinned[i].start + pinned[i].bytes;
    pthread_mutex_unlock(&pinned_lock);
    return found;
}

EXPORT int cudaMallocHost(void **ptr, size_t size)
{
    thread_current_device("cudaMallocHost");
    *ptr = malloc(size ? size : 1);
    if (!*ptr)
        return 2;
    pthread_mutex_lock(&pinned_lock);
    for (int i = 0; i < MAX_PINNED; i++)
        if (!pinned[i].start) {
            pinned[i].start = *ptr;
            pinned[i].bytes = size;
            break;
        }
    pthread_mutex_unlock(&pinned_lock);
    return 0;
}

EXPORT int cudaFreeHost(void *ptr)
{
    pthread_mutex_lock(&pinned_lock);
    for (int i = 0; i < MAX_PINNED; i++)
        if (pinned[i].start == ptr)
            pinned[i].start = NULL;
    pthread_mutex_unlock(&pinned_lock);
    free(ptr);
    return 0;
}

enum { H2D = 1, D2H = 2 };

EXPORT int cudaMemcpyAsync(void *dst, const void *src, size_t count, int kind, void *stream)
{
    thread_current_device("cudaMemcpyAsync");
    if (kind < 0 || kind > 4)
        return 21; /* cudaErrorInvalidMemcpyDirection */
    long long mark = fake_copy_async(stream, dst, src, count, kind == H2D && !is_pinned(src));
    if (mark < 0)
        return 2;
    if (kind == D2H && !is_pinned(dst) && fake_wait_mark(stream, mark, "cudaMemcpyAsync"))
        return 6;
    return 0;
}

/* Synchronous: queued on the legacy stream, and returns once done. */
EXPORT int cudaMemcpy(void *dst, const void *src, size_t count, int kind)
{
    thread_current_device("cudaMemcpy");
    if (kind < 0 || kind > 4)
        return 21; /* cudaErrorInvalidMemcpyDirection */
    long long mark = fake_copy_async(NULL, dst, src, count, 0);
    if (mark < 0)
        return 2;
    return fake_wait_mark(NULL, mark, "cudaMemcpy") ? 6 : 0;
}

EXPORT const char *cudaGetErrorString(int error)
{
    return error == 0 ? "no error" : error == 600 ? "device not ready" : "fake cuda error";
}

/* The fake's "device" memory is host memory (cudaMemoryTypeUnregistered, 0); FAKE_CUDA_MEMORY_TYPE=2 makes every
 * pointer device memory, as a real GPU's would be. */
EXPORT int cudaPointerGetAttributes(int *attributes, const void *ptr)
{
    (void)ptr;
    const char *type = getenv("FAKE_CUDA_MEMORY_TYPE");
    attributes[0] = type ? atoi(type) : 0;
    return 0;
}
