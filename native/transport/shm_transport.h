/* What the shared-memory transport's two halves share (internal): the p2p part over rings
 * (shm_transport.c) and the native collectives over a per-rank collective area (shm_collectives.c). Both wait
 * through one loop, shm_wait_until, so a native collective sees ABORTs, STATE probes, dead peers, interrupts and
 * its deadline exactly as a message wait does. */
#ifndef PYCOLL_TRANSPORT_SHM_TRANSPORT_H
#define PYCOLL_TRANSPORT_SHM_TRANSPORT_H

#include "pycoll/transports.h"

typedef struct shm_transport shm_transport_t;
typedef struct shm_collectives shm_collectives_t;

/* What a wait waits for: ready(arg) is polled (no system call) until it says yes; pending_peer(arg) is a rank
 * still waited for (named on a timeout); probe(arg), once the wait has blocked PYCOLL_PROBE_AFTER_NS, tells
 * the peers concerned which collective this rank is in (shm_tell_peers). */
typedef struct shm_wait_cond {
    int (*ready)(void *arg);
    int32_t (*pending_peer)(void *arg);
    void (*probe)(void *arg);
    void *arg;
} shm_wait_cond_t;

/* Poll until cond is ready, the deadline passes, a peer fails or this rank is interrupted, spinning, then
 * yielding, then napping (p2p->spin_ns), and moving every ring meanwhile. On error it aborts (tells every
 * peer) and returns p2p->status. */
pycoll_status_t shm_wait_until(shm_transport_t *t, const shm_wait_cond_t *cond);
/* One pass over every ring, never waiting: an ABORT, GOODBYE or death already written there is adopted into
 * p2p->status, which it returns. */
pycoll_status_t shm_poll_peers(shm_transport_t *t);
/* Wake every peer asleep on its doorbell (shm_doorbell.h): after publishing a flag any of them may wait for. */
void shm_ring_peers(shm_transport_t *t);
/* The doorbell this rank sleeps on when p2p is a shared-memory transport, else NULL: how the routed transport
 * sleeps while only shared-memory requests are pending (a peer's ring then ends its sleep). */
struct shm_doorbell;
struct shm_doorbell *shm_transport_doorbell(pycoll_p2p_t *p2p);
/* The doorbell a wait for reqs[0..n) on p2p can sleep on (a local peer's ring then ends the sleep): a
 * shared-memory transport's own, or a routed transport's shared-memory child's while only that child's requests
 * are pending (routed_transport.c); NULL otherwise. */
struct shm_doorbell *transport_doorbell(pycoll_p2p_t *p2p, pycoll_request_t *const *reqs, int n);
/* Tell every peer still open (once per collective) which collective this rank is in and whom it waits for. */
void shm_tell_peers(shm_transport_t *t);
/* Whether rank r may still write (no GOODBYE, ABORT or death seen from it). A native collective that finds r's
 * flags short of the round re-reads them once r is not open (r stored them before closing), then, still short,
 * fails with shm_peer_needed: PYCOLL_ERR_PEER_FAILURE naming r (a MISMATCH if r's last collective was this
 * one, called differently). */
int shm_peer_open(const shm_transport_t *t, int32_t r);
pycoll_status_t shm_peer_needed(shm_transport_t *t, int32_t r);
/* Rank r wrote `what` (a value it could not have written) into shared memory: PYCOLL_ERR_PEER_FAILURE naming
 * it. `what` completes "rank r ...". */
pycoll_status_t shm_peer_corrupt(shm_transport_t *t, int32_t r, const char *what);
/* The transport's collective state (NULL before it is attached). */
shm_collectives_t *shm_collectives_of(shm_transport_t *t);

/* The native collectives (shm_collectives.c). The collective area of each rank follows its rings in its
 * segment, at `offset`; it is shm_coll_area_bytes(ring_bytes) long (its slots are as large as a ring, at most
 * 4 MiB). */
extern const pycoll_native_collectives_t shm_native_collectives;
int64_t shm_coll_area_bytes(int64_t ring_bytes);
/* Map every rank's collective area; NULL (error set) on failure. pids as pycoll_shm_transport_create's (large
 * transfers read straight from a peer's process where every rank can: shm_single_copy.c). */
shm_collectives_t *shm_collectives_attach(shm_transport_t *t, int32_t size, const int *segment_fds,
                                          const int32_t *pids, int64_t offset, int64_t ring_bytes, char *error,
                                          size_t error_len);
void shm_collectives_detach(shm_collectives_t *c, int32_t size);

#endif
