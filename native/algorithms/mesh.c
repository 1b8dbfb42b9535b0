/* Mesh (direct) all-reduce: every rank owns one block; it receives that block from all peers at once,
 * reduces the N contributions in rank order (so the result does not depend on arrival order), then sends the
 * finished block straight to everyone. Two steps, N-1 messages each way per step: the lowest latency in
 * rounds, at the price of N-1 concurrent transfers per rank. */
#include "algorithms/phases.h"

#include <stdlib.h>

pycoll_status_t mesh_reduce_scatter_blocks(coll_ctx_t *ctx, const reduction_t *red, const void *input,
                                           block_layout_t layout, void *out)
{
    pycoll_p2p_t *p2p = red->p2p;
    const int32_t size = p2p->size, rank = p2p->rank;
    const char *in = input;
    const int64_t mine = block_count(layout, rank);
    const int64_t block_bytes = mine * (int64_t)red->dsize, part_bytes = mine * (int64_t)red->wsize;
    /* Contributions arrive as plain values (a lone contribution has no error term to carry); the sum and
     * its compensation live in acc, tmp holds a loaded contribution. */
    char *scratch = comm_workspace(ctx, (size - 1) * block_bytes + 2 * part_bytes, "mesh reduce-scatter");
    pycoll_request_t *reqs = scratch ? calloc(2 * (size_t)size, sizeof *reqs) : NULL;
    if (!reqs)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_NOMEM, -1, "mesh reduce-scatter: out of memory");
    char *acc = scratch + (size - 1) * block_bytes, *tmp = acc + part_bytes;
    pycoll_request_t *recvs = reqs, *sends = reqs + size;
    pycoll_status_t status = PYCOLL_OK;
    for (int32_t q = 0; status == PYCOLL_OK && q < size; q++) {
        if (q == rank)
            continue;
        char *slot = scratch + (q < rank ? q : q - 1) * block_bytes;
        status = post_request(p2p, &recvs[q], false, q, slot, block_bytes, phase_tag(TAG_MESH_REDUCE_SCATTER, 0));
    }
    for (int32_t i = 1; status == PYCOLL_OK && i < size; i++) {
        int32_t q = ring_index(rank + i, size); /* staggered, so not every rank sends to rank 0 first */
        status = post_request(p2p, &sends[q], true, q, (void *)(in + block_offset(layout, q) * red->dsize),
                              block_count(layout, q) * (int64_t)red->dsize, phase_tag(TAG_MESH_REDUCE_SCATTER, 0));
    }
    for (int32_t q = 0; status == PYCOLL_OK && q < size; q++) {
        const void *contribution = in + block_offset(layout, rank) * red->dsize;
        if (q != rank) {
            pycoll_request_t *req = &recvs[q];
            status = req->nbytes > 0 ? p2p->ops->wait(p2p, &req, 1) : PYCOLL_OK;
            contribution = req->buf;
        }
        if (status != PYCOLL_OK)
            break;
        if (q == 0) {
            const void *source;
            status = reduction_source(red, acc, contribution, mine, &source);
            if (status == PYCOLL_OK && source != acc)
                status = memory_copy(p2p, acc, source, block_bytes, "mesh reduce-scatter");
        } else {
            status = reduction_combine_plain(red, acc, contribution, tmp, mine);
        }
    }
    if (status == PYCOLL_OK)
        status = wait_requests(p2p, sends, size);
    if (status == PYCOLL_OK)
        status = reduction_store(red, out, acc, mine);
    free(reqs);
    return status;
}

pycoll_status_t mesh_all_gather_blocks(coll_ctx_t *ctx, void *buf, size_t dsize, block_layout_t layout)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    const int32_t size = p2p->size, rank = p2p->rank;
    char *data = buf;
    pycoll_request_t *reqs = calloc(2 * (size_t)size, sizeof *reqs);
    if (!reqs)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_NOMEM, -1, "mesh all-gather: out of memory");
    pycoll_status_t status = PYCOLL_OK;
    for (int32_t q = 0; status == PYCOLL_OK && q < size; q++) {
        if (q != rank)
            status = post_request(p2p, &reqs[q], false, q, data + block_offset(layout, q) * (int64_t)dsize,
                                  block_count(layout, q) * (int64_t)dsize, phase_tag(TAG_MESH_ALL_GATHER, 0));
    }
    for (int32_t i = 1; status == PYCOLL_OK && i < size; i++) {
        int32_t q = ring_index(rank + i, size);
        status = post_request(p2p, &reqs[size + q], true, q, data + block_offset(layout, rank) * (int64_t)dsize,
                              block_count(layout, rank) * (int64_t)dsize, phase_tag(TAG_MESH_ALL_GATHER, 0));
    }
    if (status == PYCOLL_OK)
        status = wait_requests(p2p, reqs, 2 * (int64_t)size);
    free(reqs);
    return status;
}

/* The mesh reduce-scatter keeps its own scratch: it needs no buffer of partials. */
static pycoll_status_t mesh_reduce_scatter_phase(coll_ctx_t *ctx, const reduction_t *red, const void *input,
                                                 void *work, block_layout_t layout, void *out)
{
    (void)work;
    return mesh_reduce_scatter_blocks(ctx, red, input, layout, out);
}

pycoll_status_t mesh_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                pycoll_accuracy_t accuracy)
{
    static const two_phase_all_reduce_t mesh = {"mesh all_reduce", false, false, mesh_reduce_scatter_phase,
                                                mesh_all_gather_blocks};
    return two_phase_all_reduce_run(ctx, &mesh, buf, buf, count, dtype, op, accuracy);
}
