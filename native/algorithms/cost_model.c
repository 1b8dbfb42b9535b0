/* Alpha-beta-gamma cost model for choosing an all-reduce (Thakur, Rabenseifner and Gropp's formulas): with
 * N ranks and n bytes, alpha per message on the critical path, beta per byte sent by one rank, gamma per byte
 * reduced by one rank. */
#include "pycoll/algorithms.h"

#include <math.h>

void pycoll_default_cost_model(pycoll_cost_model_t *model)
{
    /* Loopback TCP on a small host: ~15 us per message, ~3 GB/s per stream, ~10 GB/s reduction. */
    model->alpha_s = 15e-6;
    model->beta_s_per_byte = 1.0 / 3e9;
    model->gamma_s_per_byte = 1.0 / 10e9;
}

static int32_t pow2_floor(int32_t n)
{
    int32_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

double pycoll_predict_all_reduce_s(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm, int32_t size,
                                   int64_t nbytes)
{
    if (size <= 1)
        return 0.0;
    const double a = model->alpha_s, b = model->beta_s_per_byte, g = model->gamma_s_per_byte;
    const double N = size, n = (double)nbytes;
    const int32_t p = pow2_floor(size);
    const double steps = log2((double)p);
    /* Non-powers of two: one extra exchange of the whole buffer in, one out, one extra reduction. */
    const double fold = p == size ? 0.0 : 2.0 * (a + n * b) + n * g;
    switch (algorithm) {
    case PYCOLL_ALGO_RING:
        return 2.0 * (N - 1) * a + 2.0 * (N - 1) / N * n * b + (N - 1) / N * n * g;
    case PYCOLL_ALGO_HALVING_DOUBLING:
        return 2.0 * steps * a + 2.0 * (p - 1) / p * n * b + (p - 1) / p * n * g + fold;
    case PYCOLL_ALGO_MESH:
        /* Two rounds, but N-1 messages leave each rank per round: their start-up costs add up on the sender
         * (counted here as a quarter of alpha each) and the N-1 streams share one link. */
        return 2.0 * a + 2.0 * (N - 2) * 0.25 * a + 2.0 * (N - 1) / N * n * b + (N - 1) / N * n * g;
    case PYCOLL_ALGO_RECURSIVE_DOUBLING:
        return steps * (a + n * b + n * g) + fold;
    default:
        return INFINITY;
    }
}

pycoll_algorithm_t pycoll_choose_all_reduce(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes)
{
    pycoll_algorithm_t best = PYCOLL_ALGO_RING;
    double best_s = pycoll_predict_all_reduce_s(model, best, size, nbytes);
    for (int a = PYCOLL_ALGO_RING + 1; a < PYCOLL_NUM_ALGOS; a++) {
        double s = pycoll_predict_all_reduce_s(model, (pycoll_algorithm_t)a, size, nbytes);
        if (s < best_s) {
            best = (pycoll_algorithm_t)a;
            best_s = s;
        }
    }
    return best;
}
