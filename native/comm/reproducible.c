/* accuracy="reproducible": a sum whose bits are the same whatever the world size, rank order, algorithm and
 * segment size. Each stage is a collective of its own through the ordinary dispatch:
 *   1. an all_reduce max of each rank's summary (kernels/reproducible.h: the binades its elements span, and
 *      whether any is not finite), stamped as one of pycoll's internal calls (the communicator's internal group
 *      and numbering, as the cost-model exchange at init), so that errors and mismatches name it as such; max is
 *      exact, so every rank draws the same plan from it: the exact mode's limbs, or the general mode;
 *   2. the general mode only: an internal all_reduce max of every element's exponent code;
 *   3. the caller's collective, with its own descriptor (dtype, count, accuracy as called), run on int64 limbs
 *      with op sum by the algorithm the caller chose: integer sums are associative, so every schedule adds
 *      the same integers.
 * Then each result element is rounded once from its exact limb sum (avg: and divided by the world size). This file
 * runs them on host memory; reproducible_device.c on a device's memory table, with that table's kernels. */
#include <stdio.h>
#include <stdlib.h>

#include "comm/reproducible_stages.h"
#include "kernels/complex_parts.h"
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

repro_extent_t repro_extent(const pycoll_comm_t *comm, const comm_call_t *call)
{
    const pycoll_call_t *a = &call->args;
    repro_extent_t e = {a->send_count, call->count, 0};
    if (a->collective == PYCOLL_COLL_REDUCE_SCATTER)
        e.first = (int64_t)comm->p2p->rank * call->count;
    if (a->collective == PYCOLL_COLL_REDUCE && a->root != comm->p2p->rank)
        e.out = 0;
    return e;
}

pycoll_status_t repro_internal_max(pycoll_comm_t *comm, const comm_call_t *call, int32_t *values, int64_t n,
                                   char *error, size_t error_len)
{
    comm_call_t max = *call;
    max.args.collective = PYCOLL_COLL_ALL_REDUCE;
    max.args.dtype = PYCOLL_INT32;
    max.args.op = PYCOLL_MAX;
    max.args.algorithm = PYCOLL_ALGO_AUTO;
    max.args.accuracy = PYCOLL_ACCURACY_FAST;
    max.args.root = -1;
    max.args.sendbuf = max.args.recvbuf = values;
    max.args.send_count = max.args.recv_count = max.count = max.desc_count = n;
    const int was_internal = comm->internal;
    comm->internal = 1;
    pycoll_algorithm_t ran;
    pycoll_status_t st = comm_run_stage(comm, &max, &max, error, error_len, &ran);
    comm->internal = was_internal;
    return st;
}

/* The exact mode as a transport's exact sum (p2p.h's pycoll_exact_codec_t), by the plan: the elements go on the
 * wire as they are and sum exactly in double (REPRO_NARROW_ONE), or as two exact doubles each (float64's
 * REPRO_NARROW_SPLIT), or as their limbs, summed as int64 and decoded. */
typedef struct exact_codec {
    pycoll_dtype_t dtype;
    repro_plan_t plan;
} exact_codec_t;

static void limbs_encode(const void *ctx, const void *elems, int64_t n, void *wire)
{
    const exact_codec_t *e = ctx;
    repro_encode_exact(elems, n, e->dtype, &e->plan, wire);
}

static void limbs_sum(const void *ctx, const void *const *wires, int32_t n_wires, int64_t n, void *elems,
                      void *scratch)
{
    const exact_codec_t *e = ctx;
    const int64_t words = n * e->plan.limbs;
    const void *sums = wires[0];
    if (n_wires > 1) { /* integer sums: exact, and every kernel gives the same */
        pycoll_reduce(scratch, wires[0], wires[1], words, PYCOLL_INT64, PYCOLL_SUM);
        for (int32_t k = 2; k < n_wires; k++)
            pycoll_reduce_into(scratch, wires[k], words, PYCOLL_INT64, PYCOLL_SUM);
        sums = scratch;
    }
    repro_decode_exact(sums, n, e->dtype, &e->plan, elems);
}

static void split_encode(const void *ctx, const void *elems, int64_t n, void *wire)
{
    repro_split_encode(elems, n, &((const exact_codec_t *)ctx)->plan, wire);
}

static void split_sum(const void *ctx, const void *const *wires, int32_t n_wires, int64_t n, void *elems,
                      void *scratch)
{
    (void)ctx;
    repro_split_sum(wires, n_wires, n, scratch, elems);
}

static void narrow_sum(const void *ctx, const void *const *wires, int32_t n_wires, int64_t n, void *elems,
                       void *scratch)
{
    const exact_codec_t *e = ctx;
    repro_sum_narrow(wires, n_wires, n, e->dtype, scratch, elems);
}

/* Stage 3 of an exact-mode all_reduce handed whole to the transport: it encodes each piece on its way into
 * its own buffers and sums each element once there, where the other stages would make passes over separate
 * limb arrays. The same exact sums, so the same bits. */
static pycoll_status_t coded_all_reduce(pycoll_comm_t *comm, const pycoll_native_collectives_t *native,
                                        const comm_call_t *call, const repro_plan_t *plan, char *error,
                                        size_t error_len, pycoll_algorithm_t *ran)
{
    const pycoll_call_t *a = &call->args;
    const exact_codec_t ctx = {a->dtype, *plan};
    const int32_t elem_bytes = (int32_t)pycoll_dtype_size(a->dtype);
    const pycoll_exact_codec_t codec =
        plan->narrow == REPRO_NARROW_ONE     ? (pycoll_exact_codec_t){elem_bytes, elem_bytes, NULL, narrow_sum, &ctx}
        : plan->narrow == REPRO_NARROW_SPLIT ? (pycoll_exact_codec_t){16, elem_bytes, split_encode, split_sum, &ctx}
                                             : (pycoll_exact_codec_t){plan->limbs * 8, elem_bytes, limbs_encode,
                                                                      limbs_sum, &ctx};
    pycoll_status_t st = comm_run_coded_stage(comm, native, call, call->count * codec.wire_bytes, &codec, error,
                                              error_len, ran);
    if (st == PYCOLL_OK && a->op == PYCOLL_AVG)
        st = pycoll_scale_avg(a->recvbuf, call->count, a->dtype, comm->p2p->size);
    return st;
}

pycoll_status_t repro_sum_limbs(pycoll_comm_t *comm, const comm_call_t *call, int64_t limbs, int64_t *send_limbs,
                                int64_t *recv_limbs, int64_t out, char *error, size_t error_len,
                                pycoll_algorithm_t *ran)
{
    const pycoll_call_t *a = &call->args;
    comm_call_t sums = *call;
    sums.args.dtype = PYCOLL_INT64;
    sums.args.op = PYCOLL_SUM;
    sums.args.accuracy = PYCOLL_ACCURACY_FAST;
    sums.args.sendbuf = send_limbs;
    sums.args.recvbuf = a->recvbuf || out ? recv_limbs : NULL;
    sums.args.send_count = a->send_count * limbs;
    sums.args.recv_count = a->recv_count * limbs;
    sums.count = call->count * limbs;
    return comm_run_stage(comm, call, &sums, error, error_len, ran);
}

pycoll_status_t comm_run_reproducible(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len,
                                      pycoll_algorithm_t *ran)
{
    const pycoll_call_t *a = &call->args;
    pycoll_p2p_t *p2p = comm->p2p;
    /* A complex sum is the sums of its parts: every step below but the caller's collective runs on the parts (2
     * per element), and that collective sums an element's limbs of both parts together under the caller's own
     * descriptor, so that ranks calling complex64 and float32 still meet as a mismatch. */
    const int64_t parts = dtype_is_complex(a->dtype) ? 2 : 1;
    const pycoll_dtype_t dtype = complex_part_dtype(a->dtype);
    if (p2p->kernels) { /* a device's memory table (or the test stand-in for one) */
        if (parts > 1) {
            snprintf(error, error_len, "accuracy reproducible: dtype %s is supported on host memory only",
                     pycoll_dtype_name(a->dtype));
            return PYCOLL_ERR_UNSUPPORTED;
        }
        return repro_run_on_device(comm, call, error, error_len, ran);
    }
    const repro_extent_t extent = repro_extent(comm, call);
    const int64_t in = extent.in * parts, out = extent.out * parts, first = extent.first * parts;

    /* 1. The summary, agreed by max over the ranks, and the plan every rank draws from it. */
    int32_t summary[REPRO_SUMMARY_LEN];
    repro_summarize(a->sendbuf, in, dtype, summary);
    pycoll_status_t st = repro_internal_max(comm, call, summary, REPRO_SUMMARY_LEN, error, error_len);
    if (st != PYCOLL_OK)
        return st;
    const repro_plan_t plan = repro_plan(summary, dtype, p2p->size);
    const int general = plan.limbs == 0;
    const int64_t limbs = general ? repro_limbs(dtype) : plan.limbs;

    /* The transport's coded all-reduce takes whole elements of one real dtype; complex takes the stages below,
     * which add the same integers, so give the same bits. */
    if (!general && a->collective == PYCOLL_COLL_ALL_REDUCE && parts == 1) {
        const int64_t wire_bytes = in * (plan.narrow == REPRO_NARROW_ONE ? (int64_t)pycoll_dtype_size(a->dtype)
                                                                          : limbs * 8);
        const pycoll_native_collectives_t *native = comm_coded_native(comm, a->algorithm, wire_bytes);
        if (native)
            return coded_all_reduce(comm, native, call, &plan, error, error_len, ran);
    }

    const int in_place = a->collective == PYCOLL_COLL_ALL_REDUCE; /* the limbs are summed where they were made */
    const int64_t code_bytes = general ? round8(in * (int64_t)sizeof(int32_t)) : 0, send_bytes = in * limbs * 8;
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

    /* 2. The general mode: every element's exponent code, agreed by max over the ranks. */
    if (general) {
        repro_exponents(a->sendbuf, in, dtype, codes);
        st = repro_internal_max(comm, call, codes, in, error, error_len);
        if (st != PYCOLL_OK)
            return st;
        repro_encode(a->sendbuf, codes, in, dtype, send_limbs);
    } else {
        repro_encode_exact(a->sendbuf, in, dtype, &plan, send_limbs);
    }

    /* 3. The caller's collective on the limbs, under the caller's descriptor. */
    st = repro_sum_limbs(comm, call, limbs * parts, send_limbs, recv_limbs, out, error, error_len, ran);
    if (st != PYCOLL_OK || out == 0)
        return st;

    /* Each element rounded once, then the one division of avg. */
    if (general)
        repro_decode(recv_limbs, codes + first, out, dtype, a->recvbuf);
    else
        repro_decode_exact(recv_limbs, out, dtype, &plan, a->recvbuf);
    if (a->op == PYCOLL_AVG)
        st = pycoll_scale_avg(a->recvbuf, out, dtype, p2p->size);
    return st;
}
