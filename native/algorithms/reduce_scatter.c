/* reduce_scatter and all_gather: the first and second halves of the all-reduce schedules, over equal blocks
 * of `count` elements (block r belongs to rank r). */
#include "algorithms/phases.h"

#include <stdlib.h>

/* What every reduce_scatter schedule does first. Returns false, with *status set, when there is nothing more to
 * do (an error or no data). */
static bool reduce_scatter_setup(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                 pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy, reduction_t *red,
                                 pycoll_status_t *status)
{
    assert_checked_pair(ctx->p2p, sendbuf, recvbuf, count, dtype, op);
    *status = PYCOLL_OK;
    if (count == 0)
        return false;
    reduction_init(red, ctx->p2p, dtype, op, accuracy);
    return true;
}

/* A reduce_scatter schedule, run once the check passed: red is set up and count > 0. */
typedef pycoll_status_t (*reduce_scatter_schedule_t)(coll_ctx_t *ctx, const reduction_t *red, const void *sendbuf,
                                                     void *recvbuf, int64_t count);

static pycoll_status_t ring_blocks(coll_ctx_t *ctx, const reduction_t *red, const void *sendbuf, void *recvbuf,
                                   int64_t count)
{
    /* sendbuf is read-only: the partials travel through work. */
    void *work = comm_workspace(ctx, ctx->p2p->size * count * (int64_t)red->wsize, "ring reduce_scatter");
    if (!work)
        return PYCOLL_ERR_NOMEM;
    return ring_reduce_scatter_blocks(ctx, red, sendbuf, work, equal_blocks(count), recvbuf);
}

static pycoll_status_t mesh_blocks(coll_ctx_t *ctx, const reduction_t *red, const void *sendbuf, void *recvbuf,
                                   int64_t count)
{
    return mesh_reduce_scatter_blocks(ctx, red, sendbuf, equal_blocks(count), recvbuf);
}

/* One rank has nothing to exchange: the ring's one-rank path just rounds and scales, for every schedule. */
static pycoll_status_t run_reduce_scatter(coll_ctx_t *ctx, reduce_scatter_schedule_t schedule, const void *sendbuf,
                                          void *recvbuf, int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                          pycoll_accuracy_t accuracy)
{
    reduction_t red;
    pycoll_status_t status;
    if (!reduce_scatter_setup(ctx, sendbuf, recvbuf, count, dtype, op, accuracy, &red, &status))
        return status;
    return (ctx->p2p->size == 1 ? ring_blocks : schedule)(ctx, &red, sendbuf, recvbuf, count);
}

pycoll_status_t ring_reduce_scatter(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                    pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    return run_reduce_scatter(ctx, ring_blocks, sendbuf, recvbuf, count, dtype, op, accuracy);
}

pycoll_status_t halving_doubling_reduce_scatter_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf,
                                                    int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                    pycoll_accuracy_t accuracy)
{
    return run_reduce_scatter(ctx, halving_doubling_reduce_scatter, sendbuf, recvbuf, count, dtype, op, accuracy);
}

pycoll_status_t mesh_reduce_scatter(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                    pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    return run_reduce_scatter(ctx, mesh_blocks, sendbuf, recvbuf, count, dtype, op, accuracy);
}

/* The ring (all_gather's only schedule): bandwidth-optimal, and a gather has nothing to halve. */
pycoll_status_t ring_all_gather(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                               pycoll_dtype_t dtype)
{
    assert_checked_pair(ctx->p2p, sendbuf, recvbuf, count, dtype, PYCOLL_SUM);
    if (count == 0)
        return PYCOLL_OK;
    const size_t dsize = pycoll_dtype_size(dtype);
    char *own = (char *)recvbuf + (int64_t)ctx->p2p->rank * count * (int64_t)dsize;
    /* the ranges may overlap */
    pycoll_status_t status = memory_copy(ctx->p2p, own, sendbuf, count * (int64_t)dsize, "all_gather");
    const block_layout_t layout = equal_blocks(count);
    return status != PYCOLL_OK ? status : ring_all_gather_blocks(ctx, recvbuf, dsize, layout);
}
