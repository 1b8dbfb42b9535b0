/* One collective call as data (as torch's c10d options structs): every collective, point-to-point message,
 * blocking or not, is one pycoll_call_t run by pycoll_comm_run. The per-collective functions of comm.h fill
 * one and run it; bindings (Python, JAX's custom calls) build one directly, so a new collective adds a
 * collective id, not a new entry point in every layer. */
#ifndef PYCOLL_CALL_H
#define PYCOLL_CALL_H

#include "pycoll/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Versioned so that fields can be appended: a call of another version or size is refused (PYCOLL_ERR_INVALID)
 * rather than read with the wrong layout. Fill with pycoll_call_init, then set what the collective uses. */
#define PYCOLL_CALL_VERSION 1

/* Each field means the same for every collective. Counts are elements of dtype in the buffer they name, on
 * this rank; a buffer this rank does not use is NULL with count 0. What each collective requires of them:
 *   all_reduce        send_count == recv_count (sendbuf == recvbuf: in place)
 *   reduce_scatter    send_count == size * recv_count: rank r gets the reduction of block r
 *   all_gather        recv_count == size * send_count: block r comes from rank r
 *   broadcast         in place in recvbuf (the root's is sent); sendbuf NULL or recvbuf
 *   reduce            into the root's recvbuf (recv_count == send_count); recvbuf may be NULL elsewhere
 *   barrier           no buffers
 *   all_to_all        send_count == recv_count == size * k: block j of sendbuf goes to rank j
 *   gather            the root's recv_count == size * send_count; recvbuf may be NULL elsewhere
 *   scatter           the root's send_count == size * recv_count; sendbuf may be NULL elsewhere
 *   all_gather_v      counts[r]: rank r's block; send_count == counts[rank], recv_count == sum(counts)
 *   reduce_scatter_v  send_count == sum(counts), recv_count == counts[rank]
 *   send_recv         a send (sendbuf, send_count to dest) or a receive (recvbuf, recv_count from source):
 *                     one of the two, the other's buffer NULL, count 0 and rank -1 */
typedef struct pycoll_call {
    uint32_t version;          /* PYCOLL_CALL_VERSION */
    uint32_t size;             /* sizeof(pycoll_call_t) as the caller was compiled */
    pycoll_coll_t collective;
    pycoll_dtype_t dtype;
    const void *sendbuf;       /* what this rank sends or contributes */
    void *recvbuf;             /* where this rank's result goes */
    int64_t send_count;        /* elements in sendbuf */
    int64_t recv_count;        /* elements in recvbuf */
    /* The _v collectives' block per rank (comm size entries, the same on every rank), else NULL. The caller's
     * array, like the buffers: it must stay valid until the call completes. */
    const int64_t *counts;
    pycoll_op_t op;            /* reductions; PYCOLL_SUM elsewhere */
    pycoll_algorithm_t algorithm; /* PYCOLL_ALGO_AUTO: the decision's choice (the only one some collectives take) */
    pycoll_accuracy_t accuracy;   /* reductions; PYCOLL_ACCURACY_FAST elsewhere */
    int32_t root;              /* broadcast, reduce, gather, scatter: the root rank; -1 elsewhere */
    int32_t dest;              /* send_recv: the rank a send goes to; -1 elsewhere */
    int32_t source;            /* send_recv: the rank a receive comes from; -1 elsewhere */
    uint32_t tag;              /* send_recv: matched between a send and its receive; 0 elsewhere */
} pycoll_call_t;

/* A call of `collective` with no buffers: version and size set, root, dest and source -1, op SUM, algorithm AUTO,
 * accuracy FAST, everything else 0. */
PYCOLL_API void pycoll_call_init(pycoll_call_t *call, pycoll_coll_t collective);

/* Run `call` on comm. work NULL: blocking -- its turn after every non-blocking call queued before it, then on
 * the caller's thread; returns once done on this rank. work non-NULL: non-blocking -- checked at once, then
 * queued on the progress thread (comm.h: "Non-blocking collectives"); *work is its handle (NULL on failure).
 * A bad call -- an unknown version or size, an unknown collective or id, counts that do not fit the
 * collective, a root, dest or source out of range -- is PYCOLL_ERR_INVALID before anything is sent, the communicator
 * intact, pycoll_comm_error saying which field. */
PYCOLL_API pycoll_status_t pycoll_comm_run(pycoll_comm_t *comm, const pycoll_call_t *call, pycoll_work_t **work);

/* The rules above, and those of the ids, ops and accuracies, checked for rank `rank` of `size` ranks without a
 * communicator: what pycoll_comm_run refuses as PYCOLL_ERR_INVALID (or PYCOLL_ERR_UNSUPPORTED) is refused here
 * alike, with the same sentence in why (why_len bytes; why may be NULL). For engines that run calls elsewhere (a
 * vendor library, a plugin), which must refuse what pycoll's own would. What only a communicator knows -- whether
 * its transport runs the algorithm -- is pycoll_comm_run's alone. */
PYCOLL_API pycoll_status_t pycoll_call_check(const pycoll_call_t *call, int32_t rank, int32_t size, char *why,
                                             size_t why_len);

#ifdef __cplusplus
}
#endif
#endif
