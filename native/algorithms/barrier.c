/* Dissemination barrier: in round k every rank signals rank + 2^k and waits for rank - 2^k; after
 * ceil(log2 N) rounds each rank has (transitively) heard from all others. */
#include "algorithms/collectives.h"
#include "algorithms/schedule.h"

pycoll_status_t dissemination_barrier(coll_ctx_t *ctx)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    const int32_t size = p2p->size, rank = p2p->rank;
    pycoll_status_t status = PYCOLL_OK;
    int32_t round = 0;
    for (int32_t dist = 1; status == PYCOLL_OK && dist < size; dist *= 2, round++) {
        char token = 1, received = 0;
        status = exchange(p2p, ring_index(rank + dist, size), &token, 1, ring_index(rank - dist, size), &received,
                          1, phase_tag(TAG_BARRIER, round));
    }
    return status;
}
