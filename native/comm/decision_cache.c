/* The communicator's memory of its recent decisions. Deciding (decision.c) weighs every algorithm's cost model,
 * which costs a small collective repeated in a loop -- a training step's, a benchmark's -- a noticeable part of
 * its time, every call, for the same answer. What a decision depends on is fixed for the communicator (its size,
 * its transport's own collectives) except the collective, the algorithm asked for, the bytes, the cost model and
 * the host map: the first three key the memory, and a new cost model or host map clears it. */
#include "comm/comm_internal.h"

#include <string.h>

static uint32_t slot_of(pycoll_coll_t coll, pycoll_algorithm_t requested, int64_t nbytes)
{
    uint64_t h = (uint64_t)nbytes * 0x9E3779B97F4A7C15ull ^ ((uint64_t)coll << 8 | (uint64_t)requested);
    return (uint32_t)(h >> 59) % COMM_DECISIONS;
}

pycoll_algorithm_t comm_decide(pycoll_comm_t *comm, pycoll_coll_t coll, pycoll_algorithm_t requested,
                               int64_t nbytes)
{
    comm_decision_t *d = &comm->decisions[slot_of(coll, requested, nbytes)];
    if (d->known && d->nbytes == nbytes && d->coll == (uint8_t)coll && d->requested == (uint8_t)requested)
        return (pycoll_algorithm_t)d->algorithm;
    const pycoll_algorithm_t algorithm =
        pycoll_decide_algorithm_hosts(&comm->model, coll, requested, comm->p2p->size, comm->hosts, comm->max_local,
                                      nbytes, comm->p2p->ops->native);
    *d = (comm_decision_t){.nbytes = nbytes, .coll = (uint8_t)coll, .requested = (uint8_t)requested,
                           .algorithm = (uint8_t)algorithm, .known = 1};
    return algorithm;
}

void comm_forget_decisions(pycoll_comm_t *comm) { memset(comm->decisions, 0, sizeof comm->decisions); }
