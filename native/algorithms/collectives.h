/* The collective algorithms, as the communicator (native/comm) runs them: each takes the communicator's
 * context (context.h), after the communicator has checked the arguments, stamped the collective on the
 * transport (p2p->desc) and set its deadline. Internal: other programs reach them through pycoll_comm_*, so
 * there is one path from a call to an algorithm, the one production and the simulator both take. */
#ifndef PYCOLL_ALGORITHMS_COLLECTIVES_H
#define PYCOLL_ALGORITHMS_COLLECTIVES_H

#include "algorithms/context.h"
#include "pycoll/algorithms.h"

/* In-place all-reduce of buf[0..count). PYCOLL_AVG sums, then divides once by p2p->size.
 * accuracy COMPENSATED: float types carry (sum, comp) pairs through the reduction phase (kernels.h);
 * other dtypes and ops behave as FAST. */
typedef pycoll_status_t (*all_reduce_fn)(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                         pycoll_op_t op, pycoll_accuracy_t accuracy);

pycoll_status_t ring_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                pycoll_accuracy_t accuracy);
pycoll_status_t halving_doubling_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                            pycoll_op_t op, pycoll_accuracy_t accuracy);
pycoll_status_t mesh_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                pycoll_accuracy_t accuracy);
pycoll_status_t recursive_doubling_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                              pycoll_op_t op, pycoll_accuracy_t accuracy);

/* Reduce-scatter within each host, all-reduce across hosts, all-gather within each host (hierarchical.c);
 * the host map is ctx->host_of. */
pycoll_status_t hierarchical_all_reduce(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                        pycoll_op_t op, pycoll_accuracy_t accuracy);

/* The all-reduce for an algorithm id of the all-reduce table (decision.c), or NULL. */
all_reduce_fn all_reduce_algorithm(pycoll_algorithm_t algorithm);

/* sendbuf holds size * count elements; rank r receives the reduction of block r into recvbuf[0..count). */
pycoll_status_t reduce_scatter_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                   pycoll_dtype_t dtype, pycoll_op_t op, pycoll_algorithm_t algorithm,
                                   pycoll_accuracy_t accuracy);
/* recvbuf holds size * count elements; block r comes from rank r's sendbuf[0..count). */
pycoll_status_t all_gather_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                               pycoll_dtype_t dtype);
pycoll_status_t broadcast_run(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype, int32_t root);
/* Result in recvbuf on root only (recvbuf may be NULL elsewhere); sendbuf is not modified. */
pycoll_status_t reduce_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                           pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy);
pycoll_status_t barrier_run(coll_ctx_t *ctx);

/* Issue #14's collectives. sendbuf and recvbuf hold size * count elements and must not overlap; block j of
 * sendbuf goes to rank j, block i of recvbuf comes from rank i (all_to_all.c). */
pycoll_status_t all_to_all_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                               pycoll_dtype_t dtype);
/* count elements per rank; the root's recvbuf (gather) / sendbuf (scatter) holds size * count, block r being
 * rank r's; recvbuf off the root (gather) and sendbuf off the root (scatter) may be NULL (gather_scatter.c). */
pycoll_status_t gather_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                           pycoll_dtype_t dtype, int32_t root);
pycoll_status_t scatter_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                            pycoll_dtype_t dtype, int32_t root);
/* Uneven blocks (variable_blocks.c): block r holds counts[r] >= 0 elements, the blocks laid out in rank order.
 * all_gather_v: sendbuf holds counts[rank], recvbuf sum(counts). reduce_scatter_v: sendbuf holds sum(counts),
 * recvbuf counts[rank] (the reduction of block rank); accuracy as reduce_scatter's. */
pycoll_status_t all_gather_v_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, const int64_t *counts,
                                 pycoll_dtype_t dtype);
pycoll_status_t reduce_scatter_v_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, const int64_t *counts,
                                     pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);

#endif
