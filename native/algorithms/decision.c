/* Choosing apart from doing (as Open MPI's coll/tuned keeps its decision files apart from coll/base): which
 * algorithms each collective has, one {id, name} table per collective as UCC lists them, and the rules that
 * pick one -- the cost model for "auto", the fallback for an algorithm a collective lacks. The communicator
 * asks here; the algorithm files only run what they are given. */
#include "pycoll/algorithms.h"

#include <stddef.h>

#define ALGO(id, name) {id, name}

/* The fallback first: bandwidth-optimal and defined for every world size. */
static const pycoll_algorithm_info_t all_reduce_algos[] = {
    ALGO(PYCOLL_ALGO_RING, "ring"),
    ALGO(PYCOLL_ALGO_HALVING_DOUBLING, "halving_doubling"),
    ALGO(PYCOLL_ALGO_MESH, "mesh"),
    ALGO(PYCOLL_ALGO_RECURSIVE_DOUBLING, "recursive_doubling"),
    ALGO(PYCOLL_ALGO_HIERARCHICAL, "hierarchical"),
    ALGO(PYCOLL_ALGO_SHM, "shm"),
};
/* The first halves of the all-reduce schedules that have one (recursive doubling exchanges whole buffers). */
static const pycoll_algorithm_info_t reduce_scatter_algos[] = {
    ALGO(PYCOLL_ALGO_RING, "ring"),
    ALGO(PYCOLL_ALGO_HALVING_DOUBLING, "halving_doubling"),
    ALGO(PYCOLL_ALGO_MESH, "mesh"),
};
/* The ring only: the gather, broadcast, reduce and barrier schedules are fixed (reduce.c, broadcast.c,
 * barrier.c pick their shape by size internally), and descriptors name them "ring". */
static const pycoll_algorithm_info_t ring_only[] = {
    ALGO(PYCOLL_ALGO_RING, "ring"),
};
/* The fixed schedules, or the shared-memory transport's own where it runs them. */
static const pycoll_algorithm_info_t ring_or_shm[] = {
    ALGO(PYCOLL_ALGO_RING, "ring"),
    ALGO(PYCOLL_ALGO_SHM, "shm"),
};

#define TABLE(t) {t, (int32_t)(sizeof t / sizeof t[0])}

static const struct {
    const pycoll_algorithm_info_t *algos;
    int32_t count;
} tables[PYCOLL_NUM_COLLS] = {
    [PYCOLL_COLL_ALL_REDUCE] = TABLE(all_reduce_algos),
    [PYCOLL_COLL_REDUCE_SCATTER] = TABLE(reduce_scatter_algos),
    [PYCOLL_COLL_ALL_GATHER] = TABLE(ring_only),
    [PYCOLL_COLL_BROADCAST] = TABLE(ring_or_shm),
    [PYCOLL_COLL_REDUCE] = TABLE(ring_only),
    [PYCOLL_COLL_BARRIER] = TABLE(ring_or_shm),
    /* One schedule each (pairwise exchange, flat gather/scatter, ring over uneven blocks), named "ring"; the
     * pairwise exchange or the shared-memory transport's own all-to-all. */
    [PYCOLL_COLL_ALL_TO_ALL] = TABLE(ring_or_shm),
    [PYCOLL_COLL_GATHER] = TABLE(ring_only),
    [PYCOLL_COLL_SCATTER] = TABLE(ring_only),
    [PYCOLL_COLL_ALL_GATHER_V] = TABLE(ring_only),
    [PYCOLL_COLL_REDUCE_SCATTER_V] = TABLE(ring_only),
};

const pycoll_algorithm_info_t *pycoll_coll_algorithms(pycoll_coll_t coll, int32_t *count)
{
    const int known = (unsigned)coll < PYCOLL_NUM_COLLS;
    if (count)
        *count = known ? tables[coll].count : 0;
    return known ? tables[coll].algos : NULL;
}

static int has_algorithm(pycoll_coll_t coll, pycoll_algorithm_t algorithm)
{
    for (int32_t i = 0; i < tables[coll].count; i++)
        if (tables[coll].algos[i].id == (int32_t)algorithm)
            return 1;
    return 0;
}

/* The algorithm a transport's native table (p2p.h) runs `coll` as, or AUTO where it has no entry for it. */
static pycoll_algorithm_t native_algorithm(const pycoll_native_collectives_t *native, pycoll_coll_t coll)
{
    if (!native)
        return PYCOLL_ALGO_AUTO;
    const int has = (coll == PYCOLL_COLL_ALL_REDUCE && native->all_reduce) ||
                    (coll == PYCOLL_COLL_BROADCAST && native->broadcast) ||
                    (coll == PYCOLL_COLL_BARRIER && native->barrier) ||
                    (coll == PYCOLL_COLL_ALL_TO_ALL && native->version >= 2 && native->all_to_all);
    return has ? (pycoll_algorithm_t)native->algorithm : PYCOLL_ALGO_AUTO;
}

/* A native algorithm runs only where a transport supplies it: never a candidate otherwise. */
static int is_native_only(pycoll_algorithm_t algorithm) { return algorithm == PYCOLL_ALGO_SHM; }

pycoll_algorithm_t pycoll_choose_all_reduce_hosts(const pycoll_cost_model_t *model, int32_t size, int32_t hosts,
                                                  int32_t max_local, int64_t nbytes, pycoll_algorithm_t native)
{
    const pycoll_algorithm_info_t *algos = all_reduce_algos;
    pycoll_algorithm_t best = (pycoll_algorithm_t)algos[0].id;
    double best_s = pycoll_predict_all_reduce_hosts_s(model, best, size, hosts, max_local, nbytes);
    for (int32_t i = 1; i < tables[PYCOLL_COLL_ALL_REDUCE].count; i++) {
        const pycoll_algorithm_t id = (pycoll_algorithm_t)algos[i].id;
        if (is_native_only(id) && id != native)
            continue;
        double s = pycoll_predict_all_reduce_hosts_s(model, id, size, hosts, max_local, nbytes);
        if (s < best_s) {
            best = id;
            best_s = s;
        }
    }
    return best;
}

pycoll_algorithm_t pycoll_choose_all_reduce(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes)
{
    return pycoll_choose_all_reduce_hosts(model, size, 1, size, nbytes, PYCOLL_ALGO_AUTO);
}

pycoll_algorithm_t pycoll_decide_algorithm_hosts(const pycoll_cost_model_t *model, pycoll_coll_t coll,
                                                 pycoll_algorithm_t requested, int32_t size, int32_t hosts,
                                                 int32_t max_local, int64_t nbytes,
                                                 const pycoll_native_collectives_t *native)
{
    if ((unsigned)coll >= PYCOLL_NUM_COLLS || tables[coll].count == 0)
        return PYCOLL_ALGO_RING; /* an id without a table (never read past it): the fixed schedules' name */
    const pycoll_algorithm_t own = native_algorithm(native, coll);
    pycoll_algorithm_t algorithm = requested;
    if (algorithm == PYCOLL_ALGO_AUTO) {
        if (coll == PYCOLL_COLL_ALL_REDUCE || coll == PYCOLL_COLL_REDUCE_SCATTER)
            algorithm = pycoll_choose_all_reduce_hosts(model, size, hosts, max_local, nbytes, own);
        else if (own != PYCOLL_ALGO_AUTO)
            algorithm = own; /* the fixed schedules' one alternative: the transport's own */
    }
    if (is_native_only(algorithm) && algorithm != own)
        algorithm = PYCOLL_ALGO_AUTO; /* this collective has no native entry here: its fallback */
    return has_algorithm(coll, algorithm) ? algorithm : (pycoll_algorithm_t)tables[coll].algos[0].id;
}

pycoll_algorithm_t pycoll_decide_algorithm(const pycoll_cost_model_t *model, pycoll_coll_t coll,
                                           pycoll_algorithm_t requested, int32_t size, int64_t nbytes)
{
    return pycoll_decide_algorithm_hosts(model, coll, requested, size, 1, size, nbytes, NULL);
}
