/* What the communicator hands every algorithm: the transport, this communicator's options, and its scratch.
 * Internal (not part of the C ABI): the communicator owns it, so two communicators in one process run with
 * their own segment sizes and never share scratch, and transports know nothing of either. */
#ifndef PYCOLL_ALGORITHMS_CONTEXT_H
#define PYCOLL_ALGORITHMS_CONTEXT_H

#include "pycoll/p2p.h"

typedef struct coll_ctx {
    pycoll_p2p_t *p2p;
    int64_t segment_bytes;   /* ring / pipelined broadcast segment, largest halving_doubling unit; > 0 */
    void *workspace;         /* see comm_workspace (schedule.h) */
    int64_t workspace_bytes;
    /* The memory table that allocated workspace: the transport's table may change between collectives (the
     * vendor transport picks one per buffer), and a block is freed by the table that made it. */
    const struct pycoll_memory_kernels *workspace_kernels;
    /* host_of[r]: the host of rank r (pycoll_comm_set_hosts), or NULL: every rank on one host. */
    const int32_t *host_of;
} coll_ctx_t;

#endif
