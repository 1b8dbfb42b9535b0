/* The communicator: numbers collectives, describes each one on the wire, sets its deadline, asks the decision
 * (native/algorithms/decision.c) which algorithm runs, hands the algorithm its context (options and scratch,
 * native/algorithms/context.h), and stays broken after the first error (a half-finished collective leaves
 * peers in unknown states, so continuing would risk silently wrong data). */
#include <stdio.h>
#include <stdlib.h>

#include "algorithms/collectives.h"
#include "algorithms/reduction.h"
#include "algorithms/schedule.h"
#include "pycoll/comm.h"

struct pycoll_comm {
    pycoll_p2p_t *p2p;
    coll_ctx_t ctx; /* p2p, segment size and the algorithms' scratch, kept between collectives */
    pycoll_comm_options_t options;
    uint64_t seq;
    pycoll_cost_model_t model;
    pycoll_algorithm_t last_algorithm;
    int32_t *host_of; /* the host map (pycoll_comm_set_hosts), NULL: one host; ctx.host_of points here */
    int32_t hosts, max_local; /* its shape, for the decision: 1 and size without a map */
    int finalized;
    char error[PYCOLL_ERROR_LEN + 64]; /* room for a prefix before the transport's message */
};

void pycoll_comm_options_init(pycoll_comm_options_t *options)
{
    *options = (pycoll_comm_options_t){.version = PYCOLL_COMM_OPTIONS_VERSION,
                                       .timeout_s = PYCOLL_DEFAULT_TIMEOUT_S,
                                       .segment_bytes = PYCOLL_DEFAULT_SEGMENT_BYTES};
}

pycoll_status_t pycoll_comm_set_options(pycoll_comm_t *comm, const pycoll_comm_options_t *options)
{
    if (options->version != PYCOLL_COMM_OPTIONS_VERSION) {
        snprintf(comm->error, sizeof comm->error, "options: version %u, this library speaks %u",
                 (unsigned)options->version, (unsigned)PYCOLL_COMM_OPTIONS_VERSION);
        return PYCOLL_ERR_INVALID;
    }
    pycoll_comm_options_t o = *options;
    if (!(o.timeout_s > 0))
        o.timeout_s = PYCOLL_DEFAULT_TIMEOUT_S;
    if (o.segment_bytes <= 0)
        o.segment_bytes = PYCOLL_DEFAULT_SEGMENT_BYTES;
    if (o.spin_ns < 0)
        o.spin_ns = 0;
    comm->options = o;
    comm->ctx.segment_bytes = o.segment_bytes;
    comm->p2p->spin_ns = o.spin_ns;
    return PYCOLL_OK;
}

void pycoll_comm_get_options(const pycoll_comm_t *comm, pycoll_comm_options_t *options)
{
    *options = comm->options;
}

static pycoll_status_t create_error(char *error, size_t error_len, pycoll_status_t status, const char *message)
{
    if (error && error_len > 0)
        snprintf(error, error_len, "%s", message);
    return status;
}

pycoll_status_t pycoll_comm_create(pycoll_comm_t **out, pycoll_p2p_t *p2p, const pycoll_comm_options_t *options,
                                   char *error, size_t error_len)
{
    *out = NULL;
    create_error(error, error_len, PYCOLL_OK, "");
    if (!p2p || !p2p->ops)
        return create_error(error, error_len, PYCOLL_ERR_INVALID, "comm_create: no transport");
    /* Checked first, before anything reads past ops->version: a transport of another version lays out
     * pycoll_p2p_t and its ops differently, so using it would read garbage. */
    if (p2p->ops->version != PYCOLL_P2P_VERSION) {
        char message[160];
        snprintf(message, sizeof message,
                 "comm_create: transport speaks p2p ABI version %u, this libpycoll speaks %u; rebuild the "
                 "transport against this pycoll's headers",
                 (unsigned)p2p->ops->version, (unsigned)PYCOLL_P2P_VERSION);
        return create_error(error, error_len, PYCOLL_ERR_INVALID, message);
    }
    pycoll_comm_t *comm = calloc(1, sizeof *comm);
    if (!comm)
        return create_error(error, error_len, PYCOLL_ERR_NOMEM, "comm_create: out of memory");
    comm->p2p = p2p;
    comm->ctx.p2p = p2p;
    comm->hosts = 1;
    comm->max_local = p2p->size;
    pycoll_default_cost_model(&comm->model);
    pycoll_comm_options_t defaults;
    pycoll_comm_options_init(&defaults);
    pycoll_status_t status = pycoll_comm_set_options(comm, options ? options : &defaults);
    if (status != PYCOLL_OK) {
        create_error(error, error_len, status, comm->error);
        free(comm);
        return status;
    }
    *out = comm;
    return PYCOLL_OK;
}

pycoll_status_t pycoll_comm_finalize(pycoll_comm_t *comm, double linger_s)
{
    pycoll_p2p_t *p2p = comm->p2p;
    comm->error[0] = 0;
    if (comm->finalized || p2p->status != PYCOLL_OK || !p2p->ops->finalize)
        return PYCOLL_OK;
    comm->finalized = 1;
    return p2p->ops->finalize(p2p, pycoll_now_ns() + (int64_t)((linger_s > 0 ? linger_s : 0) * 1e9));
}

void pycoll_comm_destroy(pycoll_comm_t *comm)
{
    if (!comm)
        return;
    comm_workspace_release(&comm->ctx); /* first: a device table's free may need the transport's device */
    comm->p2p->ops->destroy(comm->p2p);
    free(comm->host_of);
    free(comm);
}

int32_t pycoll_comm_rank(const pycoll_comm_t *comm) { return comm->p2p->rank; }
int32_t pycoll_comm_size(const pycoll_comm_t *comm) { return comm->p2p->size; }
void pycoll_comm_set_timeout(pycoll_comm_t *comm, double timeout_s)
{
    comm->options.timeout_s = timeout_s > 0 ? timeout_s : PYCOLL_DEFAULT_TIMEOUT_S;
}

void pycoll_comm_set_cost_model(pycoll_comm_t *comm, const pycoll_cost_model_t *model) { comm->model = *model; }

/* How many hosts a (validated) map names, and the most ranks any of them has; 1 and size without a map. */
static void host_shape(const int32_t *host_of, int32_t size, int32_t *hosts, int32_t *max_local)
{
    *hosts = 1;
    *max_local = size;
    int32_t *ranks_on = host_of && size > 0 ? calloc((size_t)size, sizeof *ranks_on) : NULL;
    if (!ranks_on)
        return; /* no map, or no memory for the count: decide as for one host (a choice, never an error) */
    *hosts = *max_local = 0;
    for (int32_t r = 0; r < size; r++) {
        int32_t n = ++ranks_on[host_of[r]];
        *hosts += n == 1;
        *max_local = n > *max_local ? n : *max_local;
    }
    free(ranks_on);
}

pycoll_status_t pycoll_comm_set_hosts(pycoll_comm_t *comm, const int32_t *host_of)
{
    const int32_t size = comm->p2p->size;
    comm->error[0] = 0;
    int32_t *copy = NULL;
    if (host_of) {
        for (int32_t r = 0; r < size; r++)
            if (host_of[r] < 0 || host_of[r] >= size) {
                snprintf(comm->error, sizeof comm->error, "hosts: rank %d's host is %d, expected 0..%d", (int)r,
                         (int)host_of[r], (int)size - 1);
                return PYCOLL_ERR_INVALID;
            }
        copy = malloc((size_t)size * sizeof *copy);
        if (!copy) {
            snprintf(comm->error, sizeof comm->error, "hosts: out of memory");
            return PYCOLL_ERR_NOMEM;
        }
        for (int32_t r = 0; r < size; r++)
            copy[r] = host_of[r];
    }
    free(comm->host_of);
    comm->host_of = copy;
    comm->ctx.host_of = copy;
    host_shape(copy, size, &comm->hosts, &comm->max_local);
    return PYCOLL_OK;
}
pycoll_algorithm_t pycoll_comm_last_algorithm(const pycoll_comm_t *comm) { return comm->last_algorithm; }

const char *pycoll_comm_error(const pycoll_comm_t *comm)
{
    return comm->error[0] ? comm->error : comm->p2p->error;
}

int32_t pycoll_comm_failed_rank(const pycoll_comm_t *comm) { return comm->p2p->failed_rank; }

static pycoll_status_t invalid(pycoll_comm_t *comm, const char *fmt, const char *what, long long value)
{
    snprintf(comm->error, sizeof comm->error, fmt, what, value);
    return PYCOLL_ERR_INVALID;
}

/* Check arguments and stamp the collective on p2p. Argument errors do not break the communicator: they are
 * caught before anything is sent, identically on every rank that made them. */
static pycoll_status_t begin(pycoll_comm_t *comm, pycoll_coll_t coll, int64_t count, pycoll_dtype_t dtype,
                             pycoll_op_t op, pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy, int32_t root)
{
    pycoll_p2p_t *p2p = comm->p2p;
    comm->error[0] = 0;
    if (p2p->status != PYCOLL_OK) {
        snprintf(comm->error, sizeof comm->error, "communicator is unusable after an earlier error: %s", p2p->error);
        return PYCOLL_ERR_CLOSED;
    }
    if (comm->finalized) {
        snprintf(comm->error, sizeof comm->error, "communicator is finalized (closed)");
        return PYCOLL_ERR_CLOSED;
    }
    if (count < 0)
        return invalid(comm, "%s must be >= 0, got %lld", "count", count);
    if ((unsigned)dtype >= PYCOLL_NUM_DTYPES)
        return invalid(comm, "%s: unknown id %lld", "dtype", dtype);
    if ((unsigned)op >= PYCOLL_NUM_OPS)
        return invalid(comm, "%s: unknown id %lld", "op", op);
    if ((unsigned)algorithm >= PYCOLL_NUM_ALGOS)
        return invalid(comm, "%s: unknown id %lld", "algorithm", algorithm);
    if ((unsigned)accuracy >= PYCOLL_NUM_ACCURACIES)
        return invalid(comm, "%s: unknown id %lld", "accuracy", accuracy);
    if (root != -1 && (root < 0 || root >= p2p->size))
        return invalid(comm, "%s out of range: %lld", "root", root);
    const pycoll_native_collectives_t *native = p2p->ops->native;
    if (algorithm == PYCOLL_ALGO_SHM && !(native && native->algorithm == PYCOLL_ALGO_SHM)) {
        /* Never a silent fallback: the caller asked for what this transport cannot run. */
        snprintf(comm->error, sizeof comm->error,
                 "algorithm shm runs only over the shared-memory transport (backend 'shm'); this communicator's "
                 "transport is %s", p2p->ops->name ? p2p->ops->name : "unnamed");
        return PYCOLL_ERR_INVALID;
    }
    algorithm = pycoll_decide_algorithm_hosts(&comm->model, coll, algorithm, p2p->size, comm->hosts, comm->max_local,
                                              count * (int64_t)pycoll_dtype_size(dtype), native);
    comm->last_algorithm = algorithm;
    pycoll_coll_desc_t desc = {.seq = ++comm->seq, .history = pycoll_history_next(&p2p->desc), .count = count,
                               .root = root, .coll = (uint8_t)coll, .dtype = (uint8_t)dtype, .op = (uint8_t)op,
                               .algorithm = (uint8_t)algorithm, .accuracy = (uint8_t)accuracy};
    p2p->prev_desc = p2p->desc;
    p2p->desc = desc;
    p2p->deadline_ns = pycoll_now_ns() + (int64_t)(comm->options.timeout_s * 1e9);
    return PYCOLL_OK;
}

/* Whether the collective begin() stamped resolved to the transport's native table (p2p.h). */
static int runs_native(const pycoll_comm_t *comm)
{
    const pycoll_native_collectives_t *native = comm->p2p->ops->native;
    return native && comm->p2p->desc.algorithm == (uint8_t)native->algorithm;
}

/* After an algorithm returns: an error breaks the communicator and is announced to the peers. */
static pycoll_status_t finish(pycoll_comm_t *comm, pycoll_status_t st)
{
    if (st != PYCOLL_OK) {
        if (comm->p2p->status == PYCOLL_OK)
            pycoll_p2p_fail(comm->p2p, st, -1, "%s failed with status %d", "collective", (int)st);
        comm->p2p->ops->abort(comm->p2p, comm->p2p->status, comm->p2p->error);
        return comm->p2p->status;
    }
    return PYCOLL_OK;
}

pycoll_status_t pycoll_comm_all_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                       pycoll_dtype_t dtype, pycoll_op_t op, pycoll_algorithm_t algorithm,
                                       pycoll_accuracy_t accuracy)
{
    pycoll_status_t st = begin(comm, PYCOLL_COLL_ALL_REDUCE, count, dtype, op, algorithm, accuracy, -1);
    if (st != PYCOLL_OK)
        return st;
    if (runs_native(comm))
        return finish(comm, comm->p2p->ops->native->all_reduce(comm->p2p, sendbuf, recvbuf, count, dtype, op,
                                                               accuracy));
    all_reduce_fn fn = all_reduce_algorithm((pycoll_algorithm_t)comm->p2p->desc.algorithm);
    if (!fn) {
        snprintf(comm->error, sizeof comm->error, "algorithm %s has no all-reduce",
                 pycoll_algorithm_name((pycoll_algorithm_t)comm->p2p->desc.algorithm));
        return PYCOLL_ERR_UNSUPPORTED;
    }
    /* Through the transport's memory table: the buffers may be device memory. */
    st = memory_copy(comm->p2p, recvbuf, sendbuf, count * (int64_t)pycoll_dtype_size(dtype), "all_reduce");
    return finish(comm, st != PYCOLL_OK ? st : fn(&comm->ctx, recvbuf, count, dtype, op, accuracy));
}

pycoll_status_t pycoll_comm_reduce_scatter(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op,
                                           pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy)
{
    pycoll_status_t st = begin(comm, PYCOLL_COLL_REDUCE_SCATTER, recv_count, dtype, op, algorithm, accuracy, -1);
    if (st != PYCOLL_OK)
        return st;
    return finish(comm, reduce_scatter_run(&comm->ctx, sendbuf, recvbuf, recv_count, dtype, op,
                                           (pycoll_algorithm_t)comm->p2p->desc.algorithm, accuracy));
}

pycoll_status_t pycoll_comm_all_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t send_count,
                                       pycoll_dtype_t dtype)
{
    pycoll_status_t st = begin(comm, PYCOLL_COLL_ALL_GATHER, send_count, dtype, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
                               PYCOLL_ACCURACY_FAST, -1);
    if (st != PYCOLL_OK)
        return st;
    return finish(comm, all_gather_run(&comm->ctx, sendbuf, recvbuf, send_count, dtype));
}

pycoll_status_t pycoll_comm_broadcast(pycoll_comm_t *comm, void *buf, int64_t count, pycoll_dtype_t dtype,
                                      int32_t root)
{
    if (root < 0)
        return invalid(comm, "%s out of range: %lld", "root", root);
    pycoll_status_t st = begin(comm, PYCOLL_COLL_BROADCAST, count, dtype, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
                               PYCOLL_ACCURACY_FAST, root);
    if (st != PYCOLL_OK)
        return st;
    if (runs_native(comm))
        return finish(comm, comm->p2p->ops->native->broadcast(comm->p2p, buf, count, dtype, root));
    return finish(comm, broadcast_run(&comm->ctx, buf, count, dtype, root));
}

pycoll_status_t pycoll_comm_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                   pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy)
{
    if (root < 0)
        return invalid(comm, "%s out of range: %lld", "root", root);
    pycoll_status_t st = begin(comm, PYCOLL_COLL_REDUCE, count, dtype, op, PYCOLL_ALGO_AUTO, accuracy, root);
    if (st != PYCOLL_OK)
        return st;
    return finish(comm, reduce_run(&comm->ctx, sendbuf, recvbuf, count, dtype, op, root, accuracy));
}

pycoll_status_t pycoll_comm_barrier(pycoll_comm_t *comm)
{
    pycoll_status_t st = begin(comm, PYCOLL_COLL_BARRIER, 0, PYCOLL_UINT8, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
                               PYCOLL_ACCURACY_FAST, -1);
    if (st != PYCOLL_OK)
        return st;
    if (runs_native(comm))
        return finish(comm, comm->p2p->ops->native->barrier(comm->p2p));
    return finish(comm, barrier_run(&comm->ctx));
}
