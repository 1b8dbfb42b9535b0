/* The part of NCCL's public C API (nccl.h) that pycoll calls, declared here so that pycoll builds without
 * CUDA or NCCL installed; the library itself is dlopen'd at run time. Values follow nccl.h and never change
 * (NCCL only appends). */
#ifndef PYCOLL_NCCL_API_H
#define PYCOLL_NCCL_API_H

#include <limits.h>
#include <stddef.h>

typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

/* Numbered from 0 in this order, as in nccl.h. ncclTimeout: NCCL 2.30+ (older libraries never return it). */
typedef enum {
    ncclSuccess, ncclUnhandledCudaError, ncclSystemError, ncclInternalError, ncclInvalidArgument,
    ncclInvalidUsage, ncclRemoteError, ncclInProgress, ncclTimeout
} ncclResult_t;

/* Numbered from 0 in this order, as in nccl.h. ncclBfloat16: NCCL 2.10+. */
typedef enum {
    ncclInt8, ncclUint8, ncclInt32, ncclUint32, ncclInt64, ncclUint64, ncclFloat16, ncclFloat32, ncclFloat64,
    ncclBfloat16
} ncclDataType_t;

/* Note max before min: NCCL's order differs from pycoll's. */
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 /* NCCL 2.10+ */ } ncclRedOp_t;

/* ncclConfig_t's head. NCCL 2.14 introduced the struct with `blocking`, the only member pycoll sets; cgaClusterSize,
 * minCTAs, maxCTAs and netName arrived in 2.17. NCCL reads a config by its version field and copies only the
 * members that version had, so with version 2.14 every NCCL from 2.14 on reads `blocking` and ignores the rest
 * (left undefined here: NCCL's defaults). */
#define PYCOLL_NCCL_CONFIG_VERSION 21400
#define PYCOLL_NCCL_CONFIG_MAGIC 0xcafebeefu
#define PYCOLL_NCCL_CONFIG_UNDEF INT_MIN
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
} pycoll_nccl_config_t;
/* NCCL_CONFIG_INITIALIZER for the head (blocking, the member pycoll sets, left to NCCL's default here too). */
#define PYCOLL_NCCL_CONFIG_INITIALIZER                                                                          \
    {sizeof(pycoll_nccl_config_t), PYCOLL_NCCL_CONFIG_MAGIC, PYCOLL_NCCL_CONFIG_VERSION,                        \
     PYCOLL_NCCL_CONFIG_UNDEF, PYCOLL_NCCL_CONFIG_UNDEF, PYCOLL_NCCL_CONFIG_UNDEF, PYCOLL_NCCL_CONFIG_UNDEF,  \
     NULL}

/* cudaStream_t is an opaque pointer; cudaError_t an int. */
#define PYCOLL_CUDA_SUCCESS 0
#define PYCOLL_CUDA_ERROR_NOT_READY 600
#define PYCOLL_CUDA_MEMORY_TYPE_DEVICE 2 /* cudaMemoryTypeDevice */

/* cudaPointerAttributes as of CUDA 11 (type: 0 unregistered host, 1 host, 2 device, 3 managed), with room for
 * the members later versions may append, so the runtime never writes past it. */
typedef union {
    struct {
        int type;
        int device;
        void *device_pointer;
        void *host_pointer;
    } head;
    char room[256];
} pycoll_cuda_pointer_attributes_t;

/* The NCCL and CUDA runtime calls whose signature is not the vendor struct's (pycoll/vendor.h), reached through
 * nccl_vendor.c's adapters: pycoll_nccl_fn_<the pointer's name in nccl_vendor.c>. */
typedef ncclResult_t (*pycoll_nccl_fn_comm_init_rank_config)(ncclComm_t *comm, int nranks, ncclUniqueId id,
                                                             int rank, pycoll_nccl_config_t *config);
typedef ncclResult_t (*pycoll_nccl_fn_nccl_broadcast)(const void *sendbuf, void *recvbuf, size_t count,
                                                      ncclDataType_t dtype, int root, ncclComm_t comm,
                                                      void *stream);
/* Surviving a lost rank (NCCL 2.27 and newer; looked up after loading). ncclCommShrink's flags: DEFAULT where
 * the parent has no work in flight (or was revoked), ABORT to stop it first; ncclCommRevoke's must be 0. */
#define PYCOLL_NCCL_SHRINK_DEFAULT 0x00
#define PYCOLL_NCCL_SHRINK_ABORT 0x01
#define PYCOLL_NCCL_REVOKE_DEFAULT 0x00
typedef ncclResult_t (*pycoll_nccl_fn_comm_shrink)(ncclComm_t comm, int *exclude_ranks, int exclude_count,
                                                   ncclComm_t *newcomm, pycoll_nccl_config_t *config,
                                                   int shrink_flags);
typedef ncclResult_t (*pycoll_nccl_fn_comm_revoke)(ncclComm_t comm, int revoke_flags);
typedef ncclResult_t (*pycoll_nccl_fn_comm_grow)(ncclComm_t comm, int nranks, const ncclUniqueId *unique_id,
                                                 int rank, ncclComm_t *newcomm, pycoll_nccl_config_t *config);
typedef int (*pycoll_nccl_fn_cuda_stream_query)(void *stream);
typedef int (*pycoll_nccl_fn_cuda_malloc)(void **ptr, size_t size);
typedef int (*pycoll_nccl_fn_cuda_memset)(void *ptr, int value, size_t count);
typedef int (*pycoll_nccl_fn_cuda_pointer_get_attributes)(pycoll_cuda_pointer_attributes_t *attributes,
                                                          const void *ptr);
typedef int (*pycoll_nccl_fn_cuda_event_create_with_flags)(void **event, unsigned flags);
typedef int (*pycoll_nccl_fn_cuda_set_device)(int device);
typedef int (*pycoll_nccl_fn_cuda_stream_create_with_flags)(void **stream, unsigned flags);
typedef int (*pycoll_nccl_fn_cuda_stream_wait_event)(void *stream, void *event, unsigned flags);

#endif
