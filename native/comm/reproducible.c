/* accuracy="reproducible": a sum whose bits are the same whatever the world size, rank order, algorithm and
 * segment size. Two stages, each a collective of its own through the ordinary dispatch:
 *   1. an all_reduce max of every element's exponent code (kernels/reproducible.h), stamped as one of pycoll's
 *      internal calls (the communicator's internal group and numbering, as the cost-model exchange at init), so
 *      errors and mismatches name it as such; max is exact, so any algorithm agrees;
 *   2. the caller's collective, with its own descriptor (dtype, count, accuracy as called), run on int64 limbs
 *      with op sum by the algorithm the caller chose: integer sums are associative, so every schedule adds
 *      the same integers.
 * Then each result element is rounded once from its exact limb sum (avg: and divided by the world size). */
#include <stdio.h>
#include <stdlib.h>

#include "algorithms/reduction.h"
#include "comm/comm_internal.h"
#include "kernels/reproducible.h"
#include "pycoll/kernels.h"

/* The communicator's reproducible scratch grown to at least nbytes (host memory; kept, as comm_workspace is,
 * because a fresh large block is page-faulted on every call). */
static void *repro_space(pycoll_comm_t *comm, int64_t nbytes)
{
    if (nbytes <= comm->repro_space_bytes)
        return comm->repro_space;
    free(comm->repro_space);
    comm->repro_space_bytes = 0;
    const int64_t rounded = (nbytes + 63) / 64 * 64;
    comm->repro_space = aligned_alloc(64, (size_t)rounded);
    if (comm->repro_space)
        comm->repro_space_bytes = rounded;
    return comm->repro_space;
}

static int64_t round8(int64_t bytes) { return (bytes + 7) / 8 * 8; }

pycoll_status_t comm_run_reproducible(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len,
                                      pycoll_algorithm_t *ran)
{
    const pycoll_call_t *a = &call->args;
    pycoll_p2p_t *p2p = comm->p2p;
    if (p2p->kernels) { /* a device's memory table (or the test stand-in for one) */
        snprintf(error, error_len, "accuracy reproducible runs on host memory only; these buffers are %s memory "
                 "(copy them to host arrays, or use accuracy fast or compensated)",
                 p2p->kernels->memory ? p2p->kernels->memory : "device");
        return PYCOLL_ERR_UNSUPPORTED;
    }
    const int64_t limbs = repro_limbs(a->dtype);
    const int is_root = a->root == p2p->rank;
    /* in: the elements this rank contributes (each needs a code); out: those it receives, from code `first`. */
    const int64_t in = a->send_count;
    int64_t out = call->count, first = 0;
    if (a->collective == PYCOLL_COLL_REDUCE_SCATTER)
        first = (int64_t)p2p->rank * call->count;
    if (a->collective == PYCOLL_COLL_REDUCE && !is_root)
        out = 0;
    const int in_place = a->collective == PYCOLL_COLL_ALL_REDUCE; /* the limbs are summed where they were made */
    const int64_t code_bytes = round8(in * (int64_t)sizeof(int32_t)), send_bytes = in * limbs * 8;
    const int64_t recv_bytes = in_place ? 0 : out * limbs * 8;
    char *space = repro_space(comm, code_bytes + send_bytes + recv_bytes + 8);
    if (!space) {
        snprintf(error, error_len, "accuracy reproducible: out of memory for %lld bytes of limbs",
                 (long long)(code_bytes + send_bytes + recv_bytes));
        return PYCOLL_ERR_NOMEM;
    }
    int32_t *codes = (int32_t *)space;
    int64_t *send_limbs = (int64_t *)(space + code_bytes);
    int64_t *recv_limbs = in_place ? send_limbs : (int64_t *)(space + code_bytes + send_bytes);

    /* 1. Every element's exponent code, agreed by max over the ranks: pycoll's internal call. */
    repro_exponents(a->sendbuf, in, a->dtype, codes);
    comm_call_t exponents = *call;
    exponents.args.collective = PYCOLL_COLL_ALL_REDUCE;
    exponents.args.dtype = PYCOLL_INT32;
    exponents.args.op = PYCOLL_MAX;
    exponents.args.algorithm = PYCOLL_ALGO_AUTO;
    exponents.args.accuracy = PYCOLL_ACCURACY_FAST;
    exponents.args.root = -1;
    exponents.args.sendbuf = exponents.args.recvbuf = codes;
    exponents.args.send_count = exponents.args.recv_count = exponents.count = exponents.desc_count = in;
    const int was_internal = comm->internal;
    comm->internal = 1;
    pycoll_algorithm_t exponents_ran;
    pycoll_status_t st = comm_run_stage(comm, &exponents, &exponents, error, error_len, &exponents_ran);
    comm->internal = was_internal;
    if (st != PYCOLL_OK)
        return st;

    /* 2. The caller's collective on the limbs, under the caller's descriptor. */
    repro_encode(a->sendbuf, codes, in, a->dtype, send_limbs);
    comm_call_t sums = *call;
    sums.args.dtype = PYCOLL_INT64;
    sums.args.op = PYCOLL_SUM;
    sums.args.accuracy = PYCOLL_ACCURACY_FAST;
    sums.args.sendbuf = send_limbs;
    sums.args.recvbuf = a->recvbuf || out ? recv_limbs : NULL;
    sums.args.send_count = in * limbs;
    sums.args.recv_count = a->recv_count * limbs;
    sums.count = call->count * limbs;
    st = comm_run_stage(comm, call, &sums, error, error_len, ran);
    if (st != PYCOLL_OK || out == 0)
        return st;

    /* 3. Each element rounded once, then the one division of avg. */
    repro_decode(recv_limbs, codes + first, out, a->dtype, a->recvbuf);
    if (a->op == PYCOLL_AVG)
        st = pycoll_scale_avg(a->recvbuf, out, a->dtype, p2p->size);
    return st;
}
