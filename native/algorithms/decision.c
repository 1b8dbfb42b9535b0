/* Choosing apart from doing (as Open MPI's coll/tuned keeps its decision files apart from coll/base): the rules
 * that pick a collective's algorithm from the algorithm table (table.c) -- the cost model or the size rule for
 * "auto", the transport's own collectives where it has them, the fallback for an algorithm a collective lacks.
 * The communicator asks here; the algorithm files only run what they are given. */
#include "algorithms/table.h"

#include <stddef.h>

/* The algorithm a transport's native table (p2p.h) runs `coll` as, or AUTO where it has no entry for it. */
static pycoll_algorithm_t native_algorithm(const pycoll_native_collectives_t *native, pycoll_coll_t coll)
{
    if (!native)
        return PYCOLL_ALGO_AUTO;
    const int has = (coll == PYCOLL_COLL_ALL_REDUCE && native->all_reduce) ||
                    (coll == PYCOLL_COLL_BROADCAST && native->broadcast) ||
                    (coll == PYCOLL_COLL_BARRIER && native->barrier) ||
                    (coll == PYCOLL_COLL_ALL_TO_ALL && native->version >= 2 && native->all_to_all) ||
                    (coll == PYCOLL_COLL_REDUCE_SCATTER && native->version >= 3 && native->reduce_scatter) ||
                    (coll == PYCOLL_COLL_ALL_GATHER && native->version >= 3 && native->all_gather) ||
                    (coll == PYCOLL_COLL_REDUCE && native->version >= 4 && native->reduce);
    return has ? (pycoll_algorithm_t)native->algorithm : PYCOLL_ALGO_AUTO;
}

/* A native algorithm runs only where a transport supplies it: never a candidate otherwise. */
static int is_native_only(const coll_algorithm_t *a) { return (a->traits & PYCOLL_ALGO_TRAIT_NATIVE) != 0; }

/* The first entry serving coll: its fallback. */
static const coll_algorithm_t *fallback(pycoll_coll_t coll)
{
    for (int32_t i = 0; i < algorithm_table_len; i++)
        if (algorithm_serves(&algorithm_table[i], coll))
            return &algorithm_table[i];
    return NULL;
}

pycoll_algorithm_t pycoll_choose_all_reduce_hosts(const pycoll_cost_model_t *model, int32_t size, int32_t hosts,
                                                  int32_t max_local, int64_t nbytes, pycoll_algorithm_t native)
{
    pycoll_algorithm_t best = fallback(PYCOLL_COLL_ALL_REDUCE)->id;
    double best_s = pycoll_predict_all_reduce_hosts_s(model, best, size, hosts, max_local, nbytes);
    for (int32_t i = 0; i < algorithm_table_len; i++) {
        const coll_algorithm_t *a = &algorithm_table[i];
        if (a->id == best || !a->all_reduce || !a->cost_terms || (is_native_only(a) && a->id != native))
            continue;
        double s = pycoll_predict_all_reduce_hosts_s(model, a->id, size, hosts, max_local, nbytes);
        if (s < best_s) {
            best = a->id;
            best_s = s;
        }
    }
    return best;
}

pycoll_algorithm_t pycoll_choose_all_reduce(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes)
{
    return pycoll_choose_all_reduce_hosts(model, size, 1, size, nbytes, PYCOLL_ALGO_AUTO);
}

/* The size rule of the collectives the cost model does not weigh: the first non-native entry whose
 * auto_max_bytes admits the bytes at the root (a gather's or scatter's whole buffer, the others' count). One
 * rank moves nothing: its first entry. */
static pycoll_algorithm_t choose_by_size(pycoll_coll_t coll, int32_t size, int64_t nbytes)
{
    const int whole_buffer = coll == PYCOLL_COLL_GATHER || coll == PYCOLL_COLL_SCATTER;
    const int64_t root_bytes = !whole_buffer ? nbytes : nbytes > INT64_MAX / size ? INT64_MAX : nbytes * size;
    for (int32_t i = 0; i < algorithm_table_len; i++) {
        const coll_algorithm_t *a = &algorithm_table[i];
        if (algorithm_serves(a, coll) && !is_native_only(a) &&
            (size == 1 || a->auto_max_bytes == 0 || root_bytes <= a->auto_max_bytes))
            return a->id;
    }
    return fallback(coll)->id;
}

pycoll_algorithm_t pycoll_decide_algorithm_hosts(const pycoll_cost_model_t *model, pycoll_coll_t coll,
                                                 pycoll_algorithm_t requested, int32_t size, int32_t hosts,
                                                 int32_t max_local, int64_t nbytes,
                                                 const pycoll_native_collectives_t *native)
{
    const coll_algorithm_t *first = (unsigned)coll < PYCOLL_NUM_COLLS ? fallback(coll) : NULL;
    if (!first)
        return PYCOLL_ALGO_RING; /* an id without a table (never read past it): the fixed schedules' name */
    const pycoll_algorithm_t own = native_algorithm(native, coll);
    pycoll_algorithm_t algorithm = requested;
    if (algorithm == PYCOLL_ALGO_AUTO) {
        /* reduce_scatter's schedules are the all-reduce's first halves: it follows the all-reduce's choice. */
        if (coll == PYCOLL_COLL_ALL_REDUCE || coll == PYCOLL_COLL_REDUCE_SCATTER)
            algorithm = pycoll_choose_all_reduce_hosts(model, size, hosts, max_local, nbytes, own);
        else if (own != PYCOLL_ALGO_AUTO)
            algorithm = own; /* the fixed schedules' one alternative: the transport's own */
        else
            algorithm = choose_by_size(coll, size, nbytes);
    }
    const coll_algorithm_t *a = algorithm_entry(algorithm);
    if (!a || !algorithm_serves(a, coll) || (is_native_only(a) && algorithm != own))
        return first->id; /* a collective without it (or a transport without it): its fallback */
    return algorithm;
}

pycoll_algorithm_t pycoll_decide_algorithm(const pycoll_cost_model_t *model, pycoll_coll_t coll,
                                           pycoll_algorithm_t requested, int32_t size, int64_t nbytes)
{
    return pycoll_decide_algorithm_hosts(model, coll, requested, size, 1, size, nbytes, NULL);
}
