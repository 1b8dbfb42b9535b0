/* Which algorithms each collective has (the algorithm table, native/algorithms/table.c), how one is chosen
 * (native/algorithms/decision.c), and the cost model automatic selection uses. The algorithms themselves (native/algorithms) are written once against
 * pycoll_p2p_t (p2p.h) so they run over every transport, and are reached only through the communicator
 * (comm.h). Every rank ends with a bitwise identical result: each element is combined in one order, decided
 * by the algorithm, and the final values are copied, never recomputed per rank. */
#ifndef PYCOLL_ALGORITHMS_H
#define PYCOLL_ALGORITHMS_H

#include "pycoll/p2p.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Cost model for automatic selection, NCCL-style: each algorithm's time = latency + bytes / bandwidth, from
 * the textbook counts of its messages (alpha each), bytes sent (beta) and bytes reduced (gamma), each part
 * scaled by a per-algorithm factor that the defaults or `pycoll tune` set from measured times. */
/* The algorithm ids with a pair of scale factors in pycoll_cost_model_t: those up to PYCOLL_ALGO_SHM_SLOTS, the
 * ones the all-reduce cost model weighs. Fixed (the struct's layout is part of the ABI); later ids have none. */
#define PYCOLL_COST_MODEL_ALGOS 7

typedef struct pycoll_cost_model {
    double alpha_s;          /* latency per message, seconds */
    double beta_s_per_byte;  /* transfer time per byte */
    double gamma_s_per_byte; /* reduction time per byte */
    /* Indexed by pycoll_algorithm_t (the AUTO entry is unused); 0 means 1, the textbook formula, so a model
     * that sets only the three constants keeps its meaning. */
    double latency_scale[PYCOLL_COST_MODEL_ALGOS];   /* multiplies the alpha terms */
    double bandwidth_scale[PYCOLL_COST_MODEL_ALGOS]; /* multiplies the beta and gamma terms */
    /* The link between hosts, for jobs that span several: latency per message and time per byte (each host's
     * ranks share their host's link). 0: as alpha_s / beta_s_per_byte (a network as fast as the host). */
    double inter_alpha_s;
    double inter_beta_s_per_byte;
} pycoll_cost_model_t;

PYCOLL_API void pycoll_default_cost_model(pycoll_cost_model_t *model);
/* The textbook parts of an algorithm's time, before its scale factors: alpha terms in *latency_s, beta and
 * gamma terms in *bandwidth_s (both 0 for size <= 1, INFINITY for an unknown algorithm). */
PYCOLL_API void pycoll_all_reduce_cost_terms(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm,
                                             int32_t size, int64_t nbytes, double *latency_s, double *bandwidth_s);
PYCOLL_API double pycoll_predict_all_reduce_s(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm,
                                              int32_t size, int64_t nbytes);
/* The all-reduce with the least predicted time, among the all-reduce table's algorithms that run over any
 * transport (never a native one such as PYCOLL_ALGO_SHM_SLOTS). */
PYCOLL_API pycoll_algorithm_t pycoll_choose_all_reduce(const pycoll_cost_model_t *model, int32_t size,
                                                       int64_t nbytes);
/* The same over `hosts` hosts whose largest has max_local ranks (hosts <= 1: one host, as above), with
 * `native` (a transport's native algorithm, e.g. PYCOLL_ALGO_SHM_SLOTS; AUTO for none) among the candidates. Every
 * flat algorithm's messages then cross the inter-host link; hierarchical (native/algorithms/hierarchical.c)
 * crosses it once per byte per host and runs two ring phases within each host, taking the ring's scale factors
 * (its phases are rings). Hierarchical is INFINITY on one host or with one rank per host, where it is the ring. */
PYCOLL_API double pycoll_predict_all_reduce_hosts_s(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm,
                                                    int32_t size, int32_t hosts, int32_t max_local, int64_t nbytes);
PYCOLL_API pycoll_algorithm_t pycoll_choose_all_reduce_hosts(const pycoll_cost_model_t *model, int32_t size,
                                                             int32_t hosts, int32_t max_local, int64_t nbytes,
                                                             pycoll_algorithm_t native);

/* What an algorithm needs besides pycoll's point-to-point interface (pycoll_algorithm_traits). */
#define PYCOLL_ALGO_TRAIT_NATIVE 1u /* runs only as a transport's own collectives (p2p.h's native table) */
#define PYCOLL_ALGO_TRAIT_HOSTS 2u  /* spans hosts by the host map (pycoll_comm_set_hosts); the ring on one host */
PYCOLL_API uint32_t pycoll_algorithm_traits(pycoll_algorithm_t algorithm);

/* One algorithm of one collective, UCC-style: its id (pycoll_algorithm_t) and name. */
typedef struct pycoll_algorithm_info {
    int32_t id;
    const char *name;
} pycoll_algorithm_info_t;

/* The algorithms collective `coll` has, in static storage, its fallback first; *count is their number (0, and
 * NULL returned, for an unknown collective). AUTO is not listed: every collective accepts it. */
PYCOLL_API const pycoll_algorithm_info_t *pycoll_coll_algorithms(pycoll_coll_t coll, int32_t *count);

/* The algorithm a collective runs when `requested` is asked for: AUTO is the cost model's all-reduce choice
 * for all_reduce and reduce_scatter (whose schedules are the all-reduce's first half) and for the others a
 * size rule (e.g. reduce: binomial_tree up to 64 KiB, scatter_gather beyond); an algorithm the collective lacks
 * becomes its fallback (the communicator refuses an explicit request for one before it asks here) (e.g. reduce_scatter with recursive_doubling,
 * which exists only as an all-reduce, runs the ring). Every rank decides alike from the same arguments and
 * model, so the decision needs no communication. Never returns AUTO. */
PYCOLL_API pycoll_algorithm_t pycoll_decide_algorithm(const pycoll_cost_model_t *model, pycoll_coll_t coll,
                                                      pycoll_algorithm_t requested, int32_t size, int64_t nbytes);
/* What the communicator asks: the same for a job over `hosts` hosts whose largest has max_local ranks (its host
 * map, pycoll_comm_set_hosts), over a transport that runs the collectives of `native` itself (its ops->native;
 * NULL: none). The native algorithm is a candidate for the collectives it has an entry for -- auto's choice by
 * the cost model for all_reduce, always for broadcast and barrier -- and where it has none (or no table at
 * all) a request for it becomes the collective's fallback. The communicator refuses an explicit request for a
 * native algorithm over a transport without that table before it asks here. */
PYCOLL_API pycoll_algorithm_t pycoll_decide_algorithm_hosts(const pycoll_cost_model_t *model, pycoll_coll_t coll,
                                                            pycoll_algorithm_t requested, int32_t size,
                                                            int32_t hosts, int32_t max_local, int64_t nbytes,
                                                            const pycoll_native_collectives_t *native);

#ifdef __cplusplus
}
#endif
#endif
