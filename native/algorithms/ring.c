/* Ring all-reduce = ring reduce-scatter + ring all-gather (the bandwidth-optimal schedule of Patarasuk and
 * Yuan): every rank sends 2 (N-1)/N of the data, to its right neighbour only.
 *
 * Segments and pipelining. Each block is cut into segments of PYCOLL_RING_SEGMENT_BYTES (default 512 KiB)
 * and the N-1 steps are run as one stream of (step, segment) units: segment k of step s+1 leaves as soon as
 * segment k of step s has been reduced, instead of waiting for the whole block. The size: a message costs a
 * fixed latency plus its bytes over the bandwidth (cost_model.c's defaults), so a segment whose transfer is
 * about ten latencies keeps the per-message overhead small, while a large buffer still splits into many units
 * so transfer and reduction overlap. RING_IN_FLIGHT receives are posted ahead: while one segment is reduced the next three
 * are already arriving, which hides the reduction time behind the transfer, and the receive scratch stays
 * bounded at 4 segments (2 MiB) whatever the buffer size. */
#include "algorithms/phases.h"

#include <stdlib.h>
#include <string.h>

enum { RING_IN_FLIGHT = 4 };

typedef struct ring_units {
    block_layout_t layout;
    int64_t seg;           /* elements per segment */
    int64_t segs;          /* segments per block (the longest block) */
    int64_t units;         /* (N - 1) steps x segs */
} ring_units_t;

int64_t ring_segment_elements(int64_t segment_bytes, size_t elem_bytes)
{
    int64_t seg = segment_bytes / (int64_t)elem_bytes;
    return seg < 1 ? 1 : seg;
}

static ring_units_t ring_units(block_layout_t layout, int32_t size, size_t elem_bytes, int64_t segment_bytes)
{
    ring_units_t u = {.layout = layout};
    u.seg = ring_segment_elements(segment_bytes, elem_bytes);
    int64_t longest = block_longest(layout, size);
    u.segs = (longest + u.seg - 1) / u.seg;
    u.units = (int64_t)(size - 1) * u.segs;
    return u;
}

/* First element and length of segment k of block b (empty past the end of a shorter block). */
static int64_t segment_start(const ring_units_t *u, int32_t b, int64_t k)
{
    return block_offset(u->layout, b) + k * u->seg;
}

static int64_t segment_length(const ring_units_t *u, int32_t b, int64_t k)
{
    int64_t left = block_count(u->layout, b) - k * u->seg;
    return left <= 0 ? 0 : (left < u->seg ? left : u->seg);
}

static void *request_array(pycoll_p2p_t *p2p, int64_t n, const char *what)
{
    pycoll_request_t *reqs = scratch_alloc(p2p, n * (int64_t)sizeof *reqs, what);
    if (reqs)
        memset(reqs, 0, (size_t)n * sizeof *reqs);
    return reqs;
}

/* part = op(own plain values, received). Step 0 sends plain values (reduction_add_plains), later steps partials. */
static pycoll_status_t combine_received(const reduction_t *red, void *part, const void *own, const void *received,
                                        bool received_plain, void *tmp, int64_t n)
{
    return received_plain ? reduction_add_plains(red, part, own, received, tmp, n)
                          : reduction_add_plain(red, part, own, received, n);
}

/* In step s rank r sends its partial of block r-s-1 to r+1 and receives block r-s-2 from r-1, combining it
 * with its own values; after N-1 steps block r is complete on rank r. Unit t = s * segs + k. */
pycoll_status_t ring_reduce_scatter_blocks(coll_ctx_t *ctx, const reduction_t *red, const void *input, void *work,
                                           block_layout_t layout, void *out)
{
    pycoll_p2p_t *p2p = red->p2p;
    const int32_t size = p2p->size, rank = p2p->rank;
    const char *in = input;
    char *w = work;
    if (size == 1) {
        const void *source;
        int64_t n = block_count(layout, 0);
        pycoll_status_t status = reduction_source(red, w, in, n, &source);
        return status != PYCOLL_OK ? status : reduction_store(red, out, source, n);
    }
    const ring_units_t u = ring_units(layout, size, red->wsize, ctx->segment_bytes);
    const int32_t right = ring_index(rank + 1, size), left = ring_index(rank - 1, size);
    pycoll_request_t *sends = request_array(p2p, u.units, "ring reduce-scatter");
    /* RING_IN_FLIGHT receive slots, then (compensated) room to load one received segment of plain values. */
    const int64_t slot_bytes = u.seg * (int64_t)red->wsize;
    char *slots = data_alloc(p2p, (RING_IN_FLIGHT + red->compensated) * slot_bytes, "ring reduce-scatter");
    char *loaded = slots + RING_IN_FLIGHT * slot_bytes;
    pycoll_request_t recvs[RING_IN_FLIGHT];
    int64_t recv_unit[RING_IN_FLIGHT];
    pycoll_status_t status = sends && slots ? PYCOLL_OK : PYCOLL_ERR_NOMEM;

    /* Step 0 sends this rank's own plain values of block r-1: nothing to wait for. */
    const int32_t first = ring_index(rank - 1, size);
    for (int64_t k = 0; status == PYCOLL_OK && k < u.segs; k++) {
        int64_t e = segment_start(&u, first, k), n = segment_length(&u, first, k);
        status = post_request(p2p, &sends[k], true, right, (void *)(in + e * red->dsize), n * (int64_t)red->dsize,
                              phase_tag(TAG_RING_REDUCE_SCATTER, k));
    }

    int64_t next = 0, posted = 0, done = 0;
    while (status == PYCOLL_OK) {
        /* Keep RING_IN_FLIGHT receives posted; empty units are skipped on both sides. */
        while (status == PYCOLL_OK && posted - done < RING_IN_FLIGHT && next < u.units) {
            int32_t b = ring_index(rank - next / u.segs - 2, size);
            int64_t n = segment_length(&u, b, next % u.segs);
            if (n > 0) {
                int slot = (int)(posted % RING_IN_FLIGHT);
                size_t esize = next < u.segs ? red->dsize : red->wsize;
                recv_unit[slot] = next;
                status = post_request(p2p, &recvs[slot], false, left, slots + slot * slot_bytes,
                                      n * (int64_t)esize, phase_tag(TAG_RING_REDUCE_SCATTER, next));
                posted++;
            }
            next++;
        }
        if (status != PYCOLL_OK || done == posted)
            break;
        int slot = (int)(done % RING_IN_FLIGHT);
        pycoll_request_t *req = &recvs[slot];
        status = p2p->ops->wait(p2p, &req, 1);
        if (status != PYCOLL_OK)
            break;
        const int64_t t = recv_unit[slot], s = t / u.segs, k = t % u.segs;
        const int32_t b = ring_index(rank - s - 2, size);
        const int64_t e = segment_start(&u, b, k), n = segment_length(&u, b, k);
        const char *received = slots + slot * slot_bytes;
        if (s < size - 2) {
            status = combine_received(red, w + e * red->wsize, in + e * red->dsize, received, s == 0, loaded, n);
            if (status == PYCOLL_OK)
                status = post_request(p2p, &sends[t + u.segs], true, right, w + e * red->wsize,
                                      n * (int64_t)red->wsize, phase_tag(TAG_RING_REDUCE_SCATTER, t + u.segs));
        } else {
            /* Last step: block r is complete; round (compensated) or scale (avg) it once, into out. */
            char *dst = (char *)out + k * u.seg * red->dsize;
            void *part = red->compensated ? (void *)(w + e * red->wsize) : (void *)dst;
            status = combine_received(red, part, in + e * red->dsize, received, s == 0, loaded, n);
            if (status == PYCOLL_OK)
                status = reduction_store(red, dst, part, n);
        }
        done++;
    }
    if (status == PYCOLL_OK)
        status = wait_requests(p2p, sends, u.units);
    free(sends);
    data_free(p2p, slots);
    return status;
}

/* In step s rank r sends block r-s to r+1 and receives block r-s-1 from r-1 straight into buf; segment k of
 * step s+1 leaves as soon as it arrived in step s. Every receive goes to its own place, so all are posted
 * at once. */
pycoll_status_t ring_all_gather_blocks(coll_ctx_t *ctx, void *buf, size_t dsize, block_layout_t layout)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    const int32_t size = p2p->size, rank = p2p->rank;
    if (size == 1)
        return PYCOLL_OK;
    const ring_units_t u = ring_units(layout, size, dsize, ctx->segment_bytes);
    const int32_t right = ring_index(rank + 1, size), left = ring_index(rank - 1, size);
    char *data = buf;
    pycoll_request_t *recvs = request_array(p2p, u.units, "ring all-gather");
    pycoll_request_t *sends = request_array(p2p, u.units, "ring all-gather");
    pycoll_status_t status = recvs && sends ? PYCOLL_OK : PYCOLL_ERR_NOMEM;
    for (int64_t t = 0; status == PYCOLL_OK && t < u.units; t++) {
        int32_t b = ring_index(rank - t / u.segs - 1, size);
        int64_t e = segment_start(&u, b, t % u.segs), n = segment_length(&u, b, t % u.segs);
        status = post_request(p2p, &recvs[t], false, left, data + e * (int64_t)dsize, n * (int64_t)dsize,
                              phase_tag(TAG_RING_ALL_GATHER, t));
    }
    for (int64_t k = 0; status == PYCOLL_OK && k < u.segs; k++) {
        int64_t e = segment_start(&u, rank, k), n = segment_length(&u, rank, k);
        status = post_request(p2p, &sends[k], true, right, data + e * (int64_t)dsize, n * (int64_t)dsize,
                              phase_tag(TAG_RING_ALL_GATHER, k));
    }
    for (int64_t t = 0; status == PYCOLL_OK && t < u.units; t++) {
        if (recvs[t].nbytes == 0)
            continue;
        pycoll_request_t *req = &recvs[t];
        status = p2p->ops->wait(p2p, &req, 1);
        if (status == PYCOLL_OK && t / u.segs < size - 2)
            status = post_request(p2p, &sends[t + u.segs], true, right, req->buf, req->nbytes,
                                  phase_tag(TAG_RING_ALL_GATHER, t + u.segs));
    }
    if (status == PYCOLL_OK)
        status = wait_requests(p2p, sends, u.units);
    free(recvs);
    free(sends);
    return status;
}

pycoll_status_t ring_all_reduce_from(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                     pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy)
{
    static const two_phase_all_reduce_t ring = {"ring all_reduce", true, true, ring_reduce_scatter_blocks,
                                                ring_all_gather_blocks};
    return two_phase_all_reduce_run(ctx, &ring, sendbuf, recvbuf, count, dtype, op, accuracy);
}

pycoll_status_t ring_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                pycoll_accuracy_t accuracy)
{
    return ring_all_reduce_from(ctx, buf, buf, count, dtype, op, accuracy);
}
