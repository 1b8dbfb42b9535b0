/* All-to-all by pairwise exchange: in step s (1..N-1) rank r sends block (r+s)%N to rank (r+s)%N and receives
 * block (r-s)%N from rank (r-s)%N. Every step pairs each rank with one sender and one receiver, so no link is
 * oversubscribed, and each step's send and receive are posted together, so no rank blocks on a peer that is
 * itself blocked sending. Steps run in windows of ALL_TO_ALL_IN_FLIGHT: small blocks then cost one round trip
 * per window instead of one per step, while large ones still stream (the transports carry any message size). */
#include "algorithms/collectives.h"
#include "kernels/memory_kernels.h"
#include "algorithms/schedule.h"

enum { ALL_TO_ALL_IN_FLIGHT = 8 };

pycoll_status_t pairwise_all_to_all(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                               pycoll_dtype_t dtype)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    assert_checked_pair(p2p, sendbuf, recvbuf, count, dtype, PYCOLL_SUM);
    if (count == 0)
        return PYCOLL_OK;
    const int32_t size = p2p->size, rank = p2p->rank;
    const int64_t block = count * (int64_t)pycoll_dtype_size(dtype);
    const char *in = sendbuf;
    char *out = recvbuf;
    /* A block is received into out while later steps still send from in: the two must not overlap. */
    if (in < out + size * block && out < in + size * block)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "all_to_all: sendbuf and recvbuf overlap");
    pycoll_status_t status = memory_copy(p2p, out + rank * block, in + rank * block, block, "all_to_all");
    pycoll_request_t reqs[2 * ALL_TO_ALL_IN_FLIGHT];
    for (int32_t first = 1; status == PYCOLL_OK && first < size; first += ALL_TO_ALL_IN_FLIGHT) {
        int n = 0;
        for (int32_t s = first; status == PYCOLL_OK && s < size && s < first + ALL_TO_ALL_IN_FLIGHT; s++) {
            const int32_t to = ring_index(rank + s, size), from = ring_index(rank - s, size);
            status = post_request(p2p, &reqs[n++], false, from, out + from * block, block, phase_tag(TAG_ALL_TO_ALL, s));
            if (status == PYCOLL_OK)
                status = post_request(p2p, &reqs[n++], true, to, (void *)(in + to * block), block,
                                      phase_tag(TAG_ALL_TO_ALL, s));
        }
        if (status == PYCOLL_OK)
            status = wait_requests(p2p, reqs, n);
    }
    return status;
}
