/* Collective algorithms, written once against pycoll_p2p_t (p2p.h) so they run over every transport.
 * The caller (the communicator, native/comm) has already set p2p->desc and p2p->deadline_ns; an algorithm
 * only moves and combines bytes. Every rank ends with a bitwise identical result: each element is combined
 * in one order, decided by the algorithm, and the final values are copied, never recomputed per rank.
 * Counts are elements, 64-bit. Buffers are host memory. */
#ifndef PYCOLL_ALGORITHMS_H
#define PYCOLL_ALGORITHMS_H

#include "pycoll/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* In-place all-reduce of buf[0..count). PYCOLL_AVG sums, then divides once by p2p->size.
 * accuracy COMPENSATED: float types carry (sum, comp) pairs through the reduction phase (kernels.h);
 * other dtypes and ops behave as FAST. */
typedef pycoll_status_t (*pycoll_all_reduce_fn)(pycoll_p2p_t *p2p, void *buf, int64_t count,
                                                pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);

PYCOLL_API pycoll_status_t pycoll_ring_all_reduce(pycoll_p2p_t *p2p, void *buf, int64_t count,
                                                  pycoll_dtype_t dtype, pycoll_op_t op,
                                                  pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_halving_doubling_all_reduce(pycoll_p2p_t *p2p, void *buf, int64_t count,
                                                              pycoll_dtype_t dtype, pycoll_op_t op,
                                                              pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_mesh_all_reduce(pycoll_p2p_t *p2p, void *buf, int64_t count,
                                                  pycoll_dtype_t dtype, pycoll_op_t op,
                                                  pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_recursive_doubling_all_reduce(pycoll_p2p_t *p2p, void *buf, int64_t count,
                                                                pycoll_dtype_t dtype, pycoll_op_t op,
                                                                pycoll_accuracy_t accuracy);

/* The all-reduce for an algorithm id (never AUTO), or NULL. */
PYCOLL_API pycoll_all_reduce_fn pycoll_all_reduce_algorithm(pycoll_algorithm_t algorithm);

/* sendbuf holds size * count elements; rank r receives the reduction of block r into recvbuf[0..count). */
PYCOLL_API pycoll_status_t pycoll_reduce_scatter_algo(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf,
                                                      int64_t count, pycoll_dtype_t dtype, pycoll_op_t op,
                                                      pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy);
/* recvbuf holds size * count elements; block r comes from rank r's sendbuf[0..count). */
PYCOLL_API pycoll_status_t pycoll_all_gather_algo(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf,
                                                  int64_t count, pycoll_dtype_t dtype, pycoll_algorithm_t algorithm);
PYCOLL_API pycoll_status_t pycoll_broadcast_algo(pycoll_p2p_t *p2p, void *buf, int64_t count,
                                                 pycoll_dtype_t dtype, int32_t root);
/* Result in recvbuf on root only (recvbuf may be NULL elsewhere); sendbuf is not modified. */
PYCOLL_API pycoll_status_t pycoll_reduce_algo(pycoll_p2p_t *p2p, const void *sendbuf, void *recvbuf, int64_t count,
                                              pycoll_dtype_t dtype, pycoll_op_t op, int32_t root,
                                              pycoll_accuracy_t accuracy);
PYCOLL_API pycoll_status_t pycoll_barrier_algo(pycoll_p2p_t *p2p);

/* Cost model for automatic selection, NCCL-style: each algorithm's time = latency + bytes / bandwidth, from
 * the textbook counts of its messages (alpha each), bytes sent (beta) and bytes reduced (gamma), each part
 * scaled by a per-algorithm factor that the defaults or `pycoll tune` set from measured times. */
typedef struct pycoll_cost_model {
    double alpha_s;          /* latency per message, seconds */
    double beta_s_per_byte;  /* transfer time per byte */
    double gamma_s_per_byte; /* reduction time per byte */
    /* Indexed by pycoll_algorithm_t (the AUTO entry is unused); 0 means 1, the textbook formula, so a model
     * that sets only the three constants keeps its meaning. */
    double latency_scale[PYCOLL_NUM_ALGOS];   /* multiplies the alpha terms */
    double bandwidth_scale[PYCOLL_NUM_ALGOS]; /* multiplies the beta and gamma terms */
} pycoll_cost_model_t;

PYCOLL_API void pycoll_default_cost_model(pycoll_cost_model_t *model);
/* The textbook parts of an algorithm's time, before its scale factors: alpha terms in *latency_s, beta and
 * gamma terms in *bandwidth_s (both 0 for size <= 1, INFINITY for an unknown algorithm). */
PYCOLL_API void pycoll_all_reduce_cost_terms(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm,
                                             int32_t size, int64_t nbytes, double *latency_s, double *bandwidth_s);
PYCOLL_API double pycoll_predict_all_reduce_s(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm,
                                              int32_t size, int64_t nbytes);
PYCOLL_API pycoll_algorithm_t pycoll_choose_all_reduce(const pycoll_cost_model_t *model, int32_t size,
                                                       int64_t nbytes);

#ifdef __cplusplus
}
#endif
#endif
