/* Shared schedule helpers: the all-reduce set-up, scratch and request bookkeeping. */
#include "algorithms/phases.h"
#include "algorithms/schedule.h"

#include <stdlib.h>

bool all_reduce_setup(coll_ctx_t *ctx, const char *what, const void *buf, int64_t count, pycoll_dtype_t dtype,
                      pycoll_op_t op, pycoll_accuracy_t accuracy, reduction_t *red, pycoll_status_t *status)
{
    (void)what;
    assert_checked(ctx->p2p, buf, count, dtype, op, 0);
    *status = PYCOLL_OK;
    if (ctx->p2p->size == 1 || count == 0)
        return false;
    reduction_init(red, ctx->p2p, dtype, op, accuracy);
    return true;
}

pycoll_status_t two_phase_all_reduce_run(coll_ctx_t *ctx, const two_phase_all_reduce_t *alg, const void *input,
                                         void *buf, int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                         pycoll_accuracy_t accuracy)
{
    const int64_t nbytes = count * (int64_t)pycoll_dtype_size(dtype);
    pycoll_status_t status;
    if (!alg->reads_input || ctx->p2p->size == 1 || !buffers_disjoint(input, buf, nbytes)) {
        status = memory_copy(ctx->p2p, buf, input, nbytes, alg->what);
        if (status != PYCOLL_OK)
            return status;
        input = buf;
    }
    reduction_t red;
    if (!all_reduce_setup(ctx, alg->what, buf, count, dtype, op, accuracy, &red, &status))
        return status;
    const block_layout_t layout = split_evenly(count, ctx->p2p->size);
    void *work = buf;
    if (alg->partials_in_workspace && red.compensated)
        work = comm_workspace(ctx, count * (int64_t)red.wsize, alg->what);
    if (!work)
        return PYCOLL_ERR_NOMEM;
    char *own = (char *)buf + block_offset(layout, ctx->p2p->rank) * (int64_t)red.dsize;
    status = alg->reduce_scatter(ctx, &red, input, work, layout, own);
    return status != PYCOLL_OK ? status : alg->all_gather(ctx, buf, red.dsize, layout);
}

void *scratch_alloc(pycoll_p2p_t *p2p, int64_t nbytes, const char *what)
{
    void *p = malloc(nbytes > 0 ? (size_t)nbytes : 1);
    if (!p)
        pycoll_p2p_fail(p2p, PYCOLL_ERR_NOMEM, -1, "%s: out of memory for %lld bytes of scratch", what,
                        (long long)nbytes);
    return p;
}

void *data_alloc(pycoll_p2p_t *p2p, int64_t nbytes, const char *what)
{
    const pycoll_memory_kernels_t *k = memory_kernels(p2p);
    void *p = k->alloc(nbytes);
    if (!p)
        pycoll_p2p_fail(p2p, PYCOLL_ERR_NOMEM, -1, "%s: out of %s memory for %lld bytes of scratch%s", what,
                        k->memory, (long long)nbytes, memory_error(k));
    return p;
}

void data_free(pycoll_p2p_t *p2p, void *p)
{
    memory_kernels(p2p)->free(p);
}

void comm_workspace_release(coll_ctx_t *ctx)
{
    if (ctx->workspace)
        ctx->workspace_kernels->free(ctx->workspace);
    ctx->workspace = NULL;
    ctx->workspace_bytes = 0;
    ctx->workspace_kernels = NULL;
}

void comm_workspace_call_end(coll_ctx_t *ctx)
{
    if (ctx->workspace_kernels && ctx->workspace_kernels->scratch_per_call)
        comm_workspace_release(ctx);
}

void *comm_workspace(coll_ctx_t *ctx, int64_t nbytes, const char *what)
{
    /* even 0 bytes gets a real (1-byte) block */
    if (ctx->workspace_bytes < nbytes || !ctx->workspace || ctx->workspace_kernels != memory_kernels(ctx->p2p)) {
        comm_workspace_release(ctx);
        ctx->workspace = data_alloc(ctx->p2p, nbytes, what);
        if (!ctx->workspace)
            return NULL;
        ctx->workspace_bytes = nbytes;
        ctx->workspace_kernels = memory_kernels(ctx->p2p);
    }
    return ctx->workspace;
}

pycoll_status_t post_request(pycoll_p2p_t *p2p, pycoll_request_t *req, bool is_send, int32_t peer, void *buf,
                             int64_t nbytes, uint32_t tag)
{
    *req = (pycoll_request_t){.buf = buf, .nbytes = nbytes, .peer = peer, .tag = tag, .is_send = is_send};
    if (nbytes == 0) {
        req->complete = 1;
        return PYCOLL_OK;
    }
    return p2p->ops->post(p2p, req);
}

pycoll_status_t wait_requests(pycoll_p2p_t *p2p, pycoll_request_t *reqs, int64_t n)
{
    enum { BATCH = 256 };
    pycoll_request_t *batch[BATCH];
    int count = 0;
    for (int64_t i = 0; i < n; i++) {
        if (reqs[i].nbytes == 0)
            continue;
        batch[count++] = &reqs[i];
        if (count == BATCH) {
            pycoll_status_t status = p2p->ops->wait(p2p, batch, count);
            if (status != PYCOLL_OK)
                return status;
            count = 0;
        }
    }
    return count > 0 ? p2p->ops->wait(p2p, batch, count) : PYCOLL_OK;
}

pycoll_status_t exchange(pycoll_p2p_t *p2p, int32_t send_peer, const void *send_buf, int64_t send_nbytes,
                         int32_t recv_peer, void *recv_buf, int64_t recv_nbytes, uint32_t tag)
{
    pycoll_request_t reqs[2];
    pycoll_status_t status = post_request(p2p, &reqs[0], false, recv_peer, recv_buf, recv_nbytes, tag);
    if (status == PYCOLL_OK)
        status = post_request(p2p, &reqs[1], true, send_peer, (void *)send_buf, send_nbytes, tag);
    return status != PYCOLL_OK ? status : wait_requests(p2p, reqs, 2);
}
