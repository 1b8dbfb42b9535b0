/* Inside the vendor family: the built-in vendors (each filled in its own backends/<vendor>/ directory), the
 * communicator, and the helpers that vendor_comm.c (lifecycle, collectives) and vendor_p2p.c (send/recv, the
 * transport) share. */
#ifndef PYCOLL_BACKENDS_VENDOR_COMMON_H
#define PYCOLL_BACKENDS_VENDOR_COMMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "vendor_ops.h"

/* The address of a vendor struct entry as a symbol's slot. */
#define VENDOR_SLOT(entry) ((void (**)(void))&(entry))
/* A library a vendor or pycoll loads at run time (pycoll_vendor_library_t), not loaded yet: what it is in messages,
 * what a missing symbol means (or NULL), and its array of symbols, counted here. */
#define VENDOR_LIBRARY(what, requirement, symbols)                                                               \
    {(what), (requirement), (symbols), (int32_t)(sizeof(symbols) / sizeof((symbols)[0])), NULL}

/* How a vendor's results read in messages and what they mean to the caller (vendor_ops.h): the mapping, the
 * array of result names, counted here, and the word before a result's number. */
#define VENDOR_RESULTS(map, names, label)                                                                       \
    .status_of = (map), .result_names = (names),                                                                \
    .num_result_names = (int32_t)(sizeof(names) / sizeof((names)[0])), .code_label = (label)

/* The symbols both vendors name alike -- their prefix ("nccl", "Hccl") and the same name -- and whose
 * signatures fill the same entries of the vendor struct V, so that one list serves both symbol tables.
 * broadcast_slot: where the vendor's Broadcast goes (NCCL's takes a send and a receive buffer, so its goes
 * to an adapter). */
#define VENDOR_SHARED_SYMBOLS(prefix, V, broadcast_slot)                                                   \
    {PYCOLL_VENDOR_CALL_NONE, prefix "GetErrorString", VENDOR_SLOT(V.error_string)},                         \
        VENDOR_COLLECTIVE_SYMBOLS(prefix, V, V.destroy, broadcast_slot)
/* The same without the error string (optional in HCCL: a weak symbol older CANN lacks); destroy_slot: where
 * the vendor's CommDestroy goes (HCCL's to an adapter that first sets the thread's ACL context). */
#define VENDOR_COLLECTIVE_SYMBOLS(prefix, V, destroy_slot, broadcast_slot)                                  \
    {PYCOLL_VENDOR_CALL_NONE, prefix "CommDestroy", VENDOR_SLOT(destroy_slot)},                              \
        {PYCOLL_VENDOR_CALL_ALL_REDUCE, prefix "AllReduce", VENDOR_SLOT(V.all_reduce)},                      \
        {PYCOLL_VENDOR_CALL_REDUCE_SCATTER, prefix "ReduceScatter", VENDOR_SLOT(V.reduce_scatter)},          \
        {PYCOLL_VENDOR_CALL_ALL_GATHER, prefix "AllGather", VENDOR_SLOT(V.all_gather)},                      \
        {PYCOLL_VENDOR_CALL_BROADCAST, prefix "Broadcast", VENDOR_SLOT(broadcast_slot)},                     \
        {PYCOLL_VENDOR_CALL_REDUCE, prefix "Reduce", VENDOR_SLOT(V.reduce)}

extern pycoll_vendor_t pycoll_nccl_vendor;
extern pycoll_vendor_t pycoll_hccl_vendor;

/* The vendor struct's entries take counts as uint64_t where the vendors' own take size_t. */
_Static_assert(sizeof(size_t) == sizeof(uint64_t), "pycoll's vendor backends need a 64-bit host");

struct pycoll_vendor_comm {
    /* rank, size and the first error (status, error), recorded with pycoll_p2p_fail as every transport does;
     * also the transport pycoll's own algorithms run over (vendor_p2p.c). First, so a p2p is its comm. */
    pycoll_p2p_t state;
    const pycoll_vendor_t *v;
    void *comm;        /* the vendor's communicator; NULL once aborted */
    int32_t device;
    int64_t timeout_ns;
    int abandoned;     /* its destroy/abort missed its deadline and runs on alone: device memory is left as is */
    void *scratch;     /* one device word for a barrier the vendor lacks */
    void *own_stream;  /* the vendor's stream_create: for calls given no stream */
    void *reduce_scratch; /* where non-roots' reduce writes, for a vendor that writes there (HCCL) */
    size_t reduce_scratch_bytes;
    /* vendor_streams.c: the stream the vendor's collectives run on (NULL until the first, or where the vendor
     * has none: then they run on the caller's), the event that orders it after the caller's stream, and the
     * one a blocking collective's host wait looks at; stream_order_off once making them failed. */
    void *coll_stream, *order_event, *end_event;
    int stream_order_off;
    void *stream;      /* where the transport's sends and receives go */
    pycoll_request_t *posted, *posted_tail; /* posted, not yet issued: the next wait issues them as one group */
    /* Every call on the communicator holds lock (recursive: a transport wait inside a call takes it again), and
     * so does its watchdog (vendor_async.c) while it looks at the pending works, so an abort never runs under a
     * call. */
    pthread_mutex_t lock;
    int async;                    /* pycoll_vendor_comm_set_async: collectives return once enqueued */
    struct pycoll_vendor_work *pending, *last_work; /* the watchdog's list (oldest first); the last enqueued */
    pthread_t watchdog;
    int watchdog_started, watchdog_stop;
    pthread_cond_t watchdog_wake;  /* new work, or stop */
    /* pycoll_vendor_comm_request_abort, from any thread: abort_state goes 0 -> 1 (one writer fills the rest)
     * -> 2 (ready; every wait loop of a call, and the watchdog, then fails the communicator with it). */
    atomic_int abort_state;
    int32_t abort_rank;
    pycoll_status_t abort_status; /* PYCOLL_ERR_PEER_FAILURE, or PYCOLL_ERR_REVOKED (pycoll_vendor_comm_revoke) */
    char abort_reason[448];
    int revoked; /* stopped by the vendor's revoke: no work in flight, still the parent of a shrink */
};

/* Whether the loaded vendor has what a PYCOLL_VENDOR_HAS_* bit names. */
int vendor_has(const pycoll_vendor_t *v, int32_t bit);
/* A communicator of the family not started yet (NULL without memory), and its start: after the vendor's call
 * that makes its comm (init, shrink) returned r, waited for until ready (the deadline aborts), its device and
 * stream found; c itself, or NULL with *status and error set (c destroyed). */
pycoll_vendor_comm_t *vendor_comm_alloc(const pycoll_vendor_t *v, int32_t rank, int32_t size, int64_t timeout_ns);
pycoll_vendor_comm_t *vendor_comm_started(pycoll_vendor_comm_t *c, const char *what, int r, int64_t deadline,
                                          pycoll_status_t *status, char *error, size_t error_len);
/* An abort or revoke another thread requested, taken now (the communicator fails with it); PYCOLL_OK where none
 * is pending. Under c->lock. */
pycoll_status_t vendor_take_abort_request(pycoll_vendor_comm_t *c, const char *what);
/* Until a non-blocking vendor's communicator leaves "in progress"; the deadline aborts it. */
pycoll_status_t vendor_wait_ready(pycoll_vendor_comm_t *c, const char *what, int64_t deadline_ns);

/* The address of `name` in the loaded library lib, or NULL: for a symbol some versions of a library lack (a
 * weak symbol of older CANN), looked up after loading instead of being required by it. */
void (*vendor_optional_symbol(const pycoll_vendor_library_t *lib, const char *name))(void);
/* Stops the vendor's communicator now, also mid-collective: revoked where the vendor can (it stays the parent
 * of a shrink; c->revoked), else aborted on a thread of its own bounded by the timeout (at most 5 s; past it the
 * call is left to finish alone and c->abandoned is set). */
void vendor_abort_now(pycoll_vendor_comm_t *c);
/* dlopen path into lib and resolve every symbol into its slot (nothing when lib is already loaded); one lock for
 * every library pycoll loads at run time. */
pycoll_status_t vendor_library_open(pycoll_vendor_library_t *lib, const char *path, char *error, size_t error_len);

/* backends/cuda/cuda_kernels.c: the CUDA memory table with its kernels on `stream` for this thread, in the
 * context of buf's device, waiting no longer than p2p's deadline, or NULL (why says what is not loaded, or why
 * buf's device is unknown): NCCL's device_kernels. */
struct pycoll_memory_kernels;
const struct pycoll_memory_kernels *cuda_kernels_bind(const pycoll_p2p_t *p2p, void *stream, const void *buf,
                                                      char *why, size_t why_len);

/* For tests only (pycoll._bindings.vendor._set_test_device_kernels; in no installed header): a memory table
 * that serves every vendor's device memory in this process, in place of the vendor's device_kernels (NULL: the
 * vendor's again). The fake vendor libraries' "device" memory is host memory, so a test double of a device
 * table (tests/fakes/guarded_memory.c) can stand in for one there. */
PYCOLL_API void vendor_set_test_device_kernels(const struct pycoll_memory_kernels *table);

/* The name of the vendor's result r ("ncclRemoteError"), for messages. */
const char *vendor_result_name(const pycoll_vendor_t *v, int r);
/* The vendor's name of a call, for messages: the symbol that serves it. */
const char *vendor_call_name(const pycoll_vendor_t *v, pycoll_vendor_call_t call);
/* Breaks the communicator with a failed call's result, named and explained. */
pycoll_status_t vendor_fail_result(pycoll_vendor_comm_t *c, const char *what, int r);
/* A bad argument, refused before the vendor sees it: recorded, but the communicator stays usable. */
pycoll_status_t vendor_reject(pycoll_vendor_comm_t *c, pycoll_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The checks before every call: not broken, count >= 0, a dtype (and op, unless -1) the vendor has, root -1
 * (none) or a rank. The vendor's codes go to *vd and *vo (vo may be NULL). */
pycoll_status_t vendor_begin(pycoll_vendor_comm_t *c, int64_t count, pycoll_dtype_t dtype, int op, int32_t root,
                             int *vd, int *vo);
/* The vendor's answer to call `what`: a refusal (the communicator stays usable), a failure (it breaks), or
 * accepted -- then waited for until it has left "in progress" (enqueued), not for the device to run it. */
pycoll_status_t vendor_accepted(pycoll_vendor_comm_t *c, const char *what, int r, int64_t deadline);
/* After the vendor accepted (or is still enqueueing) call `what` with result r: wait for what it queued on
 * stream (vendor_wait_collective), within the deadline (then abort). */
pycoll_status_t vendor_finish(pycoll_vendor_comm_t *c, const char *what, int r, void *stream, int64_t deadline);
/* The deadline passed on `what`: abort, and the Timeout error recorded. */
pycoll_status_t vendor_abort_on_deadline(pycoll_vendor_comm_t *c, const char *what);
/* The vendor's asynchronous state: 1 in *in_progress while still in progress; an error it recorded, or an abort
 * requested from another thread (pycoll_vendor_comm_request_abort), breaks (and aborts) the communicator. */
pycoll_status_t vendor_poll_async(pycoll_vendor_comm_t *c, const char *what, int *in_progress);

/* Until the stream's work (event NULL) or the event's has completed, the vendor reports an asynchronous error,
 * or the deadline (then abort). */
pycoll_status_t vendor_wait_done(pycoll_vendor_comm_t *c, const char *what, void *stream, void *event,
                                 int64_t deadline_ns);

/* vendor_streams.c. The stream a collective called on `caller` runs on: the communicator's own, ordered after
 * the work queued on caller so far by an event, where the vendor has one (vendor_ops.h: comm_stream_create);
 * else caller. Under c->lock. */
void *vendor_collective_stream(pycoll_vendor_comm_t *c, void *caller);
/* After `what` was enqueued on run_on: the host waits for it (an event recorded behind it where the vendor has
 * events, else the stream), within the deadline. */
pycoll_status_t vendor_wait_collective(pycoll_vendor_comm_t *c, const char *what, void *run_on, int64_t deadline);
/* Orders stream after the collectives enqueued on the communicator's stream so far (none: nothing), so that
 * what runs on the caller's stream -- send/recv, pycoll's own schedules -- keeps the communicator's call order
 * behind an async collective. Takes c->lock. */
void vendor_join_collectives(pycoll_vendor_comm_t *c, void *stream);
/* Frees the stream and events (at teardown, once the vendor's communicator is gone). */
void vendor_streams_free(pycoll_vendor_comm_t *c);

/* vendor_async.c. The lock every call holds (vendor_comm_lock/unlock); the work of a call enqueued in async
 * mode: an event recorded on stream after it, watched until the deadline; stopping the watchdog (before
 * teardown) fails what is still pending with `why`. */
void vendor_comm_lock_init(pycoll_vendor_comm_t *c);
void vendor_comm_lock(pycoll_vendor_comm_t *c);
void vendor_comm_unlock(pycoll_vendor_comm_t *c);
/* host_visible: the host reads the collective's buffers (host memory), so only a host wait serves it. */
pycoll_status_t vendor_enqueued(pycoll_vendor_comm_t *c, const char *what, void *stream, int host_visible,
                                int64_t deadline);
void vendor_watchdog_stop(pycoll_vendor_comm_t *c);

#endif
