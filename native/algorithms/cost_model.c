/* Alpha-beta-gamma cost model for choosing an all-reduce (Thakur, Rabenseifner and Gropp's formulas): with
 * N ranks and n bytes, alpha per message on the critical path, beta per byte sent by one rank, gamma per byte
 * reduced by one rank. One departure from the textbook: the ring is pipelined (ring.c), so its reductions
 * overlap the transfers and only the last segment's reduction is exposed; that is why the ring, with the
 * most messages, still wins for large buffers. The textbook counts miss what an implementation adds (the
 * ring's per-step synchronisation, mesh's N-1 streams sharing a link), so each algorithm's latency and
 * bandwidth parts carry a factor fitted to measured times. */
#include "algorithms/table.h"
#include "pycoll/comm.h"

#include <math.h>

void pycoll_default_cost_model(pycoll_cost_model_t *model)
{
    /* Loopback TCP on a small host (bench/results/allreduce_loopback.md): per message, per byte sent, per byte
     * reduced. */
    model->alpha_s = 15e-6;
    model->beta_s_per_byte = 1.0 / 3e9;
    model->gamma_s_per_byte = 1.0 / 10e9;
    /* Fitted to bench/results/allreduce_loopback.md (2 cores, loopback TCP, float32 sum, 4 B..64 MiB, 2 and
     * 4 ranks): the fastest was recursive doubling (or halving-doubling) up to 16 KiB, halving-doubling from
     * 64 KiB to 1 MiB at 4 ranks and to 4 MiB at 2 ranks, the ring at 64 MiB at 2 ranks and from 4 MiB at 4
     * ranks, mesh never. These factors reproduce each of those choices but one: at 2 ranks the ring takes
     * over from about 1.5 MiB, not above 4 MiB. A model linear in the bytes, with factors shared by every
     * world size, cannot have both (at 2 ranks the ring measured slower per byte at 4 MiB than at 64 MiB). */
    static const struct {
        double latency, bandwidth;
    } scale[PYCOLL_COST_MODEL_ALGOS] = {
        [PYCOLL_ALGO_RING] = {2.5, 1.8},
        [PYCOLL_ALGO_HALVING_DOUBLING] = {1.25, 1.8},
        [PYCOLL_ALGO_MESH] = {1.0, 10.0},
        [PYCOLL_ALGO_RECURSIVE_DOUBLING] = {0.75, 3.5},
        /* Only a transport with native shared-memory collectives offers it (never TCP). With these constants
         * it wins at every size, as measured (bench/results/shm.md); pycoll's shm backend loads its own fitted
         * model (pycoll/plugins/shm.py). */
        [PYCOLL_ALGO_SHM_SLOTS] = {0.05, 0.5},
    };
    for (int a = 0; a < PYCOLL_COST_MODEL_ALGOS; a++) {
        model->latency_scale[a] = scale[a].latency;
        model->bandwidth_scale[a] = scale[a].bandwidth;
    }
    /* Between hosts: a 10 Gbit/s Ethernet, each message through both kernels' network stacks. Not
     * measured by `pycoll tune` (it runs on one host); what matters for the choice is that the network is
     * slower than the host, which holds for any network of the kind. */
    model->inter_alpha_s = 30e-6;
    model->inter_beta_s_per_byte = 1.0 / 1.25e9;
}

static int32_t pow2_floor(int32_t n)
{
    int32_t p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

/* Non-powers of two fold in and out: one extra exchange of the whole buffer in, one out, one extra reduction.
 * Sets the power of two below size, its log2, and the fold's terms. */
static void fold_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *p, double *steps,
                       double *fold_latency, double *fold_bandwidth)
{
    const double n = (double)nbytes;
    *p = pow2_floor(size);
    *steps = log2(*p);
    *fold_latency = *p == size ? 0.0 : 2.0 * model->alpha_s;
    *fold_bandwidth = *p == size ? 0.0 : 2.0 * n * model->beta_s_per_byte + n * model->gamma_s_per_byte;
}

void ring_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                     double *bandwidth_s)
{
    const double N = size, n = (double)nbytes;
    *latency_s = 2.0 * (N - 1) * model->alpha_s;
    /* At the default segment size: a communicator with another one is predicted as with the default (the
     * exposed last segment matters only where the ring wins by far anyway). */
    *bandwidth_s = 2.0 * (N - 1) / N * n * model->beta_s_per_byte +
                   fmin(n / N, (double)PYCOLL_DEFAULT_SEGMENT_BYTES) * model->gamma_s_per_byte;
}

void halving_doubling_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                                 double *bandwidth_s)
{
    double p, steps, fold_latency, fold_bandwidth;
    fold_terms(model, size, nbytes, &p, &steps, &fold_latency, &fold_bandwidth);
    const double n = (double)nbytes;
    *latency_s = 2.0 * steps * model->alpha_s + fold_latency;
    *bandwidth_s = 2.0 * (p - 1) / p * n * model->beta_s_per_byte + (p - 1) / p * n * model->gamma_s_per_byte +
                   fold_bandwidth;
}

void mesh_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                     double *bandwidth_s)
{
    const double N = size, n = (double)nbytes, a = model->alpha_s;
    /* Two rounds, but N-1 messages leave each rank per round: their start-up costs add up on the sender
     * (counted here as a quarter of alpha each) and the N-1 streams share one link. */
    *latency_s = 2.0 * a + 2.0 * (N - 2) * 0.25 * a;
    *bandwidth_s = 2.0 * (N - 1) / N * n * model->beta_s_per_byte + (N - 1) / N * n * model->gamma_s_per_byte;
}

void recursive_doubling_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes,
                                   double *latency_s, double *bandwidth_s)
{
    double p, steps, fold_latency, fold_bandwidth;
    fold_terms(model, size, nbytes, &p, &steps, &fold_latency, &fold_bandwidth);
    const double n = (double)nbytes;
    *latency_s = steps * model->alpha_s + fold_latency;
    *bandwidth_s = steps * (n * model->beta_s_per_byte + n * model->gamma_s_per_byte) + fold_bandwidth;
}

/* On one host hierarchical has no textbook terms of its own (it is the ring there): only the host-aware
 * prediction below weighs it. */
void hierarchical_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                             double *bandwidth_s)
{
    (void)model, (void)size, (void)nbytes;
    *latency_s = *bandwidth_s = INFINITY;
}

void shm_cost_terms(const pycoll_cost_model_t *model, int32_t size, int64_t nbytes, double *latency_s,
                    double *bandwidth_s)
{
    const double N = size, n = (double)nbytes;
    /* The shared-memory transport's own (shm_collectives.c): two flag synchronisations (no messages), each
     * rank copies the others' ranges in and out once and reduces its own range over all N inputs. */
    *latency_s = 2.0 * model->alpha_s;
    *bandwidth_s = 2.0 * (N - 1) / N * n * model->beta_s_per_byte + n * model->gamma_s_per_byte;
}

void pycoll_all_reduce_cost_terms(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm, int32_t size,
                                  int64_t nbytes, double *latency_s, double *bandwidth_s)
{
    *latency_s = *bandwidth_s = 0.0;
    if (size <= 1)
        return;
    const coll_algorithm_t *a = algorithm_entry(algorithm);
    if (a && a->cost_terms)
        a->cost_terms(model, size, nbytes, latency_s, bandwidth_s);
    else
        *latency_s = *bandwidth_s = INFINITY;
}

/* A factor of 0 is the textbook formula's 1 (see algorithms.h); ids past the model's slots have none. */
static double scale_or_one(const double *factors, pycoll_algorithm_t algorithm)
{
    const double factor = (unsigned)algorithm < PYCOLL_COST_MODEL_ALGOS ? factors[algorithm] : 0.0;
    return factor > 0.0 ? factor : 1.0;
}

double pycoll_predict_all_reduce_s(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm, int32_t size,
                                   int64_t nbytes)
{
    double latency_s, bandwidth_s;
    pycoll_all_reduce_cost_terms(model, algorithm, size, nbytes, &latency_s, &bandwidth_s);
    return scale_or_one(model->latency_scale, algorithm) * latency_s +
           scale_or_one(model->bandwidth_scale, algorithm) * bandwidth_s;
}

double pycoll_predict_all_reduce_hosts_s(const pycoll_cost_model_t *model, pycoll_algorithm_t algorithm,
                                         int32_t size, int32_t hosts, int32_t max_local, int64_t nbytes)
{
    if (hosts <= 1)
        return pycoll_predict_all_reduce_s(model, algorithm, size, nbytes);
    if (!algorithm_entry(algorithm))
        return INFINITY;
    /* The network's constants (never faster than the host's). */
    pycoll_cost_model_t net = *model;
    net.alpha_s = fmax(model->alpha_s, model->inter_alpha_s);
    net.beta_s_per_byte = fmax(model->beta_s_per_byte, model->inter_beta_s_per_byte);
    const double ring_latency = scale_or_one(model->latency_scale, PYCOLL_ALGO_RING);
    const double ring_bandwidth = scale_or_one(model->bandwidth_scale, PYCOLL_ALGO_RING);
    double latency_s, bandwidth_s;
    if (algorithm != PYCOLL_ALGO_HIERARCHICAL) {
        /* A flat schedule waits on the network at every step. The ring crosses it on one edge per host; the
         * others exchange across hosts from every local rank at once, which share their host's link. */
        pycoll_all_reduce_cost_terms(&net, algorithm, size, nbytes, &latency_s, &bandwidth_s);
        if (algorithm != PYCOLL_ALGO_RING)
            bandwidth_s *= max_local;
        return scale_or_one(model->latency_scale, algorithm) * latency_s +
               scale_or_one(model->bandwidth_scale, algorithm) * bandwidth_s;
    }
    if (max_local <= 1)
        return INFINITY; /* one rank per host: the ring over the hosts */
    /* A ring reduce-scatter and all-gather within the largest host, then a ring over the hosts in which its
     * max_local ranks each move n / max_local bytes at once over their host's link: n bytes' worth of ring. */
    double host_latency, host_bandwidth;
    pycoll_all_reduce_cost_terms(model, PYCOLL_ALGO_RING, max_local, nbytes, &host_latency, &host_bandwidth);
    pycoll_all_reduce_cost_terms(&net, PYCOLL_ALGO_RING, hosts, nbytes, &latency_s, &bandwidth_s);
    return ring_latency * (host_latency + latency_s) + ring_bandwidth * (host_bandwidth + bandwidth_s);
}
