/* Surviving a lost rank from C: three processes (forked, joined by socket pairs, over the TCP transport)
 * all-reduce; a healthy pycoll_comm_agree leaves the communicator usable; rank 2 kills itself and the others
 * get PYCOLL_ERR_PEER_FAILURE naming it, shrink (pycoll_comm_shrink, pycoll_comm_failed_ranks) and all-reduce
 * over the survivors; then rank 0 revokes while rank 1 waits in an all-reduce (both get PYCOLL_ERR_REVOKED),
 * they shrink again and agree. Prints "rank R ok" and exits 0 on ranks 0 and 1, or prints what failed and exits
 * 1. Built and run by tests/communicator/test_c_fault_tolerance.py. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <pycoll/pycoll.h>

#include "check.h"

/* The sum of (rank in the first communicator + 1) over comm's members. */
static pycoll_status_t sum_ranks(pycoll_comm_t *comm, int first_rank, double *sum)
{
    *sum = first_rank + 1.0;
    return pycoll_comm_all_reduce(comm, sum, sum, 1, PYCOLL_FLOAT64, PYCOLL_SUM, PYCOLL_ALGO_AUTO,
                                  PYCOLL_ACCURACY_FAST);
}

static int rank_main(int rank, const int *fds)
{
    char error[512];
    pycoll_comm_t *comm = NULL, *small = NULL, *again = NULL;
    pycoll_comm_options_t options;
    pycoll_comm_options_init(&options);
    options.timeout_s = 10.0;
    pycoll_p2p_t *p2p = pycoll_tcp_transport_create(rank, 3, fds, error, sizeof error);
    if (!p2p || pycoll_comm_create(&comm, p2p, &options, error, sizeof error) != PYCOLL_OK) {
        printf("rank %d: %s\n", rank, error);
        return 1;
    }
    double sum = 0;
    CHECK(sum_ranks(comm, rank, &sum) == PYCOLL_OK && sum == 6.0, "rank %d: all_reduce gave %g", rank, sum);
    int64_t flag = 7 & ~(1 << rank);
    pycoll_status_t st = pycoll_comm_agree(comm, &flag, 0.0);
    CHECK(st == PYCOLL_OK && flag == 0, "rank %d: healthy agree: status %d flag %lld (%s)", rank, (int)st,
          (long long)flag, pycoll_comm_error(comm));
    CHECK(sum_ranks(comm, rank, &sum) == PYCOLL_OK && sum == 6.0, "rank %d: all_reduce after agree: %g (%s)", rank,
          sum, pycoll_comm_error(comm));
    if (rank == 2) { /* once the others wait for it in the next all-reduce */
        nanosleep(&(struct timespec){.tv_nsec = 300000000}, NULL);
        kill(getpid(), SIGKILL);
    }
    st = sum_ranks(comm, rank, &sum);
    CHECK(st == PYCOLL_ERR_PEER_FAILURE && pycoll_comm_failed_rank(comm) == 2,
          "rank %d: all_reduce with rank 2 dead: status %d, failed rank %d (%s)", rank, (int)st,
          (int)pycoll_comm_failed_rank(comm), pycoll_comm_error(comm));
    st = pycoll_comm_shrink(comm, NULL, 0, 0.0, &small);
    CHECK(st == PYCOLL_OK && small, "rank %d: shrink: status %d (%s)", rank, (int)st, pycoll_comm_error(comm));
    if (!small)
        return 1;
    int32_t failed[3] = {-1, -1, -1};
    CHECK(pycoll_comm_failed_ranks(comm, failed, 3) == 1 && failed[0] == 2, "rank %d: failed ranks %d", rank,
          (int)failed[0]);
    CHECK(pycoll_comm_size(small) == 2 && pycoll_comm_rank(small) == rank &&
              pycoll_comm_parent_rank(small, 1) == 1, "rank %d: the shrunk communicator's shape", rank);
    CHECK(sum_ranks(small, rank, &sum) == PYCOLL_OK && sum == 3.0, "rank %d: shrunk all_reduce gave %g (%s)", rank,
          sum, pycoll_comm_error(small));
    CHECK(sum_ranks(comm, rank, &sum) == PYCOLL_ERR_CLOSED, "rank %d: the old communicator still runs", rank);
    if (rank == 0) {
        nanosleep(&(struct timespec){.tv_nsec = 200000000}, NULL); /* rank 1 waits in its all-reduce by now */
        CHECK(pycoll_comm_revoke(small) == PYCOLL_OK, "rank 0: revoke");
    }
    st = sum_ranks(small, rank, &sum);
    CHECK(st == PYCOLL_ERR_REVOKED, "rank %d: all_reduce after a revoke: status %d (%s)", rank, (int)st,
          pycoll_comm_error(small));
    st = pycoll_comm_shrink(small, NULL, 0, 0.0, &again);
    CHECK(st == PYCOLL_OK && again, "rank %d: shrink after revoke: status %d (%s)", rank, (int)st,
          pycoll_comm_error(small));
    if (!again)
        return 1;
    CHECK(sum_ranks(again, rank, &sum) == PYCOLL_OK && sum == 3.0, "rank %d: all_reduce gave %g", rank, sum);
    flag = rank == 0 ? 5 : 6;
    CHECK(pycoll_comm_agree(again, &flag, 0.0) == PYCOLL_OK && flag == 4, "rank %d: agree gave %lld", rank,
          (long long)flag);
    pycoll_comm_destroy(again);
    pycoll_comm_destroy(small);
    pycoll_comm_destroy(comm);
    if (failures)
        return 1;
    printf("rank %d ok\n", rank);
    return 0;
}

/* Close every socket end that is not one of rank's own: a dead rank's connections must close with it. */
static void keep_own(int pairs[3][2], const int *own)
{
    for (int i = 0; i < 3; i++)
        for (int k = 0; k < 2; k++)
            if (pairs[i][k] != own[0] && pairs[i][k] != own[1] && pairs[i][k] != own[2])
                close(pairs[i][k]);
}

int main(void)
{
    int pairs[3][2]; /* 0-1, 0-2, 1-2 */
    for (int i = 0; i < 3; i++)
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, pairs[i]) != 0) {
            perror("socketpair");
            return 1;
        }
    const int fds[3][3] = {{-1, pairs[0][0], pairs[1][0]}, {pairs[0][1], -1, pairs[2][0]},
                           {pairs[1][1], pairs[2][1], -1}};
    pid_t children[2];
    for (int rank = 1; rank < 3; rank++) {
        fflush(stdout);
        children[rank - 1] = fork();
        if (children[rank - 1] < 0) {
            perror("fork");
            return 1;
        }
        if (children[rank - 1] == 0) {
            keep_own(pairs, fds[rank]);
            const int code = rank_main(rank, fds[rank]);
            fflush(stdout); /* _exit flushes nothing */
            _exit(code);
        }
    }
    keep_own(pairs, fds[0]);
    int code = rank_main(0, fds[0]);
    int status;
    waitpid(children[0], &status, 0);
    code |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    waitpid(children[1], &status, 0);
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) {
        printf("rank 2 did not end by its kill\n");
        code = 1;
    }
    return code;
}
