/* all_gather_v and reduce_scatter_v: the ring schedules (ring.c) over blocks of per-rank counts, which
 * block_layout_t carries as explicit counts and offsets (schedule.h). The ring keeps the even case's
 * bandwidth: every rank sends each block once per phase, and uneven blocks only make some steps shorter. */
#include "algorithms/phases.h"

#include <stdlib.h>

/* The layout of counts[0..size) in rank order, its offsets in *offsets (freed by the caller) and the total in
 * *total. NULL offsets (status on p2p) when out of memory. */
static block_layout_t counted_blocks(pycoll_p2p_t *p2p, const int64_t *counts, int64_t **offsets, int64_t *total,
                                     const char *what)
{
    *offsets = scratch_alloc(p2p, (int64_t)p2p->size * (int64_t)sizeof **offsets, what);
    *total = 0;
    for (int32_t r = 0; *offsets && r < p2p->size; r++) {
        (*offsets)[r] = *total;
        *total += counts[r];
    }
    return (block_layout_t){.counts = counts, .offsets = *offsets};
}

pycoll_status_t ring_all_gather_v(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, const int64_t *counts,
                                 pycoll_dtype_t dtype)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    const int32_t rank = p2p->rank;
    int64_t *offsets, total;
    const block_layout_t layout = counted_blocks(p2p, counts, &offsets, &total, "all_gather_v");
    if (!offsets)
        return PYCOLL_ERR_NOMEM;
    assert_checked(p2p, sendbuf, counts[rank], dtype, PYCOLL_SUM, 0);
    assert_checked(p2p, recvbuf, total, dtype, PYCOLL_SUM, 0);
    const size_t dsize = pycoll_dtype_size(dtype);
    /* the ranges may overlap (sendbuf may be this rank's block of recvbuf) */
    pycoll_status_t status = memory_copy(p2p, (char *)recvbuf + offsets[rank] * (int64_t)dsize, sendbuf,
                             counts[rank] * (int64_t)dsize, "all_gather_v");
    if (status == PYCOLL_OK && total > 0)
        status = ring_all_gather_blocks(ctx, recvbuf, dsize, layout);
    free(offsets);
    return status;
}

pycoll_status_t ring_reduce_scatter_v(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, const int64_t *counts,
                                     pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    int64_t *offsets, total;
    const block_layout_t layout = counted_blocks(p2p, counts, &offsets, &total, "reduce_scatter_v");
    if (!offsets)
        return PYCOLL_ERR_NOMEM;
    assert_checked(p2p, sendbuf, total, dtype, op, 0);
    assert_checked(p2p, recvbuf, counts[p2p->rank], dtype, op, 0);
    pycoll_status_t status = PYCOLL_OK;
    if (total > 0) {
        reduction_t red;
        reduction_init(&red, p2p, dtype, op, accuracy);
        /* sendbuf is read-only: the partials travel through the workspace, as in ring_reduce_scatter. */
        void *work = comm_workspace(ctx, total * (int64_t)red.wsize, "ring reduce_scatter_v");
        status = work ? ring_reduce_scatter_blocks(ctx, &red, sendbuf, work, layout, recvbuf) : PYCOLL_ERR_NOMEM;
    }
    free(offsets);
    return status;
}
