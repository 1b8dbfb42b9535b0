/* reduce_scatter and all_gather: the first and second halves of the all-reduce schedules, over equal blocks
 * of `count` elements (block r belongs to rank r). */
#include "algorithms/phases.h"

#include <stdlib.h>

/* `algorithm` is what the decision (decision.c) returned for reduce_scatter: one of that table's. */
pycoll_status_t reduce_scatter_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                   pycoll_dtype_t dtype, pycoll_op_t op, pycoll_algorithm_t algorithm,
                                   pycoll_accuracy_t accuracy)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    pycoll_status_t status = check_send_recv_args(p2p, "reduce_scatter", sendbuf, recvbuf, count, dtype, op);
    if (status != PYCOLL_OK || count == 0)
        return status;
    reduction_t red;
    reduction_init(&red, p2p, dtype, op, accuracy);
    const block_layout_t layout = equal_blocks(count);
    if (p2p->size == 1)
        algorithm = PYCOLL_ALGO_RING; /* nothing to exchange: the ring's one-rank path just rounds and scales */
    switch (algorithm) {
    case PYCOLL_ALGO_RING: {
        /* sendbuf is read-only: the partials travel through work. */
        void *work = comm_workspace(ctx, p2p->size * count * (int64_t)red.wsize, "ring reduce_scatter");
        if (!work)
            return PYCOLL_ERR_NOMEM;
        return ring_reduce_scatter_blocks(ctx, &red, sendbuf, work, layout, recvbuf);
    }
    case PYCOLL_ALGO_HALVING_DOUBLING:
        return halving_doubling_reduce_scatter(ctx, &red, sendbuf, recvbuf, count);
    case PYCOLL_ALGO_MESH:
        return mesh_reduce_scatter_blocks(ctx, &red, sendbuf, layout, recvbuf);
    default:
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_UNSUPPORTED, -1,
                               "reduce_scatter: no %s schedule (pycoll_coll_algorithms lists them)",
                               pycoll_algorithm_name(algorithm));
    }
}

/* The ring (all_gather's only entry in decision.c): bandwidth-optimal, and a gather has nothing to halve. */
pycoll_status_t all_gather_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                               pycoll_dtype_t dtype)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    pycoll_status_t status = check_send_recv_args(p2p, "all_gather", sendbuf, recvbuf, count, dtype, PYCOLL_SUM);
    if (status != PYCOLL_OK || count == 0)
        return status;
    const size_t dsize = pycoll_dtype_size(dtype);
    char *own = (char *)recvbuf + (int64_t)p2p->rank * count * (int64_t)dsize;
    status = memory_copy(p2p, own, sendbuf, count * (int64_t)dsize, "all_gather"); /* the ranges may overlap */
    const block_layout_t layout = equal_blocks(count);
    return status != PYCOLL_OK ? status : ring_all_gather_blocks(ctx, recvbuf, dsize, layout);
}
