/* Recursive-doubling all-reduce, for tiny messages: log2 p steps, each exchanging the whole buffer with the
 * partner at distance 1, 2, 4, ...; latency-optimal, but every rank reduces the whole buffer each step.
 * Both partners compute op(lower group's partial, upper group's partial) with the operands in that order,
 * so they hold bitwise identical partials after every step. Non-powers of two fold like halving_doubling:
 * odd ranks among the first 2 * (N - p) hand their data to their even neighbour and get the result back. */
#include "algorithms/phases.h"

static int32_t pow2_floor(int32_t n)
{
    int32_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

/* mine = op(lower, upper) where this rank's partial is the lower one when lower_is_mine. FAST: in place via
 * the out-of-place kernel; COMPENSATED: combined into the lower buffer, then the buffers are swapped. */
static pycoll_status_t combine_in_order(const reduction_t *red, char **mine, char **other, bool lower_is_mine,
                                        int64_t count)
{
    if (lower_is_mine)
        return reduction_combine(red, *mine, *other, count);
    if (!red->compensated) /* partials are plain values: op(other, mine) into mine */
        return reduction_add_plain(red, *mine, *other, *mine, count);
    pycoll_status_t status = reduction_combine(red, *other, *mine, count);
    char *lower = *other;
    *other = *mine;
    *mine = lower;
    return status;
}

pycoll_status_t recursive_doubling_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                              pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    pycoll_status_t status;
    reduction_t red;
    if (!all_reduce_setup(ctx, "recursive_doubling all_reduce", buf, count, dtype, op, accuracy, &red, &status))
        return status;
    const int32_t size = p2p->size, rank = p2p->rank, p = pow2_floor(size), extra = size - p;
    const int64_t part_bytes = count * (int64_t)red.wsize, plain_bytes = count * (int64_t)red.dsize;
    /* Two partial buffers: mine and the partner's. In FAST mode mine is buf itself. */
    char *scratch = comm_workspace(ctx, red.compensated ? 2 * part_bytes : part_bytes, "recursive_doubling");
    if (!scratch)
        return PYCOLL_ERR_NOMEM;
    char *mine = red.compensated ? scratch + part_bytes : buf, *other = scratch;
    const void *source;
    status = reduction_source(&red, mine, buf, count, &source);
    const bool folded = rank < 2 * extra;
    if (status == PYCOLL_OK && folded && rank % 2) {
        status = exchange(p2p, rank - 1, mine, part_bytes, -1, NULL, 0, phase_tag(TAG_RD_FOLD, 0));
        if (status == PYCOLL_OK)
            status = exchange(p2p, -1, NULL, 0, rank - 1, buf, plain_bytes, phase_tag(TAG_RD_UNFOLD, 0));
        return status;
    }
    if (status == PYCOLL_OK && folded) {
        status = exchange(p2p, -1, NULL, 0, rank + 1, other, part_bytes, phase_tag(TAG_RD_FOLD, 0));
        if (status == PYCOLL_OK)
            status = combine_in_order(&red, &mine, &other, true, count);
    }
    const int32_t v = folded ? rank / 2 : rank - extra;
    int32_t step = 0;
    for (int32_t mask = 1; status == PYCOLL_OK && mask < p; mask *= 2, step++) {
        const int32_t pv = v ^ mask, partner = pv < extra ? 2 * pv : pv + extra;
        status = exchange(p2p, partner, mine, part_bytes, partner, other, part_bytes,
                          phase_tag(TAG_RD_EXCHANGE, step));
        if (status == PYCOLL_OK)
            status = combine_in_order(&red, &mine, &other, v < pv, count);
    }
    if (status == PYCOLL_OK)
        status = reduction_store(&red, buf, mine, count);
    if (status == PYCOLL_OK && folded)
        status = exchange(p2p, rank + 1, buf, plain_bytes, -1, NULL, 0, phase_tag(TAG_RD_UNFOLD, 0));
    return status;
}
