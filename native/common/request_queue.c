/* Probes and queues shared by the message transports (request_queue.h). */
#include "common/request_queue.h"

int pycoll_queue_probe(const pycoll_p2p_t *p2p, pycoll_peer_queues_t *q, int r)
{
    if (q->probe_queued || q->probed_slot == pycoll_slot_key(&p2p->desc))
        return 0;
    q->probed_slot = pycoll_slot_key(&p2p->desc);
    q->probe_queued = 1;
    q->probe = (pycoll_request_t){.peer = r, .is_send = 1};
    pycoll_enqueue(&q->send_head, &q->send_tail, &q->probe);
    return 1;
}

void pycoll_probe_peers(const pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n, void *peers, size_t stride,
                        void (*tell)(void *t, int r), void *t)
{
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete && !reqs[i]->is_send)
            tell(t, reqs[i]->peer);
    for (int r = 0; r < p2p->size; r++) {
        const pycoll_peer_queues_t *q = pycoll_peer_queues(peers, stride, r);
        if (q->waits_for_slot == pycoll_slot_key(&p2p->desc) && q->waits_for == p2p->rank)
            tell(t, r);
    }
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
