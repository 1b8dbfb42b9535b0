/* Vendor collective libraries behind pycoll's device backends: NCCL (NVIDIA GPUs), HCCL (Ascend NPUs), any
 * other that fills a pycoll_vendor_t. As NCCL's ncclNet_vN_t, a vendor is one versioned struct of function
 * pointers, filled from the dlopen'ed library (backends/<vendor>/), and one generic set of pycoll_vendor_*
 * calls (backends/common/) runs every vendor the same way: the argument checks, the first-error record, the
 * deadline (abort the communicator when it passes, so a dead peer never hangs the caller) and the stream wait
 * are written once.
 *
 * Buffers are device pointers; `stream` is the caller's cudaStream_t / aclrtStream (NULL: the default stream).
 * Every call returns when the collective has completed on the stream, failed, or passed the communicator's
 * deadline -- in which case the communicator is aborted and broken: later calls return PYCOLL_ERR_CLOSED. On
 * error, pycoll_vendor_comm_error() says why. */
#ifndef PYCOLL_VENDOR_H
#define PYCOLL_VENDOR_H

#include "pycoll/p2p.h"
#include "pycoll/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The layout of pycoll_vendor_t. Version 2 appends the fault-tolerance entries (shrink, revoke, and which of
 * them the loaded library has); a version-1 struct is read without them (its communicators are re-created and
 * aborted instead). A struct carrying another version is refused (PYCOLL_ERR_UNSUPPORTED); every version
 * starts with `version` and `name`, so the refusal can name the vendor. */
#define PYCOLL_VENDOR_VERSION 2
#define PYCOLL_VENDOR_OLDEST_VERSION 1
/* The dtypes version 1 maps: int8 .. float64 (ids 0-7). Later dtypes (complex64, complex128) are refused by every
 * version-1 vendor, so the struct's layout stays what vendors were compiled against. */
#define PYCOLL_VENDOR_V1_DTYPES 8
/* The largest unique id of any vendor (HCCL's HcclRootInfo; NCCL's ncclUniqueId is 128 bytes). */
#define PYCOLL_VENDOR_MAX_ID_BYTES 4108

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
    PYCOLL_VENDOR_CALL_REVOKE
} pycoll_vendor_call_t;

/* What pycoll_vendor_fault_tolerance reports the loaded library has (ncclCommShrink, ncclCommRevoke,
 * ncclCommGrow: NCCL 2.27 and newer). */
#define PYCOLL_VENDOR_HAS_SHRINK 1
#define PYCOLL_VENDOR_HAS_REVOKE 2
#define PYCOLL_VENDOR_HAS_GROW 4

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

/* A vendor, version 2. pycoll_vendor_load fills the entries named by the libraries' symbols; the backend sets
 * the rest (adapters, the vendor's mapping of results). Entries are declared with the vendor's C ABI: results
 * and enums are ints, counts uint64_t (size_t on the 64-bit hosts pycoll supports), handles and streams
 * pointers; 0 is success. Entries marked optional may be NULL; what the generic layer does then is said beside
 * each. */
typedef struct pycoll_vendor_v2 {
    uint32_t version;             /* PYCOLL_VENDOR_VERSION */
    const char *name;             /* "nccl": every message starts with it */
    int64_t unique_id_bytes;      /* <= PYCOLL_VENDOR_MAX_ID_BYTES */
    /* The result meaning "still running" (ncclInProgress) for non-blocking vendors; -1 where calls block. */
    int32_t in_progress;
    /* The vendor's code for each pycoll dtype and op; -1: the vendor has none (PYCOLL_ERR_UNSUPPORTED). */
    int32_t dtypes[PYCOLL_VENDOR_V1_DTYPES];
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
     * work recorded before the event has completed, stream_busy while it has not, else the runtime's error.
     * Appended last: a vendor struct without them ends before them only if it was built before they existed,
     * which the built-in vendors never are. */
    int (*event_create)(void **event);
    int (*event_record)(void *event, void *stream);
    int (*event_query)(void *event);
    int (*event_destroy)(void *event);

    /* Version 2. Optional, each (NULL, or absent from the loaded library as fault_tolerance says: a shrink
     * re-creates the communicator among the survivors, a stop aborts it). */
    /* The PYCOLL_VENDOR_HAS_* bits of what the loaded library has; called after loading. */
    int32_t (*fault_tolerance)(void);
    /* A communicator of comm's ranks but exclude[0..n) (ranks of comm, ascending), renumbered in their order,
     * non-blocking like init; called by those ranks only. abort_in_flight: comm may still have work in flight
     * (not revoked), which the vendor stops first (NCCL_SHRINK_ABORT; else NCCL_SHRINK_DEFAULT). */
    int (*shrink)(void *comm, const int32_t *exclude, int32_t n, int abort_in_flight, void **newcomm);
    /* Stop comm's work in flight, keeping it as the parent of a shrink (ncclCommRevoke); its later calls fail. */
    int (*revoke)(void *comm);
} pycoll_vendor_v2_t;

typedef pycoll_vendor_v2_t pycoll_vendor_t;
typedef struct pycoll_vendor_comm pycoll_vendor_comm_t;

/* A vendor built into libpycoll, by name ("nccl", "hccl"); NULL if there is none of that name. */
PYCOLL_API pycoll_vendor_t *pycoll_vendor_find(const char *name);
/* dlopen one candidate path for library `library` (0 .. num_libraries-1) and resolve its symbols into the
 * struct; the first that loads stays loaded (later calls return PYCOLL_OK). */
PYCOLL_API pycoll_status_t pycoll_vendor_load(pycoll_vendor_t *vendor, int32_t library, const char *path,
                                              char *error, size_t error_len);
/* The current device's model as the vendor's runtime names it ("Ascend910B1"); "" where unknown. */
PYCOLL_API const char *pycoll_vendor_device_name(const pycoll_vendor_t *vendor);
/* The loaded library's version code; 0 before loading or where the vendor has none. */
PYCOLL_API int32_t pycoll_vendor_library_version(const pycoll_vendor_t *vendor);
/* A fresh unique id of vendor->unique_id_bytes bytes (id_len must be at least that). */
PYCOLL_API pycoll_status_t pycoll_vendor_unique_id(const pycoll_vendor_t *vendor, void *id, int64_t id_len,
                                                   char *error, size_t error_len);
/* A communicator of `size` ranks on the current device, initialised within timeout_s (where the vendor's init
 * blocks, its own setting bounds it, e.g. HCCL_CONNECT_TIMEOUT). The vendor reads its settings (NCCL_ALGO,
 * HCCL_ALGO, ...) from the environment while this runs. NULL on failure, with *status and error set. */
PYCOLL_API pycoll_vendor_comm_t *pycoll_vendor_comm_create(const pycoll_vendor_t *vendor, const void *id,
                                                           int64_t id_len, int32_t rank, int32_t size,
                                                           double timeout_s, pycoll_status_t *status, char *error,
                                                           size_t error_len);
/* Tears the communicator down within its timeout: a healthy one is finalized (where the vendor can) and
 * destroyed, aborted when the deadline passes; a broken one is aborted at once. Device memory is freed only
 * after that, so a free never waits behind a kernel stuck on a dead peer. */
PYCOLL_API void pycoll_vendor_comm_destroy(pycoll_vendor_comm_t *comm);
/* Vendor destroys and aborts that missed their deadline (the communicator's timeout, at most 5 s) in this
 * process and were left to finish on their own thread, with the communicator's device memory. */
PYCOLL_API int64_t pycoll_vendor_abandoned_releases(void);
/* Why the last call failed (the first error, once the communicator is broken). */
PYCOLL_API const char *pycoll_vendor_comm_error(const pycoll_vendor_comm_t *comm);
/* The device the communicator runs on; -1 where the vendor does not say. */
PYCOLL_API int32_t pycoll_vendor_comm_device(const pycoll_vendor_comm_t *comm);
PYCOLL_API void pycoll_vendor_comm_set_timeout(pycoll_vendor_comm_t *comm, double timeout_s);
/* A peer failure this process learned of by other means than the vendor (a host transport, a peer process that
 * exited), to end the wait of a collective stuck on that peer now rather than at its deadline. From any thread,
 * while comm is alive: the call waiting on comm (within milliseconds; a blocking stream wait within its slice),
 * or else the next call, fails with PYCOLL_ERR_PEER_FAILURE and `reason`, naming `failed_rank` (-1: none); the
 * communicator is broken, and aborted at once where the vendor has an abort of its own (NCCL), else at
 * teardown (HCCL, whose abort is its destroy: behind a task stuck on a dead peer it waits until the bounded
 * teardown gives up). Only the first request counts. */
PYCOLL_API void pycoll_vendor_comm_request_abort(pycoll_vendor_comm_t *comm, int32_t failed_rank,
                                                 const char *reason);

/* Surviving a lost rank. pycoll_vendor_fault_tolerance: the PYCOLL_VENDOR_HAS_* bits of the loaded library (0
 * before loading, or for a version-1 vendor). pycoll_vendor_comm_revoke: from any thread, as request_abort, but
 * the call waiting on comm (else the next) fails with PYCOLL_ERR_REVOKED; where the vendor can revoke, comm's
 * work in flight is stopped and comm stays the parent of a shrink, else it is aborted. Every failure of comm
 * (an error, a deadline, an abort request) likewise stops it by revoking where the vendor can.
 * pycoll_vendor_comm_shrink: called by every rank of comm but exclude[0..n) (ranks of comm), each passing the
 * same list: a communicator of those ranks, renumbered in their order, through the vendor's shrink
 * (PYCOLL_ERR_UNSUPPORTED where it has none, or comm was aborted: re-create it then), ready within comm's
 * timeout; NULL on failure, with *status and error set. comm is left as it was (broken: destroy it). */
PYCOLL_API int32_t pycoll_vendor_fault_tolerance(const pycoll_vendor_t *vendor);
PYCOLL_API void pycoll_vendor_comm_revoke(pycoll_vendor_comm_t *comm);
PYCOLL_API pycoll_vendor_comm_t *pycoll_vendor_comm_shrink(pycoll_vendor_comm_t *comm, const int32_t *exclude,
                                                           int32_t n, pycoll_status_t *status, char *error,
                                                           size_t error_len);

PYCOLL_API pycoll_status_t pycoll_vendor_all_reduce(pycoll_vendor_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                    int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                    void *stream);
PYCOLL_API pycoll_status_t pycoll_vendor_reduce_scatter(pycoll_vendor_comm_t *comm, const void *sendbuf,
                                                        void *recvbuf, int64_t recv_count, pycoll_dtype_t dtype,
                                                        pycoll_op_t op, void *stream);
PYCOLL_API pycoll_status_t pycoll_vendor_all_gather(pycoll_vendor_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                    int64_t send_count, pycoll_dtype_t dtype, void *stream);
PYCOLL_API pycoll_status_t pycoll_vendor_broadcast(pycoll_vendor_comm_t *comm, void *buf, int64_t count,
                                                   pycoll_dtype_t dtype, int32_t root, void *stream);
PYCOLL_API pycoll_status_t pycoll_vendor_reduce(pycoll_vendor_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                int64_t count, pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                                void *stream);
PYCOLL_API pycoll_status_t pycoll_vendor_barrier(pycoll_vendor_comm_t *comm, void *stream);
/* Point-to-point in one vendor group: send send_count elements to send_peer and receive recv_count from
 * recv_peer at the same time (either peer may be -1: no send / no receive). */
/* The communicator as a pycoll transport (pycoll/p2p.h), for pycoll_comm_create: pycoll's own algorithms over the
 * vendor's send/recv, each batch of sends and receives one vendor group on `stream`, waited on until the
 * collective's deadline. It belongs to comm: pycoll_comm_destroy frees only its own state, and comm
 * must outlive the pycoll communicator. Errors are shared: one breaks both. Call it before each collective,
 * with the collective's buffer: NULL (pycoll_vendor_comm_error says why) where the vendor has no send/recv or
 * buf is memory the host cannot reach. */
PYCOLL_API pycoll_p2p_t *pycoll_vendor_comm_p2p(pycoll_vendor_comm_t *comm, void *stream, const void *buf);
/* After a collective of pycoll's own over the transport: wait (until the communicator's timeout, then abort) for
 * what it queued on `stream` -- on device memory its last kernels run after the last vendor group. */
PYCOLL_API pycoll_status_t pycoll_vendor_comm_sync(pycoll_vendor_comm_t *comm, void *stream);
PYCOLL_API pycoll_status_t pycoll_vendor_send_recv(pycoll_vendor_comm_t *comm, const void *sendbuf,
                                                   int64_t send_count, int32_t send_peer, void *recvbuf,
                                                   int64_t recv_count, int32_t recv_peer, pycoll_dtype_t dtype,
                                                   void *stream);
/* One vendor group of sends and receives, as ProcessGroupNCCL runs gather, scatter and all-to-all: send_counts[r]
 * elements from sendbuf to rank r and recv_counts[r] from rank r into recvbuf, each side's blocks consecutive in
 * rank order (a NULL counts array: nothing sent / received; zero counts are skipped); ncounts, the length of
 * each array, must be the communicator's size. This rank's own block
 * (send_counts[rank] == recv_counts[rank]) is copied on the stream by its memory's table (host memory: memmove;
 * CUDA memory: pycoll's CUDA kernels). Completes before it returns, within the communicator's timeout. */
PYCOLL_API pycoll_status_t pycoll_vendor_exchange(pycoll_vendor_comm_t *comm, const void *sendbuf,
                                                  const int64_t *send_counts, void *recvbuf,
                                                  const int64_t *recv_counts, int32_t ncounts, pycoll_dtype_t dtype,
                                                  void *stream);

/* Asynchronous collectives, as torch's ProcessGroupNCCL runs them. While `on` (and the vendor has events), each
 * of the vendor's collectives (all_reduce ... barrier) returns once it is enqueued on its stream; an event
 * recorded behind it is its pycoll_vendor_work_t (pycoll_vendor_comm_take_work). One watchdog thread per
 * communicator polls every pending work's event and the vendor's asynchronous error; at an error, or at the
 * work's deadline (the communicator's timeout from the call), it aborts the communicator (bounded, as every
 * teardown) and fails every pending work with the error. Calls on the communicator are serialised with it.
 * pycoll's own schedules (pycoll_vendor_comm_p2p) and send/recv always complete before they return. */
typedef struct pycoll_vendor_work pycoll_vendor_work_t;
PYCOLL_API void pycoll_vendor_comm_set_async(pycoll_vendor_comm_t *comm, int on);
/* The work of the last collective enqueued in async mode, which the caller then owns (release it), or NULL
 * when the last call completed before returning (no events, or not in async mode). */
PYCOLL_API pycoll_vendor_work_t *pycoll_vendor_comm_take_work(pycoll_vendor_comm_t *comm);
/* Until the work has finished or timeout_s passed (< 0: no limit); 1 when it has finished. */
PYCOLL_API int pycoll_vendor_work_wait(pycoll_vendor_work_t *work, double timeout_s);
/* PYCOLL_OK once completed, its error once failed (why, into error), PYCOLL_ERR_BUSY while pending. */
PYCOLL_API pycoll_status_t pycoll_vendor_work_status(pycoll_vendor_work_t *work, char *error, size_t error_len);
PYCOLL_API void pycoll_vendor_work_release(pycoll_vendor_work_t *work);

/* pycoll's CUDA kernels (backends/cuda/cuda_kernels.c), what the vendor transport runs its schedules with on
 * CUDA device memory: compiled at run time by NVRTC (library 0: libnvrtc) and launched through the CUDA driver
 * (library 1: libcuda), both loaded from `path` (PYCOLL_ERR_UNSUPPORTED and why in error when that fails). */
PYCOLL_API pycoll_status_t pycoll_cuda_kernels_load(int32_t library, const char *path, char *error,
                                                    size_t error_len);
/* The CUDA C source of the kernels for dtype, written to out (truncated to len); its length, or -1 for a dtype
 * with none. */
PYCOLL_API int64_t pycoll_cuda_kernel_source(pycoll_dtype_t dtype, char *out, size_t len);
/* Compile dtype's kernels with the loaded NVRTC for a device of compute capability sm (10 * major + minor), as a
 * launch does, without a device: a CUBIN for sm (or the newest architecture of its major below it), PTX only
 * for a device newer than every architecture NVRTC knows (or with PYCOLL_CUDA_COMPILE_PTX, to read it). The
 * image (free it with pycoll_cuda_kernels_free) and its size; target gets "sm_XY" (CUBIN) or "compute_XY"
 * (PTX). */
#define PYCOLL_CUDA_COMPILE_PTX 1
PYCOLL_API pycoll_status_t pycoll_cuda_kernels_compile(pycoll_dtype_t dtype, int32_t sm, int32_t flags,
                                                       void **image, int64_t *size, char *target,
                                                       size_t target_len, char *error, size_t error_len);
PYCOLL_API void pycoll_cuda_kernels_free(void *image);
/* The CUDA device ordinal of memory the driver knows (cuPointerGetAttribute); PYCOLL_ERR_UNSUPPORTED where the
 * driver (library 1 of pycoll_cuda_kernels_load) is not loaded, PYCOLL_ERR_INVALID where it does not know ptr. */
PYCOLL_API pycoll_status_t pycoll_cuda_pointer_device(const void *ptr, int32_t *device, char *error,
                                                      size_t error_len);
/* buf[i] /= divisor for `count` elements of CUDA memory, with pycoll's scale_avg kernel on `stream`, in the
 * primary context of buf's device (for tests and the GPU validation: one launch through the whole path). */
PYCOLL_API pycoll_status_t pycoll_cuda_kernels_scale(void *buf, int64_t count, pycoll_dtype_t dtype,
                                                     int64_t divisor, void *stream, char *error,
                                                     size_t error_len);

#ifdef __cplusplus
}
#endif
#endif
