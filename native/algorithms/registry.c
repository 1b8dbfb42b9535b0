/* Algorithm ids of the all-reduce table (decision.c) to the functions that run them. */
#include "algorithms/collectives.h"

all_reduce_fn all_reduce_algorithm(pycoll_algorithm_t algorithm)
{
    switch (algorithm) {
    case PYCOLL_ALGO_RING:
        return ring_all_reduce;
    case PYCOLL_ALGO_HALVING_DOUBLING:
        return halving_doubling_all_reduce;
    case PYCOLL_ALGO_MESH:
        return mesh_all_reduce;
    case PYCOLL_ALGO_RECURSIVE_DOUBLING:
        return recursive_doubling_all_reduce;
    case PYCOLL_ALGO_HIERARCHICAL:
        return hierarchical_all_reduce;
    default:
        return NULL;
    }
}
