/* Gather and scatter, two schedules each (the decision picks by size, decision.c). binomial_tree, for small
 * messages: a tree over ranks relative to the root (ceil(log2 N) steps; a rank forwards its whole subtree's
 * blocks as one message), so the root handles log2 N messages instead of N-1. flat, for large ones: the root
 * posts all N-1 transfers at once and waits for them together, so they overlap on its links, and no block
 * crosses more than one link (the tree would carry half the data through each level). */
#include "algorithms/collectives.h"
#include "kernels/memory_kernels.h"
#include "algorithms/schedule.h"

#include <stdlib.h>

/* How many consecutive relative ranks the subtree of relative rank vr covers (vr itself first): its lowest
 * set bit, cut at the end; everything for the root. */
static int32_t subtree_span(int32_t vr, int32_t size)
{
    if (vr == 0)
        return size;
    const int32_t low = vr & -vr;
    return low < size - vr ? low : size - vr;
}

/* Copy blocks between the root's buffer in rank order and `relative` in relative order (relative block i is
 * rank (i + root) % size's): two contiguous runs. */
static pycoll_status_t rotate(pycoll_p2p_t *p2p, char *ranked, char *relative, int64_t block, int32_t root,
                              bool to_ranked, const char *what)
{
    const int32_t size = p2p->size;
    char *runs[2][2] = {{ranked + root * block, relative}, {ranked, relative + (size - root) * block}};
    const int64_t lengths[2] = {(size - root) * block, root * block};
    pycoll_status_t status = PYCOLL_OK;
    for (int i = 0; status == PYCOLL_OK && i < 2; i++)
        status = to_ranked ? memory_copy(p2p, runs[i][0], runs[i][1], lengths[i], what)
                           : memory_copy(p2p, runs[i][1], runs[i][0], lengths[i], what);
    return status;
}

/* Post one transfer per child of vr (vr + m for each power of two m below vr's lowest set bit), of the child's
 * subtree of blocks at buf + m * block, and wait for them all: the children's ranges are disjoint. */
static pycoll_status_t with_children(pycoll_p2p_t *p2p, bool is_send, char *buf, int64_t block, int32_t vr,
                                     int32_t root, uint32_t tag)
{
    const int32_t size = p2p->size;
    pycoll_request_t reqs[32];
    int n = 0;
    pycoll_status_t status = PYCOLL_OK;
    /* Largest subtree first: in a scatter it has the longest way still to go. */
    int32_t top = 1;
    while (top < subtree_span(vr, size) && top < size)
        top *= 2;
    for (int32_t m = top; status == PYCOLL_OK && m >= 1; m /= 2)
        if (m < (vr == 0 ? size : (vr & -vr)) && vr + m < size)
            status = post_request(p2p, &reqs[n++], is_send, ring_index(vr + m + root, size), buf + m * block,
                                  subtree_span(vr + m, size) * block, tag);
    return status != PYCOLL_OK ? status : wait_requests(p2p, reqs, n);
}

static pycoll_status_t tree_gather(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t block,
                                   int32_t root)
{
    const int32_t size = p2p->size, vr = ring_index(p2p->rank - root, size), span = subtree_span(vr, size);
    const uint32_t tag = phase_tag(TAG_GATHER, 1);
    const int32_t parent = ring_index(vr - (vr & -vr) + root, size);
    if (span == 1 && vr != 0) /* a leaf: its own block is its whole subtree */
        return exchange(p2p, parent, sendbuf, block, -1, NULL, 0, tag);
    /* The subtree's blocks in relative order: straight in recvbuf on root 0, else in scratch. */
    char *tmp = vr == 0 && root == 0 ? NULL : data_alloc(p2p, span * block, "gather");
    char *buf = vr == 0 && root == 0 ? recvbuf : tmp;
    if (!buf)
        return PYCOLL_ERR_NOMEM;
    /* The own block first: sendbuf may lie inside recvbuf, where a receive would overwrite it. */
    pycoll_status_t status = memory_copy(p2p, buf, sendbuf, block, "gather");
    if (status == PYCOLL_OK)
        status = with_children(p2p, false, buf, block, vr, root, tag);
    if (status == PYCOLL_OK && vr != 0)
        status = exchange(p2p, parent, buf, span * block, -1, NULL, 0, tag);
    if (status == PYCOLL_OK && tmp && vr == 0)
        status = rotate(p2p, recvbuf, tmp, block, root, true, "gather");
    data_free(p2p, tmp);
    return status;
}

static pycoll_status_t tree_scatter(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t block,
                                    int32_t root)
{
    const int32_t size = p2p->size, vr = ring_index(p2p->rank - root, size), span = subtree_span(vr, size);
    const uint32_t tag = phase_tag(TAG_SCATTER, 1);
    const int32_t parent = ring_index(vr - (vr & -vr) + root, size);
    if (span == 1 && vr != 0)
        return exchange(p2p, -1, NULL, 0, parent, recvbuf, block, tag);
    /* The subtree's blocks in relative order: sendbuf itself on root 0 (only read), else scratch. */
    char *tmp = vr == 0 && root == 0 ? NULL : data_alloc(p2p, span * block, "scatter");
    char *buf = vr == 0 && root == 0 ? (char *)sendbuf : tmp;
    if (!buf)
        return PYCOLL_ERR_NOMEM;
    pycoll_status_t status = vr == 0 ? (tmp ? rotate(p2p, (char *)sendbuf, tmp, block, root, false, "scatter")
                                            : PYCOLL_OK)
                                     : exchange(p2p, -1, NULL, 0, parent, buf, span * block, tag);
    if (status == PYCOLL_OK)
        status = with_children(p2p, true, buf, block, vr, root, tag);
    /* The own block last: recvbuf may lie inside sendbuf, over a block still to be sent. */
    if (status == PYCOLL_OK)
        status = memory_copy(p2p, recvbuf, buf, block, "scatter");
    data_free(p2p, tmp);
    return status;
}

/* The root's side: one receive (gather) or send (scatter) per other rank, of block r of `blocks`. */
static pycoll_status_t root_transfers(pycoll_p2p_t *p2p, bool is_send, char *blocks, int64_t block, uint32_t tag,
                                      const char *what)
{
    const int32_t size = p2p->size;
    pycoll_request_t *reqs = scratch_alloc(p2p, (int64_t)size * (int64_t)sizeof *reqs, what);
    if (!reqs)
        return PYCOLL_ERR_NOMEM;
    pycoll_status_t status = PYCOLL_OK;
    int64_t n = 0;
    for (int32_t r = 0; status == PYCOLL_OK && r < size; r++)
        if (r != p2p->rank)
            status = post_request(p2p, &reqs[n++], is_send, r, blocks + r * block, block, tag);
    if (status == PYCOLL_OK)
        status = wait_requests(p2p, reqs, n);
    free(reqs);
    return status;
}

/* The schedules: block is one rank's block in bytes, never 0. */
typedef pycoll_status_t (*rooted_schedule_t)(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t block,
                                             int32_t root);

/* A non-root rank's one transfer with the root in the flat schedules. */
static pycoll_status_t with_root(pycoll_p2p_t *p2p, bool is_send, void *buf, int64_t block, int32_t root,
                                 uint32_t tag)
{
    pycoll_request_t req;
    pycoll_status_t status = post_request(p2p, &req, is_send, root, buf, block, tag);
    return status != PYCOLL_OK ? status : wait_requests(p2p, &req, 1);
}

static pycoll_status_t flat_gather_blocks(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t block,
                                          int32_t root)
{
    if (p2p->rank != root)
        return with_root(p2p, true, (void *)sendbuf, block, root, phase_tag(TAG_GATHER, 0));
    char *out = recvbuf;
    /* The own block first: sendbuf may lie inside recvbuf, where a receive would overwrite it. */
    pycoll_status_t status = memory_copy(p2p, out + root * block, sendbuf, block, "gather");
    return status != PYCOLL_OK ? status
                               : root_transfers(p2p, false, out, block, phase_tag(TAG_GATHER, 0), "gather");
}

static pycoll_status_t flat_scatter_blocks(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t block,
                                           int32_t root)
{
    if (p2p->rank != root)
        return with_root(p2p, false, recvbuf, block, root, phase_tag(TAG_SCATTER, 0));
    const char *in = sendbuf;
    /* The own block last: recvbuf may lie inside sendbuf, over a block still to be sent. */
    pycoll_status_t status = root_transfers(p2p, true, (char *)in, block, phase_tag(TAG_SCATTER, 0), "scatter");
    return status != PYCOLL_OK ? status : memory_copy(p2p, recvbuf, in + root * block, block, "scatter");
}

/* Run a gather (its own block is sendbuf, the root's blocks recvbuf) or a scatter (the other way round) unless
 * there is nothing to move. */
static pycoll_status_t run_rooted(coll_ctx_t *ctx, bool gathers, rooted_schedule_t schedule, const void *sendbuf,
                                  void *recvbuf, int64_t count, pycoll_dtype_t dtype, int32_t root)
{
    pycoll_p2p_t *p2p = ctx->p2p;
    const void *mine = gathers ? sendbuf : recvbuf, *roots = gathers ? recvbuf : sendbuf;
    assert_checked(p2p, mine, count, dtype, PYCOLL_SUM, root);
    assert_checked(p2p, p2p->rank == root ? roots : mine, count, dtype, PYCOLL_SUM, root);
    if (count == 0)
        return PYCOLL_OK;
    return schedule(p2p, sendbuf, recvbuf, count * (int64_t)pycoll_dtype_size(dtype), root);
}

/* The four entry points of collectives.h (rooted_schedule): each runs its schedule. */
#define ROOTED_ENTRY(name, gathers, schedule)                                                                    \
    pycoll_status_t name(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count, pycoll_dtype_t dtype, \
                         int32_t root)                                                                             \
    {                                                                                                              \
        return run_rooted(ctx, gathers, schedule, sendbuf, recvbuf, count, dtype, root);                          \
    }

ROOTED_ENTRY(binomial_tree_gather, true, tree_gather)
ROOTED_ENTRY(flat_gather, true, flat_gather_blocks)
ROOTED_ENTRY(binomial_tree_scatter, false, tree_scatter)
ROOTED_ENTRY(flat_scatter, false, flat_scatter_blocks)
