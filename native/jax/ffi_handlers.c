/* XLA FFI handlers for pycoll.jax: the custom calls a jitted JAX function on the CPU makes into libpycoll.
 *
 * Each handler takes one array (plus, in any position, the ordering token JAX threads through ordered effects,
 * which carries no data) and returns one array (plus the token), with scalar attributes: `comm` (the
 * pycoll_comm_t * as a 64-bit integer, from NativeComm.handle), and as the collective needs, `op`, `root`,
 * `accuracy`, `algorithm`. The layouts come from xla_ffi_subset.h; every struct's size and the API version are
 * checked here before anything is read, so that a jaxlib whose FFI differs gets an XLA error naming the
 * mismatch. A collective that fails returns an XLA error carrying pycoll's message (the peer, the mismatch,
 * the deadline), which JAX raises from the jitted call. */
#include <stdio.h>
#include <string.h>

#include "jax/xla_ffi_subset.h"
#include "pycoll/call.h"

PYCOLL_API pycoll_xla_handler *pycoll_jax_ffi_handler(const char *name);
PYCOLL_API void pycoll_jax_ffi_version(int *major, int *minor);


static pycoll_xla_error *fail(const pycoll_xla_call_frame *frame, int errc, const char *fmt, const char *a,
                              const char *b)
{
    char message[1024];
    snprintf(message, sizeof message, fmt, a, b);
    pycoll_xla_error_create_args args;
    memset(&args, 0, sizeof args);
    args.struct_size = PYCOLL_XLA_SIZE_UPTO(pycoll_xla_error_create_args, errc);
    args.message = message;
    args.errc = errc;
    return frame->api->error_create(&args);
}

/* What a pycoll status becomes across XLA's FFI: XLA's error code. The status's own name (pycoll_status_name)
 * heads the message, so that pycoll.jax raises the exception pycoll.errors.STATUS_CLASSES gives it. A status
 * not listed is XLA's INTERNAL. */
static const int xla_code[] = {
    [PYCOLL_ERR_INVALID] = PYCOLL_XLA_INVALID_ARGUMENT,      [PYCOLL_ERR_UNSUPPORTED] = PYCOLL_XLA_UNIMPLEMENTED,
    [PYCOLL_ERR_TIMEOUT] = PYCOLL_XLA_DEADLINE_EXCEEDED,     [PYCOLL_ERR_PEER_FAILURE] = PYCOLL_XLA_UNAVAILABLE,
    [PYCOLL_ERR_MISMATCH] = PYCOLL_XLA_FAILED_PRECONDITION,  [PYCOLL_ERR_CLOSED] = PYCOLL_XLA_FAILED_PRECONDITION,
    [PYCOLL_ERR_NOMEM] = PYCOLL_XLA_RESOURCE_EXHAUSTED,      [PYCOLL_ERR_INTERRUPTED] = PYCOLL_XLA_CANCELLED,
    [PYCOLL_ERR_BUSY] = PYCOLL_XLA_RESOURCE_EXHAUSTED,       [PYCOLL_ERR_FORKED] = PYCOLL_XLA_FAILED_PRECONDITION,
    [PYCOLL_ERR_REVOKED] = PYCOLL_XLA_ABORTED,
};

/* The error of collective `name`, which failed with st: "pycoll <status name>: <name>: <detail>". */
static pycoll_xla_error *fail_status(const pycoll_xla_call_frame *frame, pycoll_status_t st, const char *name,
                                     const char *detail)
{
    const int listed = (int)st > 0 && (size_t)st < sizeof xla_code / sizeof xla_code[0] && xla_code[st];
    char head[96];
    snprintf(head, sizeof head, "pycoll %s: %s", pycoll_status_name(st), name);
    return fail(frame, listed ? xla_code[st] : PYCOLL_XLA_INTERNAL, "%s: %s", head, detail);
}

static int to_pycoll_dtype(int32_t xla, pycoll_dtype_t *out)
{
    switch (xla) {
    case PYCOLL_XLA_S8: *out = PYCOLL_INT8; return 1;
    case PYCOLL_XLA_U8: *out = PYCOLL_UINT8; return 1;
    case PYCOLL_XLA_S32: *out = PYCOLL_INT32; return 1;
    case PYCOLL_XLA_S64: *out = PYCOLL_INT64; return 1;
    case PYCOLL_XLA_F16: *out = PYCOLL_FLOAT16; return 1;
    case PYCOLL_XLA_BF16: *out = PYCOLL_BFLOAT16; return 1;
    case PYCOLL_XLA_F32: *out = PYCOLL_FLOAT32; return 1;
    case PYCOLL_XLA_F64: *out = PYCOLL_FLOAT64; return 1;
    default: return 0;
    }
}

/* An integer scalar attribute by name; 0 if absent or not an integer scalar. */
static int int_attr(const pycoll_xla_attrs *attrs, const char *name, int64_t *value)
{
    size_t len = strlen(name);
    for (int64_t i = 0; i < attrs->size; i++) {
        const pycoll_xla_bytes *n = attrs->names[i];
        if (n == NULL || n->len != len || memcmp(n->ptr, name, len) != 0)
            continue;
        if (attrs->types[i] != PYCOLL_XLA_ATTR_SCALAR)
            return 0;
        const pycoll_xla_scalar *s = attrs->attrs[i];
        switch (s->dtype) {
        case PYCOLL_XLA_S32: { int32_t v; memcpy(&v, s->value, sizeof v); *value = v; return 1; }
        case PYCOLL_XLA_S64: { int64_t v; memcpy(&v, s->value, sizeof v); *value = v; return 1; }
        case PYCOLL_XLA_U32: { uint32_t v; memcpy(&v, s->value, sizeof v); *value = v; return 1; }
        case PYCOLL_XLA_U64: { uint64_t v; memcpy(&v, s->value, sizeof v); *value = (int64_t)v; return 1; }
        default: return 0;
        }
    }
    return 0;
}

static int64_t element_count(const pycoll_xla_buffer *b)
{
    int64_t n = 1;
    for (int64_t d = 0; d < b->rank; d++)
        n *= b->dims[d];
    return n;
}

/* The one data buffer among `count` entries (the token, dtype TOKEN, is skipped); NULL if not exactly one. */
static const pycoll_xla_buffer *data_buffer(int64_t count, int32_t *types, void **entries, int32_t buffer_type,
                                            int *bad_size)
{
    const pycoll_xla_buffer *found = NULL;
    for (int64_t i = 0; i < count; i++) {
        if (types[i] != buffer_type)
            return NULL;
        const pycoll_xla_buffer *b = entries[i];
        if (b->struct_size < PYCOLL_XLA_SIZE_UPTO(pycoll_xla_buffer, dims)) {
            *bad_size = 1;
            return NULL;
        }
        if (b->dtype == PYCOLL_XLA_TOKEN)
            continue;
        if (found)
            return NULL;
        found = b;
    }
    return found;
}

static pycoll_xla_error *answer_metadata(pycoll_xla_call_frame *frame)
{
    pycoll_xla_metadata_extension *ext = (pycoll_xla_metadata_extension *)frame->extension_start;
    if (ext->extension_base.struct_size < PYCOLL_XLA_SIZE_UPTO(pycoll_xla_metadata_extension, metadata) ||
        ext->metadata == NULL || ext->metadata->struct_size < PYCOLL_XLA_SIZE_UPTO(pycoll_xla_metadata, traits))
        return fail(frame, PYCOLL_XLA_INVALID_ARGUMENT,
                    "pycoll.jax: XLA's FFI metadata query has an unexpected layout%s%s (pycoll's handlers follow "
                    "FFI API 0.3, jaxlib 0.10); check the installed jaxlib", "", "");
    ext->metadata->api_version.struct_size = PYCOLL_XLA_SIZE_UPTO(pycoll_xla_api_version, minor_version);
    ext->metadata->api_version.extension_start = NULL;
    ext->metadata->api_version.major_version = PYCOLL_XLA_FFI_MAJOR;
    ext->metadata->api_version.minor_version = PYCOLL_XLA_FFI_MINOR;
    ext->metadata->traits = 0; /* not command-buffer compatible: a collective is not a replayable launch */
    return NULL;
}

/* The call one custom call makes: its argument is the send buffer and its result the receive buffer of every
 * collective (pycoll_comm_run checks their element counts against it), but broadcast's, which runs in place in
 * the result. */
static pycoll_call_t describe(pycoll_coll_t coll, const pycoll_xla_buffer *in, const pycoll_xla_buffer *out,
                              pycoll_dtype_t dtype, int64_t op, int64_t root, int64_t accuracy, int64_t algorithm)
{
    pycoll_call_t call;
    pycoll_call_init(&call, coll);
    call.dtype = dtype;
    call.recvbuf = out->data;
    call.recv_count = element_count(out);
    if (coll != PYCOLL_COLL_BROADCAST) {
        call.sendbuf = in->data;
        call.send_count = element_count(in);
    }
    if (coll == PYCOLL_COLL_ALL_REDUCE || coll == PYCOLL_COLL_REDUCE_SCATTER || coll == PYCOLL_COLL_REDUCE) {
        call.op = (pycoll_op_t)op;
        call.accuracy = (pycoll_accuracy_t)accuracy;
    }
    if (coll == PYCOLL_COLL_ALL_REDUCE || coll == PYCOLL_COLL_REDUCE_SCATTER)
        call.algorithm = (pycoll_algorithm_t)algorithm;
    if (coll == PYCOLL_COLL_BROADCAST || coll == PYCOLL_COLL_REDUCE)
        call.root = (int32_t)root;
    return call;
}

/* The collective itself, on a communicator held (pycoll_comm_acquire) for the call. */
static pycoll_xla_error *run_on(pycoll_xla_call_frame *frame, pycoll_coll_t coll, pycoll_comm_t *comm,
                                const pycoll_xla_buffer *in, const pycoll_xla_buffer *out, pycoll_dtype_t dtype,
                                int64_t op, int64_t root, int64_t accuracy, int64_t algorithm)
{
    const char *name = pycoll_coll_name(coll);
    const int32_t rank = pycoll_comm_rank(comm);
    const int64_t n_in = element_count(in), n_out = element_count(out);
    const size_t esize = pycoll_dtype_size(dtype);
    if (coll == PYCOLL_COLL_BROADCAST && n_in != n_out)
        return fail(frame, PYCOLL_XLA_INVALID_ARGUMENT,
                    "pycoll.jax %s: the argument's and result's element counts differ%s", name, "");
    if (coll == PYCOLL_COLL_BROADCAST && rank == root && out->data != in->data && n_in > 0)
        memcpy(out->data, in->data, (size_t)n_in * esize);

    /* The collective runs on the communicator's progress thread (a work), and this XLA thread waits for it:
     * faster from XLA's thread than a blocking call, and it never runs the caller's interrupt check (which for a
     * communicator made in Python takes the GIL) on XLA's thread. */
    const pycoll_call_t call = describe(coll, in, out, dtype, op, root, accuracy, algorithm);
    pycoll_work_t *work = NULL;
    pycoll_status_t st = pycoll_comm_run(comm, &call, &work);
    if (st != PYCOLL_OK) /* refused before it started: the communicator says why */
        return fail_status(frame, st, name, pycoll_comm_error(comm));
    /* Every collective has the communicator's deadline, after which it fails: this loop ends. */
    while (!pycoll_work_wait(work, 1.0)) {
    }
    st = pycoll_work_status(work);
    if (st != PYCOLL_OK) {
        pycoll_xla_error *err = fail_status(frame, st, name, pycoll_work_error(work));
        pycoll_work_free(work);
        return err;
    }
    pycoll_work_free(work);
    /* reduce: the result on root; zeros elsewhere (what makes reduce and broadcast each other's transpose). */
    if (coll == PYCOLL_COLL_REDUCE && rank != root && n_out > 0)
        memset(out->data, 0, (size_t)n_out * esize);
    return NULL;
}

static pycoll_xla_error *run(pycoll_xla_call_frame *frame, pycoll_coll_t coll)
{
    const char *name = pycoll_coll_name(coll);
    /* Without a usable api there is no way to report anything: XLA always passes one. */
    if (frame == NULL || frame->api == NULL ||
        frame->api->struct_size < PYCOLL_XLA_SIZE_UPTO(pycoll_xla_api, error_create) ||
        frame->api->error_create == NULL)
        return NULL;
    if (frame->api->api_version.major_version != PYCOLL_XLA_FFI_MAJOR) {
        char version[64];
        snprintf(version, sizeof version, "%d.%d", frame->api->api_version.major_version,
                 frame->api->api_version.minor_version);
        return fail(frame, PYCOLL_XLA_FAILED_PRECONDITION,
                    "pycoll.jax %s: this jaxlib's FFI API is version %s; pycoll's handlers follow 0.x (jaxlib "
                    "0.10): install a matching jaxlib or rebuild pycoll", name, version);
    }
    if (frame->struct_size < PYCOLL_XLA_SIZE_UPTO(pycoll_xla_call_frame, attrs))
        return fail(frame, PYCOLL_XLA_FAILED_PRECONDITION,
                    "pycoll.jax %s: XLA's call frame is smaller than pycoll expects%s; check the installed jaxlib",
                    name, "");
    if (frame->extension_start != NULL && frame->extension_start->type == PYCOLL_XLA_EXTENSION_METADATA)
        return answer_metadata(frame);
    if (frame->stage != PYCOLL_XLA_STAGE_EXECUTE)
        return fail(frame, PYCOLL_XLA_INVALID_ARGUMENT, "pycoll.jax %s: called at an unexpected stage%s", name,
                    "");
    if (frame->args.struct_size < PYCOLL_XLA_SIZE_UPTO(pycoll_xla_args, args) ||
        frame->rets.struct_size < PYCOLL_XLA_SIZE_UPTO(pycoll_xla_rets, rets) ||
        frame->attrs.struct_size < PYCOLL_XLA_SIZE_UPTO(pycoll_xla_attrs, attrs))
        return fail(frame, PYCOLL_XLA_FAILED_PRECONDITION,
                    "pycoll.jax %s: XLA's argument lists are smaller than pycoll expects%s; check the installed "
                    "jaxlib", name, "");

    int bad_size = 0;
    const pycoll_xla_buffer *in = data_buffer(frame->args.size, frame->args.types, frame->args.args,
                                              PYCOLL_XLA_ARG_BUFFER, &bad_size);
    const pycoll_xla_buffer *out = data_buffer(frame->rets.size, frame->rets.types, frame->rets.rets,
                                               PYCOLL_XLA_RET_BUFFER, &bad_size);
    if (bad_size)
        return fail(frame, PYCOLL_XLA_FAILED_PRECONDITION,
                    "pycoll.jax %s: XLA's buffer descriptor is smaller than pycoll expects%s; check the installed "
                    "jaxlib", name, "");
    if (in == NULL || out == NULL)
        return fail(frame, PYCOLL_XLA_INVALID_ARGUMENT,
                    "pycoll.jax %s: expected one array argument and one array result%s (call it through "
                    "pycoll.jax)", name, "");

    int64_t handle = 0, op = PYCOLL_SUM, root = 0, accuracy = PYCOLL_ACCURACY_FAST, algorithm = PYCOLL_ALGO_AUTO;
    if (!int_attr(&frame->attrs, "comm", &handle) || handle == 0)
        return fail(frame, PYCOLL_XLA_INVALID_ARGUMENT,
                    "pycoll.jax %s: missing the integer attribute `comm`%s (call it through pycoll.jax)", name, "");
    int_attr(&frame->attrs, "op", &op);
    int_attr(&frame->attrs, "root", &root);
    int_attr(&frame->attrs, "accuracy", &accuracy);
    int_attr(&frame->attrs, "algorithm", &algorithm);
    if (op < 0 || op >= PYCOLL_NUM_OPS || accuracy < 0 || accuracy >= PYCOLL_NUM_ACCURACIES || algorithm < 0 ||
        algorithm >= PYCOLL_NUM_ALGOS || root < INT32_MIN || root > INT32_MAX)
        return fail(frame, PYCOLL_XLA_INVALID_ARGUMENT,
                    "pycoll.jax %s: attribute op, accuracy, algorithm or root out of range%s", name, "");

    pycoll_dtype_t dtype;
    if (in->dtype != out->dtype || !to_pycoll_dtype(in->dtype, &dtype))
        return fail(frame, PYCOLL_XLA_INVALID_ARGUMENT,
                    "pycoll.jax %s: unsupported element type%s (int8, uint8, int32, int64, float16, bfloat16, "
                    "float32, float64)", name, "");

    /* By id, not address: the program may run after Python closed the communicator (CommunicatorClosed then),
     * and its destroy waits until this call releases it. */
    pycoll_comm_t *comm = pycoll_comm_acquire((uint64_t)handle);
    if (comm == NULL)
        return fail_status(frame, PYCOLL_ERR_CLOSED, name,
                           "the communicator this program was compiled with is closed");
    pycoll_xla_error *err = run_on(frame, coll, comm, in, out, dtype, op, root, accuracy, algorithm);
    pycoll_comm_release(comm);
    return err;
}

static pycoll_xla_error *all_reduce_handler(pycoll_xla_call_frame *f) { return run(f, PYCOLL_COLL_ALL_REDUCE); }
static pycoll_xla_error *reduce_scatter_handler(pycoll_xla_call_frame *f) { return run(f, PYCOLL_COLL_REDUCE_SCATTER); }
static pycoll_xla_error *all_gather_handler(pycoll_xla_call_frame *f) { return run(f, PYCOLL_COLL_ALL_GATHER); }
static pycoll_xla_error *broadcast_handler(pycoll_xla_call_frame *f) { return run(f, PYCOLL_COLL_BROADCAST); }
static pycoll_xla_error *reduce_handler(pycoll_xla_call_frame *f) { return run(f, PYCOLL_COLL_REDUCE); }
static pycoll_xla_error *all_to_all_handler(pycoll_xla_call_frame *f) { return run(f, PYCOLL_COLL_ALL_TO_ALL); }

/* The handler for a collective by name (pycoll_coll_name's), NULL for one XLA has no handler for. */
pycoll_xla_handler *pycoll_jax_ffi_handler(const char *name)
{
    static const struct {
        pycoll_coll_t coll;
        pycoll_xla_handler *handler;
    } handlers[] = {{PYCOLL_COLL_ALL_REDUCE, all_reduce_handler}, {PYCOLL_COLL_REDUCE_SCATTER, reduce_scatter_handler},
                    {PYCOLL_COLL_ALL_GATHER, all_gather_handler}, {PYCOLL_COLL_BROADCAST, broadcast_handler},
                    {PYCOLL_COLL_REDUCE, reduce_handler},         {PYCOLL_COLL_ALL_TO_ALL, all_to_all_handler}};
    for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
        if (name != NULL && strcmp(name, pycoll_coll_name(handlers[i].coll)) == 0)
            return handlers[i].handler;
    return NULL;
}

void pycoll_jax_ffi_version(int *major, int *minor)
{
    *major = PYCOLL_XLA_FFI_MAJOR;
    *minor = PYCOLL_XLA_FFI_MINOR;
}
