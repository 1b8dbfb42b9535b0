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

/* The all-reduce of sendbuf into recvbuf without copying sendbuf into recvbuf first, where the schedule can read
 * its input where it lies: buffers that share no byte (the same buffer, or overlapping ones, run in place after
 * the copy). The ring always; the hierarchical one where it runs as a pipeline of chunks. */
pycoll_status_t ring_all_reduce_from(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                     pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);
pycoll_status_t hierarchical_all_reduce_from(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                             pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);

/* What a schedule of each kind of collective takes (the kind column of PYCOLL_COLLECTIVES, ids.h): the
 * algorithm table's fields have these types (table.h). Every schedule checks its arguments again (the table
 * is also reached from tests and the simulator). */

/* all_reduce: sendbuf into recvbuf (sendbuf == recvbuf is in place), as all_reduce_fn's accuracy says.
 * reduce_scatter: sendbuf holds size * count elements; rank r receives the reduction of block r into
 * recvbuf[0..count). */
typedef pycoll_status_t reduction_schedule(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                           pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);

pycoll_status_t ring_reduce_scatter(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                    pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);
pycoll_status_t halving_doubling_reduce_scatter_run(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf,
                                                    int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                    pycoll_accuracy_t accuracy);
pycoll_status_t mesh_reduce_scatter(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                    pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);

/* recvbuf holds size * count elements; block r comes from rank r's sendbuf[0..count). all_to_all: the same
 * buffers, which must not overlap; block j of sendbuf goes to rank j, block i of recvbuf comes from rank i. */
typedef pycoll_status_t blocks_schedule(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                        pycoll_dtype_t dtype);
pycoll_status_t ring_all_gather(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                pycoll_dtype_t dtype);
pycoll_status_t pairwise_all_to_all(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                    pycoll_dtype_t dtype);

typedef pycoll_status_t in_place_rooted_schedule(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                                 int32_t root);
pycoll_status_t binomial_tree_broadcast(coll_ctx_t *ctx, void *buf, int64_t count, pycoll_dtype_t dtype,
                                        int32_t root);

/* Result in recvbuf on root only (recvbuf may be NULL elsewhere); sendbuf is not modified. */
typedef pycoll_status_t rooted_reduction_schedule(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                                  pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                                  pycoll_accuracy_t accuracy);
pycoll_status_t binomial_tree_reduce(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                     pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy);
pycoll_status_t scatter_gather_reduce(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                      pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy);

typedef pycoll_status_t no_data_schedule(coll_ctx_t *ctx);

/* Messages run through the transport (comm/point_to_point.c), never a schedule: no table entry sets one. */
typedef pycoll_status_t message_schedule(coll_ctx_t *ctx);
pycoll_status_t dissemination_barrier(coll_ctx_t *ctx);

/* count elements per rank; the root's recvbuf (gather) / sendbuf (scatter) holds size * count, block r being
 * rank r's; recvbuf off the root (gather) and sendbuf off the root (scatter) may be NULL (gather_scatter.c). */
typedef pycoll_status_t rooted_schedule(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                        pycoll_dtype_t dtype, int32_t root);
pycoll_status_t binomial_tree_gather(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                     pycoll_dtype_t dtype, int32_t root);
pycoll_status_t flat_gather(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                            pycoll_dtype_t dtype, int32_t root);
pycoll_status_t binomial_tree_scatter(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                      pycoll_dtype_t dtype, int32_t root);
pycoll_status_t flat_scatter(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                             pycoll_dtype_t dtype, int32_t root);

/* Uneven blocks (variable_blocks.c): block r holds counts[r] >= 0 elements, the blocks laid out in rank order.
 * all_gather_v: sendbuf holds counts[rank], recvbuf sum(counts). reduce_scatter_v: sendbuf holds sum(counts),
 * recvbuf counts[rank] (the reduction of block rank); accuracy as reduce_scatter's. */
typedef pycoll_status_t counts_schedule(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, const int64_t *counts,
                                        pycoll_dtype_t dtype);
typedef pycoll_status_t counts_reduction_schedule(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf,
                                                  const int64_t *counts, pycoll_dtype_t dtype, pycoll_op_t op,
                                                  pycoll_accuracy_t accuracy);
pycoll_status_t ring_all_gather_v(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, const int64_t *counts,
                                  pycoll_dtype_t dtype);
pycoll_status_t ring_reduce_scatter_v(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, const int64_t *counts,
                                      pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);

#endif
