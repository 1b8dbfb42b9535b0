/* accuracy="reproducible" on a device's memory table (p2p->kernels, kernels/memory_kernels.h): the exact mode, with
 * the table's kernels -- the host loops' arithmetic in the device's language, so that the bits are the host
 * path's -- and the stages of reproducible.c:
 *   1. the table's summary kernel writes the summary into table memory, where its internal all_reduce max runs
 *      over the transport as any data does; the agreed summary is copied to the host, and every rank draws the
 *      same plan from it;
 *   2. the table encodes the elements into int64 limbs in table scratch (freed at the end of the call), the
 *      caller's collective sums them, and the table rounds each element once into the result (avg: then its
 *      scale_avg divides by the world size).
 * The general mode (an infinity or NaN somewhere, or a span beyond two limbs) has no device kernels: every rank
 * draws the same plan, so every rank refuses it, with a typed error, after the summary's pass; the communicator
 * stays usable. A failure of the table's kernels or memory breaks the communicator, as a schedule's would: the
 * peers are already in the call. */
#include <stdio.h>

#include "kernels/memory_kernels.h"
#include "algorithms/schedule.h"
#include "comm/reproducible_stages.h"
#include "kernels/reproducible.h"

/* Whether table k has the reproducible entries; where not, `error` says so. */
static int has_entries(const pycoll_memory_kernels_t *k, char *error, size_t error_len)
{
    if (k->version >= PYCOLL_MEMORY_KERNELS_REPRO_VERSION && k->repro_summary && k->repro_encode && k->repro_decode &&
        k->copy_to_host)
        return 1;
    if (k->version < PYCOLL_MEMORY_KERNELS_REPRO_VERSION)
        snprintf(error, error_len, "accuracy reproducible: the %s memory table is version %d, older than the "
                 "reproducible kernels (version %d); copy the buffers to host arrays, or use accuracy fast or "
                 "compensated", k->memory, k->version < 1 ? 1 : k->version, PYCOLL_MEMORY_KERNELS_REPRO_VERSION);
    else
        snprintf(error, error_len, "accuracy reproducible: the %s memory table has no reproducible kernels; copy "
                 "the buffers to host arrays, or use accuracy fast or compensated", k->memory);
    return 0;
}

/* A failed kernel or copy of the table: recorded on the transport and announced to the peers. */
static pycoll_status_t table_failed(pycoll_comm_t *comm, const pycoll_memory_kernels_t *k, pycoll_status_t st,
                                    const char *what, pycoll_dtype_t dtype)
{
    pycoll_p2p_fail(comm->p2p, st, -1, "accuracy reproducible: %s failed for %s on %s memory (status %d)%s", what,
                    pycoll_dtype_name(dtype), k->memory, (int)st, memory_error(k));
    return comm_finish(comm, st);
}

/* The summary of this rank's elements, agreed by max over the ranks, on the host. */
static pycoll_status_t agreed_summary(pycoll_comm_t *comm, const comm_call_t *call, const pycoll_memory_kernels_t *k,
                                      int64_t in, int32_t *summary, char *error, size_t error_len)
{
    const pycoll_dtype_t dtype = call->args.dtype;
    const int64_t bytes = REPRO_SUMMARY_LEN * (int64_t)sizeof(int32_t);
    int32_t *on_table = data_alloc(comm->p2p, bytes, "accuracy reproducible's summary");
    if (!on_table)
        return comm_finish(comm, PYCOLL_ERR_NOMEM);
    pycoll_status_t st = k->repro_summary(call->args.sendbuf, in, dtype, on_table);
    if (st != PYCOLL_OK)
        st = table_failed(comm, k, st, "the summary kernel", dtype);
    if (st == PYCOLL_OK)
        st = repro_internal_max(comm, call, on_table, REPRO_SUMMARY_LEN, error, error_len);
    if (st == PYCOLL_OK && (st = k->copy_to_host(summary, on_table, bytes)) != PYCOLL_OK)
        st = table_failed(comm, k, st, "the summary's copy to the host", dtype);
    data_free(comm->p2p, on_table);
    return st;
}

/* Why the plan of this summary is the general mode, which has no device kernels. */
static void refuse_general(const int32_t *summary, const pycoll_memory_kernels_t *k, char *error, size_t error_len)
{
    snprintf(error, error_len, "accuracy reproducible on %s memory runs the exact mode only, and %s: the general "
             "mode that carries them runs on host memory only (copy the buffers to host arrays, or use accuracy "
             "fast or compensated)", k->memory, summary[REPRO_SUMMARY_LEN - 1]
             ? "an element on some rank is an infinity or NaN"
             : "the elements over every rank span more binades than the exact mode's two limbs hold");
}

pycoll_status_t repro_run_on_device(pycoll_comm_t *comm, const comm_call_t *call, char *error, size_t error_len,
                                    pycoll_algorithm_t *ran)
{
    const pycoll_call_t *a = &call->args;
    pycoll_p2p_t *p2p = comm->p2p;
    const pycoll_memory_kernels_t *k = p2p->kernels;
    if (!has_entries(k, error, error_len))
        return PYCOLL_ERR_UNSUPPORTED; /* before anything is sent: every rank's table is the same kind */
    const repro_extent_t e = repro_extent(comm, call);

    int32_t summary[REPRO_SUMMARY_LEN];
    pycoll_status_t st = agreed_summary(comm, call, k, e.in, summary, error, error_len);
    if (st != PYCOLL_OK)
        return st;
    const repro_plan_t plan = repro_plan(summary, a->dtype, p2p->size);
    if (plan.limbs == 0) {
        refuse_general(summary, k, error, error_len);
        return PYCOLL_ERR_UNSUPPORTED;
    }

    const int in_place = a->collective == PYCOLL_COLL_ALL_REDUCE; /* the limbs are summed where they were made */
    const int64_t send_bytes = e.in * plan.limbs * 8, recv_bytes = in_place ? 0 : e.out * plan.limbs * 8;
    char *space = data_alloc(p2p, send_bytes + recv_bytes, "accuracy reproducible's limbs");
    if (!space)
        return comm_finish(comm, PYCOLL_ERR_NOMEM);
    int64_t *send_limbs = (int64_t *)space;
    int64_t *recv_limbs = in_place ? send_limbs : (int64_t *)(space + send_bytes);
    st = k->repro_encode(a->sendbuf, e.in, a->dtype, plan.limbs, plan.bits, plan.base, send_limbs);
    if (st != PYCOLL_OK)
        st = table_failed(comm, k, st, "the encode kernel", a->dtype);
    if (st == PYCOLL_OK)
        st = repro_sum_limbs(comm, call, plan.limbs, send_limbs, recv_limbs, e.out, error, error_len, ran);
    if (st == PYCOLL_OK && e.out > 0) {
        st = k->repro_decode(recv_limbs, e.out, a->dtype, plan.limbs, plan.bits, plan.base, a->recvbuf);
        if (st != PYCOLL_OK)
            st = table_failed(comm, k, st, "the decode kernel", a->dtype);
    }
    if (st == PYCOLL_OK && e.out > 0 && a->op == PYCOLL_AVG &&
        (st = k->scale_avg(a->recvbuf, e.out, a->dtype, p2p->size)) != PYCOLL_OK)
        st = table_failed(comm, k, st, "avg's division", a->dtype);
    data_free(p2p, space);
    return st;
}
