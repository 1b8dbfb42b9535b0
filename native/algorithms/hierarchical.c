/* Hierarchical all-reduce for jobs that span hosts: a ring reduce-scatter among the ranks of each host, then
 * every rank all-reduces the part it now holds with the ranks holding the same part on the other hosts -- all
 * local ranks at once, each over its own inter-host link share, not one leader per host -- then a ring
 * all-gather within each host. Per direction, a host's link then carries 2 (H-1)/H of the buffer (its L ranks
 * each send that share of their 1/L part), against 2 (N-1)/N for a flat ring, whose edge leaving the host carries
 * every step; and the steps that wait on the network drop from 2 (N-1) to 2 (H-1).
 *
 * The phases are the existing schedules (ring.c) run over group views (transport/group_view.h) of the parent's
 * ranks, so no schedule is written twice. Here they run one after the other; a large buffer on hosts of equal
 * size runs them as a pipeline of chunks instead (hierarchical_pipeline.c), so that the links carry one chunk
 * while the host reduces or gathers another.
 *
 * Uneven hosts (3 + 1 ranks): each host splits the buffer evenly among its own ranks (split_evenly over L, so
 * the intra-host phases are the ring's own layout, unchanged). Hosts with different L cut at different places;
 * the cross-host phase works on the pieces between consecutive cuts of ANY host. Each piece lies inside one
 * block on every host, so it has exactly one owner per host, and those owners all-reduce it. Every rank runs
 * its pieces in element order; a piece's owners all run every earlier piece they own first, so waits never
 * form a cycle. With equal L the cuts coincide: one piece per local rank, all running at the same time.
 *
 * The cross-host all-reduce is the ring: hierarchy pays where messages are large, and with H hosts of one
 * owner each the ring sends the least over the inter-host links.
 *
 * Bitwise identity: each element is reduced on one rank per host (the host's reduce-scatter), then by the
 * cross-host all-reduce, which gives its owners identical bits; the all-gather only copies.
 *
 * avg: the phases sum; the value is divided once by the world size where it is rounded.
 *
 * Compensated: the host's reduce-scatter leaves this rank's block as (sum, comp) pairs; they cross hosts as
 * they are, as one compensated all-reduce in the accumulator dtype of the 2 m values [sum m | comp m] of each
 * piece, and are rounded (and divided, for avg) once, at the end. The error is then one rounding of the sum of
 * the hosts' sums in the accumulator dtype plus the final one, independent of the number of ranks; the price is
 * twice the bytes on the inter-host link (fast mode sends plain values).
 *
 * Tags: the phases keep the ring's tags. Every message carries the descriptor (algorithm "hierarchical"), so a
 * peer running another schedule is a mismatch at its first message; within this one, every rank derives the
 * same plan from the same count and host map, and the pieces a pair shares run in the same order on both. */
#include "algorithms/hierarchical.h"

#include <stdlib.h>

/* The host map in dense form: hosts numbered 0..hosts-1 in order of their lowest rank, each host's ranks in
 * rank order. One allocation: host and local per rank, then per host its size and its ranks' start in ranks. */
typedef struct host_plan {
    int32_t hosts;
    int32_t *host;       /* host[r]: rank r's host number */
    int32_t *local;      /* local[r]: rank r's place among its host's ranks */
    int32_t *local_size; /* local_size[h] */
    int32_t *first;      /* ranks[first[h] .. first[h] + local_size[h]): host h's ranks */
    int32_t *ranks;
} host_plan_t;

static pycoll_status_t host_plan_init(host_plan_t *plan, pycoll_p2p_t *p2p, const int32_t *host_of)
{
    const int32_t size = p2p->size;
    int32_t *mem = scratch_alloc(p2p, 6 * (int64_t)size * (int64_t)sizeof *mem, "hierarchical all_reduce");
    if (!mem)
        return PYCOLL_ERR_NOMEM;
    int32_t *dense = mem + 5 * (int64_t)size; /* host id (0..size-1, validated by the communicator) -> number */
    *plan = (host_plan_t){.host = mem, .local = mem + size, .local_size = mem + 2 * (int64_t)size,
                          .first = mem + 3 * (int64_t)size, .ranks = mem + 4 * (int64_t)size};
    for (int32_t i = 0; i < size; i++)
        dense[i] = -1;
    for (int32_t r = 0; r < size; r++) {
        int32_t id = host_of ? host_of[r] : 0;
        if (dense[id] < 0) {
            dense[id] = plan->hosts;
            plan->local_size[plan->hosts++] = 0;
        }
        plan->host[r] = dense[id];
        plan->local[r] = plan->local_size[plan->host[r]]++;
    }
    for (int32_t h = 0, start = 0; h < plan->hosts; h++) {
        plan->first[h] = start;
        start += plan->local_size[h];
    }
    for (int32_t r = 0; r < size; r++)
        plan->ranks[plan->first[plan->host[r]] + plan->local[r]] = r;
    return PYCOLL_OK;
}

/* The block of split_evenly(count, n) that holds element e (e < count). */
static int32_t block_holding(block_layout_t layout, int64_t e)
{
    const int64_t long_part = layout.extra * (layout.base + 1);
    if (e < long_part)
        return (int32_t)(e / (layout.base + 1));
    return (int32_t)(layout.extra + (e - long_part) / layout.base);
}

static int compare_offsets(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Every host's block boundaries, sorted (duplicates kept: pieces of length 0 are skipped). *n set. */
static int64_t *piece_cuts(pycoll_p2p_t *p2p, const host_plan_t *plan, int64_t count, int64_t *n)
{
    int64_t *cuts = scratch_alloc(p2p, ((int64_t)p2p->size + plan->hosts) * (int64_t)sizeof *cuts,
                                  "hierarchical all_reduce");
    if (!cuts)
        return NULL;
    *n = 0;
    for (int32_t h = 0; h < plan->hosts; h++)
        for (int32_t l = 0; l <= plan->local_size[h]; l++)
            cuts[(*n)++] = block_offset(split_evenly(count, plan->local_size[h]), l);
    qsort(cuts, (size_t)*n, sizeof *cuts, compare_offsets);
    return cuts;
}

/* The pieces of this rank's block [lo, hi): piece i is [cuts[i], cuts[i + 1]) when not empty and inside it. */
typedef struct pieces {
    int64_t *cuts;
    int64_t ncuts;
    int64_t lo, hi;
} pieces_t;

static bool is_my_piece(const pieces_t *p, int64_t i)
{
    return p->cuts[i + 1] > p->cuts[i] && p->cuts[i] >= p->lo && p->cuts[i] < p->hi;
}

/* The piece's owners (one per host, in host order) as a view: this rank is view rank `its host`. */
static pycoll_status_t piece_view(group_view_t *view, int32_t *owners, pycoll_p2p_t *p2p, const host_plan_t *plan,
                                  int64_t count, int64_t start)
{
    for (int32_t h = 0; h < plan->hosts; h++)
        owners[h] = plan->ranks[plan->first[h] + block_holding(split_evenly(count, plan->local_size[h]), start)];
    return group_view_init(view, p2p, owners, plan->hosts);
}

/* Fast mode: all-reduce each of this rank's pieces, in place, with its owners on the other hosts. */
static pycoll_status_t cross_host_plain(coll_ctx_t *ctx, const host_plan_t *plan, const pieces_t *pieces,
                                        int32_t *owners, char *data, int64_t count, pycoll_dtype_t dtype,
                                        pycoll_op_t op)
{
    const size_t dsize = pycoll_dtype_size(dtype);
    pycoll_status_t status = PYCOLL_OK;
    for (int64_t i = 0; status == PYCOLL_OK && i + 1 < pieces->ncuts; i++) {
        if (!is_my_piece(pieces, i))
            continue;
        const int64_t a = pieces->cuts[i], m = pieces->cuts[i + 1] - a;
        group_view_t view;
        status = piece_view(&view, owners, ctx->p2p, plan, count, a);
        if (status != PYCOLL_OK)
            break;
        coll_ctx_t sub = view_ctx(ctx, &view);
        status = ring_all_reduce(&sub, data + a * (int64_t)dsize, m, dtype, op, PYCOLL_ACCURACY_FAST);
        view_ctx_return(ctx, &sub);
        status = group_view_finish(&view, status);
    }
    return status;
}

/* Compensated mode: pairs holds this rank's block as partials with the pieces as units (piece [a, b) at
 * (a - lo) * wsize: [sum | comp]); all-reduce each with its owners, then round it into data. */
static pycoll_status_t cross_host_pairs(coll_ctx_t *ctx, const host_plan_t *plan, const pieces_t *pieces,
                                        int32_t *owners, const reduction_t *final, char *pairs, char *data,
                                        int64_t count)
{
    const pycoll_dtype_t acc = pycoll_accumulator_dtype(final->dtype);
    pycoll_status_t status = PYCOLL_OK;
    for (int64_t i = 0; status == PYCOLL_OK && i + 1 < pieces->ncuts; i++) {
        if (!is_my_piece(pieces, i))
            continue;
        const int64_t a = pieces->cuts[i], m = pieces->cuts[i + 1] - a;
        char *pair = pairs + (a - pieces->lo) * (int64_t)final->wsize;
        group_view_t view;
        status = piece_view(&view, owners, ctx->p2p, plan, count, a);
        if (status != PYCOLL_OK)
            break;
        coll_ctx_t sub = view_ctx(ctx, &view);
        status = ring_all_reduce(&sub, pair, 2 * m, acc, PYCOLL_SUM, PYCOLL_ACCURACY_COMPENSATED);
        view_ctx_return(ctx, &sub);
        status = group_view_finish(&view, status);
        if (status == PYCOLL_OK)
            status = reduction_store(final, data + a * (int64_t)final->dsize, pair, m);
    }
    return status;
}

/* The partials of this rank's block, from the units the ring reduce-scatter left them in (its segments, in
 * work at their elements' offsets) to the pieces' units in pairs: each overlap of a segment and a piece is two
 * copies, its sums and its comps. */
static pycoll_status_t regroup_partials(const coll_ctx_t *ctx, const reduction_t *red, const pieces_t *pieces,
                                        const char *work, char *pairs)
{
    const int64_t seg = ring_segment_elements(ctx->segment_bytes, red->wsize);
    const int64_t lo = pieces->lo, hi = pieces->hi, w = (int64_t)red->wsize, as = (int64_t)red->asize;
    pycoll_status_t status = PYCOLL_OK;
    int64_t i = 0;
    for (int64_t x = lo; status == PYCOLL_OK && x < hi;) {
        while (!is_my_piece(pieces, i) || pieces->cuts[i + 1] <= x)
            i++;
        const int64_t pa = pieces->cuts[i], pm = pieces->cuts[i + 1] - pa;
        const int64_t ua = lo + (x - lo) / seg * seg, um = hi - ua < seg ? hi - ua : seg;
        const int64_t y = ua + um < pa + pm ? ua + um : pa + pm;
        const char *unit = work + ua * w;
        char *piece = pairs + (pa - lo) * w;
        status = memory_copy(red->p2p, piece + (x - pa) * as, unit + (x - ua) * as, (y - x) * as,
                             "hierarchical all_reduce");
        if (status == PYCOLL_OK)
            status = memory_copy(red->p2p, piece + (pm + x - pa) * as, unit + (um + x - ua) * as, (y - x) * as,
                                 "hierarchical all_reduce");
        x = y;
    }
    return status;
}

/* Compensated with a single rank on this host: the pieces' partials straight from its plain values. */
static pycoll_status_t load_partials(const reduction_t *red, const pieces_t *pieces, const char *data, char *pairs)
{
    pycoll_status_t status = PYCOLL_OK;
    for (int64_t i = 0; status == PYCOLL_OK && i + 1 < pieces->ncuts; i++) {
        if (!is_my_piece(pieces, i))
            continue;
        const int64_t a = pieces->cuts[i], m = pieces->cuts[i + 1] - a;
        const void *loaded;
        status = reduction_source(red, pairs + (a - pieces->lo) * (int64_t)red->wsize, data + a * (int64_t)red->dsize,
                                  m, &loaded);
    }
    return status;
}

/* Across hosts, for this rank's block [lo, lo + n) reduced within its host (red: that reduce-scatter's
 * reduction; work: its partials in compensated mode). */
static pycoll_status_t cross_host_phase(coll_ctx_t *ctx, const host_plan_t *plan, const reduction_t *red,
                                        const char *work, char *data, int64_t count, int64_t lo, int64_t n,
                                        pycoll_op_t op)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    pieces_t pieces = {.lo = lo, .hi = lo + n};
    pieces.cuts = piece_cuts(p2p, plan, count, &pieces.ncuts);
    int32_t *owners = scratch_alloc(p2p, plan->hosts * (int64_t)sizeof *owners, "hierarchical all_reduce");
    pycoll_status_t status = pieces.cuts && owners ? PYCOLL_OK : PYCOLL_ERR_NOMEM;
    /* Rounded (and divided for avg, by the world size) once, at the end. */
    reduction_t final = *red;
    final.p2p = p2p;
    final.divisor = op == PYCOLL_AVG ? p2p->size : 1;
    if (status == PYCOLL_OK && !red->compensated) {
        status = cross_host_plain(ctx, plan, &pieces, owners, data, count, red->dtype, red->op);
        if (status == PYCOLL_OK && op == PYCOLL_AVG)
            status = reduction_store(&final, data + lo * (int64_t)red->dsize, data + lo * (int64_t)red->dsize, n);
    } else if (status == PYCOLL_OK) {
        char *pairs = data_alloc(p2p, n * (int64_t)red->wsize, "hierarchical all_reduce");
        status = !pairs                                 ? PYCOLL_ERR_NOMEM
                 : plan->local_size[plan->host[p2p->rank]] > 1 ? regroup_partials(ctx, red, &pieces, work, pairs)
                                                               : load_partials(red, &pieces, data, pairs);
        if (status == PYCOLL_OK)
            status = cross_host_pairs(ctx, plan, &pieces, owners, &final, pairs, data, count);
        data_free(p2p, pairs);
    }
    free(pieces.cuts);
    free(owners);
    return status;
}

/* Every host has as many ranks as this one. */
static bool equal_hosts(const host_plan_t *plan)
{
    for (int32_t h = 1; h < plan->hosts; h++)
        if (plan->local_size[h] != plan->local_size[0])
            return false;
    return true;
}

/* The pipeline (hierarchical_pipeline.c) over this host's ranks and the ranks in this rank's place on every host. */
static pycoll_status_t run_pipeline(coll_ctx_t *ctx, const host_plan_t *plan, group_view_t *local,
                                    const reduction_t *red, const void *input, void *buf, int64_t count,
                                    pycoll_op_t op)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    int32_t *owners = scratch_alloc(p2p, plan->hosts * (int64_t)sizeof *owners, "hierarchical all_reduce");
    if (!owners)
        return PYCOLL_ERR_NOMEM;
    for (int32_t h = 0; h < plan->hosts; h++)
        owners[h] = plan->ranks[plan->first[h] + plan->local[p2p->rank]];
    group_view_t cross;
    pycoll_status_t status = group_view_init(&cross, p2p, owners, plan->hosts);
    if (status == PYCOLL_OK)
        status = hierarchical_pipeline_run(ctx, local, &cross, red, op == PYCOLL_AVG ? p2p->size : 1, input, buf,
                                           count);
    free(owners);
    return status;
}

pycoll_status_t hierarchical_all_reduce_from(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                             pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    assert_checked_pair(p2p, sendbuf, recvbuf, count, dtype, op);
    const int64_t nbytes = count * (int64_t)pycoll_dtype_size(dtype);
    if (p2p->size == 1 || count == 0)
        return memory_copy(p2p, recvbuf, sendbuf, nbytes, "hierarchical all_reduce");
    host_plan_t plan;
    pycoll_status_t status = host_plan_init(&plan, p2p, ctx->host_of);
    if (status != PYCOLL_OK)
        return status;
    const int32_t host = plan.host[p2p->rank], nlocal = plan.local_size[host];
    /* The host's reduce-scatter reads the input where it lies and writes the result; a rank alone on its host has
     * none, and buffers that overlap cannot be read and written apart: the input is copied into the result first,
     * and everything runs there. */
    const void *input = sendbuf;
    void *buf = recvbuf;
    if (nlocal == 1 || !buffers_disjoint(sendbuf, recvbuf, nbytes)) {
        status = memory_copy(p2p, recvbuf, sendbuf, nbytes, "hierarchical all_reduce");
        input = recvbuf;
    }
    const block_layout_t layout = split_evenly(count, nlocal);
    char *data = buf;
    group_view_t local = {.parent = p2p};
    if (status == PYCOLL_OK)
        status = group_view_init(&local, p2p, plan.ranks + plan.first[host], nlocal);
    /* One host: the ring's two phases, rounding and dividing in the reduce-scatter; else the sum goes on. */
    reduction_t red;
    reduction_init(&red, &local.p2p, dtype, plan.hosts > 1 && op == PYCOLL_AVG ? PYCOLL_SUM : op, accuracy);
    if (status == PYCOLL_OK && hierarchical_pipeline_fits(ctx, &red, count, plan.hosts, nlocal, equal_hosts(&plan))) {
        status = run_pipeline(ctx, &plan, &local, &red, input, buf, count, op);
        free(plan.host);
        return status;
    }
    void *work = buf;
    if (status == PYCOLL_OK && red.compensated) {
        work = comm_workspace(ctx, count * (int64_t)red.wsize, "hierarchical all_reduce");
        status = work ? PYCOLL_OK : PYCOLL_ERR_NOMEM;
    }
    const int64_t lo = block_offset(layout, local.p2p.rank), n = block_count(layout, local.p2p.rank);
    if (status == PYCOLL_OK && nlocal > 1) {
        coll_ctx_t sub = view_ctx(ctx, &local);
        status = group_view_finish(&local, ring_reduce_scatter_blocks(&sub, &red, input, work, layout,
                                                                      data + lo * (int64_t)red.dsize));
    }
    if (status == PYCOLL_OK && plan.hosts > 1)
        status = cross_host_phase(ctx, &plan, &red, work, data, count, lo, n, op);
    if (status == PYCOLL_OK && nlocal > 1) {
        coll_ctx_t sub = view_ctx(ctx, &local);
        status = group_view_finish(&local, ring_all_gather_blocks(&sub, buf, red.dsize, layout));
    }
    free(plan.host);
    return status;
}

pycoll_status_t hierarchical_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                        pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    return hierarchical_all_reduce_from(ctx, buf, buf, count, dtype, op, accuracy);
}
