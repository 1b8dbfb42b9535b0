/* pycoll_comm_run from C: two processes (forked, joined by a socket pair) run collectives and messages through
 * the one call description, blocking and non-blocking, and every rank checks that bad calls -- another
 * struct version or size, an unknown id, counts that do not fit or overflow, a NULL buffer, a root, peer or
 * algorithm that is not one -- are refused with PYCOLL_ERR_INVALID (reproducible where it is not supported:
 * PYCOLL_ERR_UNSUPPORTED) and a message naming the field, the communicator intact. Prints "rank R ok" and exits 0,
 * or prints what failed and exits 1. Built and run by tests/communicator/test_c_call.py. */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <pycoll/pycoll.h>

#include "check.h"
#include "two_ranks.h"

#define N 8

/* A call that must be refused with `expected`, the error naming `says`. */
static void refused_as(pycoll_comm_t *comm, const pycoll_call_t *call, const char *says, int blocking,
                       pycoll_status_t expected)
{
    pycoll_work_t *work = (pycoll_work_t *)&failures; /* must come back NULL */
    pycoll_status_t st = pycoll_comm_run(comm, call, blocking ? NULL : &work);
    CHECK(st == expected, "%s: status %d, expected %d", says, (int)st, (int)expected);
    CHECK(strstr(pycoll_comm_error(comm), says) != NULL, "%s: error says \"%s\"", says, pycoll_comm_error(comm));
    CHECK(blocking || work == NULL, "%s: a refused non-blocking call left a work", says);
    /* The same rules without the communicator (what engines outside libpycoll are checked by), but for the one
     * only a communicator knows: whether its transport runs shm_slots. */
    char why[256] = "";
    const int transport_rule = call && call->version == PYCOLL_CALL_VERSION && call->size == sizeof *call &&
                               call->algorithm == PYCOLL_ALGO_SHM_SLOTS;
    st = pycoll_call_check(call, pycoll_comm_rank(comm), pycoll_comm_size(comm), why, sizeof why);
    CHECK(st == (transport_rule ? PYCOLL_OK : expected), "%s: pycoll_call_check's status %d", says, (int)st);
    CHECK(transport_rule || strstr(why, says) != NULL, "%s: pycoll_call_check says \"%s\"", says, why);
}

static void refused(pycoll_comm_t *comm, const pycoll_call_t *call, const char *says, int blocking)
{
    refused_as(comm, call, says, blocking, PYCOLL_ERR_INVALID);
}

/* What the library alone refuses, with no binding above it to check first: every rule of a call lives in the
 * library (comm/call.c), so each bad field is refused before anything is sent, the communicator intact. */
static void bad_fields(pycoll_comm_t *comm, int rank, float *x, float *y)
{
    pycoll_call_t call;
    pycoll_call_init(&call, PYCOLL_COLL_ALL_REDUCE);
    call.sendbuf = x, call.recvbuf = y, call.send_count = call.recv_count = N, call.dtype = PYCOLL_FLOAT32;
    static const struct {
        size_t offset; /* of an enum field, int-sized */
        const char *says;
    } unknown[] = {{offsetof(pycoll_call_t, dtype), "dtype: unknown id 99"},
                   {offsetof(pycoll_call_t, op), "op: unknown id 99"},
                   {offsetof(pycoll_call_t, algorithm), "algorithm: unknown id 99"},
                   {offsetof(pycoll_call_t, accuracy), "accuracy: unknown id 99"}};
    const int no_such_id = 99;
    pycoll_call_t bad;
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        bad = call;
        memcpy((char *)&bad + unknown[i].offset, &no_such_id, sizeof no_such_id);
        refused(comm, &bad, unknown[i].says, (int)(i % 2));
    }
    bad = call;
    bad.send_count = bad.recv_count = -1;
    refused(comm, &bad, "send_count must be in [0, ", 1);
    bad = call;
    bad.send_count = bad.recv_count = INT64_MAX / 4; /* its bytes would overflow int64 */
    refused(comm, &bad, "send_count must be in [0, ", 0);
    bad = call;
    bad.sendbuf = NULL;
    refused(comm, &bad, "sendbuf is NULL for 8 elements", 1);
    bad = call;
    bad.recvbuf = NULL;
    refused(comm, &bad, "recvbuf is NULL for 8 elements", 0);
    bad = call;
    bad.op = PYCOLL_MAX, bad.dtype = PYCOLL_COMPLEX64, bad.send_count = bad.recv_count = N / 2;
    refused(comm, &bad, "complex numbers have no order", 1);
    bad = call;
    bad.algorithm = PYCOLL_ALGO_SHM_SLOTS; /* this communicator is over TCP */
    refused(comm, &bad, "shm_slots runs only over the shared-memory transport", 1);
    bad = call;
    bad.counts = (const int64_t[]){N, N};
    refused(comm, &bad, "only the _v collectives take them", 1);

    pycoll_call_init(&bad, PYCOLL_COLL_REDUCE_SCATTER);
    bad.sendbuf = x, bad.recvbuf = y, bad.send_count = N, bad.recv_count = N / 2, bad.dtype = PYCOLL_FLOAT32;
    bad.algorithm = PYCOLL_ALGO_RECURSIVE_DOUBLING;
    refused(comm, &bad, "recursive_doubling has no reduce_scatter; it runs as ring", 1);

    pycoll_call_init(&bad, PYCOLL_COLL_ALL_GATHER);
    bad.sendbuf = x, bad.recvbuf = y, bad.send_count = N / 2, bad.recv_count = N / 2, bad.dtype = PYCOLL_FLOAT32;
    refused(comm, &bad, "all_gather: recv_count must be size * send_count = 8, got 4", 1);
    bad.recv_count = N;
    bad.accuracy = PYCOLL_ACCURACY_REPRODUCIBLE;
    refused_as(comm, &bad, "accuracy reproducible: all_gather is not supported", 1, PYCOLL_ERR_UNSUPPORTED);

    pycoll_call_init(&bad, PYCOLL_COLL_BROADCAST);
    bad.recvbuf = y, bad.recv_count = N, bad.dtype = PYCOLL_FLOAT32;
    refused(comm, &bad, "root must be in [0, 2), got -1", 1);
    bad.root = 2;
    refused(comm, &bad, "root must be in [0, 2), got 2", 0);

    pycoll_call_init(&bad, PYCOLL_COLL_GATHER);
    bad.sendbuf = x, bad.send_count = N / 2, bad.root = 0, bad.dtype = PYCOLL_FLOAT32;
    bad.recvbuf = y, bad.recv_count = N / 2; /* a recvbuf holds every block, also off the root */
    refused(comm, &bad, "gather: recv_count must be size * send_count = 8, got 4", 1);
    bad.recvbuf = NULL;
    refused(comm, &bad, "recvbuf is NULL for 4 elements", 1);

    pycoll_call_init(&bad, PYCOLL_COLL_SEND_RECV);
    bad.sendbuf = x, bad.send_count = N, bad.dtype = PYCOLL_FLOAT32;
    bad.dest = rank; /* itself */
    refused(comm, &bad, "dest must be another rank in [0, 2), got", 1);
    bad.dest = 5;
    refused(comm, &bad, "dest must be another rank in [0, 2), got 5", 0);
    bad.dest = 1 - rank, bad.source = 1 - rank;
    refused(comm, &bad, "one of them; got both", 1);

    const int64_t negative[2] = {-1, N}, huge[2] = {INT64_MAX / 40, INT64_MAX / 40}, fine[2] = {N / 2, N / 2};
    pycoll_call_init(&bad, PYCOLL_COLL_ALL_GATHER_V);
    bad.sendbuf = x, bad.send_count = N / 2, bad.recvbuf = y, bad.recv_count = N, bad.dtype = PYCOLL_FLOAT32;
    refused(comm, &bad, "counts is NULL (2 entries expected)", 1);
    bad.counts = negative;
    refused(comm, &bad, "counts[0] must be >= 0, got -1", 1);
    bad.counts = huge;
    refused(comm, &bad, "counts: the sum is too large (rank 1's entry overflows it)", 0);
    bad.counts = fine, bad.recv_count = N - 1;
    refused(comm, &bad, "all_gather_v: recv_count must be sum(counts) = 8, got 7", 1);
}

static void bad_calls(pycoll_comm_t *comm, float *x, float *y)
{
    pycoll_call_t call;
    pycoll_call_init(&call, PYCOLL_COLL_ALL_REDUCE);
    call.sendbuf = x, call.recvbuf = y, call.send_count = call.recv_count = N, call.dtype = PYCOLL_FLOAT32;
    pycoll_call_t bad = call;
    bad.version = PYCOLL_CALL_VERSION + 1;
    refused(comm, &bad, "version", 1);
    bad = call;
    bad.size = sizeof bad - 8; /* a caller built against a smaller struct */
    refused(comm, &bad, "bytes", 0);
    bad = call;
    bad.collective = (pycoll_coll_t)99;
    refused(comm, &bad, "collective: unknown id 99", 1);
    bad = call;
    bad.recv_count = N - 1;
    refused(comm, &bad, "send_count must be recv_count", 0);
    bad = call;
    bad.root = 0; /* all_reduce has none */
    refused(comm, &bad, "root", 1);
    bad = call;
    bad.collective = PYCOLL_COLL_SEND_RECV; /* neither dest nor source */
    refused(comm, &bad, "one of them", 1);
    refused(comm, NULL, "NULL", 1);
}

static int rank_main(int rank, int fd)
{
    pycoll_comm_t *comm = two_ranks_comm(rank, fd);
    if (!comm)
        return 1;
    float x[N], y[N], gathered[2 * N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(rank + 1) * (float)i;
    bad_calls(comm, x, y);
    bad_fields(comm, rank, x, y);

    pycoll_call_t call; /* blocking all_reduce */
    pycoll_call_init(&call, PYCOLL_COLL_ALL_REDUCE);
    call.sendbuf = x, call.recvbuf = y, call.send_count = call.recv_count = N, call.dtype = PYCOLL_FLOAT32;
    pycoll_status_t st = pycoll_comm_run(comm, &call, NULL);
    CHECK(st == PYCOLL_OK, "all_reduce: %s", pycoll_comm_error(comm));
    for (int i = 0; i < N; i++)
        CHECK(y[i] == 3.0f * (float)i, "all_reduce[%d] = %g", i, (double)y[i]);

    pycoll_call_init(&call, PYCOLL_COLL_ALL_GATHER); /* non-blocking all_gather */
    call.sendbuf = x, call.recvbuf = gathered, call.send_count = N, call.recv_count = 2 * N;
    call.dtype = PYCOLL_FLOAT32;
    pycoll_work_t *work = NULL;
    st = pycoll_comm_run(comm, &call, &work);
    two_ranks_finish(comm, st, work, "all_gather");
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < N; i++)
            CHECK(gathered[r * N + i] == (float)(r + 1) * (float)i, "all_gather[%d][%d]", r, i);

    pycoll_call_init(&call, PYCOLL_COLL_SEND_RECV); /* a message from rank 0 to rank 1 */
    call.dtype = PYCOLL_FLOAT32, call.tag = 7;
    if (rank == 0)
        call.sendbuf = x, call.send_count = N, call.dest = 1;
    else
        call.recvbuf = y, call.recv_count = N, call.source = 0;
    st = pycoll_comm_run(comm, &call, NULL);
    CHECK(st == PYCOLL_OK, "send_recv: %s", pycoll_comm_error(comm));
    for (int i = 0; rank == 1 && i < N; i++)
        CHECK(y[i] == (float)i, "received[%d] = %g", i, (double)y[i]);

    CHECK(pycoll_comm_barrier(comm) == PYCOLL_OK, "barrier (the ABI wrapper): %s", pycoll_comm_error(comm));
    return two_ranks_close(comm, rank);
}

int main(void) { return run_two_ranks(rank_main); }
