/* The part of NCCL's public C API (nccl.h) that pycoll calls, declared here so that pycoll builds without
 * CUDA or NCCL installed; the library itself is dlopen'd at run time. Values follow nccl.h and never change
 * (NCCL only appends). */
#ifndef PYCOLL_NCCL_API_H
#define PYCOLL_NCCL_API_H

#include <limits.h>
#include <stddef.h>

typedef struct ncclComm *ncclComm_t;
typedef struct { char internal[128]; } ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclTimeout = 8 /* NCCL 2.28+ */
} ncclResult_t;

typedef enum {
    ncclInt8 = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclFloat32 = 7,
    ncclFloat64 = 8,
    ncclBfloat16 = 9 /* NCCL 2.10+ */
} ncclDataType_t;

/* Note max before min: NCCL's order differs from pycoll's. */
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 /* NCCL 2.10+ */ } ncclRedOp_t;

/* ncclConfig_t as of NCCL 2.14, the first version with non-blocking communicators. NCCL reads a config by its
 * version field and copies only the members that version had, so newer libraries accept this layout. */
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

/* cudaStream_t is an opaque pointer; cudaError_t an int. */
#define PYCOLL_CUDA_SUCCESS 0
#define PYCOLL_CUDA_ERROR_NOT_READY 600

/* The entry points pycoll uses, resolved with dlsym. */
typedef struct {
    ncclResult_t (*GetVersion)(int *version);
    ncclResult_t (*GetUniqueId)(ncclUniqueId *id);
    ncclResult_t (*CommInitRankConfig)(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                       pycoll_nccl_config_t *config);
    ncclResult_t (*CommGetAsyncError)(ncclComm_t comm, ncclResult_t *async_error);
    ncclResult_t (*CommAbort)(ncclComm_t comm);
    ncclResult_t (*CommDestroy)(ncclComm_t comm);
    ncclResult_t (*CommCuDevice)(ncclComm_t comm, int *device);
    const char *(*GetErrorString)(ncclResult_t result);
    const char *(*GetLastError)(ncclComm_t comm);
    ncclResult_t (*AllReduce)(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t dtype,
                              ncclRedOp_t op, ncclComm_t comm, void *stream);
    ncclResult_t (*ReduceScatter)(const void *sendbuf, void *recvbuf, size_t recv_count, ncclDataType_t dtype,
                                  ncclRedOp_t op, ncclComm_t comm, void *stream);
    ncclResult_t (*AllGather)(const void *sendbuf, void *recvbuf, size_t send_count, ncclDataType_t dtype,
                              ncclComm_t comm, void *stream);
    ncclResult_t (*Broadcast)(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t dtype, int root,
                              ncclComm_t comm, void *stream);
    ncclResult_t (*Reduce)(const void *sendbuf, void *recvbuf, size_t count, ncclDataType_t dtype, ncclRedOp_t op,
                           int root, ncclComm_t comm, void *stream);
    ncclResult_t (*Send)(const void *sendbuf, size_t count, ncclDataType_t dtype, int peer, ncclComm_t comm,
                         void *stream);
    ncclResult_t (*Recv)(void *recvbuf, size_t count, ncclDataType_t dtype, int peer, ncclComm_t comm,
                         void *stream);
    ncclResult_t (*GroupStart)(void);
    ncclResult_t (*GroupEnd)(void);
} pycoll_nccl_api_t;

typedef struct {
    int (*StreamQuery)(void *stream);
    int (*Malloc)(void **ptr, size_t size);
    int (*Free)(void *ptr);
    int (*Memset)(void *ptr, int value, size_t count);
    const char *(*GetErrorString)(int error);
} pycoll_cudart_api_t;

#endif
