/* The communicator: numbers collectives, describes each one on the wire, sets its deadline, resolves
 * algorithm "auto", and stays broken after the first error (a half-finished collective leaves peers in
 * unknown states, so continuing would risk silently wrong data). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pycoll/comm.h"
#include "pycoll/kernels.h"

struct pycoll_comm {
    pycoll_p2p_t *p2p;
    double timeout_s;
    uint64_t seq;
    pycoll_cost_model_t model;
    pycoll_algorithm_t last_algorithm;
    int finalized;
    char error[PYCOLL_ERROR_LEN + 64]; /* room for a prefix before the transport's message */
};

pycoll_comm_t *pycoll_comm_create(pycoll_p2p_t *p2p, double timeout_s)
{
    if (!p2p)
        return NULL;
    pycoll_comm_t *comm = calloc(1, sizeof *comm);
    if (!comm)
        return NULL;
    comm->p2p = p2p;
    comm->timeout_s = timeout_s > 0 ? timeout_s : 300.0;
    pycoll_default_cost_model(&comm->model);
    return comm;
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
    comm->p2p->ops->destroy(comm->p2p);
    free(comm);
}

int32_t pycoll_comm_rank(const pycoll_comm_t *comm) { return comm->p2p->rank; }
int32_t pycoll_comm_size(const pycoll_comm_t *comm) { return comm->p2p->size; }
void pycoll_comm_set_timeout(pycoll_comm_t *comm, double timeout_s) { comm->timeout_s = timeout_s; }
void pycoll_comm_set_cost_model(pycoll_comm_t *comm, const pycoll_cost_model_t *model) { comm->model = *model; }
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
    if (algorithm == PYCOLL_ALGO_AUTO)
        algorithm = pycoll_choose_all_reduce(&comm->model, p2p->size, count * (int64_t)pycoll_dtype_size(dtype));
    /* recursive doubling only exists as an all-reduce; the other reductions use the ring there. */
    if (coll != PYCOLL_COLL_ALL_REDUCE && algorithm == PYCOLL_ALGO_RECURSIVE_DOUBLING)
        algorithm = PYCOLL_ALGO_RING;
    comm->last_algorithm = algorithm;
    pycoll_coll_desc_t desc = {.seq = ++comm->seq, .history = pycoll_history_next(&p2p->desc), .count = count,
                               .root = root, .coll = (uint8_t)coll, .dtype = (uint8_t)dtype, .op = (uint8_t)op,
                               .algorithm = (uint8_t)algorithm, .accuracy = (uint8_t)accuracy};
    p2p->prev_desc = p2p->desc;
    p2p->desc = desc;
    p2p->deadline_ns = pycoll_now_ns() + (int64_t)(comm->timeout_s * 1e9);
    return PYCOLL_OK;
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
    pycoll_all_reduce_fn fn = pycoll_all_reduce_algorithm((pycoll_algorithm_t)comm->p2p->desc.algorithm);
    if (!fn) {
        snprintf(comm->error, sizeof comm->error, "algorithm %s has no all-reduce",
                 pycoll_algorithm_name((pycoll_algorithm_t)comm->p2p->desc.algorithm));
        return PYCOLL_ERR_UNSUPPORTED;
    }
    if (sendbuf != recvbuf && count > 0)
        memcpy(recvbuf, sendbuf, (size_t)count * pycoll_dtype_size(dtype));
    return finish(comm, fn(comm->p2p, recvbuf, count, dtype, op, accuracy));
}

pycoll_status_t pycoll_comm_reduce_scatter(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op,
                                           pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy)
{
    pycoll_status_t st = begin(comm, PYCOLL_COLL_REDUCE_SCATTER, recv_count, dtype, op, algorithm, accuracy, -1);
    if (st != PYCOLL_OK)
        return st;
    return finish(comm, pycoll_reduce_scatter_algo(comm->p2p, sendbuf, recvbuf, recv_count, dtype, op,
                                                   (pycoll_algorithm_t)comm->p2p->desc.algorithm, accuracy));
}

pycoll_status_t pycoll_comm_all_gather(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t send_count,
                                       pycoll_dtype_t dtype)
{
    pycoll_status_t st = begin(comm, PYCOLL_COLL_ALL_GATHER, send_count, dtype, PYCOLL_SUM, PYCOLL_ALGO_RING,
                               PYCOLL_ACCURACY_FAST, -1);
    if (st != PYCOLL_OK)
        return st;
    return finish(comm, pycoll_all_gather_algo(comm->p2p, sendbuf, recvbuf, send_count, dtype, PYCOLL_ALGO_RING));
}

pycoll_status_t pycoll_comm_broadcast(pycoll_comm_t *comm, void *buf, int64_t count, pycoll_dtype_t dtype,
                                      int32_t root)
{
    if (root < 0)
        return invalid(comm, "%s out of range: %lld", "root", root);
    pycoll_status_t st = begin(comm, PYCOLL_COLL_BROADCAST, count, dtype, PYCOLL_SUM, PYCOLL_ALGO_RING,
                               PYCOLL_ACCURACY_FAST, root);
    if (st != PYCOLL_OK)
        return st;
    return finish(comm, pycoll_broadcast_algo(comm->p2p, buf, count, dtype, root));
}

pycoll_status_t pycoll_comm_reduce(pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                   pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy)
{
    if (root < 0)
        return invalid(comm, "%s out of range: %lld", "root", root);
    pycoll_status_t st = begin(comm, PYCOLL_COLL_REDUCE, count, dtype, op, PYCOLL_ALGO_RING, accuracy, root);
    if (st != PYCOLL_OK)
        return st;
    return finish(comm, pycoll_reduce_algo(comm->p2p, sendbuf, recvbuf, count, dtype, op, root, accuracy));
}

pycoll_status_t pycoll_comm_barrier(pycoll_comm_t *comm)
{
    pycoll_status_t st = begin(comm, PYCOLL_COLL_BARRIER, 0, PYCOLL_UINT8, PYCOLL_SUM, PYCOLL_ALGO_RING,
                               PYCOLL_ACCURACY_FAST, -1);
    if (st != PYCOLL_OK)
        return st;
    return finish(comm, pycoll_barrier_algo(comm->p2p));
}
