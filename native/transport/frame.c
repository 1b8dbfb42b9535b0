/* Checks on received frame headers shared by the TCP and shared-memory transports (frame.h). */
#include <stdio.h>
#include <string.h>

#include "transport/frame.h"

void pycoll_frame_fill(const pycoll_p2p_t *p2p, pycoll_frame_header_t *h, int kind, uint32_t tag, int64_t nbytes)
{
    memset(h, 0, sizeof *h);
    h->magic = PYCOLL_FRAME_MAGIC;
    h->kind = kind;
    h->tag = tag;
    h->nbytes = nbytes;
    h->failed_rank = -1;
    h->desc = p2p->desc;
    h->prev = p2p->prev_desc;
}

pycoll_status_t pycoll_frame_mismatch(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                      const char *context)
{
    return pycoll_p2p_mismatch(p2p, r, &h->desc, &h->prev, context);
}

pycoll_status_t pycoll_frame_check_data(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h)
{
    const pycoll_coll_desc_t *theirs = &h->desc;
    /* Another communicator of the family: a collective this rank has not reached yet (it waits). If this rank
     * needs r now, r ran that one first: frame_match names the order disagreement when the frame meets the
     * receive. */
    if (theirs->group != p2p->desc.group)
        return PYCOLL_OK;
    if ((theirs->seq == p2p->desc.seq && !pycoll_same_desc(theirs, &p2p->desc)) || theirs->seq < p2p->desc.seq)
        return pycoll_frame_mismatch(p2p, r, h, "");
    return PYCOLL_OK;
}

pycoll_status_t pycoll_frame_data_at_close(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h)
{
    if (pycoll_same_desc(&h->desc, &p2p->desc))
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_MISMATCH, r, "rank %d sent a message that rank %d never "
                               "received (ranks ran different algorithms?)", (int)r, (int)p2p->rank);
    return pycoll_frame_mismatch(p2p, r, h, " at close");
}

pycoll_status_t pycoll_frame_match(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                   const pycoll_request_t *req)
{
    if (!pycoll_same_desc(&h->desc, &p2p->desc))
        return pycoll_frame_mismatch(p2p, r, h, "");
    if ((h->tag != req->tag || h->nbytes != req->nbytes) && p2p->desc.coll == PYCOLL_COLL_SEND_RECV)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_MISMATCH, r,
                               "message mismatch: rank %d receives tag %u with %lld bytes from rank %d, but the next "
                               "message rank %d sent it has tag %u with %lld bytes (messages between two ranks are "
                               "received in the order they were sent)", (int)p2p->rank, req->tag,
                               (long long)req->nbytes, (int)r, (int)r, h->tag, (long long)h->nbytes);
    if (h->tag != req->tag || h->nbytes != req->nbytes)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_MISMATCH, r,
                               "message mismatch in %s: rank %d expected tag %u with %lld bytes from rank %d, "
                               "got tag %u with %lld bytes (ranks run different algorithms?)",
                               pycoll_algorithm_name((pycoll_algorithm_t)p2p->desc.algorithm), (int)p2p->rank,
                               req->tag, (long long)req->nbytes, (int)r, h->tag, (long long)h->nbytes);
    return PYCOLL_OK;
}

pycoll_status_t pycoll_frame_check_state(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                         int finalizing)
{
    const pycoll_coll_desc_t *theirs = &h->desc;
    /* Another communicator of the family: not comparable. (That r waits for this rank there while this rank
     * waits for r here is no proof of a disagreement: the frame may be older than r's latest messages, and seq
     * numbers of different groups do not order them. A disagreement shows in r's data instead, or at the
     * deadline.) */
    if (theirs->group != p2p->desc.group)
        return PYCOLL_OK;
    if ((theirs->seq == p2p->desc.seq && !pycoll_same_desc(theirs, &p2p->desc)) ||
        (finalizing && theirs->seq > p2p->desc.seq))
        return pycoll_frame_mismatch(p2p, r, h, finalizing ? " at close" : "");
    return PYCOLL_OK;
}

pycoll_status_t pycoll_frame_departed_needed(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                             const char *fmt_rank)
{
    if (pycoll_same_slot(&h->desc, &p2p->desc) && !pycoll_same_desc(&h->desc, &p2p->desc))
        return pycoll_frame_mismatch(p2p, r, h, "");
    char what[96];
    snprintf(what, sizeof what, fmt_rank, (int)p2p->rank);
    return pycoll_p2p_fail(p2p, PYCOLL_ERR_PEER_FAILURE, r, "rank %d closed its communicator %s", (int)r, what);
}

pycoll_status_t pycoll_frame_check_request(pycoll_p2p_t *p2p, const pycoll_request_t *req)
{
    if (p2p->status != PYCOLL_OK)
        return p2p->status;
    if (req->peer < 0 || req->peer >= p2p->size || req->peer == p2p->rank || req->nbytes < 0)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, -1, "invalid %s to rank %d of %lld bytes",
                               req->is_send ? "send" : "receive", (int)req->peer, (long long)req->nbytes);
    return PYCOLL_OK;
}

pycoll_status_t pycoll_frame_check_peer(pycoll_p2p_t *p2p, int32_t r, peer_state_t state,
                                        const pycoll_frame_header_t *last)
{
    if (state == PEER_DEAD)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_PEER_FAILURE, r, "rank %d is gone", (int)r);
    if (state == PEER_ABSENT)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_INVALID, r, "rank %d is not reachable over the %s transport of "
                               "rank %d", (int)r, p2p->ops->name, (int)p2p->rank);
    if (state == PEER_DEPARTED)
        return pycoll_frame_departed_needed(p2p, r, last, ", but rank %d still needs it");
    return PYCOLL_OK;
}

pycoll_status_t pycoll_frame_on_goodbye(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                        int finalizing, int still_needed)
{
    if (finalizing)
        return pycoll_same_desc(&h->desc, &p2p->desc) ? PYCOLL_OK : pycoll_frame_mismatch(p2p, r, h, " at close");
    if (still_needed)
        return pycoll_frame_departed_needed(p2p, r, h, "while rank %d still expected data from it");
    return PYCOLL_OK;
}

/* What a peer's own error was, in words, for the PeerFailure that reports it here. */
static const char *remote_status_phrase(uint32_t status)
{
    switch (status) {
    case PYCOLL_ERR_INVALID:
        return "invalid argument";
    case PYCOLL_ERR_UNSUPPORTED:
        return "unsupported call";
    case PYCOLL_ERR_SYSTEM:
        return "system error";
    case PYCOLL_ERR_NOMEM:
        return "out of memory";
    case PYCOLL_ERR_CLOSED:
        return "communicator closed";
    case PYCOLL_ERR_INTERRUPTED:
        return "interrupted";
    default:
        return "aborted";
    }
}

pycoll_status_t pycoll_frame_adopt_abort(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                         const char *text, int finalizing)
{
    const uint32_t status = h->tag;
    const char *what = text && text[0] ? text : "peer aborted";
    /* The rank an abort names is a rank of this job or none: anything else is a corrupt or forged frame, and the
     * sender is the one at fault. */
    if (h->failed_rank < -1 || h->failed_rank >= p2p->size)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_PEER_FAILURE, r,
                               "rank %d sent a corrupt abort naming rank %d, which is not a rank of 0..%d (its "
                               "text: %.200s)", (int)r, (int)h->failed_rank, (int)p2p->size - 1, what);
    /* At close, every collective of this rank completed; only a disagreement about them is its business (a
     * peer failing because this rank left is not). */
    if (finalizing && status != PYCOLL_ERR_MISMATCH)
        return PYCOLL_OK;
    /* A peer that aborted because of a peer failure names the failed rank; otherwise the aborting rank. */
    if (status == PYCOLL_ERR_REVOKED)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_REVOKED, -1, "%s (reported by rank %d)", what, (int)r);
    const int32_t failed = h->failed_rank >= 0 ? h->failed_rank : r;
    /* Errors about the job (a rank gone, ranks disagreeing, a wait past the deadline) are this rank's too. Any
     * other status is the peer's own fault -- its bad argument, its memory, its OS -- and never this rank's
     * ValueError or MemoryError: here it is the peer that failed. */
    if (status == PYCOLL_ERR_PEER_FAILURE || status == PYCOLL_ERR_MISMATCH || status == PYCOLL_ERR_TIMEOUT)
        return pycoll_p2p_fail(p2p, (pycoll_status_t)status, failed, "%s (reported by rank %d)", what, (int)r);
    if (failed != r)
        return pycoll_p2p_fail(p2p, PYCOLL_ERR_PEER_FAILURE, failed, "rank %d failed: %s there: %s (reported by "
                               "rank %d)", (int)failed, remote_status_phrase(status), what, (int)r);
    return pycoll_p2p_fail(p2p, PYCOLL_ERR_PEER_FAILURE, r, "rank %d failed: %s there: %s", (int)r,
                           remote_status_phrase(status), what);
}

void pycoll_frame_timeout(pycoll_p2p_t *p2p, int32_t waited, uint64_t waits_for_slot, int32_t waits_for)
{
    char what[160];
    pycoll_describe_coll(&p2p->desc, what, sizeof what);
    const int32_t me = p2p->rank;
    if (waits_for_slot == pycoll_slot_key(&p2p->desc) && waits_for >= 0 && waits_for != me)
        pycoll_p2p_fail(p2p, PYCOLL_ERR_TIMEOUT, waits_for, "rank %d timed out in %s waiting for rank %d, which "
                        "waits for rank %d (is rank %d stopped or overloaded?)", (int)me, what, (int)waited,
                        (int)waits_for, (int)waits_for);
    else
        pycoll_p2p_fail(p2p, PYCOLL_ERR_TIMEOUT, waited, "rank %d timed out in %s waiting for rank %d (is it "
                        "stopped or overloaded?)", (int)me, what, (int)waited);
}
