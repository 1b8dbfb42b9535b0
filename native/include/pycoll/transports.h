/* Constructors of the transports built into libpycoll. Each returns a pycoll_p2p_t (p2p.h). */
#ifndef PYCOLL_TRANSPORTS_H
#define PYCOLL_TRANSPORTS_H

#include "pycoll/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* TCP: fds[i] is a connected, already authenticated stream socket to rank i (fds[rank] is ignored; -1: rank i
 * is reached over another transport, pycoll_routed_transport_create). The transport takes ownership of the
 * sockets and makes them non-blocking. Connection set-up, handshakes and authentication happen before, in
 * pycoll's rendezvous layer. A wait polls for p2p->spin_ns before it sleeps (the communicator's spin option). */
PYCOLL_API pycoll_p2p_t *pycoll_tcp_transport_create(int32_t rank, int32_t size, const int *fds, char *error,
                                                     size_t error_len);

/* Shared memory between the ranks of one host. segment_fds[r] is rank r's segment (its incoming rings; -1:
 * rank r is on another host, reached over another transport), every one pycoll_shm_segment_bytes(size,
 * ring_bytes) bytes, zero-filled, opened by the caller (which keeps the descriptors: they may be closed once
 * this returns). pids[r] is rank r's process id in this pid namespace, or
 * 0 where unknown (then a peer that dies is noticed only through the ranks that can see it, or at the
 * deadline); NULL for none. ring_bytes: each ring's size, a power of two >= 4096; 0 for the default (4 MiB).
 * A wait spins for p2p->spin_ns before it sleeps, as over TCP. A segment is its rank's rings and then its
 * collective area (a control page and two slots as large as a ring, at most 4 MiB each: 8 MiB + 4 KiB
 * by default), for the native collectives (ops->native, algorithm "shm_slots"). */
PYCOLL_API int64_t pycoll_shm_segment_bytes(int32_t size, int64_t ring_bytes);
PYCOLL_API pycoll_p2p_t *pycoll_shm_transport_create(int32_t rank, int32_t size, const int *segment_fds,
                                                     const int32_t *pids, int64_t ring_bytes, char *error,
                                                     size_t error_len);
/* For tests only: how many times this process's shared-memory waits slept once their spin was over, and how
 * many of those sleeps a peer's doorbell ended (the rest ran to their bound). */
PYCOLL_API void pycoll_test_shm_sleeps(int64_t *total, int64_t *rung);

/* Per-pair transports: one transport made of n_children others (taken over: destroyed with it, also when this
 * fails), each a transport of the whole job (same rank and size) that reaches some of its peers -- the others
 * absent, as the -1 entries above make them. route[r] is the child that carries messages with rank r. Requests
 * go to their peer's child; a wait drives every child at once through ops->progress (which each child must
 * have), so shared memory within a host and TCP between hosts make one job. Errors, aborts and finalize span
 * every child. */
PYCOLL_API pycoll_p2p_t *pycoll_routed_transport_create(int32_t n_children, pycoll_p2p_t *const *children,
                                                        const int32_t *route, char *error, size_t error_len);

/* In-process simulation: `size` ranks as threads of one process, exchanging through memory. Used by tests and
 * by the accuracy report to drive the real communicator at world sizes beyond the machine's cores.
 * Runs fn(p2p_of_rank_r, arg, r) on one thread per rank and returns the first non-OK status. fn may hand the
 * p2p to pycoll_comm_create; the simulation owns it (its destroy does nothing), so the communicator may be
 * destroyed whenever fn is done with it. */
typedef pycoll_status_t (*pycoll_sim_rank_fn)(pycoll_p2p_t *p2p, void *arg, int32_t rank);
PYCOLL_API pycoll_status_t pycoll_sim_run(int32_t size, double timeout_s, pycoll_sim_rank_fn fn, void *arg,
                                          char *error, size_t error_len);

#ifdef __cplusplus
}
#endif
#endif
