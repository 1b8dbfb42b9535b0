/* The per-peer queues of posted requests kept by the message transports (TCP, shared memory): posted in
 * order, completed in order, so messages between a pair of ranks match in posting order. */
#ifndef PYCOLL_TRANSPORT_REQUEST_QUEUE_H
#define PYCOLL_TRANSPORT_REQUEST_QUEUE_H

#include <stddef.h>

#include "pycoll/p2p.h"

static inline void pycoll_enqueue(pycoll_request_t **head, pycoll_request_t **tail, pycoll_request_t *req)
{
    req->complete = 0;
    req->progress = 0;
    req->next = NULL;
    if (*tail)
        (*tail)->next = req;
    else
        *head = req;
    *tail = req;
}

/* Mark the head request complete and take it off the queue. */
static inline void pycoll_dequeue_complete(pycoll_request_t **head, pycoll_request_t **tail)
{
    pycoll_request_t *req = *head;
    req->complete = 1;
    *head = req->next;
    if (!*head)
        *tail = NULL;
}

static inline int pycoll_all_complete(pycoll_request_t *const *reqs, int n)
{
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete)
            return 0;
    return 1;
}

/* The peer of the first request not complete yet, or -1. */
static inline int pycoll_first_pending_peer(pycoll_request_t *const *reqs, int n)
{
    for (int i = 0; i < n; i++)
        if (!reqs[i]->complete)
            return reqs[i]->peer;
    return -1;
}

/* Per peer in a message transport: its queues of posted sends and receives, and its STATE probe (which
 * collective this rank is in and whom it waits for, told once per collective when a wait blocks). The first
 * member of each transport's peer struct, so the helpers below serve every transport's array of peers. */
typedef struct pycoll_peer_queues {
    pycoll_request_t *send_head, *send_tail;
    pycoll_request_t *recv_head, *recv_tail;
    pycoll_request_t probe; /* a STATE frame queued behind the sends (never cut into a data frame) */
    int probe_queued;
    uint64_t probed_slot;    /* the collective this peer was last told about */
    /* From the peer's last STATE frame: in collective waits_for_slot it was blocked waiting for rank
     * waits_for, so a rank that times out waiting for this peer can name the rank at the end of the chain. */
    uint64_t waits_for_slot;
    int32_t waits_for;
    uint32_t stuck_epochs;  /* this rank's sole-wait receives from this peer that told it they are stuck */
    uint32_t next_probe_tag; /* what the next STATE frame says besides its descriptor (request_queue.c) */
} pycoll_peer_queues_t;

/* The queues of rank r in an array of peer structs of `stride` bytes that begin with them. */
static inline pycoll_peer_queues_t *pycoll_peer_queues(void *peers, size_t stride, int r)
{
    return (pycoll_peer_queues_t *)((char *)peers + (size_t)r * stride);
}

/* Queue peer r's STATE probe if it was not told about this collective yet; returns whether it was queued. */
int pycoll_queue_probe(const pycoll_p2p_t *p2p, pycoll_peer_queues_t *q, int r);
/* A wait blocked for PYCOLL_PROBE_AFTER_NS: tell(t, r) the peers it waits for, and those that said they wait
 * for this rank in this collective (they can then name whom this rank waits for when they time out). */
void pycoll_probe_peers(const pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n, void *peers, size_t stride,
                        void (*tell)(void *t, int r), void *t);
/* A STATE frame h from rank r (q its queues; waiting_for: whom this rank's blocked wait waits for, or -1):
 * checked against this rank's collective, remembered for the timeout message, and a cycle of two ranks that
 * each receive from the other before sending named as such. *tell: queue r a STATE frame of this rank's. */
pycoll_status_t pycoll_on_peer_state(pycoll_p2p_t *p2p, pycoll_peer_queues_t *q, int r, const void *h,
                                     int finalizing, int waiting_for, int *tell);
/* Forget every queued request (after an abort, or at close). */
void pycoll_drop_queues(void *peers, size_t stride, int size);

#endif
