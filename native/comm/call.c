/* Checking a call description (pycoll/call.h) -- the one place: every entry point, blocking or queued, from C,
 * Python or JAX, runs its call through comm_check_call before anything is sent, and engines that run elsewhere
 * (a vendor library, a third-party plugin) have it checked by the same rules through pycoll_call_check, which
 * needs only the rank and the size. Argument errors do not break the communicator: they are caught identically
 * on every rank that made them. */
#include <stdio.h>

#include "algorithms/table.h"
#include "comm/comm_internal.h"
#include "kernels/complex_parts.h"
#include "kernels/reproducible.h"

void pycoll_call_init(pycoll_call_t *call, pycoll_coll_t collective)
{
    *call = (pycoll_call_t){.version = PYCOLL_CALL_VERSION, .size = sizeof *call, .collective = collective,
                            .op = PYCOLL_SUM, .algorithm = PYCOLL_ALGO_AUTO, .accuracy = PYCOLL_ACCURACY_FAST,
                            .root = -1, .dest = -1, .source = -1};
}

static pycoll_status_t invalid(char *error, size_t error_len, const char *fmt, const char *what, long long value)
{
    snprintf(error, error_len, fmt, what, value);
    return PYCOLL_ERR_INVALID;
}

/* The _v collectives' counts: one per rank, each >= 0, their sum small enough that its bytes -- up to 16 per
 * element as compensated partials -- fit in int64. *total gets the sum. */
static pycoll_status_t check_counts(const int64_t *counts, int32_t size, int64_t *total, char *error,
                                    size_t error_len)
{
    if (!counts)
        return invalid(error, error_len, "%s is NULL (%lld entries expected)", "counts", size);
    *total = 0;
    for (int32_t r = 0; r < size; r++) {
        if (counts[r] < 0) {
            snprintf(error, error_len, "counts[%d] must be >= 0, got %lld", (int)r, (long long)counts[r]);
            return PYCOLL_ERR_INVALID;
        }
        if (counts[r] > INT64_MAX / 32 - *total)
            return invalid(error, error_len, "%s: the sum is too large (rank %lld's entry overflows it)",
                           "counts", r);
        *total += counts[r];
    }
    return PYCOLL_OK;
}

/* What a _v collective's descriptor carries as its count: a fingerprint of every rank's count (FNV-1a, made
 * non-negative), so ranks that pass different counts disagree on the descriptor and meet as a mismatch
 * naming both sides (p2p.h) instead of sending blocks of lengths the receiver does not expect. */
static int64_t counts_fingerprint(const int64_t *counts, int32_t size)
{
    uint64_t h = 14695981039346656037ULL;
    for (int32_t r = 0; r < size; r++)
        for (int byte = 0; byte < 8; byte++)
            h = (h ^ (((uint64_t)counts[r] >> (8 * byte)) & 0xff)) * 1099511628211ULL;
    return (int64_t)(h & (uint64_t)INT64_MAX);
}

static pycoll_status_t wrong_count(char *error, size_t error_len, const pycoll_call_t *call, const char *field,
                                   int64_t got, const char *rule, int64_t expected)
{
    snprintf(error, error_len, "%s: %s must be %s = %lld, got %lld", pycoll_coll_name(call->collective), field,
             rule, (long long)expected, (long long)got);
    return PYCOLL_ERR_INVALID;
}

#define EXPECT(field, rule, expected)                                                                          \
    do {                                                                                                       \
        if (call->field != (expected))                                                                         \
            return wrong_count(error, error_len, call, #field, call->field, rule, (expected));                 \
    } while (0)

/* The counts against the collective (call.h's table; total: the _v collectives' sum of counts), and the count
 * the algorithms take. A buffer a rank does not use may be NULL there; its count is then 0. One case per
 * collective: a new one adds its case here. */
static pycoll_status_t check_shape(const pycoll_call_t *call, int32_t rank, int32_t size, int64_t total,
                                   comm_call_t *out, char *error, size_t error_len)
{
    const int is_root = call->root == rank;
    out->count = call->recv_count;
    switch (call->collective) {
    case PYCOLL_COLL_ALL_REDUCE:
        EXPECT(send_count, "recv_count", call->recv_count);
        return PYCOLL_OK;
    case PYCOLL_COLL_REDUCE_SCATTER:
        EXPECT(send_count, "size * recv_count", size * call->recv_count);
        return PYCOLL_OK;
    case PYCOLL_COLL_ALL_GATHER:
        out->count = call->send_count;
        EXPECT(recv_count, "size * send_count", size * call->send_count);
        return PYCOLL_OK;
    case PYCOLL_COLL_BROADCAST:
        if (call->sendbuf && call->sendbuf != call->recvbuf) {
            snprintf(error, error_len, "broadcast: in place in recvbuf; sendbuf must be NULL or recvbuf");
            return PYCOLL_ERR_INVALID;
        }
        EXPECT(send_count, "sendbuf ? recv_count : 0", call->sendbuf ? call->recv_count : 0);
        return PYCOLL_OK;
    case PYCOLL_COLL_REDUCE:
        out->count = call->send_count;
        EXPECT(recv_count, is_root || call->recvbuf ? "send_count" : "0 (no recvbuf)",
               is_root || call->recvbuf ? call->send_count : 0);
        return PYCOLL_OK;
    case PYCOLL_COLL_BARRIER:
        EXPECT(send_count, "0 (no buffers)", 0);
        EXPECT(recv_count, "0 (no buffers)", 0);
        return PYCOLL_OK;
    case PYCOLL_COLL_ALL_TO_ALL:
        out->count = call->send_count / size;
        if (call->send_count % size) {
            snprintf(error, error_len, "all_to_all: send_count must be size * k (a multiple of size %d), got %lld",
                     (int)size, (long long)call->send_count);
            return PYCOLL_ERR_INVALID;
        }
        EXPECT(recv_count, "send_count", call->send_count);
        return PYCOLL_OK;
    case PYCOLL_COLL_GATHER:
        out->count = call->send_count;
        EXPECT(recv_count, is_root || call->recvbuf ? "size * send_count" : "0 off the root",
               is_root || call->recvbuf ? size * call->send_count : 0);
        return PYCOLL_OK;
    case PYCOLL_COLL_SCATTER:
        EXPECT(send_count, is_root || call->sendbuf ? "size * recv_count" : "0 off the root",
               is_root || call->sendbuf ? size * call->recv_count : 0);
        return PYCOLL_OK;
    case PYCOLL_COLL_ALL_GATHER_V:
    case PYCOLL_COLL_REDUCE_SCATTER_V: {
        const int gathers = call->collective == PYCOLL_COLL_ALL_GATHER_V;
        char own[32]; /* this rank's entry, by number: ranks that disagree read their own */
        snprintf(own, sizeof own, "counts[%d]", (int)rank);
        EXPECT(send_count, gathers ? own : "sum(counts)", gathers ? call->counts[rank] : total);
        EXPECT(recv_count, gathers ? "sum(counts)" : own, gathers ? total : call->counts[rank]);
        out->count = 0;
        out->desc_count = counts_fingerprint(call->counts, size);
        return PYCOLL_OK;
    }
    case PYCOLL_COLL_SEND_RECV:
        /* check_rank made it a send (dest) or a receive (source), not both */
        out->count = call->dest >= 0 ? call->send_count : call->recv_count;
        if (call->dest >= 0)
            EXPECT(recv_count, "0 (a send)", 0);
        else
            EXPECT(send_count, "0 (a receive)", 0);
        return PYCOLL_OK;
    case PYCOLL_NUM_COLLS: /* not a collective: comm_check_call refused it before */
        break;
    } /* no default: -Wswitch names a collective of PYCOLL_COLLECTIVES (ids.h) that has no case here */
    return invalid(error, error_len, "%s: unknown id %lld", "collective", call->collective);
}

static pycoll_status_t check_rank(const pycoll_call_t *call, int32_t rank, int32_t size, char *error,
                                  size_t error_len)
{
    const pycoll_coll_t c = call->collective;
    const int rooted = c == PYCOLL_COLL_BROADCAST || c == PYCOLL_COLL_REDUCE || c == PYCOLL_COLL_GATHER ||
                       c == PYCOLL_COLL_SCATTER;
    if (rooted && (call->root < 0 || call->root >= size)) {
        snprintf(error, error_len, "root must be in [0, %d), got %d", (int)size, (int)call->root);
        return PYCOLL_ERR_INVALID;
    }
    if (!rooted && call->root != -1)
        return invalid(error, error_len, "%s: this collective has none, so -1, got %lld", "root", call->root);
    if (c != PYCOLL_COLL_SEND_RECV) {
        if (call->dest != -1 || call->source != -1)
            return invalid(error, error_len, "%s: only send_recv has them, so -1, got %lld", "dest and source",
                           call->dest != -1 ? call->dest : call->source);
        return PYCOLL_OK;
    }
    /* With neither rank, one buffer still says which the call is: its rank is the one missing (-1). */
    const int sends = call->dest != -1 || (call->source == -1 && call->sendbuf && !call->recvbuf);
    if ((call->dest == -1) == (call->source == -1) && (call->dest != -1 || !call->sendbuf == !call->recvbuf)) {
        snprintf(error, error_len, "send_recv: a send (dest) or a receive (source), one of them; got %s",
                 call->dest == -1 ? "neither" : "both");
        return PYCOLL_ERR_INVALID;
    }
    const int32_t peer = sends ? call->dest : call->source;
    if (peer < 0 || peer >= size || peer == rank) {
        snprintf(error, error_len, "%s must be another rank in [0, %d), got %d (this rank is %d)",
                 sends ? "dest" : "source", (int)size, (int)peer, (int)rank);
        return PYCOLL_ERR_INVALID;
    }
    return PYCOLL_OK;
}

/* Never a silent fallback: the caller named an algorithm this collective does not have. */
static pycoll_status_t algorithm_not_served(pycoll_coll_t collective, pycoll_algorithm_t algorithm, char *error,
                                            size_t error_len)
{
    int32_t n = 0;
    const pycoll_algorithm_info_t *has = pycoll_coll_algorithms(collective, &n);
    int used = snprintf(error, error_len, "algorithm %s has no %s; it runs as", pycoll_algorithm_name(algorithm),
                        pycoll_coll_name(collective));
    for (int32_t i = 0; i < n && used > 0 && (size_t)used < error_len; i++)
        used += snprintf(error + used, error_len - (size_t)used, "%s %s", i ? "," : "", has[i].name);
    return PYCOLL_ERR_INVALID;
}

/* What only the communicator knows of an algorithm: whether its transport runs it. */
static pycoll_status_t check_transport(const pycoll_comm_t *comm, pycoll_algorithm_t algorithm, char *error,
                                       size_t error_len)
{
    const pycoll_native_collectives_t *native = comm->p2p->ops->native;
    if (algorithm == PYCOLL_ALGO_SHM_SLOTS && comm->view) {
        snprintf(error, error_len,
                 "algorithm shm_slots runs only on the communicator made by init: a split runs pycoll's "
                 "algorithms over the same shared memory (use algorithm=\"auto\" or name one of them)");
        return PYCOLL_ERR_INVALID;
    }
    if (algorithm == PYCOLL_ALGO_SHM_SLOTS && !(native && native->algorithm == PYCOLL_ALGO_SHM_SLOTS)) {
        /* Never a silent fallback: the caller asked for what this transport cannot run. */
        snprintf(error, error_len,
                 "algorithm shm_slots runs only over the shared-memory transport (backend 'shm'); this communicator's "
                 "transport is %s", comm->p2p->ops->name ? comm->p2p->ops->name : "unnamed");
        return PYCOLL_ERR_INVALID;
    }
    return PYCOLL_OK;
}

/* min and max of a reduction need an order, and complex numbers have none (MPI and PyTorch refuse them too):
 * an argument error, raised alike on every rank, not a vendor-style "unsupported". */
static pycoll_status_t check_op(const pycoll_call_t *call, char *error, size_t error_len)
{
    const pycoll_coll_t c = call->collective;
    const int reduces = c == PYCOLL_COLL_ALL_REDUCE || c == PYCOLL_COLL_REDUCE_SCATTER || c == PYCOLL_COLL_REDUCE ||
                        c == PYCOLL_COLL_REDUCE_SCATTER_V;
    if (!reduces || !dtype_is_complex(call->dtype) || (call->op != PYCOLL_MIN && call->op != PYCOLL_MAX))
        return PYCOLL_OK;
    snprintf(error, error_len, "op %s is not defined for dtype %s: complex numbers have no order (sum, avg and "
             "prod are; reduce a real array, e.g. the absolute values, for %s)", pycoll_op_name(call->op),
             pycoll_dtype_name(call->dtype), pycoll_op_name(call->op));
    return PYCOLL_ERR_INVALID;
}

/* What reproducible mode covers (reproducible.c): sums and averages of float dtypes, by the collectives that
 * reduce into fixed blocks. Anything else is refused rather than run in another mode: the caller asked for bits
 * that do not move, and a silent fast sum would not give them. */
static pycoll_status_t check_reproducible(const pycoll_call_t *call, char *error, size_t error_len)
{
    const pycoll_coll_t c = call->collective;
    if (c != PYCOLL_COLL_ALL_REDUCE && c != PYCOLL_COLL_REDUCE_SCATTER && c != PYCOLL_COLL_REDUCE) {
        snprintf(error, error_len, "accuracy reproducible: %s is not supported (all_reduce, reduce_scatter and "
                 "reduce are; use accuracy fast or compensated)", pycoll_coll_name(c));
        return PYCOLL_ERR_UNSUPPORTED;
    }
    if (call->op != PYCOLL_SUM && call->op != PYCOLL_AVG) {
        snprintf(error, error_len, "accuracy reproducible: op %s is not supported (sum and avg are; %s is exact "
                 "in every mode, so use accuracy fast)", pycoll_op_name(call->op), pycoll_op_name(call->op));
        return PYCOLL_ERR_UNSUPPORTED;
    }
    if (!repro_limbs(complex_part_dtype(call->dtype))) { /* complex: part by part */
        snprintf(error, error_len, "accuracy reproducible: dtype %s is not supported (float16, bfloat16, float32, "
                 "float64, complex64 and complex128 are; integer sums are exact in every mode, so use accuracy fast)",
                 pycoll_dtype_name(call->dtype));
        return PYCOLL_ERR_UNSUPPORTED;
    }
    return PYCOLL_OK;
}

/* Every rule of call.h that needs only this rank and the size: the communicator's check and pycoll_call_check
 * alike. *out gets the count the algorithms take. */
static pycoll_status_t check_call(const pycoll_call_t *call, int32_t rank, int32_t size, comm_call_t *out,
                                  char *error, size_t error_len)
{
    if (!call) {
        snprintf(error, error_len, "call is NULL");
        return PYCOLL_ERR_INVALID;
    }
    /* First, before reading any other field: a call of another version lays them out differently. */
    if (call->version != PYCOLL_CALL_VERSION || call->size != sizeof *call) {
        snprintf(error, error_len, "call: version %u of %u bytes, this library speaks version %u of %u bytes "
                 "(fill it with pycoll_call_init)", (unsigned)call->version, (unsigned)call->size,
                 (unsigned)PYCOLL_CALL_VERSION, (unsigned)sizeof *call);
        return PYCOLL_ERR_INVALID;
    }
    if ((unsigned)call->collective >= PYCOLL_NUM_COLLS)
        return invalid(error, error_len, "%s: unknown id %lld", "collective", call->collective);
    if (size < 1 || rank < 0 || rank >= size) {
        snprintf(error, error_len, "call checked for rank %d of %d ranks: no such rank", (int)rank, (int)size);
        return PYCOLL_ERR_INVALID;
    }
    const int takes_counts = call->collective == PYCOLL_COLL_ALL_GATHER_V ||
                             call->collective == PYCOLL_COLL_REDUCE_SCATTER_V;
    int64_t total = 0;
    if (takes_counts) { /* first: the send and recv counts derive from them */
        pycoll_status_t st = check_counts(call->counts, size, &total, error, error_len);
        if (st != PYCOLL_OK)
            return st;
    }
    /* Bounded so that size * count and its bytes -- up to 16 per element as compensated partials -- fit. */
    const int64_t most = INT64_MAX / 32 / size;
    const int64_t counts[2] = {call->send_count, call->recv_count};
    for (int i = 0; i < 2; i++)
        if (counts[i] < 0 || counts[i] > most) {
            snprintf(error, error_len, "%s must be in [0, %lld], got %lld", i ? "recv_count" : "send_count",
                     (long long)most, (long long)counts[i]);
            return PYCOLL_ERR_INVALID;
        }
    const void *buffers[2] = {call->sendbuf, call->recvbuf};
    for (int i = 0; i < 2; i++)
        if (counts[i] > 0 && !buffers[i]) {
            snprintf(error, error_len, "%s is NULL for %lld elements (%s)", i ? "recvbuf" : "sendbuf",
                     (long long)counts[i], i ? "recv_count" : "send_count");
            return PYCOLL_ERR_INVALID;
        }
    if (call->counts && !takes_counts) {
        snprintf(error, error_len, "counts: only the _v collectives take them; NULL for %s",
                 pycoll_coll_name(call->collective));
        return PYCOLL_ERR_INVALID;
    }
    if ((unsigned)call->dtype >= PYCOLL_NUM_DTYPES)
        return invalid(error, error_len, "%s: unknown id %lld", "dtype", call->dtype);
    if ((unsigned)call->op >= PYCOLL_NUM_OPS)
        return invalid(error, error_len, "%s: unknown id %lld", "op", call->op);
    if ((unsigned)call->algorithm >= PYCOLL_NUM_ALGOS)
        return invalid(error, error_len, "%s: unknown id %lld", "algorithm", call->algorithm);
    if ((unsigned)call->accuracy >= PYCOLL_NUM_ACCURACIES)
        return invalid(error, error_len, "%s: unknown id %lld", "accuracy", call->accuracy);
    *out = (comm_call_t){.args = *call};
    pycoll_status_t st = check_op(call, error, error_len);
    if (st == PYCOLL_OK && call->accuracy == PYCOLL_ACCURACY_REPRODUCIBLE)
        st = check_reproducible(call, error, error_len);
    if (st == PYCOLL_OK)
        st = check_rank(call, rank, size, error, error_len);
    if (st == PYCOLL_OK && call->algorithm != PYCOLL_ALGO_AUTO && call->collective != PYCOLL_COLL_SEND_RECV &&
        !algorithm_serves(algorithm_entry(call->algorithm), call->collective))
        st = algorithm_not_served(call->collective, call->algorithm, error, error_len);
    if (st == PYCOLL_OK)
        st = check_shape(call, rank, size, total, out, error, error_len);
    if (st == PYCOLL_OK && !takes_counts)
        out->desc_count = out->count;
    return st;
}

pycoll_status_t pycoll_call_check(const pycoll_call_t *call, int32_t rank, int32_t size, char *why, size_t why_len)
{
    comm_call_t checked;
    char unused[1];
    return check_call(call, rank, size, &checked, why ? why : unused, why ? why_len : sizeof unused);
}

pycoll_status_t comm_check_call(const pycoll_comm_t *comm, const pycoll_call_t *call, comm_call_t *out, char *error,
                                size_t error_len)
{
    pycoll_status_t st = check_call(call, comm->p2p->rank, comm->p2p->size, out, error, error_len);
    return st == PYCOLL_OK ? check_transport(comm, call->algorithm, error, error_len) : st;
}
