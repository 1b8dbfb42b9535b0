/* Types shared by every part of pycoll's C ABI: element types, reduction ops, status codes. */
#ifndef PYCOLL_TYPES_H
#define PYCOLL_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PYCOLL_BUILDING_LIBRARY)
#define PYCOLL_API __attribute__((visibility("default")))
#else
#define PYCOLL_API
#endif

/* Values are part of the ABI: append only. */
typedef enum pycoll_dtype {
    PYCOLL_INT8 = 0,
    PYCOLL_UINT8 = 1,
    PYCOLL_INT32 = 2,
    PYCOLL_INT64 = 3,
    PYCOLL_FLOAT16 = 4,
    PYCOLL_BFLOAT16 = 5,
    PYCOLL_FLOAT32 = 6,
    PYCOLL_FLOAT64 = 7,
    PYCOLL_COMPLEX64 = 8,  /* a pair of float32 (real, imaginary), as numpy's and C99's complex */
    PYCOLL_COMPLEX128 = 9, /* a pair of float64 */
    PYCOLL_NUM_DTYPES
} pycoll_dtype_t;

typedef enum pycoll_op {
    PYCOLL_SUM = 0,
    PYCOLL_PROD = 1,
    PYCOLL_MIN = 2,
    PYCOLL_MAX = 3,
    PYCOLL_AVG = 4, /* a sum, then one division by the world size at the end of the collective */
    PYCOLL_NUM_OPS
} pycoll_op_t;

typedef enum pycoll_status {
    PYCOLL_OK = 0,
    PYCOLL_ERR_INVALID = 1,      /* bad argument (the message says which) */
    PYCOLL_ERR_UNSUPPORTED = 2,  /* dtype/op/algorithm combination not supported */
    PYCOLL_ERR_TIMEOUT = 3,      /* a wait passed its deadline */
    PYCOLL_ERR_PEER_FAILURE = 4, /* a peer died, closed, or aborted */
    PYCOLL_ERR_MISMATCH = 5,     /* ranks called different collectives / dtypes / counts / ops */
    PYCOLL_ERR_SYSTEM = 6,       /* an OS call failed (errno in the message) */
    PYCOLL_ERR_CLOSED = 7,       /* the communicator was closed or is broken by an earlier error */
    PYCOLL_ERR_NOMEM = 8,
    PYCOLL_ERR_INTERRUPTED = 9,  /* the caller's interrupt check fired (e.g. Ctrl-C in Python) */
    PYCOLL_ERR_BUSY = 10,        /* not finished yet (a vendor work); communicators no longer return it: a call
                                  * waits for another thread's turn on the family instead */
    PYCOLL_ERR_AUTH = 11,        /* a connection failed the shared-secret check (pycoll_comm_init_rank) */
    PYCOLL_ERR_FORKED = 12,      /* the communicator belongs to another process (made before a fork()) */
    PYCOLL_ERR_REVOKED = 13      /* the communicator was revoked (pycoll_comm_revoke): shrink it to go on */
} pycoll_status_t;

/* What kind of number a dtype is, and what pycoll can do with it (pycoll_dtype_info_t.flags). */
enum {
    PYCOLL_DTYPE_INTEGER = 1 << 0,     /* a whole number: sums are exact in every accuracy mode */
    PYCOLL_DTYPE_FLOAT = 1 << 1,       /* a real floating-point number */
    PYCOLL_DTYPE_COMPLEX = 1 << 2,     /* a pair of floats (real, imaginary): no order, so no min or max */
    PYCOLL_DTYPE_COMPENSATED = 1 << 3, /* accuracy compensated and reproducible apply (complex: part by part) */
    PYCOLL_DTYPE_SIGNED = 1 << 4,
};

/* One dtype: the C library's one description of it, which the Python layer binds rather than retypes. */
typedef struct {
    pycoll_dtype_t id;
    const char *name;              /* numpy's name: "bfloat16", "complex64" */
    int32_t size;                  /* bytes per element */
    uint32_t flags;                /* PYCOLL_DTYPE_* */
    uint32_t ops;                  /* bit 1 << op for each pycoll_op_t that reduces it */
    pycoll_dtype_t accumulator;    /* what a compensated sum of it accumulates in; itself where none */
    int32_t precision;             /* a float's significand bits, the implicit one included; 0 for others */
} pycoll_dtype_info_t;

/* Every dtype, in id order (table[i].id == i); *count receives how many. Never NULL. */
PYCOLL_API const pycoll_dtype_info_t *pycoll_dtype_table(int32_t *count);
PYCOLL_API size_t pycoll_dtype_size(pycoll_dtype_t dtype);
PYCOLL_API const char *pycoll_dtype_name(pycoll_dtype_t dtype);
PYCOLL_API const char *pycoll_op_name(pycoll_op_t op);
/* A status's name ("timeout", "peer_failure", ...; "?" for none): what language bindings map to their errors. */
PYCOLL_API const char *pycoll_status_name(pycoll_status_t status);

#ifdef __cplusplus
}
#endif
#endif
