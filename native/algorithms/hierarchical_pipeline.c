/* The hierarchical all-reduce of a large buffer as a pipeline. Run phase after phase (hierarchical.c), the links
 * between hosts idle while each host reduces the whole buffer in memory, and the memory copies idle while the
 * buffer crosses hosts; on shaped links that costs about as much as the host phases take. Here the buffer is cut
 * into chunks, each one the hierarchical all-reduce in small: a ring reduce-scatter within the host, a ring
 * all-reduce of this rank's block with the ranks in the same place on the other hosts, a ring all-gather within
 * the host. While one chunk is reduced within the host, earlier ones are crossing hosts and an earlier one is
 * gathered, so the links always carry something.
 *
 * The schedule is a software pipeline of ticks. A chunk moves one stage per tick: stage 0 reduces it within
 * the host and posts its first cross-host step; stage k (1 <= k < 2 (H-1)) waits for step k-1, combines what
 * arrived (reduce-scatter steps) and posts step k; the last stage waits for the last step and gathers the chunk
 * within the host. Every rank runs the same ticks in the same order, so a pair of ranks posts its messages in
 * the same order on both sides, and a wait in a tick only needs what its peers posted in an earlier tick, or
 * what the host's ranks post in the same part of the same tick: no cycle.
 *
 * Chunks: in FAST mode a cross-host message is one ring segment (PYCOLL_RING_SEGMENT_BYTES) of plain values, so a
 * chunk is that times the ranks per host times the hosts. Uneven hosts keep the phase-after-phase schedule.
 *
 * Compensated: the host's reduce-scatter leaves this rank's block as (sum, comp) partials. A chunk is one ring
 * segment of partials times the ranks per host, so that the block is one unit of them, [sum n | comp n]; it is
 * regrouped into one unit per host's part, [sum m | comp m] each, so that every part crosses hosts as one message.
 * The cross-host reduce-scatter combines partials; the rank that completes a part rounds it once (and divides it,
 * for avg), and the cross-host all-gather then moves plain values, half the bytes or less. The error is that of
 * the phases one after the other: the sum of the hosts' partials, compensated, and one rounding at the end.
 *
 * Bitwise identity: every element is reduced on one rank per host, then by one cross-host ring on the rank that
 * completes it, which stores it once (rounded, divided for avg) before the all-gathers copy it. */
#include "algorithms/hierarchical.h"

#include <stdlib.h>
#include <string.h>

/* Below this many chunks the pipeline's first and last ticks (the links idle while the first chunk is reduced
 * within the host and the last gathered) are a large part of it: the phases run one after the other. */
enum { PIPELINE_MIN_CHUNKS = 4 };

typedef struct pipeline {
    coll_ctx_t *ctx;
    const reduction_t *red;     /* the host's reduce-scatter's (its errors are the host view's) */
    reduction_t across;         /* red for the cross-host steps (their errors are the cross view's) */
    reduction_t final;          /* across with the divisor: how a completed element is stored */
    group_view_t *local, *cross;
    const char *input;          /* read by each chunk's reduce-scatter within the host; may be buf */
    char *buf;
    block_layout_t chunks;
    int32_t nchunks;
    int32_t place, nlocal;      /* this rank's place on its host, and the host's ranks */
    int32_t host, hosts;        /* this rank's host number, and the hosts */
    int32_t steps;              /* of the cross-host ring: 2 (H - 1) */
    int32_t window;             /* chunks crossing hosts at once: one receive slot and request pair each */
    char *slots;
    int64_t slot_bytes;
    /* Compensated only: the newest chunk's partials from the host's reduce-scatter (a chunk of wsize elements),
     * and per slot its chunk's block regrouped by part ([sum m | comp m] for each host's part, in order). */
    char *work;
    char *pairs;
    int64_t pair_bytes;
    pycoll_request_t *reqs;     /* slot i: reqs[2 i] its send, reqs[2 i + 1] its receive */
} pipeline_t;

/* The most elements a chunk holds (chunks are cut no longer than this). Compensated: at most one ring segment
 * of partials per rank of the host, so that this rank's block of it is a single unit of the reduce-scatter. */
static int64_t chunk_elements(const coll_ctx_t *ctx, const reduction_t *red, int32_t nlocal, int32_t hosts)
{
    return red->compensated ? ring_segment_elements(ctx->segment_bytes, red->wsize) * nlocal
                            : ring_segment_elements(ctx->segment_bytes, red->dsize) * nlocal * hosts;
}

bool hierarchical_pipeline_fits(const coll_ctx_t *ctx, const reduction_t *red, int64_t count, int32_t hosts,
                                int32_t nlocal, bool equal_hosts)
{
    return equal_hosts && hosts > 1 && nlocal > 1 &&
           count / chunk_elements(ctx, red, nlocal, hosts) >= PIPELINE_MIN_CHUNKS;
}

/* The most elements a block of split_evenly(n, k) holds. */
static int64_t longest_part(int64_t n, int32_t k)
{
    return n / k + (n % k != 0);
}

static block_layout_t chunk_layout(const pipeline_t *p, int32_t c)
{
    return split_evenly(block_count(p->chunks, c), p->nlocal);
}

static int64_t chunk_byte(const pipeline_t *p, int32_t c)
{
    return block_offset(p->chunks, c) * (int64_t)p->red->dsize;
}

static char *chunk_start(const pipeline_t *p, int32_t c)
{
    return p->buf + chunk_byte(p, c);
}

/* This rank's block of chunk c (*n elements): what it carries across hosts. */
static char *own_block(const pipeline_t *p, int32_t c, int64_t *n)
{
    const block_layout_t layout = chunk_layout(p, c);
    *n = block_count(layout, p->place);
    return chunk_start(p, c) + block_offset(layout, p->place) * (int64_t)p->red->dsize;
}

/* Part b of chunk c's block (the share of it that host b completes): *at its first element within the block, *m
 * its elements. Returns the block. */
static char *locate_part(const pipeline_t *p, int32_t c, int32_t b, int64_t *at, int64_t *m)
{
    int64_t n;
    char *own = own_block(p, c, &n);
    const block_layout_t parts = split_evenly(n, p->hosts);
    *at = block_offset(parts, b);
    *m = block_count(parts, b);
    return own;
}

/* Part b's plain values in the block (*m elements): what the all-gather steps move and the result. */
static char *plain_part(const pipeline_t *p, int32_t c, int32_t b, int64_t *m)
{
    int64_t at;
    char *own = locate_part(p, c, b, &at, m);
    return own + at * (int64_t)p->red->dsize;
}

/* Part b as the cross-host reduce-scatter carries it (*m elements): its plain values in the block (FAST), or its
 * unit in the slot's regrouped partials (compensated). */
static char *part_of(const pipeline_t *p, int32_t c, int32_t b, int64_t *m)
{
    int64_t at;
    char *own = locate_part(p, c, b, &at, m);
    if (!p->red->compensated)
        return own + at * (int64_t)p->red->dsize;
    return p->pairs + (c % p->window) * p->pair_bytes + at * (int64_t)p->red->wsize;
}

/* Compensated: this rank's block, one unit [sum n | comp n] in work after the reduce-scatter, cut into one unit
 * per host's part in the slot's pairs (two copies a part: its sums, its comps). */
static pycoll_status_t regroup_block(pipeline_t *p, int32_t c)
{
    const reduction_t *red = p->red;
    const int64_t as = (int64_t)red->asize;
    int64_t n;
    own_block(p, c, &n);
    const char *unit = p->work + block_offset(chunk_layout(p, c), p->place) * (int64_t)red->wsize;
    const block_layout_t parts = split_evenly(n, p->hosts);
    pycoll_status_t status = PYCOLL_OK;
    for (int32_t b = 0; status == PYCOLL_OK && b < p->hosts; b++) {
        int64_t m;
        char *part = part_of(p, c, b, &m);
        const int64_t at = block_offset(parts, b);
        if (m == 0)
            continue;
        status = memory_copy(red->p2p, part, unit + at * as, m * as, "hierarchical all_reduce");
        if (status == PYCOLL_OK)
            status = memory_copy(red->p2p, part + m * as, unit + (n + at) * as, m * as, "hierarchical all_reduce");
    }
    return status;
}

static pycoll_status_t within_host(pipeline_t *p, int32_t c, bool reduce)
{
    coll_ctx_t sub = view_ctx(p->ctx, p->local);
    char *chunk = chunk_start(p, c);
    const block_layout_t layout = chunk_layout(p, c);
    char *work = p->red->compensated ? p->work : chunk;
    pycoll_status_t status =
        reduce ? ring_reduce_scatter_blocks(&sub, p->red, p->input + chunk_byte(p, c), work, layout,
                                            chunk + block_offset(layout, p->place) * (int64_t)p->red->dsize)
               : ring_all_gather_blocks(&sub, chunk, p->red->dsize, layout);
    if (status == PYCOLL_OK && reduce && p->red->compensated)
        status = regroup_block(p, c);
    view_ctx_return(p->ctx, &sub);
    return group_view_finish(p->local, status);
}

/* The blocks of cross-host step j (of the ring over the hosts, rank = host number): reduce-scatter step s sends
 * block r-s-1 and receives block r-s-2 into the slot; all-gather step s sends block r-s and receives block r-s-1
 * in place (ring.c's schedules, unsegmented). */
static void step_blocks(const pipeline_t *p, int32_t j, int32_t *send, int32_t *recv)
{
    const int32_t s = j < p->hosts - 1 ? j + 1 : j - (p->hosts - 1);
    *send = ring_index(p->host - s, p->hosts);
    *recv = ring_index(p->host - s - 1, p->hosts);
}

/* Post step j of chunk c: a reduce-scatter step sends a part's partials and receives one into the slot; an
 * all-gather step sends a completed part's plain values and receives one in place. */
static pycoll_status_t cross_post(pipeline_t *p, int32_t c, int32_t j)
{
    const bool reducing = j < p->hosts - 1;
    const int64_t esize = (int64_t)(reducing ? p->red->wsize : p->red->dsize);
    int32_t send, recv;
    step_blocks(p, j, &send, &recv);
    const int32_t slot = c % p->window;
    int64_t m_send, m_recv;
    char *from = reducing ? part_of(p, c, send, &m_send) : plain_part(p, c, send, &m_send);
    char *recv_plain = plain_part(p, c, recv, &m_recv);
    char *into = reducing ? p->slots + slot * p->slot_bytes : recv_plain;
    pycoll_p2p_t *v = &p->cross->p2p;
    const uint32_t tag = phase_tag(TAG_HIERARCHICAL_CROSS, (int64_t)c * p->steps + j);
    pycoll_status_t status = post_request(v, &p->reqs[2 * slot + 1], false, ring_index(p->host - 1, p->hosts), into,
                                          m_recv * esize, tag);
    if (status == PYCOLL_OK)
        status = post_request(v, &p->reqs[2 * slot], true, ring_index(p->host + 1, p->hosts), from, m_send * esize,
                              tag);
    return group_view_finish(p->cross, status);
}

/* Wait for step j of chunk c (its send too: the block it sent is received into later) and combine what a
 * reduce-scatter step brought; the last of those completes this rank's block, stored once (avg divides). */
static pycoll_status_t cross_complete(pipeline_t *p, int32_t c, int32_t j)
{
    const int32_t slot = c % p->window;
    pycoll_status_t status = group_view_finish(p->cross, wait_requests(&p->cross->p2p, &p->reqs[2 * slot], 2));
    if (status != PYCOLL_OK || j >= p->hosts - 1)
        return status;
    int32_t send, recv;
    step_blocks(p, j, &send, &recv);
    int64_t m;
    char *part = part_of(p, c, recv, &m);
    status = reduction_combine(&p->across, part, p->slots + slot * p->slot_bytes, m);
    /* The last reduce-scatter step completed this rank's part: stored once into the block, rounded (compensated)
     * and divided (avg); plain values with nothing to divide are already final. */
    if (status == PYCOLL_OK && j == p->hosts - 2 && (p->red->compensated || p->final.divisor != 1))
        status = reduction_store(&p->final, plain_part(p, c, recv, &m), part, m);
    return group_view_finish(p->cross, status);
}

/* Tick t: the oldest chunk's last step waited for, the chunks between moved one step on, the newest chunk
 * reduced within the host and sent on its first step, and only then the oldest gathered within the host, so
 * that the links carry the steps just posted while the memory copies run. */
static pycoll_status_t run_tick(pipeline_t *p, int64_t t)
{
    const int64_t oldest = t - p->steps;
    const bool has_oldest = oldest >= 0 && oldest < p->nchunks;
    pycoll_status_t status = has_oldest ? cross_complete(p, (int32_t)oldest, p->steps - 1) : PYCOLL_OK;
    for (int32_t k = p->steps - 1; status == PYCOLL_OK && k >= 1; k--)
        if (t - k >= 0 && t - k < p->nchunks) {
            status = cross_complete(p, (int32_t)(t - k), k - 1);
            if (status == PYCOLL_OK)
                status = cross_post(p, (int32_t)(t - k), k);
        }
    if (status == PYCOLL_OK && t < p->nchunks) {
        status = within_host(p, (int32_t)t, true);
        if (status == PYCOLL_OK)
            status = cross_post(p, (int32_t)t, 0);
    }
    if (status == PYCOLL_OK && has_oldest)
        status = within_host(p, (int32_t)oldest, false);
    return status;
}

pycoll_status_t hierarchical_pipeline_run(coll_ctx_t *ctx, group_view_t *local, group_view_t *cross,
                                          const reduction_t *red, int64_t divisor, const void *input, void *buf,
                                          int64_t count)
{
    const int64_t per_chunk = chunk_elements(ctx, red, local->p2p.size, cross->p2p.size);
    pipeline_t p = {.ctx = ctx, .red = red, .across = *red, .local = local, .cross = cross, .input = input, .buf = buf,
                    .place = local->p2p.rank, .nlocal = local->p2p.size, .host = cross->p2p.rank,
                    .hosts = cross->p2p.size};
    p.across.p2p = &cross->p2p;
    p.final = p.across;
    p.final.divisor = divisor;
    const int64_t nchunks = count / per_chunk + (count % per_chunk != 0);
    p.nchunks = (int32_t)(nchunks < INT32_MAX ? nchunks : INT32_MAX);
    p.chunks = split_evenly(count, p.nchunks);
    p.steps = 2 * (p.hosts - 1);
    p.window = p.steps;
    /* The most a reduce-scatter step receives: the longest part of the longest block of the longest chunk. */
    const int64_t longest_chunk = longest_part(count, p.nchunks), longest = longest_part(longest_chunk, p.nlocal);
    p.slot_bytes = longest_part(longest, p.hosts) * (int64_t)red->wsize;
    p.slots = data_alloc(ctx->p2p, p.window * p.slot_bytes, "hierarchical all_reduce");
    p.reqs = scratch_alloc(ctx->p2p, 2 * (int64_t)p.window * (int64_t)sizeof *p.reqs, "hierarchical all_reduce");
    pycoll_status_t status = p.slots && p.reqs ? PYCOLL_OK : PYCOLL_ERR_NOMEM;
    if (status == PYCOLL_OK && red->compensated) {
        p.pair_bytes = longest * (int64_t)red->wsize;
        p.work = data_alloc(ctx->p2p, longest_chunk * (int64_t)red->wsize, "hierarchical all_reduce");
        p.pairs = data_alloc(ctx->p2p, p.window * p.pair_bytes, "hierarchical all_reduce");
        status = p.work && p.pairs ? PYCOLL_OK : PYCOLL_ERR_NOMEM;
    }
    if (p.reqs)
        memset(p.reqs, 0, 2 * (size_t)p.window * sizeof *p.reqs);
    for (int64_t t = 0; status == PYCOLL_OK && t < (int64_t)p.nchunks + p.steps; t++)
        status = run_tick(&p, t);
    char *scratch[] = {p.slots, p.work, p.pairs};
    for (size_t i = 0; i < sizeof scratch / sizeof *scratch; i++)
        if (scratch[i])
            data_free(ctx->p2p, scratch[i]);
    free(p.reqs);
    return status;
}
