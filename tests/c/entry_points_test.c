/* The per-collective entry points of the C ABI (comm.h, native/comm/entry_points.c) that no binding calls:
 * every pycoll_comm_start_* twin, started and waited for, and the blocking pycoll_comm_send / recv, between two
 * processes over the TCP transport, each result checked exactly. Prints "rank R ok" and exits 0, or prints what
 * failed and exits 1. Built and run by tests/communicator/test_c_entry_points.py. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "check.h"
#include "two_ranks.h"

#define N 8
#define HALF (N / 2)

/* out[i] == want(i) for i < n, named what[i] on failure. */
#define EXPECT(what, out, n, want)                                                                             \
    for (int i = 0; i < (n); i++)                                                                              \
    CHECK((out)[i] == (float)(want), "%s[%d] = %g, expected %g", what, i, (double)(out)[i], (double)(want))

/* pycoll_comm_start_<name>(comm, args..., &work), then waited for: the work is read only once the call set it. */
#define START(name, ...)                                                                                       \
    do {                                                                                                       \
        pycoll_work_t *work = NULL;                                                                            \
        const pycoll_status_t st = pycoll_comm_start_##name(comm, __VA_ARGS__, &work);                         \
        two_ranks_finish(comm, st, work, #name);                                                               \
    } while (0)

static void collectives(pycoll_comm_t *comm, int rank, const float *x)
{
    float y[N], all[2 * N], buf[N];
    const int64_t counts[2] = {3, 5};
    const int64_t offset = rank ? counts[0] : 0;

    START(all_reduce, x, y, N, PYCOLL_FLOAT32, PYCOLL_SUM, PYCOLL_ALGO_AUTO, PYCOLL_ACCURACY_FAST);
    EXPECT("all_reduce", y, N, 3 * i);
    START(reduce_scatter, x, y, HALF, PYCOLL_FLOAT32, PYCOLL_SUM, PYCOLL_ALGO_AUTO, PYCOLL_ACCURACY_FAST);
    EXPECT("reduce_scatter", y, HALF, 3 * (rank * HALF + i));
    START(all_gather, x, all, N, PYCOLL_FLOAT32);
    EXPECT("all_gather", all, 2 * N, (i / N + 1) * (i % N));
    memcpy(buf, x, sizeof buf);
    START(broadcast, buf, N, PYCOLL_FLOAT32, 1);
    EXPECT("broadcast", buf, N, 2 * i);
    START(reduce, x, y, N, PYCOLL_FLOAT32, PYCOLL_SUM, 0, PYCOLL_ACCURACY_FAST);
    if (rank == 0)
        EXPECT("reduce", y, N, 3 * i);
    pycoll_work_t *work = NULL;
    const pycoll_status_t st = pycoll_comm_start_barrier(comm, &work);
    two_ranks_finish(comm, st, work, "barrier");
    START(all_to_all, x, y, HALF, PYCOLL_FLOAT32);
    EXPECT("all_to_all", y, N, (i / HALF + 1) * (rank * HALF + i % HALF));
    START(gather, x, all, N, PYCOLL_FLOAT32, 1);
    if (rank == 1)
        EXPECT("gather", all, 2 * N, (i / N + 1) * (i % N));
    START(scatter, x, y, HALF, PYCOLL_FLOAT32, 0);
    EXPECT("scatter", y, HALF, rank * HALF + i);
    START(all_gather_v, x, all, counts, PYCOLL_FLOAT32);
    EXPECT("all_gather_v", all, N, i < counts[0] ? i : 2 * (i - counts[0]));
    START(reduce_scatter_v, x, y, counts, PYCOLL_FLOAT32, PYCOLL_SUM, PYCOLL_ACCURACY_FAST);
    EXPECT("reduce_scatter_v", y, counts[rank], 3 * (offset + i));
}

/* Rank 0 to rank 1 started (start_send / start_recv), then rank 1 to rank 0 blocking (send / recv). */
static void messages(pycoll_comm_t *comm, int rank, const float *x)
{
    float y[N];
    if (rank == 0)
        START(send, x, N, PYCOLL_FLOAT32, 1, 3);
    else
        START(recv, y, N, PYCOLL_FLOAT32, 0, 3);
    if (rank == 1)
        EXPECT("start_recv", y, N, i);
    const pycoll_status_t st = rank == 1 ? pycoll_comm_send(comm, x, N, PYCOLL_FLOAT32, 0, 4)
                   : pycoll_comm_recv(comm, y, N, PYCOLL_FLOAT32, 1, 4);
    CHECK(st == PYCOLL_OK, "%s: %s", rank == 1 ? "send" : "recv", pycoll_comm_error(comm));
    if (rank == 0)
        EXPECT("recv", y, N, 2 * i);
}

static int rank_main(int rank, int fd)
{
    pycoll_comm_t *comm = two_ranks_comm(rank, fd);
    if (!comm)
        return 1;
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(rank + 1) * (float)i;
    collectives(comm, rank, x);
    messages(comm, rank, x);
    return two_ranks_close(comm, rank);
}

int main(void)
{
    return run_two_ranks(rank_main);
}
