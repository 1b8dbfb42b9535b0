/* Algorithm ids to all-reduce functions. */
#include "pycoll/algorithms.h"

pycoll_all_reduce_fn pycoll_all_reduce_algorithm(pycoll_algorithm_t algorithm)
{
    switch (algorithm) {
    case PYCOLL_ALGO_RING:
        return pycoll_ring_all_reduce;
    case PYCOLL_ALGO_HALVING_DOUBLING:
        return pycoll_halving_doubling_all_reduce;
    case PYCOLL_ALGO_MESH:
        return pycoll_mesh_all_reduce;
    case PYCOLL_ALGO_RECURSIVE_DOUBLING:
        return pycoll_recursive_doubling_all_reduce;
    default:
        return NULL;
    }
}
