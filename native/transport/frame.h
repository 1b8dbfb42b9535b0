/* The frame header that the message-passing transports (TCP, shared memory) put before every message, and the
 * checks a receiver makes on a header. One copy of the rules that turn ranks disagreeing about a collective
 * into PYCOLL_ERR_MISMATCH naming both sides, so every transport reports a disagreement the same way. */
#ifndef PYCOLL_TRANSPORT_FRAME_H
#define PYCOLL_TRANSPORT_FRAME_H

#include <string.h>

#include "pycoll/p2p.h"

#define PYCOLL_FRAME_MAGIC 0x50434c31u /* "PCL1" */
/* How long an aborting rank tries to get its reason out. */
#define PYCOLL_ABORT_DRAIN_NS 200000000LL
/* A wait blocked this long tells the peers it waits for what it is in. Long enough that no collective that
 * merely takes time pays for it more than once per peer; short enough to turn a disagreement into an error
 * at once rather than at the deadline. */
#define PYCOLL_PROBE_AFTER_NS 50000000LL

/* FRAME_RECOVER: the sender started a fault-tolerance epoch (tag: its number, transport/ft_reset.h); what it
 * sent before belongs to the epoch it left. */
enum pycoll_frame_kind { FRAME_DATA = 1, FRAME_ABORT = 2, FRAME_GOODBYE = 3, FRAME_STATE = 4, FRAME_RECOVER = 5 };

/* Where a message transport stands with a peer: talking, said GOODBYE, or gone (closed, died, aborted); or
 * absent: a rank of the job that another transport reaches (routed_transport.c), never posted to, probed,
 * told or waited for here. */
typedef enum peer_state { PEER_OPEN, PEER_DEPARTED, PEER_DEAD, PEER_ABSENT } peer_state_t;

typedef struct pycoll_frame_header {
    uint32_t magic;
    uint32_t tag;    /* DATA: the message tag; ABORT: the pycoll_status_t */
    int64_t nbytes;  /* payload bytes (ABORT: the message text) */
    int32_t kind;
    int32_t failed_rank; /* ABORT: the rank the error is about; STATE: the rank the sender waits for */
    pycoll_coll_desc_t desc;
    pycoll_coll_desc_t prev; /* the sender's previous collective: names the culprit of a history mismatch */
} pycoll_frame_header_t;

static inline int pycoll_same_desc(const pycoll_coll_desc_t *a, const pycoll_coll_desc_t *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

/* A header of `kind` stamped with the collective p2p is in. */
void pycoll_frame_fill(const pycoll_p2p_t *p2p, pycoll_frame_header_t *h, int kind, uint32_t tag, int64_t nbytes);
/* Rank r, whose header is h, disagrees with this rank: MISMATCH naming both sides. */
pycoll_status_t pycoll_frame_mismatch(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                      const char *context);
/* A data header that is here while this rank is in its current collective: one stamped with this collective
 * must be this collective; one stamped with an earlier collective was never received there. A later one (the
 * peer is ahead) waits. */
pycoll_status_t pycoll_frame_check_data(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h);
/* A data header found at close: every collective is over, so it is a message this rank never received. */
pycoll_status_t pycoll_frame_data_at_close(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h);
/* A data header against the receive posted for it: same collective, tag and length. */
pycoll_status_t pycoll_frame_match(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                   const pycoll_request_t *req);
/* A STATE header: at the same slot (group and sequence number) the peer must be in the same collective; at
 * close, a peer waiting in a collective this rank never called disagrees with it. A STATE of another
 * communicator of the family is not comparable (its frames say nothing about the order of the two). */
pycoll_status_t pycoll_frame_check_state(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                         int finalizing);
/* Rank r said goodbye with h. At close the last descriptors must agree (history included); before it, a
 * departed peer is only an error if this rank still needs it (still_needed). */
pycoll_status_t pycoll_frame_on_goodbye(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                        int finalizing, int still_needed);
/* This rank needs rank r, which has closed (h: its goodbye). If its last collective was this one, called
 * differently, that is the real story. fmt_rank has one %d, this rank. */
pycoll_status_t pycoll_frame_departed_needed(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                             const char *fmt_rank);
/* The checks of a request being posted: a healthy transport, a valid peer and length ... */
pycoll_status_t pycoll_frame_check_request(pycoll_p2p_t *p2p, const pycoll_request_t *req);
/* ... and a peer still there (last: the header last read from it, its GOODBYE once departed). */
pycoll_status_t pycoll_frame_check_peer(pycoll_p2p_t *p2p, int32_t r, peer_state_t state,
                                        const pycoll_frame_header_t *last);
/* Adopt the error of rank r's ABORT (h, its NUL-terminated text). At close only a disagreement counts. A peer
 * failure, disagreement or timeout is adopted as such; any other status (the peer's bad argument, memory, OS
 * call) is a PYCOLL_ERR_PEER_FAILURE naming the peer and what it reported, never this rank's own error. An
 * abort naming a rank outside the job is a corrupt frame: PYCOLL_ERR_PEER_FAILURE naming its sender. */
pycoll_status_t pycoll_frame_adopt_abort(pycoll_p2p_t *p2p, int32_t r, const pycoll_frame_header_t *h,
                                         const char *text, int finalizing);
/* The timeout error for a wait on rank `waited`, which said (waits_for_slot, waits_for) in its last STATE:
 * a stopped rank makes a chain of waiting ranks; name the end of the chain where known. */
void pycoll_frame_timeout(pycoll_p2p_t *p2p, int32_t waited, uint64_t waits_for_slot, int32_t waits_for);

#endif
