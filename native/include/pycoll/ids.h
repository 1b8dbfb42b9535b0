/* The ids every layer agrees on -- collectives, algorithms, accuracy modes -- and their names. Part of the ABI:
 * values are append only (descriptors carry them over the wire, programs built against older headers pass
 * them). Which algorithm serves which collective, and what runs it, is the algorithm table
 * (native/algorithms/table.c); algorithms.h asks it. */
#ifndef PYCOLL_IDS_H
#define PYCOLL_IDS_H

#include "pycoll/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a collective is, as every rank must agree on it. Transports stamp it on each message so a receiver
 * can tell a peer that called something else (PYCOLL_ERR_MISMATCH naming both sides) instead of hanging. */
typedef enum pycoll_coll {
    PYCOLL_COLL_ALL_REDUCE = 0,
    PYCOLL_COLL_REDUCE_SCATTER = 1,
    PYCOLL_COLL_ALL_GATHER = 2,
    PYCOLL_COLL_BROADCAST = 3,
    PYCOLL_COLL_REDUCE = 4,
    PYCOLL_COLL_BARRIER = 5,
    /* Point-to-point messages (pycoll_comm_send / recv). Not numbered among the collectives: each carries a
     * descriptor of this kind with seq 0 and its communicator's point-to-point group, so that only tag and
     * length are matched between sender and receiver, and a message met in the middle of a collective is
     * named as an order disagreement. */
    PYCOLL_COLL_SEND_RECV = 6,
    /* The _V ones take per-rank counts; their descriptor's count is a fingerprint of the counts
     * (comm/call.c), so ranks passing different counts meet as a mismatch instead of misreading data. */
    PYCOLL_COLL_ALL_TO_ALL = 7,
    PYCOLL_COLL_GATHER = 8,
    PYCOLL_COLL_SCATTER = 9,
    PYCOLL_COLL_ALL_GATHER_V = 10,
    PYCOLL_COLL_REDUCE_SCATTER_V = 11,
    PYCOLL_NUM_COLLS
} pycoll_coll_t;

/* Every schedule that runs has an id of its own, so that a descriptor and pycoll_comm_last_algorithm name what
 * really ran. The collectives each serves are in the algorithm table (pycoll_coll_algorithms). */
typedef enum pycoll_algorithm {
    PYCOLL_ALGO_AUTO = 0,
    PYCOLL_ALGO_RING = 1,
    PYCOLL_ALGO_HALVING_DOUBLING = 2,
    PYCOLL_ALGO_MESH = 3,
    PYCOLL_ALGO_RECURSIVE_DOUBLING = 4,
    PYCOLL_ALGO_HIERARCHICAL = 5,
    /* The shared-memory transport's native collectives (native/transport/shm_collectives.c): run only over a
     * transport whose ops->native table has the collective. */
    PYCOLL_ALGO_SHM = 6,
    PYCOLL_ALGO_BINOMIAL_TREE = 7,  /* broadcast (pipelined); reduce, gather, scatter of small buffers */
    PYCOLL_ALGO_SCATTER_GATHER = 8, /* reduce of large buffers: ring reduce-scatter, then every block to the root */
    PYCOLL_ALGO_FLAT = 9,           /* gather, scatter of large buffers: the root exchanges with every rank at once */
    PYCOLL_ALGO_DISSEMINATION = 10, /* barrier */
    PYCOLL_ALGO_PAIRWISE = 11,      /* all_to_all */
    PYCOLL_NUM_ALGOS
} pycoll_algorithm_t;

typedef enum pycoll_accuracy {
    PYCOLL_ACCURACY_FAST = 0,
    PYCOLL_ACCURACY_COMPENSATED = 1,
    /* Sums and averages of float dtypes whose bits do not depend on the world size, the rank order, the
     * algorithm or the segment size: an exact integer form on the wire (native/comm/reproducible.c). */
    PYCOLL_ACCURACY_REPRODUCIBLE = 2,
    PYCOLL_NUM_ACCURACIES
} pycoll_accuracy_t;

/* Names of the ids above ("?" for an unknown id): the one list every binding takes them from. Algorithm names
 * come from the algorithm table. */
PYCOLL_API const char *pycoll_algorithm_name(pycoll_algorithm_t algorithm);
PYCOLL_API const char *pycoll_coll_name(pycoll_coll_t coll);
PYCOLL_API const char *pycoll_accuracy_name(pycoll_accuracy_t accuracy);

#ifdef __cplusplus
}
#endif
#endif
