/* Rabenseifner's all-reduce: a recursive-halving reduce-scatter (log2 p steps, each exchanging half of the
 * remaining range with the partner at distance p/2, p/4, ..., 1) then a recursive-doubling all-gather
 * (the same steps in reverse): 2 log2 p messages and 2 (p-1)/p of the data per rank.
 * Any world size N: with p the largest power of two <= N and extra = N - p, the first 2 * extra ranks pair
 * up before the halving; each odd one hands its data to its even neighbour and sits out, and gets the
 * result back at the end. The p remaining ranks are numbered v = 0..p-1 ("virtual" ranks).
 * The data is cut into units (the finest blocks anyone ends up owning) and virtual rank v ends the halving
 * owning group v, a run of whole units; counts smaller than p just give empty units. */
#include "algorithms/phases.h"

#include <stdlib.h>

typedef struct hd_plan {
    int32_t p, extra;
    int32_t v;              /* this rank's virtual rank, -1 when folded away */
    const int64_t *uoff;    /* units: unit i is elements [uoff[i], uoff[i+1]) */
    const int32_t *gunit;   /* groups: group g is units [gunit[g], gunit[g+1]) */
} hd_plan_t;

static int32_t pow2_floor(int32_t n)
{
    int32_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

static int32_t real_rank(const hd_plan_t *plan, int32_t v)
{
    return v < plan->extra ? 2 * v : v + plan->extra;
}

static void hd_plan_init(hd_plan_t *plan, int32_t size, int32_t rank)
{
    plan->p = pow2_floor(size);
    plan->extra = size - plan->p;
    if (rank < 2 * plan->extra)
        plan->v = rank % 2 ? -1 : rank / 2;
    else
        plan->v = rank - plan->extra;
}

/* The partial form of units [u0, u1) as one contiguous message: from work when this rank's data already
 * lives there, else this rank's plain values (FAST) or their compensated form loaded into work. */
static pycoll_status_t units_source(const reduction_t *red, const hd_plan_t *plan, const char *input, char *work,
                                    bool in_work, int32_t u0, int32_t u1, const void **source)
{
    const int64_t e0 = plan->uoff[u0];
    *source = work + e0 * red->wsize;
    if (in_work)
        return PYCOLL_OK;
    pycoll_status_t status = PYCOLL_OK;
    for (int32_t u = u0; status == PYCOLL_OK && u < u1; u++) {
        const void *unit_source;
        int64_t e = plan->uoff[u];
        status = reduction_source(red, work + e * red->wsize, input + e * red->dsize, plan->uoff[u + 1] - e,
                                  &unit_source);
    }
    if (!red->compensated)
        *source = input + e0 * red->dsize;
    return status;
}

/* work[units u0..u1) = op(this rank's data, received), received laid out like work from unit u0. */
static pycoll_status_t combine_units(const reduction_t *red, const hd_plan_t *plan, const char *input,
                                     char *work, bool in_work, int32_t u0, int32_t u1, const char *received)
{
    pycoll_status_t status = PYCOLL_OK;
    for (int32_t u = u0; status == PYCOLL_OK && u < u1; u++) {
        const int64_t e = plan->uoff[u], n = plan->uoff[u + 1] - e;
        const char *other = received + (e - plan->uoff[u0]) * red->wsize;
        status = in_work ? reduction_combine(red, work + e * red->wsize, other, n)
                         : reduction_add_plain(red, work + e * red->wsize, input + e * red->dsize, other, n);
    }
    return status;
}

static int64_t units_bytes(const hd_plan_t *plan, int32_t u0, int32_t u1, size_t elem_bytes)
{
    return (plan->uoff[u1] - plan->uoff[u0]) * (int64_t)elem_bytes;
}

/* Fold (odd ranks of the first 2 * extra hand their data over), then recursive halving. Afterwards the
 * partials of group v are in work (v >= 0). scratch holds up to the whole buffer of partials. */
static pycoll_status_t fold_and_halve(const reduction_t *red, const hd_plan_t *plan, const char *input,
                                      char *work, char *scratch)
{
    pycoll_p2p_t *p2p = red->p2p;
    const int32_t rank = p2p->rank, nunits = plan->gunit[plan->p];
    bool in_work = false;
    pycoll_status_t status = PYCOLL_OK;
    if (rank < 2 * plan->extra) {
        if (plan->v < 0) {
            const void *source;
            status = units_source(red, plan, input, work, false, 0, nunits, &source);
            return status != PYCOLL_OK ? status
                                       : exchange(p2p, rank - 1, source, units_bytes(plan, 0, nunits, red->wsize),
                                                  -1, NULL, 0, phase_tag(TAG_HD_FOLD, 0));
        }
        status = exchange(p2p, -1, NULL, 0, rank + 1, scratch, units_bytes(plan, 0, nunits, red->wsize),
                          phase_tag(TAG_HD_FOLD, 0));
        if (status == PYCOLL_OK)
            status = combine_units(red, plan, input, work, false, 0, nunits, scratch);
        in_work = true;
    }
    int32_t lo = 0, hi = plan->p, step = 0;
    for (int32_t mask = plan->p / 2; status == PYCOLL_OK && mask >= 1; mask /= 2, step++) {
        const int32_t mid = lo + mask, partner = real_rank(plan, plan->v ^ mask);
        const bool upper = plan->v & mask;
        const int32_t keep0 = upper ? mid : lo, keep1 = upper ? hi : mid;
        const int32_t give0 = upper ? lo : mid, give1 = upper ? mid : hi;
        const int32_t ku0 = plan->gunit[keep0], ku1 = plan->gunit[keep1];
        const int32_t gu0 = plan->gunit[give0], gu1 = plan->gunit[give1];
        const void *source;
        status = units_source(red, plan, input, work, in_work, gu0, gu1, &source);
        if (status == PYCOLL_OK)
            status = exchange(p2p, partner, source, units_bytes(plan, gu0, gu1, red->wsize), partner, scratch,
                              units_bytes(plan, ku0, ku1, red->wsize), phase_tag(TAG_HD_REDUCE_SCATTER, step));
        if (status == PYCOLL_OK)
            status = combine_units(red, plan, input, work, in_work, ku0, ku1, scratch);
        in_work = true;
        lo = keep0;
        hi = keep1;
    }
    return status;
}

pycoll_status_t pycoll_halving_doubling_all_reduce(pycoll_p2p_t *p2p, void *buf, int64_t count,
                                                   pycoll_dtype_t dtype, pycoll_op_t op,
                                                   pycoll_accuracy_t accuracy)
{
    pycoll_status_t status = check_collective_args(p2p, "halving_doubling all_reduce", buf, count, dtype, op);
    if (status != PYCOLL_OK || p2p->size == 1 || count == 0)
        return status;
    reduction_t red;
    reduction_init(&red, p2p, dtype, op, accuracy);
    hd_plan_t plan;
    hd_plan_init(&plan, p2p->size, p2p->rank);
    /* All-reduce: one unit per group, count split evenly over the p virtual ranks. */
    int64_t *uoff = scratch_alloc(p2p, (plan.p + 1) * (int64_t)sizeof *uoff, "halving_doubling all_reduce");
    int32_t *gunit = scratch_alloc(p2p, (plan.p + 1) * (int64_t)sizeof *gunit, "halving_doubling all_reduce");
    /* Receive scratch, then (compensated) the partials: both in the communicator's reused workspace. */
    const int64_t part_bytes = count * (int64_t)red.wsize;
    char *scratch = comm_workspace(p2p, red.compensated ? 2 * part_bytes : part_bytes,
                                   "halving_doubling all_reduce");
    char *work = !scratch ? NULL : red.compensated ? scratch + part_bytes : buf;
    char *data = buf;
    status = uoff && gunit && scratch && work ? PYCOLL_OK : PYCOLL_ERR_NOMEM;
    if (status == PYCOLL_OK) {
        const block_layout_t layout = split_evenly(count, plan.p);
        for (int32_t g = 0; g <= plan.p; g++) {
            uoff[g] = g < plan.p ? block_offset(layout, g) : count;
            gunit[g] = g;
        }
        plan.uoff = uoff;
        plan.gunit = gunit;
        status = fold_and_halve(&red, &plan, buf, work, scratch);
    }
    if (status == PYCOLL_OK && plan.v >= 0) {
        const int32_t v = plan.v;
        status = reduction_store(&red, data + uoff[v] * red.dsize, work + uoff[v] * red.wsize,
                                 uoff[v + 1] - uoff[v]);
        /* Recursive doubling of the finished groups, straight into buf. */
        int32_t lo = v, step = 0;
        for (int32_t mask = 1; status == PYCOLL_OK && mask < plan.p; mask *= 2, step++) {
            const int32_t plo = lo ^ mask, partner = real_rank(&plan, v ^ mask);
            status = exchange(p2p, partner, data + uoff[lo] * red.dsize, units_bytes(&plan, lo, lo + mask, red.dsize),
                              partner, data + uoff[plo] * red.dsize, units_bytes(&plan, plo, plo + mask, red.dsize),
                              phase_tag(TAG_HD_ALL_GATHER, step));
            lo = lo < plo ? lo : plo;
        }
    }
    if (status == PYCOLL_OK && p2p->rank < 2 * plan.extra) {
        const int64_t nbytes = count * (int64_t)red.dsize;
        status = plan.v >= 0 ? exchange(p2p, p2p->rank + 1, buf, nbytes, -1, NULL, 0, phase_tag(TAG_HD_UNFOLD, 0))
                             : exchange(p2p, -1, NULL, 0, p2p->rank - 1, buf, nbytes, phase_tag(TAG_HD_UNFOLD, 0));
    }
    free(uoff);
    free(gunit);
    return status;
}

pycoll_status_t halving_doubling_reduce_scatter(const reduction_t *red, const void *input, void *out,
                                                int64_t count)
{
    pycoll_p2p_t *p2p = red->p2p;
    const int32_t size = p2p->size, rank = p2p->rank;
    hd_plan_t plan;
    hd_plan_init(&plan, size, rank);
    /* Reduce-scatter: the units are the size blocks of count elements; a folded pair's group is both of
     * their blocks, so the even rank forwards the odd one's block at the end. */
    const int64_t total = (int64_t)size * count;
    int64_t *uoff = scratch_alloc(p2p, (size + 1) * (int64_t)sizeof *uoff, "halving_doubling reduce_scatter");
    int32_t *gunit = scratch_alloc(p2p, (plan.p + 1) * (int64_t)sizeof *gunit, "halving_doubling reduce_scatter");
    char *scratch = scratch_alloc(p2p, total * (int64_t)red->wsize, "halving_doubling reduce_scatter");
    char *work = scratch_alloc(p2p, total * (int64_t)red->wsize, "halving_doubling reduce_scatter");
    pycoll_status_t status = uoff && gunit && scratch && work ? PYCOLL_OK : PYCOLL_ERR_NOMEM;
    if (status == PYCOLL_OK) {
        for (int32_t b = 0; b <= size; b++)
            uoff[b] = b * count;
        for (int32_t g = 0; g <= plan.p; g++)
            gunit[g] = g < plan.p ? real_rank(&plan, g) : size;
        plan.uoff = uoff;
        plan.gunit = gunit;
        status = fold_and_halve(red, &plan, input, work, scratch);
    }
    const int64_t nbytes = count * (int64_t)red->dsize;
    if (status == PYCOLL_OK && plan.v >= 0)
        status = reduction_store(red, out, work + uoff[rank] * red->wsize, count);
    if (status == PYCOLL_OK && rank < 2 * plan.extra) {
        if (plan.v >= 0) {
            status = reduction_store(red, scratch, work + uoff[rank + 1] * red->wsize, count);
            if (status == PYCOLL_OK)
                status = exchange(p2p, rank + 1, scratch, nbytes, -1, NULL, 0, phase_tag(TAG_HD_UNFOLD, 0));
        } else {
            status = exchange(p2p, -1, NULL, 0, rank - 1, out, nbytes, phase_tag(TAG_HD_UNFOLD, 0));
        }
    }
    free(uoff);
    free(gunit);
    free(scratch);
    free(work);
    return status;
}
