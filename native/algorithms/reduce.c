/* Reduce to a root, two schedules (the decision picks by size, decision.c). binomial_tree: ceil(log2 N) steps,
 * each node combining its children in a fixed order. scatter_gather: ring reduce-scatter, then every rank sends
 * its finished block to the root (each rank sends about 1/N of the data N-1 times plus once, instead of the
 * whole buffer per tree level). */
#include "algorithms/phases.h"

#include <stdlib.h>

/* A reduce schedule, run once the check passed: red is set up and count > 0. */
typedef pycoll_status_t (*reduce_schedule_t)(coll_ctx_t *ctx, const reduction_t *red, const void *sendbuf,
                                             void *recvbuf, int64_t count, int32_t root);

static pycoll_status_t tree_reduce(coll_ctx_t *ctx, const reduction_t *red, const void *sendbuf, void *recvbuf,
                                   int64_t count, int32_t root)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    const int32_t size = p2p->size, vr = ring_index(p2p->rank - root, size);
    const int64_t part_bytes = count * (int64_t)red->wsize;
    char *work = data_alloc(p2p, 2 * part_bytes, "reduce");
    if (!work)
        return PYCOLL_ERR_NOMEM;
    char *received = work + part_bytes;
    const void *source;
    pycoll_status_t status = reduction_source(red, work, sendbuf, count, &source);
    if (status == PYCOLL_OK && source != work)
        status = memory_copy(p2p, work, source, part_bytes, "reduce");
    /* Children vr + 1, vr + 2, vr + 4, ... below vr's lowest set bit, combined in that order. */
    int32_t m = 1, step = 0;
    for (; status == PYCOLL_OK && m < size && !(vr & m); m *= 2, step++) {
        if (vr + m >= size)
            continue;
        status = exchange(p2p, -1, NULL, 0, ring_index(vr + m + root, size), received, part_bytes,
                          phase_tag(TAG_REDUCE_TREE, step));
        if (status == PYCOLL_OK)
            status = reduction_combine(red, work, received, count);
    }
    if (status == PYCOLL_OK && vr != 0)
        status = exchange(p2p, ring_index(vr - m + root, size), work, part_bytes, -1, NULL, 0,
                          phase_tag(TAG_REDUCE_TREE, step));
    if (status == PYCOLL_OK && vr == 0)
        status = reduction_store(red, recvbuf, work, count);
    data_free(p2p, work);
    return status;
}

static pycoll_status_t ring_then_gather(coll_ctx_t *ctx, const reduction_t *red, const void *sendbuf,
                                        void *recvbuf, int64_t count, int32_t root)
{
    if (ctx->p2p->size == 1) /* nothing to scatter: the tree's one-rank path rounds and scales */
        return tree_reduce(ctx, red, sendbuf, recvbuf, count, root);
    pycoll_p2p_t *p2p = ctx->p2p;
    const int32_t size = p2p->size, rank = p2p->rank;
    const block_layout_t layout = split_evenly(count, size);
    const int64_t own_bytes = block_count(layout, rank) * (int64_t)red->dsize;
    char *work = data_alloc(p2p, count * (int64_t)red->wsize + own_bytes, "reduce");
    pycoll_request_t *reqs = work ? calloc((size_t)size, sizeof *reqs) : NULL;
    if (!reqs) {
        data_free(p2p, work);
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_NOMEM, -1, "reduce: out of memory");
    }
    char *result = (char *)recvbuf;
    char *own = rank == root ? result + block_offset(layout, rank) * (int64_t)red->dsize
                             : work + count * (int64_t)red->wsize;
    pycoll_status_t status = ring_reduce_scatter_blocks(ctx, red, sendbuf, work, layout, own);
    if (status == PYCOLL_OK && rank != root)
        status = exchange(p2p, root, own, own_bytes, -1, NULL, 0, phase_tag(TAG_REDUCE_GATHER, 0));
    for (int32_t q = 0; status == PYCOLL_OK && rank == root && q < size; q++) {
        if (q != root)
            status = post_request(p2p, &reqs[q], false, q, result + block_offset(layout, q) * (int64_t)red->dsize,
                                  block_count(layout, q) * (int64_t)red->dsize, phase_tag(TAG_REDUCE_GATHER, 0));
    }
    if (status == PYCOLL_OK && rank == root)
        status = wait_requests(p2p, reqs, size);
    free(reqs);
    data_free(p2p, work);
    return status;
}

/* What both reduce schedules do first. Returns false, with *status set, when there is nothing more to do. */
static bool reduce_setup(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count, pycoll_dtype_t dtype,
                         pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy, reduction_t *red,
                         pycoll_status_t *status)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    assert_checked(p2p, sendbuf, count, dtype, op, root);
    assert_checked(p2p, p2p->rank == root ? recvbuf : sendbuf, count, dtype, op, root);
    *status = PYCOLL_OK;
    if (count == 0)
        return false;
    reduction_init(red, p2p, dtype, op, accuracy);
    return true;
}

static pycoll_status_t run_reduce(coll_ctx_t *ctx, reduce_schedule_t schedule, const void *sendbuf, void *recvbuf,
                                  int64_t count, pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                  pycoll_accuracy_t accuracy)
{
    reduction_t red;
    pycoll_status_t status;
    if (!reduce_setup(ctx, sendbuf, recvbuf, count, dtype, op, root, accuracy, &red, &status))
        return status;
    return schedule(ctx, &red, sendbuf, recvbuf, count, root);
}

pycoll_status_t binomial_tree_reduce(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                     pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy)
{
    return run_reduce(ctx, tree_reduce, sendbuf, recvbuf, count, dtype, op, root, accuracy);
}

pycoll_status_t scatter_gather_reduce(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                      pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy)
{
    return run_reduce(ctx, ring_then_gather, sendbuf, recvbuf, count, dtype, op, root, accuracy);
}
