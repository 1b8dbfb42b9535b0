/* Vendor collective libraries behind pycoll's backends: NCCL (NVIDIA GPUs) and HCCL (Ascend NPUs).
 * Both are loaded at run time with dlopen, so pycoll builds and runs without CUDA or CANN installed.
 * Buffers are device pointers; `stream` is the caller's cudaStream_t / aclrtStream (NULL: the default stream).
 * Every call returns when the collective has completed on the stream, failed, or passed the communicator's
 * deadline -- in which case the communicator is aborted (a dead peer never hangs the caller) and broken:
 * later calls return PYCOLL_ERR_CLOSED. On error, *_comm_error() says why. */
#ifndef PYCOLL_VENDOR_H
#define PYCOLL_VENDOR_H

#include "pycoll/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PYCOLL_NCCL_UNIQUE_ID_BYTES 128
#define PYCOLL_HCCL_ROOT_INFO_BYTES 4108

/* ---- NCCL ---- */
typedef struct pycoll_nccl_comm pycoll_nccl_comm_t;

/* dlopen one candidate path (the first library that loads stays loaded). */
PYCOLL_API pycoll_status_t pycoll_nccl_load(const char *path, char *error, size_t error_len);
/* The CUDA runtime (libcudart), used to wait for streams and hold the barrier's scratch word. */
PYCOLL_API pycoll_status_t pycoll_cudart_load(const char *path, char *error, size_t error_len);
/* NCCL_VERSION_CODE of the loaded library (e.g. 22304), 0 before loading. */
PYCOLL_API int32_t pycoll_nccl_version(void);
PYCOLL_API pycoll_status_t pycoll_nccl_unique_id(uint8_t id[PYCOLL_NCCL_UNIQUE_ID_BYTES], char *error,
                                                 size_t error_len);
/* A non-blocking NCCL communicator on the current CUDA device, initialised within timeout_s.
 * NCCL reads NCCL_ALGO (and its other settings) from the environment while this runs.
 * NULL on failure, with *status and error set. */
PYCOLL_API pycoll_nccl_comm_t *pycoll_nccl_comm_create(const uint8_t id[PYCOLL_NCCL_UNIQUE_ID_BYTES], int32_t rank,
                                                       int32_t size, double timeout_s,
                                                       pycoll_status_t *status, char *error, size_t error_len);
/* Destroys a healthy communicator, aborts a broken one. */
PYCOLL_API void pycoll_nccl_comm_destroy(pycoll_nccl_comm_t *comm);
PYCOLL_API const char *pycoll_nccl_comm_error(const pycoll_nccl_comm_t *comm);
PYCOLL_API int32_t pycoll_nccl_comm_device(const pycoll_nccl_comm_t *comm);
PYCOLL_API void pycoll_nccl_comm_set_timeout(pycoll_nccl_comm_t *comm, double timeout_s);

PYCOLL_API pycoll_status_t pycoll_nccl_all_reduce(pycoll_nccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                  void *stream);
PYCOLL_API pycoll_status_t pycoll_nccl_reduce_scatter(pycoll_nccl_comm_t *comm, const void *sendbuf,
                                                      void *recvbuf, int64_t recv_count, pycoll_dtype_t dtype,
                                                      pycoll_op_t op, void *stream);
PYCOLL_API pycoll_status_t pycoll_nccl_all_gather(pycoll_nccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t send_count, pycoll_dtype_t dtype, void *stream);
PYCOLL_API pycoll_status_t pycoll_nccl_broadcast(pycoll_nccl_comm_t *comm, void *buf, int64_t count,
                                                 pycoll_dtype_t dtype, int32_t root, void *stream);
PYCOLL_API pycoll_status_t pycoll_nccl_reduce(pycoll_nccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                              int64_t count, pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                              void *stream);
PYCOLL_API pycoll_status_t pycoll_nccl_barrier(pycoll_nccl_comm_t *comm, void *stream);
/* Point-to-point, in one NCCL group: send send_count elements to send_peer and receive recv_count from
 * recv_peer at the same time (either peer may be -1: no send / no receive). */
PYCOLL_API pycoll_status_t pycoll_nccl_send_recv(pycoll_nccl_comm_t *comm, const void *sendbuf, int64_t send_count,
                                                 int32_t send_peer, void *recvbuf, int64_t recv_count,
                                                 int32_t recv_peer, pycoll_dtype_t dtype, void *stream);

/* ---- HCCL ---- */
typedef struct pycoll_hccl_comm pycoll_hccl_comm_t;

PYCOLL_API pycoll_status_t pycoll_hccl_load(const char *path, char *error, size_t error_len);
/* AscendCL (libascendcl), used to wait for streams with a deadline. */
PYCOLL_API pycoll_status_t pycoll_acl_load(const char *path, char *error, size_t error_len);
PYCOLL_API pycoll_status_t pycoll_hccl_root_info(uint8_t info[PYCOLL_HCCL_ROOT_INFO_BYTES], char *error,
                                                 size_t error_len);
/* HCCL's init blocks; its own bound is HCCL_CONNECT_TIMEOUT (set by the Python layer from the timeout). */
PYCOLL_API pycoll_hccl_comm_t *pycoll_hccl_comm_create(const uint8_t info[PYCOLL_HCCL_ROOT_INFO_BYTES],
                                                       int32_t rank, int32_t size, double timeout_s,
                                                       pycoll_status_t *status, char *error, size_t error_len);
PYCOLL_API void pycoll_hccl_comm_destroy(pycoll_hccl_comm_t *comm);
PYCOLL_API const char *pycoll_hccl_comm_error(const pycoll_hccl_comm_t *comm);
PYCOLL_API void pycoll_hccl_comm_set_timeout(pycoll_hccl_comm_t *comm, double timeout_s);

/* HCCL has no average: PYCOLL_AVG returns PYCOLL_ERR_UNSUPPORTED; the caller sums, then scales. */
PYCOLL_API pycoll_status_t pycoll_hccl_all_reduce(pycoll_hccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                  void *stream);
PYCOLL_API pycoll_status_t pycoll_hccl_reduce_scatter(pycoll_hccl_comm_t *comm, const void *sendbuf,
                                                      void *recvbuf, int64_t recv_count, pycoll_dtype_t dtype,
                                                      pycoll_op_t op, void *stream);
PYCOLL_API pycoll_status_t pycoll_hccl_all_gather(pycoll_hccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                                  int64_t send_count, pycoll_dtype_t dtype, void *stream);
PYCOLL_API pycoll_status_t pycoll_hccl_broadcast(pycoll_hccl_comm_t *comm, void *buf, int64_t count,
                                                 pycoll_dtype_t dtype, int32_t root, void *stream);
PYCOLL_API pycoll_status_t pycoll_hccl_reduce(pycoll_hccl_comm_t *comm, const void *sendbuf, void *recvbuf,
                                              int64_t count, pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                              void *stream);
PYCOLL_API pycoll_status_t pycoll_hccl_barrier(pycoll_hccl_comm_t *comm, void *stream);

#ifdef __cplusplus
}
#endif
#endif
