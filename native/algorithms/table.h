/* The algorithm table (table.c): one entry per algorithm id, as Open MPI's coll components fill a struct of
 * collective functions -- its name, the schedule it runs for each collective it serves, and how the decision
 * weighs it. Names, the decision (decision.c), the dispatch (native/comm) and the cost model (cost_model.c) all
 * read it; pycoll_coll_algorithms and pycoll_algorithm_name hand it to the bindings. */
#ifndef PYCOLL_ALGORITHMS_TABLE_H
#define PYCOLL_ALGORITHMS_TABLE_H

#include "algorithms/collectives.h"

#include <stdbool.h>

#include "pycoll/call.h"

/* Each collective's schedule type, from its kind (PYCOLL_COLLECTIVES, ids.h): all_to_all_schedule is
 * blocks_schedule (collectives.h). A schedule only the table runs is declared beside its row with it
 * (table.c: `all_to_all_schedule pairwise_all_to_all;`), so its signature is never written out again. */
#define COLL_SCHEDULE_TYPE(ID, value, field, name, kind) typedef kind##_schedule field##_schedule;
PYCOLL_COLLECTIVES(COLL_SCHEDULE_TYPE)
#undef COLL_SCHEDULE_TYPE

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
    /* The schedule it runs per collective, one field per line of PYCOLL_COLLECTIVES (.all_to_all, ...);
     * NULL: it does not serve that collective. */
#define COLL_SCHEDULE_FIELD(ID, value, field, name, kind) field##_schedule *field;
    PYCOLL_COLLECTIVES(COLL_SCHEDULE_FIELD)
#undef COLL_SCHEDULE_FIELD
} coll_algorithm_t;

/* The table in decision order: each collective's fallback is the first entry that serves it. */
extern const coll_algorithm_t algorithm_table[];
extern const int32_t algorithm_table_len;

/* The entry of an id, or NULL (AUTO, unknown ids). */
const coll_algorithm_t *algorithm_entry(pycoll_algorithm_t id);
/* Whether `algorithm` (NULL: none) has a schedule for `coll`. */
bool algorithm_serves(const coll_algorithm_t *algorithm, pycoll_coll_t coll);

/* Runs a collective by `algorithm`'s schedule for it: takes from `call` the fields its kind names (ids.h), and
 * `count`, the count its schedule takes (comm/call.c derives it). One per collective, generated from
 * PYCOLL_COLLECTIVES (table.c), indexed by the collective's id; the caller has checked that `algorithm`
 * serves it (algorithm_serves) -- the one dispatch, from the communicator and the tests alike. */
typedef pycoll_status_t (*coll_runner_fn)(const coll_algorithm_t *algorithm, coll_ctx_t *ctx,
                                          const pycoll_call_t *call, int64_t count);
extern const coll_runner_fn collective_runners[PYCOLL_NUM_COLLS];

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
