/* The part of HCCL's public C API (hccl.h, hccl_types.h) and AscendCL that pycoll calls, declared here so that
 * pycoll builds without CANN installed; the libraries are dlopen'd at run time. Values follow hccl_types.h. */
#ifndef PYCOLL_HCCL_API_H
#define PYCOLL_HCCL_API_H

#include <stdint.h>

typedef void *HcclComm;
typedef struct { char internal[4108]; } HcclRootInfo;

/* Numbered from 0 in this order, as in hccl_types.h. */
typedef enum {
    HCCL_SUCCESS, HCCL_E_PARA, HCCL_E_PTR, HCCL_E_MEMORY, HCCL_E_INTERNAL, HCCL_E_NOT_SUPPORT, HCCL_E_NOT_FOUND,
    HCCL_E_UNAVAIL, HCCL_E_SYSCALL, HCCL_E_TIMEOUT, HCCL_E_OPEN_FILE_FAILURE, HCCL_E_TCP_CONNECT,
    HCCL_E_ROCE_CONNECT, HCCL_E_TCP_TRANSFER, HCCL_E_ROCE_TRANSFER, HCCL_E_RUNTIME, HCCL_E_DRV, HCCL_E_PROFILING,
    HCCL_E_CCE, HCCL_E_NETWORK, HCCL_E_AGAIN, HCCL_E_REMOTE, HCCL_E_SUSPENDING,
    HCCL_E_OPRETRY_FAIL, /* 23: newer CANN: an operation retry failed */
    HCCL_E_OOM,          /* 24: newer CANN: out of device memory */
    HCCL_E_IN_STATUS = 1041 /* newer CANN: "the error information is in the status" */
} HcclResult;

/* Numbered from 0 in this order, as in hccl_types.h. */
typedef enum {
    HCCL_DATA_TYPE_INT8, HCCL_DATA_TYPE_INT16, HCCL_DATA_TYPE_INT32, HCCL_DATA_TYPE_FP16, HCCL_DATA_TYPE_FP32,
    HCCL_DATA_TYPE_INT64, HCCL_DATA_TYPE_UINT64, HCCL_DATA_TYPE_UINT8, HCCL_DATA_TYPE_UINT16, HCCL_DATA_TYPE_UINT32,
    HCCL_DATA_TYPE_FP64, HCCL_DATA_TYPE_BFP16
} HcclDataType;

/* No average in HCCL; max before min, as in NCCL. */
typedef enum { HCCL_REDUCE_SUM = 0, HCCL_REDUCE_PROD = 1, HCCL_REDUCE_MAX = 2, HCCL_REDUCE_MIN = 3 } HcclReduceOp;

/* Point-to-point (hccl_types.h): one item of HcclBatchSendRecv, whose items progress together. */
typedef enum { HCCL_SEND = 0, HCCL_RECV = 1 } HcclSendRecvType;
typedef struct {
    HcclSendRecvType sendRecvType;
    void *buf;
    uint64_t count;
    HcclDataType dataType;
    uint32_t remoteRank;
} HcclSendRecvItem;

typedef void *aclrtContext;

#define PYCOLL_ACL_SUCCESS 0
#define PYCOLL_ACL_ERROR_RT_STREAM_SYNC_TIMEOUT 507046

#endif
