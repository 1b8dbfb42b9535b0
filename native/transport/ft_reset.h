/* What agree and shrink (native/comm/agree.c) need of a message transport after a failure or a revoke (or
 * before an agreement on a healthy one): a fresh start among the peers that are still there, over the same
 * connections. Internal; the TCP and shared-memory transports have it, and the routed one over them
 * (ft_reset.c dispatches). */
#ifndef PYCOLL_TRANSPORT_FT_RESET_H
#define PYCOLL_TRANSPORT_FT_RESET_H

#include "pycoll/p2p.h"

/* Start epoch `epoch` (larger than every earlier one, the same on every rank that takes part): forget the
 * transport's first error and every queued request; cut the peers marked in lost[] (size entries, this
 * transport's ranks); every other peer's stream resumes where that peer starts the same epoch -- what it sent
 * before (the aborted collective's messages, its ABORT) is discarded, so nothing stale can match a later
 * receive. A peer that cannot resume (gone, closed, its stream cut mid-frame) is cut and marked in lost[].
 * Afterwards post and ops->progress work as on a new transport; a peer lost then is recorded as a
 * PYCOLL_ERR_PEER_FAILURE naming it, which the caller may clear (pycoll_ft_clear_error) to go on with the
 * others. PYCOLL_ERR_UNSUPPORTED (nothing changed) for a transport without it. A routed transport
 * (routed_transport.c) resets each of its children. */
pycoll_status_t pycoll_ft_reset(pycoll_p2p_t *p2p, uint32_t epoch, uint8_t *lost);
/* Whether p2p is of a kind that has pycoll_ft_reset (a finalized one still refuses). */
int pycoll_ft_can_reset(const pycoll_p2p_t *p2p);
/* Stop talking to peer r for good, so that r sees this rank gone (it must not wait for it). */
void pycoll_ft_cut(pycoll_p2p_t *p2p, int32_t r);
/* Whether the transport has stopped talking to peer r (found it dead, closed or cut): only the first error is
 * recorded, so a second peer lost at once is known only here. */
int pycoll_ft_peer_gone(pycoll_p2p_t *p2p, int32_t r);
/* Forget the transport's first error (the peer it names is already marked gone inside the transport). */
void pycoll_ft_clear_error(pycoll_p2p_t *p2p);
/* The same, then go on with the other peers: what the transport left unread when it stopped at that error
 * (over TCP, events of other sockets that came with it) is read now. */
void pycoll_ft_resume(pycoll_p2p_t *p2p);

/* From any thread, never blocking: a wait in progress on the transport's own thread runs its interrupt check
 * now rather than at the next ~100 ms tick (pycoll_comm_revoke). */
void pycoll_ft_wake(pycoll_p2p_t *p2p);

/* Before a collective: whether a peer already aborted (a revoke) where the transport can tell without a system
 * call (shared memory: its rings' flags); then the error is recorded. A rank that comes late to a revoked
 * collective fails it even where the others had already handed it everything it needs. */
void pycoll_ft_poll(pycoll_p2p_t *p2p);

/* The transports that can start over, by ops->name: each has the four functions PYCOLL_FT_DECLARE names
 * (tcp_ft_reset, ...), which ft_reset.c picks from. */
#define PYCOLL_FT_TRANSPORTS(X) X(tcp) X(shm) X(routed)
#define PYCOLL_FT_DECLARE(kind)                                                                                  \
    pycoll_status_t kind##_ft_reset(pycoll_p2p_t *p2p, uint32_t epoch, uint8_t *lost);                          \
    void kind##_ft_cut(pycoll_p2p_t *p2p, int32_t r);                                                            \
    int kind##_ft_peer_gone(pycoll_p2p_t *p2p, int32_t r);                                                       \
    void kind##_ft_wake(pycoll_p2p_t *p2p);
PYCOLL_FT_TRANSPORTS(PYCOLL_FT_DECLARE)
#undef PYCOLL_FT_DECLARE
/* What only some of them need besides. */
void tcp_ft_rearm(pycoll_p2p_t *p2p);
void routed_ft_poll(pycoll_p2p_t *p2p);
void routed_ft_resume(pycoll_p2p_t *p2p);

#endif
