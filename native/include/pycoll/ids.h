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

/* Every collective, one line each -- the one list the enum below, the names (pycoll_coll_name), the algorithm
 * table's schedule fields and the dispatch (native/algorithms/table.h, table.c) are generated from:
 *   X(ID, value, field, name, kind)
 * ID: PYCOLL_COLL_<ID>; value: its id, append only (part of the ABI); field: its schedule's field in the
 * algorithm table and its function in comm.h; name: what pycoll_coll_name and the bindings call it; kind: the
 * fields of pycoll_call_t its schedules take (call.h), which the algorithm table turns into their signature:
 *   reduction         sendbuf, recvbuf, count, dtype, op, accuracy
 *   blocks            sendbuf, recvbuf, count, dtype
 *   in_place_rooted   recvbuf (in place), count, dtype, root
 *   rooted_reduction  sendbuf, recvbuf, count, dtype, op, root, accuracy
 *   no_data           nothing
 *   message           (a point-to-point message: no schedule, the transport carries it)
 *   rooted            sendbuf, recvbuf, count, dtype, root
 *   counts            sendbuf, recvbuf, counts, dtype
 *   counts_reduction  sendbuf, recvbuf, counts, dtype, op, accuracy
 * Transports stamp the id on each message so a receiver can tell a peer that called something else
 * (PYCOLL_ERR_MISMATCH naming both sides) instead of hanging.
 * send_recv: point-to-point messages (pycoll_comm_send / recv), not numbered among the collectives: each
 * carries a descriptor of this kind with seq 0 and its communicator's point-to-point group, so that only tag
 * and length are matched between sender and receiver, and a message met in the middle of a collective is
 * named as an order disagreement.
 * The _v ones take per-rank counts; their descriptor's count is a fingerprint of the counts (comm/call.c), so
 * ranks passing different counts meet as a mismatch instead of misreading data. */
#define PYCOLL_COLLECTIVES(X)                                                                                    \
    X(ALL_REDUCE, 0, all_reduce, "all_reduce", reduction)                                                        \
    X(REDUCE_SCATTER, 1, reduce_scatter, "reduce_scatter", reduction)                                            \
    X(ALL_GATHER, 2, all_gather, "all_gather", blocks)                                                           \
    X(BROADCAST, 3, broadcast, "broadcast", in_place_rooted)                                                     \
    X(REDUCE, 4, reduce, "reduce", rooted_reduction)                                                             \
    X(BARRIER, 5, barrier, "barrier", no_data)                                                                   \
    X(SEND_RECV, 6, send_recv, "send/recv", message)                                                             \
    X(ALL_TO_ALL, 7, all_to_all, "all_to_all", blocks)                                                           \
    X(GATHER, 8, gather, "gather", rooted)                                                                       \
    X(SCATTER, 9, scatter, "scatter", rooted)                                                                    \
    X(ALL_GATHER_V, 10, all_gather_v, "all_gather_v", counts)                                                    \
    X(REDUCE_SCATTER_V, 11, reduce_scatter_v, "reduce_scatter_v", counts_reduction)

/* What a collective is, as every rank must agree on it (PYCOLL_COLLECTIVES). */
#define PYCOLL_COLL_ENUMERATOR(ID, value, field, name, kind) PYCOLL_COLL_##ID = value,
typedef enum pycoll_coll {
    PYCOLL_COLLECTIVES(PYCOLL_COLL_ENUMERATOR)
    PYCOLL_NUM_COLLS
} pycoll_coll_t;
#undef PYCOLL_COLL_ENUMERATOR

/* Every schedule that runs has an id of its own, so that a descriptor and pycoll_comm_last_algorithm name what
 * really ran. The collectives each serves are in the algorithm table (pycoll_coll_algorithms). */
typedef enum pycoll_algorithm {
    PYCOLL_ALGO_AUTO = 0,
    PYCOLL_ALGO_RING = 1,
    PYCOLL_ALGO_HALVING_DOUBLING = 2,
    PYCOLL_ALGO_MESH = 3,
    PYCOLL_ALGO_RECURSIVE_DOUBLING = 4,
    PYCOLL_ALGO_HIERARCHICAL = 5,
    /* The shared-memory transport's native collectives (native/transport/shm_collectives.c), named "shm_slots"
     * (each rank's slots in shared memory): run only over a transport whose ops->native table has the
     * collective. PYCOLL_ALGO_SHM is its former name, kept so that C programs written against it still build. */
    PYCOLL_ALGO_SHM_SLOTS = 6,
    PYCOLL_ALGO_SHM = PYCOLL_ALGO_SHM_SLOTS,
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
