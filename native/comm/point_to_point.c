/* Sends and receives on a communicator (pycoll_comm_send / recv). They are not collectives: they leave the
 * collectives' numbering and history alone (ranks that do not take part must agree with those that do), and
 * carry a descriptor of their own -- the communicator's point-to-point group, seq 0 -- so that between a
 * sender and its receiver only tag and length are matched, in order per direction, while a message met in the
 * middle of a collective (or a collective's message met by a receive) is an order disagreement named as such
 * (transport/frame.c). The progress thread keeps many in flight at once (progress.c); a blocking call with
 * nothing queued runs here on the caller's thread. */
#include <stdio.h>

#include "comm/comm_internal.h"
#include "transport/group_view.h"
#include "common/p2p_share.h"

pycoll_status_t comm_p2p_begin(pycoll_comm_t *comm, comm_p2p_saved_t *saved, char *error, size_t error_len)
{
    pycoll_status_t st = comm_usable(comm, error, error_len);
    if (st != PYCOLL_OK)
        return st;
    pycoll_p2p_t *p2p = comm->p2p;
    saved->desc = p2p->desc;
    saved->prev_desc = p2p->prev_desc;
    p2p->desc = (pycoll_coll_desc_t){.group = comm->group ^ P2P_GROUP_SALT, .coll = PYCOLL_COLL_SEND_RECV,
                                     .root = -1};
    p2p->prev_desc = p2p->desc;
    comm_p2p_extend_deadline(comm);
    if (comm->view)
        group_view_enter(comm->view);
    return PYCOLL_OK;
}

void comm_p2p_extend_deadline(pycoll_comm_t *comm)
{
    pycoll_p2p_t *p2p = comm->p2p;
    p2p->deadline_ns = pycoll_now_ns() + (int64_t)(comm->options.timeout_s * 1e9);
    if (comm->view)
        comm->family->transport->deadline_ns = p2p->deadline_ns;
}

pycoll_status_t comm_p2p_post(pycoll_comm_t *comm, const comm_call_t *call, pycoll_request_t *req)
{
    const pycoll_call_t *a = &call->args;
    const int is_send = a->dest >= 0;
    *req = (pycoll_request_t){.buf = is_send ? (void *)a->sendbuf : a->recvbuf,
                              .nbytes = call->count * (int64_t)pycoll_dtype_size(a->dtype), .peer = is_send ? a->dest : a->source,
                              .tag = a->tag, .is_send = (uint8_t)is_send};
    return comm->p2p->ops->post(comm->p2p, req);
}

pycoll_status_t comm_p2p_end(pycoll_comm_t *comm, const comm_p2p_saved_t *saved, pycoll_status_t st)
{
    pycoll_p2p_t *p2p = comm->p2p;
    if (comm->view)
        p2p_adopt_error(p2p, comm->family->transport);
    if (st == PYCOLL_OK && p2p->status != PYCOLL_OK)
        st = p2p->status;
    st = comm_finish(comm, st);
    if (comm->view)
        st = group_view_leave(comm->view, st);
    p2p->desc = saved->desc;
    p2p->prev_desc = saved->prev_desc;
    return st;
}

pycoll_status_t comm_run_p2p(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len)
{
    comm_p2p_saved_t saved;
    pycoll_status_t st = comm_p2p_begin(comm, &saved, error, error_len);
    if (st != PYCOLL_OK)
        return st;
    pycoll_request_t req;
    pycoll_request_t *reqs[1] = {&req};
    st = comm_p2p_post(comm, call, &req);
    req.sole_wait = !req.is_send; /* the caller's thread waits for it alone (transports read it in the wait) */
    if (st == PYCOLL_OK)
        st = comm->p2p->ops->wait(comm->p2p, reqs, 1);
    return comm_p2p_end(comm, &saved, st);
}
