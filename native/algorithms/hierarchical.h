/* What the hierarchical all-reduce's two files share (hierarchical.c plans and runs the phases one after the
 * other; hierarchical_pipeline.c overlaps them chunk by chunk). Internal: not part of the C ABI. */
#ifndef PYCOLL_ALGORITHMS_HIERARCHICAL_H
#define PYCOLL_ALGORITHMS_HIERARCHICAL_H

#include "algorithms/phases.h"
#include "transport/group_view.h"

/* A schedule's context over a view: the parent's options and workspace (handed back by view_ctx_return). */
static inline coll_ctx_t view_ctx(const coll_ctx_t *ctx, group_view_t *view)
{
    coll_ctx_t sub = *ctx;
    sub.p2p = &view->p2p;
    sub.host_of = NULL;
    return sub;
}

/* The workspace as the schedule left it (it may have grown it; the old block was freed through the table). */
static inline void view_ctx_return(coll_ctx_t *ctx, const coll_ctx_t *sub)
{
    ctx->workspace = sub->workspace;
    ctx->workspace_bytes = sub->workspace_bytes;
    ctx->workspace_kernels = sub->workspace_kernels;
}

/* Whether the pipeline runs: every host with the same number of ranks (>= 2), and a buffer of at least a few
 * chunks (in either accuracy mode: a compensated chunk is smaller). */
bool hierarchical_pipeline_fits(const coll_ctx_t *ctx, const reduction_t *red, int64_t count, int32_t hosts,
                                int32_t nlocal, bool equal_hosts);

/* The whole all-reduce of input into buf (the same buffer, or one that shares no byte with it) as the pipeline.
 * local: this host's ranks (view rank = place on the host); cross: the ranks in this rank's place on every host,
 * in host order (view rank = host number). red: the hosts' reduction (a sum for avg); divisor: what the result
 * is divided by once (the world size for avg, else 1). */
pycoll_status_t hierarchical_pipeline_run(coll_ctx_t *ctx, group_view_t *local, group_view_t *cross,
                                          const reduction_t *red, int64_t divisor, const void *input, void *buf,
                                          int64_t count);

#endif
