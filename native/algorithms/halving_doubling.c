/* Rabenseifner's all-reduce: a recursive-halving reduce-scatter (log2 p steps, each exchanging half of the
 * remaining range with the partner at distance p/2, p/4, ..., 1) then a recursive-doubling all-gather
 * (the same steps in reverse): 2 log2 p messages and 2 (p-1)/p of the data per rank.
 * Any world size N: with p the largest power of two <= N and extra = N - p, the first 2 * extra ranks pair
 * up before the halving; each odd one hands its data to its even neighbour and sits out, and gets the
 * result back at the end. The p remaining ranks are numbered v = 0..p-1 ("virtual" ranks).
 * Virtual rank v ends the halving owning group v (a block of the data), a run of whole units (pieces of at
 * most one segment, see cut_units); counts smaller than p just give empty groups.
 * Compensated mode: the first message a rank sends (fold, or first halving step) is its plain values, and the
 * last step rounds each unit into the result as soon as it is combined, so the extra cost over FAST mode is
 * the (sum, comp) pairs of the later steps and the arithmetic on data already in cache. */
#include "algorithms/phases.h"

#include <stdlib.h>

typedef struct hd_plan {
    int32_t p, extra;
    int32_t v;              /* this rank's virtual rank, -1 when folded away */
    const int64_t *uoff;    /* units: unit i is elements [uoff[i], uoff[i+1]) */
    const int64_t *gunit;   /* groups: group g is units [gunit[g], gunit[g+1]) */
    int64_t seg;            /* elements of the longest unit */
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

/* Units: each of the nblocks blocks of layout cut into pieces of at most PYCOLL_RING_SEGMENT_BYTES of
 * partials; block_unit[b] is block b's first unit. Small units keep a unit's partial, the received one and the
 * loaded plain values in cache, so combining a unit and (last step) rounding it reads memory once. Returns the
 * unit offsets (malloc'ed, NULL when out of memory). */
static int64_t *cut_units(const coll_ctx_t *ctx, const reduction_t *red, hd_plan_t *plan, block_layout_t layout,
                          int32_t nblocks, int64_t *block_unit, const char *what)
{
    int64_t seg = ctx->segment_bytes / (int64_t)red->wsize;
    if (seg < 1)
        seg = 1;
    plan->seg = seg;
    int64_t units = 0;
    for (int32_t b = 0; b < nblocks; b++) {
        block_unit[b] = units;
        units += (block_count(layout, b) + seg - 1) / seg;
    }
    block_unit[nblocks] = units;
    int64_t *uoff = scratch_alloc(red->p2p, (units + 1) * (int64_t)sizeof *uoff, what);
    if (!uoff)
        return NULL;
    for (int32_t b = 0; b < nblocks; b++)
        for (int64_t u = block_unit[b]; u < block_unit[b + 1]; u++)
            uoff[u] = block_offset(layout, b) + (u - block_unit[b]) * seg;
    uoff[units] = block_offset(layout, nblocks - 1) + block_count(layout, nblocks - 1);
    return uoff;
}

static int64_t units_bytes(const hd_plan_t *plan, int64_t u0, int64_t u1, size_t elem_bytes)
{
    return (plan->uoff[u1] - plan->uoff[u0]) * (int64_t)elem_bytes;
}

/* Where the halving keeps its data. Before this rank has combined anything (in_work false) it sends and
 * receives plain values: a compensated partial would carry an all-zero comp half, twice the bytes for
 * nothing. */
typedef struct hd_buffers {
    const char *input;     /* this rank's plain values */
    char *work;            /* partials, laid out like the units */
    char *scratch;         /* what a step receives */
    char *tmp;             /* compensated: two units of partials (the one being rounded, loaded plain values) */
    char *final;           /* plain values indexed like input: where the last step rounds to, or NULL */
} hd_buffers_t;

/* Units [u0, u1) of this rank, as one contiguous message. */
static const void *units_source(const reduction_t *red, const hd_plan_t *plan, const hd_buffers_t *bufs,
                                bool in_work, int64_t u0)
{
    const int64_t e0 = plan->uoff[u0];
    return in_work ? (const void *)(bufs->work + e0 * red->wsize) : (const void *)(bufs->input + e0 * red->dsize);
}

/* work[units u0..u1) = op(this rank's data, received), received laid out like units_source's message from
 * unit u0 (plain values when the sender had combined nothing yet); with last, each unit is also rounded into
 * final as soon as it is combined, while still in cache. */
static pycoll_status_t combine_units(const reduction_t *red, const hd_plan_t *plan, const hd_buffers_t *bufs,
                                     bool in_work, bool received_plain, bool last, int64_t u0, int64_t u1)
{
    const size_t received_size = received_plain ? red->dsize : red->wsize;
    char *loaded = bufs->tmp + plan->seg * (int64_t)red->wsize;
    pycoll_status_t status = PYCOLL_OK;
    for (int64_t u = u0; status == PYCOLL_OK && u < u1; u++) {
        const int64_t e = plan->uoff[u], n = plan->uoff[u + 1] - e;
        const char *other = bufs->scratch + (e - plan->uoff[u0]) * (int64_t)received_size;
        const char *own = bufs->input + e * red->dsize;
        /* A partial rounded straight into final need not reach work (compensated; in FAST mode work is final
         * itself). */
        const bool rounded_now = last && bufs->final;
        char *part = rounded_now && !in_work && red->compensated ? bufs->tmp : bufs->work + e * red->wsize;
        if (in_work)
            status = received_plain ? reduction_combine_plain(red, part, other, loaded, n)
                                    : reduction_combine(red, part, other, n);
        else
            status = received_plain ? reduction_add_plains(red, part, own, other, loaded, n)
                                    : reduction_add_plain(red, part, own, other, n);
        if (status == PYCOLL_OK && rounded_now)
            status = reduction_store(red, bufs->final + e * red->dsize, part, n);
    }
    return status;
}

/* Fold (odd ranks of the first 2 * extra hand their data over), then recursive halving. Afterwards the
 * partials of group v are in work (v >= 0), or rounded into bufs->final when that is set. */
static pycoll_status_t fold_and_halve(const reduction_t *red, const hd_plan_t *plan, const hd_buffers_t *bufs)
{
    pycoll_p2p_t *p2p = red->p2p;
    const int32_t rank = p2p->rank;
    const int64_t nunits = plan->gunit[plan->p];
    bool in_work = false;
    pycoll_status_t status = PYCOLL_OK;
    if (rank < 2 * plan->extra) {
        if (plan->v < 0)
            return exchange(p2p, rank - 1, bufs->input, units_bytes(plan, 0, nunits, red->dsize), -1, NULL, 0,
                            phase_tag(TAG_HD_FOLD, 0));
        status = exchange(p2p, -1, NULL, 0, rank + 1, bufs->scratch, units_bytes(plan, 0, nunits, red->dsize),
                          phase_tag(TAG_HD_FOLD, 0));
        if (status == PYCOLL_OK)
            status = combine_units(red, plan, bufs, false, true, false, 0, nunits);
        in_work = true;
    }
    int32_t lo = 0, hi = plan->p, step = 0;
    for (int32_t mask = plan->p / 2; status == PYCOLL_OK && mask >= 1; mask /= 2, step++) {
        const int32_t mid = lo + mask, partner = real_rank(plan, plan->v ^ mask);
        const bool upper = plan->v & mask;
        const int32_t keep0 = upper ? mid : lo, keep1 = upper ? hi : mid;
        const int32_t give0 = upper ? lo : mid, give1 = upper ? mid : hi;
        const int64_t ku0 = plan->gunit[keep0], ku1 = plan->gunit[keep1];
        const int64_t gu0 = plan->gunit[give0], gu1 = plan->gunit[give1];
        /* Only the first 2 * extra ranks have combined anything before step 0. */
        const bool received_plain = step == 0 && partner >= 2 * plan->extra;
        status = exchange(p2p, partner, units_source(red, plan, bufs, in_work, gu0),
                          units_bytes(plan, gu0, gu1, in_work ? red->wsize : red->dsize), partner, bufs->scratch,
                          units_bytes(plan, ku0, ku1, received_plain ? red->dsize : red->wsize),
                          phase_tag(TAG_HD_REDUCE_SCATTER, step));
        if (status == PYCOLL_OK)
            status = combine_units(red, plan, bufs, in_work, received_plain, mask == 1, ku0, ku1);
        in_work = true;
        lo = keep0;
        hi = keep1;
    }
    return status;
}

/* Each unit of units [u0, u1) of work rounded into dst, one after the other. */
static pycoll_status_t store_units(const reduction_t *red, const hd_plan_t *plan, char *dst, const char *work,
                                   int64_t u0, int64_t u1)
{
    pycoll_status_t status = PYCOLL_OK;
    for (int64_t u = u0; status == PYCOLL_OK && u < u1; u++) {
        const int64_t e = plan->uoff[u], n = plan->uoff[u + 1] - e;
        status = reduction_store(red, dst + (e - plan->uoff[u0]) * red->dsize, work + e * red->wsize, n);
    }
    return status;
}

/* The communicator's workspace as the halving's buffers: receive scratch and (compensated, or when input is
 * read-only) work, each for count elements of partials, then (compensated) tmp for two units. */
static bool take_workspace(coll_ctx_t *ctx, const reduction_t *red, const hd_plan_t *plan, int64_t count, bool own_work,
                           hd_buffers_t *bufs, const char *what)
{
    const int64_t part_bytes = count * (int64_t)red->wsize;
    const int64_t tmp_bytes = red->compensated ? 2 * plan->seg * (int64_t)red->wsize : 0;
    char *space = comm_workspace(ctx, (own_work ? 2 : 1) * part_bytes + tmp_bytes, what);
    if (!space)
        return false;
    bufs->scratch = space;
    if (own_work)
        bufs->work = space + part_bytes;
    bufs->tmp = space + (own_work ? 2 : 1) * part_bytes;
    return true;
}

pycoll_status_t halving_doubling_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                            pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    const char *what = "halving_doubling all_reduce";
    pycoll_status_t status;
    reduction_t red;
    if (!all_reduce_setup(ctx, what, buf, count, dtype, op, accuracy, &red, &status))
        return status;
    hd_plan_t plan;
    hd_plan_init(&plan, p2p->size, p2p->rank);
    /* All-reduce: group v is block v of count split evenly over the p virtual ranks. */
    int64_t *gunit = scratch_alloc(p2p, (plan.p + 1) * (int64_t)sizeof *gunit, what);
    int64_t *uoff = gunit ? cut_units(ctx, &red, &plan, split_evenly(count, plan.p), plan.p, gunit, what) : NULL;
    char *data = buf;
    /* FAST mode combines in place: work is buf, which the last step then leaves as it is (or scales). */
    hd_buffers_t bufs = {.input = buf, .work = buf, .final = buf};
    status = uoff && take_workspace(ctx, &red, &plan, count, red.compensated, &bufs, what) ? PYCOLL_OK
                                                                                      : PYCOLL_ERR_NOMEM;
    if (status == PYCOLL_OK) {
        plan.uoff = uoff;
        plan.gunit = gunit;
        status = fold_and_halve(&red, &plan, &bufs);
    }
    if (status == PYCOLL_OK && plan.v >= 0) {
        /* Recursive doubling of the finished groups, straight into buf. */
        int32_t lo = plan.v, step = 0;
        for (int32_t mask = 1; status == PYCOLL_OK && mask < plan.p; mask *= 2, step++) {
            const int32_t plo = lo ^ mask, partner = real_rank(&plan, plan.v ^ mask);
            const int64_t u = gunit[lo], pu = gunit[plo];
            status = exchange(p2p, partner, data + uoff[u] * red.dsize,
                              units_bytes(&plan, u, gunit[lo + mask], red.dsize), partner,
                              data + uoff[pu] * red.dsize, units_bytes(&plan, pu, gunit[plo + mask], red.dsize),
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

pycoll_status_t halving_doubling_reduce_scatter(coll_ctx_t *ctx, const reduction_t *red, const void *input,
                                                void *out, int64_t count)
{
    pycoll_p2p_t *p2p = red->p2p;
    const int32_t size = p2p->size, rank = p2p->rank;
    const char *what = "halving_doubling reduce_scatter";
    hd_plan_t plan;
    hd_plan_init(&plan, size, rank);
    /* Reduce-scatter: the blocks are the size blocks of count elements; a folded pair's group is both of
     * their blocks, so the even rank forwards the odd one's block at the end. input is read-only, so the
     * partials always go through work. */
    int64_t *block_unit = scratch_alloc(p2p, (size + 1) * (int64_t)sizeof *block_unit, what);
    int64_t *gunit = scratch_alloc(p2p, (plan.p + 1) * (int64_t)sizeof *gunit, what);
    int64_t *uoff =
        block_unit && gunit ? cut_units(ctx, red, &plan, equal_blocks(count), size, block_unit, what) : NULL;
    hd_buffers_t bufs = {.input = input};
    pycoll_status_t status = uoff && take_workspace(ctx, red, &plan, (int64_t)size * count, true, &bufs, what)
                                 ? PYCOLL_OK
                                 : PYCOLL_ERR_NOMEM;
    if (status == PYCOLL_OK) {
        for (int32_t g = 0; g <= plan.p; g++)
            gunit[g] = block_unit[g < plan.p ? real_rank(&plan, g) : size];
        plan.uoff = uoff;
        plan.gunit = gunit;
        status = fold_and_halve(red, &plan, &bufs);
    }
    const int64_t nbytes = count * (int64_t)red->dsize;
    if (status == PYCOLL_OK && plan.v >= 0)
        status = store_units(red, &plan, out, bufs.work, block_unit[rank], block_unit[rank + 1]);
    if (status == PYCOLL_OK && rank < 2 * plan.extra) {
        if (plan.v >= 0) {
            status = store_units(red, &plan, bufs.scratch, bufs.work, block_unit[rank + 1], block_unit[rank + 2]);
            if (status == PYCOLL_OK)
                status = exchange(p2p, rank + 1, bufs.scratch, nbytes, -1, NULL, 0, phase_tag(TAG_HD_UNFOLD, 0));
        } else {
            status = exchange(p2p, -1, NULL, 0, rank - 1, out, nbytes, phase_tag(TAG_HD_UNFOLD, 0));
        }
    }
    free(uoff);
    free(gunit);
    free(block_unit);
    return status;
}
