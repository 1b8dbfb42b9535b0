/* pycoll_comm_run from C: two processes (forked, joined by a socket pair) run collectives and messages through
 * the one call description, blocking and non-blocking, and every rank checks that bad calls -- another
 * struct version or size, an unknown collective, counts that do not fit -- are refused with
 * PYCOLL_ERR_INVALID and a message naming the field, the communicator intact. Prints "rank R ok" and exits 0,
 * or prints what failed and exits 1. Built and run by tests/communicator/test_c_call.py. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pycoll/pycoll.h>

#include "check.h"

#define N 8

/* A call that must be refused with PYCOLL_ERR_INVALID, the error naming `says`. */
static void refused(pycoll_comm_t *comm, const pycoll_call_t *call, const char *says, int blocking)
{
    pycoll_work_t *work = (pycoll_work_t *)&failures; /* must come back NULL */
    pycoll_status_t st = pycoll_comm_run(comm, call, blocking ? NULL : &work);
    CHECK(st == PYCOLL_ERR_INVALID, "%s: status %d, expected PYCOLL_ERR_INVALID", says, (int)st);
    CHECK(strstr(pycoll_comm_error(comm), says) != NULL, "%s: error says \"%s\"", says, pycoll_comm_error(comm));
    CHECK(blocking || work == NULL, "%s: a refused non-blocking call left a work", says);
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
    int fds[2] = {-1, -1};
    fds[1 - rank] = fd;
    char error[PYCOLL_ERROR_LEN];
    pycoll_p2p_t *p2p = pycoll_tcp_transport_create(rank, 2, fds, error, sizeof error);
    pycoll_comm_t *comm = NULL;
    if (!p2p || pycoll_comm_create(&comm, p2p, NULL, error, sizeof error) != PYCOLL_OK) {
        printf("rank %d: %s\n", rank, error);
        return 1;
    }
    float x[N], y[N], gathered[2 * N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(rank + 1) * (float)i;
    bad_calls(comm, x, y);

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
    CHECK(st == PYCOLL_OK && work, "start all_gather: %s", pycoll_comm_error(comm));
    if (work) {
        while (!pycoll_work_wait(work, 1.0)) {
        }
        CHECK(pycoll_work_status(work) == PYCOLL_OK, "all_gather: %s", pycoll_work_error(work));
        pycoll_work_free(work);
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < N; i++)
                CHECK(gathered[r * N + i] == (float)(r + 1) * (float)i, "all_gather[%d][%d]", r, i);
    }

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
    st = pycoll_comm_finalize(comm, 5.0);
    CHECK(st == PYCOLL_OK, "finalize: %s", pycoll_comm_error(comm));
    pycoll_comm_destroy(comm);
    if (failures == 0)
        printf("rank %d ok\n", rank);
    return failures != 0;
}

int main(void)
{
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair) != 0) {
        perror("socketpair");
        return 1;
    }
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        close(pair[0]);
        const int code = rank_main(1, pair[1]);
        fflush(stdout); /* _exit does not flush */
        _exit(code);
    }
    close(pair[1]);
    int code = rank_main(0, pair[0]);
    fflush(stdout);
    int status = 0;
    waitpid(child, &status, 0);
    return code || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
