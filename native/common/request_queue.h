/* The per-peer queues of posted requests kept by the message transports (TCP, shared memory): posted in
 * order, completed in order, so messages between a pair of ranks match in posting order. */
#ifndef PYCOLL_COMMON_REQUEST_QUEUE_H
#define PYCOLL_COMMON_REQUEST_QUEUE_H

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

#endif
