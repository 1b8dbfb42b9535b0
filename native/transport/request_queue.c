/* Probes and queues shared by the message transports (request_queue.h). */
#include "transport/frame.h"
#include "transport/request_queue.h"

/* What a point-to-point STATE frame's tag says (0 for every other): the sender waits alone to receive from
 * the frame's receiver (STUCK, with the number of that wait), or answers a STUCK with the same (CONFIRM).
 * STUCK goes out behind every message the sender sent before, and CONFIRM behind every one its sender sent
 * before: so a CONFIRM that finds its STUCK wait still unfinished proves that neither rank has anything on its
 * way to the other, and that neither can send anything before it receives. */
#define STATE_STUCK 0x80000000u
#define STATE_CONFIRM 0x40000000u
#define STATE_EPOCH 0x3fffffffu

int pycoll_queue_probe(const pycoll_p2p_t *p2p, pycoll_peer_queues_t *q, int r)
{
    if (q->probe_queued || q->probed_slot == pycoll_slot_key(&p2p->desc))
        return 0;
    q->probed_slot = pycoll_slot_key(&p2p->desc);
    q->probe_queued = 1;
    q->probe = (pycoll_request_t){.peer = r, .is_send = 1, .tag = q->next_probe_tag};
    q->next_probe_tag = 0;
    pycoll_enqueue(&q->send_head, &q->send_tail, &q->probe);
    return 1;
}

/* Have q's peer's next STATE frame say `tag`, even where the peer was told about this collective already
 * (point-to-point calls share one descriptor: each stuck wait is news). Returns whether one must be queued.
 * Not while a STATE frame is still queued: it may sit ahead of messages sent since, so it cannot speak for
 * everything sent before now (the cycle is then left to the deadline). */
static int tag_next_state(pycoll_peer_queues_t *q, uint32_t tag)
{
    if (q->probe_queued)
        return 0;
    q->next_probe_tag = tag;
    q->probed_slot = 0;
    return 1;
}

void pycoll_probe_peers(const pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n, void *peers, size_t stride,
                        void (*tell)(void *t, int r), void *t)
{
    if (n == 1 && reqs[0]->sole_wait && !reqs[0]->is_send && !reqs[0]->complete &&
        p2p->desc.coll == PYCOLL_COLL_SEND_RECV) {
        pycoll_peer_queues_t *q = pycoll_peer_queues(peers, stride, reqs[0]->peer);
        q->stuck_epochs = (q->stuck_epochs + 1) & STATE_EPOCH;
        if (!q->stuck_epochs)
            q->stuck_epochs = 1; /* 0 marks a receive never reported stuck */
        reqs[0]->stuck_epoch = q->stuck_epochs;
        if (tag_next_state(q, STATE_STUCK | q->stuck_epochs))
            tell(t, reqs[0]->peer);
        return;
    }
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete && !reqs[i]->is_send)
            tell(t, reqs[i]->peer);
    for (int r = 0; r < p2p->size; r++) {
        const pycoll_peer_queues_t *q = pycoll_peer_queues(peers, stride, r);
        if (q->waits_for_slot == pycoll_slot_key(&p2p->desc) && q->waits_for == p2p->rank)
            tell(t, r);
    }
}

/* This rank's receive from q's peer that waits alone (still posted, not complete), or NULL. */
static const pycoll_request_t *sole_receive(const pycoll_peer_queues_t *q)
{
    for (const pycoll_request_t *req = q->recv_head; req; req = req->next)
        if (req->sole_wait && !req->complete)
            return req;
    return NULL;
}

pycoll_status_t pycoll_on_peer_state(pycoll_p2p_t *p2p, pycoll_peer_queues_t *q, int r, const void *header,
                                     int finalizing, int waiting_for, int *tell)
{
    const pycoll_frame_header_t *h = header;
    *tell = 0;
    /* Whom r waits for is printed and compared, never trusted: a rank of this job or none. */
    if (h->failed_rank < -1 || h->failed_rank >= p2p->size)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_PEER_FAILURE, r, "rank %d sent a corrupt state frame naming rank %d, "
                               "which is not a rank of 0..%d", r, (int)h->failed_rank, (int)p2p->size - 1);
    pycoll_status_t st = pycoll_frame_check_state(p2p, r, h, finalizing);
    if (st != PYCOLL_OK)
        return st;
    q->waits_for_slot = pycoll_slot_key(&h->desc);
    q->waits_for = h->failed_rank;
    const int same = pycoll_same_slot(&h->desc, &p2p->desc);
    const pycoll_request_t *mine = same && p2p->desc.coll == PYCOLL_COLL_SEND_RECV ? sole_receive(q) : NULL;
    if (mine && (h->tag & STATE_STUCK)) {
        /* r waits alone for this rank, which waits alone for r: say so behind everything sent to r so far. */
        *tell = tag_next_state(q, STATE_CONFIRM | (h->tag & STATE_EPOCH));
        return PYCOLL_OK;
    }
    if (mine && (h->tag & STATE_CONFIRM) && mine->stuck_epoch == (h->tag & STATE_EPOCH))
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_MISMATCH, r,
                               "point-to-point deadlock: rank %d waits to receive from rank %d, which waits to "
                               "receive from rank %d (each receives from the other before it sends: one of them "
                               "must send first, or post both with async_op=True)",
                               (int)p2p->rank, (int)r, (int)p2p->rank);
    *tell = same && waiting_for >= 0 && waiting_for != r;
    return PYCOLL_OK;
}

void pycoll_drop_queues(void *peers, size_t stride, int size)
{
    for (int r = 0; r < size; r++) {
        pycoll_peer_queues_t *q = pycoll_peer_queues(peers, stride, r);
        q->send_head = q->send_tail = NULL;
        q->recv_head = q->recv_tail = NULL;
        q->probe_queued = 0;
    }
}
