/* The per-collective functions of comm.h: part of the ABI, each a thin wrapper that describes its call
 * (pycoll/call.h) and runs it with pycoll_comm_run -- work NULL blocking, else queued. Only the translation of
 * each function's arguments into the description's fields lives here; checking and running are call.c's and
 * communicator.c's, the same for every caller. */
#include "comm/comm_internal.h"

static pycoll_call_t described(pycoll_coll_t collective, const void *sendbuf, void *recvbuf, pycoll_dtype_t dtype)
{
    pycoll_call_t call;
    pycoll_call_init(&call, collective);
    call.sendbuf = sendbuf;
    call.recvbuf = recvbuf;
    call.dtype = dtype;
    return call;
}

static pycoll_status_t run(pycoll_comm_t *comm, pycoll_call_t call, pycoll_work_t **work)
{
    return pycoll_comm_run(comm, &call, work);
}

/* size * count, or -1 where it would overflow (the check then names the count). */
static int64_t blocks_of(const pycoll_comm_t *comm, int64_t count)
{
    const int64_t size = pycoll_comm_size(comm);
    return count >= 0 && count <= INT64_MAX / size ? size * count : -1;
}

static pycoll_call_t reduction(pycoll_coll_t collective, const void *sendbuf, void *recvbuf, pycoll_dtype_t dtype,
                               pycoll_op_t op, pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy)
{
    pycoll_call_t call = described(collective, sendbuf, recvbuf, dtype);
    call.op = op;
    call.algorithm = algorithm;
    call.accuracy = accuracy;
    return call;
}

static pycoll_call_t all_reduce_call(const void *sendbuf, void *recvbuf, int64_t count, pycoll_dtype_t dtype,
                                     pycoll_op_t op, pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy)
{
    pycoll_call_t call = reduction(PYCOLL_COLL_ALL_REDUCE, sendbuf, recvbuf, dtype, op, algorithm, accuracy);
    call.send_count = call.recv_count = count;
    return call;
}

static pycoll_call_t reduce_scatter_call(const pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                         int64_t recv_count, pycoll_dtype_t dtype, pycoll_op_t op,
                                         pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy)
{
    pycoll_call_t call = reduction(PYCOLL_COLL_REDUCE_SCATTER, sendbuf, recvbuf, dtype, op, algorithm, accuracy);
    call.send_count = blocks_of(comm, recv_count);
    call.recv_count = recv_count;
    return call;
}

static pycoll_call_t all_gather_call(const pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                     int64_t send_count, pycoll_dtype_t dtype)
{
    pycoll_call_t call = described(PYCOLL_COLL_ALL_GATHER, sendbuf, recvbuf, dtype);
    call.send_count = send_count;
    call.recv_count = blocks_of(comm, send_count);
    return call;
}

static pycoll_call_t broadcast_call(void *buf, int64_t count, pycoll_dtype_t dtype, int32_t root)
{
    pycoll_call_t call = described(PYCOLL_COLL_BROADCAST, NULL, buf, dtype);
    call.recv_count = count;
    call.root = root;
    return call;
}

static pycoll_call_t reduce_call(const pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                 pycoll_dtype_t dtype, pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy)
{
    pycoll_call_t call = reduction(PYCOLL_COLL_REDUCE, sendbuf, recvbuf, dtype, op, PYCOLL_ALGO_AUTO, accuracy);
    call.send_count = count;
    call.recv_count = root == pycoll_comm_rank(comm) || recvbuf ? count : 0;
    call.root = root;
    return call;
}

static pycoll_call_t message_call(int is_send, const void *sendbuf, void *recvbuf, int64_t count,
                                  pycoll_dtype_t dtype, int32_t peer, uint32_t tag)
{
    pycoll_call_t call = described(PYCOLL_COLL_SEND_RECV, sendbuf, recvbuf, dtype);
    *(is_send ? &call.send_count : &call.recv_count) = count;
    *(is_send ? &call.dest : &call.source) = peer;
    call.tag = tag;
    return call;
}

static pycoll_call_t all_to_all_call(const pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count,
                                     pycoll_dtype_t dtype)
{
    pycoll_call_t call = described(PYCOLL_COLL_ALL_TO_ALL, sendbuf, recvbuf, dtype);
    call.send_count = call.recv_count = blocks_of(comm, count);
    return call;
}

/* gather's recvbuf and scatter's sendbuf hold size blocks on the root; elsewhere they may be NULL. */
static pycoll_call_t rooted_blocks_call(const pycoll_comm_t *comm, pycoll_coll_t collective, const void *sendbuf,
                                        void *recvbuf, int64_t count, pycoll_dtype_t dtype, int32_t root)
{
    pycoll_call_t call = described(collective, sendbuf, recvbuf, dtype);
    const int gathers = collective == PYCOLL_COLL_GATHER;
    const int has_blocks = root == pycoll_comm_rank(comm) || (gathers ? recvbuf != NULL : sendbuf != NULL);
    call.send_count = gathers ? count : has_blocks ? blocks_of(comm, count) : 0;
    call.recv_count = !gathers ? count : has_blocks ? blocks_of(comm, count) : 0;
    call.root = root;
    return call;
}

/* The _v collectives' send and recv counts from counts (sum and this rank's entry). Left 0 where counts is
 * NULL, and the sum stops short of an overflow: the check then names the counts. */
static pycoll_call_t counted_call(const pycoll_comm_t *comm, pycoll_coll_t collective, const void *sendbuf,
                                  void *recvbuf, const int64_t *counts, pycoll_dtype_t dtype)
{
    pycoll_call_t call = described(collective, sendbuf, recvbuf, dtype);
    call.counts = counts;
    int64_t total = 0;
    for (int32_t r = 0; counts && r < pycoll_comm_size(comm); r++)
        total = counts[r] >= 0 && counts[r] <= INT64_MAX - total ? total + counts[r] : total;
    const int64_t mine = counts ? counts[pycoll_comm_rank(comm)] : 0;
    const int gathers = collective == PYCOLL_COLL_ALL_GATHER_V;
    call.send_count = gathers ? mine : total;
    call.recv_count = gathers ? total : mine;
    return call;
}

static pycoll_call_t reduce_scatter_v_call(const pycoll_comm_t *comm, const void *sendbuf, void *recvbuf,
                                           const int64_t *counts, pycoll_dtype_t dtype, pycoll_op_t op,
                                           pycoll_accuracy_t accuracy)
{
    pycoll_call_t call = counted_call(comm, PYCOLL_COLL_REDUCE_SCATTER_V, sendbuf, recvbuf, counts, dtype);
    call.op = op;
    call.accuracy = accuracy;
    return call;
}

/* Each collective's blocking function and its start_ twin, from its parameters (comm first) and the
 * description both run: one signature and one description per collective, so that the twins cannot drift. */
#define PARAMETERS(...) __VA_ARGS__
#define BLOCKING_AND_START(name, params, ...)                                                                    \
    pycoll_status_t pycoll_comm_##name(PARAMETERS params)                                                          \
    {                                                                                                              \
        return run(comm, __VA_ARGS__, NULL);                                                                       \
    }                                                                                                              \
    pycoll_status_t pycoll_comm_start_##name(PARAMETERS params, pycoll_work_t **work)                              \
    {                                                                                                              \
        return run(comm, __VA_ARGS__, work);                                                                       \
    }

BLOCKING_AND_START(all_reduce,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count, pycoll_dtype_t dtype,
                    pycoll_op_t op, pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy),
                   all_reduce_call(sendbuf, recvbuf, count, dtype, op, algorithm, accuracy))

BLOCKING_AND_START(reduce_scatter,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t recv_count,
                    pycoll_dtype_t dtype, pycoll_op_t op, pycoll_algorithm_t algorithm, pycoll_accuracy_t accuracy),
                   reduce_scatter_call(comm, sendbuf, recvbuf, recv_count, dtype, op, algorithm, accuracy))

BLOCKING_AND_START(all_gather,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t send_count,
                    pycoll_dtype_t dtype),
                   all_gather_call(comm, sendbuf, recvbuf, send_count, dtype))

BLOCKING_AND_START(broadcast, (pycoll_comm_t *comm, void *buf, int64_t count, pycoll_dtype_t dtype, int32_t root),
                   broadcast_call(buf, count, dtype, root))

BLOCKING_AND_START(reduce,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count, pycoll_dtype_t dtype,
                    pycoll_op_t op, int32_t root, pycoll_accuracy_t accuracy),
                   reduce_call(comm, sendbuf, recvbuf, count, dtype, op, root, accuracy))

BLOCKING_AND_START(barrier, (pycoll_comm_t *comm), described(PYCOLL_COLL_BARRIER, NULL, NULL, PYCOLL_UINT8))

BLOCKING_AND_START(send,
                   (pycoll_comm_t *comm, const void *buf, int64_t count, pycoll_dtype_t dtype, int32_t peer,
                    uint32_t tag),
                   message_call(1, buf, NULL, count, dtype, peer, tag))

BLOCKING_AND_START(recv,
                   (pycoll_comm_t *comm, void *buf, int64_t count, pycoll_dtype_t dtype, int32_t peer, uint32_t tag),
                   message_call(0, NULL, buf, count, dtype, peer, tag))

BLOCKING_AND_START(all_to_all,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count, pycoll_dtype_t dtype),
                   all_to_all_call(comm, sendbuf, recvbuf, count, dtype))

BLOCKING_AND_START(gather,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count, pycoll_dtype_t dtype,
                    int32_t root),
                   rooted_blocks_call(comm, PYCOLL_COLL_GATHER, sendbuf, recvbuf, count, dtype, root))

BLOCKING_AND_START(scatter,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, int64_t count, pycoll_dtype_t dtype,
                    int32_t root),
                   rooted_blocks_call(comm, PYCOLL_COLL_SCATTER, sendbuf, recvbuf, count, dtype, root))

BLOCKING_AND_START(all_gather_v,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, const int64_t *counts,
                    pycoll_dtype_t dtype),
                   counted_call(comm, PYCOLL_COLL_ALL_GATHER_V, sendbuf, recvbuf, counts, dtype))

BLOCKING_AND_START(reduce_scatter_v,
                   (pycoll_comm_t *comm, const void *sendbuf, void *recvbuf, const int64_t *counts,
                    pycoll_dtype_t dtype, pycoll_op_t op, pycoll_accuracy_t accuracy),
                   reduce_scatter_v_call(comm, sendbuf, recvbuf, counts, dtype, op, accuracy))
