/* Vendor collective libraries behind pycoll's device backends: NCCL (NVIDIA GPUs), HCCL (Ascend NPUs). A vendor
 * is a table of entries built into libpycoll (backends/<vendor>/, filled from the dlopen'ed library), and one
 * generic set of pycoll_vendor_* calls (backends/common/) runs every vendor the same way: the argument checks, the first-error record, the
 * deadline (abort the communicator when it passes, so a dead peer never hangs the caller) and the stream wait
 * are written once.
 *
 * Buffers are device pointers; `stream` is the caller's cudaStream_t / aclrtStream (NULL: the default stream).
 * The vendor's collectives run on a stream of the communicator's own where the vendor has one (NCCL, and HCCL
 * where AscendCL has aclrtStreamWaitEvent), ordered after the work queued on `stream` before the call by an
 * event, as ProcessGroupNCCL runs them; else on `stream`. Every call returns when the collective has completed
 * (the host has seen its end event, or the stream), failed, or passed the communicator's deadline -- in which
 * case the communicator is aborted and broken: later calls return PYCOLL_ERR_CLOSED. On error,
 * pycoll_vendor_comm_error() says why. */
#ifndef PYCOLL_VENDOR_H
#define PYCOLL_VENDOR_H

#include "pycoll/p2p.h"
#include "pycoll/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest unique id of any vendor (HCCL's HcclRootInfo; NCCL's ncclUniqueId is 128 bytes). */
#define PYCOLL_VENDOR_MAX_ID_BYTES 4108

/* What pycoll_vendor_fault_tolerance reports the loaded library has (ncclCommShrink, ncclCommRevoke,
 * ncclCommGrow: NCCL 2.27 and newer). */
#define PYCOLL_VENDOR_HAS_SHRINK 1
#define PYCOLL_VENDOR_HAS_REVOKE 2
#define PYCOLL_VENDOR_HAS_GROW 4

/* A vendor built into libpycoll. Its table of entries is internal (backends/common/vendor_ops.h): it is
 * compiled with libpycoll, never loaded from outside it, so it carries no layout version. */
typedef struct pycoll_vendor pycoll_vendor_t;
typedef struct pycoll_vendor_comm pycoll_vendor_comm_t;

/* A vendor built into libpycoll, by name ("nccl", "hccl"); NULL if there is none of that name. */
PYCOLL_API pycoll_vendor_t *pycoll_vendor_find(const char *name);
/* dlopen one candidate path for library `library` (0 .. num_libraries-1) and resolve its symbols into the
 * struct; the first that loads stays loaded (later calls return PYCOLL_OK). */
PYCOLL_API pycoll_status_t pycoll_vendor_load(pycoll_vendor_t *vendor, int32_t library, const char *path,
                                              char *error, size_t error_len);
/* The vendor's name ("nccl"), which starts its messages, and the size of its unique ids. */
PYCOLL_API const char *pycoll_vendor_name(const pycoll_vendor_t *vendor);
PYCOLL_API int64_t pycoll_vendor_unique_id_bytes(const pycoll_vendor_t *vendor);
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
 * before loading). pycoll_vendor_comm_revoke: from any thread, as request_abort, but
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
 * collective's deadline -- on host memory until the group has run; on device memory whose kernel table is
 * stream-ordered (CUDA's) only until the vendor has enqueued it, the schedule's kernels queued behind it on the
 * same stream, so the caller must end each collective with pycoll_vendor_comm_sync. It belongs to comm:
 * pycoll_comm_destroy frees only its own state, and comm must outlive the pycoll communicator. Errors are
 * shared: one breaks both. Call it before each collective, with the collective's buffer: NULL
 * (pycoll_vendor_comm_error says why) where the vendor has no send/recv or buf is memory the host cannot
 * reach. */
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
 * of the vendor's collectives (all_reduce ... barrier) returns once it is enqueued on the stream it runs on; an
 * event recorded behind it there is its pycoll_vendor_work_t (pycoll_vendor_comm_take_work), which orders the
 * caller's later work after it without a host wait (pycoll_vendor_work_order_stream). One watchdog thread per
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
/* Orders the later work queued on `stream` after the collective (its end event: cudaStreamWaitEvent), without
 * waiting on the host, as ProcessGroupNCCL's Work.wait() does. PYCOLL_OK (also once the work has finished),
 * or PYCOLL_ERR_UNSUPPORTED where only a host wait serves: its buffers are host memory the host reads, or the
 * runtime has no stream wait (then wait with pycoll_vendor_work_wait). It reports no failure: a failed work
 * says so through pycoll_vendor_work_status, and its communicator is broken. */
PYCOLL_API pycoll_status_t pycoll_vendor_work_order_stream(pycoll_vendor_work_t *work, void *stream);
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
