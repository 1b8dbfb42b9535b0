/* Internal helpers shared by the collective algorithms: how data is split into blocks and segments, the tag
 * of every phase and step, argument checks, and request bookkeeping. Not part of the public ABI. */
#ifndef PYCOLL_ALGORITHMS_SCHEDULE_H
#define PYCOLL_ALGORITHMS_SCHEDULE_H

#include <assert.h>
#include "algorithms/context.h"
#include "pycoll/algorithms.h"

#include <stdbool.h>

/* A split of elements into numbered blocks: block b starts at b * base + min(b, extra) and holds
 * base + (b < extra) elements. split_evenly spreads a count over n blocks (the first count % n one longer);
 * equal_blocks lays out size blocks of exactly `per` elements (reduce_scatter / all_gather buffers). */
typedef struct block_layout {
    int64_t base;
    int64_t extra;
    /* Optional (NULL: the arithmetic split above): block b holds counts[b] elements from offsets[b], for the
     * uneven collectives (variable_blocks.c); the ring schedules then run over those blocks unchanged. */
    const int64_t *counts;
    const int64_t *offsets;
} block_layout_t;

static inline block_layout_t split_evenly(int64_t count, int32_t nblocks)
{
    return (block_layout_t){.base = count / nblocks, .extra = count % nblocks};
}

static inline block_layout_t equal_blocks(int64_t per_block)
{
    return (block_layout_t){.base = per_block};
}

static inline int64_t block_offset(block_layout_t layout, int32_t b)
{
    if (layout.offsets)
        return layout.offsets[b];
    return (int64_t)b * layout.base + (b < layout.extra ? b : layout.extra);
}

static inline int64_t block_count(block_layout_t layout, int32_t b)
{
    if (layout.counts)
        return layout.counts[b];
    return layout.base + (b < layout.extra ? 1 : 0);
}

/* The most elements any of blocks 0..nblocks-1 holds. */
static inline int64_t block_longest(block_layout_t layout, int32_t nblocks)
{
    if (!layout.counts)
        return layout.base + (layout.extra > 0 ? 1 : 0);
    int64_t longest = 0;
    for (int32_t b = 0; b < nblocks; b++)
        longest = layout.counts[b] > longest ? layout.counts[b] : longest;
    return longest;
}

static inline int32_t ring_index(int64_t i, int32_t size)
{
    return (int32_t)(((i % size) + size) % size);
}

/* Every phase of every algorithm has its own tag range, so a message from a different phase or step (a peer
 * running another schedule) is reported as a mismatch instead of being combined. */
typedef enum tag_phase {
    TAG_RING_REDUCE_SCATTER = 1,
    TAG_RING_ALL_GATHER,
    TAG_HD_FOLD,
    TAG_HD_REDUCE_SCATTER,
    TAG_HD_ALL_GATHER,
    TAG_HD_UNFOLD,
    TAG_MESH_REDUCE_SCATTER,
    TAG_MESH_ALL_GATHER,
    TAG_RD_FOLD,
    TAG_RD_EXCHANGE,
    TAG_RD_UNFOLD,
    TAG_BROADCAST,
    TAG_REDUCE_TREE,
    TAG_REDUCE_GATHER,
    TAG_BARRIER,
    TAG_ALL_TO_ALL,
    TAG_GATHER,
    TAG_SCATTER,
    TAG_HIERARCHICAL_CROSS,
} tag_phase_t;

static inline uint32_t phase_tag(tag_phase_t phase, int64_t step)
{
    return ((uint32_t)phase << 24) | (uint32_t)(step & 0xFFFFFF);
}

/* What comm_check_call (comm/call.c) guaranteed before any schedule runs -- known ids, a count >= 0, a buffer
 * wherever there is data, a root that is a rank -- asserted in debug builds, never checked again here. */
static inline void assert_checked(const pycoll_p2p_t *p2p, const void *buf, int64_t count, pycoll_dtype_t dtype,
                                  pycoll_op_t op, int32_t root)
{
    (void)p2p, (void)buf, (void)count, (void)dtype, (void)op, (void)root;
    assert(count >= 0 && (count == 0 || buf) && (unsigned)dtype < PYCOLL_NUM_DTYPES &&
           (unsigned)op < PYCOLL_NUM_OPS && root >= 0 && root < p2p->size);
}

/* assert_checked for both buffers of a collective of `count` elements on every rank (no root). */
static inline void assert_checked_pair(const pycoll_p2p_t *p2p, const void *sendbuf, const void *recvbuf,
                                       int64_t count, pycoll_dtype_t dtype, pycoll_op_t op)
{
    assert_checked(p2p, sendbuf, count, dtype, op, 0);
    assert_checked(p2p, recvbuf, count, dtype, op, 0);
}

/* Whether [a, a + nbytes) and [b, b + nbytes) share no byte: a schedule may then read its input where the caller
 * keeps it while it writes the result, instead of copying the input into the result first. */
static inline bool buffers_disjoint(const void *a, const void *b, int64_t nbytes)
{
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b, n = (uintptr_t)nbytes;
    return x + n <= y || y + n <= x;
}

/* malloc that records PYCOLL_ERR_NOMEM on p2p when it fails (NULL is returned, status is on p2p). Host
 * bookkeeping only (request arrays, offsets); data goes in data_alloc's memory. */
void *scratch_alloc(pycoll_p2p_t *p2p, int64_t nbytes, const char *what);

/* Scratch for collective data, from the transport's memory table (memory_kernels.h), so it lives where the
 * buffers do; PYCOLL_ERR_NOMEM recorded on p2p when it fails. Freed with data_free on the same transport. */
void *data_alloc(pycoll_p2p_t *p2p, int64_t nbytes, const char *what);
void data_free(pycoll_p2p_t *p2p, void *p);

/* The communicator's workspace (ctx->workspace) grown to at least nbytes, in data memory (data_alloc); kept
 * between collectives, freed with the communicator, never by the caller. A fresh multi-MiB malloc is mmap'ed and
 * page-faulted on every call, which cost more than the compensated arithmetic itself (16 MiB float32 ring over 2
 * ranks: ~4x the fast time, ~2x with reuse). One user at a time: only the top level of a collective takes it. NULL
 * (status on p2p) when out of memory. */
void *comm_workspace(coll_ctx_t *ctx, int64_t nbytes, const char *what);
/* Frees the workspace through the table that allocated it (the communicator's destroy). */
void comm_workspace_release(coll_ctx_t *ctx);
/* The end of a collective: frees the workspace where its table's scratch lives one call (scratch_per_call). */
void comm_workspace_call_end(coll_ctx_t *ctx);

/* Post one request; a zero-length one is left complete without touching the transport (both sides compute
 * the same lengths, so they skip the same messages). */
pycoll_status_t post_request(pycoll_p2p_t *p2p, pycoll_request_t *req, bool is_send, int32_t peer, void *buf,
                             int64_t nbytes, uint32_t tag);
/* Wait for every posted request of reqs[0..n) (unposted zero-length ones are skipped). */
pycoll_status_t wait_requests(pycoll_p2p_t *p2p, pycoll_request_t *reqs, int64_t n);
/* Send to one peer and receive from another at once, skipping zero-length sides. */
pycoll_status_t exchange(pycoll_p2p_t *p2p, int32_t send_peer, const void *send_buf, int64_t send_nbytes,
                         int32_t recv_peer, void *recv_buf, int64_t recv_nbytes, uint32_t tag);

#endif
