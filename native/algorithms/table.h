/* The algorithm table (table.c): one entry per algorithm id, as Open MPI's coll components fill a struct of
 * collective functions -- its name, the schedule it runs for each collective it serves, and how the decision
 * weighs it. Names, the decision (decision.c), the dispatch (native/comm) and the cost model (cost_model.c) all
 * read it; pycoll_coll_algorithms and pycoll_algorithm_name hand it to the bindings. */
#ifndef PYCOLL_ALGORITHMS_TABLE_H
#define PYCOLL_ALGORITHMS_TABLE_H

#include "algorithms/collectives.h"

#include <stdbool.h>

/* An all-reduce from sendbuf into recvbuf (sendbuf == recvbuf is in place). */
typedef pycoll_status_t (*all_reduce_run_fn)(coll_ctx_t *ctx, const void *sendbuf, void *recvbuf, int64_t count,
                                             pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy);
/* The textbook parts of the all-reduce cost model for one algorithm (cost_model.c), size >= 2. */
typedef void (*cost_terms_fn)(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                              double *bandwidth_s);

typedef struct coll_algorithm {
    pycoll_algorithm_t id;
    const char *name;
    uint32_t traits; /* PYCOLL_ALGO_TRAIT_* (algorithms.h) */
    /* How auto weighs it: cost_terms where the all-reduce cost model predicts it (NULL: never by the model);
     * else auto takes, among the non-native entries of a collective in table order, the first whose
     * auto_max_bytes (0: no limit) admits the bytes at the root -- UCC's "0-64k:@tree#64k-inf:@flat". */
    cost_terms_fn cost_terms;
    int64_t auto_max_bytes;
    /* The schedule it runs per collective; NULL: it does not serve that collective. */
    all_reduce_run_fn all_reduce;
    reduce_scatter_fn reduce_scatter;
    exchange_fn all_gather;
    broadcast_fn broadcast;
    reduce_fn reduce;
    barrier_fn barrier;
    exchange_fn all_to_all;
    rooted_fn gather;
    rooted_fn scatter;
    all_gather_v_fn all_gather_v;
    reduce_scatter_v_fn reduce_scatter_v;
} coll_algorithm_t;

/* The table in decision order: each collective's fallback is the first entry that serves it. */
extern const coll_algorithm_t algorithm_table[];
extern const int32_t algorithm_table_len;

/* The entry of an id, or NULL (AUTO, unknown ids). */
const coll_algorithm_t *algorithm_entry(pycoll_algorithm_t id);
/* Whether `algorithm` (NULL: none) has a schedule for `coll`. */
bool algorithm_serves(const coll_algorithm_t *algorithm, pycoll_coll_t coll);

/* The cost model's terms per algorithm (cost_model.c). */
void ring_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                     double *bandwidth_s);
void halving_doubling_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                                 double *bandwidth_s);
void mesh_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                     double *bandwidth_s);
void recursive_doubling_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes,
                                   double *latency_s, double *bandwidth_s);
void hierarchical_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                             double *bandwidth_s);
void shm_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                    double *bandwidth_s);

#endif
