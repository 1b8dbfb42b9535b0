/* The part of XLA's FFI C ABI that pycoll's jax handlers (ffi_handlers.c) use, declared here so that pycoll
 * builds without jax or jaxlib installed (as backends/nccl/nccl_api.h does for NCCL). Checked against
 * xla/ffi/api/c_api.h as shipped in jaxlib 0.10.2 (FFI API version 0.3). Only the leading fields of each struct
 * that we read or write are declared, in the header's order; XLA appends fields at the end only and stamps
 * every struct with its size, which the handlers check at run time so that a jaxlib with another layout gets
 * an error, not a crash. The names are ours (pycoll_xla_*), the values and layouts XLA's. */
#ifndef PYCOLL_JAX_XLA_FFI_SUBSET_H
#define PYCOLL_JAX_XLA_FFI_SUBSET_H

#include <stddef.h>
#include <stdint.h>

/* The API version these declarations follow; a runtime with another major version is refused. */
#define PYCOLL_XLA_FFI_MAJOR 0
#define PYCOLL_XLA_FFI_MINOR 3

/* The size of a struct up to and including `field`, as XLA stamps it (XLA_FFI_STRUCT_SIZE). */
#define PYCOLL_XLA_SIZE_UPTO(type, field) (offsetof(type, field) + sizeof(((type *)0)->field))

typedef struct pycoll_xla_error pycoll_xla_error; /* opaque, owned by XLA */

/* Every extension starts with this; the one we answer is the metadata query (type 1). */
typedef struct pycoll_xla_extension {
    size_t struct_size;
    int32_t type; /* an enum in C: 4 bytes on every ABI XLA supports */
    struct pycoll_xla_extension *next;
} pycoll_xla_extension;
#define PYCOLL_XLA_EXTENSION_METADATA 1

typedef struct pycoll_xla_api_version {
    size_t struct_size;
    pycoll_xla_extension *extension_start;
    int major_version;
    int minor_version;
} pycoll_xla_api_version;

/* Status codes of XLA_FFI_Error_Code (absl's). */
enum {
    PYCOLL_XLA_CANCELLED = 1,
    PYCOLL_XLA_UNKNOWN = 2,
    PYCOLL_XLA_INVALID_ARGUMENT = 3,
    PYCOLL_XLA_DEADLINE_EXCEEDED = 4,
    PYCOLL_XLA_RESOURCE_EXHAUSTED = 8,
    PYCOLL_XLA_FAILED_PRECONDITION = 9,
    PYCOLL_XLA_ABORTED = 10,
    PYCOLL_XLA_UNIMPLEMENTED = 12,
    PYCOLL_XLA_INTERNAL = 13,
    PYCOLL_XLA_UNAVAILABLE = 14,
};

typedef struct pycoll_xla_error_create_args {
    size_t struct_size;
    pycoll_xla_extension *extension_start;
    const char *message; /* copied by XLA */
    int32_t errc;
} pycoll_xla_error_create_args;

/* XLA_FFI_DataType values for the element types pycoll reduces (and TOKEN, which ordered calls pass). */
enum {
    PYCOLL_XLA_S8 = 2,
    PYCOLL_XLA_S32 = 4,
    PYCOLL_XLA_S64 = 5,
    PYCOLL_XLA_U8 = 6,
    PYCOLL_XLA_U32 = 8,
    PYCOLL_XLA_U64 = 9,
    PYCOLL_XLA_F16 = 10,
    PYCOLL_XLA_F32 = 11,
    PYCOLL_XLA_F64 = 12,
    PYCOLL_XLA_BF16 = 16,
    PYCOLL_XLA_TOKEN = 17,
};

typedef struct pycoll_xla_buffer {
    size_t struct_size;
    pycoll_xla_extension *extension_start;
    int32_t dtype;
    void *data;
    int64_t rank;
    int64_t *dims;
} pycoll_xla_buffer;

#define PYCOLL_XLA_ARG_BUFFER 1
#define PYCOLL_XLA_RET_BUFFER 1
#define PYCOLL_XLA_ATTR_SCALAR 3

typedef struct pycoll_xla_bytes {
    const char *ptr;
    size_t len;
} pycoll_xla_bytes;

typedef struct pycoll_xla_scalar {
    int32_t dtype;
    void *value;
} pycoll_xla_scalar;

typedef struct pycoll_xla_args {
    size_t struct_size;
    pycoll_xla_extension *extension_start;
    int64_t size;
    int32_t *types;
    void **args;
} pycoll_xla_args;

typedef struct pycoll_xla_rets {
    size_t struct_size;
    pycoll_xla_extension *extension_start;
    int64_t size;
    int32_t *types;
    void **rets;
} pycoll_xla_rets;

typedef struct pycoll_xla_attrs {
    size_t struct_size;
    pycoll_xla_extension *extension_start;
    int64_t size;
    int32_t *types;
    pycoll_xla_bytes **names;
    void **attrs;
} pycoll_xla_attrs;

typedef pycoll_xla_error *pycoll_xla_error_create_fn(pycoll_xla_error_create_args *args);

/* XLA_FFI_Api's head: the version, then the function table, of which we call only Error_Create (the first). */
typedef struct pycoll_xla_api {
    size_t struct_size;
    pycoll_xla_extension *extension_start;
    pycoll_xla_api_version api_version;
    const void *internal_api;
    pycoll_xla_error_create_fn *error_create;
} pycoll_xla_api;

#define PYCOLL_XLA_STAGE_EXECUTE 3

typedef struct pycoll_xla_call_frame {
    size_t struct_size;
    pycoll_xla_extension *extension_start;
    const pycoll_xla_api *api;
    void *ctx;
    int32_t stage;
    pycoll_xla_args args;
    pycoll_xla_rets rets;
    pycoll_xla_attrs attrs;
} pycoll_xla_call_frame;

/* The answer to the metadata query (XLA_FFI_Metadata and the extension that carries it). */
typedef struct pycoll_xla_metadata {
    size_t struct_size;
    pycoll_xla_api_version api_version;
    uint32_t traits;
} pycoll_xla_metadata;

typedef struct pycoll_xla_metadata_extension {
    pycoll_xla_extension extension_base;
    pycoll_xla_metadata *metadata;
} pycoll_xla_metadata_extension;

typedef pycoll_xla_error *pycoll_xla_handler(pycoll_xla_call_frame *frame);

#endif
