/* Binomial-tree broadcast, pipelined by segments: a rank forwards segment k to its children as soon as it
 * has arrived, so a large buffer streams down the tree instead of being stored and forwarded whole at every
 * level (ceil(log2 N) levels). */
#include "algorithms/collectives.h"
#include "algorithms/schedule.h"

#include <stdlib.h>
#include <string.h>

pycoll_status_t binomial_tree_broadcast(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype, int32_t root)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    assert_checked(p2p, buf, count, dtype, PYCOLL_SUM, root);
    const int32_t size = p2p->size;
    if (size == 1 || count == 0)
        return PYCOLL_OK;
    /* Tree over ranks relative to root: vr receives from vr - lowbit(vr) and sends to vr + m for every power
     * of two m below lowbit(vr) (below size for the root). */
    const int32_t vr = ring_index(p2p->rank - root, size);
    int32_t lowbit = 1;
    while (lowbit < size && !(vr & lowbit))
        lowbit *= 2;
    int32_t children = 0;
    for (int32_t m = lowbit / 2; m >= 1; m /= 2)
        children += vr + m < size;
    const int64_t nbytes = count * (int64_t)pycoll_dtype_size(dtype);
    const int64_t seg = ctx->segment_bytes;
    const int64_t segs = (nbytes + seg - 1) / seg;
    pycoll_request_t *reqs = scratch_alloc(p2p, segs * (1 + children) * (int64_t)sizeof *reqs, "broadcast");
    if (!reqs)
        return PYCOLL_ERR_NOMEM;
    memset(reqs, 0, (size_t)(segs * (1 + children)) * sizeof *reqs);
    pycoll_request_t *recvs = reqs, *sends = reqs + segs;
    char *data = buf;
    pycoll_status_t status = PYCOLL_OK;
    for (int64_t k = 0; vr != 0 && status == PYCOLL_OK && k < segs; k++) {
        int64_t len = nbytes - k * seg < seg ? nbytes - k * seg : seg;
        status = post_request(p2p, &recvs[k], false, ring_index(vr - lowbit + root, size), data + k * seg, len,
                              phase_tag(TAG_BROADCAST, k));
    }
    for (int64_t k = 0; status == PYCOLL_OK && k < segs; k++) {
        int64_t len = nbytes - k * seg < seg ? nbytes - k * seg : seg;
        if (vr != 0) {
            pycoll_request_t *req = &recvs[k];
            status = p2p->ops->wait(p2p, &req, 1);
        }
        int32_t c = 0;
        for (int32_t m = lowbit / 2; status == PYCOLL_OK && m >= 1; m /= 2) {
            if (vr + m < size)
                status = post_request(p2p, &sends[k * children + c++], true, ring_index(vr + m + root, size),
                                      data + k * seg, len, phase_tag(TAG_BROADCAST, k));
        }
    }
    if (status == PYCOLL_OK)
        status = wait_requests(p2p, sends, segs * children);
    free(reqs);
    return status;
}
