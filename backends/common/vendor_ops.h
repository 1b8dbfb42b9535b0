/* A vendor's table of entries, internal to libpycoll: each built-in vendor (backends/<vendor>/) fills one, and
 * the generic calls of pycoll/vendor.h (backends/common/) read it. It is compiled together with the code that
 * reads it and never loaded from outside libpycoll, so it has no layout version: a new entry is added where it
 * belongs, and every vendor is rebuilt with it. */
#ifndef PYCOLL_BACKENDS_VENDOR_OPS_H
#define PYCOLL_BACKENDS_VENDOR_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "pycoll/vendor.h"

struct pycoll_memory_kernels; /* kernels/memory_kernels.h */

/* The dtypes a vendor maps: int8 .. float64 (ids 0-7); no vendor has the complex ones. */
#define VENDOR_NUM_DTYPES 8

/* The vendor calls a message can name. */
typedef enum pycoll_vendor_call {
    PYCOLL_VENDOR_CALL_NONE = -1,
    PYCOLL_VENDOR_CALL_UNIQUE_ID,
    PYCOLL_VENDOR_CALL_INIT,
    PYCOLL_VENDOR_CALL_ASYNC_ERROR,
    PYCOLL_VENDOR_CALL_DEVICE,
    PYCOLL_VENDOR_CALL_ALL_REDUCE,
    PYCOLL_VENDOR_CALL_REDUCE_SCATTER,
    PYCOLL_VENDOR_CALL_ALL_GATHER,
    PYCOLL_VENDOR_CALL_BROADCAST,
    PYCOLL_VENDOR_CALL_REDUCE,
    PYCOLL_VENDOR_CALL_BARRIER,
    PYCOLL_VENDOR_CALL_SEND,
    PYCOLL_VENDOR_CALL_RECV,
    PYCOLL_VENDOR_CALL_GROUP_START,
    PYCOLL_VENDOR_CALL_GROUP_END,
    PYCOLL_VENDOR_CALL_STREAM_WAIT,
    PYCOLL_VENDOR_CALL_SCRATCH_ALLOC,
    PYCOLL_VENDOR_CALL_FINALIZE,
    PYCOLL_VENDOR_CALL_SHRINK,
    PYCOLL_VENDOR_CALL_REVOKE,
    PYCOLL_VENDOR_NUM_CALLS
} pycoll_vendor_call_t;


/* One symbol a vendor library exports: the call it serves (its name is the call's name in messages), and the
 * function pointer its address is stored in -- an entry of the vendor struct where the vendor's C signature is
 * the entry's, else a pointer of the backend's own that an adapter calls. */
typedef struct pycoll_vendor_symbol {
    pycoll_vendor_call_t call;
    const char *name;
    void (**slot)(void);
} pycoll_vendor_symbol_t;

typedef struct pycoll_vendor_library {
    const char *what;         /* "NCCL", "the CUDA runtime": named in messages */
    const char *requirement;  /* appended when a symbol is missing ("NCCL 2.14 or newer is needed"), or NULL */
    const pycoll_vendor_symbol_t *symbols;
    int32_t num_symbols;
    void *handle;             /* set by pycoll_vendor_load once the library and every symbol are loaded */
} pycoll_vendor_library_t;

/* A vendor: what differs between vendors is an entry here, never a test of which vendor it is in the generic
 * layer. pycoll_vendor_load fills the entries named by the libraries' symbols; the backend sets
 * the rest (adapters, the vendor's mapping of results). Entries are declared with the vendor's C ABI: results
 * and enums are ints, counts uint64_t (size_t on the 64-bit hosts pycoll supports), handles and streams
 * pointers; 0 is success. Entries marked optional may be NULL; what the generic layer does then is said beside
 * each. */
struct pycoll_vendor {
    const char *name;             /* "nccl": every message starts with it */
    int64_t unique_id_bytes;      /* <= PYCOLL_VENDOR_MAX_ID_BYTES */
    /* The result meaning "still running" (ncclInProgress) for non-blocking vendors; -1 where calls block. */
    int32_t in_progress;
    /* The vendor's code for each pycoll dtype and op; -1: the vendor has none (PYCOLL_ERR_UNSUPPORTED). */
    int32_t dtypes[VENDOR_NUM_DTYPES];
    int32_t ops[PYCOLL_NUM_OPS];
    const char *deadline_action;  /* what abort did, for the timeout message: "aborted", "destroyed" */
    /* The names of results 0 .. num_result_names-1 ("ncclRemoteError"), and the word before a result's number
     * in messages ("code", "HcclResult"). */
    const char *const *result_names;
    int32_t num_result_names;
    const char *code_label;
    /* The libraries, loaded in this order: the collectives, then the runtime that owns the streams. */
    int32_t num_libraries;
    pycoll_vendor_library_t libraries[2];

    pycoll_status_t (*status_of)(int result);   /* what a result means to the caller */
    const char *(*error_string)(int result);
    const char *(*last_error)(void *comm);      /* optional: the vendor's detail on the last failure */
    int (*library_version)(int *version);       /* optional (0): the vendor's version code, e.g. 22304 */

    int (*unique_id)(void *id);
    int (*comm_init)(void **comm, int32_t size, const void *id, int32_t rank);
    /* *state: 0, in_progress, or the error a running collective hit. */
    int (*async_error)(void *comm, int *state);
    int (*abort)(void *comm);     /* stop now, also mid-collective; frees comm */
    int (*destroy)(void *comm);   /* finish queued work, free comm */
    int (*device)(void *comm, int *device); /* optional (-1): the device the communicator runs on */

    int (*all_reduce)(const void *send, void *recv, uint64_t count, int dtype, int op, void *comm, void *stream);
    int (*reduce_scatter)(const void *send, void *recv, uint64_t recv_count, int dtype, int op, void *comm,
                          void *stream);
    int (*all_gather)(const void *send, void *recv, uint64_t send_count, int dtype, void *comm, void *stream);
    int (*broadcast)(void *buf, uint64_t count, int dtype, int root, void *comm, void *stream);
    int (*reduce)(const void *send, void *recv, uint64_t count, int dtype, int op, int root, void *comm,
                  void *stream);
    int (*barrier)(void *comm, void *stream);   /* optional: an all-reduce of one scratch word instead */
    /* Optional, all four or none (then send/recv return PYCOLL_ERR_UNSUPPORTED): point-to-point, grouped so
     * that a send and a receive in one group progress together. */
    int (*send)(const void *buf, uint64_t count, int dtype, int peer, void *comm, void *stream);
    int (*recv)(void *buf, uint64_t count, int dtype, int peer, void *comm, void *stream);
    int (*group_start)(void);
    int (*group_end)(void);

    /* The runtime. Wait up to slice_ms (or just look, for a runtime that polls) for the stream's work: 0 when
     * it is done, stream_busy while it is not, anything else is the runtime's error. */
    int (*stream_wait)(void *stream, int32_t slice_ms);
    int32_t stream_busy;
    const char *(*runtime_error)(int code);      /* optional: the runtime's text for a code */
    /* Optional where barrier is set: zeroed device memory, and its release. */
    int (*scratch_alloc)(void **ptr, size_t bytes);
    int (*scratch_free)(void *ptr);
    /* Optional (unknown: device memory): 1 when the host can read and write the memory at ptr. */
    int (*host_memory)(const void *ptr);

    /* Optional (NULL: teardown is destroy alone): leave the peers cleanly, in progress like init on a
     * non-blocking vendor (ncclCommFinalize). Its completion is waited for until the communicator's deadline,
     * then abort: a destroy without it can wait forever on a dead peer. */
    int (*finalize)(void *comm);
    /* Optional, both or neither: a stream of the communicator's own, used where the caller gives none (HCCL
     * refuses a NULL stream with HCCL_E_PTR). */
    int (*stream_create)(void **stream);
    int (*stream_destroy)(void *stream);
    /* Optional (NULL: every failed call breaks the communicator): 1 for a result that is a synchronous
     * refusal -- the call checked its arguments and enqueued nothing -- so the communicator stays usable. */
    int (*refused)(int result);
    /* 1 where the vendor's reduce may write recvbuf on every rank (HCCL): non-roots get scratch, so the
     * caller's buffers there stay unchanged. Needs scratch_alloc / scratch_free. */
    int32_t reduce_writes_every_rank;
    /* Optional: the device's model ("Ascend910B1"), which decides what the vendor supports; NULL if unknown. */
    const char *(*device_name)(void);
    /* Optional, all four or none (then pycoll_vendor_comm_set_async has no effect: every call completes before
     * it returns): the runtime's events, for collectives that return once enqueued. event_query: 0 once the
     * work recorded before the event has completed, stream_busy while it has not, else the runtime's error. */
    int (*event_create)(void **event);
    int (*event_record)(void *event, void *stream);
    int (*event_query)(void *event);
    int (*event_destroy)(void *event);
    /* Optional, all three or none (then a collective runs on the caller's stream): the stream the vendor's
     * collectives run on, one per communicator (made at its first collective; comm_stream_destroy frees it),
     * and the wait that orders a stream's later work after an event (cudaStreamWaitEvent): each collective is
     * ordered after the caller's stream by an event recorded there, and the caller's stream after the
     * collective by its end event, as ProcessGroupNCCL runs its collectives on streams of its own. Needs the
     * events. The stream must not synchronise with the legacy default stream (cudaStreamNonBlocking). */
    int (*comm_stream_create)(void **stream);
    int (*comm_stream_destroy)(void *stream);
    int (*stream_wait_event)(void *stream, void *event);

    /* Optional, each (NULL, or absent from the loaded library as fault_tolerance says: a shrink
     * re-creates the communicator among the survivors, a stop aborts it). */
    /* The PYCOLL_VENDOR_HAS_* bits of what the loaded library has; called after loading. */
    int32_t (*fault_tolerance)(void);
    /* A communicator of comm's ranks but exclude[0..n) (ranks of comm, ascending), renumbered in their order,
     * non-blocking like init; called by those ranks only. abort_in_flight: comm may still have work in flight
     * (not revoked), which the vendor stops first (NCCL_SHRINK_ABORT; else NCCL_SHRINK_DEFAULT). */
    int (*shrink)(void *comm, const int32_t *exclude, int32_t n, int abort_in_flight, void **newcomm);
    /* Stop comm's work in flight, keeping it as the parent of a shrink (ncclCommRevoke); its later calls fail. */
    int (*revoke)(void *comm);

    /* Optional (NULL: the thread runs as it finds itself): make a thread pycoll starts (the watchdog) run on the
     * communicator's device or context -- device: the one it runs on, comm: the vendor's communicator. 0, or
     * the runtime's error. */
    int (*bind_thread)(int32_t device, void *comm);
    /* Optional (NULL: pycoll has no kernels for the vendor's device memory, and its own algorithms refuse it):
     * the memory table for buf's device memory, its kernels queued on stream, waiting no longer than p2p's
     * deadline; NULL with why set when it cannot serve buf. */
    const struct pycoll_memory_kernels *(*device_kernels)(const pycoll_p2p_t *p2p, void *stream, const void *buf,
                                                          char *why, size_t why_len);
    /* Optional: the names of calls served by symbols looked up after loading (an older library lacks them),
     * indexed by call, for messages; the symbol tables name the rest. */
    const char *const *late_call_names;
};


#endif
