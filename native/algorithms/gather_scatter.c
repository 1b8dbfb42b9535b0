/* Gather and scatter, flat: the root posts all N-1 transfers at once and waits for them together, so they
 * overlap on the root's links (a single latency for small messages, the root's bandwidth for large ones);
 * every other rank makes one transfer with the root. */
#include "algorithms/collectives.h"
#include "algorithms/reduction.h"
#include "algorithms/schedule.h"

#include <stdlib.h>

/* The root's side: one receive (gather) or send (scatter) per other rank, of block r of `blocks`. */
static pycoll_status_t root_transfers(pycoll_p2p_t *p2p, bool is_send, char *blocks, int64_t block, uint32_t tag,
                                      const char *what)
{
    const int32_t size = p2p->size;
    pycoll_request_t *reqs = scratch_alloc(p2p, (int64_t)size * (int64_t)sizeof *reqs, what);
    if (!reqs)
        return PYCOLL_ERR_NOMEM;
    pycoll_status_t status = PYCOLL_OK;
    int64_t n = 0;
    for (int32_t r = 0; status == PYCOLL_OK && r < size; r++)
        if (r != p2p->rank)
            status = post_request(p2p, &reqs[n++], is_send, r, blocks + r * block, block, tag);
    if (status == PYCOLL_OK)
        status = wait_requests(p2p, reqs, n);
    free(reqs);
    return status;
}

static pycoll_status_t check_rooted(pycoll_p2p_t *p2p, const char *what, const void *mine, const void *roots,
                                    int64_t count, pycoll_dtype_t dtype, int32_t root)
{
    pycoll_status_t status = check_collective_args(p2p, what, mine, count, dtype, PYCOLL_SUM);
    if (status != PYCOLL_OK)
        return status;
    if (root < 0 || root >= p2p->size)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "%s: root %d is not a rank of 0..%d", what, (int)root,
                               (int)p2p->size - 1);
    if (p2p->rank == root && count > 0 && !roots)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "%s: the root's buffer of every block is NULL", what);
    return PYCOLL_OK;
}

pycoll_status_t gather_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                           pycoll_dtype_t dtype, int32_t root)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    pycoll_status_t status = check_rooted(p2p, "gather", sendbuf, recvbuf, count, dtype, root);
    if (status != PYCOLL_OK || count == 0)
        return status;
    const int64_t block = count * (int64_t)pycoll_dtype_size(dtype);
    if (p2p->rank != root) {
        pycoll_request_t req;
        status = post_request(p2p, &req, true, root, (void *)sendbuf, block, phase_tag(TAG_GATHER, 0));
        return status != PYCOLL_OK ? status : wait_requests(p2p, &req, 1);
    }
    char *out = recvbuf;
    /* The own block first: sendbuf may lie inside recvbuf, where a receive would overwrite it. */
    status = memory_copy(p2p, out + root * block, sendbuf, block, "gather");
    return status != PYCOLL_OK ? status
                               : root_transfers(p2p, false, out, block, phase_tag(TAG_GATHER, 0), "gather");
}

pycoll_status_t scatter_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                            pycoll_dtype_t dtype, int32_t root)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    pycoll_status_t status = check_rooted(p2p, "scatter", recvbuf, sendbuf, count, dtype, root);
    if (status != PYCOLL_OK || count == 0)
        return status;
    const int64_t block = count * (int64_t)pycoll_dtype_size(dtype);
    if (p2p->rank != root) {
        pycoll_request_t req;
        status = post_request(p2p, &req, false, root, recvbuf, block, phase_tag(TAG_SCATTER, 0));
        return status != PYCOLL_OK ? status : wait_requests(p2p, &req, 1);
    }
    const char *in = sendbuf;
    /* The own block last: recvbuf may lie inside sendbuf, over a block still to be sent. */
    status = root_transfers(p2p, true, (char *)in, block, phase_tag(TAG_SCATTER, 0), "scatter");
    return status != PYCOLL_OK ? status : memory_copy(p2p, recvbuf, in + root * block, block, "scatter");
}
